//! The frames a connection sends and parses outside any session: close frames and fatal errors,
//! request parsing with the request id kept for the error, and how a store failure is told.

use std::time::Duration;

use axum::{extract::ws::CloseFrame, extract::ws::Utf8Bytes};
use outboard_shared::{
    close, ClientFrame, ConnectionError, ErrorBody, ErrorCode, Method, MethodKind, Request,
    RequestId, ServerFrame, MAX_FRAME_BYTES,
};
use outboard_store::UserRow;

/// The close frame that follows a fatal error frame: a code by kind of error and the reason
/// `"<code>: <message>"`, cut to the 123 bytes a close reason may hold.
pub(super) fn close_frame(frame: &ServerFrame) -> Option<CloseFrame> {
    let ServerFrame::Error(ConnectionError { error, .. }) = frame else {
        return None;
    };
    let code = match error.code {
        ErrorCode::TooLarge => close::TOO_BIG,
        ErrorCode::ShuttingDown => close::RESTART,
        ErrorCode::Internal => 1011,
        _ => close::POLICY,
    };
    let mut reason = format!("{}: {}", error.code.as_str(), error.message);
    if reason.len() > close::MAX_REASON_BYTES {
        let mut cut = close::MAX_REASON_BYTES;
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        reason.truncate(cut);
    }
    Some(CloseFrame { code, reason: Utf8Bytes::from(reason) })
}

/// `10 s`, `1.5 s`: a duration for a message.
pub(super) fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

pub(super) fn user_name(user: &Option<UserRow>) -> &str {
    user.as_ref().map_or("", |u| u.name.as_str())
}

/// Parses a request frame. Errors carry the request id when one could be read, so the client can
/// match the error to its request.
pub(super) fn parse_request(text: &str) -> Result<Request, (Option<RequestId>, ErrorBody)> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        (None, ErrorBody::new(ErrorCode::BadRequest, format!("the frame is not valid JSON: {e}")))
    })?;
    match value.get("type").and_then(|t| t.as_str()) {
        Some("request") => {}
        Some("hello") => {
            return Err((None, ErrorBody::new(ErrorCode::BadRequest, "already said hello")))
        }
        _ => {
            return Err((
                None,
                ErrorBody::new(
                    ErrorCode::BadRequest,
                    "expected a frame with \"type\": \"request\"",
                ),
            ))
        }
    }
    let id = value.get("id").and_then(|v| v.as_u64()).map(RequestId);
    let Some(id_value) = id else {
        return Err((
            None,
            ErrorBody::new(ErrorCode::BadRequest, "the request has no numeric \"id\""),
        ));
    };
    let method = value.get("method").and_then(|m| m.as_str()).unwrap_or_default().to_owned();
    match serde_json::from_value::<ClientFrame>(value) {
        Ok(ClientFrame::Request(r)) => Ok(r),
        Ok(ClientFrame::Hello(_)) => {
            Err((id, ErrorBody::new(ErrorCode::BadRequest, "already said hello")))
        }
        Err(_) if MethodKind::from_name(&method).is_none() => Err((
            Some(id_value),
            ErrorBody::new(
                ErrorCode::UnknownMethod,
                format!(
                    "unknown method {method:?}; this server knows {}",
                    Method::NAMES.join(", ")
                ),
            ),
        )),
        Err(e) => Err((
            Some(id_value),
            ErrorBody::new(ErrorCode::BadRequest, format!("invalid params for {method}: {e}")),
        )),
    }
}

pub(super) fn connection_error(code: ErrorCode, message: &str, fatal: bool) -> ServerFrame {
    ServerFrame::Error(ConnectionError { error: ErrorBody::new(code, message), fatal })
}

pub(super) fn too_large(len: usize) -> String {
    format!("the frame is {len} bytes; the limit is {MAX_FRAME_BYTES}: put large content in a file")
}

/// What a client is told while the store cannot be reached (its handshake, a request failing
/// on it): the server retries meanwhile, so trying again later may work.
pub(crate) const STORE_UNREACHABLE: &str =
    "the server's store (PostgreSQL) is unreachable; retrying… try again shortly";

/// How long a handshake waits on a store that is unreachable before the client is told so.
pub(super) const STORE_PATIENCE: Duration = Duration::from_secs(2);

/// A store failure as the client sees it: [`STORE_UNREACHABLE`] (`unavailable`) when the store
/// could not be reached, never a raw driver message; else `internal`.
pub(crate) fn internal(e: outboard_store::StoreError) -> ErrorBody {
    if e.is_unreachable() {
        tracing::warn!(error = %e, "a request failed: the store is unreachable");
        return ErrorBody::new(ErrorCode::Unavailable, STORE_UNREACHABLE);
    }
    ErrorBody::new(ErrorCode::Internal, e.to_string())
}
