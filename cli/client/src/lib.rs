//! The client library of the Outboard protocol, below every front end: the TUI (`outboard-tui`),
//! headless `outboard run` and the admin commands (the `outboard` binary), and the protocol
//! adapters. It knows no command line, no exit codes and no terminal: the binary maps its errors
//! to exit statuses and adds the hints that name its flags.
//!
//! Module map: [`conn`] (the WebSocket client: handshake, TLS, requests and events), [`error`]
//! ([`ClientError`]), [`backoff`] (reconnect pacing), [`http`] (the HTTP endpoints beside the
//! WebSocket), [`upload`] (`--upload`: the packer and the HTTP upload of a working tree),
//! [`describe`] (what the server sends, as text for a person) and [`prices`] (what tokens cost).
//! `testing` (feature `test-support`) is a scripted fake server for unit tests.

pub mod backoff;
pub mod conn;
pub mod describe;
pub mod error;
pub mod follow;
pub mod http;
pub mod prices;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod upload;

pub use backoff::Backoff;
pub use conn::*;
pub use error::ClientError;
pub use follow::{Dial, Follow, FollowError, Retry, Update};
