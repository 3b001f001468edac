//! How many servers an org may define, how long connecting and calling may take, how much of a
//! result the model gets.

use std::time::Duration;

/// MCP servers an org may define, at most: each one's tools go into every request's tool list,
/// and each is a connection (or a process) the server keeps open.
pub const MAX_SERVERS_PER_ORG: usize = 16;

/// How long opening a connection may take (process start or HTTP, handshake, tool list).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one tool call may take before the model is told the server is too slow.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// After a failed connect, turn starts do not try that server again for this long (calls do):
/// a server that is down must not add a connect timeout to every turn of every session.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// A tool result's text beyond this many bytes is cut here (the conversation cuts long results
/// further, like every tool's).
pub const MAX_RESULT_BYTES: usize = 256 * 1024;
