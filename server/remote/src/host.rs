//! The sandbox host: accepts harness connections over TLS and WebSocket, authenticates them with
//! the join handshake ([`crate::trust`]), and runs their calls against the workspaces it keeps
//! under `DATA/workspaces/ID`, each with one [`Sandbox`] (the same manager as the server's: lazy
//! start, freeze when idle, thaw on the next command, replacement on death, limits).
//!
//! Design choice: workspaces and their sandboxes belong to the host process, not to a
//! connection, so a harness that reconnects finds the sandbox as it left it (frozen or
//! running); after a host restart the directory is still there and the next command starts a
//! fresh sandbox, as after a server restart today.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use outboard_shared::OutputStream;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Mutex, Semaphore};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::admission::{PendingJoins, RefusalLog, MAX_PENDING_JOINS_PER_SOURCE};
use crate::protocol::{
    self, stamp_from_wire, stamp_to_wire, valid_workspace_id, Op, Reply, ToHarness, ToHost,
    WireStamp, MAX_WORKSPACE_ID, PROTOCOL_VERSION,
};
use crate::trust::{self as auth, HostIdentity, JoinKey};
use outboard_sandbox::{Sandbox, SandboxConfig};
use outboard_tools::{ReadLedger, ToolCtx};
use outboard_vfs::Workspace;

/// Messages waiting to be written to one harness. Output is produced at sandbox speed and the
/// writer sends at network speed; 256 messages (a few MB of output chunks) is enough to keep the
/// link busy, and past it the calls wait (their own output buffers coalesce, see [`Outbox`]).
pub const OUTBOUND_MESSAGES: usize = 256;

/// Calls one connection may have running at once; one past it is answered `Failed` at once. A
/// harness node runs a few tool calls per session at a time; 64 covers many sessions sharing
/// one connection without letting one harness start unbounded work on the host.
pub const MAX_CALLS_PER_CONNECTION: usize = 64;

/// How long a new connection has from accept to a valid `Join` (TLS, WebSocket and the join
/// together).
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections the host keeps at once, joined or not: a harness node keeps one, so 256 covers
/// a large fleet; one past it is closed at accept.
pub const MAX_CONNECTIONS: usize = 256;

/// Connections that have not joined yet, at once. Each may send one message up to the frame
/// bound before the join is checked, within [`JOIN_TIMEOUT`]; 16 bounds what peers without the
/// token can make the host buffer, and a harness's reconnect is never more than one of them.
/// One source holds at most [`MAX_PENDING_JOINS_PER_SOURCE`] of them ([`crate::admission`]).
pub const MAX_PENDING_JOINS: usize = 16;

/// Tools a harness may run on the host: the workspace's file tools, and `Bash` (a foreground
/// command goes through [`Op::Exec`] instead, for its streamed output; `run_in_background`
/// comes here), `BashOutput` and `KillShell` for the background commands of the workspace's
/// sandbox. Org files and the network stay on the harness.
pub const HOST_TOOLS: &[&str] =
    &["Read", "Write", "Edit", "NotebookEdit", "Glob", "Grep", "Bash", "BashOutput", "KillShell"];

/// Bash timeout of a tool call that runs a foreground command (none does here: foreground
/// commands come as [`Op::Exec`]; required by [`ToolCtx`]).
const TOOL_DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// How a host runs.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Where the key, the certificate, the token's hash and the workspaces live.
    pub data: PathBuf,
    /// The sandboxes' configuration.
    pub sandbox: SandboxConfig,
    /// Calls one connection may have running at once ([`MAX_CALLS_PER_CONNECTION`] unless a
    /// test reaches the bound with fewer).
    pub max_calls: usize,
    /// How many workspaces this host offers to take, told to harnesses at the join for
    /// placement ([`default_capacity`] unless `--capacity` says).
    pub capacity: u32,
    /// [`MAX_CONNECTIONS`] unless a test reaches the bound with fewer.
    pub max_connections: usize,
    /// [`MAX_PENDING_JOINS`] unless a test reaches the bound with fewer.
    pub max_pending_joins: usize,
    /// [`MAX_PENDING_JOINS_PER_SOURCE`] unless a test reaches the bound with fewer.
    pub max_pending_joins_per_source: usize,
}

