//! The MCP client of the server: each org's MCP servers (defined with `outboard-server admin mcp
//! add`, stored in `org_mcp_servers`), reached from the server with the official Rust SDK
//! (`rmcp`), their tools offered to the model as `mcp__SERVER__TOOL`.
//!
//! CONTRACT (used by `agent`, `tools`, `session`/`hub` and `main`): [`McpHub`] (`new`,
//! `org_tools`, `call`, `test`), [`OrgTools`], [`is_mcp_name`], [`config`] (definitions and
//! their rows), [`McpError`].
//!
//! Design choices:
//! - **The server holds the credentials, never the sandbox.** A server's headers or environment
//!   name secrets (`{secret:NAME}`) that are resolved from the org's store when it connects and
//!   handed to the transport only (see [`connect`]).
//! - **One connection per (org, server), shared by every session of the org**: the SDK's
//!   client handle is cloneable and takes concurrent requests. It is opened on first use (a
//!   turn's start, or a call), its tool list is cached and listed again when the server
//!   announces a change; a connection whose transport closed, or whose call failed at the
//!   transport or timed out, is dropped and opened again at the next call.
//! - **A server that cannot be reached costs a turn little**: a failed connect is not retried
//!   at turn starts for [`limits::RETRY_AFTER`] (the prompt says the server is unavailable and why);
//!   a call always tries, bounded by [`limits::CONNECT_TIMEOUT`] and [`limits::CALL_TIMEOUT`], and every
//!   failure is a tool error for the model, never a failed turn.
//! - Results are text: the loop's conversation carries text tool results only, so an image is
//!   described as `[image: MIME, N bytes]`; embedded resources are given as their text.
//!
//! Floor 6: it implements the tools' `ExternalTools`; the tools never know it.

pub mod config;
pub mod connect;
pub mod error;
pub mod hub;
pub mod limits;
pub mod names;
pub mod tool;

pub use error::McpError;
pub use hub::{is_mcp_name, McpHub, OrgTools};
pub use limits::{
    CALL_TIMEOUT, CONNECT_TIMEOUT, MAX_RESULT_BYTES, MAX_SERVERS_PER_ORG, RETRY_AFTER,
};
pub use tool::McpTool;
