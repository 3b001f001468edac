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

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Utf8Bytes};
use axum::extract::ws::{Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Extension, State};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use futures_util::{SinkExt, StreamExt};
use outboard_shared::{
    close, ClientFrame, ConnectionError, Empty, ErrorBody, ErrorCode, EventFrame, EventKind,
    Method, MethodKind, PresenceEntry, Request, RequestId, Response, Role, ServerFrame,
    SessionAttachResponse, SessionCreateResponse, SessionId, SessionListResponse,
    TurnInterruptResponse, UserInfo, Welcome, MAX_APPROVAL_REASON_BYTES, MAX_FRAME_BYTES,
    MAX_PRE_HELLO_BYTES, MAX_QUESTION_ANSWER_BYTES, PROTOCOL_VERSION,
};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod bounds;
mod relay;
mod websearch;

use bounds::{Cut, MessageWatch, Next, Out, WRITE_STALL};
pub use relay::check_node_url;

use crate::config::{NetConfig, ServerConfig};
use crate::hub::{ConnId, Hub, Member};
use crate::metrics::{AuthFailure, HandshakeFailure};
use crate::net::ConnInfo;
use crate::paging::{self, Keep};
use crate::session::SessionHandle;
use outboard_store::{Durability, Store, UserRow};

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

/// A running server.
pub struct ServerHandle {
    addr: SocketAddr,
    state: Arc<AppState>,
    task: JoinHandle<()>,
    /// Every session's sandbox, stopped at shutdown.
    sandboxes: Option<outboard_sandbox::pool::LivePool>,
    /// The sandbox check started at launch (`None` when sessions run on sandbox hosts).
    preflight: Option<outboard_sandbox::preflight::Preflight>,
}

/// The file in the data directory remembering that this installation passed the sandbox check
/// (see `outboard_sandbox::precheck`).
pub const SANDBOX_CHECK_FILE: &str = "sandbox-check";

impl ServerHandle {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Waits for the sandbox check started at launch: `Err` with what to install or configure
    /// when this host cannot run sandboxes. A long-running server reports that at its start.
    pub async fn sandbox_checked(&self) -> Result<(), LaunchError> {
        match &self.preflight {
            Some(preflight) => preflight.wait().await.map_err(LaunchError::Sandbox),
            None => Ok(()),
        }
    }

    /// `ws://ADDR`, or `wss://ADDR` when serving TLS, for clients.
    pub fn url(&self) -> String {
        let scheme = if self.state.net.tls.is_some() { "wss" } else { "ws" };
        format!("{scheme}://{}", self.addr)
    }

    /// Creates the org and user if missing and returns a fresh bearer token for the user, labelled
    /// `embedded pid=PID` (this process): [`ServerHandle::revoke_stale_tokens`] tells dead ones.
    pub async fn mint_token(
        &self,
        org: &str,
        user: &str,
    ) -> Result<String, outboard_store::StoreError> {
        let label = format!("{EMBEDDED_TOKEN_LABEL} pid={}", std::process::id());
        let (_, token) = self.state.hub.store().mint_token(org, user, &label).await?;
        Ok(token)
    }

    /// Deletes a token: the next `hello` with it is refused.
    pub async fn revoke_token(&self, token: &str) -> Result<(), outboard_store::StoreError> {
        outboard_org::tokens::revoke_token(self.state.hub.store(), token).await
    }

    /// Deletes the embedded tokens whose process is gone (a crash, a kill): see
    /// [`outboard_org::tokens::revoke_stale_embedded`]. Returns how many.
    pub async fn revoke_stale_tokens(&self) -> Result<usize, outboard_store::StoreError> {
        outboard_org::tokens::revoke_stale_embedded(self.state.hub.store()).await
    }

    /// How many session actors run now: idle ones stop after
    /// [`crate::config::Limits::session_idle`] (for tests and monitoring).
    pub fn live_session_actors(&self) -> usize {
        self.state.hub.live_actors()
    }

    /// Serves `GET /metrics` (the Prometheus text of [`crate::metrics`]) on `listener`, a port of
    /// its own so the exposition is never on the clients' one, until shutdown. Returns the
    /// address it listens on.
    pub fn serve_metrics(
        &self,
        listener: tokio::net::TcpListener,
    ) -> Result<SocketAddr, LaunchError> {
        let addr = listener.local_addr().map_err(LaunchError::Listener)?;
        let router =
            Router::new().route("/metrics", get(scrape)).with_state(self.state.hub.clone());
        let config = NetConfig {
            max_connections: METRICS_CONNECTIONS,
            max_connections_per_ip: METRICS_CONNECTIONS,
            tls: None,
            ..self.state.net.clone()
        };
        tokio::spawn(crate::net::serve(crate::net::Edge {
            listener,
            router,
            caps: crate::net::Caps::new(METRICS_CONNECTIONS, METRICS_CONNECTIONS),
            config,
            tls: None,
            shutdown: self.state.shutdown.clone(),
        }));
        tracing::info!(%addr, "serving metrics");
        Ok(addr)
    }

