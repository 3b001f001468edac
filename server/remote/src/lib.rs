//! Sandboxes and workspaces on another machine (floor 6): a sandbox host (`outboard-server sandbox-host`)
//! owns workspace directories and bubblewrap sandboxes on its machine and serves them to
//! harness nodes over one authenticated, encrypted WebSocket per node.
//!
//! CONTRACT (used by `main` and, later, by the session's tool environment): [`host::serve`]
//! and [`host::HostOptions`] run a host; [`client::HostClient`] is a harness node's handle on
//! one host (connect, authenticate, multiplex calls, reconnect); [`protocol`] is the wire.
//!
//! Rooms: [`protocol`] (typed, versioned, length-bounded messages), [`admission`] (who may
//! start a join, and the rate of refusal lines), [`trust`] (the host's key and
//! certificate, the join token, the HMAC handshake, the pinned-certificate verifier), [`host`]
//! (the host side: per workspace id a directory and a [`outboard_sandbox::Sandbox`]), [`client`]
//! (the harness side).
//!
//! Design choice: the host runs the very tool functions the server runs locally
//! ([`outboard_tools::run`]) against its own [`outboard_vfs::Workspace`], so confinement (checked
//! where the files are), output formats and limits cannot drift between local and remote
//! workspaces; only the read ledger crosses the wire, carried by each call (see
//! [`protocol::Op::Tool`]).

pub mod admission;
pub mod client;
pub mod host;
pub mod protocol;
pub mod registry;
pub mod trust;
pub mod workspace;

#[cfg(test)]
mod tests;
