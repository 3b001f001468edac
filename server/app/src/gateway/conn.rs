//! One connection's reader: the handshake (`hello` within the timeout and the pre-hello budget,
//! version and token checks), then requests in order with the idle and revocation closes, long
//! requests on their own tasks ([`Connection::spawn_long`]), and the choice between answering a
//! request here and relaying it to the node that runs its session.

use std::sync::Arc;

use outboard_shared::{
    ClientFrame, ConnectionError, Empty, ErrorBody, ErrorCode, Method, Request, RequestId,
    Response, ServerFrame, SessionId, UserInfo, Welcome, MAX_FRAME_BYTES, MAX_PRE_HELLO_BYTES,
    PROTOCOL_VERSION,
};

use crate::metrics::{AuthFailure, HandshakeFailure};
use crate::session::SessionHandle;

use super::bounds::{MessageWatch, Next};
use super::forward::broadcast_presence;
use super::frames::{
    close_frame, connection_error, internal, parse_request, seconds, too_large, user_name,
    STORE_PATIENCE, STORE_UNREACHABLE,
};
use super::{bounds, relay, Connection, ProgressOut, WsStream, LONG_REQUESTS_PER_CONNECTION};

impl Connection {
    /// Forgets this connection in `session`'s room and tells the others.
    pub(super) async fn left(&self, session: &SessionId, handle: &SessionHandle) {
        if let Some(attached) = self.state.hub.leave(session, self.id) {
            broadcast_presence(handle, attached).await;
        }
    }

    pub(super) async fn send(&self, frame: ServerFrame) {
        self.out.answer(frame).await;
    }

    pub(super) fn handshake_failed(&self, why: HandshakeFailure) {
        self.state.hub.metrics().handshake_failed(why);
    }

    /// Ends the connection with `code`: the error frame, the close frame, then a lingering
    /// close (what the peer still sends is thrown away, see `net::Guarded`).
    pub(super) async fn fatal(&self, code: ErrorCode, message: &str) {
        let frame = connection_error(code, message, true);
        let close = close_frame(&frame);
        self.info.pre_hello.discard();
        self.out.send(frame, Some(close)).await;
    }

    /// Closes a connection whose token was revoked (`admin token revoke`, on any node).
    pub(super) async fn revoked(&self) {
        tracing::info!(peer = %self.info.peer, user = %user_name(&self.user), "closing a connection whose token was revoked");
        self.fatal(
            ErrorCode::Unauthorized,
            "the token of this connection was revoked; connect again with a valid token",
        )
        .await
    }

