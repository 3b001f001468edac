//! [`ClientError`]: why talking to the server failed, in one line that says what to do next.

use std::sync::Arc;

use outboard_shared::{ConnectionError, ErrorBody, ErrorCode};

/// The error underneath a [`ClientError`] (the operating system's, rustls's, the WebSocket
/// library's), kept as its source; shared, so the error stays `Clone`.
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Why talking to the server failed. The messages are one line and say what to do next, in
/// words that suit every front end: none names a flag. The `outboard` binary adds the hints that
/// name its flags (`connect::hint` there) and prints the result after `outboard: `.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The URL is not a usable `ws://` address.
    #[error("invalid server URL {url:?}: {reason} — use ws://HOST:PORT")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No connection could be made (refused, unreachable, timed out).
    #[error("cannot connect to {url}: {reason} — is outboard-server running?")]
    Connect {
        /// The URL tried.
        url: String,
        /// What the operating system or the HTTP upgrade said.
        reason: String,
        /// The error underneath, when there is one.
        #[source]
        source: Option<Cause>,
    },
    /// The server refused the token.
    #[error(
        "the server refused the token — create one with: outboard-server admin user add NAME --org ORG"
    )]
    Unauthorized {
        /// The server's message.
        message: String,
    },
    /// The server speaks another protocol version.
    #[error(
        "the server speaks another protocol version ({message}) — install matching versions of outboard and outboard-server"
    )]
    ProtocolVersion {
        /// The server's message.
        message: String,
    },
    /// The handshake failed for another reason (not an Outboard server, timed out, refused).
    #[error("the handshake with {url} failed: {message} — is this an outboard-server address?")]
    Handshake {
        /// The URL.
        url: String,
        /// What happened.
        message: String,
    },
    /// The server answered a request with an error.
    #[error("{method} failed: {}", .error)]
    Server {
        /// The method of the request.
        method: &'static str,
        /// The server's error.
        error: ErrorBody,
    },
    /// A connection-level error frame from the server. When `fatal`, the connection is over.
    #[error("the server reported: {}", .error)]
    Connection {
        /// The error.
        error: ErrorBody,
        /// Whether the server closed the connection after it.
        fatal: bool,
    },
    /// The connection is closed.
    #[error("the server closed the connection{} — check that outboard-server is still running and try again", .reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Closed {
        /// The close reason or transport error, when known.
        reason: Option<String>,
    },
    /// A request too large for one frame (a huge prompt).
    #[error("the request is {bytes} bytes, over the {limit} byte frame limit — put large text in a file and refer to it")]
    TooLarge {
        /// The encoded size.
        bytes: usize,
        /// [`outboard_shared::MAX_FRAME_BYTES`].
        limit: usize,
    },
    /// A token would cross the network in clear text.
    #[error("refusing to send the token over clear-text ws:// to {host}: use wss://")]
    Insecure {
        /// The host of the URL.
        host: String,
    },
    /// The token file cannot be read.
    #[error("cannot read the token file {path}: {reason} — write the token from `outboard-server admin user add` into it")]
    TokenFile {
        /// The file.
        path: String,
        /// Why.
        reason: String,
        /// The error underneath, when there is one.
        #[source]
        source: Option<Cause>,
    },
    /// The CA certificate file cannot be used.
    #[error("cannot use the CA certificate file {path}: {reason}")]
    CaCert {
        /// The file.
        path: String,
        /// Why.
        reason: String,
        /// The error underneath, when there is one.
        #[source]
        source: Option<Cause>,
    },
    /// The server's TLS certificate is not trusted (or TLS failed otherwise).
    #[error("TLS with {url} failed: {reason}")]
    Certificate {
        /// The URL.
        url: String,
        /// What rustls said.
        reason: String,
        /// The error underneath, when there is one.
        #[source]
        source: Option<Cause>,
    },
    /// The server sent something this client cannot read.
    #[error(
        "unexpected data from the server: {0} — are outboard and outboard-server the same version?"
    )]
    Protocol(String),
}

impl ClientError {
    /// Whether the connection is over after this error ([`ClientError::Connection`] with
    /// `fatal: false` and [`ClientError::Server`] leave it usable).
    pub fn is_fatal(&self) -> bool {
        match self {
            ClientError::Server { .. } | ClientError::TooLarge { .. } => false,
            ClientError::Connection { fatal, .. } => *fatal,
            _ => true,
        }
    }

    /// The error code from the server, when the server sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { error, .. } | ClientError::Connection { error, .. } => {
                Some(error.code)
            }
            ClientError::Unauthorized { .. } => Some(ErrorCode::Unauthorized),
            ClientError::ProtocolVersion { .. } => Some(ErrorCode::ProtocolVersion),
            _ => None,
        }
    }

    /// The error for an error frame; `handshake_url` is set while waiting for `welcome`.
    pub(crate) fn from_connection_error(handshake_url: Option<&str>, err: ConnectionError) -> Self {
        match (err.error.code, handshake_url) {
            (ErrorCode::Unauthorized, _) => {
                ClientError::Unauthorized { message: err.error.message }
            }
            (ErrorCode::ProtocolVersion, _) => {
                ClientError::ProtocolVersion { message: err.error.message }
            }
            // The server answered and says what it lacks (its store is unreachable, say): its
            // words, not a guess that the address is wrong.
            (ErrorCode::Unavailable, Some(_)) => {
                ClientError::Connection { error: err.error, fatal: true }
            }
            (_, Some(url)) => {
                ClientError::Handshake { url: url.to_owned(), message: err.error.to_string() }
            }
            (_, None) => ClientError::Connection { error: err.error, fatal: err.fatal },
        }
    }
}
