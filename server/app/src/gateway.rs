//! The WebSocket gateway: accepts connections, runs the handshake, authenticates, routes requests,
//! and forwards the events of attached sessions.
//!
//! Each connection has a reader (this task: handshake, then requests in order) and a writer task,
//! joined by a bounded queue of outbound frames. Each attached session adds a forwarder task that
//! moves events from the session's broadcast channel into that queue. A client that stops reading
//! fills its own queue and blocks only its own forwarders; the session's broadcast never waits
//! for anyone.
//!
//! A forwarder that falls behind the broadcast is detached with a non-fatal `lagged` error that
//! names the session and the last `seq` it delivered; the client attaches again with that
//! `after_seq` and gets a fresh snapshot (durable events *and* the in-flight partial text). An
//! earlier version re-read only the missed durable events from the log, which silently lost
//! the deltas of that window and left a lagging screen half-drawn.
//!
//! Attach roles (who drives) live in the hub; this module checks them on every `turn/send` and
//! `turn/interrupt` and broadcasts a `presence` event whenever they change.
//!
//! Below the WebSocket, [`crate::net`] accepts connections under caps and a raw-byte budget.
//! Here, a connection has [`NetConfig::handshake_timeout`] after the upgrade to send `hello`, is
//! cut with `too_large` as soon as it spends the pre-hello budget, and after `hello` is closed
//! with `idle_timeout` when no frame at all (a request or a WebSocket ping) arrives for
//! [`NetConfig::idle_timeout`]. Every fatal error frame is followed by a WebSocket close frame
//! whose code and reason say why ([`outboard_shared::close`]). The token of a `hello` is never
//! logged: only the user it authenticates.
//!
//! Children: [`launch`] (start and shutdown), `conn` (a connection's reader: handshake, request
//! loop, relaying), `handlers` (one arm per method), `forward` (events to a connection),
//! `frames` (parsing and error frames), `bounds` (the outbound queue and frame limits), `relay`
//! (sessions on other nodes), `websearch`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Extension, State};
use axum::response::IntoResponse;
use futures_util::{SinkExt, StreamExt};
use outboard_shared::{ErrorCode, SessionId, MAX_FRAME_BYTES};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod bounds;
mod conn;
mod forward;
mod frames;
mod handlers;
mod launch;
mod relay;
mod websearch;

use bounds::{Cut, Out, WRITE_STALL};
use frames::user_name;
pub use launch::{launch, launch_with, node_name, LaunchError, ServerHandle, SANDBOX_CHECK_FILE};
pub use relay::check_node_url;

use crate::config::NetConfig;
use crate::hub::{ConnId, Hub};
use crate::net::ConnInfo;
use crate::session::SessionHandle;
use outboard_store::UserRow;

/// How long a graceful shutdown waits for running turns to reach a checkpoint (a running command
/// is allowed to finish within it).
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(20);

/// How long shutdown waits for the sandboxes to stop (a frozen or idle one stops in
/// milliseconds; one still running a command past the drain is left to the next start's reaper).
const SANDBOX_STOP_DEADLINE: Duration = Duration::from_secs(5);

/// The WebSocket read buffer of one connection. tungstenite's default (128 KiB) reserved per
/// connection would let 4096 idle connections pin half a gigabyte; frames larger than this are
/// still read, in several steps.
const WS_READ_BUFFER: usize = 16 * 1024;

pub use outboard_org::tokens::EMBEDDED_TOKEN_LABEL;

/// The longest focus `session/compact` takes: a sentence or two of what the summary should keep,
/// not a document (it goes into the summary request).
pub const MAX_FOCUS_CHARS: usize = 2_000;

/// The WebSocket layer refuses a message or frame above this size: no method needs more than
/// [`MAX_FRAME_BYTES`], and what a connection may hold of a message it has not finished is
/// bounded by it. Up to it a message is read whole and answered `too_large` (a near miss gets
/// the clear answer); beyond it the layer stops at the frame's header and the connection is cut
/// with `too_large` (see [`bounds`]).
const WS_HARD_LIMIT: usize = MAX_FRAME_BYTES + 64 * 1024;

