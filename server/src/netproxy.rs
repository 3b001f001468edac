//! The sandbox's one way out: an HTTP/1.1 forward proxy owned by the server, one per session's
//! sandbox, listening on a Unix socket that is bound into the sandbox (and relayed there to
//! `127.0.0.1:`[`PROXY_PORT`] by the agent, see [`relay`]).
//!
//! What it owns: parsing proxy requests (`CONNECT host:port` tunnels and absolute-form plain
//! HTTP), asking the session's policy ([`Decide`]), resolving names itself (the sandbox has no
//! resolver), refusing addresses that lead back into the host or its networks
//! ([`forbidden_range`], the server's own ports) unless an admin named that exact address and
//! port, connecting to the vetted address (never resolving again: no DNS rebinding), the limits
//! ([`NetLimits`]: connections per sandbox, idle timeout, bytes per session) and one
//! [`AuditEntry`] per connection or refusal.
//!
//! What it does not own: the policy itself (org storage, admin commands) and where audit
//! records go; both come in through the [`Decide`] and [`Audit`] traits of [`SessionNet`].
//!
//! Design choices:
//! - hyper parses the client's requests (head bounded by [`MAX_HEAD`]) and speaks to plain HTTP
//!   upstreams, so bodies (chunked or not) are framed correctly both ways; the client may keep
//!   its connection alive, and each request gets its own upstream connection (and its own
//!   decision and audit record): simple, and a request never rides a connection that was
//!   vetted for another host.
//! - A `CONNECT` tunnel moves bytes untouched after `200 Connection established` (spliced, see
//!   [`splice`]): the client's TLS reaches the real host, which presents its own certificate.
//! - Every refusal is an answer, not a dropped connection: `403` (policy), `503` (limits),
//!   `502` (the upstream could not be reached), each with a body that names the host, who
//!   refused and what would allow it.

pub mod ca;
mod intercept;
mod meter;
pub mod ranges;
pub mod relay;
mod splice;
mod target;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, HOST};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use outboard_shared::{OrgId, SessionId};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

pub use intercept::{ca_bundle_pem, ca_env, MAX_LEAVES, SANDBOX_CA_BUNDLE};
use meter::{Activity, Budget, Counters, Metered, BUDGET_SPENT};
pub use ranges::forbidden_range;
use target::{own_answer_headers, parse_target, refusal_body, strip_hop_by_hop, Refusal, Target};

/// The port the agent listens on inside the sandbox (the sandbox's own loopback).
pub const PROXY_PORT: u16 = 3128;

/// Where the server's socket appears inside the sandbox.
pub const SANDBOX_SOCKET: &str = "/run/outboard/proxy.sock";

/// The proxy URL commands are given.
pub const PROXY_URL: &str = "http://127.0.0.1:3128";

/// What commands may reach without the proxy: only the sandbox's own loopback.
pub const NO_PROXY: &str = "localhost,127.0.0.1";

/// The largest request head (request line and headers) the proxy reads: real requests are a
/// few hundred bytes, package managers' a few KiB; 16 KiB leaves room for long URLs and
/// cookies while a client cannot make the proxy buffer more. Beyond it: `431`. (hyper's read
/// buffer limit, which is what bounds the head; it cannot go below 8 KiB.)
pub const MAX_HEAD: usize = 16 * 1024;

/// How long resolving a name may take: a resolver that has not answered by then will not.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connecting to one resolved address may take before the next is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections over the cap that are still answered with an explanation at once, per sandbox:
/// a client hammering the proxy gets its `503`s from at most this many tasks, the rest are
/// closed unanswered (and audited).
const REFUSING: usize = 16;

/// How long an over-the-cap connection has to send its request before it is closed.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Buffer of each direction of a tunnel where it cannot splice ([`splice`]'s fallback): enough
/// for full-speed transfers, small enough that a hundred idle tunnels cost a few MiB.
const TUNNEL_BUF: usize = 32 * 1024;

/// The longest Unix socket path (`sun_path` holds 108 bytes with the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// What the proxy asks the session's network policy.
pub trait Decide: Send + Sync {
    /// Whether `host:port` may be reached (`host` as the client named it: a name or an IP literal),
    /// before resolution. The proxy still applies the forbidden ranges after resolving.
    fn decide(&self, host: &str, port: u16) -> Verdict;
    /// Whether an admin named exactly this IP literal and port (lifts the forbidden ranges for it).
    fn allows_literal(&self, ip: std::net::IpAddr, port: u16) -> bool;
    /// The org secrets bound to outbound HTTP for `host:port` (`admin secret set
    /// --inject-header`); empty for every other host, whose connections are tunnelled untouched.
    fn injections(&self, host: &str, port: u16) -> Vec<Arc<Injection>>;
}

