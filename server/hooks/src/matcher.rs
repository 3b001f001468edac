//! A hook's `matcher`, tested against a tool name: empty or `*` matches everything; a plain
//! name (letters, digits, `_`, `-`) matches exactly that name; `mcp__*`-style globs (a `*` after
//! a name character) match by prefix, as people write them; anything else is a regular
//! expression that must match the whole name (`Edit|Write`, `Notebook.*`, `mcp__memory__.*`).
//! Case-sensitive, as in Claude Code.

/// The longest matcher read (a regular expression beyond it is refused).
pub const MAX_MATCHER_BYTES: usize = 1024;

/// A compiled matcher.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Every name.
    All,
    /// Exactly this name.
    Exact(String),
    /// Names starting with this (`mcp__*`).
    Prefix(String),
    /// Names the expression matches whole.
    Regex(regex::Regex),
}

fn plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl Matcher {
    /// Compiles `text`; the reason when it is not a matcher.
    pub fn parse(text: &str) -> Result<Matcher, String> {
        let text = text.trim();
        if text.len() > MAX_MATCHER_BYTES {
            return Err(format!("the matcher is longer than {MAX_MATCHER_BYTES} bytes"));
        }
        if text.is_empty() || text == "*" {
            return Ok(Matcher::All);
        }
        if text.chars().all(plain) {
            return Ok(Matcher::Exact(text.to_owned()));
        }
        if let Some(stem) = text.strip_suffix('*') {
            if !stem.is_empty() && stem.chars().all(plain) {
                return Ok(Matcher::Prefix(stem.to_owned()));
            }
        }
        regex::RegexBuilder::new(&format!("^(?:{text})$"))
            .size_limit(1 << 20)
            .build()
            .map(Matcher::Regex)
            .map_err(|e| format!("the matcher {text:?} is not a regular expression: {e}"))
    }

    /// Whether `name` is matched.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Matcher::All => true,
            Matcher::Exact(n) => n == name,
            Matcher::Prefix(p) => name.starts_with(p.as_str()),
            Matcher::Regex(r) => r.is_match(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_matches_as_claude_code_documents() {
        let m = |t: &str, n: &str| Matcher::parse(t).unwrap().matches(n);
        assert!(m("", "Bash") && m("*", "mcp__x__y"));
        assert!(m("Bash", "Bash") && !m("Bash", "BashOutput") && !m("bash", "Bash"));
        assert!(m("Edit|Write", "Write") && !m("Edit|Write", "NotebookEdit"));
        assert!(m("Notebook.*", "NotebookEdit"));
        assert!(m("mcp__*", "mcp__github__search") && !m("mcp__*", "Bash"));
        assert!(m("mcp__memory__.*", "mcp__memory__read") && !m("mcp__memory__.*", "mcp__x"));
        assert!(Matcher::parse("(").is_err());
        assert!(Matcher::parse(&"a|".repeat(600)).is_err());
    }
}
