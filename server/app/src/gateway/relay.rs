//! A client's requests for a session that another server node runs, relayed to that node.
//!
//! A session runs on the one node that holds its lease; a client may be connected to any node.
//! When a request for a session meets `unavailable` naming the owner's `node_url`, the client's
//! connection opens an upstream WebSocket to the owner, as the same user (its own token, so the
//! owner checks everything it would check for a direct client), and from then on sends that
//! session's requests there: the owner answers them, streams the session's events, counts the
//! relayed connection in presence and hands the wheel over to it like to any other. Frames come
//! back with the client's request ids and its own connection id, so the client cannot tell.
//!
//! When the upstream goes (the owner was killed, drains for a deploy, or lost the lease), the
//! requests in flight are answered `unavailable` and an attached client gets a non-fatal `lagged`
//! naming the last durable `seq` it was sent: it attaches again with `after_seq`, the attach
//! meets whichever node runs the session now (this one, or another through a new relay), and
//! the stream goes on without a gap.
//!
//! Bounds: [`MAX_RELAYS`] upstreams per client connection, [`RELAY_QUEUE`] requests queued for
//! the upstream, [`MAX_IN_FLIGHT`] requests waiting for the owner's answer; frames from the
//! owner are read up to twice the protocol's frame limit and pushed into the client's own
//! bounded queue (a slow client slows its upstream, whose owner then cuts it with `lagged`).
//! Relays never chain: a relayed connection announces itself in its `hello` and the owner
//! answers its requests itself or refuses them.
//!
//! The link between nodes carries users' tokens, so it follows the client's rule
//! ([`check_node_url`]): `wss://`, or `ws://` to a loopback address only; any other URL is
//! refused before a byte is sent, and logged. `wss://` trusts the webpki roots plus the
//! server's `--node-ca` (a company's own PKI). A node re-asserts its own URL in its `nodes` row
//! at every renewal, so an edited row redirects relays for a third of a lease at most, and only
//! to a URL that meets the rule and a certificate the relay trusts.
//!
//! Relays from one node share its source address. A relaying node proves it is a node of the
//! store with [`RELAY_HEADER`] (its id and a random key whose SHA-256 its `nodes` row holds);
//! the owner then takes the connection out of the per-address count and caps relayed
//! connections per user instead ([`RelayedUsers`]): one user's relays cannot lock another
//! user who shares the relaying node out.

