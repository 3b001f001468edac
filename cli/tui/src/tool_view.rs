//! How a tool call reads to a person (issue 51, item 4): its header as Claude Code writes it
//! (`Edit(src/main.rs)`, `Bash(cargo test)`), its whole input on Ctrl-O, and the calls whose
//! input is meant for a person in another form: `TodoWrite` as the todo list, `ExitPlanMode` as
//! its plan rendered once, never their JSON, and never the instructions their results give the
//! model (the approval's own line says how it was answered). `ExitPlanMode`'s plan usually
//! comes with its approval request rather than a call event (the call starts only once
//! answered): the transcript shows it there (`CellKind::Plan`), and the call's result, whose
//! text is the model's instructions, becomes one word (approved, not approved).

use outboard_shared::{TodoItem, TodoStatus};
use ratatui::text::{Line, Span};
use serde_json::Value;

use crate::markdown;
use crate::state::ToolCell;
use crate::theme::Theme;

/// Characters of a header's argument when folded (Ctrl-O shows it whole).
const HEADER_CHARS: usize = 100;

/// `Edit(src/main.rs)`: the tool and the argument that says what the call does (whole when
/// `expand`, else its first line cut to [`HEADER_CHARS`]).
pub fn header(t: &ToolCell, expand: bool) -> String {
    let arg = outboard_client::describe::key_argument(&t.name, &t.input);
    let arg = match (expand, &t.input) {
        (true, input) if t.name == "Bash" => input
            .get("command")
            .and_then(Value::as_str)
            .map_or(arg, |c| c.trim().replace('\n', " ⏎ ")),
        (true, _) => arg,
        (false, _) => outboard_client::describe::truncate(&arg, HEADER_CHARS),
    };
    match t.name.as_str() {
        "TodoWrite" => "Update todos".to_owned(),
        "ExitPlanMode" => "Plan".to_owned(),
        "AskUserQuestion" => "Questions".to_owned(),
        _ if arg.is_empty() => t.name.clone(),
        _ => format!("{}({arg})", t.name),
    }
}

/// Whether the call's result is for the model only (its body is never shown on success).
pub fn result_is_the_models(name: &str) -> bool {
    matches!(name, "TodoWrite" | "ExitPlanMode" | "AskUserQuestion")
}

/// The body of a call shown in its own form, if it has one: the todo list, the plan.
pub fn own_body(t: &ToolCell, width: usize, theme: &Theme) -> Option<Vec<Line<'static>>> {
    match t.name.as_str() {
        "TodoWrite" => {
            let todos: Vec<TodoItem> =
                serde_json::from_value(t.input.get("todos")?.clone()).ok()?;
            Some(todos.iter().map(|todo| todo_line(todo, theme)).collect())
        }
        "ExitPlanMode" => {
            let plan = t.input.get("plan").and_then(Value::as_str)?;
            Some(markdown::render(plan.trim(), width.saturating_sub(4).max(10), theme))
        }
        _ => None,
    }
}

fn todo_line(todo: &TodoItem, theme: &Theme) -> Line<'static> {
    match todo.status {
        TodoStatus::Completed => {
            Line::from(Span::styled(format!("☑ {}", todo.content), theme.dim()))
        }
        TodoStatus::InProgress => {
            let what = if todo.active_form.is_empty() { &todo.content } else { &todo.active_form };
            Line::from(Span::styled(format!("◐ {what}"), theme.bold()))
        }
        TodoStatus::Pending => Line::from(format!("☐ {}", todo.content)),
    }
}

/// The whole input, one line per line of each argument (Ctrl-O), for calls with no form of
/// their own: what a folded header leaves out.
pub fn whole_input(t: &ToolCell) -> Vec<String> {
    let Value::Object(map) = &t.input else { return Vec::new() };
    let mut out = Vec::new();
    for (key, value) in map {
        let text = match value {
            Value::String(s) => s.clone(),
            other => serde_json::to_string_pretty(other).unwrap_or_default(),
        };
        let mut lines = text.lines();
        out.push(format!("{key}: {}", lines.next().unwrap_or("")));
        out.extend(lines.map(|l| format!("  {l}")));
    }
    out
}

/// A finished call's status word for its footer, for the calls whose result is the model's.
pub fn own_status(name: &str, is_error: bool) -> Option<&'static str> {
    match (name, is_error) {
        ("ExitPlanMode", false) => Some("approved"),
        ("ExitPlanMode", true) => Some("not approved"),
        ("TodoWrite", false) => Some("updated"),
        ("AskUserQuestion", false) => Some("answered"),
        ("AskUserQuestion", true) => Some("not answered"),
        _ => None,
    }
}
