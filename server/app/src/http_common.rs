//! What every HTTP handler shares: authenticating the request's bearer token, and the error
//! answer (`ErrorBody` as JSON with its status).

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use outboard_shared::{ErrorBody, ErrorCode};

use crate::hub::Hub;
use crate::net::ConnInfo;
use outboard_store::UserRow;

/// An error answer of an HTTP endpoint.
#[derive(Debug)]
pub struct ApiError(pub ErrorBody);

impl From<ErrorBody> for ApiError {
    fn from(body: ErrorBody) -> ApiError {
        ApiError(body)
    }
}

impl ApiError {
    /// An error of `code` saying `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError(ErrorBody::new(code, message))
    }
}

/// The HTTP status that goes with an error code.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::BadRequest | ErrorCode::ProtocolVersion | ErrorCode::UnknownMethod => {
            StatusCode::BAD_REQUEST
        }
        ErrorCode::HandshakeRequired | ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::Conflict => StatusCode::CONFLICT,
        ErrorCode::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::QuotaExceeded => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::ShuttingDown | ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Lagged | ErrorCode::IdleTimeout | ErrorCode::Internal | ErrorCode::Unknown => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status_of(self.0.code);
        let body = serde_json::json!({ "error": self.0 });
        let mut response = (status, axum::Json(body)).into_response();
        close(&mut response);
        response
    }
}

/// Marks an answer as the connection's last.
pub fn close(response: &mut Response) {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// The user whose bearer token the request carries; lifts the connection's pre-hello budget and
/// handshake deadline once it is valid.
pub(crate) async fn authenticate(
    hub: &Hub,
    headers: &HeaderMap,
    info: &ConnInfo,
) -> Result<UserRow, ApiError> {
    let unauthorized = |m: &str| ApiError::new(ErrorCode::Unauthorized, m);
    let missing = |m: &str| {
        hub.metrics().auth_failed(crate::metrics::AuthFailure::MissingToken);
        unauthorized(m)
    };
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| missing("no Authorization header: send `Authorization: Bearer TOKEN`"))?;
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| missing("the Authorization header is not `Bearer TOKEN`"))?;
    let user = hub
        .store()
        .authenticate(token)
        .await
        .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?
        .ok_or_else(|| {
            hub.metrics().auth_failed(crate::metrics::AuthFailure::UnknownToken);
            unauthorized("the token is not valid (revoked, or never issued)")
        })?;
    info.pre_hello.open();
    Ok(user)
}
