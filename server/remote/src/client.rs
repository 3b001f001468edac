//! A harness node's handle on one sandbox host: connects over TLS with the host's pinned
//! certificate, joins with the token ([`crate::trust`]), multiplexes the calls of every session
//! on one WebSocket by request id, and reconnects when the connection is gone (a host that
//! restarted still has its workspace directories).
//!
//! A call that was in flight when the connection dropped may or may not have run: calls that
//! only read (`Open`, `Digest`, `Read`, `Glob`, `Grep`) are sent again once over a new
//! connection; a command or a write is answered [`RemoteError::Lost`], for the caller to decide.
//!
//! A host that stops answering without closing the connection (frozen, or its packets dropped)
//! must not hold a session forever ([`Liveness`]): the link sends WebSocket pings and a host
//! that answers nothing for the ping timeout is marked down, its calls failing with
//! [`RemoteError::Down`]; every call has a deadline (a command's timeout plus a grace) past
//! which it fails with [`RemoteError::NoAnswer`]; and a cancelled call (an interrupt) waits a
//! short while for the host's answer, then gives up, so an interrupt always ends the turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use outboard_shared::OutputStream;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::protocol::{
    self, stamp_from_wire, stamp_to_wire, Op, Reply, ToHarness, ToHost, PROTOCOL_VERSION,
};
use crate::trust::{self as auth, AuthError, JoinKey, PinnedVerifier};
use outboard_sandbox::output::CappedOutput;
use outboard_sandbox::ExecResult;
use outboard_tools::{ReadLedger, ToolOutcome};

/// Messages waiting to be written to the host; callers wait past it (back-pressure on the
/// sessions, never unbounded memory). Sized like the host's side (the host's `OUTBOUND_MESSAGES`).
pub const OUTBOUND_MESSAGES: usize = 256;

/// Output chunks of one call received and not yet handed to its caller. The reader waits past
/// it, which holds the other calls' messages too, so it is generous: 256 chunks.
pub const CALL_EVENTS: usize = 256;

/// How long one connection attempt (TCP, TLS, WebSocket, join) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a call keeps trying to reach a host that is down before it fails with
/// [`RemoteError::Unreachable`]: long enough for a host restart.
pub const DEFAULT_RECONNECT_WINDOW: Duration = Duration::from_secs(30);

/// How long a call waits for a host that does not answer, and how the link checks the host is
/// alive. The defaults suit production; tests use short ones (`serve --host-ping-secs`…).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// How often the link sends a WebSocket ping.
    pub ping_interval: Duration,
    /// A host that sends nothing (no pong, no message) for this long is marked down and its
    /// calls fail.
    pub ping_timeout: Duration,
    /// Added to a command's timeout (or to [`CALL_TIMEOUT`] for other calls) to make the call's
    /// deadline: the host's own kill, its reply and the network's delay fit well within it.
    pub call_grace: Duration,
    /// How long a cancelled call waits for the host's answer before it fails: the host answers a
    /// cancel within milliseconds when it is alive.
    pub cancel_wait: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            ping_interval: Duration::from_secs(15),
            ping_timeout: Duration::from_secs(45),
            call_grace: Duration::from_secs(30),
            cancel_wait: Duration::from_secs(10),
        }
    }
}

/// The deadline of a call that is not a command (a file tool, a digest, a status), before the
/// grace: a `Grep` of a large tree on a loaded host still fits.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Where a host is and how to join it.
#[derive(Clone)]
pub struct HostEndpoint {
    /// The host's name on the harness (`admin hosts add NAME`).
    pub name: String,
    /// `wss://HOST:PORT` (or `ws://HOST:PORT`, or `HOST:PORT`: the link is always TLS).
    pub url: String,
    /// The join token.
    pub token: String,
    /// The certificate fingerprint pinned at the first join; `None` before it.
    pub pin: Option<String>,
}

impl std::fmt::Debug for HostEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostEndpoint")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("pin", &self.pin)
            .finish_non_exhaustive()
    }
}

