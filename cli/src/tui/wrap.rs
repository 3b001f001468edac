//! Wrapping styled lines to a width. The transcript wraps its lines itself (instead of letting
//! `Paragraph` do it at draw time) so a cell's height is known when its content changes: scrolling
//! and the visible window are then simple arithmetic and a frame touches only the visible lines.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

/// Wraps `line` to `width` columns, breaking after the last space when one is on the line and
/// inside a word otherwise. Every produced line after the first starts with `indent` (its width
/// counts toward `width`). Styles are kept per character run.
pub fn wrap_line(line: &Line<'_>, width: usize, indent: &[Span<'static>]) -> Vec<Line<'static>> {
    let width = width.max(4);
    let indent_width: usize = indent.iter().map(|s| s.width()).sum();
    let mut out: Vec<Line<'static>> = Vec::new();
    // (char, style) runs of the current output line.
    let mut cur: Vec<(char, Style)> = Vec::new();
    let mut cur_width = 0usize;
    let mut last_space: Option<usize> = None;
    let mut first = true;
    let chars = line
        .spans
        .iter()
        .flat_map(|s| s.content.chars().map(move |c| (c, line.style.patch(s.style))));
    for (c, style) in chars {
        let c = if c == '\t' { ' ' } else { c };
        if c.is_control() {
            continue;
        }
        let w = c.width().unwrap_or(0);
        let limit = if first { width } else { width.saturating_sub(indent_width).max(1) };
        if cur_width + w > limit && !cur.is_empty() {
            let rest = match last_space {
                Some(i) if i + 1 < cur.len() => cur.split_off(i + 1),
                _ => Vec::new(),
            };
            out.push(finish(&cur, if first { &[] } else { indent }));
            first = false;
            cur = rest;
            cur_width = cur.iter().map(|(c, _)| c.width().unwrap_or(0)).sum();
            last_space = None;
        }
        if c == ' ' {
            last_space = Some(cur.len());
        }
        cur.push((c, style));
        cur_width += w;
    }
    out.push(finish(&cur, if first { &[] } else { indent }));
    out
}

fn finish(chars: &[(char, Style)], indent: &[Span<'static>]) -> Line<'static> {
    let mut spans: Vec<Span<'static>> = indent.to_vec();
    let mut run = String::new();
    let mut run_style: Option<Style> = None;
    for &(c, style) in chars {
        if run_style != Some(style) {
            if let Some(s) = run_style {
                spans.push(Span::styled(std::mem::take(&mut run), s));
            }
            run_style = Some(style);
        }
        run.push(c);
    }
    if let Some(s) = run_style {
        spans.push(Span::styled(run, s));
    }
    Line::from(spans)
}

/// The plain text of a line (tests and width checks).
pub fn plain(line: &Line<'_>) -> String {
    line.spans.iter().map(|s| s.content.as_ref()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn texts(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(plain).collect()
    }

    #[test]
    fn wraps_at_spaces_and_inside_long_words() {
        let line = Line::from("the quick brown fox jumps");
        assert_eq!(texts(&wrap_line(&line, 10, &[])), ["the quick ", "brown fox ", "jumps"]);
        let long = Line::from("abcdefghijkl");
        assert_eq!(texts(&wrap_line(&long, 5, &[])), ["abcde", "fghij", "kl"]);
        assert_eq!(texts(&wrap_line(&Line::from(""), 5, &[])), [""]);
    }

    #[test]
    fn continuation_lines_get_the_indent() {
        let line = Line::from("one two three four");
        let indent = [Span::raw("  ")];
        assert_eq!(texts(&wrap_line(&line, 9, &indent)), ["one two ", "  three ", "  four"]);
    }
}
