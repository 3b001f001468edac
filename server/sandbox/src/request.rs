//! What a [`crate::Sandbox`] handle asks of its manager: the manager's inbox.

use std::time::Duration;

use outboard_sandbox_init::error::SandboxError;
use outboard_shared::{OutputStream, SandboxState};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::jobs::{JobRead, JobReport};
use crate::types::ExecResult;

/// A command for the manager.
pub enum Request {
    Exec {
        command: String,
        /// In the sandbox's read-only view (plan mode).
        read_only: bool,
        timeout: Duration,
        cancel: CancellationToken,
        output: mpsc::Sender<(OutputStream, String)>,
        reply: oneshot::Sender<Result<ExecResult, SandboxError>>,
    },
    State(oneshot::Sender<SandboxState>),
    Pid(oneshot::Sender<Option<u32>>),
    Cwd(oneshot::Sender<Option<String>>),
    Stop(oneshot::Sender<()>),
    /// Stop, telling the running background jobs why (in their unread output).
    StopFor(String, oneshot::Sender<()>),
    /// Start a background job; its shell id.
    Spawn {
        command: String,
        /// In the sandbox's read-only view (plan mode).
        read_only: bool,
        reply: oneshot::Sender<Result<String, SandboxError>>,
    },
    /// A job's output since the last read; `None` for an unknown id.
    ReadJob {
        shell_id: String,
        reply: oneshot::Sender<Option<JobRead>>,
    },
    /// Kill a running job: `Ok(false)` when it is not running (unknown or ended).
    KillJob {
        shell_id: String,
        reply: oneshot::Sender<Result<bool, SandboxError>>,
    },
    /// Ended jobs the model was not told of yet (marked told).
    Untold(oneshot::Sender<Vec<JobReport>>),
    /// Another session of the org waits for a live sandbox: freeze now if idle (no command, no
    /// background job), so the waiter can take this one's place without waiting for the idle
    /// timer.
    Yield,
}