/// Connection ids, unique for the life of the process.
static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

struct AppState {
    hub: Arc<Hub>,
    shutdown: CancellationToken,
    /// Upgraded WebSocket connections live outside the accept loop's own tracking; this tracks
    /// them so shutdown can wait for each to send its "restarting" frame and close.
    connections: TaskTracker,
    /// Timeouts of the handshake and of idle connections.
    net: NetConfig,
    /// Where clients and the other nodes reach this node, as registered in the store.
    node_url: String,
    /// What this node presents to the nodes it relays to, and the TLS it trusts there.
    node_auth: relay::NodeAuth,
    /// Connections relayed here from other nodes, capped per user.
    relayed: relay::RelayedUsers,
    /// The tokens of the open connections, checked against the store so a revocation closes
    /// them ([`outboard_org::tokens::LiveTokens`]).
    live_tokens: Arc<outboard_org::tokens::LiveTokens>,
}

async fn upgrade(
    ws: WebSocketUpgrade,
    State(state): State<Arc<AppState>>,
    Extension(info): Extension<ConnInfo>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    let relayed_from = relaying_node(&state, &info, &headers).await;
    if relayed_from.is_some() {
        info.leave_per_ip();
    }
    ws.max_message_size(WS_HARD_LIMIT)
        .max_frame_size(WS_HARD_LIMIT)
        .read_buffer_size(WS_READ_BUFFER)
        .on_upgrade(move |socket| {
            let token = state.connections.token();
            async move {
                connection(socket, state, info, relayed_from).await;
                drop(token);
            }
        })
}

/// The node a connection is relayed from, when its [`relay::RELAY_HEADER`] names a node of the
/// store (not stopped) and the key whose hash that node registered. A header that does not is
/// logged (at most once a second) and the connection counted as a client's.
async fn relaying_node(
    state: &AppState,
    info: &ConnInfo,
    headers: &axum::http::HeaderMap,
) -> Option<String> {
    let value = headers.get(relay::RELAY_HEADER)?;
    let (id, key) = value.to_str().ok()?.split_once(' ')?;
    let found = state.hub.store().relay_key_hash(id).await;
    let wanted = outboard_base::digest::hex_sha256(key.as_bytes());
    match found {
        Ok(Some(hash)) if hash == wanted => Some(id.to_owned()),
        Ok(_) => {
            crate::net::log_bad_relay(info.peer, "no running node has that id and key");
            None
        }
        Err(e) => {
            crate::net::log_bad_relay(info.peer, &format!("the store cannot say: {e}"));
            None
        }
    }
}

/// Connections the metrics listener serves at once: a Prometheus server or two and a person with
/// curl; more is a misconfiguration (or a flood) and is answered 503.
pub const METRICS_CONNECTIONS: usize = 8;

/// How long a scrape waits for the store's count of sessions: a wedged store must not wedge the
/// scrape that would show it (its queue depth is read without the store).
const SCRAPE_STORE_WAIT: Duration = Duration::from_secs(2);