impl HostOptions {
    /// A host keeping its files in `data`, its sandboxes made with `sandbox`, with the
    /// default bounds and capacity.
    pub fn new(data: PathBuf, sandbox: SandboxConfig) -> HostOptions {
        HostOptions {
            data,
            sandbox,
            max_calls: MAX_CALLS_PER_CONNECTION,
            capacity: default_capacity(),
            max_connections: MAX_CONNECTIONS,
            max_pending_joins: MAX_PENDING_JOINS,
            max_pending_joins_per_source: MAX_PENDING_JOINS_PER_SOURCE,
        }
    }
}

/// Workspaces a host offers by default: four per core, since most sessions' sandboxes are
/// frozen or stopped between turns.
pub fn default_capacity() -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    u32::try_from(cores.saturating_mul(4)).unwrap_or(u32::MAX)
}

/// Why the host could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The identity or the token.
    #[error(transparent)]
    Auth(#[from] auth::AuthError),
    /// The data directory.
    #[error(
        "the sandbox host's data directory {path}: {reason}; create it or pass another --data"
    )]
    Data { path: String, reason: String },
}

/// A host, ready to serve (its identity loaded or made, its token known).
pub struct Host {
    state: Arc<HostState>,
    tls: tokio_rustls::TlsAcceptor,
    fingerprint: String,
}

struct HostState {
    options: HostOptions,
    key: JoinKey,
    fingerprint: String,
    workspaces: Mutex<HashMap<String, Hosted>>,
}

#[derive(Clone)]
struct Hosted {
    workspace: Workspace,
    sandbox: Sandbox,
}

