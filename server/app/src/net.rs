//! The network edge, below the WebSocket: the accept loop, connection caps, the raw-byte budget
//! before `hello`, the deadline of the HTTP upgrade, and TLS.
//!
//! `axum::serve` accepts without limit and never times out a peer that connects and says
//! nothing, so a flood of idle sockets exhausts the server's descriptors and a half-sent large
//! frame before `hello` is buffered whole. This loop instead:
//!
//! - counts connections at accept, globally ([`NetConfig::max_connections`]) and per source
//!   address ([`NetConfig::max_connections_per_ip`]); a connection over a cap is answered
//!   `HTTP 503`/`429` with a one-line reason (plain TCP only: a TLS peer is just closed) and never
//!   reaches hyper;
//! - gives each connection [`NetConfig::handshake_timeout`] from accept to the WebSocket upgrade
//!   (TLS handshake and HTTP request head included);
//! - wraps the raw socket (beneath TLS) in a [`Guarded`] stream that lets through at most
//!   [`MAX_PRE_HELLO_BYTES`] until the gateway accepts `hello` ([`PreHello::open`]); past that,
//!   reads stop and [`PreHello::exceeded`] fires, so the peer's bytes stay in the kernel's socket
//!   buffer, never in ours;
//! - serves the axum `Router` over hyper's HTTP/1 connection with upgrades, handing every request
//!   a [`ConnInfo`] (peer address, budget, the connection's slot under the caps) that the
//!   WebSocket keeps for its whole life.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use outboard_shared::MAX_PRE_HELLO_BYTES;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::TaskTracker;

use crate::config::{NetConfig, TlsFiles};

/// Connections over a cap that are being answered (`503`/`429`) at the same time. Each holds a
/// descriptor for at most [`REFUSAL_LINGER`]; beyond this many, further ones are closed without
/// an answer, so refusing a flood never costs more than a few hundred descriptors.
const REFUSAL_SLOTS: usize = 256;

/// How long a refused or cut connection is kept open, reading and discarding what the peer still
/// sends, so that our answer is not destroyed by a TCP reset before the peer reads it.
pub(crate) const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// The largest HTTP request head hyper buffers (it answers `431` beyond it). The upgrade request
/// of a WebSocket client is a few hundred bytes.
const MAX_HEAD_BYTES: usize = 16 * 1024;

/// How long `accept` pauses after a failure such as "too many open files", so a full descriptor
/// table does not spin the loop.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Why TLS could not be set up. Each message says which file to fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("cannot read the TLS {what} {path}: {reason} — give a PEM file with --tls-{what}")]
    File {
        /// `cert` or `key`.
        what: &'static str,
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// rustls refused the pair (a key that does not match the certificate, …).
    #[error("the TLS certificate and key cannot be used together: {0}")]
    Config(String),
}

