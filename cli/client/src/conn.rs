//! The WebSocket client of the Outboard protocol: handshake, requests matched to responses by id,
//! and the stream of session events. `outboard run`, `outboard sessions` and the TUI all
//! talk to the server through [`Client`], whether the server is remote or embedded in-process.
//!
//! One task owns the socket (the connection actor): it writes the requests it is handed, routes each
//! `response` to the oneshot of the request with the same id and pushes `event`s into a bounded
//! queue the caller drains with [`Client::next_event`]. Nothing else touches the socket, so there is
//! no lock. Request methods return `'static` futures that do not borrow the client: a caller can
//! keep one (an interrupt) in flight inside a `select!` while it goes on draining events, which is
//! what keeps a full event queue from holding a response hostage.
//!
//! Room events (`presence`, `drive_requested`, `memory_changed`) are delivered only to clients
//! that ask for them ([`Client::connect_with_room_events`], the TUI): headless `outboard run`
//! prints every event it gets, and who is watching or what a teammate changed in the org's files
//! is not part of a turn. [`Backoff`] paces reconnects; the TUI's
//! connection loop uses it with [`Client::attach`]'s `after_seq` to resume without a gap.
//!
//! Transport security ([`ConnectOptions`]): `wss://` uses rustls with the webpki roots plus the
//! certificates of `--ca-cert`/`OUTBOARD_CA_CERT` (a private CA); a token is never sent over
//! clear-text `ws://` to a host other than loopback unless `--insecure`. While connected, the
//! connection task sends a WebSocket ping every [`CLIENT_PING_INTERVAL`] so that the server's
//! idle timeout never cuts an idle TUI or a long headless turn.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use outboard_shared::{
    methods, AgentsImportParams, AgentsImportResponse, AgentsListResponse, Call, ClientFrame,
    DriveGrantParams, Empty, ErrorCode, EventKind, FileVersion, FilesChangeResponse,
    FilesDeleteParams, FilesHistoryParams, FilesListParams, FilesReadParams, FilesReadResponse,
    FilesRestoreParams, FilesWriteParams, Hello, ImportFile, Method, ProgressFrame, Request,
    RequestId, Response, Role, ServerFrame, SessionAttachParams, SessionAttachResponse,
    SessionCreateParams, SessionEvent, SessionHistoryParams, SessionHistoryResponse, SessionId,
    SessionInfo, SessionListParams, SessionRef, SkillInfo, SkillsImportParams,
    SkillsImportResponse, TurnInterruptResponse, TurnSendParams, TurnSendResponse, Welcome,
    CLIENT_PING_INTERVAL, MAX_FRAME_BYTES, PROTOCOL_VERSION,
};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use crate::backoff::Backoff;
use crate::error::ClientError;

/// How the client reaches the server beyond the URL: trust, clear-text policy, keep-alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// A PEM file of CA certificates trusted for `wss://` besides the webpki roots.
    pub ca_cert: Option<std::path::PathBuf>,
    /// Allow a token over clear-text `ws://` to a non-loopback host.
    pub insecure: bool,
    /// How often the connection task pings ([`CLIENT_PING_INTERVAL`]).
    pub ping_interval: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions { ca_cert: None, insecure: false, ping_interval: CLIENT_PING_INTERVAL }
    }
}

/// How long an attach waits for a session whose server node cannot be reached to be taken
/// over by another ([`Client::attach_through_takeover`]): a lease (10 s by default) runs out
/// and a node notices within a few seconds more; a minute covers leases a few times longer.
pub const TAKEOVER_WAIT: Duration = Duration::from_secs(60);
/// The longest pause between attach attempts while waiting for a takeover: the user lands on
/// the new node within this of its taking the session.
const TAKEOVER_POLL: Duration = Duration::from_secs(1);
/// What a client shows while an attach waits for a takeover.
pub const TAKEOVER_NOTICE: &str = "waiting for another node to take the session over…";

/// Whether `err` says the session runs on a server node that this one cannot reach (it died,
/// or the network between them broke): the session is another node's once its lease expires.
pub fn owner_unreachable(err: &ClientError) -> bool {
    matches!(err, ClientError::Server { error, .. }
        if error.code == ErrorCode::Unavailable && error.node_url.is_some())
}