/// Why a call to a host failed. Messages name the host and never carry a secret.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The host cannot be reached.
    #[error(
        "sandbox host {name} at {url} is unreachable: {reason}; check that `outboard-server \
         sandbox-host` runs there and that this node can reach its port"
    )]
    Unreachable { name: String, url: String, reason: String },
    /// The host refused this harness (wrong token, other version).
    #[error("sandbox host {name} at {url} refused this harness: {reason}")]
    Refused { name: String, url: String, reason: String },
    /// The peer is not the host this harness joined: its certificate is not the pinned one, or
    /// it could not prove the token.
    #[error(
        "the peer at {url} is not sandbox host {name} as this harness knows it ({reason}); if the \
         host was reinstalled, add it again with `outboard-server admin hosts add {name} --url \
         {url}`"
    )]
    NotTheHost { name: String, url: String, reason: String },
    /// The connection dropped while a call that changes things ran.
    #[error(
        "the connection to sandbox host {name} at {url} was lost during the call; it may or may \
         not have run there: check the workspace before retrying"
    )]
    Lost { name: String, url: String },
    /// The host answered that it could not do the call.
    #[error("sandbox host {name} could not do the call: {error}")]
    Failed { name: String, error: String },
    /// The host answered something this client did not ask for.
    #[error("sandbox host {name} answered out of protocol ({what}); run the same outboard version on both")]
    Protocol { name: String, what: String },
    /// The host sent nothing, not even a pong, for the ping timeout: it is marked down.
    #[error(
        "sandbox host {name} at {url} stopped answering ({reason}); the call may or may not have \
         run there: check the workspace before retrying"
    )]
    Down { name: String, url: String, reason: String },
    /// The call's deadline passed, or a cancelled call was not acknowledged in time.
    #[error(
        "sandbox host {name} at {url} did not answer {what} within {waited} s; it may be frozen \
         or cut off, and the call may or may not have run there"
    )]
    NoAnswer { name: String, url: String, what: &'static str, waited: u64 },
    /// The call does not fit in one message.
    #[error("a call to sandbox host {name} was not sent: {error}")]
    Frame { name: String, error: protocol::FrameError },
    /// The token is malformed.
    #[error(transparent)]
    Token(#[from] AuthError),
}

struct Conn {
    /// Encoded messages for the writer (encoded by the caller, so an oversized one is the
    /// caller's error, never a silent drop).
    out: mpsc::Sender<Vec<u8>>,
    calls: Arc<std::sync::Mutex<HashMap<u64, mpsc::Sender<ToHarness>>>>,
    closed: CancellationToken,
    /// Why the link was marked down (the host missed its pings); `None` while it is up or when
    /// it closed for another reason.
    down: Arc<std::sync::Mutex<Option<String>>>,
}

/// A harness node's connection to one sandbox host (cheap to share behind an `Arc`).
pub struct HostClient {
    endpoint: HostEndpoint,
    key: JoinKey,
    pin: std::sync::Mutex<Option<String>>,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    next_id: AtomicU64,
    reconnect_window: Duration,
    liveness: Liveness,
    /// The capacity the host told at its last join.
    capacity: std::sync::Mutex<Option<u32>>,
}

/// What a host says of its load ([`HostClient::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostStatus {
    /// Workspaces it offers to take.
    pub capacity: u32,
    /// Workspace directories it keeps.
    pub workspaces: u64,
    /// Sandboxes up now (running or frozen).
    pub live_sandboxes: u64,
}

impl HostClient {
    /// A client for `endpoint`; nothing connects until the first call (or [`HostClient::connect`]).
    /// A host that stays down for `reconnect_window` is reported unreachable.
    pub fn new(
        endpoint: HostEndpoint,
        reconnect_window: Duration,
    ) -> Result<HostClient, RemoteError> {
        let key = JoinKey::from_token(&endpoint.token)?;
        let pin = std::sync::Mutex::new(endpoint.pin.clone());
        Ok(HostClient {
            endpoint,
            key,
            pin,
            conn: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
            reconnect_window,
            liveness: Liveness::default(),
            capacity: std::sync::Mutex::new(None),
        })
    }

    /// This client with `liveness`'s pings and deadlines instead of the defaults.
    pub fn with_liveness(mut self, liveness: Liveness) -> HostClient {
        self.liveness = liveness;
        self
    }

    /// The certificate fingerprint pinned (after the first join), for the harness to store.
    pub fn pinned(&self) -> Option<String> {
        self.pin.lock().ok().and_then(|p| p.clone())
    }

    /// The capacity the host told at the last join; `None` before one (or from a host that
    /// tells none).
    pub fn capacity(&self) -> Option<u32> {
        self.capacity.lock().ok().and_then(|c| *c)
    }

