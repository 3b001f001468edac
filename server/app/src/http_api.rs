//! The HTTP endpoints beside the WebSocket, on the same listener (`outboard_shared::http`): what
//! is too big for a frame travels as a plain HTTP body, streamed both ways (an upload of a working
//! tree in, a session's diff out).
//!
//! Each request carries the same bearer token as `hello` (`Authorization: Bearer TOKEN`). Until
//! it is checked the connection is under the edge's pre-hello budget and handshake deadline
//! ([`crate::net`]); once it is, [`crate::http_common::authenticate`] lifts both and the endpoint's own caps apply.
//! Errors are JSON `{"error": ErrorBody}` with a status that matches the code, and every answer
//! closes the connection, so an authenticated connection is never reused unchecked.

use std::sync::Arc;

use axum::Router;

use crate::hub::Hub;

/// The HTTP endpoints, to be merged into the gateway's router.
/// `live` is the node's open tokens: an upload registers its token there, so that a revocation
/// ends its body as it ends a WebSocket connection.
pub fn router(hub: Arc<Hub>, live: Arc<outboard_org::tokens::LiveTokens>) -> Router {
    let sessions = format!("{}/{{id}}/{{what}}", outboard_shared::http::SESSIONS);
    let uploads = crate::uploads::Receiving::new(live);
    Router::new()
        .route(&sessions, axum::routing::get(crate::workspace_api::diff_endpoint))
        .route(outboard_shared::http::UPLOADS, axum::routing::post(crate::uploads::upload))
        .layer(axum::Extension(uploads))
        .with_state(hub)
}