/// How long connecting, upgrading to WebSocket and the hello/welcome exchange may take together.
/// A loopback or LAN server answers in milliseconds; ten seconds covers a slow VPN without leaving
/// a script hanging on a black-holed address.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Capacity of the queue of pushed events between the connection task and the caller. Events
/// come in bursts (a model streams a delta every few milliseconds, a command's output in chunks);
/// 1024 absorbs several seconds of a slow terminal without back-pressure. When it is full the
/// connection task waits, which stops reading the socket and lets the server's own per-connection
/// bound decide (it re-snapshots a lagging client rather than stalling the session).
pub const EVENT_CHANNEL_CAPACITY: usize = 1024;

/// Capacity of the queue of outgoing requests. A client has few requests in flight (a run has at
/// most two: the turn and an interrupt); 32 only bounds a runaway caller.
pub const REQUEST_CHANNEL_CAPACITY: usize = 32;

/// The client name announced in `hello`.
pub fn client_name() -> String {
    format!("outboard-cli/{}", env!("CARGO_PKG_VERSION"))
}

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;
type Reply = oneshot::Sender<Result<Value, ClientError>>;

/// A request handed to the connection task.
struct Outgoing {
    request: Request,
    reply: Reply,
    /// Where the request's [`ProgressFrame`]s go, for the requests that report progress.
    progress: Option<mpsc::Sender<ProgressFrame>>,
}

/// Progress frames of one request waiting to be read. Progress is advisory: when the reader is
/// this far behind, newer frames are dropped rather than holding up the connection (the next one
/// that fits says where things are).
pub const PROGRESS_CHANNEL_CAPACITY: usize = 64;

/// A connected, authenticated client. Dropping it closes the connection.
pub struct Client {
    url: String,
    welcome: Welcome,
    requests: mpsc::Sender<Outgoing>,
    events: mpsc::Receiver<Result<SessionEvent, ClientError>>,
    next_id: Arc<AtomicU64>,
    /// The error that ended the connection, once [`Client::next_event`] has seen it.
    ended: Option<ClientError>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("url", &self.url).field("welcome", &self.welcome).finish()
    }
}

impl Client {
    /// Connects to `url` (`ws://HOST:PORT`), sends `hello` with `token` and waits for `welcome`,
    /// all within [`HANDSHAKE_TIMEOUT`].
    pub async fn connect(url: &str, token: &str) -> Result<Client, ClientError> {
        Self::connect_with(url, token, false, &ConnectOptions::default()).await
    }

    /// Like [`Client::connect`], and also delivers room events (`presence`, `drive_requested`,
    /// `memory_changed`).
    pub async fn connect_with_room_events(url: &str, token: &str) -> Result<Client, ClientError> {
        Self::connect_with(url, token, true, &ConnectOptions::default()).await
    }