/// Builds the TLS acceptor from PEM files (rustls with the ring provider; TLS 1.2 and 1.3).
pub fn tls_acceptor(files: &TlsFiles) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let file_err = |what: &'static str, path: &std::path::Path, reason: String| TlsError::File {
        what,
        path: path.display().to_string(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| file_err("cert", &files.cert, e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_err("cert", &files.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_err("cert", &files.cert, "no CERTIFICATE in it".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| file_err("key", &files.key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

// ---------------------------------------------------------------------------------------------
// Caps
// ---------------------------------------------------------------------------------------------

/// The open-connection counters.
pub(crate) struct Caps {
    max_total: usize,
    max_per_ip: usize,
    /// Total and per-address counts. The map holds only addresses with an open connection, so
    /// it is bounded by `max_total` entries.
    counts: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// Which cap refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The server-wide cap.
    Total,
    /// The per-source-address cap.
    PerIp,
}

/// One connection's place under the caps; dropping it frees the place.
pub(crate) struct Slot {
    caps: Arc<Caps>,
    ip: IpAddr,
    /// Whether it still counts against its address ([`Slot::leave_per_ip`]).
    per_ip: AtomicBool,
}

impl Caps {
    pub(crate) fn new(max_total: usize, max_per_ip: usize) -> Arc<Caps> {
        Arc::new(Caps { max_total, max_per_ip, counts: Mutex::new((0, HashMap::new())) })
    }

    fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let mut guard = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let (total, per_ip) = &mut *guard;
        if *total >= self.max_total {
            return Err(Refusal::Total);
        }
        let n = per_ip.entry(ip).or_insert(0);
        if *n >= self.max_per_ip {
            return Err(Refusal::PerIp);
        }
        *n += 1;
        *total += 1;
        Ok(Slot { caps: self.clone(), ip, per_ip: AtomicBool::new(true) })
    }
}

impl Slot {
    /// Stops counting this connection against its source address (it still counts in the
    /// total): an authenticated relay from another node of the store carries many users' relays
    /// from one address, which are capped per user instead (`gateway::relay`).
    pub(crate) fn leave_per_ip(&self) {
        if self.per_ip.swap(false, Ordering::AcqRel) {
            let mut guard = self.caps.counts.lock().unwrap_or_else(|p| p.into_inner());
            release_ip(&mut guard.1, self.ip);
        }
    }
}

fn release_ip(per_ip: &mut HashMap<IpAddr, usize>, ip: IpAddr) {
    if let Some(n) = per_ip.get_mut(&ip) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            per_ip.remove(&ip);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut guard = self.caps.counts.lock().unwrap_or_else(|p| p.into_inner());
        let (total, per_ip) = &mut *guard;
        *total = total.saturating_sub(1);
        if self.per_ip.load(Ordering::Acquire) {
            release_ip(per_ip, self.ip);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The pre-hello budget
// ---------------------------------------------------------------------------------------------

/// The raw-byte budget of one connection before its `hello` is accepted.
pub(crate) struct PreHello {
    /// Bytes that may still be read while the budget applies.
    remaining: AtomicUsize,
    /// The budget applies (until the gateway accepts `hello`).
    applies: AtomicBool,
    /// Discard everything read (after the connection was cut: lingering close).
    discard: AtomicBool,
    /// Cancelled when a read found the budget spent.
    exceeded: CancellationToken,
    /// Bytes read from the peer so far (beneath TLS: the raw stream), for the gateway's bound
    /// on a message that is never finished (see `gateway::partial`).
    read: AtomicU64,
}

impl PreHello {
    fn new() -> Arc<PreHello> {
        Arc::new(PreHello {
            remaining: AtomicUsize::new(MAX_PRE_HELLO_BYTES),
            applies: AtomicBool::new(true),
            discard: AtomicBool::new(false),
            exceeded: CancellationToken::new(),
            read: AtomicU64::new(0),
        })
    }

    /// Bytes read from the peer so far.
    pub(crate) fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Acquire)
    }

    /// `hello` was accepted (or an HTTP API request authenticated): from now on only the
    /// WebSocket's frame limits (or the endpoint's own caps) apply, and the handshake deadline
    /// no longer cuts the connection.
    pub(crate) fn open(&self) {
        self.applies.store(false, Ordering::Release);
    }

    /// Whether [`PreHello::open`] was called.
    fn is_open(&self) -> bool {
        !self.applies.load(Ordering::Acquire)
    }

    /// Resolves once the peer has sent [`MAX_PRE_HELLO_BYTES`] before its `hello` was accepted.
    pub(crate) fn exceeded(&self) -> WaitForCancellationFutureOwned {
        self.exceeded.clone().cancelled_owned()
    }

    /// From now on every byte read is thrown away and reads only report the end of the stream,
    /// and closing the connection lingers ([`Guarded`]'s drop): for a connection that was sent
    /// its fatal error and close frame, so that the peer, perhaps still sending, reads them
    /// before a TCP reset could destroy them in its receive queue.
    pub(crate) fn discard(&self) {
        self.discard.store(true, Ordering::Release);
    }
}

/// A stream that enforces a [`PreHello`] budget on its reads. Writes pass through. Dropped after
/// [`PreHello::discard`], it closes with a linger ([`linger`]).
pub(crate) struct Guarded {
    inner: TcpStream,
    budget: Arc<PreHello>,
}

/// Connections closing with a linger at the same time. Each holds a descriptor for at most
/// [`REFUSAL_LINGER`]; beyond this many, a cut connection is closed at once.
const LINGER_SLOTS: usize = 256;

/// The most a lingering connection reads and throws away before it is closed anyway.
const LINGER_MAX_BYTES: u64 = 16 << 20;

static LINGERING: Semaphore = Semaphore::const_new(LINGER_SLOTS);

impl Drop for Guarded {
    fn drop(&mut self) {
        if !self.budget.discard.load(Ordering::Acquire) {
            return;
        }
        // A descriptor of our own keeps the socket open once hyper closes its one.
        let Ok(permit) = LINGERING.try_acquire() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let Ok(fd) = std::os::fd::AsFd::as_fd(&self.inner).try_clone_to_owned() else { return };
        let Ok(tcp) = TcpStream::from_std(std::net::TcpStream::from(fd)) else { return };
        runtime.spawn(linger(tcp, permit));
    }
}

/// A lingering close: our end is shut (the peer reads what we sent, then the end of the stream),
/// and what the peer still sends is read and thrown away for at most [`REFUSAL_LINGER`] and
/// [`LINGER_MAX_BYTES`]. Closing a socket with unread data sends a reset, and a reset makes the
/// peer's kernel throw away what it received but its program has not read yet: the close frame
/// that says why.
async fn linger(mut tcp: TcpStream, _permit: tokio::sync::SemaphorePermit<'static>) {
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        tcp.shutdown().await?;
        let mut scratch = [0u8; 16 * 1024];
        let mut read = 0u64;
        while read < LINGER_MAX_BYTES {
            match tcp.read(&mut scratch).await? {
                0 => break,
                n => read += n as u64,
            }
        }
        Ok::<(), io::Error>(())
    })
    .await;
}

/// Reads of discarded data per poll before yielding, so a fast sender cannot hold the thread.
const DISCARD_READS_PER_POLL: usize = 16;

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.budget.discard.load(Ordering::Acquire) {
            let mut scratch = [0u8; 4096];
            for _ in 0..DISCARD_READS_PER_POLL {
                let mut sink = ReadBuf::new(&mut scratch);
                match Pin::new(&mut this.inner).poll_read(cx, &mut sink) {
                    Poll::Ready(Ok(())) if sink.filled().is_empty() => return Poll::Ready(Ok(())),
                    Poll::Ready(Ok(())) => continue,
                    other => return other,
                }
            }
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if !this.budget.applies.load(Ordering::Acquire) {
            let before = buf.filled().len();
            let read = Pin::new(&mut this.inner).poll_read(cx, buf);
            let n = buf.filled().len().saturating_sub(before);
            this.budget.read.fetch_add(n as u64, Ordering::AcqRel);
            return read;
        }
        let remaining = this.budget.remaining.load(Ordering::Acquire);
        if remaining == 0 {
            // Spent: stop reading (the bytes stay in the kernel) and let the connection's task,
            // which waits on `exceeded`, answer and close. Nothing will wake this read.
            this.budget.exceeded.cancel();
            return Poll::Pending;
        }
        let allowed = remaining.min(buf.remaining());
        let window = buf.initialize_unfilled_to(allowed);
        let mut limited = ReadBuf::new(window);
        let polled = Pin::new(&mut this.inner).poll_read(cx, &mut limited);
        let n = limited.filled().len();
        if let Poll::Ready(Ok(())) = polled {
            buf.advance(n);
            this.budget.remaining.fetch_sub(n, Ordering::AcqRel);
        }
        polled
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// What every request of a connection carries (as an axum `Extension`), and what the WebSocket
/// keeps until it ends: its slot under the caps is freed only then.
#[derive(Clone)]
pub(crate) struct ConnInfo {
    /// The peer.
    pub(crate) peer: SocketAddr,
    /// The raw-byte budget before `hello`.
    pub(crate) pre_hello: Arc<PreHello>,
    /// The connection's place under the caps.
    slot: Arc<Slot>,
}

impl ConnInfo {
    /// See [`Slot::leave_per_ip`].
    pub(crate) fn leave_per_ip(&self) {
        self.slot.leave_per_ip();
    }
}

// ---------------------------------------------------------------------------------------------
// Rate-limited logging of refusals
// ---------------------------------------------------------------------------------------------

/// Logs one line per second at most for a kind of event that a flood repeats thousands of times,
/// with the number of events since the last line.
struct Throttled {
    last: Mutex<Option<Instant>>,
    count: AtomicU64,
}

impl Throttled {
    const fn new() -> Self {
        Throttled { last: Mutex::new(None), count: AtomicU64::new(0) }
    }

    /// The number of events to report now (this one included), or `None` to stay quiet.
    fn tick(&self) -> Option<u64> {
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < Duration::from_secs(1)) {
            return None;
        }
        *last = Some(now);
        Some(self.count.swap(0, Ordering::Relaxed))
    }
}

static REFUSED_TOTAL: Throttled = Throttled::new();
static REFUSED_PER_IP: Throttled = Throttled::new();
static HANDSHAKE_TIMEOUTS: Throttled = Throttled::new();
static ACCEPT_ERRORS: Throttled = Throttled::new();

/// Logs a relay header that did not authenticate another node, at most once a second.
pub(crate) fn log_bad_relay(peer: SocketAddr, reason: &str) {
    static BAD: Throttled = Throttled::new();
    if let Some(n) = BAD.tick() {
        tracing::warn!(%peer, events = n, "a connection claimed to be another node's relay and was counted as a client: {reason}");
    }
}

/// Logs that a connection was cut before `hello`, at most once a second per kind.
pub(crate) fn log_pre_hello_cut(peer: SocketAddr, reason: &str) {
    static CUTS: Throttled = Throttled::new();
    if let Some(n) = CUTS.tick() {
        tracing::warn!(%peer, events = n, "{reason}");
    }
}

// ---------------------------------------------------------------------------------------------
// The accept loop
// ---------------------------------------------------------------------------------------------

/// Everything the accept loop needs.
pub(crate) struct Edge {
    pub(crate) listener: TcpListener,
    pub(crate) router: axum::Router,
    pub(crate) config: NetConfig,
    pub(crate) tls: Option<tokio_rustls::TlsAcceptor>,
    pub(crate) caps: Arc<Caps>,
    pub(crate) shutdown: CancellationToken,
}

/// Accepts until `shutdown`, then waits for the connections still in their HTTP exchange (an
/// upgraded WebSocket lives in the gateway's own tracker).
pub(crate) async fn serve(edge: Edge) {
    let Edge { listener, router, config, tls, caps, shutdown } = edge;
    let http = TaskTracker::new();
    let refusals = Arc::new(Semaphore::new(REFUSAL_SLOTS));
    loop {
        let (tcp, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    if let Some(n) = ACCEPT_ERRORS.tick() {
                        tracing::warn!(events = n, "cannot accept a connection: {e}");
                    }
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        let slot = match caps.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(refusal) => {
                refuse(tcp, peer, refusal, &config, tls.is_some(), &refusals);
                continue;
            }
        };
        // Nagle stays on, as under `axum::serve` (TCP_NODELAY changes the timing clients and
        // tests have been written against).
        let budget = PreHello::new();
        let info = ConnInfo { peer, pre_hello: budget.clone(), slot: Arc::new(slot) };
        let io = Guarded { inner: tcp, budget: budget.clone() };
        let router = router.clone();
        let tls = tls.clone();
        let shutdown = shutdown.clone();
        let deadline = tokio::time::Instant::now() + config.handshake_timeout;
        http.spawn(async move {
            let exchange = async {
                match tls {
                    Some(acceptor) => match acceptor.accept(io).await {
                        Ok(stream) => http_exchange(stream, router, info, shutdown).await,
                        Err(e) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                    },
                    None => http_exchange(io, router, info, shutdown).await,
                }
            };
            // The deadline cuts a connection still unauthenticated when it passes; an
            // authenticated HTTP API request (an upload of minutes) runs on.
            let expired = async {
                tokio::time::sleep_until(deadline).await;
                if budget.is_open() {
                    std::future::pending::<()>().await;
                }
            };
            let timed_out = tokio::select! {
                () = exchange => false,
                () = expired => true,
            };
            if timed_out {
                if let Some(n) = HANDSHAKE_TIMEOUTS.tick() {
                    tracing::info!(
                        %peer,
                        events = n,
                        "closed a connection that did not complete its upgrade in time"
                    );
                }
            }
        });
    }
    drop(listener);
    http.close();
    http.wait().await;
}

/// One HTTP/1 exchange, ending when the response is sent (or the connection was upgraded, after
/// which the WebSocket task owns the stream).
async fn http_exchange<S>(io: S, router: axum::Router, info: ConnInfo, shutdown: CancellationToken)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let peer = info.peer;
    let exceeded = info.pre_hello.exceeded();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
        request.extensions_mut().insert(info.clone());
        let mut router = router.clone();
        async move { tower_service::Service::call(&mut router, request).await }
    });
    // Keep-alive stays on: turning it off makes hyper answer `connection: close`, which breaks
    // the upgrade. A kept-alive connection is still bounded by the upgrade deadline and budget.
    let conn = hyper::server::conn::http1::Builder::new()
        .max_buf_size(MAX_HEAD_BYTES)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(%peer, "HTTP connection error: {e}");
            }
        }
        _ = exceeded => {
            log_pre_hello_cut(peer, "closed a connection that sent too much before its upgrade");
        }
        _ = shutdown.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Answers a connection over a cap with `503` (server-wide) or `429` (per address) and closes it,