/// `GET /metrics`: the exposition, with the values read at scrape time.
async fn scrape(
    State(hub): State<Arc<Hub>>,
    Extension(info): Extension<ConnInfo>,
) -> impl IntoResponse {
    // A scraper keeps its connection alive: it is let past the pre-hello budget and deadline,
    // which only the metrics' own connection cap bounds here.
    info.pre_hello.open();
    let sessions = match tokio::time::timeout(SCRAPE_STORE_WAIT, hub.store().session_counts()).await
    {
        Ok(Ok(counts)) => Some(counts),
        Ok(Err(e)) => {
            tracing::warn!("metrics: cannot count the sessions: {e}");
            None
        }
        Err(_) => {
            tracing::warn!(
                "metrics: the store did not count the sessions within {SCRAPE_STORE_WAIT:?}"
            );
            None
        }
    };
    let now = crate::metrics::Scrape {
        store_queue_depth: hub.store().queue_depth(),
        session_actors: hub.live_actors(),
        sessions,
    };
    let text = hub.metrics().render(&now);
    ([(axum::http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text)
}

async fn connection(
    socket: WebSocket,
    state: Arc<AppState>,
    info: ConnInfo,
    relayed_from: Option<String>,
) {
    let _counted = state.hub.metrics().connection();
    let (mut sink, mut stream) = socket.split();
    let (out, mut out_rx) = Out::new();
    let cutter = out.clone_cutter();
    let writer = tokio::spawn(async move {
        while let Some(queued) = out_rx.recv().await {
            let close = queued.close.clone();
            match tokio::time::timeout(WRITE_STALL, sink.send(WsMessage::Text(queued.text.clone())))
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break,
                Err(_) => {
                    cutter.cut(Cut::WriteStall);
                    break;
                }
            }
            drop(queued);
            if let Some(close) = close {
                let _ = tokio::time::timeout(WRITE_STALL, sink.send(WsMessage::Close(close))).await;
                break;
            }
        }
    });

    let mut conn = Connection {
        id: ConnId(NEXT_CONN.fetch_add(1, Ordering::Relaxed)),
        info: info.clone(),
        state: state.clone(),
        out: out.clone(),
        user: None,
        client: String::new(),
        token: String::new(),
        relayed_from,
        relayed_slot: None,
        attached: HashMap::new(),
        relays: HashMap::new(),
        long_requests: Arc::new(tokio::sync::Semaphore::new(LONG_REQUESTS_PER_CONNECTION)),
    };
    let shutdown = state.shutdown.clone();
    tokio::select! {
        _ = conn.serve(&mut stream) => {}
        () = out.cut_done() => {}
        _ = shutdown.cancelled() => {
            // A client that reads nothing does not hold the shutdown: its queue may be full.
            let notice = conn.fatal(
                ErrorCode::ShuttingDown,
                "the server is shutting down for a restart; reconnect in a moment",
            );
            let _ = tokio::time::timeout(Duration::from_secs(2), notice).await;
        }
    }
    if let Some(why) = out.cut_for() {
        tracing::warn!(
            peer = %info.peer, user = %user_name(&conn.user), queued = out.queued_bytes(),
            reason = why.reason(), "cutting a connection: {}", why.describe()
        );
        state.hub.metrics().connection_cut(why.reason());
    }
    conn.relays.clear();
    let attached: Vec<_> = conn.attached.drain().collect();
    for (session_id, a) in attached {
        a.forwarder.abort();
        conn.left(&session_id, &a.handle).await;
    }
    drop(conn);
    drop(out);
    let _ = writer.await;
}

struct Attachment {
    handle: SessionHandle,
    forwarder: JoinHandle<()>,
}

struct Connection {
    id: ConnId,
    /// The peer and its pre-hello budget.
    info: ConnInfo,
    state: Arc<AppState>,
    out: Out,
    user: Option<UserRow>,
    /// The client name from `hello`, shown in presence.
    client: String,
    /// The token of its `hello`, for relays to other nodes (memory only, never logged).
    token: String,
    /// The node this connection is an authenticated relay from ([`relaying_node`]).
    relayed_from: Option<String>,
    /// Its place under its user's cap of relayed connections, once `hello` named the user.
    relayed_slot: Option<relay::RelayedSlot>,
    attached: HashMap<SessionId, Attachment>,
    /// Sessions this connection reaches on the nodes that run them ([`relay`]).
    relays: HashMap<SessionId, relay::Relay>,
    /// Permits for [`Connection::spawn_long`].
    long_requests: Arc<tokio::sync::Semaphore>,
}

/// Clones and pushes one connection may have running at once: each holds a git process and,
/// for a clone, a staging directory; a client that wants more opens more sessions in turn.
pub const LONG_REQUESTS_PER_CONNECTION: usize = 4;

/// Where a long request's progress goes.
type ProgressOut =
    crate::workspace_api::FrameSink<Box<dyn Fn(outboard_shared::ProgressFrame) + Send + Sync>>;

type WsStream = futures_util::stream::SplitStream<WebSocket>;
