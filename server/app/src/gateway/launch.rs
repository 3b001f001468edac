//! Starting and stopping a server: [`launch`] opens the store, checks the sandbox, registers
//! the node and spawns the accept loop and the background jobs (heartbeat, announcing committed
//! org files, taking over the sessions of dead nodes); [`ServerHandle`] is what the caller holds
//! and what a graceful shutdown drains.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::{routing::get, Router};
use outboard_org::tokens::EMBEDDED_TOKEN_LABEL;
use outboard_store::{Durability, Store};
use tokio::{sync::mpsc, task::JoinHandle};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::config::{NetConfig, ServerConfig};
use crate::hub::Hub;

use super::{
    relay, scrape, upgrade, AppState, DRAIN_DEADLINE, METRICS_CONNECTIONS, SANDBOX_STOP_DEADLINE,
};

/// A running server.
pub struct ServerHandle {
    pub(super) addr: SocketAddr,
    pub(super) state: Arc<AppState>,
    pub(super) task: JoinHandle<()>,
    /// Every session's sandbox, stopped at shutdown.
    pub(super) sandboxes: Option<outboard_sandbox::pool::LivePool>,
    /// The sandbox check started at launch (`None` when sessions run on sandbox hosts).
    pub(super) preflight: Option<outboard_sandbox::preflight::Preflight>,
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
pub(super) async fn register_node(store: &Store, url: &str) -> Result<(), LaunchError> {
    store.heartbeat(&node_name(), url, "serving").await.map_err(LaunchError::Store)?;
    tracing::info!(node = %store.node().id, backend = ?store.backend(), "node registered");
    Ok(())
}

/// Renews this node's leases and heartbeat every third of the lease time until shutdown; the
/// actors of sessions whose lease another node took over meanwhile stop.
pub(super) async fn heartbeat(hub: Arc<Hub>, shutdown: CancellationToken) {
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
pub(super) const ORG_FILE_NOTICES: usize = 256;

/// Announces, until shutdown, the org file versions any node commits (this node's own are
/// announced once, when written: [`outboard_org::orgfs::OrgFs::announce_committed`] skips them).
pub(super) async fn announce_committed(
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
pub(super) const TAKE_OVER_EVERY: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_millis(2500));

/// Takes over, until shutdown, the open turns no node runs ([`Hub::take_over`]).
pub(super) async fn take_over(hub: Arc<Hub>, shutdown: CancellationToken) {
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
