//! What starting or running a sandbox can fail with: shared by the launcher, which runs here, and
//! the server's sandbox manager above.

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
    /// The sandbox died while the command ran; the next command gets a fresh sandbox.
    #[error(
        "the sandbox died while the command ran ({0}); background processes are gone, \
         /workspace is intact, and the next command starts a fresh sandbox"
    )]
    Died(String),
    /// The sandbox's agent could not start the command (e.g. no process slot left).
    #[error("the sandbox could not start the command: {0}")]
    Refused(String),
    /// The session's sandbox manager is gone (the session is shutting down).
    #[error("the sandbox manager has stopped (the session is closing); retry in a new session")]
    Gone,
}