use std::collections::HashMap;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use outboard_shared::{
    ClientFrame, Empty, ErrorBody, ErrorCode, EventKind, Hello, Method, Request, RequestId,
    ServerFrame, SessionId, MAX_FRAME_BYTES, PROTOCOL_VERSION,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

use super::bounds::Out;

/// Upstreams one client connection may hold (one per session it reaches on another node).
pub const MAX_RELAYS: usize = 16;
/// Requests queued for one upstream before the relay refuses more.
pub const RELAY_QUEUE: usize = 32;
/// Requests sent upstream and not answered yet.
pub const MAX_IN_FLIGHT: usize = 64;
/// How long connecting to the owner and its `welcome` may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The prefix of a relayed connection's client name in its `hello` (and so in presence).
pub const RELAY_CLIENT_PREFIX: &str = "relay:";
/// The header of a relaying node's upgrade request: `NODE_ID KEY` ([`NodeAuth`]).
pub const RELAY_HEADER: &str = "x-outboard-relay";

/// Whether `url` may carry users' tokens to another node: the client's own rule, `wss://`, or
/// `ws://` to a loopback host. The error says why and what to give instead.
pub fn check_node_url(url: &str) -> Result<(), String> {
    if let Some(rest) = url.strip_prefix("wss://") {
        return if rest.is_empty() { Err(format!("{url:?} names no host")) } else { Ok(()) };
    }
    let Some(rest) = url.strip_prefix("ws://") else {
        return Err(format!("{url:?} is not a ws:// or wss:// URL"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback {
        return Ok(());
    }
    Err(format!(
        "{url} is clear-text ws:// to a host that is not loopback: users' tokens would cross the \
         network readable. Nodes reach each other over wss:// (serve --tls-cert/--tls-key, \
         --node-url wss://HOST:PORT, and --node-ca for a private CA)"
    ))
}

/// What this node presents to the others it relays to, and what it trusts: its id in the
/// store, its relay key (memory only; the store holds its SHA-256) and the TLS configuration
/// of `wss://` relays (webpki roots plus `--node-ca`).
#[derive(Clone)]
pub struct NodeAuth {
    /// This node's id in `nodes`.
    pub node_id: String,
    /// The key, never logged.
    pub key: outboard_base::Secret,
    /// TLS for `wss://` node URLs.
    pub tls: std::sync::Arc<rustls::ClientConfig>,
}

impl NodeAuth {
    /// A fresh key for node `node_id`, trusting the webpki roots and the certificates of
    /// `node_ca` (PEM). Returns it with the hash the store keeps.
    pub fn new(
        node_id: &str,
        node_ca: Option<&std::path::Path>,
    ) -> Result<(NodeAuth, String), String> {
        let key = outboard_base::util::random_hex(32);
        let hash = outboard_base::digest::hex_sha256(key.as_bytes());
        let tls = node_tls(node_ca)?;
        Ok((
            NodeAuth { node_id: node_id.to_owned(), key: outboard_base::Secret::new(key), tls },
            hash,
        ))
    }

    /// The value of [`RELAY_HEADER`].
    fn header(&self) -> String {
        format!("{} {}", self.node_id, self.key.expose())
    }
}

/// rustls (ring) trusting the webpki roots and every certificate of `node_ca`.
fn node_tls(
    node_ca: Option<&std::path::Path>,
) -> Result<std::sync::Arc<rustls::ClientConfig>, String> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = node_ca {
        let bad = |why: String| format!("--node-ca {}: {why}", path.display());
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if certs.is_empty() {
            return Err(bad("no CERTIFICATE in it".into()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| bad(e.to_string()))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(std::sync::Arc::new(config))
}

/// Relayed connections per user on the node that owns the sessions: at most `cap` each
/// (`--max-connections-per-ip`: a user is counted as one address would be).
pub struct RelayedUsers {
    cap: usize,
    counts: std::sync::Arc<std::sync::Mutex<HashMap<outboard_shared::UserId, usize>>>,
}

/// One relayed connection's place under its user's cap; dropping it frees the place.
pub struct RelayedSlot {
    user: outboard_shared::UserId,
    counts: std::sync::Arc<std::sync::Mutex<HashMap<outboard_shared::UserId, usize>>>,
}

impl RelayedUsers {
    /// At most `cap` relayed connections per user.
    pub fn new(cap: usize) -> RelayedUsers {
        RelayedUsers { cap, counts: std::sync::Arc::default() }
    }

    /// A place for one more relayed connection of `user`, or the refusal's text.
    pub fn admit(&self, user: &outboard_shared::UserId, name: &str) -> Result<RelayedSlot, String> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = counts.entry(user.clone()).or_insert(0);
        if *n >= self.cap {
            return Err(format!(
                "{name} already holds {} connections relayed from other server nodes to this one \
                 (the per-user cap, --max-connections-per-ip); detach from sessions you no longer \
                 watch",
                self.cap
            ));
        }
        *n += 1;
        Ok(RelayedSlot { user: user.clone(), counts: self.counts.clone() })
    }
}

impl Drop for RelayedSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.user);
            }
        }
    }
}