/// One org secret bound to a host's outbound HTTP: the proxy terminates the sandbox's TLS to
/// that host (with a certificate of the org's [`ca::OrgCa`]), sets the header, replaces the
/// placeholders, re-originates TLS to the real host, and scrubs the value from the responses.
#[derive(Clone, PartialEq, Eq)]
pub struct Injection {
    /// The secret's name: responses carry `[secret NAME]` where the value was.
    pub name: String,
    /// The header to add or replace (e.g. `authorization`).
    pub header: String,
    /// Its whole value, the secret in place of the template's `{}`.
    pub header_value: String,
    /// The secret's value itself, scrubbed from responses and put in place of placeholders.
    pub value: String,
    /// Strings the sandbox holds instead of the value (its `--placeholder` variables' values):
    /// wherever one appears in a request header to this host, the value replaces it.
    pub placeholders: Vec<String>,
    /// Further roots (PEM) to verify this host's certificate with, besides the system's
    /// (`--upstream-ca`: tests and private mirrors).
    pub upstream_ca: Option<String>,
}

impl std::fmt::Debug for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injection")
            .field("name", &self.name)
            .field("header", &self.header)
            .field("placeholders", &self.placeholders.len())
            .field("upstream_ca", &self.upstream_ca.is_some())
            .finish_non_exhaustive()
    }
}

/// A policy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead (the forbidden ranges still apply).
    Allow,
    /// No: `policy` names what refused (e.g. `org acme: registries`), `reason` says why, and
    /// `hint` is the admin command that would allow it. All three reach the sandbox's client.
    Refuse { policy: String, reason: String, hint: String },
}

/// Where connection records go; must not block (the integrator's impl uses a bounded channel).
pub trait Audit: Send + Sync {
    fn record(&self, entry: AuditEntry);
    /// Resolves once the records made so far have gone where they go (their log rows written,
    /// their events sent): a command's refusals then reach the session before its result does.
    fn flush(&self) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// One connection (or refusal), recorded when it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// As the client named it (empty when the request could not be read).
    pub host: String,
    pub port: u16,
    /// Whether the proxy connected upstream.
    pub allowed: bool,
    /// Why it was refused, or why an allowed connection was cut (idle, byte budget).
    pub reason: Option<String>,
    /// Sandbox → upstream.
    pub bytes_up: u64,
    /// Upstream → sandbox.
    pub bytes_down: u64,
    pub duration: std::time::Duration,
    /// Whether the proxy terminated the sandbox's TLS to inject an org secret (an allowed
    /// connection to a host with `--inject-header` secrets); `false` for tunnels and refusals.
    pub intercepted: bool,
    /// When it started (RFC 3339).
    pub at: String, /* RFC 3339 */
    /// For a refusal the proxy explained to the client (`403`, `503`): what refused it, why,
    /// and what would allow it, as the client was told.
    pub refused_by: Option<RefusedBy>,
}

/// What the client of a refused connection was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedBy {
    /// The policy (`org acme: registries`, `limits`, `no way back in …`).
    pub policy: String,
    /// Why.
    pub reason: String,
    /// The command or step that would allow it.
    pub hint: String,
}

/// The proxy's limits for one session's sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetLimits {
    /// Open connections at once; beyond, `503`.
    pub max_connections: usize,
    /// A connection that moves no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// Bytes both ways of all the session's connections together; at the budget the open
    /// connections are cut and new ones refused.
    pub session_bytes: u64,
}

impl NetLimits {
    /// 64 connections (a parallel `cargo fetch` or `npm install` opens a few dozen), 300 s idle
    /// (the server's own WebSocket idle timeout), 10 GiB per session (a few large toolchains and
    /// dependency trees; a session moving more is more likely exfiltrating than building).
    pub const DEFAULT: NetLimits = NetLimits {
        max_connections: 64,
        idle_timeout: Duration::from_secs(300),
        session_bytes: 10 << 30,
    };
}

impl Default for NetLimits {
    fn default() -> Self {
        NetLimits::DEFAULT
    }
}

