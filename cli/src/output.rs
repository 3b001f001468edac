//! What `outboard run` prints: the plain-text rendering (the model's text on stdout, a one-line
//! summary per tool call on stderr, Claude-Code-like) and the `--json` lines (the headless schema
//! of `outboard_shared::headless`).
//!
//! [`Printer`] is written against `io::Write` for both streams so tests capture exactly what a
//! terminal or a pipe would get. Every JSON line is flushed as it is written: a script reading the
//! pipe sees each event when it happens, not when a buffer fills.

use std::io::{self, Write};

use outboard_shared::headless::{Reconnected, RunFinished, RunStarted};
use outboard_shared::{CompactionTrigger, EventKind, Role, SessionEvent, StopReason, ToolCall};
use serde_json::Value;

/// How many characters of a tool's key argument are shown.
pub const SUMMARY_CHARS: usize = 80;

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
    out: O,
    err: E,
    /// Whether stdout ends mid-line (a newline is owed before anything else is shown).
    mid_line: bool,
    /// Whether deltas arrived since the last complete assistant message: when none did (a provider
    /// that does not stream), the complete message's text is printed instead.
    streamed: bool,
    /// The progress phase last shown, and whether its completion was.
    progress_phase: Option<String>,
    progress_done: bool,
}

impl<O: Write, E: Write> Printer<O, E> {
    /// A printer writing to `out` (stdout) and `err` (stderr).
    pub fn new(mode: Mode, out: O, err: E) -> Self {
        Printer {
            mode,
            out,
            err,
            mid_line: false,
            streamed: false,
            progress_phase: None,
            progress_done: false,
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
        if let EventKind::TurnFailed { error, .. } = &event.kind {
            // In both modes: the one line that explains exit status 1.
            self.end_line()?;
            writeln!(self.err, "error: {error}")?;
        }
        match self.mode {
            Mode::Json => self.json_line(event),
            Mode::Plain => self.plain_event(&event.kind),
        }
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
        (self.out, self.err)
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
            EventKind::AssistantMessage { text, .. } => {
                if !self.streamed {
                    self.text(text)?;
                }
                self.streamed = false;
                Ok(())
            }
            EventKind::ToolCall { call, .. } => {
                self.end_line()?;
                writeln!(self.err, "● {}", tool_call_summary(call))?;
                self.err.flush()
            }
            EventKind::ToolResult { output, is_error, duration_ms, .. } => {
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
            EventKind::TurnStarted { .. }
            | EventKind::CompactionStarted { .. }
            | EventKind::UserMessage { .. }
            | EventKind::SystemReminder { .. }
            | EventKind::ToolOutputDelta { .. }
            | EventKind::TurnFailed { .. }
            | EventKind::Sandbox { .. }
            | EventKind::Presence { .. }
            | EventKind::DriveRequested { .. }
            | EventKind::MemoryChanged { .. }
            | EventKind::Unknown => Ok(()),
        }
    }
}

/// A compaction, for a person: what started it and how much smaller the conversation is.
pub fn compaction_line(trigger: CompactionTrigger, before: u64, after: u64) -> String {
    let why = match trigger {
        CompactionTrigger::Auto => "the context window was filling up",
        CompactionTrigger::Overflow => "the provider said the request was too long",
        CompactionTrigger::Manual => "as asked",
    };
    format!(
        "⟳ compacted the conversation ({why}): ~{} → ~{} tokens; the log keeps every message",
        thousands(before),
        thousands(after)
    )
}

/// `12,345`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The model's todo list, one line per item: `☒` done, `◐` in progress (its active form), `☐`
/// pending, under a `Todos 1/3` heading.
pub fn todo_lines(todos: &[outboard_shared::TodoItem]) -> Vec<String> {
    use outboard_shared::TodoStatus;
    let done = todos.iter().filter(|t| t.status == TodoStatus::Completed).count();
    let mut lines = vec![format!("Todos {done}/{}", todos.len())];
    for t in todos {
        lines.push(match t.status {
            TodoStatus::Completed => format!("  ☒ {}", t.content),
            TodoStatus::InProgress => format!("  ◐ {}", t.active_form),
            TodoStatus::Pending => format!("  ☐ {}", t.content),
        });
    }
    lines
}

/// A background command's state in one line: `⧗ bash_1f2e3d4c running: npm run dev`.
pub fn task_line(
    shell_id: &str,
    command: &str,
    status: outboard_shared::TaskStatus,
    exit_code: Option<i32>,
) -> String {
    use outboard_shared::TaskStatus;
    let state = match (status, exit_code) {
        (TaskStatus::Running, _) => "running".to_owned(),
        (TaskStatus::Completed, Some(code)) => format!("completed (exit {code})"),
        (TaskStatus::Completed, None) => "completed".to_owned(),
        (TaskStatus::Killed, _) => "killed".to_owned(),
        (TaskStatus::Lost, _) => "lost (the server restarted; not re-run)".to_owned(),
        (TaskStatus::Unknown, _) => "unknown".to_owned(),
    };
    format!("⧗ {shell_id} {state}: {}", truncate(command, SUMMARY_CHARS))
}

/// One refusal of the sandbox's network proxy, for a person: what was refused, by which policy,
/// why, and what would allow it.
pub fn network_line(
    host: &str,
    port: u16,
    policy: &str,
    reason: &str,
    hint: &str,
    repeated: u32,
) -> String {
    let target = match (host.is_empty(), host.contains(':')) {
        (true, _) => "a connection".to_owned(),
        (false, true) => format!("[{host}]:{port}"),
        (false, false) => format!("{host}:{port}"),
    };
    let again = match repeated {
        0 => String::new(),
        1 => " (and 1 more time)".to_owned(),
        n => format!(" (and {n} more times)"),
    };
    format!("⊘ network: {target} refused{again} by {policy}: {reason}; {hint}")
}

/// `Bash(ls -la)`: the tool's name and its key argument on one short line.
pub fn tool_call_summary(call: &ToolCall) -> String {
    format!("{}({})", call.name, truncate(&key_argument(&call.name, &call.input), SUMMARY_CHARS))
}

/// The argument that says what a call does: the command, the path, the pattern.
fn key_argument(tool: &str, input: &Value) -> String {
    let field = |name: &str| input.get(name).and_then(Value::as_str).map(str::to_owned);
    let with_path = |main: Option<String>| match (main, field("path")) {
        (Some(main), Some(path)) => format!("{main} in {path}"),
        (main, _) => main.unwrap_or_default(),
    };
    match (tool, input) {
        // Invalid JSON from the model arrives as a string: show what came.
        (_, Value::String(raw)) => first_line(raw),
        ("Bash", _) => field("command").map(|c| first_line(&c)).unwrap_or_default(),
        ("Read" | "Write" | "Edit" | "NotebookEdit", _) => {
            field("file_path").or_else(|| field("path")).unwrap_or_default()
        }
        ("Glob" | "Grep", _) => with_path(field("pattern")),
        ("TodoWrite", _) => match input.get("todos").and_then(Value::as_array) {
            Some(todos) if todos.len() == 1 => "1 todo".to_owned(),
            Some(todos) => format!("{} todos", todos.len()),
            None => String::new(),
        },
        // An unknown tool: its first string argument, else the arguments as JSON.
        (_, Value::Object(map)) => map
            .values()
            .find_map(|v| v.as_str().map(first_line))
            .unwrap_or_else(|| first_line(&input.to_string())),
        (_, Value::Null) => String::new(),
        (_, other) => first_line(&other.to_string()),
    }
}

/// The first line, with ` …` when more lines follow.
fn first_line(text: &str) -> String {
    let trimmed = text.trim();
    match trimmed.split_once('\n') {
        Some((first, _)) => format!("{} …", first.trim_end()),
        None => trimmed.to_owned(),
    }
}

/// At most `max` characters, the last one `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `hello… (error, 3 lines, 35 ms)`: the first line of a tool's output and its size and time.
pub fn tool_result_summary(output: &str, is_error: bool, duration_ms: u64) -> String {
    let lines = output.lines().filter(|l| !l.trim().is_empty()).count();
    let first = output.lines().find(|l| !l.trim().is_empty()).map(str::trim).unwrap_or("");
    let mut facts = Vec::new();
    if is_error {
        facts.push("error".to_owned());
    }
    facts.push(match lines {
        0 => "no output".to_owned(),
        1 => "1 line".to_owned(),
        n => format!("{n} lines"),
    });
    facts.push(format!("{duration_ms} ms"));
    let facts = facts.join(", ");
    if first.is_empty() {
        format!("({facts})")
    } else {
        let more = if lines > 1 && !first.ends_with('…') { "…" } else { "" };
        format!("{}{more} ({facts})", truncate(first, SUMMARY_CHARS))
    }
}

/// `  retrying model call (attempt 2, in 1.5 s): 529 overloaded`.
pub fn retry_line(attempt: u32, delay_ms: u64, reason: &str) -> String {
    let secs = delay_ms as f64 / 1000.0;
    format!("  retrying model call (attempt {attempt}, in {secs} s): {}", first_line(reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboard_shared::headless::{RunFinishedTag, RunStartedTag, SCHEMA_VERSION};
    use outboard_shared::{SessionId, TurnId, Usage};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn call(name: &str, input: Value) -> ToolCall {
        ToolCall { call_id: "c1".into(), name: name.into(), input }
    }

    fn ev(seq: u64, kind: EventKind) -> SessionEvent {
        SessionEvent {
            session_id: SessionId::from("s_1"),
            seq,
            ts: "2026-01-01T00:00:00.000Z".into(),
            kind,
            parent: None,
        }
    }

    #[test]
    fn tool_call_summaries() {
        let cases = [
            (call("Bash", json!({"command": "ls -la"})), "Bash(ls -la)"),
            (
                call("Bash", json!({"command": "cd /x\nmake test", "description": "d"})),
                "Bash(cd /x …)",
            ),
            (
                call("Read", json!({"file_path": "/workspace/a.rs", "offset": 3})),
                "Read(/workspace/a.rs)",
            ),
            (
                call("Write", json!({"file_path": "/workspace/x.txt", "content": "hi"})),
                "Write(/workspace/x.txt)",
            ),
            (
                call(
                    "Edit",
                    json!({"file_path": "/memory/MEMORY.md", "old_string": "a", "new_string": "b"}),
                ),
                "Edit(/memory/MEMORY.md)",
            ),
            (call("Glob", json!({"pattern": "**/*.rs"})), "Glob(**/*.rs)"),
            (
                call("Grep", json!({"pattern": "fn main", "path": "/workspace"})),
                "Grep(fn main in /workspace)",
            ),
            (call("TodoWrite", json!({"todos": [{}, {}, {}]})), "TodoWrite(3 todos)"),
            (
                call("WebFetch", json!({"url": "https://example.com"})),
                "WebFetch(https://example.com)",
            ),
            (call("Bash", json!("{\"command\": \"ls")), "Bash({\"command\": \"ls)"),
            (call("Bash", json!({})), "Bash()"),
        ];
        for (call, want) in cases {
            assert_eq!(tool_call_summary(&call), want);
        }
    }

    #[test]
    fn long_arguments_are_truncated_on_a_character_boundary() {
        let long = "é".repeat(200);
        let got = tool_call_summary(&call("Bash", json!({"command": long})));
        assert_eq!(got, format!("Bash({}…)", "é".repeat(SUMMARY_CHARS - 1)));
        assert_eq!(truncate("short", 10), "short");
        assert_eq!(truncate("abcdef", 4), "abc…");
    }

    #[test]
    fn tool_result_summaries() {
        assert_eq!(tool_result_summary("total 8\na\nb\n", false, 35), "total 8… (3 lines, 35 ms)");
        assert_eq!(tool_result_summary("done", false, 2), "done (1 line, 2 ms)");
        assert_eq!(tool_result_summary("", false, 1), "(no output, 1 ms)");
        assert_eq!(
            tool_result_summary("exit code 2\nNo such file\n", true, 12),
            "exit code 2… (error, 2 lines, 12 ms)"
        );
    }

    #[test]
    fn retry_lines() {
        assert_eq!(
            retry_line(2, 1500, "529 overloaded"),
            "  retrying model call (attempt 2, in 1.5 s): 529 overloaded"
        );
    }

    fn started() -> RunStarted {
        RunStarted {
            kind: RunStartedTag::RunStarted,
            schema_version: SCHEMA_VERSION,
            session_id: SessionId::from("s_1"),
            server: "ws://127.0.0.1:1".into(),
            embedded: true,
        }
    }

    #[test]
    fn json_lines_start_with_run_started_and_events_round_trip() {
        let mut p = Printer::new(Mode::Json, Vec::new(), Vec::new());
        p.run_started(&started()).unwrap();
        let event = ev(
            3,
            EventKind::ToolCall {
                call: call("Bash", json!({"command": "ls"})),
                target_before: None,
            },
        );
        p.event(&event).unwrap();
        p.run_finished(&RunFinished {
            kind: RunFinishedTag::RunFinished,
            session_id: SessionId::from("s_1"),
            exit_code: 0,
            error: None,
        })
        .unwrap();
        let (out, err) = p.into_inner();
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3);
        let first: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(
            first,
            json!({"type": "run_started", "schema_version": 1, "session_id": "s_1",
                   "server": "ws://127.0.0.1:1", "embedded": true})
        );
        let second: Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(second["type"], "tool_call");
        assert_eq!(serde_json::from_str::<SessionEvent>(lines[1]).unwrap(), event);
        assert_eq!(
            serde_json::from_str::<Value>(lines[2]).unwrap(),
            json!({"type": "run_finished", "session_id": "s_1", "exit_code": 0})
        );
        assert!(err.is_empty());
    }

    #[test]
    fn plain_output_streams_text_and_summarises_tools() {
        let mut p = Printer::new(Mode::Plain, Vec::new(), Vec::new());
        let turn = TurnId::from("t_1");
        let events = [
            EventKind::TurnStarted { turn_id: turn.clone(), by: "ada".into() },
            EventKind::UserMessage { text: "list".into() },
            EventKind::AssistantDelta { text: "Let me ".into() },
            EventKind::AssistantDelta { text: "look.".into() },
            EventKind::AssistantMessage {
                text: "Let me look.".into(),
                tool_calls: vec![call("Bash", json!({"command": "ls"}))],
                usage: None,
            },
            EventKind::ToolCall {
                call: call("Bash", json!({"command": "ls"})),
                target_before: None,
            },
            EventKind::ToolOutputDelta {
                call_id: "c1".into(),
                stream: outboard_shared::OutputStream::Stdout,
                text: "a\nb\n".into(),
            },
            EventKind::ToolResult {
                call_id: "c1".into(),
                name: "Bash".into(),
                output: "a\nb\n".into(),
                is_error: false,
                duration_ms: 35,
            },
            EventKind::ModelRetry { attempt: 1, delay_ms: 2000, reason: "429".into() },
            // A provider that does not stream: the whole message is printed.
            EventKind::AssistantMessage {
                text: "Two files.".into(),
                tool_calls: vec![],
                usage: None,
            },
            EventKind::TurnCompleted {
                turn_id: turn,
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
            },
        ];
        for (i, kind) in events.into_iter().enumerate() {
            p.event(&ev(i as u64, kind)).unwrap();
        }
        p.run_finished(&RunFinished {
            kind: RunFinishedTag::RunFinished,
            session_id: SessionId::from("s_1"),
            exit_code: 0,
            error: None,
        })
        .unwrap();
        let (out, err) = p.into_inner();
        assert_eq!(String::from_utf8(out).unwrap(), "Let me look.\nTwo files.\n");
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "● Bash(ls)\n  ⎿  a… (2 lines, 35 ms)\n  retrying model call (attempt 1, in 2 s): 429\n"
        );
    }

    #[test]
    fn a_failed_turn_prints_one_error_line_in_both_modes() {
        for mode in [Mode::Plain, Mode::Json] {
            let mut p = Printer::new(mode, Vec::new(), Vec::new());
            let failed =
                EventKind::TurnFailed { turn_id: TurnId::from("t_1"), error: "no API key".into() };
            p.event(&ev(4, failed)).unwrap();
            let (_, err) = p.into_inner();
            assert_eq!(String::from_utf8(err).unwrap(), "error: no API key\n");
        }
    }
}
