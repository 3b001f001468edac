//! Subagents in the transcript. A `Task` call of the session's main loop is one cell, a
//! collapsible group: its header (`⋯ Task(description) · subagent type · status · counts`), the
//! subagent's events nested under a gutter, and the subagent's report (the `Task` call's
//! `tool_result`) as its result. Events carry the call as `parent`; the app's `App::apply`
//! routes them here, so a child's streamed text never reaches the main assistant text and
//! children that run at once (their events interleave in the log) each fill their own group.
//!
//! A running group shows its newest [`CHILD_ITEMS_SHOWN`] items with a `+N more` line; a finished
//! one folds to its header and the report's first line. Ctrl-O (the app's `expand_tasks`) shows
//! every group whole. Rendering a running group touches the shown items only, so a long child
//! costs a bounded render per event, like any other cell.

use outboard_shared::{EventKind, ToolCall};
use ratatui::text::{Line, Span};
use serde_json::Value;

use super::format::{compact, format_ms, tool_summary};
use super::state::ToolCell;
use super::theme::Theme;
use super::{markdown, wrap};

/// Child items a running group shows (its newest): enough to follow what the child does now, few
/// enough that several children running at once still fit a screen.
pub const CHILD_ITEMS_SHOWN: usize = 5;

/// Child items a running group shows when Ctrl-O shows everything: it is rendered again at each
/// of the child's events, so even then its cost stays bounded; a finished group (rendered once)
/// shows all.
pub const CHILD_ITEMS_EXPANDED: usize = 200;

/// Lines of one child message shown in a group (its first lines; the log has the whole text).
pub const CHILD_TEXT_LINES: usize = 3;

/// What the `Task` call asked for (from its input).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCall {
    /// The short label (`description`).
    pub description: String,
    /// `general-purpose` or an org agent's name.
    pub subagent_type: String,
    /// The prompt the child was given.
    pub prompt: String,
}

impl TaskCall {
    fn from_input(input: &Value) -> Self {
        let field = |k: &str| input.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        TaskCall {
            description: field("description"),
            subagent_type: field("subagent_type"),
            prompt: field("prompt"),
        }
    }
}

/// One thing a child did, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildItem {
    /// A complete message of the child.
    Text(String),
    /// A tool call of the child.
    Tool(ToolCell),
    /// A retry or a compaction of the child's conversation.
    Notice {
        /// The line.
        text: String,
        /// Drawn as an error.
        error: bool,
    },
}

/// A `Task` call and its subagent's events.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCell {
    /// The `Task` call's id (the `parent` of its child's events).
    pub call_id: String,
    /// The call's input; `None` while only child events are loaded (an attach page that begins
    /// mid-child: the call is on the older page, merged in when it arrives).
    pub call: Option<TaskCall>,
    /// What the child did.
    pub items: Vec<ChildItem>,
    /// The child's text streaming now.
    pub streaming: String,
    /// The child's tool calls so far.
    pub tool_uses: usize,
    /// The child's latest model call, prompt and answer (how big its context got), when the
    /// provider reported usage.
    pub tokens: Option<u64>,
    /// Once finished: error flag, the report, duration.
    pub result: Option<(bool, String, u64)>,
    /// The turn ended with no result for the call (interrupted or failed before it came).
    pub cut: bool,
}

/// How a group's header says it is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    /// The child is working.
    Running,
    /// It reported.
    Done,
    /// It failed (the result says why).
    Failed,
    /// It was interrupted.
    Interrupted,
}

impl TaskCell {
    /// A group for the call `call_id`, its input not known yet.
    pub fn new(call_id: String) -> Self {
        TaskCell {
            call_id,
            call: None,
            items: Vec::new(),
            streaming: String::new(),
            tool_uses: 0,
            tokens: None,
            result: None,
            cut: false,
        }
    }

    /// The group of a main-loop `Task` tool call.
    pub fn from_call(call: &ToolCall) -> Self {
        let mut cell = TaskCell::new(call.call_id.clone());
        cell.set_call(&call.input);
        cell
    }

    /// Records the call's input.
    pub fn set_call(&mut self, input: &Value) {
        self.call = Some(TaskCall::from_input(input));
    }