/// Per-session context: who, and the policy and audit sink.
#[derive(Clone)]
pub struct SessionNet {
    pub org: OrgId,
    /// The org's name, as the admin commands in refusals' hints take it.
    pub org_name: String,
    pub session: SessionId,
    pub user: String,
    pub decide: Arc<dyn Decide>,
    pub audit: Arc<dyn Audit>,
    pub limits: NetLimits,
    /// The org's CA, which signs the certificates the proxy presents for injected hosts; its
    /// certificate (never its key) is what the sandbox's CA bundle adds. `None`: no host is
    /// intercepted (injections are then refused rather than sent without TLS checks).
    pub ca: Option<Arc<ca::OrgCa>>,
    /// Variables commands get with the network: the placeholders of the org's injected
    /// secrets (`GH_TOKEN=outboard-placeholder-GH_TOKEN`), never a value.
    pub env: Vec<(String, String)>,
}

impl std::fmt::Debug for SessionNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionNet")
            .field("org", &self.org)
            .field("session", &self.session)
            .field("user", &self.user)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Same session, same limits, and the very same policy and audit sink.
impl PartialEq for SessionNet {
    fn eq(&self, other: &Self) -> bool {
        self.org == other.org
            && self.org_name == other.org_name
            && self.session == other.session
            && self.user == other.user
            && self.limits == other.limits
            && self.env == other.env
            && Arc::ptr_eq(&self.decide, &other.decide)
            && Arc::ptr_eq(&self.audit, &other.audit)
            && match (&self.ca, &other.ca) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl Eq for SessionNet {}

/// A session's network for requests the server makes itself on the model's behalf
/// (`WebFetch`): the session's [`SessionNet`] (its policy and audit sink; never its injections,
/// which are for the sandbox's own clients) and the server's ports, which
/// [`admit_destination`] refuses on local addresses.
#[derive(Debug, Clone)]
pub struct Egress {
    pub net: SessionNet,
    pub server_ports: Vec<u16>,
}

/// The environment that points a command's tools at the proxy.
pub fn proxy_env() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"]
            .iter()
            .map(|k| ((*k).to_string(), PROXY_URL.to_string()))
            .collect();
    env.push(("NO_PROXY".into(), NO_PROXY.into()));
    env.push(("no_proxy".into(), NO_PROXY.into()));
    env
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The socket path does not fit a Unix socket address.
    #[error(
        "the proxy socket path {path} is {len} bytes, more than a Unix socket takes \
         ({MAX_SOCKET_PATH}): use a shorter data directory"
    )]
    PathTooLong { path: PathBuf, len: usize },
    /// Binding or preparing the socket failed.
    #[error("could not listen on the proxy socket {path}: {source}; check that its directory exists and is writable by the server")]
    Bind { path: PathBuf, source: std::io::Error },
}

/// A running proxy. Dropping it stops it (open connections too) and removes the socket.
#[derive(Debug)]
pub struct ProxyHandle {
    path: PathBuf,
    shared: Arc<Shared>,
}

impl ProxyHandle {
    /// The socket the proxy listens on (host side).
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// Bytes the session has moved through the proxy, both ways.
    pub fn bytes_used(&self) -> u64 {
        self.shared.budget.used()
    }

    /// Connections open now (counted against [`NetLimits::max_connections`]).
    pub fn open_connections(&self) -> usize {
        self.shared.ctx.limits.max_connections - self.shared.open.available_permits()
    }
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Starts the proxy of one session's sandbox on a new Unix socket at `socket_path` (its
/// directory must be private to the server: the socket itself is left connectable by anyone
/// who can reach it, so that a sandbox running as another host uid can). `server_ports` are
/// the server's own listening ports, refused on every local address.
pub async fn serve(
    socket_path: &Path,
    ctx: SessionNet,
    server_ports: Vec<u16>,
) -> Result<ProxyHandle, ProxyError> {
    serve_with(socket_path, ctx, server_ports, REFUSAL_LINGER).await
}

/// [`serve`] with the time an over-the-cap connection may linger (tests hold it long, so the
/// answering slots stay taken while they check the bound).
async fn serve_with(
    socket_path: &Path,
    ctx: SessionNet,
    server_ports: Vec<u16>,
    refusal_linger: Duration,
) -> Result<ProxyHandle, ProxyError> {
    let len = socket_path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(ProxyError::PathTooLong { path: socket_path.to_path_buf(), len });
    }
    let bind_error = |source| ProxyError::Bind { path: socket_path.to_path_buf(), source };
    let listener = UnixListener::bind(socket_path).map_err(bind_error)?;
    // A root server's sandbox runs as an unprivileged uid of its own and reaches the socket
    // only through its bind mount; the private directory keeps everyone else out.
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(socket_path, std::fs::Permissions::from_mode(0o666))
            .map_err(bind_error)?;
    }
    let shared = Arc::new(Shared {
        open: Arc::new(Semaphore::new(ctx.limits.max_connections)),
        refusing: Arc::new(Semaphore::new(REFUSING)),
        budget: Budget::new(ctx.limits.session_bytes),
        leaves: ctx.ca.clone().map(intercept::Leaves::new),
        ctx,
        server_ports,
        refusal_linger,
        cancel: CancellationToken::new(),
    });
    tokio::spawn(accept_loop(listener, shared.clone()));
    Ok(ProxyHandle { path: socket_path.to_path_buf(), shared })
}

