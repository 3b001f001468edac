//! Where Bash commands run (floor 4): one sandbox per session, started when a command first needs it,
//! frozen when idle, thawed on the next command, replaced when it dies.
//!
//! CONTRACT (used by `tools` and `session`): [`SandboxConfig`], [`Sandbox::new`],
//! [`Sandbox::with_transitions`], [`Sandbox::exec`], [`Sandbox::check`], [`SandboxTransition`].
//!
//! Rooms: [`manager`] (the per-session task: lifecycle state machine and idle timers; a
//! [`Sandbox`] is its cheap cloneable handle), [`instance`] (one live sandbox process and its
//! pipes), the in-sandbox PID 1 and what it sees (`outboard-sandbox-init`), [`cgroup`] (freezing
//! and limits), the output cap.
//!
//! Design choice: a persistent sandbox with an agent, rather than one `bwrap` per command, so
//! background processes and the working directory survive between commands and a frozen
//! sandbox resumes in well under a millisecond instead of paying a start per command.
//!
//! It must not know the tools, the session or the store: the network comes in as an
//! `outboard_egress::SessionNet`, and transitions are counted through [`TransitionObserver`].

pub mod agent_exe;
pub mod cgroup;
pub mod config;
pub mod git_guard;
pub mod handle;
pub mod instance;
pub mod jobs;
pub mod manager;
pub mod observe;
pub mod pool;
pub mod precheck;
pub mod preflight;
pub mod request;
pub mod testing;
pub mod types;
pub mod watch;

pub use config::{scratch_dir, Backend, SandboxConfig, SandboxLimits};
pub use handle::{reap_orphans, Sandbox};
pub use observe::{Observer, TransitionObserver};
pub use outboard_sandbox_init::error::SandboxError;
pub use outboard_sandbox_init::{bwrap, init, launch, output, protocol, seccomp};
pub use types::{ExecResult, SandboxTransition};
pub use watch::{WorkspaceCheck, WorkspaceWatch};
