//! The model's markdown as styled, wrapped lines: headings, emphasis, inline code, lists (nested,
//! bulleted or numbered), block quotes, rules, tables (aligned columns, [`super::table`]) and
//! fenced code blocks with highlighting. It is run
//! again on the whole partial text on every delta of a streaming answer: pulldown-cmark reads an
//! unclosed fence as a code block to the end, so a half-streamed answer already renders right,
//! and a re-parse of a few kilobytes costs microseconds.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::highlight::highlight_block;
use super::table::{Cell, Table};
use super::theme::Theme;
use super::wrap::wrap_line;

struct Builder<'t> {
    theme: &'t Theme,
    width: usize,
    out: Vec<Line<'static>>,
    cur: Vec<Span<'static>>,
    styles: Vec<Style>,
    /// Per open list: the next number, or `None` for bullets.
    lists: Vec<Option<u64>>,
    quote: usize,
    code: Option<(String, String)>,
    /// The marker of an item whose first line has not been written yet.
    pending_marker: Option<String>,
    /// The table being read, drawn whole at its end (its columns' widths need every row).
    table: Option<Table>,
    /// The cells of the table's row being read.
    row: Vec<Cell>,
}

impl Builder<'_> {
    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or_default()
    }

    fn push_style(&mut self, f: impl FnOnce(Style) -> Style) {
        let s = f(self.style());
        self.styles.push(s);
    }

    fn prefix(&mut self, first: bool) -> Vec<Span<'static>> {
        let mut p = Vec::new();
        for _ in 0..self.quote {
            p.push(Span::styled("│ ", self.theme.dim()));
        }
        let depth = self.lists.len();
        if depth > 0 {
            let nest = "  ".repeat(depth - 1);
            let marker = if first { self.pending_marker.take() } else { None };
            match marker {
                Some(marker) => {
                    p.push(Span::raw(nest));
                    p.push(Span::styled(marker, self.theme.accent()));
                }
                None => p.push(Span::raw(format!("{nest}  "))),
            }
        }
        p
    }

    fn flush(&mut self) {
        if self.cur.is_empty() && self.pending_marker.is_none() {
            return;
        }
        let cur = std::mem::take(&mut self.cur);
        let mut spans = self.prefix(true);
        let indent = self.prefix(false);
        spans.extend(cur);
        self.out.extend(wrap_line(&Line::from(spans), self.width, &indent));
    }

    fn blank(&mut self) {
        if self.out.last().is_some_and(|l| !l.spans.is_empty()) {
            self.out.push(Line::default());
        }
    }

    fn text(&mut self, text: &str) {
        if let Some((_, buf)) = &mut self.code {
            buf.push_str(text);
            return;
        }
        let style = self.style();
        self.cur.push(Span::styled(text.to_owned(), style));
    }

    fn code_block(&mut self, lang: &str, body: &str) {
        let indent = self.prefix(false);
        let gutter = Span::styled("▎ ", self.theme.dim());
        for line in highlight_block(body, lang, self.theme) {
            let mut spans = indent.clone();
            spans.push(gutter.clone());
            spans.extend(line);
            let mut cont = indent.clone();
            cont.push(gutter.clone());
            self.out.extend(wrap_line(&Line::from(spans), self.width, &cont));
        }
    }
}

