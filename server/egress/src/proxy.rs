//! The sandbox's one way out: an HTTP/1.1 forward proxy owned by the server, one per session's
//! sandbox, listening on a Unix socket that is bound into the sandbox (and relayed there to
//! `127.0.0.1:`[`PROXY_PORT`] by the agent, see `relay`).
//!
//! What it owns: parsing proxy requests (`CONNECT host:port` tunnels and absolute-form plain
//! HTTP), asking the session's policy ([`Decide`]), resolving names itself (the sandbox has no
//! resolver), refusing addresses that lead back into the host or its networks
//! (`forbidden_range`, the server's own ports) unless an admin named that exact address and
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
//!   `splice`): the client's TLS reaches the real host, which presents its own certificate.
//! - Every refusal is an answer, not a dropped connection: `403` (policy), `503` (limits),
//!   `502` (the upstream could not be reached), each with a body that names the host, who
//!   refused and what would allow it.

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, HOST};
use hyper::service::service_fn;
use hyper::upgrade::Upgraded;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::conn::{connect, own_answer, refused, unreachable, Conn, Record, Shared};
use crate::contract::*;
use crate::intercept;
use crate::leaves::Leaves;
use crate::meter::{Activity, Budget, Counters, Metered, BUDGET_SPENT};
use crate::ranges::forbidden_range;
use crate::splice;
use crate::target::{parse_target, strip_hop_by_hop, Refusal, Target};

/// How long resolving a name may take: a resolver that has not answered by then will not.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

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
        leaves: ctx.ca.clone().map(Leaves::new),
        ctx,
        server_ports,
        refusal_linger,
        cancel: CancellationToken::new(),
    });
    tokio::spawn(accept_loop(listener, shared.clone()));
    Ok(ProxyHandle { path: socket_path.to_path_buf(), shared })
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
                _ = tunnel(upgraded, io) => {}
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

/// The proxy's `CONNECT` tunnel: the client's connection, which hyper hands over upgraded, is
/// taken back to its Unix socket (with whatever hyper had read past the request head) and
/// pumped to the upstream under the upstream's accounting. A connection hyper will not hand
/// back as that socket is copied through its wrappers as before.
async fn tunnel(client: Upgraded, upstream: Metered<TcpStream>) -> io::Result<()> {
    match client.downcast::<TokioIo<Metered<UnixStream>>>() {
        Ok(parts) => {
            let (client, _) = parts.io.into_inner().into_parts();
            splice::widen(&client);
            let (upstream, tap) = upstream.into_parts();
            let (a, b) = (splice::Sock::Unix(&client), splice::Sock::Tcp(&upstream));
            splice::write_all(b, &parts.read_buf, splice::Dir::AToB, &tap).await?;
            splice::bidirectional(a, b, &tap, TUNNEL_BUF).await.map(drop)
        }
        Err(client) => {
            let (mut client, mut upstream) = (TokioIo::new(client), upstream);
            tokio::io::copy_bidirectional_with_sizes(
                &mut client,
                &mut upstream,
                TUNNEL_BUF,
                TUNNEL_BUF,
            )
            .await
            .map(drop)
        }
    }
}

#[cfg(test)]
mod tests;