    /// [`Client::connect`] with room events when `room`, and the transport `options`.
    pub async fn connect_with(
        url: &str,
        token: &str,
        room: bool,
        options: &ConnectOptions,
    ) -> Result<Client, ClientError> {
        let host = validate_url(url)?;
        if url.starts_with("ws://") && !is_loopback(&host) && !options.insecure {
            return Err(ClientError::Insecure { host });
        }
        let connector =
            if url.starts_with("wss://") { Some(tls_connector(options)?) } else { None };
        let ping = options.ping_interval.max(Duration::from_millis(10));
        let handshake = handshake(url, token, room, connector, ping);
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Connect {
                url: url.to_owned(),
                source: None,
                reason: format!("no answer within {} s", HANDSHAKE_TIMEOUT.as_secs()),
            }),
        }
    }

    /// A client that is not connected to anything: every request fails with
    /// [`ClientError::Closed`] and [`Client::next_event`] returns `ended`. A
    /// `Follow` (the `follow` module) holds one while it reconnects.
    pub fn disconnected(url: &str, ended: ClientError) -> Client {
        let (requests, _) = mpsc::channel(1);
        let (_, events) = mpsc::channel(1);
        let welcome = Welcome {
            protocol_version: PROTOCOL_VERSION,
            server: String::new(),
            user: outboard_shared::UserInfo {
                id: outboard_shared::UserId::from(""),
                name: String::new(),
                org_id: outboard_shared::OrgId::from(""),
                org: String::new(),
            },
            connection_id: 0,
        };
        Client {
            url: url.to_owned(),
            welcome,
            requests,
            events,
            next_id: Arc::new(AtomicU64::new(1)),
            ended: Some(ended),
        }
    }

    /// The server's `welcome`: its version and who the token belongs to.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// The URL connected to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The next event pushed by the server, in order. A non-fatal connection error frame comes
    /// back as `Err` with [`ClientError::is_fatal`] false and the stream goes on; any other `Err`
    /// means the connection is over, and every later call returns the same error.
    pub async fn next_event(&mut self) -> Result<SessionEvent, ClientError> {
        if let Some(err) = &self.ended {
            return Err(err.clone());
        }
        let item = self.events.recv().await.unwrap_or(Err(ClientError::Closed { reason: None }));
        if let Err(err) = &item {
            if err.is_fatal() {
                self.ended = Some(err.clone());
            }
        }
        item
    }

    /// Sends a request and resolves to its `result`, or to [`ClientError::Server`] with the
    /// server's error. The future does not borrow the client (see the module header).
    pub fn request(
        &self,
        method: Method,
    ) -> impl Future<Output = Result<Value, ClientError>> + Send + 'static {
        self.request_reporting(method, None)
    }

    fn request_reporting(
        &self,
        method: Method,
        progress: Option<mpsc::Sender<ProgressFrame>>,
    ) -> impl Future<Output = Result<Value, ClientError>> + Send + 'static {
        self.requester().send(method, progress)
    }

    /// What sends this connection's requests, for a task that outlives the borrow.
    fn requester(&self) -> Requester {
        Requester { requests: self.requests.clone(), next_id: self.next_id.clone() }
    }

    /// `session/create`: a new session owned by the caller.
    pub fn create_session(
        &self,
        title: Option<String>,
    ) -> impl Future<Output = Result<SessionInfo, ClientError>> + Send + 'static {
        self.create_session_in(title, None)
    }

    /// `session/create` of a session working in place in the host directory `workspace` (only
    /// the embedded server accepts one).
    pub fn create_session_in(
        &self,
        title: Option<String>,
        workspace: Option<String>,
    ) -> impl Future<Output = Result<SessionInfo, ClientError>> + Send + 'static {
        self.create_session_with(SessionCreateParams {
            title,
            workspace,
            source: None,
            network: outboard_shared::SessionNetwork::Org,
            context_window: None,
            model: None,
        })
    }

    /// `session/create` with every parameter.
    pub fn create_session_with(
        &self,
        params: SessionCreateParams,
    ) -> impl Future<Output = Result<SessionInfo, ClientError>> + Send + 'static {
        let call = self.call::<methods::SessionCreate>(params);
        async move { Ok(call.await?.session) }
    }

    /// `session/list`: the org's sessions, newest activity first.
    pub fn list_sessions(
        &self,
        limit: Option<u32>,
    ) -> impl Future<Output = Result<Vec<SessionInfo>, ClientError>> + Send + 'static {
        let call = self.call::<methods::SessionList>(SessionListParams { limit });
        async move { Ok(call.await?.sessions) }
    }

    /// `session/attach`: a snapshot of the session after `after_seq`, then live events through
    /// [`Client::next_event`].
    pub fn attach(
        &self,
        session_id: SessionId,
        role: Role,
        after_seq: Option<u64>,
    ) -> impl Future<Output = Result<SessionAttachResponse, ClientError>> + Send + 'static {
        self.call::<methods::SessionAttach>(SessionAttachParams { session_id, role, after_seq })
    }

    /// `session/attach`, waiting up to `wait` while the session's node cannot be reached: a
    /// node that died keeps its lease until it expires, and then another node takes the
    /// session over and the attach lands there. `waiting` is called once, when the wait
    /// starts, to tell the user why nothing happens yet.
    pub fn attach_through_takeover(
        &self,
        session_id: SessionId,
        role: Role,
        after_seq: Option<u64>,
        wait: Duration,
        waiting: impl FnOnce() + Send + 'static,
    ) -> impl Future<Output = Result<SessionAttachResponse, ClientError>> + Send + 'static {
        let requester = self.requester();
        async move {
            let deadline = tokio::time::Instant::now() + wait;
            let mut waiting = Some(waiting);
            let mut backoff = Backoff::new();
            loop {
                let params =
                    SessionAttachParams { session_id: session_id.clone(), role, after_seq };
                let err = match requester.call::<methods::SessionAttach>(params).await {
                    Err(err) if owner_unreachable(&err) => err,
                    other => return other,
                };
                let pause = backoff.next_delay().min(TAKEOVER_POLL);
                if tokio::time::Instant::now() + pause >= deadline {
                    return Err(err);
                }
                if let Some(waiting) = waiting.take() {
                    tracing::debug!(session = %session_id, error = %err, "waiting for a takeover");
                    waiting();
                }
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// `session/history`: the page of durable events just before `before` (oldest first), with
    /// whether older ones remain and the cursor to ask for them.
    pub fn history(
        &self,
        session_id: SessionId,
        before: u64,
    ) -> impl Future<Output = Result<SessionHistoryResponse, ClientError>> + Send + 'static {
        self.call::<methods::SessionHistory>(SessionHistoryParams {
            session_id,
            before,
            limit: None,
        })
    }

    /// `turn/send`: starts a turn; resolves once the user message is durable.
    pub fn send_turn(
        &self,
        session_id: SessionId,
        text: String,
        images: Vec<outboard_shared::ImageUpload>,
    ) -> impl Future<Output = Result<TurnSendResponse, ClientError>> + Send + 'static {
        self.call::<methods::TurnSend>(TurnSendParams { session_id, text, images })
    }

    /// `turn/interrupt`: interrupts the session's turn in flight, if any.
    pub fn interrupt(
        &self,
        session_id: SessionId,
    ) -> impl Future<Output = Result<TurnInterruptResponse, ClientError>> + Send + 'static {
        self.call::<methods::TurnInterrupt>(SessionRef { session_id })
    }

    /// `session/kill_task`: kill one of the session's background commands (driver only).
    pub fn kill_task(
        &self,
        session_id: SessionId,
        shell_id: String,
    ) -> impl Future<Output = Result<(), ClientError>> + Send + 'static {
        let params = outboard_shared::KillTaskParams { session_id, shell_id };
        let call = self.call::<methods::SessionKillTask>(params);
        async move { call.await.map(|_| ()) }
    }

    /// `session/detach`: stop receiving a session's events.
    pub fn detach(
        &self,
        session_id: SessionId,
    ) -> impl Future<Output = Result<(), ClientError>> + Send + 'static {
        let call = self.call::<methods::SessionDetach>(SessionRef { session_id });
        async move { call.await.map(|_| ()) }
    }

    /// `session/drive_request`: ask the driver to hand driving over.
    pub fn drive_request(
        &self,
        session_id: SessionId,
    ) -> impl Future<Output = Result<(), ClientError>> + Send + 'static {
        let call = self.call::<methods::SessionDriveRequest>(SessionRef { session_id });
        async move { call.await.map(|_| ()) }
    }

    /// `session/drive_grant`: hand driving to the attached watcher `user`.
    pub fn drive_grant(
        &self,
        session_id: SessionId,
        user: String,
    ) -> impl Future<Output = Result<(), ClientError>> + Send + 'static {
        let call = self.call::<methods::SessionDriveGrant>(DriveGrantParams { session_id, user });
        async move { call.await.map(|_| ()) }
    }

    /// `session/drive_take`: the owner takes driving back.
    pub fn drive_take(
        &self,
        session_id: SessionId,
    ) -> impl Future<Output = Result<(), ClientError>> + Send + 'static {
        let call = self.call::<methods::SessionDriveTake>(SessionRef { session_id });
        async move { call.await.map(|_| ()) }
    }

    /// `files/list`: the org's current files at or beneath `path` (`/memory`, `/skills/x`, `/`),
    /// sorted by path; with `include_deleted`, deleted ones too (their tombstone is current).
    pub fn list_files(
        &self,
        path: String,
        include_deleted: bool,
    ) -> impl Future<Output = Result<Vec<FileVersion>, ClientError>> + Send + 'static {
        let call = self.call::<methods::FilesList>(FilesListParams { path, include_deleted });
        async move { Ok(call.await?.files) }
    }

    /// `files/read`: an org file's current version, or the given past `version`.
    pub fn read_file(
        &self,
        path: String,
        version: Option<u64>,
    ) -> impl Future<Output = Result<FilesReadResponse, ClientError>> + Send + 'static {
        self.call::<methods::FilesRead>(FilesReadParams { path, version })
    }

    /// `files/history`: every version of an org file, oldest first.
    pub fn file_history(
        &self,
        path: String,
    ) -> impl Future<Output = Result<Vec<FileVersion>, ClientError>> + Send + 'static {
        let call = self.call::<methods::FilesHistory>(FilesHistoryParams { path });
        async move { Ok(call.await?.versions) }
    }

    /// `files/write`: replace an org file's content as a person. With `base_version`, the write
    /// is refused with `conflict` unless that is still the current version (0: must not exist).
    pub fn write_file(
        &self,
        path: String,
        content: String,
        base_version: Option<u64>,
    ) -> impl Future<Output = Result<FilesChangeResponse, ClientError>> + Send + 'static {
        self.call::<methods::FilesWrite>(FilesWriteParams { path, content, base_version })
    }

    /// `files/delete`: delete an org file (a tombstone version; its history stays).
    pub fn delete_file(
        &self,
        path: String,
        base_version: Option<u64>,
    ) -> impl Future<Output = Result<FilesChangeResponse, ClientError>> + Send + 'static {
        self.call::<methods::FilesDelete>(FilesDeleteParams { path, base_version })
    }

    /// `files/restore`: make `version`'s content current again, as a new version.
    pub fn restore_file(
        &self,
        path: String,
        version: u64,
    ) -> impl Future<Output = Result<FilesChangeResponse, ClientError>> + Send + 'static {
        self.call::<methods::FilesRestore>(FilesRestoreParams { path, version })
    }

    /// `skills/list`: the org's skills, sorted by name.
    pub fn list_skills(
        &self,
    ) -> impl Future<Output = Result<Vec<SkillInfo>, ClientError>> + Send + 'static {
        let call = self.call::<methods::SkillsList>(Empty {});
        async move { Ok(call.await?.skills) }
    }

    /// `skills/import`: write `files` (paths relative to `/skills`) in one transaction; files
    /// whose content is already current make no version.
    pub fn import_skills(
        &self,
        files: Vec<ImportFile>,
    ) -> impl Future<Output = Result<SkillsImportResponse, ClientError>> + Send + 'static {
        self.call::<methods::SkillsImport>(SkillsImportParams { files })
    }

    /// `agents/list`: the org's agent types, usable or not, sorted by name.
    pub fn list_agents(
        &self,
    ) -> impl Future<Output = Result<AgentsListResponse, ClientError>> + Send + 'static {
        self.call::<methods::AgentsList>(Empty {})
    }

    /// `agents/import`: write agent files (`NAME.md`, relative to `/agents`) in one
    /// transaction, each checked first; one bad file refuses them all.
    pub fn import_agents(
        &self,
        files: Vec<ImportFile>,
    ) -> impl Future<Output = Result<AgentsImportResponse, ClientError>> + Send + 'static {
        self.call::<methods::AgentsImport>(AgentsImportParams { files })
    }

    /// `ping`.
    pub fn ping(&self) -> impl Future<Output = Result<(), ClientError>> + Send + 'static {
        let call = self.call::<methods::Ping>(Empty {});
        async move { call.await.map(|_| ()) }
    }

    /// Like [`Client::call`], with the request's [`ProgressFrame`]s on the returned receiver
    /// until the answer (at most [`PROGRESS_CHANNEL_CAPACITY`] unread; later ones are dropped).
    pub fn call_with_progress<C: Call>(
        &self,
        params: C::Params,
    ) -> (
        impl Future<Output = Result<C::Response, ClientError>> + Send + 'static,
        mpsc::Receiver<ProgressFrame>,
    ) {
        let (tx, rx) = mpsc::channel(PROGRESS_CHANNEL_CAPACITY);
        let call = self.request_reporting(C::method(params), Some(tx));
        let typed = async move {
            let value = call.await?;
            serde_json::from_value(value)
                .map_err(|e| ClientError::Protocol(format!("the {} result: {e}", C::NAME)))
        };
        (typed, rx)
    }

    /// Sends the request of method `C` and resolves to its typed result, or to
    /// [`ClientError::Server`] with the server's error. The method's name, params and result type
    /// come from the one table of methods in `outboard_shared` ([`methods`]).
    pub fn call<C: Call>(
        &self,
        params: C::Params,
    ) -> impl Future<Output = Result<C::Response, ClientError>> + Send + 'static {
        self.requester().call::<C>(params)
    }
}

