//! The names the model sees for MCP tools: `mcp__SERVER__TOOL`, as Claude Code names them, so
//! a tool policy's pattern (`mcp__github__*`) reads the same here.
//!
//! Anthropic and OpenAI accept tool names matching `^[a-zA-Z0-9_-]{1,64}$`. A tool whose name
//! fits after the prefix and uses only those characters keeps it as is; any other (a `.` or
//! `/` in it, or too long) is mapped to a name that fits: its characters outside the set become
//! `_`, it is cut to leave room, and `_` plus 8 hex digits of the SHA-256 of its real name are
//! appended, so the name is stable across connections and two such tools of one server never
//! collide. The hub keeps the map from the shown name back to the server's.

/// What every MCP tool's name starts with (the tools' prefix for external tools).
pub const PREFIX: &str = outboard_tools::EXTERNAL_PREFIX;
/// The longest tool name the providers accept.
pub const MAX_TOOL_NAME: usize = 64;
/// Hex digits of the digest appended to a mapped name.
const DIGEST_CHARS: usize = 8;

/// Whether `name` is an MCP tool's (shown) name.
pub fn is_mcp(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// The server a shown name belongs to: the part between `mcp__` and the next `__` (server
/// names contain no `__`, see the config's `validate_name`).
pub fn server_of(shown: &str) -> Option<&str> {
    let rest = shown.strip_prefix(PREFIX)?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some(server)
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The name shown to the model for `tool` of `server`.
pub fn shown(server: &str, tool: &str) -> String {
    let head = format!("{PREFIX}{server}__");
    if !tool.is_empty() && tool.chars().all(allowed) && head.len() + tool.len() <= MAX_TOOL_NAME {
        return format!("{head}{tool}");
    }
    let digest = outboard_org::tokens::hex_sha256(tool.as_bytes());
    let room = MAX_TOOL_NAME.saturating_sub(head.len() + 1 + DIGEST_CHARS);
    let kept: String = tool.chars().map(|c| if allowed(c) { c } else { '_' }).take(room).collect();
    format!("{head}{kept}_{}", &digest[..DIGEST_CHARS])
}
