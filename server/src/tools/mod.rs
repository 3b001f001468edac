//! The model's tools, with Claude Code's names and parameters: `Read`, `Write`, `Edit`, `Glob`,
//! `Grep` act on the session's workspace through [`crate::vfs`]; `Bash` runs in the session's
//! [`crate::sandbox::Sandbox`].
//!
//! CONTRACT (used by `agent`): [`specs`], [`run`], [`ToolCtx`], [`ToolOutcome`]. A tool never
//! panics and never returns a Rust error: every failure, including invalid input from the model,
//! is a [`ToolOutcome`] with `is_error` set and a message that tells the model what to do.

use std::time::Duration;

use outboard_shared::OutputStream;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::llm::ToolSpec;
use crate::sandbox::Sandbox;
use crate::vfs::Workspace;

/// What a tool call may use.
pub struct ToolCtx<'a> {
    /// The session's workspace (`/workspace`).
    pub workspace: &'a Workspace,
    /// The session's sandbox, for `Bash`.
    pub sandbox: &'a mut Sandbox,
    /// Reads by this session.
    pub reads: &'a mut ReadLedger,
    /// Receives output as it is produced (Bash's stdout/stderr).
    pub on_output: &'a mut (dyn FnMut(OutputStream, &str) + Send),
    /// Cancelled when the turn is interrupted; a running command is killed.
    pub cancel: CancellationToken,
    /// Bash timeout when the model gives none.
    pub default_timeout: Duration,
}

/// The result of a tool call, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// The text for the model.
    pub output: String,
    /// The call failed.
    pub is_error: bool,
}

/// The tools offered to the model.
pub fn specs() -> Vec<ToolSpec> {
    Vec::new()
}

/// Whether a tool only reads (safe to re-run after a restart).
pub fn is_read_only(name: &str) -> bool {
    matches!(name, "Read" | "Glob" | "Grep")
}

/// Runs one tool call.
pub async fn run(name: &str, _input: &Value, _ctx: ToolCtx<'_>) -> ToolOutcome {
    ToolOutcome { output: format!("tool {name} is not built yet"), is_error: true }
}

/// Placeholder until the tools land: which files the session has read.
#[derive(Debug, Default)]
pub struct ReadLedger;
