//! What `outboard run` prints: the plain-text rendering (the model's text on stdout, a one-line
//! summary per tool call on stderr, Claude-Code-like) and the `--json` lines (the headless schema
//! of `outboard_shared::headless`).
//!
//! A subagent's events (`parent` set: the `Task` call that runs it) go to stderr under a gutter
//! (`  │ `), its tool calls summarised like the main loop's and its messages cut to their first
//! lines; while several subagents run at once each line also names its `Task`. stdout stays the
//! main loop's words only.
//!
//! [`Printer`] is written against `io::Write` for both streams so tests capture exactly what a
//! terminal or a pipe would get. Every JSON line is flushed as it is written: a script reading the
//! pipe sees each event when it happens, not when a buffer fills.
//!
//! Text for a person (stdout in plain mode, stderr in both) goes through [`visible::Visible`]:
//! the control characters of the model's text, a tool's output or any other text the server
//! sends are written escaped, so none reaches the terminal as a command. The JSON lines are
//! JSON's own escaping.

use std::io::{self, Write};

use outboard_shared::headless::{Reconnected, RunFinished, RunStarted};
use outboard_shared::{EventKind, Role, SessionEvent, StopReason};
use serde_json::Value;

mod search;
pub mod visible;

pub use outboard_client::describe::*;
use visible::Visible;

/// Lines of a subagent's message printed (its first ones; the log has the whole text).
pub const CHILD_TEXT_LINES: usize = 3;

/// Characters of a `Task`'s description that label its subagent's lines while several run.
pub const TASK_LABEL_CHARS: usize = 24;

/// `Task` calls tracked as running, for the labels. The model starts a handful per message; a
/// call whose result never comes (the turn was cut) is dropped at the turn's end, and past this
/// many the oldest is forgotten (its lines then carry its call id).
pub const MAX_RUNNING_TASKS: usize = 64;

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Text for a person.
    Plain,
    /// One JSON object per line.
    Json,
}

/// Renders a run's events onto stdout and stderr.
pub struct Printer<O: Write, E: Write> {
    mode: Mode,
    /// stdout: escaped in plain mode.
    out: Visible<O>,
    /// stderr: escaped always (a person reads it in both modes).
    err: Visible<E>,
    /// Whether stdout ends mid-line (a newline is owed before anything else is shown).
    mid_line: bool,
    /// Whether deltas arrived since the last complete assistant message: when none did (a provider
    /// that does not stream), the complete message's text is printed instead.
    streamed: bool,
    /// The progress phase last shown, and whether its completion was.
    progress_phase: Option<String>,
    progress_done: bool,
    /// The `Task` calls running (call id, label), oldest first, at most [`MAX_RUNNING_TASKS`].
    tasks: Vec<(String, String)>,
}

impl<O: Write, E: Write> Printer<O, E> {
    /// A printer writing to `out` (stdout) and `err` (stderr).
    pub fn new(mode: Mode, out: O, err: E) -> Self {
        Printer {
            mode,
            out: Visible::new(out, mode == Mode::Plain),
            err: Visible::new(err, true),
            mid_line: false,
            streamed: false,
            progress_phase: None,
            progress_done: false,
            tasks: Vec::new(),
        }
    }

    /// The output format.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The first line of a `--json` run; nothing in plain mode.
    pub fn run_started(&mut self, started: &RunStarted) -> io::Result<()> {
        match self.mode {
            Mode::Json => self.json_line(started),
            Mode::Plain => Ok(()),
        }
    }

    /// One event of the run.
    pub fn event(&mut self, event: &SessionEvent) -> io::Result<()> {
        if let (EventKind::TurnFailed { error, .. }, None) = (&event.kind, &event.parent) {
            // In both modes: the one line that explains exit status 1.
            self.end_line()?;
            writeln!(self.err, "error: {error}")?;
        }
        if let (Mode::Plain, Some(lines)) =
            (self.mode, approval_lines(event.session_id.as_str(), &event.kind))
        {
            let prefix = match &event.parent {
                Some(parent) => self.child_prefix(parent),
                None => String::new(),
            };
            self.end_line()?;
            for line in lines {
                writeln!(self.err, "{prefix}{line}")?;
            }
            return self.err.flush();
        }
        match (self.mode, &event.parent) {
            (Mode::Json, _) => self.json_line(event),
            (Mode::Plain, Some(parent)) if event.kind.is_loop_event() => {
                self.child_event(parent, &event.kind)
            }
            (Mode::Plain, _) => self.plain_event(&event.kind),
        }
    }

    /// The `Task` calls being tracked as running, for tests.
    pub fn running_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// What starts a subagent's line: the gutter, and its `Task`'s label while others run too.
    fn child_prefix(&self, parent: &str) -> String {
        if self.tasks.len() <= 1 {
            return "  │ ".to_owned();
        }
        let label = self
            .tasks
            .iter()
            .find(|(id, _)| id == parent)
            .map_or(parent, |(_, label)| label.as_str());
        format!("  │ [{label}] ")
    }

