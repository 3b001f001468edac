//! A client-only build (`cargo build -p outboard-cli --no-default-features`): no server inside,
//! so a command that would start one fails before anything else with the one thing to do, pass
//! `--server`. [`EmbeddedServer`] has no values, so the callers compile unchanged and the
//! compiler proves no code path uses a server that cannot exist.

use crate::args::ConnectArgs;

/// The embedded server this build does not have: a type with no values.
#[derive(Debug)]
pub enum EmbeddedServer {}

/// Why the embedded server could not start: in this build, never can.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// The build has no server in it.
    #[error(
        "this outboard is a client only (built without the `embedded` feature) and cannot run Outboard on this machine: pass --server ws://HOST:PORT (or set OUTBOARD_SERVER) and a token (OUTBOARD_TOKEN or --token-file FILE)"
    )]
    NotBuilt,
}

impl EmbeddedError {
    /// The process exit status: a usage error (2), as a missing flag is.
    pub fn exit_code(&self) -> i32 {
        crate::exit::USAGE
    }
}

/// Why this build cannot run an embedded server: [`EmbeddedError::NotBuilt`].
pub fn unavailable() -> Option<EmbeddedError> {
    Some(EmbeddedError::NotBuilt)
}

impl EmbeddedServer {
    /// Always [`EmbeddedError::NotBuilt`].
    pub async fn start(
        _args: &ConnectArgs,
        _needs_model: bool,
    ) -> Result<EmbeddedServer, EmbeddedError> {
        Err(EmbeddedError::NotBuilt)
    }

    /// Unreachable: there is no value to call it on.
    pub fn url(&self) -> String {
        match *self {}
    }

    /// Unreachable: there is no value to call it on.
    pub fn token(&self) -> &str {
        match *self {}
    }

    /// Unreachable: there is no value to call it on.
    pub async fn revoke_token(&self) {
        match *self {}
    }

    /// Unreachable: there is no value to call it on.
    pub async fn shutdown(self) {
        match self {}
    }
}