    /// Graceful shutdown: turns stop at their next checkpoint (bounded by [`DRAIN_DEADLINE`]),
    /// then connected clients are told the server is restarting and the listener closes. Turns
    /// left open in the log resume when the server starts again.
    pub async fn shutdown(self) {
        let store = self.state.hub.store().clone();
        // Other nodes see this one going; it takes no lease from here on.
        let _ = store.set_node_state("draining").await;
        if !self.state.hub.drain(DRAIN_DEADLINE).await {
            tracing::warn!("some turns did not reach a checkpoint in time; they resume at start");
        }
        if let Some(pool) = &self.sandboxes {
            pool.stop_all(SANDBOX_STOP_DEADLINE).await;
        }
        // The turns stopped at a checkpoint stay open in the log: given back, another node of
        // the store takes them over at once (or this one when it starts again). A turn still
        // running past the deadline is fenced once another node takes its session.
        match store.release_all_leases().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(sessions = n, "gave the sessions' leases back"),
            Err(e) => tracing::warn!("cannot give the leases back (they expire): {e}"),
        }
        // Said before the exit, so nobody waits for this node's heartbeat to go stale.
        let _ = store.set_node_state("stopped").await;
        self.state.shutdown.cancel();
        self.state.connections.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            let _ = self.task.await;
            self.state.connections.wait().await;
        })
        .await;
    }
}

