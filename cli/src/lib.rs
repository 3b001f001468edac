//! The `outboard` command as a library: `main.rs` only parses the command line, reads the prompt
//! and calls in here, so tests drive the same code the binary runs.
//!
//! Module map: [`args`] (the command line), [`connect`] (the connection flags and the exit
//! statuses of the client library's errors; the client itself is the `outboard-client` crate,
//! re-exported as [`client`]), [`run`] (headless `outboard run`), [`sessions`] (`outboard sessions`),
//! [`files`] (`outboard memory` and `outboard skills`: the org's shared files), [`output`] (plain
//! and `--json` rendering), [`tui_main`] (the terminal client: the flags and the server, around the `outboard-tui` crate), [`embedded`] (the in-process server;
//! the only module that depends on `outboard-server`, and only with the `embedded` feature),
//! [`upload`] (`--upload`: the progress line around the client library's upload).

pub mod approve;
pub mod args;
pub mod changes;
pub mod compact;
pub mod config;
pub mod connect;
pub mod embedded;
pub mod files;
pub mod images;
pub mod models;
pub mod output;
pub mod rewind;
pub mod run;
pub mod sessions;
pub mod streamjson;
pub mod tui_main;
pub mod upload;
pub mod usage;

pub use outboard_client as client;
pub use outboard_client::http;
#[cfg(test)]
use outboard_client::testing;
pub use outboard_client::{Client, ClientError};

/// The process exit statuses of `outboard`; scripts depend on them.
pub mod exit {
    /// The turn completed.
    pub const OK: i32 = 0;
    /// The turn failed (or the run failed after it started).
    pub const FAILED: i32 = 1;
    /// Bad usage or configuration (clap's usage errors use 2 as well).
    pub const USAGE: i32 = 2;
    /// Cannot connect, or not authorised (refused, wrong token, other protocol version).
    pub const CONNECT: i32 = 3;
    /// The model provider cannot be reached (nothing listens, DNS, TLS, timeouts).
    pub const PROVIDER_UNREACHABLE: i32 = 4;
    /// The model provider refused the credentials (401, 403).
    pub const PROVIDER_AUTH: i32 = 5;
    /// The model provider does not know the model, or the base URL is not its API (404).
    pub const MODEL_NOT_FOUND: i32 = 6;
    /// The model provider was rate-limiting or failing (429, 5xx, cut streams) after the
    /// retries: trying later may succeed.
    pub const PROVIDER_UNAVAILABLE: i32 = 7;
    /// Interrupted with Ctrl-C (128 + SIGINT, as shells report it).
    pub const INTERRUPTED: i32 = 130;

    /// The status of a failed turn of `class` (the server's classification; none: [`FAILED`]).
    pub fn of_failure(class: Option<outboard_shared::FailureClass>) -> i32 {
        use outboard_shared::FailureClass as C;
        match class {
            Some(C::ProviderUnreachable) => PROVIDER_UNREACHABLE,
            Some(C::ProviderAuth) => PROVIDER_AUTH,
            Some(C::ModelNotFound) => MODEL_NOT_FOUND,
            Some(C::ProviderUnavailable) => PROVIDER_UNAVAILABLE,
            Some(C::ProviderRejected | C::Other | C::Unknown) | None => FAILED,
        }
    }
}
