//! `Edit` and `Write` tool calls drawn as a coloured diff, from the call's own input: an `Edit`
//! is the line diff of `old_string` → `new_string` with [`CONTEXT_LINES`] of unchanged lines
//! around each change (longer unchanged runs are folded to a `⋮` row), widened to whole lines once
//! the result shows the edited lines (a replacement within a line is drawn as that line, before
//! and after); a `Write` shows the new content as added lines (the client never sees the previous
//! file). Long diffs are cut with a count.
//!
//! Line numbers are the file's own, never guessed: an `Edit`'s result says where its one
//! replacement landed ("… has been updated at line N"), and its `cat -n` snippet of the edited
//! file gives the line on either side of a change that starts or ends the strings. Before the
//! result (the call running), for a `replace_all` of several places, or for a result from a
//! server that does not say, the diff is drawn without numbers. A `Write` is the whole file, so
//! its lines are numbered from 1.

use std::collections::HashMap;

use ratatui::text::{Line, Span};
use serde_json::Value;
use similar::{ChangeTag, TextDiff};

use super::theme::Theme;

/// At most this many diff lines per cell; the rest is summarised.
pub const MAX_DIFF_LINES: usize = 40;

/// Unchanged lines kept on each side of a change (as `git diff -U1`): enough to see where the
/// change sits, few enough that a one-line fix in a long `old_string` stays a few rows.
pub const CONTEXT_LINES: usize = 1;

/// One row of the diff: its kind, its old and new line numbers when known, and its text.
struct Row {
    tag: ChangeTag,
    old: Option<usize>,
    new: Option<usize>,
    text: String,
}

/// The line an `Edit` result says its replacement starts on.
fn edit_line(result: &str) -> Option<usize> {
    if result.starts_with("File created successfully") {
        return Some(1);
    }
    let first = result.lines().next()?;
    let (_, rest) = first.split_once(" has been updated at line ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().filter(|n| *n > 0)
}

/// The numbered lines of a result's `cat -n` snippet (`{:>6}\t{line}`).
fn snippet(result: &str) -> HashMap<usize, &str> {
    result
        .lines()
        .skip(1)
        .filter_map(|l| {
            let (n, text) = l.split_once('\t')?;
            Some((n.trim_start().parse().ok()?, text))
        })
        .collect()
}

/// `old` and `new` widened to the whole lines of the file they sit in (as a diff shows them,
/// not the replaced part of a line), from the edited file's lines in `file`: the text before the
/// replacement on its first line (`start`) and after it on its last. `None` when the snippet
/// cannot say (an empty `new_string` within a line has no place in it). A `new_string` found
/// twice on its one line is taken at its first place.
fn whole_lines(
    old: &str,
    new: &str,
    start: usize,
    file: &HashMap<usize, &str>,
) -> Option<(String, String)> {
    let pieces: Vec<&str> = new.split('\n').collect();
    let first = *file.get(&start)?;
    let (prefix, suffix) = match pieces[..] {
        [""] if old.ends_with('\n') => ("", ""),
        [""] => return None,
        [one] => {
            let at = first.find(one)?;
            (&first[..at], &first[at + one.len()..])
        }
        [head, .., ""] => (first.strip_suffix(head)?, ""),
        [head, .., tail] => {
            let last = file.get(&(start + pieces.len() - 1))?;
            (first.strip_suffix(head)?, last.strip_prefix(tail)?)
        }
        [] => return None,
    };
    Some((format!("{prefix}{old}{suffix}"), format!("{prefix}{new}{suffix}")))
}

/// The rows of an `Edit`: every change with [`CONTEXT_LINES`] around it, numbered from `start`
/// when known, with the file's neighbouring lines (from `file`) where a change is at an end.
fn edit_rows(old: &str, new: &str, start: Option<usize>, file: &HashMap<usize, &str>) -> Vec<Row> {
    let diff = TextDiff::from_lines(old, new);
    let mut rows: Vec<Row> = diff
        .iter_all_changes()
        .map(|c| Row {
            tag: c.tag(),
            old: start.and_then(|s| c.old_index().map(|i| s + i)),
            new: start.and_then(|s| c.new_index().map(|i| s + i)),
            text: c.value().trim_end_matches('\n').to_owned(),
        })
        .collect();
    if let Some(s) = start {
        // Lines the strings span in the old and the new file.
        let olds = rows.iter().filter(|r| r.tag != ChangeTag::Insert).count();
        let news = rows.iter().filter(|r| r.tag != ChangeTag::Delete).count();
        let around = |old: usize, new: usize| {
            file.get(&new).map(|text| Row {
                tag: ChangeTag::Equal,
                old: Some(old),
                new: Some(new),
                text: (*text).to_owned(),
            })
        };
        if rows.last().is_some_and(|r| r.tag != ChangeTag::Equal) {
            if let Some(row) = around(s + olds, s + news) {
                rows.push(row);
            }
        }
        if rows.first().is_some_and(|r| r.tag != ChangeTag::Equal) && s > 1 {
            if let Some(row) = around(s - 1, s - 1) {
                rows.insert(0, row);
            }
        }
    }
    // Keep the changes and the unchanged lines within CONTEXT_LINES of one; fold the rest.
    let changed: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.tag != ChangeTag::Equal)
        .map(|(i, _)| i)
        .collect();
    let near = |i: usize| changed.iter().any(|&c| c.abs_diff(i) <= CONTEXT_LINES);
    let mut out = Vec::new();
    let mut folded = false;
    for (i, row) in rows.into_iter().enumerate() {
        if row.tag != ChangeTag::Equal || near(i) {
            out.push(row);
            folded = false;
        } else if !folded && !out.is_empty() {
            out.push(Row { tag: ChangeTag::Equal, old: None, new: None, text: "⋮".into() });
            folded = true;
        }
    }
    if out.last().is_some_and(|r| r.old.is_none() && r.new.is_none() && r.text == "⋮") {
        out.pop();
    }
    out
}

