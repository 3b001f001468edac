//! Wrapping styled lines to a width. The transcript wraps its lines itself (instead of letting
//! `Paragraph` do it at draw time) so a cell's height is known when its content changes: scrolling
//! and the visible window are then simple arithmetic and a frame touches only the visible lines.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_segmentation::UnicodeSegmentation;
use unicode_width::UnicodeWidthStr;

/// Wraps `line` to `width` columns, breaking after the last space when one is on the line and
/// inside a word otherwise. The unit is the extended grapheme cluster, measured as ratatui draws
/// it: an emoji sequence, a flag or a letter with its accents is never cut, and a wide (CJK)
/// character counts two columns. Every produced line after the first starts with `indent` (its
/// width counts toward `width`). Styles are kept per run.
pub fn wrap_line(line: &Line<'_>, width: usize, indent: &[Span<'static>]) -> Vec<Line<'static>> {
    let width = width.max(4);
    let indent_width: usize = indent.iter().map(|s| s.width()).sum();
    let mut out: Vec<Line<'static>> = Vec::new();
    // (grapheme, style) runs of the current output line.
    let mut cur: Vec<(&str, Style)> = Vec::new();
    let mut cur_width = 0usize;
    let mut last_space: Option<usize> = None;
    let mut first = true;
    let graphemes = line.spans.iter().flat_map(|s| {
        let style = line.style.patch(s.style);
        s.content.graphemes(true).map(move |g| (g, style))
    });
    for (g, style) in graphemes {
        let g = if g == "\t" { " " } else { g };
        if g.chars().next().is_some_and(char::is_control) {
            continue;
        }
        let w = g.width();
        let limit = if first { width } else { width.saturating_sub(indent_width).max(1) };
        if cur_width + w > limit && !cur.is_empty() {
            let rest = match last_space {
                Some(i) if i + 1 < cur.len() => cur.split_off(i + 1),
                _ => Vec::new(),
            };
            out.push(finish(&cur, if first { &[] } else { indent }));
            first = false;
            cur = rest;
            cur_width = cur.iter().map(|(g, _)| g.width()).sum();
            last_space = None;
        }
        if g == " " {
            last_space = Some(cur.len());
        }
        cur.push((g, style));
        cur_width += w;
    }
    out.push(finish(&cur, if first { &[] } else { indent }));
    out
}

fn finish(graphemes: &[(&str, Style)], indent: &[Span<'static>]) -> Line<'static> {
    let mut spans: Vec<Span<'static>> = indent.to_vec();
    let mut run = String::new();
    let mut run_style: Option<Style> = None;
    for &(g, style) in graphemes {
        if run_style != Some(style) {
            if let Some(s) = run_style {
                spans.push(Span::styled(std::mem::take(&mut run), s));
            }
            run_style = Some(style);
        }
        run.push_str(g);
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

    /// Each produced line's text and its width as ratatui draws it.
    fn widths(lines: &[Line<'_>]) -> Vec<(String, usize)> {
        lines.iter().map(|l| (plain(l), l.width())).collect()
    }

    #[test]
    fn grapheme_clusters_are_never_split() {
        // A family (three emoji joined by ZWJ), a flag (two regional indicators), a thumb with a
        // skin tone: each one cluster two columns wide.
        for cluster in ["👨\u{200d}👩\u{200d}👧", "🇫🇷", "👍🏽"] {
            let line = Line::from(format!("abc{cluster}def"));
            assert_eq!(
                widths(&wrap_line(&line, 4, &[])),
                [("abc".to_owned(), 3), (format!("{cluster}de"), 4), ("f".to_owned(), 1)],
                "{cluster}"
            );
        }
        // `e` + combining acute stays one column with its accent.
        let line = Line::from("abce\u{301}fgh");
        assert_eq!(
            widths(&wrap_line(&line, 4, &[])),
            [("abce\u{301}".to_owned(), 4), ("fgh".to_owned(), 3)]
        );
        // A heart with the emoji presentation selector is two columns, not one.
        let line = Line::from("abc\u{2764}\u{fe0f}");
        assert_eq!(
            widths(&wrap_line(&line, 4, &[])),
            [("abc".to_owned(), 3), ("\u{2764}\u{fe0f}".to_owned(), 2)]
        );
    }

    #[test]
    fn wide_characters_count_two_columns_and_words_still_wrap() {
        let line = Line::from("日本語のテキスト");
        assert_eq!(
            widths(&wrap_line(&line, 5, &[])),
            [
                ("日本".to_owned(), 4),
                ("語の".to_owned(), 4),
                ("テキ".to_owned(), 4),
                ("スト".to_owned(), 4)
            ]
        );
        let line = Line::from("café naïve 🇫🇷 ok");
        assert_eq!(texts(&wrap_line(&line, 8, &[])), ["café ", "naïve ", "🇫🇷 ok"]);
    }

    #[test]
    fn continuation_lines_get_the_indent() {
        let line = Line::from("one two three four");
        let indent = [Span::raw("  ")];
        assert_eq!(texts(&wrap_line(&line, 9, &indent)), ["one two ", "  three ", "  four"]);
    }
}
