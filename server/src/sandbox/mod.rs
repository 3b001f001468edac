//! Where Bash commands run.
//!
//! CONTRACT (used by `tools` and `session`): [`SandboxConfig`], [`Sandbox::new`], [`Sandbox::exec`].

use std::path::PathBuf;
use std::time::Duration;

use outboard_shared::OutputStream;
use tokio_util::sync::CancellationToken;

/// Which sandbox backend runs commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxConfig {
    /// bubblewrap: namespaces, empty environment, no network.
    Bwrap,
}

/// The result of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    /// Exit code (`None` when killed by a signal).
    pub exit_code: Option<i32>,
    /// Combined output as kept (capped).
    pub output: String,
    /// The command exceeded its timeout and was killed.
    pub timed_out: bool,
}

/// Why a command could not run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The sandbox could not be started.
    #[error("the sandbox could not start: {0}")]
    Start(String),
}

/// A session's sandbox over its workspace.
#[derive(Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    workspace: PathBuf,
}

impl Sandbox {
    /// A sandbox for the workspace at `workspace`; nothing starts until a command runs.
    pub fn new(config: SandboxConfig, workspace: PathBuf) -> Self {
        Sandbox { config, workspace }
    }

    /// Runs `command` with `bash -c` in `/workspace`.
    pub async fn exec(
        &mut self,
        _command: &str,
        _timeout: Duration,
        _on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
        _cancel: CancellationToken,
    ) -> Result<ExecResult, SandboxError> {
        Err(SandboxError::Start(format!(
            "{:?} over {} not built yet",
            self.config,
            self.workspace.display()
        )))
    }
}

impl Sandbox {
    /// Checks once at start that the backend works.
    pub async fn check(_config: &SandboxConfig) -> Result<(), SandboxError> {
        Ok(())
    }
}
