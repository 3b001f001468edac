//! The JSON a hook reads on stdin (a webhook as its body): Claude Code's common fields, then
//! the event's own.

use serde_json::{json, Map, Value};

use crate::event::HookEvent;

/// Where the workspace is for a hook run in the sandbox (`cwd`, `CLAUDE_PROJECT_DIR`).
pub const PROJECT_DIR: &str = "/workspace";

/// The common fields: `session_id`, `transcript_path` (Outboard keeps no transcript file: the
/// empty string), `cwd`, `permission_mode` (`default` or `plan`), `hook_event_name`.
pub fn base(event: HookEvent, session_id: &str, plan_mode: bool) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("session_id".into(), json!(session_id));
    map.insert("transcript_path".into(), json!(""));
    map.insert("cwd".into(), json!(PROJECT_DIR));
    map.insert("permission_mode".into(), json!(if plan_mode { "plan" } else { "default" }));
    map.insert("hook_event_name".into(), json!(event.name()));
    map
}

/// A tool event's input: `tool_name`, `tool_input`, `tool_use_id`, and for `PostToolUse` /
/// `PostToolUseFailure` the tool's answer (`tool_response`; `error` too on a failure).
pub fn tool(
    mut base: Map<String, Value>,
    name: &str,
    input: &Value,
    call_id: &str,
    response: Option<(&str, bool)>,
) -> Value {
    base.insert("tool_name".into(), json!(name));
    base.insert("tool_input".into(), input.clone());
    base.insert("tool_use_id".into(), json!(call_id));
    if let Some((output, is_error)) = response {
        base.insert("tool_response".into(), json!({"output": output, "is_error": is_error}));
        if is_error {
            base.insert("error".into(), json!(output));
        }
    }
    Value::Object(base)
}

/// Adds `key: value` and hands back the object.
pub fn with(mut base: Map<String, Value>, key: &str, value: Value) -> Value {
    base.insert(key.into(), value);
    Value::Object(base)
}