/// What every connection of one proxy shares.
struct Shared {
    ctx: SessionNet,
    server_ports: Vec<u16>,
    /// Slots under [`NetLimits::max_connections`].
    open: Arc<Semaphore>,
    /// Slots for answering connections over the cap ([`REFUSING`]).
    refusing: Arc<Semaphore>,
    budget: Arc<Budget>,
    /// The leaf certificates of intercepted hosts, when the session has the org's CA.
    leaves: Option<intercept::Leaves>,
    /// [`REFUSAL_LINGER`], but for tests.
    refusal_linger: Duration,
    cancel: CancellationToken,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("ctx", &self.ctx).finish_non_exhaustive()
    }
}

async fn accept_loop(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        let accepted = tokio::select! {
            () = shared.cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, most likely: let connections end before accepting again.
                tracing::warn!("the network proxy could not accept a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Ok(permit) = shared.open.clone().try_acquire_owned() {
            tokio::spawn(serve_client(shared.clone(), stream, permit));
        } else if let Ok(permit) = shared.refusing.clone().try_acquire_owned() {
            tokio::spawn(refuse_busy(shared.clone(), stream, permit));
        } else {
            Record::refusal(&shared, "", 0, &busy_refusal(&shared)).finish();
        }
    }
}

/// One client connection: its slot, its activity clock, and why it ended when the proxy cut it.
struct Conn {
    shared: Arc<Shared>,
    activity: Arc<Activity>,
    ended: Arc<Mutex<Option<String>>>,
    _slot: OwnedSemaphorePermit,
}

impl Conn {
    fn end(&self, why: String) {
        if let Ok(mut ended) = self.ended.lock() {
            ended.get_or_insert(why);
        }
    }

    fn idle_message(&self) -> String {
        format!(
            "closed after {} s without a byte either way (the idle timeout)",
            self.shared.ctx.limits.idle_timeout.as_secs_f64()
        )
    }
}

async fn serve_client(shared: Arc<Shared>, stream: UnixStream, slot: OwnedSemaphorePermit) {
    let conn = Arc::new(Conn {
        shared: shared.clone(),
        activity: Activity::new(),
        ended: Arc::new(Mutex::new(None)),
        _slot: slot,
    });
    let io = TokioIo::new(Metered::client(stream, conn.activity.clone()));
    let for_requests = conn.clone();
    let service = service_fn(move |req| {
        let conn = for_requests.clone();
        async move { Ok::<_, Infallible>(handle(conn, req).await) }
    });
    let http = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .serve_connection(io, service)
        .with_upgrades();
    tokio::select! {
        _ = http => {}
        () = conn.activity.idle(shared.ctx.limits.idle_timeout) => conn.end(conn.idle_message()),
        () = shared.cancel.cancelled() => conn.end("the sandbox's proxy stopped".into()),
    }
}