/// Whether a request concerns a session's running actor (and so goes where the session runs):
/// the session it names. History and files read the shared store and workspaces on any node.
pub fn relayable(method: &Method) -> Option<&SessionId> {
    match method {
        Method::SessionAttach(p) => Some(&p.session_id),
        Method::SessionDetach(p) => Some(&p.session_id),
        Method::TurnSend(p) => Some(&p.session_id),
        Method::SessionCompact(p) => Some(&p.session_id),
        Method::TurnInterrupt(p) => Some(&p.session_id),
        Method::SessionKillTask(p) => Some(&p.session_id),
        Method::ApprovalAnswer(p) => Some(&p.session_id),
        Method::SessionSetModel(p) => Some(&p.session_id),
        Method::SessionSetMode(p) => Some(&p.session_id),
        Method::SessionCheckpoints(p) => Some(&p.session_id),
        Method::SessionRewind(p) => Some(&p.session_id),
        Method::SessionDriveRequest(p) => Some(&p.session_id),
        Method::SessionDriveGrant(p) => Some(&p.session_id),
        Method::SessionDriveTake(p) => Some(&p.session_id),
        _ => None,
    }
}

/// One session's upstream to the node that runs it.
pub struct Relay {
    requests: mpsc::Sender<Request>,
    task: JoinHandle<()>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Closing the upstream makes the owner forget the relayed connection (presence, roles).
        self.task.abort();
    }
}

/// Who the relay speaks for.
pub struct Client<'a> {
    /// The client's token (it authenticates the upstream as the same user; never logged).
    pub token: &'a str,
    /// The client's name from its `hello`.
    pub name: &'a str,
    /// The client's connection id on this node, which presence shows it.
    pub connection_id: u64,
}

type Upstream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl Relay {
    /// Connects to the owner at `node_url` as `client` for `session`, presenting `node` as
    /// this node; its frames go to `out`. A URL that breaks [`check_node_url`] is refused
    /// before anything is sent.
    pub async fn open(
        node_url: &str,
        node: &NodeAuth,
        client: Client<'_>,
        session: SessionId,
        out: Out,
    ) -> Result<Relay, ErrorBody> {
        let unreachable = |why: String| {
            ErrorBody::new(
                ErrorCode::Unavailable,
                format!(
                    "session {session} runs on the server node at {node_url}, which this node \
                     cannot reach ({why}); try again in a moment, or connect to that node"
                ),
            )
            .at_node(Some(node_url.to_owned()))
        };
        if let Err(why) = check_node_url(node_url) {
            tracing::warn!(session = %session, node = node_url, "refused to relay a client's token to another node: {why}");
            return Err(unreachable(why));
        }
        let connect = async {
            use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
            let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                .max_message_size(Some(2 * MAX_FRAME_BYTES))
                .max_frame_size(Some(2 * MAX_FRAME_BYTES));
            let mut request =
                node_url.into_client_request().map_err(|e| unreachable(e.to_string()))?;
            let mut auth =
                tokio_tungstenite::tungstenite::http::HeaderValue::from_str(&node.header())
                    .map_err(|_| unreachable("this node's id cannot stand in a header".into()))?;
            auth.set_sensitive(true);
            request.headers_mut().insert(RELAY_HEADER, auth);
            let tls = tokio_tungstenite::Connector::Rustls(node.tls.clone());
            let (mut ws, _) = tokio_tungstenite::connect_async_tls_with_config(
                request,
                Some(config),
                false,
                Some(tls),
            )
            .await
            .map_err(|e| unreachable(e.to_string()))?;
            let hello = ClientFrame::Hello(Hello {
                protocol_version: PROTOCOL_VERSION,
                token: client.token.to_owned(),
                client: format!("{RELAY_CLIENT_PREFIX}{}", client.name),
            });
            let text = serde_json::to_string(&hello).map_err(|e| unreachable(e.to_string()))?;
            ws.send(Message::text(text)).await.map_err(|e| unreachable(e.to_string()))?;
            loop {
                match ws.next().await {
                    Some(Ok(Message::Text(text))) => {
                        match serde_json::from_str::<ServerFrame>(&text) {
                            Ok(ServerFrame::Welcome(w)) => return Ok((ws, w.connection_id)),
                            Ok(ServerFrame::Error(e)) => return Err(unreachable(e.error.message)),
                            _ => return Err(unreachable("no welcome".into())),
                        }
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(unreachable(e.to_string())),
                    None => return Err(unreachable("it closed the connection".into())),
                }
            }
        };
        let (ws, upstream_id) = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| unreachable(format!("no welcome within {CONNECT_TIMEOUT:?}")))??;
        tracing::info!(session = %session, node = node_url, "relaying a client to the session's node");
        let (requests, rx) = mpsc::channel(RELAY_QUEUE);
        let pump = Pump {
            session,
            node_url: node_url.to_owned(),
            out,
            upstream_id,
            local_id: client.connection_id,
            pending: HashMap::new(),
            next_id: 1,
            attached: false,
            last_durable: 0,
        };
        let task = tokio::spawn(pump.run(ws, rx));
        Ok(Relay { requests, task })
    }

    /// Whether the upstream still runs.
    pub fn alive(&self) -> bool {
        !self.task.is_finished()
    }

    /// Sends `request` to the owner; its answer comes on the client's queue.
    pub fn forward(&self, request: Request) -> Result<(), ErrorBody> {
        self.requests.try_send(request).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => ErrorBody::new(
                ErrorCode::QuotaExceeded,
                format!(
                    "{RELAY_QUEUE} requests for this session wait to reach the node that runs \
                     it; wait for their answers"
                ),
            ),
            mpsc::error::TrySendError::Closed(_) => ErrorBody::new(
                ErrorCode::Unavailable,
                "the connection to the session's node just closed; try again",
            ),
        })
    }
}