    /// What the header says.
    pub fn status(&self) -> TaskStatus {
        match &self.result {
            None if self.cut => TaskStatus::Interrupted,
            None => TaskStatus::Running,
            Some((false, _, _)) => TaskStatus::Done,
            // The loop reports an interrupted child as a failed call saying so.
            Some((true, output, _)) if output.to_lowercase().contains("interrupt") => {
                TaskStatus::Interrupted
            }
            Some((true, _, _)) => TaskStatus::Failed,
        }
    }

    /// Whether the child is still working.
    pub fn running(&self) -> bool {
        self.status() == TaskStatus::Running
    }

    /// Whether a child tool call has this id.
    pub fn has_tool(&self, call_id: &str) -> bool {
        self.items.iter().any(|i| matches!(i, ChildItem::Tool(c) if c.call_id == call_id))
    }

    /// A child tool call by id.
    pub fn tool_mut(&mut self, call_id: &str) -> Option<&mut ToolCell> {
        self.items.iter_mut().rev().find_map(|item| match item {
            ChildItem::Tool(t) if t.call_id == call_id => Some(t),
            _ => None,
        })
    }

    /// Applies one of the child's events (a kind [`EventKind::is_loop_event`]).
    pub fn apply(&mut self, kind: EventKind) {
        match kind {
            EventKind::UserMessage { text, .. } => {
                // The child's prompt: the call's input has it already, unless the call is on an
                // older page not loaded yet.
                if let Some(call) = &mut self.call {
                    if call.prompt.is_empty() {
                        call.prompt = text;
                    }
                }
            }
            EventKind::AssistantDelta { text } => self.streaming.push_str(&text),
            EventKind::AssistantMessage { text, usage, .. } => {
                self.streaming.clear();
                if let Some(usage) = usage {
                    self.tokens = Some(usage.input_tokens + usage.output_tokens);
                }
                if !text.trim().is_empty() {
                    self.items.push(ChildItem::Text(text));
                }
            }
            EventKind::ToolCall { call, .. } if !self.has_tool(&call.call_id) => {
                self.tool_uses += 1;
                self.items.push(ChildItem::Tool(ToolCell::started(call)));
            }
            EventKind::ToolOutputDelta { call_id, text, .. } => {
                if let Some(t) = self.tool_mut(&call_id) {
                    t.output.push_str(&text);
                }
            }
            EventKind::ToolResult { call_id, name, output, is_error, duration_ms, .. } => {
                let result = (is_error, output, duration_ms);
                match self.tool_mut(&call_id) {
                    Some(t) => t.result = Some(result),
                    // Its call is on an older page: counted when the pages merge.
                    None => self
                        .items
                        .push(ChildItem::Tool(ToolCell::from_result(call_id, name, result))),
                }
            }
            EventKind::ModelRetry { attempt, delay_ms, reason } => {
                self.streaming.clear();
                let text =
                    format!("model call failed ({reason}); attempt {attempt} in {delay_ms} ms");
                self.items.push(ChildItem::Notice { text, error: true });
            }
            EventKind::CompactionStarted { .. } => {}
            EventKind::Compaction { tokens_before, tokens_after, trigger, .. } => {
                let text = outboard_client::describe::compaction_line(
                    trigger,
                    tokens_before,
                    tokens_after,
                );
                self.items.push(ChildItem::Notice { text, error: false });
            }
            _ => {}
        }
    }

    /// Takes in the same group as loaded from the newer page (this one is from the older page):
    /// its items follow this one's, and a child call split by the page boundary is one item.
    pub fn absorb(&mut self, newer: TaskCell) {
        if self.call.is_none() {
            self.call = newer.call;
        }
        for item in newer.items {
            match item {
                ChildItem::Tool(t) if t.input.is_null() => match self.tool_mut(&t.call_id) {
                    Some(older) => {
                        older.result = t.result;
                        if older.output.is_empty() {
                            older.output = t.output;
                        }
                    }
                    None => self.items.push(ChildItem::Tool(t)),
                },
                item => self.items.push(item),
            }
        }
        self.tool_uses += newer.tool_uses;
        self.tokens = newer.tokens.or(self.tokens);
        self.streaming = newer.streaming;
        self.result = newer.result;
        self.cut = newer.cut;
    }
}

