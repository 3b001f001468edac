//! `TodoWrite`: the model's todo list, Claude Code's tool with its parameters.
//!
//! The list is session state kept by the server, not a file: each call replaces it whole and
//! becomes a durable `todos` event (through [`super::ToolEvents`]), so every attached client
//! draws it, a restart finds it in the log, and the session row keeps its counts for
//! `session/list`. The input is checked before anything is recorded; a refusal says what to fix.

use outboard_shared::{EventKind, TodoItem, TodoStatus};
use serde::Deserialize;
use serde_json::json;

use crate::ctx::ToolEvents;
use crate::outcome::ToolOutcome;
use outboard_llm::ToolSpec;

/// Items in one list: a plan longer than this is better split into phases, and every client
/// draws the whole list.
pub const MAX_TODOS: usize = 100;

/// Bytes of one item's `content` or `activeForm`: a line of a panel, not a document.
pub const MAX_TODO_TEXT_BYTES: usize = 500;

pub const PARAMS: &str = "{\"todos\": [{\"content\": string, \"status\": \"pending\" | \
     \"in_progress\" | \"completed\", \"activeForm\": string}] (required)}";

#[derive(Debug, Deserialize)]
pub struct TodoWriteParams {
    todos: Vec<TodoItem>,
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: "TodoWrite".into(),
        description: "Use this tool to create and manage a structured task list for your current \
coding session. This helps you track progress, organize complex tasks, and demonstrate \
thoroughness to the user. It also helps the user understand the progress of the task and overall \
progress of their requests.\n\n\
## When to Use This Tool\n\
Use this tool proactively in these scenarios:\n\
1. Complex multi-step tasks - When a task requires 3 or more distinct steps or actions\n\
2. Non-trivial and complex tasks - Tasks that require careful planning or multiple operations\n\
3. User explicitly requests todo list - When the user directly asks you to use the todo list\n\
4. User provides multiple tasks - When users provide a list of things to be done\n\
5. After receiving new instructions - Immediately capture user requirements as todos\n\
6. When you start working on a task - Mark it as in_progress BEFORE beginning work. Ideally you \
should only have one todo as in_progress at a time\n\
7. After completing a task - Mark it as completed and add any new follow-up tasks discovered \
during implementation\n\n\
## When NOT to Use This Tool\n\
Skip using this tool when there is only a single, straightforward task, the task is trivial, or \
the task is purely conversational or informational.\n\n\
## Task States and Management\n\
1. **Task States**: pending (not yet started), in_progress (currently working on; limit to ONE \
task at a time), completed (finished successfully).\n\
   Each task has two forms: `content`, the imperative form describing what needs to be done \
(e.g. \"Run tests\"), and `activeForm`, the present continuous form shown during execution \
(e.g. \"Running tests\").\n\
2. **Task Management**: update task status in real-time as you work; mark tasks complete \
IMMEDIATELY after finishing (don't batch completions); exactly ONE task must be in_progress at \
any time while you work; complete current tasks before starting new ones; remove tasks that are \
no longer relevant from the list entirely.\n\
3. **Task Completion Requirements**: ONLY mark a task as completed when you have FULLY \
accomplished it. If you encounter errors, blockers, or cannot finish, keep the task as \
in_progress and add a new task describing what needs to be resolved.\n\n\
Each call replaces the whole list. The people attached to this session see it as you update it."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array",
                    "description": "The updated todo list",
                    "items": {
                        "type": "object",
                        "properties": {
                            "content": {"type": "string", "minLength": 1},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                            "activeForm": {"type": "string", "minLength": 1}
                        },
                        "required": ["content", "status", "activeForm"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["todos"],
            "additionalProperties": false
        }),
    }
}

/// Checks a list; the refusal for the model when it is not one the session can keep.
pub fn validate(todos: &[TodoItem]) -> Result<(), String> {
    if todos.len() > MAX_TODOS {
        return Err(format!(
            "The list has {} items; at most {MAX_TODOS} are kept. Merge or drop items, or plan \
             in phases.",
            todos.len()
        ));
    }
    for (i, item) in todos.iter().enumerate() {
        let n = i + 1;
        for (field, text) in [("content", &item.content), ("activeForm", &item.active_form)] {
            if text.trim().is_empty() {
                return Err(format!("Item {n} has an empty {field}: give it a short sentence."));
            }
            if text.len() > MAX_TODO_TEXT_BYTES {
                return Err(format!(
                    "Item {n}'s {field} is {} bytes; at most {MAX_TODO_TEXT_BYTES} are kept. \
                     Shorten it to one line.",
                    text.len()
                ));
            }
        }
    }
    let active: Vec<usize> = todos
        .iter()
        .enumerate()
        .filter(|(_, t)| t.status == TodoStatus::InProgress)
        .map(|(i, _)| i + 1)
        .collect();
    if active.len() > 1 {
        let items: Vec<String> = active.iter().map(usize::to_string).collect();
        return Err(format!(
            "Items {} are all in_progress; exactly one task is in_progress at a time. Mark the \
             others pending or completed.",
            items.join(", ")
        ));
    }
    Ok(())
}

pub async fn run(params: TodoWriteParams, events: Option<&dyn ToolEvents>) -> ToolOutcome {
    if let Err(refusal) = validate(&params.todos) {
        return ToolOutcome::error(refusal);
    }
    let Some(events) = events else {
        return ToolOutcome::error("The todo list is not available here.");
    };
    if let Err(e) = events.durable(EventKind::Todos { todos: params.todos }).await {
        return ToolOutcome::error(format!(
            "The todo list could not be saved ({e}); try again in a moment."
        ));
    }
    ToolOutcome::ok(
        "Todos have been modified successfully. Ensure that you continue to use the todo list \
         to track your progress. Please proceed with the current tasks if applicable",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(content: &str, status: TodoStatus) -> TodoItem {
        TodoItem { content: content.into(), status, active_form: format!("{content}ing") }
    }

    #[test]
    fn a_list_is_refused_with_what_to_fix() {
        use TodoStatus::*;
        assert!(
            validate(&[item("a", Completed), item("b", InProgress), item("c", Pending)]).is_ok()
        );
        let two = validate(&[item("a", InProgress), item("b", Pending), item("c", InProgress)]);
        assert!(two.unwrap_err().contains("Items 1, 3 are all in_progress"));
        let long = validate(&[item(&"x".repeat(MAX_TODO_TEXT_BYTES + 1), Pending)]);
        assert!(long.unwrap_err().contains("Item 1's content is 501 bytes"));
        let blank = validate(&[item("  ", Pending)]);
        assert!(blank.unwrap_err().contains("empty content"));
        let most = vec![item("a", Pending); MAX_TODOS];
        assert!(validate(&most).is_ok());
        let many = vec![item("a", Pending); MAX_TODOS + 1];
        assert!(validate(&many).unwrap_err().contains("at most 100"));
        let bad: Result<TodoWriteParams, _> = serde_json::from_value(json!({
            "todos": [{"content": "a", "status": "done", "activeForm": "b"}]
        }));
        assert!(bad.unwrap_err().to_string().contains("unknown variant `done`"));
    }
}
