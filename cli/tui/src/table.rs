//! Markdown tables as aligned columns: the cells of a column padded to one width, columns parted
//! by `│`, the header underlined by a `─┼─` rule. A table wider than the transcript narrows its
//! widest columns first (down to [`MIN_COLUMN`]) and cuts their cells with `…`; one that still
//! does not fit (many columns) is cut at the right edge. Cells are never wrapped: a row stays one
//! line, so the columns stay readable.

use pulldown_cmark::Alignment;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_segmentation::UnicodeSegmentation;
use unicode_width::UnicodeWidthStr;

use super::theme::Theme;

/// A column is narrowed to no fewer columns than this (a few letters and the `…`).
pub const MIN_COLUMN: usize = 4;

/// Between two columns.
const SEPARATOR: &str = " │ ";

/// One cell: its styled runs.
pub type Cell = Vec<Span<'static>>;

/// A table being read: its rows of cells, how many of them are the header, the columns'
/// alignments.
#[derive(Default)]
pub struct Table {
    /// Every row, the header's first.
    pub rows: Vec<Vec<Cell>>,
    /// How many rows the header has (0 or 1).
    pub head: usize,
    /// Per column, from the delimiter row.
    pub aligns: Vec<Alignment>,
}

impl Table {
    /// The table as lines at most `width` columns wide, each starting with `indent`.
    pub fn render(
        &self,
        width: usize,
        indent: &[Span<'static>],
        theme: &Theme,
    ) -> Vec<Line<'static>> {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        if columns == 0 {
            return Vec::new();
        }
        let indent_width: usize = indent.iter().map(Span::width).sum();
        let room = width.saturating_sub(indent_width + (columns - 1) * SEPARATOR.width());
        let widths = fit(&self.natural_widths(columns), room);
        let mut out = Vec::new();
        for (i, row) in self.rows.iter().enumerate() {
            let header = i < self.head;
            let mut spans = indent.to_vec();
            for (c, &w) in widths.iter().enumerate() {
                if c > 0 {
                    spans.push(Span::styled(SEPARATOR, theme.dim()));
                }
                let cell = row.get(c).map_or(&[][..], Vec::as_slice);
                let align = self.aligns.get(c).copied().unwrap_or(Alignment::None);
                let style = if header { theme.bold() } else { Style::default() };
                spans.extend(padded(cell, w, align, style));
            }
            out.push(cut(spans, width));
            if header && i + 1 == self.head {
                let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
                let mut spans = indent.to_vec();
                spans.push(Span::styled(rule.join("─┼─"), theme.dim()));
                out.push(cut(spans, width));
            }
        }
        out
    }

    /// Each column's widest cell.
    fn natural_widths(&self, columns: usize) -> Vec<usize> {
        (0..columns)
            .map(|c| {
                let cells = self.rows.iter().filter_map(|row| row.get(c));
                cells.map(|cell| cell.iter().map(Span::width).sum()).max().unwrap_or(0)
            })
            .collect()
    }
}

/// Column widths within `room`: the natural ones when they fit, else the widest narrowed first,
/// none below [`MIN_COLUMN`] (or its natural width when smaller).
fn fit(natural: &[usize], room: usize) -> Vec<usize> {
    let mut widths = natural.to_vec();
    let mut over = widths.iter().sum::<usize>().saturating_sub(room);
    while over > 0 {
        let Some((i, &w)) = widths.iter().enumerate().max_by_key(|(_, w)| **w) else { break };
        if w <= MIN_COLUMN {
            break;
        }
        widths[i] -= 1;
        over -= 1;
    }
    widths
}

/// `cell` cut to `width` (with `…`) and padded to it as `align` says.
fn padded(
    cell: &[Span<'static>],
    width: usize,
    align: Alignment,
    style: Style,
) -> Vec<Span<'static>> {
    let styled: Vec<Span<'static>> =
        cell.iter().map(|s| Span::styled(s.content.clone(), style.patch(s.style))).collect();
    let Line { spans, .. } = cut(styled, width);
    let used: usize = spans.iter().map(Span::width).sum();
    let gap = width.saturating_sub(used);
    let (left, right) = match align {
        Alignment::Right => (gap, 0),
        Alignment::Center => (gap / 2, gap - gap / 2),
        Alignment::None | Alignment::Left => (0, gap),
    };
    let mut out = Vec::with_capacity(spans.len() + 2);
    if left > 0 {
        out.push(Span::raw(" ".repeat(left)));
    }
    out.extend(spans);
    if right > 0 {
        out.push(Span::raw(" ".repeat(right)));
    }
    out
}

/// `spans` cut to at most `width` columns (by grapheme, as drawn), the last one a `…` when
/// something was cut.
fn cut(spans: Vec<Span<'static>>, width: usize) -> Line<'static> {
    let total: usize = spans.iter().map(Span::width).sum();
    if total <= width {
        return Line::from(spans);
    }
    let mut out = Vec::new();
    let mut used = 0;
    let room = width.saturating_sub(1);
    'spans: for span in spans {
        let mut kept = String::new();
        for g in span.content.graphemes(true) {
            if used + g.width() > room {
                if !kept.is_empty() {
                    out.push(Span::styled(kept, span.style));
                }
                break 'spans;
            }
            used += g.width();
            kept.push_str(g);
        }
        out.push(Span::styled(kept, span.style));
    }
    if width > 0 {
        out.push(Span::raw("…"));
    }
    Line::from(out)
}
