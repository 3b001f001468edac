//! The frames the server sends: [`ServerFrame`] and what it carries that is not a method's own
//! result, namely the [`Response`] envelope around a result or error, the [`EventFrame`] of a
//! session event and the [`ProgressFrame`] of a long request. (The client's frames carry a method
//! and live with the method table.)

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::connection::{ConnectionError, ErrorBody, ErrorCode};
use crate::events::SessionEvent;
use crate::handshake::Welcome;
use crate::ids::RequestId;
// Only named in a doc; the method table builds on this module, so the link goes through the crate
// root.
#[cfg(doc)]
use crate::Request;

/// Progress of a long request (a clone, an upload being unpacked, a push), sent before its
/// response on the requesting connection only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressFrame {
    /// The request this is progress of.
    pub request_id: RequestId,
    /// What is happening: `resolving`, `receiving`, `resolving_deltas`, `checking_out`,
    /// `unpacking`, `pushing`, … (new phases may appear).
    pub phase: String,
    /// Units done in this phase.
    pub done: u64,
    /// Units in this phase, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// A line a person can read, e.g. `Receiving objects: 45% (4500/10000), 40.1 MiB`.
    pub message: String,
}

/// A frame sent by the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The handshake succeeded.
    Welcome(Welcome),
    /// The answer to a [`Request`].
    Response(Response),
    /// A session event for a session this connection is attached to.
    Event(EventFrame),
    /// A connection-level error not tied to a request (bad handshake, malformed frame). When
    /// `fatal`, the server closes the connection after sending it.
    Error(ConnectionError),
    /// Progress of a request of this connection that takes a while (see [`ProgressFrame`]).
    Progress(ProgressFrame),
}

/// The answer to a request: exactly one of `result` and `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The request's id.
    pub id: RequestId,
    /// The method's result object on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// What went wrong otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl Response {
    /// A successful response carrying `result`.
    pub fn ok<T: Serialize>(id: RequestId, result: &T) -> Self {
        match serde_json::to_value(result) {
            Ok(v) => Response { id, result: Some(v), error: None },
            Err(e) => Response::err(id, ErrorBody::new(ErrorCode::Internal, e.to_string())),
        }
    }

    /// A failed response.
    pub fn err(id: RequestId, error: ErrorBody) -> Self {
        Response { id, result: None, error: Some(error) }
    }
}

/// A session event delivered to an attached connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventFrame {
    /// The event.
    pub event: SessionEvent,
}
