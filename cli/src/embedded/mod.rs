//! Embedded mode: with no `--server`, `outboard` runs Outboard in its own process. [`server`]
//! does it in a build with the `embedded` feature (the default); [`absent`] stands in for it in
//! a client-only build (`--no-default-features`), which links no server, sandbox or store and
//! says that it needs `--server`. [`workspace`] (where a new embedded session works) is in both.

#[cfg(not(feature = "embedded"))]
mod absent;
#[cfg(feature = "embedded")]
mod server;
mod workspace;

#[cfg(not(feature = "embedded"))]
pub use absent::{unavailable, EmbeddedError, EmbeddedServer};
#[cfg(feature = "embedded")]
pub use server::{EmbeddedError, EmbeddedServer};

/// Why this build cannot run an embedded server: never, as it has one inside.
#[cfg(feature = "embedded")]
pub fn unavailable() -> Option<EmbeddedError> {
    None
}
pub use workspace::{session_workspace, WorkspaceError};