    /// One event of a subagent, on stderr under its `Task` call.
    fn child_event(&mut self, parent: &str, kind: &EventKind) -> io::Result<()> {
        let prefix = self.child_prefix(parent);
        let lines = match kind {
            EventKind::AssistantMessage { text, .. } => {
                let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
                let mut lines: Vec<String> =
                    all.iter().take(CHILD_TEXT_LINES).map(|l| l.trim_end().to_owned()).collect();
                if all.len() > CHILD_TEXT_LINES {
                    lines.push("…".to_owned());
                }
                lines
            }
            EventKind::ToolCall { call, .. } => vec![format!("● {}", tool_call_summary(call))],
            EventKind::ToolResult { output, is_error, duration_ms, .. } => {
                vec![format!("  ⎿  {}", tool_result_summary(output, *is_error, *duration_ms))]
            }
            EventKind::ModelRetry { attempt, delay_ms, reason } => {
                vec![retry_line(*attempt, *delay_ms, reason).trim_start().to_owned()]
            }
            EventKind::Compaction { tokens_before, tokens_after, trigger, .. } => {
                vec![compaction_line(*trigger, *tokens_before, *tokens_after)]
            }
            // Its prompt is the call's input; its streamed text would interleave with the
            // others': the complete message is printed instead.
            _ => Vec::new(),
        };
        if lines.is_empty() {
            return Ok(());
        }
        self.end_line()?;
        for line in lines {
            writeln!(self.err, "{prefix}{line}")?;
        }
        self.err.flush()
    }

    /// The run reconnected mid-turn: a `reconnected` line for `--json`, one line on stderr for a
    /// person.
    pub fn reconnected(&mut self, line: &Reconnected) -> io::Result<()> {
        match self.mode {
            Mode::Json => self.json_line(line),
            Mode::Plain => {
                let watching = match line.role {
                    Role::Driver => "",
                    Role::Watcher => "; driving was taken back meanwhile, so only watching",
                };
                let attempts = match line.attempts {
                    1 => "1 attempt".to_owned(),
                    n => format!("{n} attempts"),
                };
                self.note(&format!(
                    "outboard: reconnected after {attempts} ({}); resuming after event {}{watching}",
                    line.reason, line.after_seq
                ))
            }
        }
    }

    /// Progress of the session's preparation: a `progress` line for `--json`; for a person, one
    /// line on stderr when a phase starts and when it completes.
    pub fn progress(&mut self, line: &outboard_shared::headless::Progress) -> io::Result<()> {
        match self.mode {
            Mode::Json => self.json_line(line),
            Mode::Plain => {
                let done = line.total.is_some_and(|t| line.done >= t);
                let first = self.progress_phase.as_deref() != Some(line.phase.as_str());
                if first || done && !self.progress_done {
                    self.progress_phase = Some(line.phase.clone());
                    self.progress_done = done;
                    return self.note(&line.message);
                }
                Ok(())
            }
        }
    }

    /// The plan the model proposed (`--plan`): a `plan` line for `--json`; for a person, the
    /// plan on stdout and where it is saved and how to answer it on stderr.
    pub fn plan(&mut self, line: &outboard_shared::headless::PlanProposed) -> io::Result<()> {
        match self.mode {
            Mode::Json => self.json_line(line),
            Mode::Plain => {
                self.end_line()?;
                writeln!(self.out, "{}", line.plan.trim_end())?;
                self.out.flush()?;
                self.note(&format!("● plan saved as {}", line.path))
            }
        }
    }

    /// The last line of a `--json` run; in plain mode, ends the text with a newline.
    pub fn run_finished(&mut self, finished: &RunFinished) -> io::Result<()> {
        match self.mode {
            Mode::Json => self.json_line(finished),
            Mode::Plain => self.end_line(),
        }
    }

    /// A one-line note for the person at the terminal (stderr in both modes).
    pub fn note(&mut self, text: &str) -> io::Result<()> {
        self.end_line()?;
        writeln!(self.err, "{text}")?;
        self.err.flush()
    }

    /// The writers back, for tests.
    pub fn into_inner(self) -> (O, E) {
        (self.out.into_inner(), self.err.into_inner())
    }

