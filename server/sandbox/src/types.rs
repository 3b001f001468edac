//! What a command's run and the sandbox's life look like to the caller.

use outboard_shared::{SandboxQueue, SandboxState};

/// A state change of a session's sandbox, for the session's durable `sandbox` event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SandboxTransition {
    /// The state entered.
    pub state: SandboxState,
    /// How long entering it took, in milliseconds (see [`manager`]).
    pub ms: f64,
    /// With [`SandboxState::Waiting`]: the session's place in its org's queue.
    pub queue: Option<SandboxQueue>,
}

/// The result of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    /// Exit code (`None` when killed by a signal, timed out or cancelled).
    pub exit_code: Option<i32>,
    /// Combined output as kept (capped).
    pub output: String,
    /// The command exceeded its timeout and was killed.
    pub timed_out: bool,
    /// The signal that killed `bash`, if one did.
    pub signal: Option<i32>,
    /// The sandbox stopped the command for hitting a limit (memory, processes): a sentence for
    /// the model. The command counts as failed whatever its exit code.
    pub failure: Option<String>,
}