/// Renders `text` to lines at most `width` columns wide.
pub fn render(text: &str, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    let mut b = Builder {
        theme,
        width,
        out: Vec::new(),
        cur: Vec::new(),
        styles: Vec::new(),
        lists: Vec::new(),
        quote: 0,
        code: None,
        pending_marker: None,
        table: None,
        row: Vec::new(),
    };
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES;
    for event in Parser::new_ext(text, options) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Paragraph => {}
                Tag::Heading { level, .. } => {
                    b.blank();
                    let accent = theme.accent();
                    b.push_style(|_| match level {
                        HeadingLevel::H1 => accent.add_modifier(Modifier::UNDERLINED),
                        _ => accent,
                    });
                }
                Tag::BlockQuote(_) => {
                    b.flush();
                    b.quote += 1;
                }
                Tag::CodeBlock(kind) => {
                    b.flush();
                    let lang = match kind {
                        CodeBlockKind::Fenced(info) => {
                            info.split_whitespace().next().unwrap_or("").to_owned()
                        }
                        CodeBlockKind::Indented => String::new(),
                    };
                    b.code = Some((lang, String::new()));
                }
                Tag::List(start) => {
                    b.flush();
                    if b.lists.is_empty() {
                        b.blank();
                    }
                    b.lists.push(start);
                }
                Tag::Item => {
                    b.flush();
                    let marker = match b.lists.last_mut() {
                        Some(Some(n)) => {
                            let m = format!("{n}. ");
                            *n += 1;
                            m
                        }
                        _ => "• ".to_owned(),
                    };
                    b.pending_marker = Some(marker);
                }
                Tag::Table(aligns) => {
                    b.flush();
                    b.blank();
                    b.table = Some(Table { aligns, ..Table::default() });
                }
                Tag::TableCell => b.cur.clear(),
                Tag::Emphasis => b.push_style(|s| s.add_modifier(Modifier::ITALIC)),
                Tag::Strong => b.push_style(|s| s.add_modifier(Modifier::BOLD)),
                Tag::Strikethrough => b.push_style(|s| s.add_modifier(Modifier::CROSSED_OUT)),
                Tag::Link { .. } => b.push_style(|s| s.add_modifier(Modifier::UNDERLINED)),
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Paragraph => {
                    b.flush();
                    if b.lists.is_empty() {
                        b.out.push(Line::default());
                    }
                }
                TagEnd::Heading(_) => {
                    b.styles.pop();
                    b.flush();
                    b.out.push(Line::default());
                }
                TagEnd::BlockQuote(_) => {
                    b.flush();
                    b.quote = b.quote.saturating_sub(1);
                }
                TagEnd::CodeBlock => {
                    if let Some((lang, body)) = b.code.take() {
                        b.code_block(&lang, &body);
                    }
                    if b.lists.is_empty() {
                        b.out.push(Line::default());
                    }
                }
                TagEnd::List(_) => {
                    b.flush();
                    b.lists.pop();
                    if b.lists.is_empty() {
                        b.out.push(Line::default());
                    }
                }
                TagEnd::Item => b.flush(),
                TagEnd::TableCell => {
                    let cell = std::mem::take(&mut b.cur);
                    b.row.push(cell);
                }
                TagEnd::TableHead | TagEnd::TableRow => {
                    let row = std::mem::take(&mut b.row);
                    if let Some(table) = &mut b.table {
                        table.head += usize::from(tag == TagEnd::TableHead);
                        table.rows.push(row);
                    }
                }
                TagEnd::Table => {
                    if let Some(table) = b.table.take() {
                        let indent = b.prefix(false);
                        b.out.extend(table.render(width, &indent, theme));
                    }
                    if b.lists.is_empty() {
                        b.out.push(Line::default());
                    }
                }
                TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough | TagEnd::Link => {
                    b.styles.pop();
                }
                _ => {}
            },
            Event::Text(t) => b.text(&t),
            Event::Code(t) => {
                let style = theme.code();
                b.cur.push(Span::styled(t.to_string(), style));
            }
            Event::SoftBreak => b.text(" "),
            Event::HardBreak => b.flush(),
            Event::Rule => {
                b.flush();
                b.out.push(Line::from(Span::styled("─".repeat(width.min(40)), theme.dim())));
            }
            Event::Html(t) | Event::InlineHtml(t) => b.text(&t),
            _ => {}
        }
    }
    // A streaming answer may stop inside a code block or a paragraph.
    if let Some((lang, body)) = b.code.take() {
        b.code_block(&lang, &body);
    }
    b.flush();
    while b.out.last().is_some_and(|l| l.spans.is_empty()) {
        b.out.pop();
    }
    b.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wrap::plain;
    use pretty_assertions::assert_eq;
    use unicode_width::UnicodeWidthStr;

    fn texts(md: &str, width: usize) -> Vec<String> {
        render(md, width, &Theme { color: false }).iter().map(plain).collect()
    }

    #[test]
    fn blocks_render_as_lines() {
        let md = "# Title\n\nSome *text* and `code`.\n\n- one\n- two\n  1. a\n\n```rust\nfn x() {}\n```\n\n> quoted";
        assert_eq!(
            texts(md, 40),
            [
                "Title",
                "",
                "Some text and code.",
                "",
                "• one",
                "• two",
                "  1. a",
                "",
                "▎ fn x() {}",
                "",
                "│ quoted",
            ]
        );
    }

    #[test]
    fn an_unclosed_fence_still_renders_as_code() {
        assert_eq!(texts("Here:\n```sh\nls -la", 40), ["Here:", "", "▎ ls -la"]);
    }

    #[test]
    fn list_items_wrap_under_their_text() {
        assert_eq!(texts("- alpha beta gamma", 12), ["• alpha ", "  beta gamma"]);
    }

    #[test]
    fn a_table_is_aligned_columns_with_separators() {
        // The issue's table: its cells ran together as `filestatushello.pycreated`.
        let md = "Done:\n\n| file | status |\n|---|---|\n| hello.py | created |\n| README.md | `edited` |\n\nBye.";
        assert_eq!(
            texts(md, 80),
            [
                "Done:",
                "",
                "file      │ status ",
                "──────────┼────────",
                "hello.py  │ created",
                "README.md │ edited ",
                "",
                "Bye.",
            ]
        );
    }

    #[test]
    fn alignments_pad_on_the_side_the_delimiter_row_says() {
        let md = "| n | name | mid |\n|--:|:--|:-:|\n| 1 | a | x |\n| 100 | abc | xyz |";
        assert_eq!(
            texts(md, 80),
            ["  n │ name │ mid", "────┼──────┼────", "  1 │ a    │  x ", "100 │ abc  │ xyz"]
        );
    }

    #[test]
    fn a_wide_table_narrows_its_widest_column_and_cuts_its_cells() {
        let long = "a very long description that does not fit";
        let md = format!("| id | what |\n|---|---|\n| 7 | {long} |");
        let lines = texts(&md, 30);
        assert_eq!(
            lines,
            [
                "id │ what                     ",
                "───┼──────────────────────────",
                "7  │ a very long description …"
            ]
        );
        assert!(lines.iter().all(|l| l.width() <= 30), "{lines:?}");
        // Too many columns for even their narrowest: every line is cut at the edge.
        let many =
            format!("|{}\n|{}\n|{}", "head |".repeat(12), "---|".repeat(12), "cell |".repeat(12));
        let lines = texts(&many, 40);
        assert!(lines.iter().all(|l| l.width() <= 40 && l.ends_with('…')), "{lines:?}");
    }
}