/// in a task of its own bounded by [`REFUSAL_SLOTS`] and [`REFUSAL_LINGER`].
fn refuse(
    mut tcp: TcpStream,
    peer: SocketAddr,
    refusal: Refusal,
    config: &NetConfig,
    tls: bool,
    slots: &Arc<Semaphore>,
) {
    let (status, message, log) = match refusal {
        Refusal::Total => (
            "503 Service Unavailable",
            format!(
                "the server has {} open connections, its limit (--max-connections); try again later",
                config.max_connections
            ),
            &REFUSED_TOTAL,
        ),
        Refusal::PerIp => (
            "429 Too Many Requests",
            format!(
                "{} has {} open connections to this server, the limit per address \
                 (--max-connections-per-ip); close some and try again",
                peer.ip(),
                config.max_connections_per_ip
            ),
            &REFUSED_PER_IP,
        ),
    };
    if let Some(n) = log.tick() {
        tracing::warn!(%peer, events = n, "refused a connection: {message}");
    }
    if tls {
        // A plain-text answer means nothing to a TLS client, and a TLS handshake per refusal
        // would hand a flood our CPU: just close.
        return;
    }
    let Ok(permit) = slots.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\nretry-after: 5\r\n\
             connection: close\r\ncontent-length: {}\r\n\r\n{message}\n",
            message.len() + 1
        );
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            tcp.write_all(response.as_bytes()).await?;
            tcp.shutdown().await?;
            let mut scratch = [0u8; 1024];
            while tcp.read(&mut scratch).await? > 0 {}
            Ok::<(), io::Error>(())
        })
        .await;
        drop(permit);
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_slot_that_leaves_its_address_frees_a_place_there_but_not_in_the_total() {
        let caps = Caps::new(3, 1);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let relay = caps.admit(ip).unwrap();
        assert_eq!(caps.admit(ip).err(), Some(Refusal::PerIp));
        relay.leave_per_ip();
        relay.leave_per_ip(); // once only
        let client = caps.admit(ip).unwrap();
        assert_eq!(caps.admit(ip).err(), Some(Refusal::PerIp));
        let other = caps.admit("127.0.0.2".parse().unwrap()).unwrap();
        assert_eq!(caps.admit("127.0.0.3".parse().unwrap()).err(), Some(Refusal::Total));
        drop(relay);
        // The relay's drop frees the total only: the address still holds the client.
        assert_eq!(caps.admit(ip).err(), Some(Refusal::PerIp));
        drop(client);
        let again = caps.admit(ip).unwrap();
        drop((again, other));
        assert_eq!(caps.counts.lock().unwrap().0, 0);
        assert!(caps.counts.lock().unwrap().1.is_empty());
    }

    /// A cut connection lingers while a slot is free; past [`LINGER_SLOTS`] it closes at once,
    /// and each slot comes back when its linger ends.
    #[tokio::test]
    async fn lingering_closes_stop_at_their_bound_and_give_their_slots_back() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut peers = Vec::new();
        for _ in 0..LINGER_SLOTS + 8 {
            let client = TcpStream::connect(addr).await.unwrap();
            let (server, _) = listener.accept().await.unwrap();
            let budget = PreHello::new();
            budget.discard();
            drop(Guarded { inner: server, budget });
            peers.push(client);
        }
        assert_eq!(LINGERING.available_permits(), 0, "every slot is taken");
        // A lingering socket shut its end only: the peer reads the end of the stream and may
        // still write. The ones past the bound were closed: a write there is answered by a reset.
        for peer in &mut peers {
            let mut byte = [0u8; 1];
            assert_eq!(peer.read(&mut byte).await.unwrap(), 0);
            peer.write_all(b"x").await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut open = 0;
        for peer in &mut peers {
            if peer.write_all(b"x").await.is_ok() {
                open += 1;
            }
        }
        assert_eq!(open, LINGER_SLOTS);
        let deadline = Instant::now() + REFUSAL_LINGER * 10;
        while LINGERING.available_permits() < LINGER_SLOTS {
            assert!(Instant::now() < deadline, "lingering sockets were never closed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