/// Sends requests on a connection and waits for their answers; cloned out of a [`Client`] by
/// calls that retry on their own.
#[derive(Clone)]
struct Requester {
    requests: mpsc::Sender<Outgoing>,
    next_id: Arc<AtomicU64>,
}

impl Requester {
    fn send(
        &self,
        method: Method,
        progress: Option<mpsc::Sender<ProgressFrame>>,
    ) -> impl Future<Output = Result<Value, ClientError>> + Send + 'static {
        let id = RequestId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let requests = self.requests.clone();
        async move {
            let (reply, answer) = oneshot::channel();
            let request = Request { id, method };
            if requests.send(Outgoing { request, reply, progress }).await.is_err() {
                return Err(ClientError::Closed { reason: None });
            }
            answer.await.unwrap_or(Err(ClientError::Closed { reason: None }))
        }
    }

    fn call<C: Call>(
        &self,
        params: C::Params,
    ) -> impl Future<Output = Result<C::Response, ClientError>> + Send + 'static {
        let call = self.send(C::method(params), None);
        async move {
            let value = call.await?;
            serde_json::from_value(value)
                .map_err(|e| ClientError::Protocol(format!("the {} result: {e}", C::NAME)))
        }
    }
}

/// Whether `host` (from a URL, IPv6 in brackets) is this machine's loopback.
fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// rustls (ring provider) trusting the webpki roots and the certificates of `--ca-cert`.
fn tls_connector(options: &ConnectOptions) -> Result<Connector, ClientError> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = &options.ca_cert {
        let ca_err = |reason: String, source: Option<crate::error::Cause>| ClientError::CaCert {
            path: path.display().to_string(),
            reason,
            source,
        };
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| ca_err(e.to_string(), Some(Arc::new(e))))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ca_err(e.to_string(), Some(Arc::new(e))))?;
        if certs.is_empty() {
            return Err(ca_err("no CERTIFICATE in it".into(), None));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| ca_err(e.to_string(), Some(Arc::new(e))))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Protocol(format!("TLS setup: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Connector::Rustls(std::sync::Arc::new(config)))
}

/// Refuses URLs that cannot be an Outboard server before any network traffic; returns the host.
fn validate_url(url: &str) -> Result<String, ClientError> {
    let invalid =
        |reason: &str| ClientError::InvalidUrl { url: url.to_owned(), reason: reason.into() };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid("no scheme"));
    };
    if scheme != "ws" && scheme != "wss" {
        return Err(invalid("the scheme must be ws:// (or wss://)"));
    }
    if rest.is_empty() || rest.starts_with('/') {
        return Err(invalid("no host"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = if authority.starts_with('[') {
        authority.split_inclusive(']').next().unwrap_or(authority)
    } else {
        authority.split(':').next().unwrap_or(authority)
    };
    if host.is_empty() {
        return Err(invalid("no host"));
    }
    Ok(host.to_owned())
}

/// The connection, the upgrade and the hello/welcome exchange.
async fn handshake(
    url: &str,
    token: &str,
    room: bool,
    connector: Option<Connector>,
    ping: Duration,
) -> Result<Client, ClientError> {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES));
    let (mut socket, _) =
        tokio_tungstenite::connect_async_tls_with_config(url, Some(config), true, connector)
            .await
            .map_err(|e| connect_error(url, e))?;

    let hello = ClientFrame::Hello(Hello {
        protocol_version: PROTOCOL_VERSION,
        token: token.to_owned(),
        client: client_name(),
    });
    send_frame(&mut socket, &hello).await?;

    let welcome = loop {
        let Some(message) = socket.next().await else {
            return Err(ClientError::Handshake {
                url: url.to_owned(),
                message: "the server closed the connection before answering hello".into(),
            });
        };
        let message = message
            .map_err(|e| ClientError::Handshake { url: url.to_owned(), message: e.to_string() })?;
        let text = match message {
            Message::Text(text) => text,
            Message::Close(frame) => {
                return Err(ClientError::Handshake {
                    url: url.to_owned(),
                    message: format!(
                        "the server closed the connection{}",
                        frame.map(|f| format!(": {}", f.reason)).unwrap_or_default()
                    ),
                })
            }
            _ => continue,
        };
        match serde_json::from_str::<ServerFrame>(&text) {
            Ok(ServerFrame::Welcome(welcome)) => break welcome,
            Ok(ServerFrame::Error(err)) => {
                return Err(ClientError::from_connection_error(Some(url), err));
            }
            Ok(other) => {
                return Err(ClientError::Handshake {
                    url: url.to_owned(),
                    message: format!("expected welcome, got {}", frame_kind(&other)),
                })
            }
            Err(e) => {
                return Err(ClientError::Handshake {
                    url: url.to_owned(),
                    message: format!("the answer to hello is not an outboard frame: {e}"),
                })
            }
        }
    };
    if welcome.protocol_version != PROTOCOL_VERSION {
        return Err(ClientError::ProtocolVersion {
            message: format!("server {}, client {}", welcome.protocol_version, PROTOCOL_VERSION),
        });
    }

    let (requests_tx, requests_rx) = mpsc::channel(REQUEST_CHANNEL_CAPACITY);
    let (events_tx, events_rx) = mpsc::channel(EVENT_CHANNEL_CAPACITY);
    tokio::spawn(connection_task(socket, requests_rx, events_tx, room, ping));
    Ok(Client {
        url: url.to_owned(),
        welcome,
        requests: requests_tx,
        events: events_rx,
        next_id: Arc::new(AtomicU64::new(1)),
        ended: None,
    })
}

