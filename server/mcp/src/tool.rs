//! One tool a server lists, as the hub keeps it.

use serde_json::Value;

/// One tool of a connected server.
#[derive(Debug, Clone)]
pub struct McpTool {
    /// The name the model sees (`mcp__SERVER__TOOL`, see [`names`]).
    pub shown: String,
    /// The server's name for it.
    pub remote: String,
    /// Its description, cut at [`MAX_DESCRIPTION_BYTES`].
    pub description: String,
    /// Its input schema.
    pub schema: Value,
}