    pub(super) async fn serve(&mut self, stream: &mut WsStream) {
        // The handshake: the first frame must be a valid hello, within the timeout, and within
        // the pre-hello byte budget.
        let net = self.state.net.clone();
        let peer = self.info.peer;
        let exceeded = self.info.pre_hello.exceeded();
        let first = tokio::select! {
            _ = exceeded => {
                crate::net::log_pre_hello_cut(peer, "cut a connection that sent too much before hello");
                self.handshake_failed(HandshakeFailure::TooLarge);
                let msg = format!(
                    "more than {MAX_PRE_HELLO_BYTES} bytes before hello; send hello alone first \
                     and wait for welcome"
                );
                return self.fatal(ErrorCode::TooLarge, &msg).await;
            }
            first = tokio::time::timeout(net.handshake_timeout, bounds::next_frame(stream, None, None)) => first,
        };
        let first = match first {
            Ok(Next::Text(text)) => text,
            Ok(Next::Bad(msg)) => {
                self.handshake_failed(HandshakeFailure::BadHello);
                return self.fatal(ErrorCode::BadRequest, &msg).await;
            }
            Ok(Next::TooLarge) => {
                // A frame header before hello announcing more than a message may hold: the
                // pre-hello budget's refusal, before a byte of it is read.
                crate::net::log_pre_hello_cut(
                    peer,
                    "cut a connection that sent too much before hello",
                );
                self.handshake_failed(HandshakeFailure::TooLarge);
                let msg = format!(
                    "more than {MAX_PRE_HELLO_BYTES} bytes before hello; send hello alone first \
                     and wait for welcome"
                );
                return self.fatal(ErrorCode::TooLarge, &msg).await;
            }
            Ok(Next::Closed | Next::Idle | Next::Unfinished(_)) => return,
            Err(_) => {
                tracing::debug!(%peer, "no hello in time");
                self.handshake_failed(HandshakeFailure::Timeout);
                let msg = format!("no hello within {}; closing", seconds(net.handshake_timeout));
                return self.fatal(ErrorCode::HandshakeRequired, &msg).await;
            }
        };
        if first.len() > MAX_FRAME_BYTES {
            self.handshake_failed(HandshakeFailure::TooLarge);
            return self.fatal(ErrorCode::TooLarge, &too_large(first.len())).await;
        }
        let hello = match serde_json::from_str::<ClientFrame>(&first) {
            Ok(ClientFrame::Hello(h)) => h,
            Ok(ClientFrame::Request(_)) => {
                self.handshake_failed(HandshakeFailure::BadHello);
                return self
                    .fatal(
                        ErrorCode::HandshakeRequired,
                        "the first frame must be hello {protocol_version, token}",
                    )
                    .await;
            }
            Err(e) => {
                self.handshake_failed(HandshakeFailure::BadHello);
                return self
                    .fatal(
                        ErrorCode::HandshakeRequired,
                        &format!("the first frame must be hello: {e}"),
                    )
                    .await;
            }
        };
        if hello.protocol_version != PROTOCOL_VERSION {
            let msg = format!(
                "this server speaks protocol {PROTOCOL_VERSION}, the client {}; upgrade the older one",
                hello.protocol_version
            );
            self.handshake_failed(HandshakeFailure::ProtocolVersion);
            return self.fatal(ErrorCode::ProtocolVersion, &msg).await;
        }
        let store = self.state.hub.store();
        let authenticated = tokio::select! {
            user = store.authenticate(&hello.token) => user,
            // A read: dropping it mid-way is harmless, and the client hears why at once rather
            // than its handshake timing out.
            () = store.unreachable(STORE_PATIENCE) => {
                return self.fatal(ErrorCode::Unavailable, STORE_UNREACHABLE).await;
            }
        };
        let user = match authenticated {
            Ok(Some(user)) => user,
            Ok(None) => {
                tracing::info!(%peer, client = %hello.client, "refused a hello with an unknown token");
                self.state.hub.metrics().auth_failed(AuthFailure::UnknownToken);
                return self
                    .fatal(
                        ErrorCode::Unauthorized,
                        "the token is not valid; create one with `outboard-server admin user add NAME --org ORG`",
                    )
                    .await;
            }
            Err(e) => {
                let refusal = internal(e);
                return self.fatal(refusal.code, &refusal.message).await;
            }
        };
        if let Some(node) = &self.relayed_from {
            match self.state.relayed.admit(&user.id, &user.name) {
                Ok(slot) => self.relayed_slot = Some(slot),
                Err(why) => {
                    tracing::info!(%peer, user = %user.name, %node, "refused a relayed connection: {why}");
                    return self.fatal(ErrorCode::QuotaExceeded, &why).await;
                }
            }
        }
        self.info.pre_hello.open();
        tracing::info!(%peer, user = %user.name, org = %user.org, client = %hello.client, "connected");
        self.send(ServerFrame::Welcome(Welcome {
            protocol_version: PROTOCOL_VERSION,
            server: format!("outboard-server/{}", env!("CARGO_PKG_VERSION")),
            user: UserInfo {
                id: user.id.clone(),
                name: user.name.clone(),
                org_id: user.org_id.clone(),
                org: user.org.clone(),
            },
            connection_id: self.id.0,
        }))
        .await;
        self.user = Some(user);
        self.client = hello.client.chars().take(64).collect();
        let watched = self.state.live_tokens.watch(&hello.token);
        self.token = hello.token;

        let mut watch = MessageWatch::new(self.info.pre_hello.clone(), net.message_timeout);
        loop {
            let next = tokio::select! {
                next = bounds::next_frame(stream, Some(net.idle_timeout), Some(&mut watch)) => next,
                () = watched.revoked() => return self.revoked().await,
            };
            let text = match next {
                Next::Text(text) => text,
                Next::Bad(msg) => {
                    self.send(connection_error(ErrorCode::BadRequest, &msg, false)).await;
                    continue;
                }
                Next::Idle => {
                    tracing::info!(%peer, user = %user_name(&self.user), "closing an idle connection");
                    let msg = format!(
                        "no frame from the client for {}; closing (clients ping every {} s)",
                        seconds(net.idle_timeout),
                        outboard_shared::CLIENT_PING_INTERVAL.as_secs()
                    );
                    return self.fatal(ErrorCode::IdleTimeout, &msg).await;
                }
                Next::Unfinished(bytes) => {
                    tracing::warn!(
                        %peer, user = %user_name(&self.user), bytes, reason = "unfinished_message",
                        "cutting a connection: a message it began was not finished in time"
                    );
                    self.state.hub.metrics().connection_cut("unfinished_message");
                    let msg = format!(
                        "a message begun {} ago is still not finished ({bytes} bytes so far); \
                         send each message whole",
                        seconds(net.message_timeout)
                    );
                    return self.fatal(ErrorCode::BadRequest, &msg).await;
                }
                Next::TooLarge => {
                    tracing::warn!(
                        %peer, user = %user_name(&self.user), reason = "too_large",
                        "cutting a connection: a message over {MAX_FRAME_BYTES} bytes"
                    );
                    self.state.hub.metrics().connection_cut("too_large");
                    return self.fatal(ErrorCode::TooLarge, &too_large(MAX_FRAME_BYTES + 1)).await;
                }
                Next::Closed => return,
            };
            if text.len() > MAX_FRAME_BYTES {
                return self.fatal(ErrorCode::TooLarge, &too_large(text.len())).await;
            }
            match parse_request(&text) {
                Ok(request) => {
                    let id = request.id;
                    match self.handle(request).await {
                        Ok(Some(response)) => self.send(ServerFrame::Response(response)).await,
                        Ok(None) => {}
                        Err(error) => {
                            self.send(ServerFrame::Response(Response::err(id, error))).await
                        }
                    }
                }
                Err((Some(id), error)) => {
                    self.send(ServerFrame::Response(Response::err(id, error))).await
                }
                Err((None, error)) => {
                    self.send(ServerFrame::Error(ConnectionError { error, fatal: false })).await
                }
            }
        }
    }