fn frame_kind(frame: &ServerFrame) -> &'static str {
    match frame {
        ServerFrame::Welcome(_) => "welcome",
        ServerFrame::Response(_) => "response",
        ServerFrame::Event(_) => "event",
        ServerFrame::Error(_) => "error",
        ServerFrame::Progress(_) => "progress",
    }
}

fn connect_error(url: &str, err: tungstenite::Error) -> ClientError {
    let err = match err {
        tungstenite::Error::Io(io) => {
            if let Some(tls) = io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                let reason = match tls {
                    rustls::Error::InvalidCertificate(why) => {
                        format!("the server's certificate is not trusted ({why:?})")
                    }
                    other => other.to_string(),
                };
                let source: Option<crate::error::Cause> = Some(Arc::new(tls.clone()));
                return ClientError::Certificate { url: url.to_owned(), reason, source };
            }
            let reason = match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
                _ => io.to_string(),
            };
            return ClientError::Connect {
                url: url.to_owned(),
                reason,
                source: Some(Arc::new(io)),
            };
        }
        tungstenite::Error::Tls(e) => {
            let reason = e.to_string();
            return ClientError::Certificate {
                url: url.to_owned(),
                reason,
                source: Some(Arc::new(e)),
            };
        }
        tungstenite::Error::Url(e) => {
            return ClientError::InvalidUrl { url: url.to_owned(), reason: e.to_string() }
        }
        tungstenite::Error::Http(response) => {
            // The server's one-line reason (a connection cap, …), bounded for the terminal.
            let body = response
                .body()
                .as_deref()
                .map(|b| String::from_utf8_lossy(&b[..b.len().min(300)]).trim().to_owned())
                .filter(|b| !b.is_empty())
                .map(|b| format!(": {b}"))
                .unwrap_or_default();
            return ClientError::Handshake {
                url: url.to_owned(),
                message: format!(
                    "the server answered HTTP {} to the upgrade{body}",
                    response.status()
                ),
            };
        }
        other => other,
    };
    let reason = err.to_string();
    ClientError::Connect { url: url.to_owned(), reason, source: Some(Arc::new(err)) }
}

