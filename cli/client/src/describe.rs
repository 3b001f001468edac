//! What the server sends, for a person: one-line summaries of tool calls, approval requests,
//! compactions, rewinds, background tasks and checkpoints, shared by headless `outboard run`
//! (the binary's printer), the TUI and the protocol adapters. Plain strings, no terminal code:
//! each caller styles them as its screen wants.

use outboard_shared::{
    ApprovalDecision, ApprovalKind, ApprovalScope, CheckpointInfo, CompactionTrigger, EventKind,
    ToolCall,
};
use serde_json::Value;

mod org;

pub use org::org_context_line;

/// How many characters of a tool's key argument are shown.
pub const SUMMARY_CHARS: usize = 80;

/// The tool whose calls run a subagent.
pub const TASK_TOOL: &str = "Task";

/// How many characters of a checkpoint's prompt its line shows.
const PROMPT_CHARS: usize = 72;

/// A `rewound` event, for a person.
pub fn rewound_line(checkpoint: u32, code: bool, conversation: bool, by: &str) -> String {
    let what = match (code, conversation) {
        (true, true) => "files and conversation",
        (true, false) => "files only",
        _ => "conversation only",
    };
    format!("rewound to checkpoint {checkpoint}, before prompt {checkpoint} ({what}), by {by}")
}

/// An approval request or its answer, for a person; `None` for other events. The request says
/// why it asks, what an allow for the session would cover, and how to answer it from another
/// terminal.
pub fn approval_lines(session: &str, kind: &EventKind) -> Option<Vec<String>> {
    match kind {
        EventKind::ApprovalRequested { call_id, kind: ApprovalKind::Plan, path, .. } => Some(vec![
            format!(
                "? the plan{} waits for approval",
                path.as_deref().map(|p| format!(" ({p})")).unwrap_or_default()
            ),
            format!(
                "  answer with: outboard approve {session} {call_id}  |  keep planning: \
                     outboard deny {session} {call_id} --reason TEXT"
            ),
        ]),
        EventKind::ApprovalRequested {
            call_id,
            kind: ApprovalKind::Question,
            questions: Some(questions),
            ..
        } => {
            let mut lines = vec!["? the model asks:".to_owned()];
            for (i, q) in questions.iter().enumerate() {
                let options: Vec<&str> = q.options.iter().map(|o| o.label.as_str()).collect();
                lines.push(format!(
                    "  {}. {} [{} | other]",
                    i + 1,
                    truncate(&q.question, 200),
                    options.join(" | ")
                ));
            }
            lines.push(format!(
                "  answer with: outboard answer {session} {call_id} ANSWER…  (one per question)"
            ));
            Some(lines)
        }
        EventKind::ApprovalRequested { call_id, name, input, rule, covers, unjudged, .. } => {
            let call =
                ToolCall { call_id: call_id.clone(), name: name.clone(), input: input.clone() };
            let mut lines = vec![format!(
                "? {} waits for approval (org rule {rule})",
                tool_call_summary(&call)
            )];
            if let Some(why) = unjudged {
                lines.push(format!("  not judged before it runs: {}", truncate(why, 200)));
            }
            lines.push(format!(
                "  answer with: outboard approve {session} {call_id}  |  outboard deny {session} \
                 {call_id} --reason TEXT"
            ));
            lines.push(format!(
                "  approve --for-session also allows {}",
                session_covers(name, covers.as_deref())
            ));
            Some(lines)
        }
        EventKind::ApprovalResolved { answers: Some(answers), by, .. } => {
            Some(vec![format!("  ✓ answered by {by}: {}", truncate(&answers.join(" / "), 200))])
        }
        EventKind::ApprovalResolved { name, decision, scope, by, reason, covers, .. } => {
            Some(vec![match (decision, scope) {
                (ApprovalDecision::Allow, ApprovalScope::Once) => format!("  ✓ allowed by {by}"),
                (ApprovalDecision::Allow, ApprovalScope::Session) => {
                    format!("  ✓ allowed by {by}, with {}", session_covers(name, covers.as_deref()))
                }
                (ApprovalDecision::Deny, _) => match reason {
                    Some(reason) => format!("  ✗ denied by {by}: {}", truncate(reason, 200)),
                    None => format!("  ✗ denied by {by}"),
                },
            }])
        }
        _ => None,
    }
}

/// What an allow for the session covers (a request's or answer's `covers`), for a person.
pub fn session_covers(tool: &str, covers: Option<&[String]>) -> String {
    match covers {
        // A server that granted the whole tool.
        None => format!("every later {tool} call of this session"),
        Some([]) => {
            "nothing beyond this call (what asks could not be judged before it runs)".into()
        }
        Some(rules) => {
            let rules: Vec<String> = rules.iter().map(|r| format!("`{r}`")).collect();
            format!(
                "later {tool} calls of this session that no rule but {} asks about",
                rules.join(", ")
            )
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
        outboard_shared::thousands(before),
        outboard_shared::thousands(after)
    )
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
pub fn key_argument(tool: &str, input: &Value) -> String {
    let field = |name: &str| input.get(name).and_then(Value::as_str).map(str::to_owned);
    let with_path = |main: Option<String>| match (main, field("path")) {
        (Some(main), Some(path)) => format!("{main} in {path}"),
        (main, _) => main.unwrap_or_default(),
    };
    match (tool, input) {
        // Invalid JSON from the model arrives as a string: show what came.
        (_, Value::String(raw)) => first_line(raw),
        ("Bash", _) => field("command").map(|c| first_line(&c)).unwrap_or_default(),
        ("Read" | "Write" | "Edit" | "NotebookEdit", _) => field("file_path")
            .or_else(|| field("notebook_path"))
            .or_else(|| field("path"))
            .unwrap_or_default(),
        ("Glob" | "Grep", _) => with_path(field("pattern")),
        (TASK_TOOL, _) => field("description").map(|d| first_line(&d)).unwrap_or_default(),
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

/// A progress frame as the headless `progress` line.
pub fn progress_line(frame: outboard_shared::ProgressFrame) -> outboard_shared::headless::Progress {
    outboard_shared::headless::Progress {
        kind: Default::default(),
        phase: frame.phase,
        done: frame.done,
        total: frame.total,
        message: frame.message,
    }
}

/// One checkpoint as a line: number, time, who, marks, the prompt's first line.
pub fn checkpoint_line(c: &CheckpointInfo) -> String {
    let first = c.prompt.lines().next().unwrap_or_default();
    let mut prompt: String = first.chars().take(PROMPT_CHARS).collect();
    if prompt.len() < c.prompt.trim_end().len() {
        prompt.push('…');
    }
    let time = c.ts.get(..19).unwrap_or(&c.ts).replace('T', " ");
    let mut marks = Vec::new();
    if c.dropped {
        marks.push("files dropped: checkpoint storage full");
    } else if !c.code {
        marks.push("conversation only");
    }
    if !c.current {
        marks.push("rewound");
    }
    let marks = if marks.is_empty() { String::new() } else { format!(" ({})", marks.join(", ")) };
    format!("{:>3}  {time}  {}{marks}  {prompt}", c.n, c.by)
}