/// The group's lines at `width`: whole when `expand` (Ctrl-O), else the newest items while it
/// runs and the header with the report's first line once it is done.
pub fn lines(t: &TaskCell, expand: bool, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    let gutter = [Span::styled("  │ ", theme.dim())];
    let mut out = wrap::wrap_line(&header(t, theme), width, &[Span::raw("    ")]);
    let status = t.status();
    let folded = !expand && status != TaskStatus::Running;
    if folded {
        if let Some(line) = summary(t, theme) {
            out.extend(wrap::wrap_line(&line, width, &[Span::raw("    ")]));
        }
        return out;
    }
    let inner = width.saturating_sub(4).max(10);
    let mut body: Vec<Line<'static>> = Vec::new();
    if expand {
        if let Some(call) = t.call.as_ref().filter(|c| !c.prompt.trim().is_empty()) {
            let first = outboard_client::describe::truncate(call.prompt.trim(), 200);
            let first = first.lines().next().unwrap_or_default().to_owned();
            body.push(Line::from(vec![
                Span::styled("› ", theme.accent()),
                Span::styled(first, theme.dim()),
            ]));
        }
    }
    // The report is the result; the child's last message is the same text.
    let report = t.result.as_ref().map(|r| r.1.as_str());
    let mut items: &[ChildItem] = &t.items;
    if let (Some(report), Some((ChildItem::Text(last), rest))) = (report, items.split_last()) {
        if last.trim() == report.trim() {
            items = rest;
        }
    }
    let shown = match (expand, status) {
        (false, _) => CHILD_ITEMS_SHOWN,
        (true, TaskStatus::Running) => CHILD_ITEMS_EXPANDED,
        (true, _) => items.len(),
    };
    let skip = items.len().saturating_sub(shown);
    if skip > 0 {
        let more = if expand {
            format!("… +{skip} more (all of them once it is done)")
        } else {
            format!("… +{skip} more (ctrl-o shows all)")
        };
        body.push(Line::from(Span::styled(more, theme.dim())));
    }
    for item in &items[skip..] {
        body.extend(item_lines(item, inner, theme));
    }
    if !t.streaming.is_empty() && status == TaskStatus::Running {
        body.extend(text_lines(&t.streaming, true, inner, theme));
    }
    for l in body {
        let mut spans = gutter.to_vec();
        spans.extend(l.spans);
        out.extend(wrap::wrap_line(&Line::from(spans), width, &gutter));
    }
    if let Some((is_error, report, _)) = &t.result {
        let first = [Span::styled("  └ ", if *is_error { theme.error() } else { theme.dim() })];
        let rest = [Span::raw("    ")];
        for (i, l) in markdown::render(report, inner, theme).into_iter().enumerate() {
            let mut spans = if i == 0 { first.to_vec() } else { rest.to_vec() };
            spans.extend(l.spans);
            out.extend(wrap::wrap_line(&Line::from(spans), width, &rest));
        }
    }
    out
}

fn header(t: &TaskCell, theme: &Theme) -> Line<'static> {
    let status = t.status();
    let (mark, style) = match status {
        TaskStatus::Running => ("⋯", theme.warn()),
        TaskStatus::Done => ("✓", theme.ok()),
        TaskStatus::Failed | TaskStatus::Interrupted => ("✗", theme.error()),
    };
    let (label, kind) = match &t.call {
        Some(c) => (c.description.clone(), c.subagent_type.clone()),
        None => (t.call_id.clone(), String::new()),
    };
    let mut spans = vec![
        Span::styled(format!("{mark} "), style),
        Span::styled("Task", theme.bold()),
        Span::raw("("),
        Span::styled(label, theme.code()),
        Span::raw(")"),
    ];
    if !kind.is_empty() {
        spans.push(Span::styled(format!(" · {kind}"), theme.dim()));
    }
    // Done goes without saying (the mark); the other states are words.
    let mut facts = match status {
        TaskStatus::Running => vec!["running".to_owned()],
        TaskStatus::Done => Vec::new(),
        TaskStatus::Failed => vec!["failed".to_owned()],
        TaskStatus::Interrupted => vec!["interrupted".to_owned()],
    };
    facts.push(match t.tool_uses {
        1 => "1 tool use".to_owned(),
        n => format!("{n} tool uses"),
    });
    if let Some(tokens) = t.tokens {
        facts.push(format!("{} tokens", compact(tokens)));
    }
    if let Some((_, _, ms)) = &t.result {
        facts.push(format_ms(*ms));
    }
    let facts_style = match status {
        TaskStatus::Running => theme.warn(),
        TaskStatus::Done => theme.dim(),
        TaskStatus::Failed | TaskStatus::Interrupted => theme.error(),
    };
    spans.push(Span::styled(format!(" · {}", facts.join(" · ")), facts_style));
    Line::from(spans)
}

