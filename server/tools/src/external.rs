//! Tools that come from elsewhere — the org's MCP servers — offered to the model beside the
//! built-in ones. The MCP client implements [`ExternalTools`]; the tools know only this trait
//! and the names' prefix, so they never depend on the client.

use futures_util::future::BoxFuture;
use outboard_shared::OrgId;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use outboard_llm::ToolSpec;

use crate::outcome::ToolOutcome;

/// What every external tool's name starts with: `mcp__SERVER__TOOL`, as Claude Code names them.
pub const EXTERNAL_PREFIX: &str = "mcp__";

/// Whether `name` is an external tool's (shown) name.
pub fn is_external_name(name: &str) -> bool {
    name.starts_with(EXTERNAL_PREFIX)
}

/// An org's external tools as a turn offers them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExternalSet {
    /// Every connected server's tools.
    pub specs: Vec<ToolSpec>,
    /// The system prompt's section on the servers; empty when the org has none.
    pub prompt: String,
}

/// A source of external tools for the orgs of this server.
pub trait ExternalTools: Send + Sync + std::fmt::Debug {
    /// The tools `org` offers now, and the prompt's section on them.
    fn org_tools<'a>(&'a self, org: &'a OrgId) -> BoxFuture<'a, ExternalSet>;

    /// Calls the tool shown as `name` for `org` with `input`; answers an error outcome (never a
    /// Rust error) for anything that goes wrong, and stops when `cancel` fires.
    fn call<'a>(
        &'a self,
        org: &'a OrgId,
        name: &'a str,
        input: &'a Value,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolOutcome>;
}