/// The diff lines of an `Edit`/`Write` call (`result`: the call's successful result text, once
/// there is one), or `None` for other tools or malformed input.
pub fn diff_lines(
    name: &str,
    input: &Value,
    result: Option<&str>,
    theme: &Theme,
) -> Option<Vec<Line<'static>>> {
    let field = |k: &str| input.get(k).and_then(Value::as_str);
    let rows: Vec<Row> = match name {
        "Edit" => {
            let (old, new) = (field("old_string")?, field("new_string")?);
            let start = result.and_then(edit_line);
            let file = result.map(snippet).unwrap_or_default();
            match start.and_then(|s| whole_lines(old, new, s, &file)) {
                Some((old, new)) => edit_rows(&old, &new, start, &file),
                // Parts of lines: numbered, but the file's lines are not theirs to neighbour.
                None => edit_rows(old, new, start, &HashMap::new()),
            }
        }
        "Write" => field("content")?
            .lines()
            .enumerate()
            .map(|(i, l)| Row {
                tag: ChangeTag::Insert,
                old: None,
                new: Some(i + 1),
                text: l.to_owned(),
            })
            .collect(),
        _ => return None,
    };
    let total = rows.len();
    let shown = &rows[..total.min(MAX_DIFF_LINES)];
    // Gutters as wide as the largest number shown; none when no row has a number.
    let digits = |f: fn(&Row) -> Option<usize>| {
        shown.iter().filter_map(f).max().map_or(0, |n| n.to_string().len())
    };
    let (old_w, new_w) = (digits(|r| r.old), digits(|r| r.new));
    let number = |n: Option<usize>, w: usize| match (n, w) {
        (_, 0) => String::new(),
        (Some(n), w) => format!("{n:>w$} "),
        (None, w) => " ".repeat(w + 1),
    };
    let mut lines: Vec<Line<'static>> = shown
        .iter()
        .map(|row| {
            let (sign, style) = match row.tag {
                ChangeTag::Delete => ("- ", theme.removed()),
                ChangeTag::Insert => ("+ ", theme.added()),
                ChangeTag::Equal => ("  ", theme.dim()),
            };
            let gutter = format!("{}{}", number(row.old, old_w), number(row.new, new_w));
            let mut spans = Vec::new();
            if !gutter.is_empty() {
                spans.push(Span::styled(gutter, theme.dim()));
            }
            spans.push(Span::styled(format!("{sign}{}", row.text), style));
            Line::from(spans)
        })
        .collect();
    if total > MAX_DIFF_LINES {
        lines.push(Line::from(Span::styled(
            format!("… {} more lines", total - MAX_DIFF_LINES),
            theme.dim(),
        )));
    }
    Some(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wrap::plain;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    const PLAIN: Theme = Theme { color: false };

    fn texts(name: &str, input: &Value, result: Option<&str>) -> Vec<String> {
        diff_lines(name, input, result, &PLAIN).unwrap_or_default().iter().map(plain).collect()
    }

    /// What the server's `Edit` answers for a replacement at `line` (its `cat -n` snippet of the
    /// edited file given as `(number, text)`).
    fn edited(line: usize, snippet: &[(usize, &str)]) -> String {
        let mut out = format!(
            "The file /workspace/a.rs has been updated at line {line}. Here's the result of \
             running `cat -n` on a snippet of the edited file:\n"
        );
        for (n, text) in snippet {
            out.push_str(&format!("{n:>6}\t{text}\n"));
        }
        out
    }

    #[test]
    fn a_running_edit_is_a_line_diff_without_numbers() {
        let input = json!({"file_path": "a.txt", "old_string": "one\ntwo\nthree", "new_string": "one\n2\nthree"});
        assert_eq!(texts("Edit", &input, None), ["  one", "- two", "+ 2", "  three"]);
        // An older server's answer names no line: still no numbers.
        assert_eq!(texts("Edit", &input, Some("ok")), ["  one", "- two", "+ 2", "  three"]);
        assert!(diff_lines("Bash", &json!({"command": "ls"}), None, &PLAIN).is_none());
    }

    #[test]
    fn a_finished_edit_is_numbered_with_the_files_lines() {
        let input = json!({"file_path": "a.rs", "old_string": "one\ntwo\nthree", "new_string": "one\n2\nthree"});
        let result = edited(9, &[(8, "zero"), (9, "one"), (10, "2"), (11, "three"), (12, "four")]);
        assert_eq!(
            texts("Edit", &input, Some(&result)),
            [" 9  9   one", "10    - two", "   10 + 2", "11 11   three"]
        );
    }

    #[test]
    fn unchanged_runs_fold_to_one_line_of_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nB\nc\nd\ne\nf\nG\nh\n";
        let input = json!({"file_path": "a.rs", "old_string": old, "new_string": new});
        let result = edited(20, &[]);
        assert_eq!(
            texts("Edit", &input, Some(&result)),
            [
                "20 20   a",
                "21    - b",
                "   21 + B",
                "22 22   c",
                "        ⋮",
                "25 25   f",
                "26    - g",
                "   26 + G",
                "27 27   h",
            ]
        );
    }

    #[test]
    fn a_change_at_an_end_of_the_strings_gets_the_files_neighbours() {
        // old_string is only the changed lines: the context comes from the result's snippet.
        let input = json!({"file_path": "a.rs", "old_string": "    self.seq\n", "new_string": "    self.seq.load(Acquire)\n    // done\n"});
        let result = edited(
            42,
            &[
                (41, "fn last_seq(&self) -> u64 {"),
                (42, "    self.seq.load(Acquire)"),
                (43, "    // done"),
                (44, "}"),
            ],
        );
        assert_eq!(
            texts("Edit", &input, Some(&result)),
            [
                "41 41   fn last_seq(&self) -> u64 {",
                "42    -     self.seq",
                "   42 +     self.seq.load(Acquire)",
                "   43 +     // done",
                "43 44   }",
            ]
        );
    }

    #[test]
    fn a_replacement_within_a_line_shows_the_whole_lines() {
        // The case: `- hi from outboard` / `+ hello, world` without the line around it.
        let input = json!({"file_path": "hello.py", "old_string": "hi from outboard", "new_string": "hello, world"});
        let result = edited(2, &[(1, "import sys"), (2, "print(\"hello, world\")"), (3, "")]);
        assert_eq!(
            texts("Edit", &input, Some(&result)),
            [
                "1 1   import sys",
                "2   - print(\"hi from outboard\")",
                "  2 + print(\"hello, world\")",
                "3 3   ",
            ]
        );
    }

    #[test]
    fn a_replacement_spanning_lines_mid_line_shows_the_whole_first_and_last_lines() {
        let input = json!({"file_path": "a.rs", "old_string": "b(1);\n    c(", "new_string": "b(2);\n    c("});
        let result =
            edited(5, &[(4, "fn f() {"), (5, "    a(); b(2);"), (6, "    c(3);"), (7, "}")]);
        assert_eq!(
            texts("Edit", &input, Some(&result)),
            ["4 4   fn f() {", "5   -     a(); b(1);", "  5 +     a(); b(2);", "6 6       c(3);"]
        );
        // A deletion within a line has no place in the edited line: the parts as they are.
        let gone = json!({"file_path": "a.rs", "old_string": " b(2);", "new_string": ""});
        let result = edited(5, &[(5, "    a();")]);
        assert_eq!(texts("Edit", &gone, Some(&result)), ["5 -  b(2);"]);
    }

    #[test]
    fn a_replace_all_of_several_places_is_not_numbered() {
        let input =
            json!({"file_path": "a.rs", "old_string": "x", "new_string": "y", "replace_all": true});
        let result = "The file /workspace/a.rs has been updated. All 3 occurrences of old_string \
                      were replaced. Here's the result of running `cat -n` on a snippet of the \
                      edited file:\n     1\ty\n";
        assert_eq!(texts("Edit", &input, Some(result)), ["- x", "+ y"]);
    }

    #[test]
    fn a_write_is_numbered_from_one_and_cut() {
        let content: String = (1..=MAX_DIFF_LINES + 5).map(|i| format!("l{i}\n")).collect();
        let lines = texts("Write", &json!({"file_path": "a", "content": content}), None);
        assert_eq!(lines.len(), MAX_DIFF_LINES + 1);
        assert_eq!(lines[0], " 1 + l1");
        assert_eq!(lines[MAX_DIFF_LINES - 1], format!("{MAX_DIFF_LINES} + l{MAX_DIFF_LINES}"));
        assert_eq!(lines[MAX_DIFF_LINES], "… 5 more lines");
    }
}