/// A folded group's second line: the report's first line.
fn summary(t: &TaskCell, theme: &Theme) -> Option<Line<'static>> {
    let (is_error, text) = match &t.result {
        Some((is_error, output, _)) => (*is_error, output.as_str()),
        None => (true, "the turn ended before the subagent reported"),
    };
    let first = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let more = text.lines().filter(|l| !l.trim().is_empty()).count() > 1;
    let line = format!(
        "{}{}",
        outboard_client::describe::truncate(first, 160),
        if more { " …" } else { "" }
    );
    let style = if is_error { theme.error() } else { theme.dim() };
    Some(Line::from(vec![
        Span::styled("  └ ", style),
        Span::styled(line, style),
        Span::styled(" · ctrl-o expands", theme.dim()),
    ]))
}

fn item_lines(item: &ChildItem, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    match item {
        ChildItem::Text(text) => text_lines(text, false, width, theme),
        ChildItem::Notice { text, error } => {
            let style = if *error { theme.warn() } else { theme.dim() };
            vec![Line::from(Span::styled(format!("· {text}"), style))]
        }
        ChildItem::Tool(t) => {
            let (mark, style) = match &t.result {
                None => ("⋯", theme.warn()),
                Some((false, _, _)) => ("✓", theme.ok()),
                Some((true, _, _)) => ("✗", theme.error()),
            };
            let mut spans = vec![
                Span::styled(format!("{mark} "), style),
                Span::styled(t.name.clone(), theme.bold()),
                Span::raw(" "),
                Span::styled(
                    outboard_client::describe::truncate(&tool_summary(&t.name, &t.input), 120),
                    theme.code(),
                ),
            ];
            if let Some((is_error, output, ms)) = &t.result {
                let status = match (t.name.as_str(), is_error) {
                    ("Bash", false) => "exit 0".to_owned(),
                    ("Bash", true) => output
                        .lines()
                        .rev()
                        .find_map(|l| {
                            l.trim().strip_prefix("Exit code ").map(|c| format!("exit {c}"))
                        })
                        .unwrap_or_else(|| "failed".into()),
                    (_, true) => "error".into(),
                    (_, false) => "done".into(),
                };
                let style = if *is_error { theme.error() } else { theme.dim() };
                spans.push(Span::styled(format!(" · {status} · {}", format_ms(*ms)), style));
            }
            let mut out = vec![Line::from(spans)];
            // A running command: its newest output line says what it is doing.
            if t.result.is_none() {
                if let Some(last) = t.output.lines().rev().find(|l| !l.trim().is_empty()) {
                    let last = outboard_client::describe::truncate(last.trim(), 200);
                    out.push(Line::from(Span::styled(format!("  {last}"), theme.dim())));
                }
            }
            out
        }
    }
}

/// A child message's lines, at most [`CHILD_TEXT_LINES`]: its first ones, or its last while it
/// streams; a cut is marked with `…`.
fn text_lines(text: &str, from_end: bool, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    let n = CHILD_TEXT_LINES;
    let trimmed = text.trim_end_matches('\n');
    // Only the part shown is rendered: a long message costs no more than a short one.
    let (part, cut) = if from_end {
        match trimmed.rmatch_indices('\n').nth(n - 1) {
            Some((i, _)) => (&trimmed[i + 1..], true),
            None => (trimmed, false),
        }
    } else {
        match trimmed.match_indices('\n').nth(n - 1) {
            Some((i, _)) => (&trimmed[..i], true),
            None => (trimmed, false),
        }
    };
    let mut out = markdown::render(part, width, theme);
    let cut = cut || out.len() > n;
    if from_end {
        let drop = out.len().saturating_sub(n);
        out.drain(..drop);
    } else {
        out.truncate(n);
    }
    if cut {
        let mark = Line::from(Span::styled("…", theme.dim()));
        if from_end {
            out.insert(0, mark);
        } else {
            out.push(mark);
        }
    }
    out
}