impl Host {
    /// Prepares the host in `options.data`: makes its key and certificate on first start, stores
    /// `join_token`'s hash when one is given (else uses the one stored before).
    pub fn new(options: HostOptions, join_token: Option<&str>) -> Result<Host, HostError> {
        let data_err = |path: &Path, e: std::io::Error| HostError::Data {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        std::fs::create_dir_all(options.data.join("workspaces"))
            .map_err(|e| data_err(&options.data, e))?;
        let identity = HostIdentity::load_or_create(&options.data)?;
        let key = match join_token {
            Some(token) => {
                let key = JoinKey::from_token(token)?;
                key.store(&options.data)?;
                key
            }
            None => JoinKey::load(&options.data)?,
        };
        let tls = tokio_rustls::TlsAcceptor::from(Arc::new(identity.server_config()?));
        let fingerprint = identity.fingerprint();
        let state = Arc::new(HostState {
            options,
            key,
            fingerprint: fingerprint.clone(),
            workspaces: Mutex::new(HashMap::new()),
        });
        Ok(Host { state, tls, fingerprint })
    }

    /// The SHA-256 of the host's certificate, hex (what harnesses pin).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Serves connections from `listener` until `shutdown`.
    pub async fn serve(self, listener: TcpListener, shutdown: CancellationToken) {
        let connections = tokio_util::task::TaskTracker::new();
        let open = Arc::new(Semaphore::new(self.state.options.max_connections));
        let options = &self.state.options;
        let pending =
            PendingJoins::new(options.max_pending_joins, options.max_pending_joins_per_source);
        // Reachable without the token: every line about a refused or failed join is rate-limited.
        let refusals = Arc::new(RefusalLog::default());
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = shutdown.cancelled() => break,
            };
            let (tcp, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("sandbox host: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Replies are small messages written one after another: without this, Nagle holds
            // the second until the first's delayed ACK (~40 ms on Linux).
            let _ = tcp.set_nodelay(true);
            // Over a bound, the connection is closed at once (the harness's client retries).
            let Ok(slot) = open.clone().try_acquire_owned() else {
                refusals.note(peer, "at its connection bound; closed a new connection");
                continue;
            };
            let joining = match pending.admit(peer.ip()) {
                Ok(joining) => joining,
                Err(why) => {
                    refusals.note(peer, &format!("{}; closed a new connection", why.describe()));
                    continue;
                }
            };
            let (tls, state, stop) = (self.tls.clone(), self.state.clone(), shutdown.clone());
            let refusals = refusals.clone();
            connections.spawn(async move {
                let run = async {
                    let handshake = async {
                        let stream = tls
                            .accept(tcp)
                            .await
                            .map_err(|e| format!("TLS handshake failed: {e}"))?;
                        let mut ws = tokio_tungstenite::accept_async_with_config(
                            stream,
                            Some(protocol::ws_config()),
                        )
                        .await
                        .map_err(|e| format!("WebSocket upgrade failed: {e}"))?;
                        let joined = join(&mut ws, &state).await?;
                        Ok::<_, String>((ws, joined))
                    };
                    let joined = tokio::time::timeout(JOIN_TIMEOUT, handshake)
                        .await
                        .map_err(|_| "the join timed out".to_owned())
                        .and_then(|joined| joined);
                    drop(joining);
                    let (mut ws, joined) = match joined {
                        Ok(joined) => joined,
                        Err(e) => {
                            refusals.note(peer, &format!("a connection ended before joining: {e}"));
                            return Ok(());
                        }
                    };
                    if !joined {
                        refusals.note(peer, "refused a join (a wrong token or protocol version)");
                        let _ = ws.close(None).await;
                        return Ok(());
                    }
                    connection(ws, state, stop).await
                };
                if let Err(e) = run.await {
                    tracing::info!("sandbox host: connection from {peer} ended: {e}");
                }
                drop(slot);
            });
        }
        connections.close();
        let sandboxes: Vec<Sandbox> =
            self.state.workspaces.lock().await.values().map(|h| h.sandbox.clone()).collect();
        for sandbox in sandboxes {
            sandbox.stop().await;
        }
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>;

async fn send_now(ws: &mut Ws, message: &ToHarness) -> Result<(), String> {
    let bytes = protocol::encode(message).map_err(|e| e.to_string())?;
    ws.send(Message::Binary(bytes.into())).await.map_err(|e| e.to_string())
}

async fn next_message(ws: &mut Ws) -> Result<Option<ToHost>, String> {
    loop {
        match ws.next().await {
            None | Some(Ok(Message::Close(_))) => return Ok(None),
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(Message::Binary(bytes))) => {
                return protocol::decode(&bytes).map(Some).map_err(|e| e.to_string())
            }
            Some(Ok(Message::Text(text))) => {
                return protocol::decode(text.as_bytes()).map(Some).map_err(|e| e.to_string())
            }
            Some(Ok(_)) => {}
        }
    }
}

/// The join handshake; `Ok(false)` when the harness was refused (and told why).
async fn join(ws: &mut Ws, state: &HostState) -> Result<bool, String> {
    let nonce = auth::nonce().map_err(|e| e.to_string())?;
    send_now(ws, &ToHarness::Challenge { version: PROTOCOL_VERSION, nonce: nonce.clone() }).await?;
    let answer = tokio::time::timeout(JOIN_TIMEOUT, next_message(ws))
        .await
        .map_err(|_| "no join within the deadline".to_owned())??;
    let Some(ToHost::Join { version, nonce: theirs, proof }) = answer else {
        return Err("the first message was not a join".into());
    };
    if version != PROTOCOL_VERSION {
        let reason = format!(
            "this sandbox host speaks protocol version {PROTOCOL_VERSION}, the harness {version}; \
             run the same outboard version on both"
        );
        send_now(ws, &ToHarness::Refused { reason }).await?;
        return Ok(false);
    }
    if !state.key.verify_harness(&proof, &nonce, &theirs, &state.fingerprint) {
        let reason = "the join token is wrong: issue a new one with `outboard-server admin hosts \
                      add NAME --url URL` and restart the sandbox host with --join-token TOKEN"
            .to_owned();
        send_now(ws, &ToHarness::Refused { reason }).await?;
        return Ok(false);
    }
    let proof = state.key.host_proof(&nonce, &theirs, &state.fingerprint);
    let capacity = Some(state.options.capacity);
    send_now(ws, &ToHarness::Welcome { proof, capacity }).await?;
    Ok(true)
}

/// Serves the calls of a joined connection.
async fn connection(
    ws: Ws,
    state: Arc<HostState>,
    shutdown: CancellationToken,
) -> Result<(), String> {
    let (mut sink, mut stream) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<ToHarness>(OUTBOUND_MESSAGES);
    let writer = tokio::spawn(async move {
        while let Some(message) = out_rx.recv().await {
            let bytes = match protocol::encode(&message) {
                Ok(bytes) => bytes,
                Err(e) => match &message {
                    ToHarness::Reply { id, .. } => {
                        let failed = Reply::Failed { error: e.to_string() };
                        match protocol::encode(&ToHarness::Reply { id: *id, reply: failed }) {
                            Ok(bytes) => bytes,
                            Err(_) => continue,
                        }
                    }
                    _ => continue,
                },
            };
            if sink.send(Message::Binary(bytes.into())).await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let max_calls = state.options.max_calls;
    let slots = Arc::new(Semaphore::new(max_calls));
    let running: Arc<std::sync::Mutex<HashMap<u64, CancellationToken>>> = Arc::default();
    let closed = CancellationToken::new();
    let result = loop {
        let message = tokio::select! {
            message = stream.next() => message,
            _ = shutdown.cancelled() => break Ok(()),
        };
        let message: ToHost = match message {
            None | Some(Ok(Message::Close(_))) => break Ok(()),
            Some(Err(e)) => break Err(e.to_string()),
            Some(Ok(Message::Binary(bytes))) => match protocol::decode(&bytes) {
                Ok(message) => message,
                Err(e) => break Err(e.to_string()),
            },
            Some(Ok(_)) => continue,
        };
        match message {
            ToHost::Join { .. } => break Err("a second join on a joined connection".into()),
            ToHost::Cancel { id } => {
                if let Some(cancel) = running.lock().ok().and_then(|r| r.get(&id).cloned()) {
                    cancel.cancel();
                }
            }
            ToHost::Call { id, op } => {
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    let error = format!(
                        "the sandbox host is running {max_calls} calls of this \
                         harness already; retry when one has finished"
                    );
                    if out_tx
                        .send(ToHarness::Reply { id, reply: Reply::Failed { error } })
                        .await
                        .is_err()
                    {
                        break Ok(());
                    }
                    continue;
                };
                let cancel = closed.child_token();
                if let Ok(mut running) = running.lock() {
                    running.insert(id, cancel.clone());
                }
                let (state, out, running) = (state.clone(), out_tx.clone(), running.clone());
                tokio::spawn(async move {
                    let reply = call(&state, id, op, &out, cancel).await;
                    let _ = out.send(ToHarness::Reply { id, reply }).await;
                    if let Ok(mut running) = running.lock() {
                        running.remove(&id);
                    }
                    drop(permit);
                });
            }
        }
    };
    // A connection that goes away stops its calls, as an interrupt would.
    closed.cancel();
    drop(out_tx);
    let _ = writer.await;
    result
}

impl HostState {
    async fn open(&self, id: &str) -> Result<Hosted, String> {
        if !valid_workspace_id(id) {
            return Err(format!(
                "{id:?} is not a workspace id: use 1 to {MAX_WORKSPACE_ID} letters, digits, `-` \
                 or `_`"
            ));
        }
        let mut workspaces = self.workspaces.lock().await;
        if let Some(hosted) = workspaces.get(id) {
            return Ok(hosted.clone());
        }
        let dir = self.options.data.join("workspaces").join(id);
        let workspace = Workspace::new(dir.clone())
            .map_err(|e| format!("the workspace {id} cannot be made on the sandbox host: {e}"))?;
        let sandbox = Sandbox::new(self.options.sandbox.clone(), dir);
        let hosted = Hosted { workspace, sandbox };
        workspaces.insert(id.to_owned(), hosted.clone());
        Ok(hosted)
    }
}

/// The largest output chunk sent to a harness, waiting chunks joined included: a harness
/// accepts messages up to [`protocol::MAX_HOST_MESSAGE_BYTES`], which this stays far below even
/// at JSON's worst escaping.
pub const OUTPUT_CHUNK_BYTES: usize = 256 * 1024;

/// Forwards a call's output to the writer without blocking the sandbox's synchronous callback:
/// chunks that do not fit the writer's queue now wait here, a run of one stream joined into one
/// chunk, and go first at the next chunk or at the end, so nothing is lost and order is kept.
/// What waits is bounded by the command's own output cap ([`outboard_sandbox::output`]).
struct Outbox<'a> {
    id: u64,
    out: &'a mpsc::Sender<ToHarness>,
    pending: std::collections::VecDeque<(OutputStream, String)>,
}

impl<'a> Outbox<'a> {
    fn new(id: u64, out: &'a mpsc::Sender<ToHarness>) -> Self {
        Outbox { id, out, pending: std::collections::VecDeque::new() }
    }

    fn push(&mut self, stream: OutputStream, text: &str) {
        let mut rest = text;
        while rest.len() > OUTPUT_CHUNK_BYTES {
            let mut cut = OUTPUT_CHUNK_BYTES;
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            self.push_chunk(stream, &rest[..cut]);
            rest = &rest[cut..];
        }
        self.push_chunk(stream, rest);
    }

    /// Queues `text` (at most [`OUTPUT_CHUNK_BYTES`]), joined to the last waiting chunk of the
    /// same stream while that stays within the bound.
    fn push_chunk(&mut self, stream: OutputStream, text: &str) {
        self.flush();
        match self.pending.back_mut() {
            Some((kind, held))
                if *kind == stream && held.len() + text.len() <= OUTPUT_CHUNK_BYTES =>
            {
                held.push_str(text)
            }
            Some(_) => self.pending.push_back((stream, text.to_owned())),
            None => {
                self.pending.push_back((stream, text.to_owned()));
                self.flush();
            }
        }
    }

    fn flush(&mut self) {
        while let Some((stream, text)) = self.pending.pop_front() {
            match self.out.try_send(ToHarness::Output { id: self.id, stream, text }) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(ToHarness::Output {
                    stream, text, ..
                })) => {
                    self.pending.push_front((stream, text));
                    return;
                }
                Err(_) => {
                    self.pending.clear();
                    return;
                }
            }
        }
    }

    async fn finish(mut self) {
        while let Some((stream, text)) = self.pending.pop_front() {
            let _ = self.out.send(ToHarness::Output { id: self.id, stream, text }).await;
        }
    }
}

async fn call(
    state: &HostState,
    id: u64,
    op: Op,
    out: &mpsc::Sender<ToHarness>,
    cancel: CancellationToken,
) -> Reply {
    let failed = |error: String| Reply::Failed { error };
    match op {
        Op::Open { workspace } => match state.open(&workspace).await {
            Ok(_) => Reply::Opened,
            Err(e) => failed(e),
        },
        Op::Exec { workspace, command, timeout_ms } => {
            let hosted = match state.open(&workspace).await {
                Ok(hosted) => hosted,
                Err(e) => return failed(e),
            };
            let mut outbox = Outbox::new(id, out);
            let timeout = Duration::from_millis(timeout_ms);
            let ran = hosted
                .sandbox
                .exec(&command, timeout, &mut |stream, text| outbox.push(stream, text), cancel)
                .await;
            outbox.finish().await;
            match ran {
                Ok(r) => Reply::Exec {
                    exit_code: r.exit_code,
                    output: r.output,
                    timed_out: r.timed_out,
                    signal: r.signal,
                    failure: r.failure,
                },
                Err(e) => failed(e.to_string()),
            }
        }
        Op::Tool { workspace, name, input, ledger } => {
            if !HOST_TOOLS.contains(&name.as_str()) {
                return failed(format!(
                    "{name} does not run on a sandbox host; it runs these: {}",
                    HOST_TOOLS.join(", ")
                ));
            }
            let hosted = match state.open(&workspace).await {
                Ok(hosted) => hosted,
                Err(e) => return failed(e),
            };
            let sent = ledger_from_wire(&ledger);
            let mut reads = sent.clone();
            let mut outbox = Outbox::new(id, out);
            let ctx = ToolCtx {
                workspace: &hosted.workspace,
                sandbox: &hosted.sandbox,
                on_output: &mut |stream, text| outbox.push(stream, text),
                cancel,
                default_timeout: TOOL_DEFAULT_TIMEOUT,
                reads: &mut reads,
                org: None,
                events: None,
                remote: None,
                read_only: false,
            };
            let outcome = outboard_tools::run(&name, &input, ctx).await;
            outbox.finish().await;
            let (recorded, forgotten) = ledger_changes(&sent, &reads);
            Reply::Tool {
                output: outcome.output,
                is_error: outcome.is_error,
                recorded,
                forgotten,
                attachments: outcome.attachments,
            }
        }
        Op::Digest { workspace, path } => {
            let hosted = match state.open(&workspace).await {
                Ok(hosted) => hosted,
                Err(e) => return failed(e),
            };
            let ws = hosted.workspace.clone();
            let digest = tokio::task::spawn_blocking(move || {
                outboard_tools::recovery::workspace_target_digest(&ws, &path)
            });
            Reply::Digest { digest: digest.await.ok().flatten() }
        }
        Op::Stamps { workspace, paths } => {
            let hosted = match state.open(&workspace).await {
                Ok(hosted) => hosted,
                Err(e) => return failed(e),
            };
            let ws = hosted.workspace.clone();
            let rebuilt = tokio::task::spawn_blocking(move || {
                outboard_tools::recovery::rebuilt_ledger(&ws, &paths)
            });
            let ledger = rebuilt.await.unwrap_or_default();
            let stamps = ledger
                .files()
                .into_iter()
                .map(|(path, stamp)| stamp_to_wire(path, stamp))
                .collect();
            Reply::Stamps { stamps }
        }
        Op::Status => {
            let hosted: Vec<Hosted> = state.workspaces.lock().await.values().cloned().collect();
            let mut live_sandboxes = 0;
            for h in &hosted {
                if h.sandbox.pid().await.is_some() {
                    live_sandboxes += 1;
                }
            }
            let dir = state.options.data.join("workspaces");
            let workspaces = match tokio::fs::read_dir(&dir).await {
                Ok(mut entries) => {
                    let mut n = 0u64;
                    while let Ok(Some(_)) = entries.next_entry().await {
                        n += 1;
                    }
                    n
                }
                Err(_) => hosted.len() as u64,
            };
            Reply::Status { capacity: state.options.capacity, workspaces, live_sandboxes }
        }
    }
}

/// The ledger a call carried, as the tools keep it.
pub fn ledger_from_wire(entries: &[WireStamp]) -> ReadLedger {
    let mut ledger = ReadLedger::new();
    for entry in entries {
        if let Some(stamp) = stamp_from_wire(entry) {
            ledger.record_stamp(Path::new(&entry.path), stamp);
        }
    }
    ledger
}

/// What a tool changed in the ledger: entries new or different from what was sent, and sent
/// paths no longer there.
fn ledger_changes(sent: &ReadLedger, after: &ReadLedger) -> (Vec<WireStamp>, Vec<String>) {
    let recorded = after
        .files()
        .into_iter()
        .filter(|(path, stamp)| sent.stamp(path) != Some(*stamp))
        .map(|(path, stamp)| stamp_to_wire(path, stamp))
        .collect();
    let forgotten = sent
        .files()
        .into_iter()
        .filter(|(path, _)| after.stamp(path).is_none())
        .map(|(path, _)| path.to_string_lossy().into_owned())
        .collect();
    (recorded, forgotten)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Output that waits (the writer's queue is full) is joined per stream but never past
    /// [`OUTPUT_CHUNK_BYTES`], and a chunk larger than that is split on character boundaries:
    /// every message stays far under what a harness accepts, and nothing is lost or reordered.
    #[tokio::test]
    async fn waiting_output_is_joined_up_to_the_chunk_bound() {
        let (tx, mut rx) = mpsc::channel(1);
        let mut outbox = Outbox::new(7, &tx);
        let mut sent = String::new();
        for i in 0..40 {
            let text = format!("{i:02}é").repeat(10_000); // 50,000 bytes, multi-byte chars
            outbox.push(OutputStream::Stdout, &text);
            sent.push_str(&text);
        }
        let big = "ü".repeat(OUTPUT_CHUNK_BYTES); // two bytes each: split in four
        outbox.push(OutputStream::Stdout, &big);
        sent.push_str(&big);
        let drained = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(ToHarness::Output { text, .. }) = rx.recv().await {
                got.push(text);
            }
            got
        });
        outbox.finish().await;
        drop(tx);
        let got = drained.await.unwrap();
        assert!(got.iter().all(|t| t.len() <= OUTPUT_CHUNK_BYTES), "a chunk over the bound");
        assert!(got.iter().any(|t| t.len() > 50_000), "waiting chunks were not joined");
        assert_eq!(got.concat(), sent);
    }
}