/// Over the connection cap: read the request (to name its host) and answer `503`.
async fn refuse_busy(shared: Arc<Shared>, stream: UnixStream, _slot: OwnedSemaphorePermit) {
    let answered = Arc::new(AtomicBool::new(false));
    let (for_service, flag) = (shared.clone(), answered.clone());
    let service = service_fn(move |req: Request<Incoming>| {
        let shared = for_service.clone();
        flag.store(true, Ordering::Relaxed);
        async move {
            let (host, port) = match parse_target(req.method(), req.uri()) {
                Ok(t) => (t.host, t.port),
                Err(_) => (String::new(), 0),
            };
            let refusal = busy_refusal(&shared);
            Record::refusal(&shared, &host, port, &refusal).finish();
            Ok::<_, Infallible>(refused(&host, port, &refusal))
        }
    });
    let http = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(shared.refusal_linger, http).await;
    if !answered.load(Ordering::Relaxed) {
        Record::refusal(&shared, "", 0, &busy_refusal(&shared)).finish();
    }
}

fn busy_refusal(shared: &Shared) -> Refusal {
    let max = shared.ctx.limits.max_connections;
    Refusal {
        status: StatusCode::SERVICE_UNAVAILABLE,
        policy: "limits".into(),
        reason: format!(
            "this sandbox already has {max} connections open through the proxy (its limit)"
        ),
        hint: "close idle connections (or wait for some to finish) and retry; the limit is the \
               server's per-sandbox connection cap"
            .into(),
    }
}

/// What the proxy answers one request with when it does not forward it.
enum Stop {
    /// `403`/`503` with an explanation.
    Refuse(Refusal),
    /// `502`: the reason the upstream could not be reached.
    Unreachable(String),
}

async fn handle(conn: Arc<Conn>, mut req: Request<Incoming>) -> Response<Body> {
    let shared = &conn.shared;
    let target = match parse_target(req.method(), req.uri()) {
        Ok(target) => target,
        Err(why) => {
            let host = req.uri().host().unwrap_or_default().to_string();
            Record::refused(shared, &host, 0, why.clone()).finish();
            return own_answer(StatusCode::BAD_REQUEST, format!("{why}\n"));
        }
    };
    let connected = match admit(shared, &target).await {
        Ok(addrs) => {
            let injections = shared.ctx.decide.injections(&target.host, target.port);
            if !injections.is_empty() {
                return intercept::handle(conn, req, target, addrs, injections).await;
            }
            connect(&addrs).await.map_err(Stop::Unreachable)
        }
        Err(stop) => Err(stop),
    };
    let upstream = match connected {
        Ok(upstream) => upstream,
        Err(Stop::Refuse(refusal)) => {
            Record::refusal(shared, &target.host, target.port, &refusal).finish();
            return refused(&target.host, target.port, &refusal);
        }
        Err(Stop::Unreachable(why)) => {
            Record::refused(shared, &target.host, target.port, why.clone()).finish();
            return unreachable(&target, &why);
        }
    };
    let counters = Arc::new(Counters::default());
    let record = Record::allowed(&conn, &target, counters.clone());
    let io = Metered::upstream(upstream, conn.activity.clone(), counters, shared.budget.clone());
    if req.method() == Method::CONNECT {
        let upgrade = hyper::upgrade::on(&mut req);
        let conn = conn.clone();
        tokio::spawn(async move {
            let _record = record;
            let Ok(upgraded) = upgrade.await else { return };
            let idle = conn.shared.ctx.limits.idle_timeout;
            tokio::select! {
                _ = splice::tunnel(upgraded, io) => {}
                () = conn.activity.idle(idle) => conn.end(conn.idle_message()),
                () = conn.shared.cancel.cancelled() => conn.end("the sandbox's proxy stopped".into()),
            }
        });
        let mut answer = Response::new(Body::empty());
        answer
            .extensions_mut()
            .insert(hyper::ext::ReasonPhrase::from_static(b"Connection established"));
        return answer;
    }
    forward(conn, req, &target, io, record).await
}

/// Whether `target` may be reached, and where: the byte budget, then [`admit_destination`].
async fn admit(shared: &Shared, target: &Target) -> Result<Vec<SocketAddr>, Stop> {
    if shared.budget.spent() {
        return Err(Stop::Refuse(Refusal {
            status: StatusCode::SERVICE_UNAVAILABLE,
            policy: "limits".into(),
            reason: format!("{BUDGET_SPENT} ({} bytes both ways)", shared.budget.limit()),
            hint: "start a new session for more network transfer; the budget is the server's \
                   per-session byte limit"
                .into(),
        }));
    }
    let ctx = &shared.ctx;
    admit_destination(&*ctx.decide, &ctx.org_name, &shared.server_ports, &target.host, target.port)
        .await
        .map_err(|refused| match refused {
            Admission::Refused(by) => Stop::Refuse(Refusal {
                status: StatusCode::FORBIDDEN,
                policy: by.policy,
                reason: by.reason,
                hint: by.hint,
            }),
            Admission::Unreachable(why) => Stop::Unreachable(why),
        })
}

