//! A transcript cell: what it holds ([`CellKind`]) and its lines on the screen at a width.

use ratatui::text::{Line, Span};

use crate::format::format_ms;
use crate::state::ToolCell;
use crate::theme::Theme;
use crate::{diff, markdown, tool_view, wrap};

/// Tool output lines shown in a cell (the tail); the full output is in the log.
pub const TOOL_OUTPUT_LINES: usize = 8;

/// What a transcript cell holds.
#[derive(Debug, Clone, PartialEq)]
pub enum CellKind {
    /// A user's message.
    User {
        /// Who sent it.
        by: String,
        /// The text.
        text: String,
    },
    /// A complete assistant message.
    Assistant(String),
    /// The model's reasoning before a message (Anthropic thinking, OpenAI reasoning summaries):
    /// one folded line, shown whole with Ctrl-O.
    Thinking(String),
    /// A tool call.
    Tool(ToolCell),
    /// A `Task` call: its subagent's events as one collapsible group.
    Task(crate::subagents::TaskCell),
    /// A plan proposed for approval (`ExitPlanMode`): its file and its text, rendered as
    /// markdown, once.
    Plan {
        /// The org file it is saved as.
        path: Option<String>,
        /// The plan.
        plan: String,
    },
    /// A line from the harness or the client (turn ended, failed, retry, drive request).
    Notice {
        /// The text.
        text: String,
        /// Drawn as an error.
        error: bool,
    },
}

pub(crate) fn render_cell(
    kind: &CellKind,
    expand: bool,
    width: usize,
    theme: &Theme,
) -> Vec<Line<'static>> {
    let indent = [Span::raw("  ")];
    match kind {
        CellKind::User { by, text } => {
            let mut out = Vec::new();
            for (i, l) in text.lines().enumerate() {
                let mut spans =
                    vec![Span::styled(if i == 0 { "› " } else { "  " }, theme.accent())];
                spans.push(Span::styled(l.to_owned(), theme.bold()));
                out.extend(wrap::wrap_line(&Line::from(spans), width, &indent));
            }
            if !by.is_empty() {
                if let Some(first) = out.first_mut() {
                    first.spans.push(Span::styled(format!("  — {by}"), theme.dim()));
                }
            }
            out
        }
        CellKind::Assistant(text) => markdown::render(text, width, theme),
        CellKind::Thinking(text) if expand && !text.is_empty() => {
            let mut out = vec![Line::from(Span::styled("✻ Thinking", theme.dim()))];
            for l in text.lines() {
                out.extend(wrap::wrap_line(
                    &Line::from(Span::styled(l.to_owned(), theme.dim())),
                    width,
                    &indent,
                ));
            }
            out
        }
        CellKind::Thinking(text) => {
            let words = text.split_whitespace().count();
            let what = match words {
                0 => "✻ Thought (hidden by the provider)".to_owned(),
                n => format!("✻ Thought for {n} words (Ctrl-O shows it)"),
            };
            vec![Line::from(Span::styled(what, theme.dim()))]
        }
        CellKind::Notice { text, error } => {
            let style = if *error { theme.warn() } else { theme.dim() };
            text.lines()
                .flat_map(|l| {
                    wrap::wrap_line(
                        &Line::from(Span::styled(format!("· {l}"), style)),
                        width,
                        &indent,
                    )
                })
                .collect()
        }
        CellKind::Tool(t) => tool_lines(t, expand, width, theme),
        CellKind::Plan { path, plan } => {
            let saved = path.as_deref().map(|p| format!(" · saved as {p}")).unwrap_or_default();
            let mut out = vec![Line::from(vec![
                Span::styled("◆ Plan".to_owned(), theme.bold()),
                Span::styled(saved, theme.dim()),
            ])];
            for l in markdown::render(plan.trim(), width.saturating_sub(2).max(10), theme) {
                let mut spans = indent.to_vec();
                spans.extend(l.spans);
                out.push(Line::from(spans));
            }
            out
        }
        CellKind::Task(t) => super::subagents::lines(t, expand, width, theme),
    }
}