    /// Runs a request that takes a while (a clone, a push, a compaction) in a task of its own, so the
    /// connection keeps serving meanwhile; its progress and then its answer are queued on the
    /// connection. At most [`LONG_REQUESTS_PER_CONNECTION`] at once.
    pub(super) fn spawn_long<F, Fut>(&self, id: RequestId, work: F) -> Result<(), ErrorBody>
    where
        F: FnOnce(Arc<crate::hub::Hub>, ProgressOut) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<Response, ErrorBody>> + Send + 'static,
    {
        let Ok(permit) = self.long_requests.clone().try_acquire_owned() else {
            return Err(ErrorBody::new(
                ErrorCode::QuotaExceeded,
                format!(
                    "{LONG_REQUESTS_PER_CONNECTION} clones, pushes or compactions are already \
                     running on this connection: wait for one to finish"
                ),
            ));
        };
        let out = self.out.clone();
        let hub = self.state.hub.clone();
        let progress_out = out.clone();
        let send: Box<dyn Fn(outboard_shared::ProgressFrame) + Send + Sync> =
            Box::new(move |frame| {
                // Progress is advisory: when the connection's queue is full it is dropped.
                progress_out.try_send(ServerFrame::Progress(frame));
            });
        let sink = crate::workspace_api::FrameSink::new(id, send);
        tokio::spawn(async move {
            let response = match work(hub, sink).await {
                Ok(response) => response,
                Err(error) => Response::err(id, error),
            };
            out.answer(ServerFrame::Response(response)).await;
            drop(permit);
        });
        Ok(())
    }

    /// Handles one request; `Ok(None)` when the handler queued its response itself. A request
    /// for a session another node runs goes there ([`relay`]).
    pub(super) async fn handle(&mut self, request: Request) -> Result<Option<Response>, ErrorBody> {
        let Some(session) = relay::relayable(&request.method).cloned() else {
            return self.handle_here(request).await;
        };
        if let Some(relay) = self.relays.get(&session) {
            if relay.alive() {
                if matches!(request.method, Method::SessionDetach(_)) {
                    // Closing the upstream detaches it there.
                    self.relays.remove(&session);
                    return Ok(Some(Response::ok(request.id, &Empty {})));
                }
                relay.forward(request)?;
                return Ok(None);
            }
            self.relays.remove(&session);
        }
        let copy = request.clone();
        let error = match self.handle_here(request).await {
            Err(e) if e.code == ErrorCode::Unavailable && e.node_url.is_some() => e,
            other => return other,
        };
        let Some(url) = error.node_url.clone().filter(|u| self.may_relay(u)) else {
            return Err(error);
        };
        let client =
            relay::Client { token: &self.token, name: &self.client, connection_id: self.id.0 };
        let node = &self.state.node_auth;
        let relay =
            relay::Relay::open(&url, node, client, session.clone(), self.out.clone()).await?;
        relay.forward(copy)?;
        self.relays.insert(session, relay);
        Ok(None)
    }

    /// Whether a request refused for running on the node at `url` may be relayed there: not to
    /// this node (a lease of its previous run, not expired yet), not from a relayed connection
    /// (relays never chain), and within [`relay::MAX_RELAYS`].
    pub(super) fn may_relay(&self, url: &str) -> bool {
        url != self.state.node_url
            && !self.client.starts_with(relay::RELAY_CLIENT_PREFIX)
            && self.relays.len() < relay::MAX_RELAYS
    }
}