    fn json_line<T: serde::Serialize>(&mut self, value: &T) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }

    /// Ends a partial line of model text on stdout.
    fn end_line(&mut self) -> io::Result<()> {
        if self.mid_line {
            self.out.write_all(b"\n")?;
            self.out.flush()?;
            self.mid_line = false;
        }
        Ok(())
    }

    fn text(&mut self, text: &str) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        self.out.write_all(text.as_bytes())?;
        self.out.flush()?;
        self.mid_line = !text.ends_with('\n');
        Ok(())
    }

    fn plain_event(&mut self, kind: &EventKind) -> io::Result<()> {
        match kind {
            EventKind::AssistantDelta { text } => {
                self.streamed = true;
                self.text(text)
            }
            EventKind::AssistantMessage { text, searches, .. } => {
                if !self.streamed {
                    self.text(text)?;
                }
                self.streamed = false;
                search::print(self, searches)
            }
            EventKind::ToolCall { call, .. } => {
                self.end_line()?;
                let mut line = format!("● {}", tool_call_summary(call));
                if call.name == TASK_TOOL {
                    if let Some(kind) = call.input.get("subagent_type").and_then(Value::as_str) {
                        line.push_str(&format!(" · {kind}"));
                    }
                    let label = key_argument(TASK_TOOL, &call.input);
                    let label = if label.is_empty() { call.call_id.clone() } else { label };
                    if self.tasks.len() >= MAX_RUNNING_TASKS {
                        self.tasks.remove(0);
                    }
                    self.tasks.push((call.call_id.clone(), truncate(&label, TASK_LABEL_CHARS)));
                }
                writeln!(self.err, "{line}")?;
                self.err.flush()
            }
            EventKind::ToolResult { call_id, output, is_error, duration_ms, .. } => {
                self.tasks.retain(|(id, _)| id != call_id);
                self.end_line()?;
                writeln!(
                    self.err,
                    "  ⎿  {}",
                    tool_result_summary(output, *is_error, *duration_ms)
                )?;
                self.err.flush()
            }
            EventKind::ModelRetry { attempt, delay_ms, reason } => {
                self.end_line()?;
                writeln!(self.err, "{}", retry_line(*attempt, *delay_ms, reason))?;
                self.err.flush()
            }
            EventKind::TurnCompleted { stop_reason, .. } => {
                self.tasks.clear();
                let note = match stop_reason {
                    StopReason::EndTurn | StopReason::Unknown => return Ok(()),
                    StopReason::MaxTokens => "(stopped: the model hit its output token limit)",
                    StopReason::StepLimit => "(stopped: the turn hit its step limit)",
                    StopReason::Interrupted => "(interrupted)",
                };
                self.note(note)
            }
            EventKind::Network { host, port, policy, reason, hint, repeated } => {
                self.end_line()?;
                writeln!(
                    self.err,
                    "{}",
                    network_line(host, *port, policy, reason, hint, *repeated)
                )?;
                self.err.flush()
            }
            EventKind::Compaction { tokens_before, tokens_after, trigger, .. } => {
                self.end_line()?;
                writeln!(self.err, "{}", compaction_line(*trigger, *tokens_before, *tokens_after))?;
                self.err.flush()
            }
            EventKind::Todos { todos } => {
                self.end_line()?;
                for line in todo_lines(todos) {
                    writeln!(self.err, "{line}")?;
                }
                self.err.flush()
            }
            EventKind::BackgroundTask { shell_id, command, status, exit_code } => {
                self.end_line()?;
                writeln!(self.err, "{}", task_line(shell_id, command, *status, *exit_code))?;
                self.err.flush()
            }
            EventKind::TurnFailed { .. } => {
                self.tasks.clear();
                Ok(())
            }
            EventKind::TurnStarted { .. }
            | EventKind::CompactionStarted { .. }
            | EventKind::UserMessage { .. }
            | EventKind::SystemReminder { .. }
            | EventKind::ToolOutputDelta { .. }
            | EventKind::Sandbox { .. }
            | EventKind::Presence { .. }
            | EventKind::DriveRequested { .. }
            | EventKind::SessionTitled { .. }
            | EventKind::MemoryChanged { .. }
            | EventKind::ApprovalRequested { .. }
            | EventKind::ApprovalResolved { .. }
            | EventKind::Checkpoint { .. }
            | EventKind::Unknown => Ok(()),
            EventKind::Rewound { checkpoint, code, conversation, by, .. } => {
                self.end_line()?;
                writeln!(self.err, "● {}", rewound_line(*checkpoint, *code, *conversation, by))?;
                self.err.flush()
            }
            EventKind::OrgContext { files } => {
                self.end_line()?;
                writeln!(self.err, "● {}", org_context_line(files))?;
                self.err.flush()
            }
            EventKind::ModelChanged { model, label, by, .. } => {
                self.end_line()?;
                writeln!(self.err, "● model: {model} ({label}), by {by}")?;
                self.err.flush()
            }
            EventKind::ModeChanged { mode, by } => {
                self.end_line()?;
                writeln!(self.err, "● mode: {}, by {by}", mode.as_str())?;
                self.err.flush()
            }
        }
    }
}

#[cfg(test)]
mod tests;