/// The relay's task: requests up, frames down.
struct Pump {
    session: SessionId,
    node_url: String,
    out: Out,
    /// The upstream connection's id on the owner, and the client's here.
    upstream_id: u64,
    local_id: u64,
    /// Upstream request id → the client's (`None`: the relay's own ping) and whether it is an
    /// attach.
    pending: HashMap<u64, (Option<RequestId>, bool)>,
    next_id: u64,
    /// An attach through this relay succeeded: the client expects the session's events.
    attached: bool,
    /// The newest durable `seq` sent to the client.
    last_durable: u64,
}

impl Pump {
    async fn run(mut self, mut ws: Upstream, mut requests: mpsc::Receiver<Request>) {
        let mut ping = tokio::time::interval(outboard_shared::CLIENT_PING_INTERVAL);
        ping.tick().await;
        let why = loop {
            tokio::select! {
                request = requests.recv() => {
                    let Some(request) = request else { break None };
                    if self.pending.len() >= MAX_IN_FLIGHT {
                        let busy = ErrorBody::new(
                            ErrorCode::QuotaExceeded,
                            format!("{MAX_IN_FLIGHT} requests for this session wait for its node's answer; wait for them"),
                        );
                        self.deliver(ServerFrame::Response(outboard_shared::Response::err(request.id, busy))).await;
                        continue;
                    }
                    if let Err(e) = self.send(&mut ws, Some(request.id), request.method).await {
                        break Some(e);
                    }
                }
                frame = ws.next() => match frame {
                    Some(Ok(Message::Text(text))) => {
                        if let Some(why) = self.down(&text).await {
                            break Some(why);
                        }
                    }
                    Some(Ok(Message::Close(_))) | None => break Some("it closed the connection".into()),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break Some(e.to_string()),
                },
                _ = ping.tick() => {
                    if let Err(e) = self.send(&mut ws, None, Method::Ping(Empty {})).await {
                        break Some(e);
                    }
                }
            }
        };
        match why {
            None => {
                let _ = ws.close(None).await;
            }
            Some(why) => self.lost(&why).await,
        }
    }

    async fn send(
        &mut self,
        ws: &mut Upstream,
        client_id: Option<RequestId>,
        method: Method,
    ) -> Result<(), String> {
        let id = self.next_id;
        self.next_id += 1;
        let attach = matches!(method, Method::SessionAttach(_));
        let frame = ClientFrame::Request(Request { id: RequestId(id), method });
        let text = serde_json::to_string(&frame).map_err(|e| e.to_string())?;
        self.pending.insert(id, (client_id, attach));
        ws.send(Message::text(text)).await.map_err(|e| e.to_string())
    }

