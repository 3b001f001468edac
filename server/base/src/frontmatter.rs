//! The `---` front matter of org files (skills' `SKILL.md`, agents' `/agents/NAME.md`): where
//! it ends, and its YAML read by a YAML parser (`serde-saphyr`), with what is wrong named by the
//! file's own line number.
//!
//! CONTRACT (used by `orgfs` for skills, `agent_types` for agents): [`split`], [`entries`],
//! [`Entry`], [`FrontMatterError`].
//!
//! Why a parser and not `key: value` lines: the files come from people and from other tools
//! (Claude Code's agents and skills), and they use what YAML allows: quoted and block scalars,
//! lists in both styles, comments, escapes. Errors stay one line (no rendered snippet): they go
//! to `agents/import`'s answer, the skills index and the TUI.

use std::collections::BTreeMap;

use serde_saphyr::Spanned;

/// What is wrong with a front matter, the message naming the file's line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontMatterError {
    /// The file does not start with a `---` line.
    #[error("line 1: the file does not start with a `---` front matter line")]
    NotOpened,
    /// No `---` line closes the block (within what was read, when `truncated`).
    #[error("the front matter that starts on line 1 has no closing `---` line")]
    NotClosed,
    /// The block is not YAML, or not a mapping of keys.
    #[error("line {line}: {message}")]
    Yaml {
        /// 1-based, in the file.
        line: u64,
        /// The parser's words, and the line's text when there is one.
        message: String,
    },
}

/// One value of the front matter, with the file line its value starts on (for a block scalar or
/// list, the line after its key).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// 1-based, in the file (0 when the parser could not tell).
    pub line: u64,
    /// The value as YAML read it (strings, numbers, booleans, null, lists, mappings).
    pub value: serde_json::Value,
}

/// The front matter of `text` (a leading BOM allowed) and the body after its closing line:
/// `(yaml, body)`. The YAML starts on the file's line 2.
pub fn split(text: &str) -> Result<(&str, &str), FrontMatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(FrontMatterError::NotOpened);
    }
    let start = first.len();
    let mut at = start;
    for line in lines {
        if line.trim_end() == "---" {
            return Ok((&text[start..at], &text[at + line.len()..]));
        }
        at += line.len();
    }
    Err(FrontMatterError::NotClosed)
}

/// The entries of front matter `yaml` (as [`split`] returns it): a mapping of keys to values.
/// An empty block has none; a key given twice is an error.
pub fn entries(yaml: &str) -> Result<BTreeMap<String, Entry>, FrontMatterError> {
    if yaml.trim().is_empty() {
        return Ok(BTreeMap::new());
    }
    let options = serde_saphyr::options! { with_snippet: false };
    let parsed: Option<BTreeMap<String, Spanned<serde_json::Value>>> =
        serde_saphyr::from_str_with_options(yaml, options).map_err(|e| yaml_error(yaml, &e))?;
    Ok(parsed
        .unwrap_or_default()
        .into_iter()
        .map(|(key, v)| {
            let line = file_line(v.referenced.line());
            (key, Entry { line, value: v.value })
        })
        .collect())
}

/// The file line of line `n` of the YAML (which starts after the opening `---`).
fn file_line(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        n + 1
    }
}

fn yaml_error(yaml: &str, e: &serde_saphyr::Error) -> FrontMatterError {
    let n = e.location().map_or(0, |l| l.line());
    let mut message = plain_message(e);
    let text = usize::try_from(n)
        .ok()
        .and_then(|n| yaml.lines().nth(n.saturating_sub(1)))
        .map(str::trim)
        .filter(|l| !l.is_empty());
    if let Some(text) = text {
        message.push_str(&format!(": {:?}", shorten(text)));
    }
    FrontMatterError::Yaml { line: file_line(n).max(2), message }
}

/// The parser's message without the position it appends (the file's line is said first).
fn plain_message(e: &serde_saphyr::Error) -> String {
    let text = e.to_string();
    let text = text.lines().next().unwrap_or("").trim();
    let cut = text.find(" at line ").map_or(text, |i| &text[..i]);
    // Advice about the parser's own options is not for the file's author.
    let cut = cut.find(", set DuplicateKeyPolicy").map_or(cut, |i| &cut[..i]);
    let cut = cut.trim_end_matches(['.', ',']);
    // The parser's words for a line that is not an entry, in the author's terms.
    if cut.starts_with("simple key expected") || cut == "expected mapping start" {
        return "expected `key: value`".to_owned();
    }
    cut.to_owned()
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Result<BTreeMap<String, Entry>, FrontMatterError> {
        entries(split(text)?.0)
    }

    #[test]
    fn splits_at_the_first_closing_line() {
        assert_eq!(split("---\na: 1\n---\nbody\n---\n"), Ok(("a: 1\n", "body\n---\n")));
        assert_eq!(split("\u{feff}---\r\na: 1\r\n---\r\n"), Ok(("a: 1\r\n", "")));
        assert_eq!(split("no front matter"), Err(FrontMatterError::NotOpened));
        assert_eq!(split("---\na: 1\n"), Err(FrontMatterError::NotClosed));
        assert_eq!(split(""), Err(FrontMatterError::NotOpened));
    }

    #[test]
    fn reads_what_yaml_allows_with_file_lines() {
        let m = parse(
            "---\n# a comment\nname: 'it''s'\ndescription: >\n  folded\n  text\n\
             tools:\n  - Read\n  - Grep # why\nflow: [a, \"b\\tc\"]\nn: 3\nempty:\n---\nbody",
        )
        .unwrap();
        assert_eq!(m["name"], Entry { line: 3, value: json!("it's") });
        assert_eq!(m["description"].value, json!("folded text\n"));
        // A block scalar's value starts on the line after its key.
        assert_eq!(m["description"].line, 5);
        assert_eq!(m["tools"].value, json!(["Read", "Grep"]));
        assert_eq!(m["flow"].value, json!(["a", "b\tc"]));
        assert_eq!(m["n"].value, json!(3));
        assert_eq!(m["empty"].value, json!(null));
        assert!(parse("---\n---\n").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_file_line() {
        let e = parse("---\nname: a\nthis is not yaml\ndescription: x\n---\n").unwrap_err();
        let msg = e.to_string();
        assert_eq!(msg, "line 3: expected `key: value`: \"this is not yaml\"");
        let e = parse("---\nname: a\nname: b\n---\n").unwrap_err().to_string();
        assert_eq!(e, "line 3: duplicate mapping key: name: \"name: b\"");
        let e = parse("---\nname: \"open\n---\n").unwrap_err().to_string();
        assert!(e.starts_with("line 2: ") && e.contains("unclosed quote"), "{e}");
        let e = parse("---\n- a list\n---\n").unwrap_err().to_string();
        assert!(e.starts_with("line 2: "), "{e}");
    }
}