/// Why the server could not start. Each message says what to fix; [`LaunchError::is_configuration`]
/// tells a problem of this host or of the configuration (fix it and start again) from a failure
/// at run time.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The data directory or database file cannot be made private.
    #[error(transparent)]
    DataDir(#[from] crate::config::DataDirError),
    /// The TLS certificate or key is unusable.
    #[error(transparent)]
    Tls(#[from] crate::net::TlsError),
    /// The database cannot be opened or migrated.
    #[error(
        "cannot open the database: {0} — check that the data directory (--data/OUTBOARD_DATA_DIR) \
         is writable by this user and not in use by a newer outboard"
    )]
    Store(#[source] outboard_store::StoreError),
    /// The sandbox backend cannot run commands on this host (bubblewrap missing or unusable,
    /// user namespaces disabled); the message says what to install or which sysctl to check.
    #[error("{0}")]
    Sandbox(#[source] outboard_sandbox::SandboxError),
    /// A model's configuration is unusable (a base URL that is not a URL).
    #[error("{0} — fix --base-url/OUTBOARD_BASE_URL or the model file")]
    Models(#[source] outboard_llm::models::ModelsError),
    /// The listening socket cannot be used.
    #[error("cannot use the listening socket: {0} — check --listen")]
    Listener(#[source] std::io::Error),
    /// The sessions whose turns were cut short by the last stop cannot be read.
    #[error("cannot find the turns to resume: {0} — check the database in the data directory")]
    Resume(#[source] outboard_store::StoreError),
    /// The key that seals the org secrets cannot be read or made.
    #[error("{0}")]
    SecretKey(#[source] outboard_org::secrets::SecretError),
    /// The CA that relays to other nodes trust (`--node-ca`) cannot be read.
    #[error("{0} — give a PEM file of the CA that signs the nodes' certificates")]
    NodeCa(String),
}

impl LaunchError {
    /// Whether the cause is this host's setup or the configuration (a missing bubblewrap, a
    /// data directory of another user, a bad TLS file or model URL) rather than a failure while
    /// starting: a CLI reports those as a usage/configuration error.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            LaunchError::DataDir(_)
                | LaunchError::Tls(_)
                | LaunchError::NodeCa(_)
                | LaunchError::Sandbox(_)
                | LaunchError::Models(_)
                | LaunchError::SecretKey(_)
        )
    }
}

/// Opens the store, starts the sandbox check (see [`ServerHandle::sandbox_checked`]), resumes the turns the last stop cut short, and
/// starts serving on `listener`. Returns once the server accepts connections.
pub async fn launch(
    listener: tokio::net::TcpListener,
    config: ServerConfig,
) -> Result<ServerHandle, LaunchError> {
    launch_with(listener, config, true).await
}

/// Like [`launch`]; with `resume_turns` false, turns left open in the log are not resumed (a
/// short-lived embedded server that only lists sessions or reads org files must not start model
/// calls, nor cut those turns short again a moment later; the next full start resumes them).
pub async fn launch_with(
    listener: tokio::net::TcpListener,
    config: ServerConfig,
    resume_turns: bool,
) -> Result<ServerHandle, LaunchError> {
    crate::config::secure_data_dir(&config.data_dir)?;
    let tls = match &config.net.tls {
        Some(files) => Some(crate::net::tls_acceptor(files)?),
        None => None,
    };
    // Opening runs the migrations and may read a large WAL back: off the async workers.
    let spec = config.store_spec();
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let observer: Option<std::sync::Arc<dyn outboard_store::JobObserver>> =
        Some(std::sync::Arc::new(metrics.store()));
    let store =
        tokio::task::spawn_blocking(move || Store::open_spec(&spec, Durability::Normal, observer))
            .await
            .map_err(|_| LaunchError::Store(outboard_store::StoreError::Closed))?
            .map_err(LaunchError::Store)?;
    let mut store = store;
    store.set_lease_time(config.limits.lease);
    let mut config = config;
    // Sandbox scratch files live in the private data dir, and one live-sandbox registry serves
    // every session of this server (the `live_sandboxes` quota).
    if config.sandbox.scratch_dir.is_none() {
        config.sandbox.scratch_dir = Some(config.data_dir.join("run"));
    }
    if config.sandbox.live_pool.is_none() {
        config.sandbox.live_pool = Some(outboard_sandbox::pool::LivePool::default());
    }
    config.sandbox.metrics = Some(outboard_sandbox::Observer(Arc::new(metrics.sandbox())));
    // Before this process makes any sandbox: kill what dead servers left frozen.
    outboard_sandbox::reap_orphans().await;
    // A server that places its sessions on sandbox hosts runs no command itself. The check runs
    // beside the start (or not at all, when this installation passed it before): the first model
    // request needs no sandbox, and a command that does waits for the check and fails with its
    // explanation; `serve` waits for it before announcing itself ([`ServerHandle::sandbox_checked`]).
    if !config.place_on_hosts {
        let memo = config.data_dir.join(SANDBOX_CHECK_FILE);
        config.sandbox.preflight =
            Some(outboard_sandbox::precheck::start(&config.sandbox, Some(&memo)));
    }
    let preflight = config.sandbox.preflight.clone();
    let sandboxes = config.sandbox.live_pool.clone();
    let models = outboard_llm::models::Models::new(&config.models, config.limits.context_window)
        .map_err(LaunchError::Models)?
        .with_metrics(&(metrics.clone() as Arc<dyn outboard_llm::CallMetrics>));
    let key =
        outboard_org::secrets::SecretKey::load(&config.data_dir).map_err(LaunchError::SecretKey)?;
    let secrets = outboard_org::secrets::Secrets::new(store.clone(), key);
    let addr = listener.local_addr().map_err(LaunchError::Listener)?;
    let node_url = config.net.node_url_for(addr, &node_name());
    register_node(&store, &node_url).await?;
    if let Err(why) = relay::check_node_url(&node_url) {
        tracing::warn!(node_url = %node_url, "other nodes will not relay clients to this node: {why}");
    }
    let (node_auth, key_hash) =
        relay::NodeAuth::new(&store.node().id, config.net.node_ca.as_deref())
            .map_err(LaunchError::NodeCa)?;
    store.set_relay_key_hash(&key_hash).await.map_err(LaunchError::Store)?;
    // Sandboxes' network proxies refuse this server's own port on every local address.
    config.sandbox.server_ports.push(addr.port());
    let net = config.net.clone();
    let state = Arc::new(AppState {
        hub: Arc::new(
            Hub::new(store, Arc::new(models), config).with_secrets(secrets).with_metrics(metrics),
        ),
        shutdown: CancellationToken::new(),
        connections: TaskTracker::new(),
        net: net.clone(),
        node_url,
        node_auth,
        relayed: relay::RelayedUsers::new(net.max_connections_per_ip),
        live_tokens: Arc::default(),
    });
    let changes = state.hub.org_fs().subscribe();
    tokio::spawn(crate::files_api::forward_changes(
        state.hub.clone(),
        changes,
        state.shutdown.clone(),
    ));
    // Org file changes other nodes of the store commit reach this node's sessions too.
    if let Some(committed) = state.hub.store().org_file_changes(ORG_FILE_NOTICES) {
        tokio::spawn(announce_committed(state.hub.clone(), committed, state.shutdown.clone()));
    }
    let resumed =
        if resume_turns { state.hub.resume_all().await.map_err(LaunchError::Resume)? } else { 0 };
    if resumed > 0 {
        tracing::info!(sessions = resumed, "resuming turns cut short by the last stop");
    }
    tokio::spawn(heartbeat(state.hub.clone(), state.shutdown.clone()));
    // `admin token revoke` runs against the store: each node notices by itself.
    tokio::spawn(state.live_tokens.clone().run(
        state.hub.store().clone(),
        outboard_org::tokens::REVOCATION_CHECK_EVERY,
        state.shutdown.clone(),
    ));
    if resume_turns {
        tokio::spawn(take_over(state.hub.clone(), state.shutdown.clone()));
    }
    crate::uploads::start_sweeper(
        state.hub.store().clone(),
        state.hub.config().data_dir.clone(),
        state.shutdown.clone(),
    )
    .await;
    let app = Router::new()
        .route("/", get(upgrade))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(state.clone())
        .merge(crate::http_api::router(state.hub.clone(), state.live_tokens.clone()));
    let edge = crate::net::Edge {
        listener,
        router: app,
        caps: crate::net::Caps::new(net.max_connections, net.max_connections_per_ip),
        config: net.clone(),
        tls,
        shutdown: state.shutdown.clone(),
    };
    let task = tokio::spawn(crate::net::serve(edge));
    tracing::info!(
        %addr,
        tls = net.tls.is_some(),
        max_connections = net.max_connections,
        max_connections_per_ip = net.max_connections_per_ip,
        handshake_timeout_ms = net.handshake_timeout.as_millis() as u64,
        idle_timeout_ms = net.idle_timeout.as_millis() as u64,
        "listening"
    );
    Ok(ServerHandle { addr, state, task, sandboxes, preflight })
}

/// This host's name, for `admin nodes`.
pub fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Records this node as serving (and takes over the leases of a node of this host whose process
/// died).
async fn register_node(store: &Store, url: &str) -> Result<(), LaunchError> {
    store.heartbeat(&node_name(), url, "serving").await.map_err(LaunchError::Store)?;
    tracing::info!(node = %store.node().id, backend = ?store.backend(), "node registered");
    Ok(())
}

/// Renews this node's leases and heartbeat every third of the lease time until shutdown; the
/// actors of sessions whose lease another node took over meanwhile stop.
async fn heartbeat(hub: Arc<Hub>, shutdown: CancellationToken) {
    let every = hub.store().node().lease / 3;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(every) => {}
        }
        match hub.store().renew_leases().await {
            Ok(lost) if !lost.is_empty() => {
                tracing::warn!(sessions = lost.len(), "leases taken over by other nodes");
                hub.leases_lost(&lost);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "cannot renew this node's leases"),
        }
        match hub.store().reassert_node().await {
            Ok(Some(found)) => tracing::warn!(
                found = %found,
                "this node's row in the store had been changed (its URL or relay key); wrote \
                 this node's own back: check who can write to the store"
            ),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot check this node's row in the store"),
        }
    }
}

/// Org file changes of other nodes that may wait to be announced here.
const ORG_FILE_NOTICES: usize = 256;

/// Announces, until shutdown, the org file versions any node commits (this node's own are
/// announced once, when written: [`outboard_org::orgfs::OrgFs::announce_committed`] skips them).
async fn announce_committed(
    hub: Arc<Hub>,
    mut committed: mpsc::Receiver<i64>,
    shutdown: CancellationToken,
) {
    loop {
        let id = tokio::select! {
            () = shutdown.cancelled() => return,
            id = committed.recv() => match id {
                Some(id) => id,
                None => return,
            },
        };
        if let Err(e) = hub.org_fs().announce_committed(id).await {
            tracing::warn!(error = %e, "cannot read an org file change another node made");
        }
    }
}

/// How often a node looks for open turns no node runs: a quarter of the lease time, within
/// these bounds, so a killed node's turns resume within about the lease time plus this.
const TAKE_OVER_EVERY: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_millis(2500));

/// Takes over, until shutdown, the open turns no node runs ([`Hub::take_over`]).
async fn take_over(hub: Arc<Hub>, shutdown: CancellationToken) {
    let every = (hub.store().node().lease / 4).clamp(TAKE_OVER_EVERY.0, TAKE_OVER_EVERY.1);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(every) => {}
        }
        match hub.take_over().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(sessions = n, "took over turns another node left"),
            Err(e) => tracing::warn!(error = %e, "cannot look for turns to take over"),
        }
    }
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