    /// One frame from the owner, rewritten for the client; `Some(why)` when the upstream ends.
    async fn down(&mut self, text: &str) -> Option<String> {
        let frame = match serde_json::from_str::<ServerFrame>(text) {
            Ok(frame) => frame,
            Err(e) => return Some(format!("it sent a frame this node cannot read: {e}")),
        };
        let frame = match frame {
            ServerFrame::Response(mut response) => {
                let Some((Some(client_id), attach)) = self.pending.remove(&response.id.0) else {
                    return None;
                };
                response.id = client_id;
                let snapshot = response.result.as_ref().filter(|_| attach);
                if let Some(events) = snapshot.and_then(|r| r.get("events")?.as_array()) {
                    // From now on the client follows the session through this relay.
                    self.attached = true;
                    let newest = events.iter().filter_map(|e| e.get("seq")?.as_u64()).max();
                    self.last_durable = self.last_durable.max(newest.unwrap_or(0));
                }
                ServerFrame::Response(response)
            }
            ServerFrame::Event(mut frame) => {
                if frame.event.kind.is_durable() {
                    self.last_durable = self.last_durable.max(frame.event.seq);
                }
                if let EventKind::Presence { attached } = &mut frame.event.kind {
                    for entry in attached.iter_mut() {
                        if entry.connection_id == self.upstream_id {
                            entry.connection_id = self.local_id;
                            if let Some(name) = entry.client.strip_prefix(RELAY_CLIENT_PREFIX) {
                                entry.client = name.to_owned();
                            }
                        }
                    }
                }
                ServerFrame::Event(frame)
            }
            ServerFrame::Progress(mut progress) => {
                let Some((Some(client_id), _)) = self.pending.get(&progress.request_id.0) else {
                    return None;
                };
                progress.request_id = *client_id;
                ServerFrame::Progress(progress)
            }
            ServerFrame::Error(e) if e.fatal => return Some(e.error.message),
            ServerFrame::Error(e) => ServerFrame::Error(e),
            ServerFrame::Welcome(_) => return None,
        };
        if !self.deliver(frame).await {
            return Some("the client went away".into());
        }
        None
    }

    async fn deliver(&self, frame: ServerFrame) -> bool {
        self.out.send(frame, None).await
    }

