//! Where Bash commands run.
//!
//! CONTRACT (used by `tools` and `session`): [`SandboxConfig`], [`Sandbox::new`], [`Sandbox::exec`],
//! [`Sandbox::check`].
//!
//! The only backend so far is bubblewrap ([`bwrap`]), spawned per command. The sandbox's
//! generated `/etc` is prepared on the first command, not in [`Sandbox::new`], so a session that
//! never runs a command costs nothing (the design's "the sandbox runs only when needed").

pub mod bwrap;
pub mod output;

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
    /// The host cannot run the sandbox at all (found by [`Sandbox::check`]); the message says
    /// what to install or configure.
    #[error("the sandbox is unavailable on this host: {0}")]
    Unavailable(String),
}

/// A session's sandbox over its workspace.
#[derive(Debug)]
pub struct Sandbox {
    config: SandboxConfig,
    workspace: PathBuf,
    /// The generated `/etc`, made on the first command and kept for the sandbox's life.
    etc: Option<bwrap::EtcDir>,
}

/// How long [`Sandbox::check`] waits for its trivial command.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

impl Sandbox {
    /// A sandbox for the workspace at `workspace`; nothing starts until a command runs.
    pub fn new(config: SandboxConfig, workspace: PathBuf) -> Self {
        Sandbox { config, workspace, etc: None }
    }

    /// Runs `command` with `bash -c` in `/workspace`, streaming its output to `on_output` as it
    /// comes. On timeout or cancel the whole command tree is killed and the output so far is
    /// returned (`timed_out` set on timeout; `exit_code` is `None` in both cases).
    pub async fn exec(
        &mut self,
        command: &str,
        timeout: Duration,
        on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> Result<ExecResult, SandboxError> {
        match self.config {
            SandboxConfig::Bwrap => {
                let etc = match &mut self.etc {
                    Some(etc) => etc,
                    slot => slot.insert(bwrap::EtcDir::create()?),
                };
                let workspace = std::fs::canonicalize(&self.workspace).map_err(|e| {
                    SandboxError::Start(format!(
                        "the workspace {} is not accessible: {e}",
                        self.workspace.display()
                    ))
                })?;
                bwrap::exec(etc, &workspace, command, timeout, on_output, cancel).await
            }
        }
    }

    /// Runs a trivial command through the configured backend once (call it at server start):
    /// fails with [`SandboxError::Unavailable`] saying what to install or which sysctl to check.
    pub async fn check(config: &SandboxConfig) -> Result<(), SandboxError> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("outboard-sandbox-check-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| {
            SandboxError::Unavailable(format!("could not create {}: {e}", dir.display()))
        })?;
        let mut sandbox = Sandbox::new(config.clone(), dir.clone());
        let result =
            sandbox.exec("echo ok", CHECK_TIMEOUT, &mut |_, _| {}, CancellationToken::new()).await;
        drop(sandbox);
        let _ = std::fs::remove_dir_all(&dir);
        match result {
            Ok(r) if r.exit_code == Some(0) && r.output.trim() == "ok" => Ok(()),
            Ok(r) if r.timed_out => Err(SandboxError::Unavailable(format!(
                "a trivial command did not finish within {} s in the bubblewrap sandbox",
                CHECK_TIMEOUT.as_secs()
            ))),
            Ok(r) => {
                Err(SandboxError::Unavailable(bwrap::explain_check_failure(r.exit_code, &r.output)))
            }
            Err(SandboxError::Start(msg)) if msg == bwrap::NOT_FOUND => {
                Err(SandboxError::Unavailable(msg))
            }
            Err(e) => Err(SandboxError::Unavailable(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests;