/// The close frame that follows a fatal error frame: a code by kind of error and the reason
/// `"<code>: <message>"`, cut to the 123 bytes a close reason may hold.
fn close_frame(frame: &ServerFrame) -> Option<CloseFrame> {
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

impl Connection {
    /// Forgets this connection in `session`'s room and tells the others.
    async fn left(&self, session: &SessionId, handle: &SessionHandle) {
        if let Some(attached) = self.state.hub.leave(session, self.id) {
            broadcast_presence(handle, attached).await;
        }
    }

    async fn send(&self, frame: ServerFrame) {
        self.out.answer(frame).await;
    }

    fn handshake_failed(&self, why: HandshakeFailure) {
        self.state.hub.metrics().handshake_failed(why);
    }

    /// Ends the connection with `code`: the error frame, the close frame, then a lingering
    /// close (what the peer still sends is thrown away, see `net::Guarded`).
    async fn fatal(&self, code: ErrorCode, message: &str) {
        let frame = connection_error(code, message, true);
        let close = close_frame(&frame);
        self.info.pre_hello.discard();
        self.out.send(frame, Some(close)).await;
    }

    /// Closes a connection whose token was revoked (`admin token revoke`, on any node).
    async fn revoked(&self) {
        tracing::info!(peer = %self.info.peer, user = %user_name(&self.user), "closing a connection whose token was revoked");
        self.fatal(
            ErrorCode::Unauthorized,
            "the token of this connection was revoked; connect again with a valid token",
        )
        .await
    }

    async fn serve(&mut self, stream: &mut WsStream) {
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
    fn spawn_long<F, Fut>(&self, id: RequestId, work: F) -> Result<(), ErrorBody>
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
    async fn handle(&mut self, request: Request) -> Result<Option<Response>, ErrorBody> {
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
    fn may_relay(&self, url: &str) -> bool {
        url != self.state.node_url
            && !self.client.starts_with(relay::RELAY_CLIENT_PREFIX)
            && self.relays.len() < relay::MAX_RELAYS
    }

    async fn handle_here(&mut self, request: Request) -> Result<Option<Response>, ErrorBody> {
        let Some(user) = self.user.clone() else {
            return Err(ErrorBody::new(ErrorCode::HandshakeRequired, "send hello first"));
        };
        let hub = &self.state.hub;
        let id = request.id;
        match request.method {
            Method::Ping(_) => Ok(Some(Response::ok(id, &Empty {}))),
            Method::SessionCreate(outboard_shared::SessionCreateParams {
                title,
                workspace,
                source: Some(spec),
                network,
                context_window,
                model,
            }) => {
                if workspace.is_some() {
                    return Err(ErrorBody::new(
                        ErrorCode::BadRequest,
                        "give a session either a workspace or a source, not both",
                    ));
                }
                let title = title.unwrap_or_default().trim().to_owned();
                self.spawn_long(id, move |hub, sink| async move {
                    let row = crate::workspace_api::create(
                        &hub,
                        &user,
                        &title,
                        spec,
                        network,
                        crate::hub::ModelChoice { context_window, model: model.as_deref() },
                        &sink,
                    )
                            .await?;
                    tracing::info!(session = %row.id, user = %user.name, "session created from a source");
                    Ok(Response::ok(id, &SessionCreateResponse { session: hub.session_info(&row) }))
                })?;
                Ok(None)
            }
            Method::SessionPush(p) => {
                self.spawn_long(id, move |hub, sink| async move {
                    let pushed = crate::workspace_api::push(&hub, &user, p, &sink).await?;
                    Ok(Response::ok(id, &pushed))
                })?;
                Ok(None)
            }
            Method::SessionRestore(p) => {
                let restored = crate::workspace_api::restore(hub, &user, &p.session_id).await?;
                Ok(Some(Response::ok(id, &restored)))
            }
            Method::SessionDelete(p) => {
                crate::workspace_api::delete(hub, &user, &p.session_id).await?;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::SessionCreate(p) => {
                let title = p.title.unwrap_or_default();
                let choice = crate::hub::ModelChoice {
                    context_window: p.context_window,
                    model: p.model.as_deref(),
                };
                let mut row = hub.new_session_row(&user, title.trim(), choice).await?;
                row.network = p.network;
                if let Some(requested) = &p.workspace {
                    row.workspace = Some(hub.client_workspace(requested).await?);
                } else {
                    row.host = hub.place().await?;
                }
                // Title length and sessions per hour are the org's quotas.
                let row = outboard_org::quota::create_session_row(hub.store(), &user, row).await?;
                tracing::info!(session = %row.id, user = %user.name, "session created");
                Ok(Some(Response::ok(
                    id,
                    &SessionCreateResponse { session: hub.session_info(&row) },
                )))
            }
            Method::SessionList(p) => {
                let limit = p.limit.unwrap_or(100).clamp(1, 1000);
                let rows =
                    hub.store().list_sessions(&user.org_id, limit).await.map_err(internal)?;
                let sessions = rows
                    .iter()
                    .map(|r| outboard_shared::SessionInfo {
                        attached: hub.presence(&r.id),
                        ..r.info(outboard_llm::context::context_window)
                    })
                    .collect();
                Ok(Some(Response::ok(id, &SessionListResponse { sessions })))
            }
            Method::UsageReport(p) => {
                if let Some(session) = &p.session_id {
                    hub.visible_session(&user, session).await?;
                }
                let since = p.since.as_deref().map(usage_since).transpose()?;
                let rows = hub
                    .store()
                    .usage_report(&user.org_id, p.by, p.session_id, since)
                    .await
                    .map_err(internal)?;
                Ok(Some(Response::ok(id, &outboard_shared::UsageReportResponse { rows })))
            }
            Method::SessionAttach(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                let current = hub.role(&p.session_id, self.id);
                if p.role == Role::Driver && current != Some(Role::Driver) {
                    if row.owner_id == user.id {
                        // The owner takes the wheel back: a grant to someone else ends.
                        hub.remember_grant(&row.id, None).await?;
                    } else if hub.granted_to(&row.id).await? != Some(user.id.clone()) {
                        return Err(ErrorBody::new(
                            ErrorCode::Forbidden,
                            format!(
                                "only the session's owner ({}) can drive it, or whoever they \
                                 hand it to; attach as a watcher and ask with /drive",
                                row.owner
                            ),
                        ));
                    }
                }
                let old_handle = self.attached.remove(&p.session_id).map(|old| {
                    old.forwarder.abort();
                    old.handle
                });
                // A re-attach (after a lag or a reconnect) keeps the role this connection has.
                let role = match (p.role, current) {
                    (Role::Watcher, Some(Role::Driver)) => Role::Driver,
                    (asked, _) => asked,
                };
                let (handle, attached) = match hub.attach(&row, p.after_seq).await {
                    Ok(attached) => attached,
                    Err(e) => {
                        // Not attached here any more (the session may run on another node now,
                        // and this connection follow it there).
                        if let Some(presence) = hub.leave(&p.session_id, self.id) {
                            if let Some(h) = &old_handle {
                                broadcast_presence(h, presence).await;
                            }
                        }
                        return Err(e);
                    }
                };
                // Everything up to the session's last seq is in the snapshot (or before `after_seq`).
                let last_seq = attached.session.last_seq;
                let mut snapshot = SessionAttachResponse {
                    session: hub.session_info(&attached.session),
                    role,
                    events: Vec::new(),
                    in_flight: attached.in_flight,
                    has_more: true,
                    cursor: Some(last_seq),
                    // Counted in the frame's size now, cut to those older than the page below.
                    standing: attached.standing,
                };
                let keep = if p.after_seq.is_some() { Keep::Oldest } else { Keep::Newest };
                snapshot.events =
                    paging::fit(paging::response_len(id, &snapshot), attached.events, keep);
                // Without `after_seq` older history is paged with `session/history`; with it
                // the rest up to `last_seq` is streamed by the forwarder before live events.
                let sent_to =
                    snapshot.events.last().map_or(p.after_seq.unwrap_or(last_seq), |e| e.seq);
                snapshot.cursor = snapshot.events.first().map(|e| e.seq);
                let oldest = snapshot.cursor.unwrap_or(u64::MAX);
                snapshot.standing.retain(|e| e.seq < oldest);
                snapshot.has_more = p.after_seq.is_none() && snapshot.cursor.is_some_and(|c| c > 1);
                // Attached before the answer leaves: a request the client makes once it has the
                // answer (on any connection: a grant to this user) finds it in the room.
                let member = Member {
                    conn: self.id,
                    user_id: user.id.clone(),
                    user: user.name.clone(),
                    client: self.client.clone(),
                };
                let presence = hub.join(&p.session_id, member, role);
                // The snapshot goes into the queue before the forwarder starts, so it precedes
                // every live event; events broadcast meanwhile wait in `live`.
                self.send(ServerFrame::Response(Response::ok(id, &snapshot))).await;
                let catch_up = (sent_to < last_seq).then(|| CatchUp {
                    store: hub.store().clone(),
                    from: sent_to,
                    until: last_seq,
                });
                let forwarder = tokio::spawn(forward(
                    p.session_id.clone(),
                    attached.live,
                    self.out.clone(),
                    last_seq,
                    catch_up,
                ));
                broadcast_presence(&handle, presence).await;
                self.attached.insert(p.session_id, Attachment { handle, forwarder });
                Ok(None)
            }
            Method::SessionHistory(p) => {
                hub.visible_session(&user, &p.session_id).await?;
                let page =
                    paging::history(hub.store(), id, &p.session_id, p.before, p.limit).await?;
                Ok(Some(page))
            }
            Method::SessionDetach(p) => {
                if let Some(old) = self.attached.remove(&p.session_id) {
                    old.forwarder.abort();
                    self.left(&p.session_id, &old.handle).await;
                }
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::TurnSend(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                paging::message_fits(&p.text)?;
                let sent = hub.send(&row, p.text, p.images, &user.name).await?;
                Ok(Some(Response::ok(id, &sent)))
            }
            Method::SessionCompact(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                let focus = p.focus.map(|f| f.trim().to_owned()).filter(|f| !f.is_empty());
                if let Some(f) = focus.as_ref().filter(|f| f.chars().count() > MAX_FOCUS_CHARS) {
                    return Err(ErrorBody::new(
                        ErrorCode::BadRequest,
                        format!(
                            "the focus of a compaction is {} characters; say it in at most \
                             {MAX_FOCUS_CHARS}",
                            f.chars().count()
                        ),
                    ));
                }
                // A summary takes as long as a model call: the connection keeps serving (an
                // interrupt, a detach) meanwhile.
                self.spawn_long(id, move |hub, _| async move {
                    let compacted = hub.compact(&row, focus).await?;
                    Ok(Response::ok(id, &compacted))
                })?;
                Ok(None)
            }
            Method::TurnInterrupt(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                let interrupted = hub.interrupt(&row).await?;
                Ok(Some(Response::ok(id, &TurnInterruptResponse { interrupted })))
            }
            Method::SessionKillTask(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                hub.kill_task(&row, p.shell_id).await?;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::ApprovalAnswer(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                // Who answers is a right of the user (the owner, the driver), whichever of
                // their connections asks: never any org member's connection.
                hub.may_answer(&row, &user).await?;
                let reason = p.reason.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
                if reason.as_ref().is_some_and(|r| r.len() > MAX_APPROVAL_REASON_BYTES) {
                    return Err(ErrorBody::new(
                        ErrorCode::BadRequest,
                        format!("say the reason in at most {MAX_APPROVAL_REASON_BYTES} bytes"),
                    ));
                }
                let answer = outboard_harness::approvals::Answer {
                    decision: p.decision,
                    scope: p.scope,
                    by: user.name.clone(),
                    reason,
                    answers: question_answers(p.answers)?,
                };
                hub.answer(&row, p.call_id, answer).await?;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::ModelsList(_) => {
                let models = hub.models().list();
                Ok(Some(Response::ok(id, &outboard_shared::ModelsListResponse { models })))
            }
            Method::SessionSetModel(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                let session = hub.set_model(&row, p.model, &user.name).await?;
                Ok(Some(Response::ok(id, &outboard_shared::SessionSetModelResponse { session })))
            }
            Method::SessionSetMode(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                let set = hub.set_mode(&row, p.mode, &user.name).await?;
                Ok(Some(Response::ok(id, &set)))
            }
            Method::SessionCheckpoints(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                let checkpoints = hub.checkpoints(&row).await?;
                let answer = outboard_shared::SessionCheckpointsResponse { checkpoints };
                Ok(Some(Response::ok(id, &answer)))
            }
            Method::SessionFork(p) => {
                let forked = crate::fork::fork(hub, &user, p).await?;
                Ok(Some(Response::ok(id, &forked)))
            }
            Method::SessionRewind(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                let rewound = hub.rewind(&row, p, &user.name).await?;
                Ok(Some(Response::ok(id, &rewound)))
            }
            Method::SessionDriveRequest(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                match hub.role(&p.session_id, self.id) {
                    None => {
                        return Err(ErrorBody::new(
                            ErrorCode::BadRequest,
                            "attach to the session before asking to drive it",
                        ))
                    }
                    Some(Role::Driver) => {
                        return Err(ErrorBody::new(ErrorCode::Conflict, "you already drive it"))
                    }
                    Some(Role::Watcher) => {}
                }
                hub.transient(&row, EventKind::DriveRequested { user: user.name }).await?;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::SessionDriveGrant(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                let (presence, to) = hub.grant(&p.session_id, self.id, &p.user)?;
                // Remembered for the grantee's user, so that its next connection drives too.
                hub.remember_grant(&row.id, (to != row.owner_id).then_some(to)).await?;
                broadcast_presence(&hub.handle(&row), presence).await;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::SessionDriveTake(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                let presence = hub.take(&row, &user, self.id)?;
                hub.remember_grant(&row.id, None).await?;
                broadcast_presence(&hub.handle(&row), presence).await;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            other => crate::files_api::handle(hub, &user, id, other).await.map(Some),
        }
    }
}

/// The durable events an attach still owes after its snapshot frame: `(from, until]`.
struct CatchUp {
    store: outboard_store::Store,
    from: u64,
    until: u64,
}

/// Tells everyone attached to a session who is attached now.
async fn broadcast_presence(handle: &SessionHandle, attached: Vec<PresenceEntry>) {
    if let Err(e) = handle.transient(EventKind::Presence { attached }).await {
        tracing::debug!("cannot broadcast presence: {e}");
    }
}

/// Moves a session's live events into a connection's queue. When the connection falls so far
/// behind that the broadcast drops events for it, it stops with a `lagged` error naming the last
/// durable `seq` delivered (see the module header): the client re-attaches for a fresh snapshot.
///
/// With a `catch_up` (an attach after `after_seq` whose snapshot did not fit one frame) it first
/// sends the snapshot's remaining durable events from the store, in order, as `event` frames;
/// live events wait in `live` meanwhile, so the stream has no gap either way.
async fn forward(
    session_id: SessionId,
    mut live: broadcast::Receiver<std::sync::Arc<outboard_shared::SessionEvent>>,
    out: Out,
    mut last_durable: u64,
    catch_up: Option<CatchUp>,
) {
    if let Some(c) = catch_up {
        let sent = paging::catch_up(&c.store, &session_id, c.from, c.until, |event| {
            let out = out.clone();
            async move { out.send(ServerFrame::Event(EventFrame { event }), None).await }
        })
        .await;
        match sent {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                let message = format!(
                    "session {session_id}: cannot read its log to catch up ({e}); attach again"
                );
                let _ =
                    out.send(connection_error(ErrorCode::Internal, &message, false), None).await;
                return;
            }
        }
    }
    loop {
        match live.recv().await {
            Ok(event) => {
                let event = std::sync::Arc::unwrap_or_clone(event);
                if event.kind.is_durable() {
                    if event.seq <= last_durable {
                        continue;
                    }
                    last_durable = event.seq;
                }
                if !out.send(ServerFrame::Event(EventFrame { event }), None).await {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(session = %session_id, skipped = n, "a client lagged; detaching it");
                let message = format!(
                    "session {session_id}: this connection fell more than {} events behind and \
                     was detached; attach again with after_seq {last_durable}",
                    crate::session::BROADCAST_CAPACITY
                );
                let _ = out.send(connection_error(ErrorCode::Lagged, &message, false), None).await;
                return;
            }
            Err(broadcast::error::RecvError::Closed) => {
                // The session's actor stopped while this connection was attached: this node
                // lost its lease (another node runs the session now) or stops. Attaching again
                // finds where it runs.
                let message = format!(
                    "session {session_id}: it stopped running on this server node; attach again \
                     with after_seq {last_durable}"
                );
                let _ = out.send(connection_error(ErrorCode::Lagged, &message, false), None).await;
                return;
            }
        }
    }
}

/// `10 s`, `1.5 s`: a duration for a message.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

fn user_name(user: &Option<UserRow>) -> &str {
    user.as_ref().map_or("", |u| u.name.as_str())
}

/// Parses a request frame. Errors carry the request id when one could be read, so the client can
/// match the error to its request.
fn parse_request(text: &str) -> Result<Request, (Option<RequestId>, ErrorBody)> {
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

fn connection_error(code: ErrorCode, message: &str, fatal: bool) -> ServerFrame {
    ServerFrame::Error(ConnectionError { error: ErrorBody::new(code, message), fatal })
}

fn too_large(len: usize) -> String {
    format!("the frame is {len} bytes; the limit is {MAX_FRAME_BYTES}: put large content in a file")
}

/// What a client is told while the store cannot be reached (its handshake, a request failing
/// on it): the server retries meanwhile, so trying again later may work.
pub(crate) const STORE_UNREACHABLE: &str =
    "the server's store (PostgreSQL) is unreachable; retrying… try again shortly";

/// How long a handshake waits on a store that is unreachable before the client is told so.
const STORE_PATIENCE: Duration = Duration::from_secs(2);

/// A store failure as the client sees it: [`STORE_UNREACHABLE`] (`unavailable`) when the store
/// could not be reached, never a raw driver message; else `internal`.
pub(crate) fn internal(e: outboard_store::StoreError) -> ErrorBody {
    if e.is_unreachable() {
        tracing::warn!(error = %e, "a request failed: the store is unreachable");
        return ErrorBody::new(ErrorCode::Unavailable, STORE_UNREACHABLE);
    }
    ErrorBody::new(ErrorCode::Internal, e.to_string())
}

/// `usage/report`'s `since` as the RFC 3339 prefix model calls are compared with: a day
/// (`YYYY-MM-DD`, from its UTC midnight) or a full UTC time (`…Z`), which compare in order as
/// strings with the stored times.
fn usage_since(since: &str) -> Result<String, ErrorBody> {
    let since = since.trim();
    let b = since.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let is_day = b.len() >= 10
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10);
    if is_day && (b.len() == 10 || (b[10] == b'T' && since.ends_with('Z'))) {
        return Ok(since.to_owned());
    }
    Err(ErrorBody::new(
        ErrorCode::BadRequest,
        format!("since {since:?} is not a date: give YYYY-MM-DD or an RFC 3339 UTC time (…Z)"),
    ))
}

/// The answers of an `approval/answer` to questions (`AskUserQuestion`), trimmed and checked
/// against their bounds: at most four, each at most [`MAX_QUESTION_ANSWER_BYTES`].
fn question_answers(answers: Option<Vec<String>>) -> Result<Option<Vec<String>>, ErrorBody> {
    let Some(answers) = answers else { return Ok(None) };
    if answers.len() > *outboard_tools::plan::QUESTIONS.end() {
        return Err(ErrorBody::new(
            ErrorCode::BadRequest,
            format!(
                "{} answers: a call asks at most {} questions",
                answers.len(),
                outboard_tools::plan::QUESTIONS.end()
            ),
        ));
    }
    let answers: Vec<String> = answers.into_iter().map(|a| a.trim().to_owned()).collect();
    if answers.iter().any(|a| a.is_empty() || a.len() > MAX_QUESTION_ANSWER_BYTES) {
        return Err(ErrorBody::new(
            ErrorCode::BadRequest,
            format!("each answer must be 1 to {MAX_QUESTION_ANSWER_BYTES} bytes"),
        ));
    }
    Ok(Some(answers))
}