    /// The upstream ended: answer what waits, and send an attached client back to attach.
    async fn lost(&mut self, why: &str) {
        tracing::info!(session = %self.session, node = %self.node_url, "the relay to the session's node ended: {why}");
        let pending: Vec<RequestId> = self.pending.drain().filter_map(|(_, (c, _))| c).collect();
        for id in pending {
            let error = ErrorBody::new(
                ErrorCode::Unavailable,
                format!(
                    "the server node running session {} went away before it answered ({why}); \
                     try again: the session moves to another node",
                    self.session
                ),
            );
            self.deliver(ServerFrame::Response(outboard_shared::Response::err(id, error))).await;
        }
        if self.attached {
            let message = format!(
                "session {}: the server node that runs it went away ({why}); attach again with \
                 after_seq {}",
                self.session, self.last_durable
            );
            self.deliver(super::frames::connection_error(ErrorCode::Lagged, &message, false)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use outboard_shared::{SessionRef, Welcome};

    /// A node that welcomes one connection and answers nothing until `close` fires, then
    /// closes it; it hands back the requests it got.
    async fn silent_node(
        close: tokio::sync::oneshot::Receiver<()>,
    ) -> (String, JoinHandle<Vec<Request>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            // The relaying node names itself and its key.
            // tungstenite's callback type returns its large error response; not ours to shrink.
            #[allow(clippy::result_large_err)]
            let check = |req: &tokio_tungstenite::tungstenite::handshake::server::Request, resp| {
                let auth = req.headers().get(RELAY_HEADER).unwrap().to_str().unwrap();
                assert!(auth.starts_with("n_test ") && auth.len() == "n_test ".len() + 64);
                Ok(resp)
            };
            let mut ws = tokio_tungstenite::accept_hdr_async(tcp, check).await.unwrap();
            let hello = ws.next().await.unwrap().unwrap();
            let hello: ClientFrame = serde_json::from_str(hello.to_text().unwrap()).unwrap();
            let ClientFrame::Hello(hello) = hello else { panic!("no hello") };
            assert_eq!(hello.token, "tok-secret");
            assert_eq!(hello.client, "relay:cli");
            let welcome = ServerFrame::Welcome(Welcome {
                protocol_version: PROTOCOL_VERSION,
                server: "test".into(),
                user: outboard_shared::UserInfo {
                    id: outboard_shared::UserId("u".into()),
                    name: "alice".into(),
                    org_id: outboard_shared::OrgId("o".into()),
                    org: "acme".into(),
                },
                connection_id: 77,
            });
            ws.send(Message::text(serde_json::to_string(&welcome).unwrap())).await.unwrap();
            let mut got = Vec::new();
            let mut close = close;
            loop {
                tokio::select! {
                    // What was sent before `close` is read first.
                    biased;
                    frame = ws.next() => match frame {
                        Some(Ok(Message::Text(t))) => {
                            if let Ok(ClientFrame::Request(r)) = serde_json::from_str(&t) {
                                got.push(r);
                            }
                        }
                        _ => return got,
                    },
                    _ = &mut close => {
                        let _ = ws.close(None).await;
                        return got;
                    }
                }
            }
        });
        (url, task)
    }

    fn test_node() -> NodeAuth {
        NodeAuth::new("n_test", None).unwrap().0
    }

    fn interrupt(id: u64) -> Request {
        Request {
            id: RequestId(id),
            method: Method::TurnInterrupt(SessionRef { session_id: SessionId("s_1".into()) }),
        }
    }

    fn response_of(item: super::super::bounds::Queued) -> outboard_shared::Response {
        serde_json::from_str(item.text.as_str()).expect("a response")
    }

    #[tokio::test]
    async fn past_the_in_flight_bound_a_request_is_refused_and_a_lost_owner_answers_the_rest() {
        let (close, closed) = tokio::sync::oneshot::channel();
        let (url, node) = silent_node(closed).await;
        let (out, mut rx) = Out::new();
        let client = Client { token: "tok-secret", name: "cli", connection_id: 5 };
        let relay =
            Relay::open(&url, &test_node(), client, SessionId("s_1".into()), out).await.unwrap();
        for i in 0..=MAX_IN_FLIGHT as u64 {
            // Paced so that the queue (a smaller bound) never fills: the in-flight bound is hit.
            while relay.requests.capacity() < 2 {
                tokio::task::yield_now().await;
            }
            relay.forward(interrupt(1000 + i)).unwrap();
        }
        let busy = response_of(rx.recv().await.unwrap());
        assert_eq!(busy.id, RequestId(1000 + MAX_IN_FLIGHT as u64));
        assert_eq!(busy.error.unwrap().code, ErrorCode::QuotaExceeded);
        close.send(()).unwrap();
        let got = node.await.unwrap();
        // Upstream ids are the relay's own, not the client's.
        assert!(!got.is_empty() && got.iter().all(|r| r.id.0 <= MAX_IN_FLIGHT as u64), "{got:?}");
        let mut answered: Vec<u64> = Vec::new();
        for _ in 0..MAX_IN_FLIGHT {
            let r = response_of(rx.recv().await.unwrap());
            assert_eq!(r.error.unwrap().code, ErrorCode::Unavailable);
            answered.push(r.id.0);
        }
        answered.sort_unstable();
        assert_eq!(answered, (1000..1000 + MAX_IN_FLIGHT as u64).collect::<Vec<_>>());
        // Nothing was attached through it: no lagged.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(rx.try_recv().is_err());
        assert!(!relay.alive());
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once() {
        let (_close, closed) = tokio::sync::oneshot::channel();
        let (url, _node) = silent_node(closed).await;
        let (out, _rx) = Out::new();
        let client = Client { token: "tok-secret", name: "cli", connection_id: 5 };
        let relay =
            Relay::open(&url, &test_node(), client, SessionId("s_1".into()), out).await.unwrap();
        // On a current-thread runtime the pump does not run between these sends.
        for i in 0..RELAY_QUEUE as u64 {
            relay.forward(interrupt(i)).unwrap();
        }
        let refused = relay.forward(interrupt(99)).unwrap_err();
        assert_eq!(refused.code, ErrorCode::QuotaExceeded);
    }

    #[tokio::test]
    async fn an_unreachable_owner_is_unavailable_naming_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        drop(listener);
        let (out, _rx) = Out::new();
        let client = Client { token: "tok-secret", name: "cli", connection_id: 5 };
        let Err(e) = Relay::open(&url, &test_node(), client, SessionId("s_1".into()), out).await
        else {
            panic!("connected to nothing")
        };
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert_eq!(e.node_url.as_deref(), Some(url.as_str()));
        assert!(!e.message.contains("tok-secret"));
    }

    #[test]
    fn node_urls_follow_the_clients_rule() {
        for ok in [
            "wss://n1.internal:7700",
            "wss://10.77.0.2:8080",
            "ws://127.0.0.1:7700",
            "ws://localhost:7700",
            "ws://[::1]:7700",
            "ws://127.8.9.10:1",
        ] {
            assert_eq!(check_node_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "ws://10.77.0.2:8080",
            "ws://n1.internal:7700",
            "ws://[fd00::2]:80",
            "ws://localhost.evil.example:80",
            "http://127.0.0.1:1",
            "wss://",
        ] {
            assert!(check_node_url(bad).is_err(), "{bad}");
        }
        assert!(check_node_url("ws://10.77.0.2:8080").unwrap_err().contains("wss://"));
    }

    #[tokio::test]
    async fn a_clear_text_node_url_off_loopback_gets_no_byte_of_the_token() {
        // Issue 36, item 10: a relay to `ws://10.77.0.2:8080` sent the client's hello, token
        // included, over plain TCP. A listener on a non-loopback address of this host (when it
        // has one) sees whether anything is sent.
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let route = std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.connect("10.77.0.2:8080").and_then(|()| s.local_addr()));
        let host = match route {
            Ok(a) if !a.ip().is_loopback() && !a.ip().is_unspecified() => a.ip().to_string(),
            _ => "10.77.0.2".to_owned(),
        };
        let url = format!("ws://{host}:{port}");
        let (out, _rx) = Out::new();
        let client = Client { token: "tok-secret", name: "cli", connection_id: 5 };
        let started = std::time::Instant::now();
        let Err(e) = Relay::open(&url, &test_node(), client, SessionId("s_1".into()), out).await
        else {
            panic!("relayed over clear text to {url}")
        };
        assert!(started.elapsed() < Duration::from_secs(1), "it tried to connect");
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(
            e.message.contains("clear-text ws://") && e.message.contains("--node-ca"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("tok-secret"));
        let accepted = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
        assert!(accepted.is_err(), "a connection reached {url}");
    }

    #[test]
    fn relayed_connections_are_capped_per_user_and_freed_when_they_close() {
        let relayed = RelayedUsers::new(2);
        let (alice, bob) =
            (outboard_shared::UserId("u_a".into()), outboard_shared::UserId("u_b".into()));
        let first = relayed.admit(&alice, "alice").unwrap();
        let _second = relayed.admit(&alice, "alice").unwrap();
        let refused = relayed.admit(&alice, "alice").err().unwrap();
        assert!(refused.contains("alice already holds 2 connections relayed"), "{refused}");
        // Another user is not counted with alice.
        let _bob = relayed.admit(&bob, "bob").unwrap();
        drop(first);
        relayed.admit(&alice, "alice").unwrap();
    }
}