fn tool_lines(t: &ToolCell, expand: bool, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    let (mark, mark_style) = match &t.result {
        None => ("⋯", theme.warn()),
        Some((false, _, _)) => ("✓", theme.ok()),
        Some((true, _, _)) => ("✗", theme.error()),
    };
    let header = Line::from(vec![
        Span::styled(format!("{mark} "), mark_style),
        Span::styled(tool_view::header(t, expand), theme.bold()),
    ]);
    let gutter = [Span::styled("  │ ", theme.dim())];
    let mut out = wrap::wrap_line(&header, width, &gutter);
    let own = tool_view::own_body(t, width, theme)
        .or_else(|| tool_view::result_is_the_models(&t.name).then(Vec::new));
    if expand && own.is_none() {
        for l in tool_view::whole_input(t) {
            let line = Line::from(vec![gutter[0].clone(), Span::styled(l, theme.dim())]);
            out.extend(wrap::wrap_line(&line, width, &gutter));
        }
    }
    if let Some(own) = own {
        for l in own {
            let mut spans = gutter.to_vec();
            spans.extend(l.spans);
            out.extend(wrap::wrap_line(&Line::from(spans), width, &gutter));
        }
        let failed = match &t.result {
            Some((true, output, _)) if tool_view::own_status(&t.name, true).is_none() => {
                Some(output.as_str())
            }
            _ => None,
        };
        let status = match &t.result {
            None if t.name == "ExitPlanMode" => "waiting for approval".to_owned(),
            None => "running…".to_owned(),
            Some((is_error, _, ms)) => format!(
                "{} · {}",
                tool_view::own_status(&t.name, *is_error).unwrap_or("error"),
                format_ms(*ms)
            ),
        };
        if let Some(why) = failed {
            let line =
                Line::from(vec![gutter[0].clone(), Span::styled(why.to_owned(), theme.error())]);
            out.extend(wrap::wrap_line(&line, width, &gutter));
        }
        out.push(Line::from(Span::styled(format!("  └ {status}"), theme.dim())));
        return out;
    }
    let diff = match &t.result {
        None => diff::diff_lines(&t.name, &t.input, None, theme),
        Some((false, output, _)) => diff::diff_lines(&t.name, &t.input, Some(output), theme),
        Some((true, _, _)) => None,
    };
    let body: String = match (&t.result, &diff) {
        (_, Some(_)) => String::new(),
        (None, None) => t.output.clone(),
        (Some((_, result, _)), None) => {
            if t.name == "Bash" || *result != "(no output)" {
                result.clone()
            } else {
                String::new()
            }
        }
    };
    let mut body_lines: Vec<Line<'static>> = diff.unwrap_or_default();
    if !body.is_empty() && !matches!(t.name.as_str(), "Read") {
        let all: Vec<&str> = body.trim_end_matches('\n').lines().collect();
        let skip = all.len().saturating_sub(TOOL_OUTPUT_LINES);
        if skip > 0 {
            body_lines.push(Line::from(Span::styled(format!("… {skip} lines above"), theme.dim())));
        }
        body_lines.extend(all[skip..].iter().map(|l| Line::from((*l).to_owned())));
    }
    for l in body_lines {
        let mut spans = gutter.to_vec();
        spans.extend(l.spans);
        out.extend(wrap::wrap_line(&Line::from(spans), width, &gutter));
    }
    let footer = match &t.result {
        None => Span::styled("  └ running…", theme.warn()),
        Some((is_error, output, ms)) => {
            let status = if t.name == "Bash" {
                if *is_error {
                    output
                        .lines()
                        .rev()
                        .find_map(|l| {
                            l.trim().strip_prefix("Exit code ").map(|c| format!("exit {c}"))
                        })
                        .unwrap_or_else(|| "failed".into())
                } else {
                    "exit 0".into()
                }
            } else if *is_error {
                "error".into()
            } else {
                "done".into()
            };
            let style = if *is_error { theme.error() } else { theme.dim() };
            Span::styled(format!("  └ {status} · {}", format_ms(*ms)), style)
        }
    };
    out.push(Line::from(footer));
    out
}
