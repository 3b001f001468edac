//! What runs inside the sandbox (floor 3): its PID 1 ([`init`]: runs commands, streams their
//! output, reaps children, keeps background jobs, relays the network proxy's port), the framed
//! protocol it speaks with the server ([`protocol`]), the launcher that enters the namespaces
//! with an idmapped workspace ([`launch`]), the bubblewrap arguments that decide what the sandbox
//! sees ([`bwrap`]), its seccomp filter ([`seccomp`]), output capping ([`output`]) and the read-only view
//! plan-mode commands run in ([`view`]).
//!
//! It must not know the store, the model providers, the tools or the session: our binaries
//! carry it behind a hidden first argument ([`protocol::AGENT_ARG`]), and it links only what
//! runs there.

pub mod bwrap;
pub mod error;
pub mod init;
pub mod launch;
pub mod output;
pub mod protocol;
pub mod seccomp;
pub mod view;

pub use error::SandboxError;