    /// The host's name on this harness.
    pub fn name(&self) -> &str {
        &self.endpoint.name
    }

    /// The host's capacity, workspaces and live sandboxes now.
    pub async fn status(&self) -> Result<HostStatus, RemoteError> {
        match self.call_retrying(Op::Status, &mut |_, _| {}, CancellationToken::new()).await? {
            Reply::Status { capacity, workspaces, live_sandboxes } => {
                Ok(HostStatus { capacity, workspaces, live_sandboxes })
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// The ledger entries of `paths` in `workspace` as they are now on the host (a restarted
    /// harness's rebuild of a session's ledger).
    pub async fn stamps(
        &self,
        workspace: &str,
        paths: Vec<String>,
    ) -> Result<ReadLedger, RemoteError> {
        let op = Op::Stamps { workspace: workspace.to_owned(), paths };
        match self.call_retrying(op, &mut |_, _| {}, CancellationToken::new()).await? {
            Reply::Stamps { stamps } => {
                let mut ledger = ReadLedger::new();
                for entry in stamps {
                    if let Some(stamp) = stamp_from_wire(&entry) {
                        ledger.record_stamp(std::path::Path::new(&entry.path), stamp);
                    }
                }
                Ok(ledger)
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// Connects and joins now (else the first call does).
    pub async fn connect(&self) -> Result<(), RemoteError> {
        self.connection().await.map(|_| ())
    }

    /// Connects and joins now with one attempt of at most `timeout` (placement's probe: a host
    /// that is down fails at once rather than after the reconnect window).
    pub async fn connect_within(&self, timeout: Duration) -> Result<(), RemoteError> {
        let mut slot = self.conn.lock().await;
        if slot.as_ref().is_some_and(|c| !c.closed.is_cancelled()) {
            return Ok(());
        }
        let conn = match tokio::time::timeout(timeout.min(CONNECT_TIMEOUT), self.dial()).await {
            Ok(conn) => conn?,
            Err(_) => return Err(self.unreachable("the connection attempt timed out")),
        };
        *slot = Some(Arc::new(conn));
        Ok(())
    }

    /// Whether a joined connection is up now.
    pub async fn is_connected(&self) -> bool {
        self.conn.lock().await.as_ref().is_some_and(|c| !c.closed.is_cancelled())
    }

    /// Creates the workspace `workspace` on the host if it is not there yet.
    pub async fn open(&self, workspace: &str) -> Result<(), RemoteError> {
        let op = Op::Open { workspace: workspace.to_owned() };
        match self.call_retrying(op, &mut |_, _| {}, CancellationToken::new()).await? {
            Reply::Opened => Ok(()),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Runs `command` in the workspace's sandbox on the host, streaming its output to
    /// `on_output`; cancelling `cancel` kills it there.
    pub async fn exec(
        &self,
        workspace: &str,
        command: &str,
        timeout: Duration,
        on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> Result<ExecResult, RemoteError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let op =
            Op::Exec { workspace: workspace.to_owned(), command: command.to_owned(), timeout_ms };
        let deadline = timeout.saturating_add(self.liveness.call_grace);
        match self.call_within(op, on_output, cancel, deadline).await? {
            Reply::Exec { exit_code, output, timed_out, signal, failure } => Ok(ExecResult {
                exit_code,
                output: capped(output, CappedOutput::default()),
                timed_out,
                signal,
                failure: failure.map(|f| protocol::host_text(&f)),
            }),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Runs a workspace file tool on the host with the session's ledger `reads`, which takes
    /// what the tool recorded or forgot, as it would locally.
    pub async fn tool(
        &self,
        workspace: &str,
        name: &str,
        input: &Value,
        reads: &mut ReadLedger,
        cancel: CancellationToken,
    ) -> Result<ToolOutcome, RemoteError> {
        let checks = matches!(name, "Write" | "Edit" | "NotebookEdit");
        let ledger = if checks {
            reads.files().into_iter().map(|(path, stamp)| stamp_to_wire(path, stamp)).collect()
        } else {
            Vec::new()
        };
        let op = Op::Tool {
            workspace: workspace.to_owned(),
            name: name.to_owned(),
            input: input.clone(),
            ledger,
        };
        // Only calls that change nothing are sent again after a lost connection: a background
        // command's start, a kill or a read of new output (which moves the read mark) is not.
        let reply = if matches!(name, "Read" | "Glob" | "Grep") {
            self.call_retrying(op, &mut |_, _| {}, cancel).await?
        } else {
            self.call(op, &mut |_, _| {}, cancel).await?
        };
        match reply {
            Reply::Tool { output, is_error, recorded, forgotten, attachments } => {
                for path in forgotten {
                    reads.forget(std::path::Path::new(&path));
                }
                for entry in recorded {
                    if let Some(stamp) = stamp_from_wire(&entry) {
                        reads.record_stamp(std::path::Path::new(&entry.path), stamp);
                    }
                }
                Ok(ToolOutcome { output: capped(output, tool_cap()), is_error, attachments })
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// The `target_before` digest of `path`, computed on the host.
    pub async fn digest(&self, workspace: &str, path: &str) -> Result<Option<String>, RemoteError> {
        let op = Op::Digest { workspace: workspace.to_owned(), path: path.to_owned() };
        match self.call_retrying(op, &mut |_, _| {}, CancellationToken::new()).await? {
            Reply::Digest { digest } => Ok(digest),
            other => Err(self.unexpected(&other)),
        }
    }

    fn unexpected(&self, reply: &Reply) -> RemoteError {
        match reply {
            Reply::Failed { error } => RemoteError::Failed {
                name: self.endpoint.name.clone(),
                error: protocol::host_text(error),
            },
            // Named by its kind only: its fields are the host's and may be large.
            other => RemoteError::Protocol {
                name: self.endpoint.name.clone(),
                what: format!("an unexpected {} reply", reply_kind(other)),
            },
        }
    }

    fn lost(&self) -> RemoteError {
        RemoteError::Lost { name: self.endpoint.name.clone(), url: self.endpoint.url.clone() }
    }

    /// [`HostClient::call`], sent once more over a new connection when the first was lost: only
    /// for calls that change nothing.
    async fn call_retrying(
        &self,
        op: Op,
        on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> Result<Reply, RemoteError> {
        match self.call(op.clone(), on_output, cancel.clone()).await {
            Err(RemoteError::Lost { .. }) => self.call(op, on_output, cancel).await,
            other => other,
        }
    }

    /// Sends one call and waits for its reply, handing its output to `on_output`, at most
    /// [`CALL_TIMEOUT`] plus the grace.
    pub async fn call(
        &self,
        op: Op,
        on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> Result<Reply, RemoteError> {
        let deadline = CALL_TIMEOUT.saturating_add(self.liveness.call_grace);
        self.call_within(op, on_output, cancel, deadline).await
    }

    /// [`HostClient::call`] with its deadline: past `deadline`, or [`Liveness::cancel_wait`]
    /// after `cancel`, it fails with [`RemoteError::NoAnswer`] (and the host is told to stop
    /// the call, if it still listens).
    async fn call_within(
        &self,
        op: Op,
        on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
        deadline: Duration,
    ) -> Result<Reply, RemoteError> {
        let conn = self.connection().await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = mpsc::channel(CALL_EVENTS);
        if let Ok(mut calls) = conn.calls.lock() {
            calls.insert(id, tx);
        }
        let guard = CallGuard { conn: &conn, id, done: false };
        let bytes = protocol::encode(&ToHost::Call { id, op })
            .map_err(|e| RemoteError::Frame { name: self.endpoint.name.clone(), error: e })?;
        let give_up = tokio::time::sleep(deadline);
        tokio::pin!(give_up);
        // The outbox is bounded: a host that reads nothing fills it, so the send waits within
        // the deadline too.
        tokio::select! {
            sent = conn.out.send(bytes) => if sent.is_err() {
                return Err(self.dropped(&conn));
            },
            () = &mut give_up => return Err(self.no_answer("the call", deadline)),
        }
        let mut cancel_sent = false;
        loop {
            tokio::select! {
                biased;
                event = rx.recv() => match event {
                    Some(ToHarness::Output { stream, text, .. }) => on_output(stream, &text),
                    Some(ToHarness::Reply { reply, .. }) => {
                        let mut guard = guard;
                        guard.done = true;
                        return Ok(reply);
                    }
                    Some(other) => {
                        return Err(RemoteError::Protocol {
                            name: self.endpoint.name.clone(),
                            what: format!("{other:?} inside a call"),
                        })
                    }
                    None => return Err(self.dropped(&conn)),
                },
                _ = cancel.cancelled(), if !cancel_sent => {
                    cancel_sent = true;
                    // Never waits on a full outbox: a host that reads nothing must not hold
                    // the interrupt either.
                    if conn.out.try_send(cancel_bytes(id)).is_err() && conn.closed.is_cancelled() {
                        return Err(self.dropped(&conn));
                    }
                    let wait = self.liveness.cancel_wait;
                    give_up.as_mut().reset(tokio::time::Instant::now() + wait);
                }
                () = &mut give_up => {
                    return Err(match cancel_sent {
                        true => self.no_answer("the interrupt", self.liveness.cancel_wait),
                        false => self.no_answer("the call", deadline),
                    });
                }
            }
        }
    }

    fn no_answer(&self, what: &'static str, waited: Duration) -> RemoteError {
        RemoteError::NoAnswer {
            name: self.endpoint.name.clone(),
            url: self.endpoint.url.clone(),
            what,
            waited: waited.as_secs(),
        }
    }

    /// Why a call's connection went away under it: the host missed its pings, or the
    /// connection was lost.
    fn dropped(&self, conn: &Conn) -> RemoteError {
        match conn.down.lock().ok().and_then(|d| d.clone()) {
            Some(reason) => RemoteError::Down {
                name: self.endpoint.name.clone(),
                url: self.endpoint.url.clone(),
                reason,
            },
            None => self.lost(),
        }
    }

    async fn connection(&self) -> Result<Arc<Conn>, RemoteError> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref().filter(|c| !c.closed.is_cancelled()) {
            return Ok(conn.clone());
        }
        let deadline = Instant::now() + self.reconnect_window;
        let mut backoff = Duration::from_millis(50);
        let conn = loop {
            match tokio::time::timeout(CONNECT_TIMEOUT, self.dial()).await {
                Ok(Ok(conn)) => break conn,
                Ok(Err(e @ RemoteError::Unreachable { .. })) if Instant::now() < deadline => {
                    tracing::debug!("{e}; retrying");
                }
                Ok(Err(e)) => return Err(e),
                Err(_) if Instant::now() < deadline => {}
                Err(_) => return Err(self.unreachable("the connection attempt timed out")),
            }
            tokio::time::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())))
                .await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        };
        let conn = Arc::new(conn);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    fn unreachable(&self, reason: impl Into<String>) -> RemoteError {
        RemoteError::Unreachable {
            name: self.endpoint.name.clone(),
            url: self.endpoint.url.clone(),
            reason: reason.into(),
        }
    }

    fn not_the_host(&self, reason: impl Into<String>) -> RemoteError {
        RemoteError::NotTheHost {
            name: self.endpoint.name.clone(),
            url: self.endpoint.url.clone(),
            reason: reason.into(),
        }
    }

    /// One connection attempt: TCP, TLS against the pin, WebSocket, the join handshake.
    async fn dial(&self) -> Result<Conn, RemoteError> {
        let address = address(&self.endpoint.url);
        let tcp = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| self.unreachable(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        let pin = self.pinned();
        let verifier = PinnedVerifier::new(pin.clone());
        let config = verifier.client_config()?;
        let name = rustls::pki_types::ServerName::try_from(auth::HOST_CERT_NAME)
            .map_err(|e| self.unreachable(e.to_string()))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .map_err(|e| {
                let reason = e.to_string();
                if reason.contains("is not the pinned") {
                    self.not_the_host(reason)
                } else {
                    self.unreachable(format!("TLS failed: {reason}"))
                }
            })?;
        let fingerprint = verifier.seen().ok_or_else(|| self.not_the_host("no certificate"))?;
        let url = format!("wss://{address}/");
        let (mut ws, _) = tokio_tungstenite::client_async_with_config(
            url,
            tls,
            Some(protocol::harness_ws_config()),
        )
        .await
        .map_err(|e| self.unreachable(format!("WebSocket failed: {e}")))?;
        let host_nonce = match read(&mut ws).await.map_err(|e| self.unreachable(e))? {
            Some(ToHarness::Challenge { version, nonce }) if version == PROTOCOL_VERSION => nonce,
            Some(ToHarness::Challenge { version, .. }) => {
                return Err(RemoteError::Refused {
                    name: self.endpoint.name.clone(),
                    url: self.endpoint.url.clone(),
                    reason: format!(
                        "the host speaks protocol version {version}, this harness \
                         {PROTOCOL_VERSION}; run the same outboard version on both"
                    ),
                })
            }
            _ => return Err(self.unreachable("the host did not send its challenge")),
        };
        let nonce = auth::nonce()?;
        let proof = self.key.harness_proof(&host_nonce, &nonce, &fingerprint);
        let join = ToHost::Join { version: PROTOCOL_VERSION, nonce: nonce.clone(), proof };
        let bytes = protocol::encode(&join).map_err(|e| self.unreachable(e.to_string()))?;
        ws.send(Message::Binary(bytes.into()))
            .await
            .map_err(|e| self.unreachable(e.to_string()))?;
        match read(&mut ws).await.map_err(|e| self.unreachable(e))? {
            Some(ToHarness::Welcome { proof, capacity }) => {
                if !self.key.verify_host(&proof, &host_nonce, &nonce, &fingerprint) {
                    return Err(self.not_the_host("it could not prove the join token"));
                }
                if let Ok(mut known) = self.capacity.lock() {
                    *known = capacity;
                }
            }
            Some(ToHarness::Refused { reason }) => {
                // Reachable without the token: shown only as bounded, plain text.
                return Err(RemoteError::Refused {
                    name: self.endpoint.name.clone(),
                    url: self.endpoint.url.clone(),
                    reason: protocol::host_text(&reason),
                });
            }
            _ => return Err(self.unreachable("the host closed the connection during the join")),
        }
        if let Ok(mut pinned) = self.pin.lock() {
            pinned.get_or_insert(fingerprint);
        }
        Ok(spawn_connection(ws, self.liveness))
    }
}

/// Takes a call out of the connection's table when its caller stops waiting, and tells the
/// host to stop it if it had not finished.
struct CallGuard<'a> {
    conn: &'a Conn,
    id: u64,
    done: bool,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.conn.calls.lock() {
            calls.remove(&self.id);
        }
        if !self.done {
            let _ = self.conn.out.try_send(cancel_bytes(self.id));
        }
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

async fn read(ws: &mut Ws) -> Result<Option<ToHarness>, String> {
    loop {
        match ws.next().await {
            None | Some(Ok(Message::Close(_))) => return Ok(None),
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(Message::Binary(bytes))) => {
                return protocol::decode_from_host(&bytes).map(Some).map_err(|e| e.to_string())
            }
            Some(Ok(_)) => {}
        }
    }
}

/// The link's tasks: a writer (calls' messages and, every ping interval, a ping), a reader
/// (replies and output to their calls; any message, pongs included, proves the host alive) and
/// a watchdog that marks the link down when the host has been silent for the ping timeout.
fn spawn_connection(ws: Ws, liveness: Liveness) -> Conn {
    let (sink, stream) = ws.split();
    let (out, out_rx) = mpsc::channel::<Vec<u8>>(OUTBOUND_MESSAGES);
    let calls: Arc<std::sync::Mutex<HashMap<u64, mpsc::Sender<ToHarness>>>> = Arc::default();
    let closed = CancellationToken::new();
    let down: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
    let heard = Arc::new(std::sync::Mutex::new(Instant::now()));
    tokio::spawn(write_link(sink, out_rx, liveness.ping_interval, closed.clone()));
    tokio::spawn(read_link(stream, calls.clone(), heard.clone(), closed.clone()));
    tokio::spawn(watch_link(liveness, heard, down.clone(), closed.clone()));
    Conn { out, calls, closed, down }
}

/// How long closing the link may take: a host that reads nothing never acknowledges.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

async fn write_link(
    mut sink: futures_util::stream::SplitSink<Ws, Message>,
    mut out_rx: mpsc::Receiver<Vec<u8>>,
    ping_interval: Duration,
    closed: CancellationToken,
) {
    // The first ping one interval after the join (which proved the host alive just now).
    let every = ping_interval.max(Duration::from_millis(10));
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let message = tokio::select! {
            message = out_rx.recv() => match message {
                Some(bytes) => Message::Binary(bytes.into()),
                None => break,
            },
            _ = ping.tick() => Message::Ping(Vec::new().into()),
            _ = closed.cancelled() => break,
        };
        // A frozen host stops reading: the send then waits on a full socket, until the
        // watchdog closes the link.
        let sent = tokio::select! {
            sent = sink.send(message) => sent.is_ok(),
            _ = closed.cancelled() => false,
        };
        if !sent {
            break;
        }
    }
    closed.cancel();
    let _ = tokio::time::timeout(CLOSE_WAIT, sink.close()).await;
}

async fn read_link(
    mut stream: futures_util::stream::SplitStream<Ws>,
    calls: Arc<std::sync::Mutex<HashMap<u64, mpsc::Sender<ToHarness>>>>,
    heard: Arc<std::sync::Mutex<Instant>>,
    closed: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            message = stream.next() => message,
            _ = closed.cancelled() => break,
        };
        if let Some(Ok(_)) = &message {
            if let Ok(mut heard) = heard.lock() {
                *heard = Instant::now();
            }
        }
        let message: ToHarness = match message {
            Some(Ok(Message::Binary(bytes))) => match protocol::decode_from_host(&bytes) {
                Ok(message) => message,
                Err(e) => {
                    tracing::warn!("sandbox host sent a bad message: {e}");
                    break;
                }
            },
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => continue,
        };
        let id = match &message {
            ToHarness::Output { id, .. } | ToHarness::Reply { id, .. } => *id,
            _ => continue,
        };
        let waiting = calls.lock().ok().and_then(|c| c.get(&id).cloned());
        if let Some(waiting) = waiting {
            // Within the link's life only: a caller that stopped reading must not hold the
            // other calls' messages past a close.
            tokio::select! {
                _ = waiting.send(message) => {}
                _ = closed.cancelled() => break,
            }
        }
    }
    closed.cancel();
    if let Ok(mut calls) = calls.lock() {
        calls.clear();
    }
}

/// Marks the link down, and closes it, once the host has sent nothing for the ping timeout.
async fn watch_link(
    liveness: Liveness,
    heard: Arc<std::sync::Mutex<Instant>>,
    down: Arc<std::sync::Mutex<Option<String>>>,
    closed: CancellationToken,
) {
    let check = (liveness.ping_timeout / 4).max(Duration::from_millis(10));
    loop {
        tokio::select! {
            () = tokio::time::sleep(check) => {}
            _ = closed.cancelled() => return,
        }
        let silent = heard.lock().map(|h| h.elapsed()).unwrap_or_default();
        if silent >= liveness.ping_timeout {
            let reason = format!(
                "no answer to the link's pings for {} s; the link was closed",
                silent.as_secs()
            );
            tracing::warn!("a sandbox host is down: {reason}");
            if let Ok(mut down) = down.lock() {
                *down = Some(reason);
            }
            closed.cancel();
            return;
        }
    }
}

/// A `Cancel`, encoded (a few bytes: never over the bound).
fn cancel_bytes(id: u64) -> Vec<u8> {
    protocol::encode(&ToHost::Cancel { id }).unwrap_or_default()
}

/// The name of a reply's kind, for messages.
fn reply_kind(reply: &Reply) -> &'static str {
    match reply {
        Reply::Opened => "Opened",
        Reply::Exec { .. } => "Exec",
        Reply::Tool { .. } => "Tool",
        Reply::Digest { .. } => "Digest",
        Reply::Stamps { .. } => "Stamps",
        Reply::Status { .. } => "Status",
        Reply::Failed { .. } => "Failed",
    }
}

/// The most a host's tool result may hold, as a local one: `Read`'s bound, the largest of the
/// file tools' (a foreground `Bash` comes as an exec, capped as a local command's output), and
/// room for the note a tool adds.
pub const MAX_HOST_TOOL_OUTPUT_BYTES: usize = outboard_tools::file::MAX_READ_OUTPUT_BYTES + 4096;

fn tool_cap() -> CappedOutput {
    CappedOutput::new(MAX_HOST_TOOL_OUTPUT_BYTES / 2, MAX_HOST_TOOL_OUTPUT_BYTES / 2)
}

/// `output` kept within `cap` (head and tail, the middle cut with a note), as the server keeps
/// a local command's output: what a host sends goes into the session's log and the model's
/// context, and a host is not trusted to bound it.
fn capped(output: String, mut cap: CappedOutput) -> String {
    cap.push(&output);
    cap.into_string()
}

/// `HOST:PORT` of a host URL.
fn address(url: &str) -> &str {
    let rest = url.strip_prefix("wss://").or_else(|| url.strip_prefix("ws://")).unwrap_or(url);
    rest.trim_end_matches('/')
}
