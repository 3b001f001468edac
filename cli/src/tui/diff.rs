//! `Edit` and `Write` tool calls drawn as a coloured diff, from the call's own input: an `Edit`
//! is the line diff of `old_string` → `new_string`; a `Write` shows the new content as added
//! lines (the client never sees the previous file). Long diffs are cut with a count.

use ratatui::text::{Line, Span};
use serde_json::Value;
use similar::{ChangeTag, TextDiff};

use super::theme::Theme;

/// At most this many diff lines per cell; the rest is summarised.
pub const MAX_DIFF_LINES: usize = 40;

/// The diff lines of an `Edit`/`Write` call, or `None` for other tools or malformed input.
pub fn diff_lines(name: &str, input: &Value, theme: &Theme) -> Option<Vec<Line<'static>>> {
    let field = |k: &str| input.get(k).and_then(Value::as_str);
    let changes: Vec<(ChangeTag, String)> = match name {
        "Edit" => {
            let (old, new) = (field("old_string")?, field("new_string")?);
            TextDiff::from_lines(old, new)
                .iter_all_changes()
                .map(|c| (c.tag(), c.value().trim_end_matches('\n').to_owned()))
                .collect()
        }
        "Write" => field("content")?.lines().map(|l| (ChangeTag::Insert, l.to_owned())).collect(),
        _ => return None,
    };
    let total = changes.len();
    let mut lines: Vec<Line<'static>> = changes
        .into_iter()
        .take(MAX_DIFF_LINES)
        .map(|(tag, text)| {
            let (sign, style) = match tag {
                ChangeTag::Delete => ("- ", theme.removed()),
                ChangeTag::Insert => ("+ ", theme.added()),
                ChangeTag::Equal => ("  ", theme.dim()),
            };
            Line::from(vec![Span::styled(format!("{sign}{text}"), style)])
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
    use crate::tui::wrap::plain;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn an_edit_is_a_line_diff() {
        let input = json!({"file_path": "a.txt", "old_string": "one\ntwo\nthree", "new_string": "one\n2\nthree"});
        let lines = diff_lines("Edit", &input, &Theme { color: false }).unwrap();
        let texts: Vec<String> = lines.iter().map(plain).collect();
        assert_eq!(texts, ["  one", "- two", "+ 2", "  three"]);
        assert!(diff_lines("Bash", &json!({"command": "ls"}), &Theme { color: false }).is_none());
    }
}