/// Why [`admit_destination`] gives no address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// The policy or the forbidden ranges refused: who, why, and what would allow it.
    Refused(RefusedBy),
    /// The name could not be resolved.
    Unreachable(String),
}

/// The one destination check of the session's network, shared by the proxy and the server's
/// own fetches for the model (`WebFetch`): the policy first (`host` as the client named it),
/// then the name resolved here and every resolved address vetted against the forbidden ranges
/// and `server_ports`. The caller connects to the addresses returned and never resolves again,
/// so a name cannot be re-pointed between the check and the connection.
pub async fn admit_destination(
    decide: &dyn Decide,
    org_name: &str,
    server_ports: &[u16],
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Admission> {
    if let Verdict::Refuse { policy, reason, hint } = decide.decide(host, port) {
        return Err(Admission::Refused(RefusedBy { policy, reason, hint }));
    }
    let addrs = resolve(host, port).await.map_err(Admission::Unreachable)?;
    for addr in &addrs {
        if let Some(refused) = vet(decide, org_name, server_ports, host, *addr) {
            return Err(Admission::Refused(refused));
        }
    }
    Ok(addrs)
}

/// The refusal for a resolved address that leads back in, unless an admin named it.
fn vet(
    decide: &dyn Decide,
    org_name: &str,
    server_ports: &[u16],
    host: &str,
    addr: SocketAddr,
) -> Option<RefusedBy> {
    let (ip, port) = (addr.ip(), addr.port());
    let why = match forbidden_range(ip) {
        Some(range) => range.to_string(),
        None if server_ports.contains(&port) && is_local(ip) => {
            "a local address, and the port is this server's own".to_string()
        }
        None => return None,
    };
    if decide.allows_literal(ip, port) {
        return None;
    }
    let literal = match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    };
    let is_literal = host.parse::<IpAddr>().is_ok_and(|named| named == ip);
    let reason = if is_literal {
        format!("{ip} is {why}; the sandbox may not reach the server's host, its networks or the cloud metadata service")
    } else {
        format!("{host} resolves to {ip}, {why}; the sandbox may not reach the server's host, its networks or the cloud metadata service")
    };
    Some(RefusedBy {
        policy: "no way back in (built into the proxy, every mode)".into(),
        reason,
        hint: format!(
            "an admin can name this exact address and port: `outboard-server admin network set \
             --org {org_name} registries+ {literal}`"
        ),
    })
}

/// Whether `ip` is an address of this host (binding to it works only then).
fn is_local(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(addrs)) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(format!("{host} has no address"))
            } else {
                Ok(addrs)
            }
        }
        Ok(Err(e)) => Err(format!("could not resolve {host}: {e}")),
        Err(_) => Err(format!("resolving {host} took more than {} s", RESOLVE_TIMEOUT.as_secs())),
    }
}

/// Connects to the first vetted address that answers.
async fn connect(addrs: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = String::from("no address to connect to");
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = format!("connecting to {addr}: {e}"),
            Err(_) => {
                last =
                    format!("connecting to {addr} took more than {} s", CONNECT_TIMEOUT.as_secs())
            }
        }
    }
    Err(last)
}

/// One plain HTTP request on its own upstream connection: origin-form request line, hop-by-hop
/// and `Proxy-*` headers removed both ways.
async fn forward(
    conn: Arc<Conn>,
    mut req: Request<Incoming>,
    target: &Target,
    io: Metered<TcpStream>,
    mut record: Record,
) -> Response<Body> {
    let path = target.path.as_deref().unwrap_or("/");
    let Ok(origin) = path.parse::<Uri>() else {
        return own_answer(StatusCode::BAD_REQUEST, format!("the path {path} is not valid\n"));
    };
    let authority = req.uri().authority().map(|a| a.as_str().to_string());
    *req.uri_mut() = origin;
    *req.version_mut() = hyper::Version::HTTP_11;
    strip_hop_by_hop(req.headers_mut());
    if !req.headers().contains_key(HOST) {
        if let Some(value) = authority.and_then(|a| HeaderValue::from_str(&a).ok()) {
            req.headers_mut().insert(HOST, value);
        }
    }
    let (mut sender, driver) = match hyper::client::conn::http1::handshake(TokioIo::new(io)).await {
        Ok(pair) => pair,
        Err(e) => {
            let why = format!("the upstream connection failed: {e}");
            record.reason = Some(why.clone());
            return unreachable(target, &why);
        }
    };
    let driving = conn.clone();
    tokio::spawn(async move {
        // The record is written when the upstream connection ends: after the response body
        // was sent on, or when the client went away.
        let _record = record;
        tokio::select! {
            _ = driver => {}
            () = driving.shared.cancel.cancelled() => {}
        }
    });
    match sender.send_request(req).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => {
            if conn.shared.budget.spent() {
                conn.end(BUDGET_SPENT.into());
            }
            unreachable(target, &format!("the upstream broke off: {e}"))
        }
    }
}

