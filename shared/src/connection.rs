//! The rules of a connection and how it fails: the size limits on frames and on the bytes before
//! `hello`, the client's ping interval, and the error bodies and codes a request or a whole
//! connection fails with ([`ErrorBody`], [`ErrorCode`], [`ConnectionError`]). The close codes that
//! end a connection are in [`crate::close`].

#[cfg(doc)]
use crate::close;
use serde::{Deserialize, Serialize};

/// The largest text frame either side accepts, in bytes. A larger frame is refused with
/// [`ErrorCode::TooLarge`] and the connection is closed: it is either a bug or an attack, and a
/// prompt of 4 MiB is better sent as a file in the workspace.
pub const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;

/// How often a client sends a WebSocket ping when it has nothing else to send. The server closes
/// a connection after its idle timeout (default 300 s) without any frame from the client; 30 s
/// keeps an idle TUI well inside it, even against a server configured ten times stricter.
pub const CLIENT_PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// The most raw bytes (HTTP upgrade request and WebSocket frames together) the server reads from
/// a connection before it has accepted its `hello`. A client sends one small `hello` (well under
/// 1 KiB) and waits for `welcome`; anything larger is cut with [`ErrorCode::TooLarge`] and close
/// code [`close::TOO_BIG`] as soon as the limit is reached, so an unauthenticated peer can never
/// make the server buffer a large frame.
pub const MAX_PRE_HELLO_BYTES: usize = 64 * 1024;

/// A machine-readable error code and a message that tells a person what to do next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The kind of error.
    pub code: ErrorCode,
    /// One line for a person.
    pub message: String,
    /// With `unavailable` for a session another server node runs: where that node serves
    /// clients (`ws://…` or `wss://…`), for a client to connect there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_url: Option<String>,
}

impl ErrorBody {
    /// An error with a code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody { code, message: message.into(), node_url: None }
    }

    /// The error, naming the server node where the session runs ([`ErrorBody::node_url`]).
    pub fn at_node(mut self, url: Option<String>) -> Self {
        self.node_url = url;
        self
    }
}

impl std::fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code.as_str())
    }
}

/// Error codes. New codes may be added; clients treat an unknown code like `internal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The frame or parameters are malformed.
    BadRequest,
    /// The first frame was not `hello`, or a request came before the handshake finished.
    HandshakeRequired,
    /// The client speaks another protocol version.
    ProtocolVersion,
    /// The token is missing or wrong.
    Unauthorized,
    /// The caller may not do this (another org's session, a watcher sending a turn).
    Forbidden,
    /// No such session (or not visible to the caller's org).
    NotFound,
    /// The request conflicts with the current state (a turn is already running).
    Conflict,
    /// The frame exceeds [`MAX_FRAME_BYTES`].
    TooLarge,
    /// The method is not known to this server.
    UnknownMethod,
    /// The client fell too far behind the event stream; re-attach with the last `seq`.
    Lagged,
    /// The server is shutting down or restarting.
    ShuttingDown,
    /// The connection sent no frame (request or WebSocket ping) for the server's idle timeout;
    /// clients ping well within it ([`CLIENT_PING_INTERVAL`]).
    IdleTimeout,
    /// A bug or an unexpected failure on the server.
    Internal,
    /// The caller's org reached one of its quotas (sessions per hour, org file versions or
    /// bytes, title length); the message names the quota and how an admin raises it.
    QuotaExceeded,
    /// Something the request needs cannot be had now (no sandbox host answers to take a new
    /// session); the message says what; retrying later may work.
    Unavailable,
    /// A code this client does not know.
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::HandshakeRequired => "handshake_required",
            ErrorCode::ProtocolVersion => "protocol_version",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::UnknownMethod => "unknown_method",
            ErrorCode::Lagged => "lagged",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::IdleTimeout => "idle_timeout",
            ErrorCode::Internal => "internal",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Unknown => "unknown",
        }
    }
}

/// A connection-level error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionError {
    /// What went wrong.
    #[serde(flatten)]
    pub error: ErrorBody,
    /// The server closes the connection after this frame.
    #[serde(default)]
    pub fatal: bool,
}