async fn send_frame(socket: &mut Socket, frame: &ClientFrame) -> Result<(), ClientError> {
    let text = serde_json::to_string(frame)
        .map_err(|e| ClientError::Protocol(format!("cannot encode a frame: {e}")))?;
    if text.len() > MAX_FRAME_BYTES {
        return Err(ClientError::TooLarge { bytes: text.len(), limit: MAX_FRAME_BYTES });
    }
    socket
        .send(Message::text(text))
        .await
        .map_err(|e| ClientError::Closed { reason: Some(e.to_string()) })
}

/// The connection actor: the only owner of the socket after the handshake.
async fn connection_task(
    mut socket: Socket,
    mut requests: mpsc::Receiver<Outgoing>,
    events: mpsc::Sender<Result<SessionEvent, ClientError>>,
    room_events: bool,
    ping_interval: Duration,
) {
    let mut pending: HashMap<RequestId, (&'static str, Reply)> = HashMap::new();
    let mut progress: HashMap<RequestId, mpsc::Sender<ProgressFrame>> = HashMap::new();
    let mut ping =
        tokio::time::interval_at(tokio::time::Instant::now() + ping_interval, ping_interval);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = loop {
        tokio::select! {
            _ = ping.tick() => {
                // Keeps the server's idle timeout from cutting a quiet connection.
                if let Err(e) = socket.send(Message::Ping(Default::default())).await {
                    break ClientError::Closed { reason: Some(e.to_string()) };
                }
            }
            outgoing = requests.recv() => {
                let Some(Outgoing { request, reply, progress: reporting }) = outgoing else {
                    // The client was dropped: say goodbye and stop.
                    let _ = socket.close(None).await;
                    break ClientError::Closed { reason: Some("the client closed it".into()) };
                };
                let (id, name) = (request.id, request.method.name());
                match send_frame(&mut socket, &ClientFrame::Request(request)).await {
                    Ok(()) => {
                        pending.insert(id, (name, reply));
                        if let Some(tx) = reporting {
                            progress.insert(id, tx);
                        }
                    }
                    Err(err @ (ClientError::Protocol(_) | ClientError::TooLarge { .. })) => {
                        let _ = reply.send(Err(err));
                    }
                    Err(err) => {
                        let _ = reply.send(Err(err.clone()));
                        break err;
                    }
                }
            }
            message = socket.next() => {
                let text = match message {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(frame))) => {
                        break ClientError::Closed { reason: frame.map(|f| f.reason.to_string()).filter(|r| !r.is_empty()) };
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => break ClientError::Closed { reason: Some(e.to_string()) },
                    None => break ClientError::Closed { reason: None },
                };
                match serde_json::from_str::<ServerFrame>(&text) {
                    Ok(ServerFrame::Response(Response { id, result, error })) => {
                        progress.remove(&id);
                        let Some((method, reply)) = pending.remove(&id) else {
                            tracing::warn!(%id, "response to no request in flight");
                            continue;
                        };
                        let answer = match (error, result) {
                            (Some(error), _) => Err(ClientError::Server { method, error }),
                            (None, result) => Ok(result.unwrap_or(Value::Null)),
                        };
                        let _ = reply.send(answer);
                    }
                    Ok(ServerFrame::Event(frame))
                        if !room_events
                            && matches!(
                                frame.event.kind,
                                EventKind::Presence { .. }
                                    | EventKind::DriveRequested { .. }
                                    | EventKind::MemoryChanged { .. }
                            ) => {}
                    Ok(ServerFrame::Event(frame)) => {
                        // Waits when the caller is behind: see EVENT_CHANNEL_CAPACITY.
                        if events.send(Ok(frame.event)).await.is_err() {
                            tracing::debug!("event dropped: nobody reads events");
                        }
                    }
                    Ok(ServerFrame::Error(err)) => {
                        let fatal = err.fatal;
                        let err = ClientError::from_connection_error(None, err);
                        if fatal {
                            break err;
                        }
                        let _ = events.send(Err(err)).await;
                    }
                    Ok(ServerFrame::Progress(frame)) => {
                        if let Some(tx) = progress.get(&frame.request_id) {
                            // Full: the reader is behind; see PROGRESS_CHANNEL_CAPACITY.
                            let _ = tx.try_send(frame);
                        }
                    }
                    Ok(ServerFrame::Welcome(_)) => tracing::warn!("a second welcome; ignored"),
                    Err(e) => tracing::warn!(error = %e, "unreadable frame from the server; skipped"),
                }
            }
        }
    };
    for (_, (_, reply)) in pending.drain() {
        let _ = reply.send(Err(end.clone()));
    }
    let _ = events.send(Err(end)).await;
}

#[cfg(test)]
mod tests;