/// An audit record, written when dropped (so a connection cut by cancellation is recorded too).
struct Record {
    audit: Arc<dyn Audit>,
    host: String,
    port: u16,
    allowed: bool,
    reason: Option<String>,
    counters: Arc<Counters>,
    started: std::time::Instant,
    at: String,
    ended: Option<Arc<Mutex<Option<String>>>>,
    budget: Option<Arc<Budget>>,
    refused_by: Option<RefusedBy>,
    intercepted: bool,
}

impl Record {
    fn refused(shared: &Shared, host: &str, port: u16, reason: String) -> Record {
        Record {
            audit: shared.ctx.audit.clone(),
            host: host.to_string(),
            port,
            allowed: false,
            reason: Some(reason),
            counters: Arc::new(Counters::default()),
            started: std::time::Instant::now(),
            at: outboard_base::util::now_rfc3339(),
            ended: None,
            budget: None,
            refused_by: None,
            intercepted: false,
        }
    }

    /// A refusal the client was told about: the log's reason is `policy: reason`.
    fn refusal(shared: &Shared, host: &str, port: u16, refusal: &Refusal) -> Record {
        let why = format!("{}: {}", refusal.policy, refusal.reason);
        let mut record = Record::refused(shared, host, port, why);
        record.refused_by = Some(RefusedBy {
            policy: refusal.policy.clone(),
            reason: refusal.reason.clone(),
            hint: refusal.hint.clone(),
        });
        record
    }

    fn allowed(conn: &Conn, target: &Target, counters: Arc<Counters>) -> Record {
        Record {
            audit: conn.shared.ctx.audit.clone(),
            host: target.host.clone(),
            port: target.port,
            allowed: true,
            reason: None,
            counters,
            started: std::time::Instant::now(),
            at: outboard_base::util::now_rfc3339(),
            ended: Some(conn.ended.clone()),
            budget: Some(conn.shared.budget.clone()),
            refused_by: None,
            intercepted: false,
        }
    }

    /// Writes the record now.
    fn finish(self) {}
}

impl Drop for Record {
    fn drop(&mut self) {
        let mut reason = self.reason.take();
        if reason.is_none() {
            reason = self.ended.as_ref().and_then(|e| e.lock().ok().and_then(|e| e.clone()));
        }
        if reason.is_none() && self.budget.as_ref().is_some_and(|b| b.spent()) {
            reason = Some(BUDGET_SPENT.to_string());
        }
        self.audit.record(AuditEntry {
            host: std::mem::take(&mut self.host),
            port: self.port,
            allowed: self.allowed,
            reason,
            bytes_up: self.counters.up.load(Ordering::Relaxed),
            bytes_down: self.counters.down.load(Ordering::Relaxed),
            duration: self.started.elapsed(),
            intercepted: self.intercepted,
            at: std::mem::take(&mut self.at),
            refused_by: self.refused_by.take(),
        });
    }
}

fn own_answer(status: StatusCode, body: String) -> Response<Body> {
    let mut answer = Response::new(Body::from(body));
    *answer.status_mut() = status;
    own_answer_headers(answer.headers_mut());
    answer
}

fn refused(host: &str, port: u16, refusal: &Refusal) -> Response<Body> {
    own_answer(refusal.status, refusal_body(host, port, refusal))
}

fn unreachable(target: &Target, why: &str) -> Response<Body> {
    own_answer(
        StatusCode::BAD_GATEWAY,
        format!(
            "Outboard's network proxy could not reach {}:{}: {why}\n",
            target.host, target.port
        ),
    )
}

#[cfg(test)]
mod tests;
