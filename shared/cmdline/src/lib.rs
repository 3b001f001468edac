//! What the two binaries' command lines share: [`manual`] (shell completions and man pages) and
//! [`log`] (the log filter). A crate of its own below both the client and the server, so a client
//! built without the server (`outboard-cli --no-default-features`) still has them.

pub mod log;
pub mod manual;

pub use log::log_filter;
