//! What a tool call runs with: the session's workspace and sandbox (or a sandbox host's, through
//! [`HostedWorkspace`]), the read ledger, the org, the events it may emit, the cancel token.

use std::time::Duration;

use futures_util::future::BoxFuture;
use outboard_shared::OutputStream;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use outboard_sandbox::Sandbox;
use outboard_vfs::Workspace;

use crate::ledger::ReadLedger;
use crate::org::OrgCtx;
use crate::outcome::ToolOutcome;

/// Where a tool records a durable event of the session (`TodoWrite`'s list): the turn's
/// emitter, behind a small trait so `tools` never imports `agent`.
pub trait ToolEvents: Send + Sync {
    /// Commits `kind` to the session's log and sends it to everyone attached; the error says why
    /// it could not be.
    fn durable(
        &self,
        kind: outboard_shared::EventKind,
    ) -> futures_util::future::BoxFuture<'_, Result<(), String>>;
}

/// A session's workspace and sandbox on a sandbox host ([`crate::remote`]): the file tools on
/// `/workspace`, `Bash` and the background commands' tools run there, checked there (confinement where the files
/// are); the read ledger stays with the session and travels with each call. A small trait so
/// `tools` never imports `remote`. Errors are whole messages for the model (they name the host
/// and say what to do).
pub trait HostedWorkspace: Send + Sync {
    /// The host's name on this harness.
    fn host(&self) -> &str;
    /// Runs the workspace file tool `name` there with the session's ledger `reads`.
    fn tool<'a>(
        &'a self,
        name: &'a str,
        input: &'a Value,
        reads: &'a mut ReadLedger,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, ToolOutcome>;
    /// Runs a foreground command in the sandbox there, its output streamed to `on_output`.
    fn exec<'a>(
        &'a self,
        command: &'a str,
        timeout: Duration,
        on_output: &'a mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<outboard_sandbox::ExecResult, String>>;
    /// The `target_before` digest of a workspace file there (`None`: it cannot be read).
    fn digest<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Option<String>>;
    /// The ledger entries of `paths` as they are there now.
    fn stamps(&self, paths: Vec<String>) -> BoxFuture<'_, Result<ReadLedger, String>>;
}

impl std::fmt::Debug for dyn HostedWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedWorkspace").field("host", &self.host()).finish_non_exhaustive()
    }
}

/// What a tool call may use.
pub struct ToolCtx<'a> {
    /// The session's workspace (`/workspace`).
    pub workspace: &'a Workspace,
    /// The session's sandbox, for `Bash`.
    pub sandbox: &'a Sandbox,
    /// Receives output as it is produced (Bash's stdout/stderr).
    pub on_output: &'a mut (dyn FnMut(OutputStream, &str) + Send),
    /// Cancelled when the turn is interrupted; a running command is killed.
    pub cancel: CancellationToken,
    /// Bash timeout when the model gives none.
    pub default_timeout: Duration,
    /// The files this session has Read and their state then; `Write` and `Edit` of an existing
    /// file require an entry that still matches. One ledger per session, kept across turns.
    pub reads: &'a mut ReadLedger,
    /// The org's shared files (`/memory`, `/skills`); `None` where there is no org (unit tests).
    pub org: Option<&'a OrgCtx>,
    /// The session's log, for tools whose effect is an event (`TodoWrite`); `None` in unit tests.
    pub events: Option<&'a dyn ToolEvents>,
    /// Where `/workspace` and `Bash` really are when the session lives on a sandbox host;
    /// `None`: here (`workspace` and `sandbox`).
    pub remote: Option<&'a dyn HostedWorkspace>,
    /// The session plans (plan mode): `Bash` runs in the sandbox's read-only view
    /// ([`Sandbox::exec_read_only`]), so what the line judgement let through still writes
    /// nothing.
    pub read_only: bool,
}
