//! One actor per session. It is the only owner of the session's mutable state: the next `seq`,
//! the conversation and tool environment between turns, the in-flight partial output, and the
//! broadcast channel attached connections listen on.
//!
//! Everything that changes a session arrives as a [`Command`] on one bounded channel: requests
//! from connections (attach, send, interrupt) and events from the running turn ([`Emitter`]).
//! Because one task handles them in order, an attach sees a snapshot and a subscription taken at
//! the same instant: the durable log up to `last_seq`, the partial text since, and every event
//! after — no gap, no duplicate, without a lock.
//!
//! A durable event is appended to the store *before* it is broadcast and before the turn that
//! emitted it continues; a transient event (delta) is only broadcast, carrying the last durable
//! `seq`.
//!
//! An actor that has nothing to do stops, so the server's memory follows the sessions in use
//! rather than every session ever touched: after [`crate::config::Limits::session_idle`] without
//! a command, with no turn running, nobody subscribed to its events and no live sandbox (a
//! sandbox keeps its background processes until its own stop timer), it asks the hub to forget it
//! ([`Evict`], only if the hub still maps the session to this very actor), then closes its queue.
//! Requests that were already queued are dropped unanswered and their callers see
//! [`SessionHandle::is_stopped`]: the hub then retries on a fresh actor, which rebuilds
//! everything from the log exactly as after a restart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use outboard_shared::{
    ErrorBody, ErrorCode, EventKind, InFlight, SandboxState, SessionCompactResponse, SessionEvent,
    SessionId, SessionInfo, SessionStatus, ToolOutputSoFar, TurnId, TurnSendResponse,
    HISTORY_PAGE_EVENTS,
};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::config::ServerConfig;
use outboard_base::util::{new_id, now_rfc3339};
use outboard_harness::{self as agent, ToolEnv, Turn, TurnEnd};
use outboard_llm::models::Models;
use outboard_llm::Provider;
use outboard_org::orgfs::{Author, OrgFs};
use outboard_sandbox::jobs::JobReport;
use outboard_sandbox::{Sandbox, SandboxTransition};
use outboard_store::{SessionRow, Store, StoreError};
use outboard_tools::{ExternalTools, OrgCtx, ReadLedger};
use outboard_vfs::Workspace;

/// Commands queued for one session. A turn emits a few events per model step and connections
/// send a request at a time, so 256 is ample; a full queue makes the sender wait, which slows
/// only that session's own turn.
const SESSION_QUEUE: usize = 256;

/// Events buffered per attached connection. A connection more than this many events behind
/// gets `Lagged` and is resynchronised from the durable log (see `gateway`); a model streaming
/// fast produces at most a few hundred deltas a second.
pub const BROADCAST_CAPACITY: usize = 1024;

/// Sandbox state changes waiting to be logged: a few per command at most (thaw, run); when the
/// session is this far behind, the sandbox manager keeps the rest in its own bounded backlog
/// (`sandbox::manager`) rather than block or drop them.
const SANDBOX_TRANSITIONS: usize = 16;

/// Background jobs' starts and ends waiting to be logged: two per job, and at most
/// `sandbox::jobs::MAX_RUNNING_JOBS` run at once; beyond it the sandbox manager's backlog keeps
/// them, as for transitions.
const SANDBOX_JOB_REPORTS: usize = 16;

mod load;
mod prompt;
mod rewind;
pub(crate) mod window;

pub use prompt::Prompt;

pub use outboard_harness::{EmitError, Emitter};

/// Actor identities, unique for the life of the process: the hub forgets a stopping actor only
/// if its map still holds that one, not a successor spawned for the same session.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// Where an idle actor asks to be forgotten (the hub's map of actors). A trait, so this module
/// does not depend on the hub that spawns it.
pub trait Evict: Send + Sync {
    /// Removes `session` from the map if it still maps to the actor `epoch`; returns whether it
    /// did. The actor stops only after a `true`, so no request can reach a stopped actor through
    /// the map.
    fn evict(&self, session: &SessionId, epoch: u64) -> bool;
}

/// The actor's side of [`outboard_harness::EventSink`]: a turn's events arrive on the actor's one
/// command channel, in order with attaches, so a snapshot and its subscription stay atomic.
struct ActorSink {
    tx: mpsc::Sender<Command>,
}

impl outboard_harness::EventSink for ActorSink {
    fn emit(
        &self,
        kind: EventKind,
        durable: bool,
        parent: Option<Arc<str>>,
    ) -> outboard_harness::EmitFuture<'_> {
        Box::pin(async move {
            if !durable {
                let emit = Command::Emit { kind, parent, ack: None };
                self.tx.send(emit).await.map_err(|_| EmitError::Closed)?;
                return Ok(0);
            }
            let (ack, rx) = oneshot::channel();
            let emit = Command::Emit { kind, parent, ack: Some(ack) };
            self.tx.send(emit).await.map_err(|_| EmitError::Closed)?;
            rx.await.map_err(|_| EmitError::Closed)?
        })
    }

    fn emit_all(
        &self,
        kinds: Vec<EventKind>,
        parent: Option<Arc<str>>,
    ) -> outboard_harness::EmitAllFuture<'_> {
        Box::pin(async move {
            let (ack, rx) = oneshot::channel();
            let emit = Command::EmitAll { kinds, parent, ack };
            self.tx.send(emit).await.map_err(|_| EmitError::Closed)?;
            rx.await.map_err(|_| EmitError::Closed)?
        })
    }
}

/// An [`Emitter`] that emits through the actor behind `tx`.
fn emitter(tx: mpsc::Sender<Command>) -> Emitter {
    Emitter::new(Arc::new(ActorSink { tx }))
}

/// The network proxy's refusals, as durable `network` events of this session. Weak, so a
/// sandbox's proxy never keeps its actor alive.
struct ActorRefusals(mpsc::WeakSender<Command>);

impl crate::netsession::RefusalEvents for ActorRefusals {
    fn refused(&self, event: EventKind) -> futures_util::future::BoxFuture<'static, bool> {
        let tx = self.0.clone();
        Box::pin(async move {
            let Some(tx) = tx.upgrade() else { return false };
            emitter(tx).durable(event).await.is_ok()
        })
    }
}

/// What an attach gets: the snapshot, and the live events after it.
pub struct Attached {
    /// The session row at the time of the snapshot.
    pub session: SessionRow,
    /// At most [`HISTORY_PAGE_EVENTS`] durable events: the first ones after the requested `seq`,
    /// or the newest ones when none was given (the gateway fits them into a frame and sends
    /// the rest up to `session.last_seq`, read from the store, before any live event).
    pub events: Vec<SessionEvent>,
    /// The turn in flight, if any.
    pub in_flight: Option<InFlight>,
    /// Without `after_seq`: the events whose state still holds (the last `todos`, the running
    /// background commands'), for [`outboard_shared::SessionAttachResponse::standing`].
    pub standing: Vec<SessionEvent>,
    /// Live events from here on.
    pub live: broadcast::Receiver<Arc<SessionEvent>>,
}

enum Command {
    Emit {
        kind: EventKind,
        /// The `Task` call of the subagent that emits it.
        parent: Option<Arc<str>>,
        ack: Option<oneshot::Sender<Result<u64, EmitError>>>,
    },
    /// Durable events committed together ([`outboard_harness::EventSink::emit_all`]).
    EmitAll {
        kinds: Vec<EventKind>,
        parent: Option<Arc<str>>,
        ack: oneshot::Sender<Result<Vec<u64>, EmitError>>,
    },
    Attach {
        after_seq: Option<u64>,
        reply: oneshot::Sender<Result<Attached, ErrorBody>>,
    },
    Send {
        prompt: Prompt,
        by: String,
        reply: oneshot::Sender<Result<TurnSendResponse, ErrorBody>>,
    },
    Interrupt {
        reply: oneshot::Sender<bool>,
    },
    /// Answered once no turn is running (at once when idle).
    WaitIdle {
        reply: oneshot::Sender<()>,
    },
    /// Boxed: the turn hands back its whole tool environment, and every other command is small.
    TurnEnded(Option<Box<TurnEnd>>),
    /// Compact the conversation now (`session/compact`); answered when it is done.
    Compact {
        focus: Option<String>,
        reply: oneshot::Sender<Result<SessionCompactResponse, ErrorBody>>,
    },
    /// A compaction asked for by `Compact` ended (`None`: its task panicked).
    CompactEnded(Option<Box<(TurnEnd, Result<agent::Compacted, agent::CompactError>)>>),
    /// Stop for good (the session is being deleted): refused while a turn runs; otherwise the
    /// actor leaves the hub's map, stops its sandbox and ends.
    Close {
        reply: oneshot::Sender<Result<(), ErrorBody>>,
    },
    /// Kill a background command (`session/kill_task`).
    KillTask {
        shell_id: String,
        reply: oneshot::Sender<Result<(), ErrorBody>>,
    },
    /// Answer a call waiting for approval (`approval/answer`).
    Answer {
        call_id: String,
        answer: outboard_harness::approvals::Answer,
        reply: oneshot::Sender<Result<(), ErrorBody>>,
    },
    /// Switch the session's mode (`session/set_mode`).
    SetMode {
        mode: outboard_shared::SessionMode,
        by: String,
        reply: oneshot::Sender<Result<outboard_shared::SessionSetModeResponse, ErrorBody>>,
    },
    /// The session's checkpoints (`session/checkpoints`).
    Checkpoints {
        reply: oneshot::Sender<Result<Vec<outboard_shared::CheckpointInfo>, ErrorBody>>,
    },
    /// Go back to a checkpoint (`session/rewind`).
    Rewind {
        params: outboard_shared::SessionRewindParams,
        by: String,
        reply: oneshot::Sender<Result<outboard_shared::SessionRewindResponse, ErrorBody>>,
    },
    /// Use another model from the next turn on (`session/set_model`).
    SetModel {
        model: String,
        by: String,
        reply: oneshot::Sender<Result<SessionInfo, ErrorBody>>,
    },
}

/// A handle to a session actor. Cheap to clone.
#[derive(Clone)]
pub struct SessionHandle {
    tx: mpsc::Sender<Command>,
    org_id: outboard_shared::OrgId,
    /// Which actor this is (see [`Evict`]).
    epoch: u64,
    /// Cancelled when this node lost the session's lease (see [`SessionHandle::lease_lost`]).
    lost: CancellationToken,
    /// Why the actor refused to run the session (another node runs it, this node is shutting
    /// down): set before it stops, so callers report it instead of retrying.
    refusal: Arc<std::sync::OnceLock<ErrorBody>>,
}

/// What every session actor of a server shares.
#[derive(Clone)]
pub struct Services {
    /// The store.
    pub store: Store,
    /// The org files.
    pub org_fs: OrgFs,
    /// The models on offer; a turn uses its session's.
    pub models: Arc<Models>,
    /// The org secrets (injected into sandboxes' HTTPS, scrubbed from events); `None`: a
    /// server without a secret key.
    pub secrets: Option<outboard_org::secrets::Secrets>,
    /// The org's MCP servers' shared connections; `None`: no MCP tools.
    pub mcp: Option<outboard_mcp::McpHub>,
    /// The server's metrics (turns, steps and tool calls are counted from the log's events).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The sandbox hosts, for sessions whose workspace lives on one; `None`: a server without
    /// a secret key (no host tokens can be opened).
    pub hosts: Option<Arc<outboard_remote::registry::Hosts>>,
    /// The sessions' git state: checkpoints are snapshots in the session's shadow repository.
    pub sources: Arc<crate::sources::Sources>,
}

impl SessionHandle {
    /// Starts the actor for `row`. It loads the log, resumes a turn cut short by a restart, and
    /// then serves commands until every handle is dropped or it has been idle long enough to be
    /// evicted through `evict` (see the module header).
    pub fn spawn(
        row: SessionRow,
        services: Services,
        config: &ServerConfig,
        shutdown: CancellationToken,
        evict: Arc<dyn Evict>,
    ) -> Self {
        let Services { store, org_fs, models, secrets, mcp, metrics, hosts, sources } = services;
        let network = crate::netsession::NetworkDeps {
            store: store.clone(),
            secrets,
            limits: config.limits.network,
            metrics: metrics.clone(),
        };
        let (tx, rx) = mpsc::channel(SESSION_QUEUE);
        let org_id = row.org_id.clone();
        let epoch = NEXT_EPOCH.fetch_add(1, Ordering::Relaxed);
        let (events, _) = broadcast::channel(BROADCAST_CAPACITY);
        let window = agent::Window {
            tokens: row
                .context_window
                .or(config.limits.context_window)
                .unwrap_or_else(|| outboard_llm::context::context_window(&row.model)),
            compact_percent: config.limits.compact_percent,
        };
        let lost = CancellationToken::new();
        let refusal: Arc<std::sync::OnceLock<ErrorBody>> = Arc::default();
        let actor = Actor {
            lease: None,
            lost: lost.clone(),
            refusal: refusal.clone(),
            // A recorded workspace is worked on in place; otherwise the session's own directory.
            workspace_dir: match &row.workspace {
                Some(dir) => std::path::PathBuf::from(dir),
                None => config.workspaces_dir().join(row.id.as_str()),
            },
            sandbox_config: config.sandbox.clone(),
            limits: config.limits.clone(),
            last_seq: row.last_seq,
            turn_by: row.owner.clone(),
            row,
            store,
            org_fs,
            models,
            conversation: None,
            window,
            env: None,
            running: None,
            in_flight: InFlight::default(),
            events,
            tx: tx.downgrade(),
            shutdown,
            idle_waiters: Vec::new(),
            files_touched: Vec::new(),
            org_shown: Default::default(),
            epoch,
            evict,
            idle_after: config.limits.session_idle,
            network_deps: network,
            network: None,
            scrub: None,
            sandbox: None,
            lost_jobs: Vec::new(),
            gate: Arc::default(),
            mcp,
            metrics,
            hosts,
            sources,
        };
        tokio::spawn(actor.run(rx));
        SessionHandle { tx, org_id, epoch, lost, refusal }
    }

    /// Tells the actor that this node lost the session's lease (another node took it over while
    /// this one was not renewing): it stops at once, cancelling its turn and its sandbox, without
    /// writing anything more (the store would refuse it: [`StoreError::Fenced`]).
    pub fn lease_lost(&self) {
        self.lost.cancel();
    }

    /// Why the actor refused to run the session, once it has stopped for that reason.
    pub fn refusal(&self) -> Option<ErrorBody> {
        self.refusal.get().cloned()
    }

    /// Which actor this handle reaches (see [`Evict`]).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether the actor has stopped (evicted when idle, or gone after a panic): a request that
    /// failed on this handle is retried on a fresh one.
    pub fn is_stopped(&self) -> bool {
        self.tx.is_closed()
    }

    /// The session's org.
    pub fn org_id(&self) -> &outboard_shared::OrgId {
        &self.org_id
    }

    /// Attaches: a page of the snapshot after `after_seq` (the newest page when `None`) and a
    /// live receiver.
    pub async fn attach(&self, after_seq: Option<u64>) -> Result<Attached, ErrorBody> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Attach { after_seq, reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Starts a turn with the user's message; returns once the message is durable.
    pub async fn send(&self, prompt: Prompt, by: String) -> Result<TurnSendResponse, ErrorBody> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Send { prompt, by, reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Resolves once the session has no turn running (used by shutdown, after the shutdown
    /// token made running turns stop at their next checkpoint).
    pub async fn wait_idle(&self) {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Command::WaitIdle { reply }).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// Broadcasts a transient event (presence, a drive request) to everyone attached, in order
    /// with the session's other events; it gets the last durable `seq` and is not logged.
    pub async fn transient(&self, kind: EventKind) -> Result<(), ErrorBody> {
        self.tx.send(Command::Emit { kind, parent: None, ack: None }).await.map_err(|_| gone())
    }

    /// Stops the actor for good, unless a turn runs (`conflict`); its sandbox stops with it.
    pub async fn close(&self) -> Result<(), ErrorBody> {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Command::Close { reply }).await.is_err() {
            return Ok(());
        }
        rx.await.unwrap_or(Ok(()))
    }

    /// Compacts the conversation now, with what the summary should focus on; answers once the
    /// `compaction` event is durable. Refused while a turn runs.
    pub async fn compact(
        &self,
        focus: Option<String>,
    ) -> Result<SessionCompactResponse, ErrorBody> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Compact { focus, reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Kills one of the session's running background commands; `not_found` when none of that id runs.
    pub async fn kill_task(&self, shell_id: String) -> Result<(), ErrorBody> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::KillTask { shell_id, reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Answers the call `call_id` waiting for approval; `not_found` when none waits.
    pub async fn answer(
        &self,
        call_id: String,
        answer: outboard_harness::approvals::Answer,
    ) -> Result<(), ErrorBody> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Answer { call_id, answer, reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Switches the session to the model named `model` for its next turn; answers once the
    /// `model_changed` event is durable, with the session as it now is.
    pub async fn set_model(&self, model: String, by: String) -> Result<SessionInfo, ErrorBody> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::SetModel { model, by, reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Switches the session's mode; answers once the `mode_changed` event is durable.
    pub async fn set_mode(
        &self,
        mode: outboard_shared::SessionMode,
        by: String,
    ) -> Result<outboard_shared::SessionSetModeResponse, ErrorBody> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::SetMode { mode, by, reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// The session's checkpoints, oldest first.
    pub async fn checkpoints(&self) -> Result<Vec<outboard_shared::CheckpointInfo>, ErrorBody> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Checkpoints { reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Takes the session back to a checkpoint (see [`Actor::rewind`]).
    pub async fn rewind(
        &self,
        params: outboard_shared::SessionRewindParams,
        by: String,
    ) -> Result<outboard_shared::SessionRewindResponse, ErrorBody> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Rewind { params, by, reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }

    /// Interrupts the turn in flight; false when there is none.
    pub async fn interrupt(&self) -> Result<bool, ErrorBody> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Command::Interrupt { reply }).await.map_err(|_| gone())?;
        rx.await.map_err(|_| gone())
    }
}

fn no_task(shell_id: &str) -> ErrorBody {
    ErrorBody::new(
        ErrorCode::NotFound,
        format!("no background command {shell_id} is running in this session (see /tasks)"),
    )
}

/// The refusal of a session another node runs: which node, and where to reach it.
fn held_elsewhere(held: &outboard_store::lease::Held) -> ErrorBody {
    let node = held.name.as_deref().unwrap_or(&held.node);
    let at = held.url.as_deref().map(|u| format!(" at {u}")).unwrap_or_default();
    ErrorBody::new(
        ErrorCode::Unavailable,
        format!(
            "this session is running on another server node ({node}{at}) right now: connect to \
             that node, or try again once the session is idle there (its node gives it up a \
             minute after its last use)"
        ),
    )
    .at_node(held.url.clone())
}

fn gone() -> ErrorBody {
    ErrorBody::new(ErrorCode::Internal, "the session stopped unexpectedly; attach again")
}

struct Running {
    turn_id: TurnId,
    cancel: CancellationToken,
    /// For a compaction asked for between turns: who waits for it.
    compaction: Option<oneshot::Sender<Result<SessionCompactResponse, ErrorBody>>>,
}

struct Actor {
    row: SessionRow,
    /// The epoch of this node's lease on the session, once taken ([`outboard_store::lease`]).
    lease: Option<i64>,
    /// Cancelled when the lease is lost (by the heartbeat, or by an append the store fenced).
    lost: CancellationToken,
    /// See [`SessionHandle::refusal`].
    refusal: Arc<std::sync::OnceLock<ErrorBody>>,
    store: Store,
    /// The org's shared files (`/memory`, `/skills`).
    org_fs: OrgFs,
    /// Who sent the message of the current (or last) turn: the author of its org file changes.
    turn_by: String,
    /// The models on offer: each turn takes the session's (`row.model_name`) when it starts.
    models: Arc<Models>,
    workspace_dir: std::path::PathBuf,
    sandbox_config: outboard_sandbox::SandboxConfig,
    limits: crate::config::Limits,
    last_seq: u64,
    /// Built from the log when first needed (a turn, a compaction), not when the actor starts:
    /// attaching to a long session, or keeping many idle ones, costs no conversation in memory.
    conversation: Option<agent::Conversation>,
    /// The session's context window and when to compact.
    window: agent::Window,
    /// `None` while a turn owns it (or before the first turn creates it).
    env: Option<ToolEnv>,
    running: Option<Running>,
    in_flight: InFlight,
    /// Shared (`Arc`): the broadcast keeps a ring of [`BROADCAST_CAPACITY`] slots for as long
    /// as the actor lives, and a slot of a pointer is a seventh of a slot of an event — about
    /// 32 KiB a session instead of 220 KiB, which is most of what an idle session costs.
    events: broadcast::Sender<Arc<SessionEvent>>,
    /// Weak, so the actor's own sender does not keep its channel open forever.
    tx: mpsc::WeakSender<Command>,
    /// The server's shutdown signal, handed to every turn.
    shutdown: CancellationToken,
    /// `wait_idle` callers waiting for the running turn to end.
    idle_waiters: Vec<oneshot::Sender<()>>,
    /// Files the log shows this session read or wrote, to rebuild the read ledger after a restart.
    files_touched: Vec<String>,
    /// What the session's prompts quoted of the org, for the next env (see `ToolEnv::org_shown`).
    org_shown: std::collections::BTreeMap<String, u64>,
    /// This actor's identity in the hub's map.
    epoch: u64,
    /// The hub's map, to leave it when idle.
    evict: Arc<dyn Evict>,
    /// How long without a command before an actor with nothing to do stops.
    idle_after: std::time::Duration,
    /// What the session's network is made from.
    network_deps: crate::netsession::NetworkDeps,
    /// The session's network, made before its first sandbox (see [`Actor::prepare_network`]).
    network: Option<crate::netsession::SessionNetworkParts>,
    /// The org's secret values to replace in events and tool results; read with the network.
    scrub: Option<Scrubbers>,
    /// A handle to the session's sandbox once made (the tool environment's, which a turn owns
    /// while it runs), to kill background commands at any time.
    sandbox: Option<Sandbox>,
    /// Background commands the log shows running when the server stopped, `(shell id,
    /// command)`: logged as lost at load, handed to the next sandbox so the model is told.
    lost_jobs: Vec<(String, String)>,
    /// Tool calls waiting for a person's answer, shared with the running turn.
    gate: Arc<outboard_harness::approvals::Gate>,
    /// The org's MCP connections, for the tool environment.
    mcp: Option<outboard_mcp::McpHub>,
    /// Where committed events are counted.
    metrics: Arc<crate::metrics::Metrics>,
    /// The sandbox hosts (see [`Services::hosts`]).
    hosts: Option<Arc<outboard_remote::registry::Hosts>>,
    /// Where checkpoints are made and restored.
    sources: Arc<crate::sources::Sources>,
}

/// The org's secret values as they appear in text and in an event's JSON.
struct Scrubbers {
    text: Arc<outboard_base::scrub::Scrubber>,
    json: outboard_base::scrub::Scrubber,
}

impl Scrubbers {
    fn new(values: Vec<(String, String)>) -> Scrubbers {
        // A value with a quote or a backslash is escaped in JSON: look for that form too.
        let json = values
            .iter()
            .map(|(v, r)| {
                let quoted = serde_json::to_string(v).unwrap_or_default();
                (quoted.trim_matches('"').to_owned(), r.clone())
            })
            .collect();
        Scrubbers {
            text: Arc::new(outboard_base::scrub::Scrubber::new(values)),
            json: outboard_base::scrub::Scrubber::new(json),
        }
    }

    /// `kind` scrubbed: through its JSON, so every string field is covered, and kinds added
    /// later too. Unchanged (and not re-parsed) when no value occurs.
    fn event(&self, mut kind: EventKind) -> EventKind {
        if self.json.is_empty() {
            return kind;
        }
        // The streaming chunks, many per step, are one text each: scanned as is, no JSON.
        if let EventKind::AssistantDelta { text } | EventKind::ToolOutputDelta { text, .. } =
            &mut kind
        {
            if let std::borrow::Cow::Owned(clean) = self.text.scrub_str(text) {
                *text = clean;
            }
            return kind;
        }
        let Ok(json) = serde_json::to_string(&kind) else { return kind };
        match self.json.scrub_str(&json) {
            std::borrow::Cow::Borrowed(_) => kind,
            std::borrow::Cow::Owned(clean) => serde_json::from_str(&clean).unwrap_or(kind),
        }
    }
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        if let Err(refusal) = self.take_lease().await {
            tracing::debug!(session = %self.row.id, "not run here: {}", refusal.message);
            let _ = self.refusal.set(refusal);
            self.evict.evict(&self.row.id, self.epoch);
            // Queued commands are dropped: their callers find the refusal on the handle.
            rx.close();
            while rx.recv().await.is_some() {}
            return;
        }
        if let Err(e) = self.load().await {
            tracing::error!(session = %self.row.id, "cannot load the session: {e}");
        }
        let lost = self.lost.clone();
        loop {
            let next = tokio::select! {
                biased;
                () = lost.cancelled() => {
                    self.lease_lost(rx).await;
                    return;
                }
                next = tokio::time::timeout(self.idle_after, rx.recv()) => next,
            };
            let cmd = match next {
                Ok(Some(cmd)) => cmd,
                Ok(None) => {
                    self.give_lease_back().await;
                    return;
                }
                Err(_) => {
                    if self.evictable().await && self.evict.evict(&self.row.id, self.epoch) {
                        tracing::debug!(session = %self.row.id, "idle; the actor stops");
                        // Commands queued before the hub forgot us are dropped unanswered: their
                        // callers see a stopped actor and retry on a fresh one.
                        rx.close();
                        while rx.recv().await.is_some() {}
                        self.give_lease_back().await;
                        return;
                    }
                    continue;
                }
            };
            match cmd {
                Command::Emit { kind, parent, ack } => {
                    let result = self.emit_from(kind, ack.is_some(), None, parent).await;
                    if let Some(ack) = ack {
                        let _ = ack.send(result);
                    }
                }
                Command::EmitAll { kinds, parent, ack } => {
                    let _ = ack.send(self.emit_all(kinds, parent).await);
                }
                Command::Attach { after_seq, reply } => {
                    let _ = reply.send(self.attach(after_seq).await);
                }
                Command::Send { prompt, by, reply } => {
                    let _ = reply.send(self.start_turn(prompt, by).await);
                }
                Command::Interrupt { reply } => {
                    let interrupted = match &self.running {
                        Some(r) => {
                            tracing::info!(session = %self.row.id, turn = %r.turn_id, "interrupt");
                            r.cancel.cancel();
                            true
                        }
                        None => false,
                    };
                    let _ = reply.send(interrupted);
                }
                Command::WaitIdle { reply } => {
                    if self.running.is_some() {
                        self.idle_waiters.push(reply);
                    } else {
                        let _ = reply.send(());
                    }
                }
                Command::TurnEnded(end) => self.turn_ended(end).await,
                Command::Compact { focus, reply } => {
                    if let Err(e) = self.conversation_loaded().await {
                        let _ = reply.send(Err(e));
                        continue;
                    }
                    if let Err(e) = self.start_compaction(focus, reply) {
                        tracing::debug!(session = %self.row.id, "compaction refused: {}", e.message);
                    }
                }
                Command::CompactEnded(end) => self.compaction_ended(end).await,
                Command::Answer { call_id, answer, reply } => {
                    let answered = match self.gate.answer(&call_id, answer) {
                        outboard_harness::approvals::Delivery::Delivered => Ok(()),
                        outboard_harness::approvals::Delivery::NotWaiting(answer) => {
                            self.answer_early(&call_id, answer).await
                        }
                    };
                    let _ = reply.send(answered);
                }
                Command::SetMode { mode, by, reply } => {
                    let _ = reply.send(self.set_mode(mode, by).await);
                }
                Command::Checkpoints { reply } => {
                    let _ = reply.send(self.checkpoints().await);
                }
                Command::Rewind { params, by, reply } => {
                    let _ = reply.send(self.rewind(params, by).await);
                }
                Command::SetModel { model, by, reply } => {
                    let _ = reply.send(self.set_model(model, by).await);
                }
                Command::KillTask { shell_id, reply } => {
                    let Some(sandbox) = self.sandbox.clone() else {
                        let _ = reply.send(Err(no_task(&shell_id)));
                        continue;
                    };
                    // In a task of its own: the sandbox may be busy with a command for minutes.
                    tokio::spawn(async move {
                        let answer = match sandbox.kill_job(&shell_id).await {
                            Ok(true) => Ok(()),
                            Ok(false) => Err(no_task(&shell_id)),
                            Err(e) => Err(ErrorBody::new(ErrorCode::Internal, e.to_string())),
                        };
                        let _ = reply.send(answer);
                    });
                }
                Command::Close { reply } => {
                    if self.running.is_some() {
                        let _ = reply.send(Err(ErrorBody::new(
                            ErrorCode::Conflict,
                            "a turn is running in this session: interrupt it first",
                        )));
                        continue;
                    }
                    self.evict.evict(&self.row.id, self.epoch);
                    rx.close();
                    if let Some(env) = &self.env {
                        env.sandbox.stop().await;
                    }
                    self.give_lease_back().await;
                    let _ = reply.send(Ok(()));
                    return;
                }
            }
        }
    }

    /// Takes the session's lease for this node and reads the session row as it is now (another
    /// node may have run turns since the caller read it, and this actor's state is built from
    /// what the store holds once the lease is ours). The refusal when another node runs the
    /// session, or this node is shutting down.
    async fn take_lease(&mut self) -> Result<(), ErrorBody> {
        if self.shutdown.is_cancelled() {
            return Err(ErrorBody::new(
                ErrorCode::Unavailable,
                "this server is shutting down; reconnect in a moment (to another node of the \
                 same store, or to this one once it has restarted)",
            ));
        }
        match self.store.acquire_lease(&self.row.id).await {
            Ok(Ok(lease)) => self.lease = Some(lease.epoch),
            Ok(Err(held)) => return Err(held_elsewhere(&held)),
            Err(e) => return Err(internal(e)),
        }
        match self.store.session(&self.row.id).await {
            Ok(Some(row)) => {
                self.last_seq = row.last_seq;
                self.row = row;
                Ok(())
            }
            Ok(None) => {
                self.give_lease_back().await;
                Err(ErrorBody::new(
                    ErrorCode::NotFound,
                    format!("session {} was deleted", self.row.id),
                ))
            }
            Err(e) => {
                self.give_lease_back().await;
                Err(internal(e))
            }
        }
    }

    /// Gives the lease this actor took back (it stops with nothing left to do).
    async fn give_lease_back(&mut self) {
        if let Some(epoch) = self.lease.take() {
            if let Err(e) = self.store.release_lease(&self.row.id, Some(epoch)).await {
                // Not fatal: the lease expires on its own, and this node stops renewing it.
                tracing::warn!(session = %self.row.id, "cannot give the session's lease back: {e}");
            }
        }
    }

    /// This node lost the session's lease: another node runs it now. The turn is cancelled and
    /// the sandbox stopped (its commands must not go on changing the workspace the new owner
    /// works in); nothing more is written; queued commands are dropped, so their callers retry
    /// on a fresh actor, which finds the new owner.
    async fn lease_lost(&mut self, mut rx: mpsc::Receiver<Command>) {
        tracing::warn!(session = %self.row.id, "the session's lease was taken over by another node; stopping here");
        self.evict.evict(&self.row.id, self.epoch);
        rx.close();
        if let Some(running) = &self.running {
            running.cancel.cancel();
        }
        if let Some(sandbox) =
            self.sandbox.clone().or_else(|| self.env.as_ref().map(|e| e.sandbox.clone()))
        {
            sandbox.stop().await;
        }
        while rx.recv().await.is_some() {}
        self.give_lease_back().await;
    }

    /// A failed append as the turn sees it; a fenced one also stops this actor (see
    /// [`Actor::lease_lost`]).
    fn store_failed(&self, e: StoreError) -> EmitError {
        if matches!(e, StoreError::Fenced(_)) {
            self.lost.cancel();
        }
        EmitError::Store(e.to_string())
    }

    /// An answer for a call no loop waits on: held for the resumed loop if the log shows the
    /// question open (a restart resumed the turn, which has not reached the call yet).
    async fn answer_early(
        &mut self,
        call_id: &str,
        answer: outboard_harness::approvals::Answer,
    ) -> Result<(), ErrorBody> {
        let marks = self
            .store
            .events_of_kinds(&self.row.id, outboard_harness::approvals::KINDS)
            .await
            .map_err(internal)?;
        if self.running.is_none() || !outboard_harness::approvals::is_open(&marks, call_id) {
            return Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!(
                    "no call {call_id} waits for approval in this session: it was answered \
                     already, its turn ended, or the id is wrong (the approval_requested event \
                     names it)"
                ),
            ));
        }
        if !self.gate.hold(call_id, answer) {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                "too many answers are waiting for this session's turn to resume; try again in \
                 a moment",
            ));
        }
        Ok(())
    }

    /// Nothing would be lost by stopping now: no turn, nobody subscribed, no live sandbox.
    async fn evictable(&self) -> bool {
        if self.running.is_some() || !self.idle_waiters.is_empty() {
            return false;
        }
        if self.events.receiver_count() > 0 {
            return false;
        }
        match &self.env {
            Some(env) => matches!(
                env.sandbox.state().await,
                SandboxState::None | SandboxState::Stopped | SandboxState::Dead
            ),
            None => true,
        }
    }

    /// Marks the session failed because its log cannot be read, with the reason.
    async fn fail_unreadable(&mut self, e: &StoreError) -> Result<(), StoreError> {
        let reason = format!("the session's log cannot be read ({e}); start a new session");
        tracing::error!(session = %self.row.id, "{reason}");
        self.store.fail_session(&self.row.id, &reason).await?;
        self.row.status = SessionStatus::Failed;
        self.row.failure = Some(reason);
        Ok(())
    }

    /// `session/set_model`: records the change durably and takes it into the session's row and
    /// window; a turn in flight finishes with the model it started with.
    async fn set_model(&mut self, name: String, by: String) -> Result<SessionInfo, ErrorBody> {
        let (entry, _) =
            self.models.pick(&name).map_err(|e| ErrorBody::new(ErrorCode::BadRequest, e))?;
        let label = entry.label();
        let context_window = self.models.resolve_window(entry).await.tokens;
        if self.row.model_name.as_deref() == Some(name.as_str()) && self.row.model == label {
            return Ok(window::session_info(&self.models, &self.row));
        }
        let kind = EventKind::ModelChanged {
            model: name.clone(),
            label: label.clone(),
            context_window,
            by,
        };
        self.emit(kind, true)
            .await
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, format!("cannot record it: {e}")))?;
        tracing::info!(session = %self.row.id, model = %label, "model changed");
        self.row.model_name = Some(name);
        self.row.model = label;
        self.row.context_window = Some(context_window);
        self.window.tokens = context_window;
        Ok(window::session_info(&self.models, &self.row))
    }

    /// `session/set_mode`: records the switch durably, then the gate (which a running turn and
    /// its subagents judge their next calls by) takes it. The gate's mode is read from the log
    /// first when no turn has loaded it since the actor started. Refused for a failed session.
    async fn set_mode(
        &mut self,
        mode: outboard_shared::SessionMode,
        by: String,
    ) -> Result<outboard_shared::SessionSetModeResponse, ErrorBody> {
        if let Some(reason) = &self.row.failure {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                format!("this session failed: {reason}"),
            ));
        }
        if self.conversation.is_none() && self.running.is_none() {
            let kinds = outboard_harness::approvals::MODE_KINDS;
            let marks = self.store.events_of_kinds(&self.row.id, kinds).await.map_err(internal)?;
            self.gate.restore(&marks);
        }
        if self.gate.mode() == mode {
            return Ok(outboard_shared::SessionSetModeResponse { mode, seq: self.last_seq });
        }
        let seq = self
            .emit(EventKind::ModeChanged { mode, by }, true)
            .await
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, format!("cannot record it: {e}")))?;
        self.gate.set_mode(mode);
        tracing::info!(session = %self.row.id, mode = mode.as_str(), "mode changed");
        Ok(outboard_shared::SessionSetModeResponse { mode, seq })
    }

    /// The provider of the session's model, for a turn (or a compaction) starting now. A
    /// session whose recorded model the server no longer offers runs with the default, and its
    /// log's `assistant_message.model` says so.
    fn turn_provider(&self) -> Arc<Provider> {
        let (entry, provider) =
            self.models.for_session(self.row.model_name.as_deref(), &self.row.model);
        if entry.label() != self.row.model {
            tracing::warn!(
                session = %self.row.id,
                recorded = %self.row.model,
                using = %entry.label(),
                "the session's model is not offered by this server any more; using the default"
            );
        }
        provider.clone()
    }

    async fn emit(&mut self, kind: EventKind, durable: bool) -> Result<u64, EmitError> {
        self.emit_from(kind, durable, None, None).await
    }

    /// [`Actor::emit`]; a durable event with a `title` also gives the session that title, in
    /// the same commit, when it has none yet.
    async fn emit_titled(
        &mut self,
        kind: EventKind,
        durable: bool,
        title: Option<String>,
    ) -> Result<u64, EmitError> {
        self.emit_from(kind, durable, title, None).await
    }

    /// [`Actor::emit_titled`] of an event that a subagent (`parent`) may have produced.
    async fn emit_from(
        &mut self,
        kind: EventKind,
        durable: bool,
        title: Option<String>,
        parent: Option<Arc<str>>,
    ) -> Result<u64, EmitError> {
        let durable = durable && kind.is_durable();
        let kind = self.scrubbed(kind);
        let seq = if durable { self.last_seq + 1 } else { self.last_seq };
        let event = SessionEvent {
            session_id: self.row.id.clone(),
            seq,
            ts: now_rfc3339(),
            kind,
            parent: parent.map(|p| p.to_string()),
        };
        if durable {
            if self.lost.is_cancelled() {
                return Err(self.store_failed(StoreError::Fenced(self.row.id.0.clone())));
            }
            match title {
                Some(title) => {
                    self.row.title = self
                        .store
                        .append_event_titled(event.clone(), title)
                        .await
                        .map_err(|e| self.store_failed(e))?;
                }
                None => {
                    if let Err(e) = self.store.append_event(event.clone()).await {
                        return Err(self.store_failed(e));
                    }
                }
            }
        }
        self.published(event, durable);
        Ok(seq)
    }

    /// Durable events committed in one transaction at consecutive seqs, then published in
    /// order; all or none.
    async fn emit_all(
        &mut self,
        kinds: Vec<EventKind>,
        parent: Option<Arc<str>>,
    ) -> Result<Vec<u64>, EmitError> {
        let ts = now_rfc3339();
        let mut events = Vec::with_capacity(kinds.len());
        for kind in kinds {
            if !kind.is_durable() {
                return Err(EmitError::Store(format!(
                    "a {} event is not durable and cannot be committed",
                    kind.type_name()
                )));
            }
            events.push(SessionEvent {
                session_id: self.row.id.clone(),
                seq: self.last_seq + 1 + events.len() as u64,
                ts: ts.clone(),
                kind: self.scrubbed(kind),
                parent: parent.as_ref().map(|p| p.to_string()),
            });
        }
        if self.lost.is_cancelled() {
            return Err(self.store_failed(StoreError::Fenced(self.row.id.0.clone())));
        }
        if let Err(e) = self.store.append_events(events.clone()).await {
            return Err(self.store_failed(e));
        }
        let seqs = events.iter().map(|e| e.seq).collect();
        for event in events {
            self.published(event, true);
        }
        Ok(seqs)
    }

    /// After a durable `event` was committed (or for a transient one): the actor's view of the
    /// session follows, and every attached client gets it.
    fn published(&mut self, event: SessionEvent, durable: bool) {
        if durable {
            self.last_seq = event.seq;
            self.row.last_seq = event.seq;
            self.row.updated_at = event.ts.clone();
            self.metrics.event(&event.kind, event.parent.is_some());
        }
        if let (true, EventKind::Todos { todos }) = (durable, &event.kind) {
            self.row.todos = Some(outboard_store::todo_progress(todos));
        }
        if event.parent.is_none() {
            // A subagent's streamed text is its own; clients see it live and then as events.
            self.track_in_flight(&event.kind);
        } else if let EventKind::ToolOutputDelta { .. } | EventKind::ToolResult { .. } = &event.kind
        {
            self.track_in_flight(&event.kind);
        }
        // No receivers is fine: nobody is attached.
        let _ = self.events.send(Arc::new(event));
    }

    /// Keeps the not-yet-durable output of the turn so a client attaching mid-stream can draw it.
    fn track_in_flight(&mut self, kind: &EventKind) {
        track_in_flight(&mut self.in_flight, kind);
    }

    /// One page, read with a LIMIT on the log's primary key: a long log costs no more to attach
    /// to than a short one, and the actor is busy for one page's read only.
    async fn attach(&mut self, after_seq: Option<u64>) -> Result<Attached, ErrorBody> {
        let page = HISTORY_PAGE_EVENTS as u32;
        let events = match after_seq {
            Some(after) => self.store.events_after_limited(&self.row.id, after, page).await,
            None => self.store.events_before(&self.row.id, u64::MAX, page).await,
        }
        .map_err(internal)?;
        let standing = match after_seq {
            Some(_) => Vec::new(),
            None => {
                let marks = self
                    .store
                    .standing_events(
                        &self.row.id,
                        &["mode_changed", "todos"],
                        &["background_task"],
                        outboard_harness::approvals::KINDS,
                    )
                    .await
                    .map_err(internal)?;
                let mut standing: Vec<SessionEvent> =
                    outboard_harness::approvals::open_requests(&marks)
                        .into_iter()
                        .cloned()
                        .collect();
                standing.extend(self::standing(marks));
                standing.sort_by_key(|e| e.seq);
                standing
            }
        };
        Ok(Attached {
            session: self.row.clone(),
            events,
            in_flight: self.running.as_ref().map(|_| self.in_flight.clone()),
            standing,
            live: self.events.subscribe(),
        })
    }

    async fn start_turn(
        &mut self,
        prompt: Prompt,
        by: String,
    ) -> Result<TurnSendResponse, ErrorBody> {
        if let Some(reason) = &self.row.failure {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                format!("this session failed: {reason}"),
            ));
        }
        if self.shutdown.is_cancelled() {
            return Err(ErrorBody::new(
                ErrorCode::ShuttingDown,
                "the server is restarting; send the message again in a moment",
            ));
        }
        if let Some(r) = &self.running {
            let what = if r.compaction.is_some() {
                "the conversation is being compacted: send the message again when it is done"
            } else {
                "a turn is already running in this session: wait for it to end or interrupt it"
            };
            return Err(ErrorBody::new(ErrorCode::Conflict, what));
        }
        if prompt.text.trim().is_empty() && prompt.attachments.is_empty() {
            return Err(ErrorBody::new(ErrorCode::BadRequest, "the message is empty"));
        }
        self.check_images(&prompt)?;
        let Prompt { text, attachments } = prompt;
        self.conversation_loaded().await?;
        let turn_id = TurnId(new_id("t"));
        self.turn_by = by.clone();
        // Before the first event of the turn: its events are scrubbed with the org's secrets.
        self.prepare_network().await;
        let title =
            if self.row.title.is_empty() { Some(self.derived_title(&text).await) } else { None };
        let titled = title.is_some();
        self.checkpoint().await.map_err(|e| {
            ErrorBody::new(ErrorCode::Internal, format!("cannot record the checkpoint: {e}"))
        })?;
        let started = async {
            self.emit(EventKind::TurnStarted { turn_id: turn_id.clone(), by }, true).await?;
            let message =
                EventKind::UserMessage { text: text.clone(), attachments: attachments.clone() };
            self.emit_titled(message, true, title).await
        };
        let seq = started.await.map_err(|e| {
            ErrorBody::new(ErrorCode::Internal, format!("cannot record the message: {e}"))
        })?;
        if titled {
            self.announce_title().await;
        }
        if let Some(conversation) = &mut self.conversation {
            conversation.push_prompt(seq, text, attachments);
        }
        self.spawn_turn(turn_id.clone(), agent::Resume::default())?;
        Ok(TurnSendResponse { turn_id, seq })
    }

    /// Tells the attached clients the title the first message's commit gave the session (the
    /// store's, which kept a title set meanwhile): they show it without asking for the list.
    async fn announce_title(&mut self) {
        if self.row.title.is_empty() {
            return;
        }
        let kind = EventKind::SessionTitled { title: self.row.title.clone() };
        if let Err(e) = self.emit(kind, false).await {
            tracing::debug!(session = %self.row.id, "cannot announce the title: {e}");
        }
    }

    /// The title a session created without one gets from its first message, within the org's
    /// `title_bytes` quota.
    async fn derived_title(&self, message: &str) -> String {
        let max = match outboard_org::quota::Quotas::for_org(&self.store, &self.row.org_id).await {
            Ok(q) => q.title_bytes,
            Err(e) => {
                tracing::warn!(session = %self.row.id, "cannot read the title_bytes quota: {e}");
                outboard_org::quota::Quotas::default().title_bytes
            }
        };
        outboard_store::derived_title(message, usize::try_from(max).unwrap_or(usize::MAX))
    }

    /// Makes the session's network (its policy, the org's injected credentials, the audit
    /// sink) and reads the org's secret values to scrub, once, before the first turn: the
    /// sandbox handle is made synchronously and takes the network from here. Only bubblewrap
    /// sandboxes have a proxy: the unsafe host mode's commands have the host's network anyway.
    async fn prepare_network(&mut self) {
        if self.scrub.is_some() {
            return;
        }
        let values = if self.sandbox_config.backend == outboard_sandbox::Backend::Bwrap {
            let events = Arc::new(ActorRefusals(self.tx.clone()));
            let parts = crate::netsession::build(&self.network_deps, &self.row, events).await;
            let values = parts.scrub.clone();
            self.network = Some(parts);
            values
        } else {
            crate::netsession::scrub_values(&self.network_deps, &self.row.org_id).await
        };
        self.scrub = Some(Scrubbers::new(values));
    }

    /// `kind` with every org secret's value replaced by `[secret NAME]`.
    fn scrubbed(&self, kind: EventKind) -> EventKind {
        match &self.scrub {
            Some(s) => s.event(kind),
            None => kind,
        }
    }

    /// The session's sandbox handle. Its state changes (including a freeze between turns) become
    /// durable `sandbox` events: a forwarder task turns each transition into an event through
    /// the actor, holding only a weak sender so it never keeps the actor alive.
    fn new_sandbox(&mut self) -> Sandbox {
        let (tx, mut rx) = mpsc::channel::<SandboxTransition>(SANDBOX_TRANSITIONS);
        let (jobs_tx, mut jobs_rx) = mpsc::channel::<JobReport>(SANDBOX_JOB_REPORTS);
        let actor = self.tx.clone();
        tokio::spawn(async move {
            while let Some(job) = jobs_rx.recv().await {
                let Some(tx) = actor.upgrade() else { return };
                let kind = EventKind::BackgroundTask {
                    shell_id: job.shell_id,
                    command: job.command,
                    status: job.state.status(),
                    exit_code: job.state.exit_code(),
                };
                if emitter(tx).durable(kind).await.is_err() {
                    return;
                }
            }
        });
        let actor = self.tx.clone();
        tokio::spawn(async move {
            while let Some(t) = rx.recv().await {
                let Some(tx) = actor.upgrade() else { return };
                let kind = EventKind::Sandbox { state: t.state, ms: t.ms, queue: t.queue };
                let emitter = emitter(tx);
                if emitter.durable(kind).await.is_err() {
                    return;
                }
            }
        });
        let mut config = self.sandbox_config.clone();
        config.network = self.network.as_ref().map(|n| n.net.clone());
        // The org's files, read-only at /memory, /skills and /agents (kept current before each
        // command).
        match self.org_fs.projection_dirs(&self.row.org_id) {
            Ok(dirs) => {
                for (dir, prefix) in dirs.mounts() {
                    config.ro_mounts.push((dir.to_path_buf(), prefix.to_owned()));
                }
            }
            Err(e) => tracing::warn!(session = %self.row.id, "no org files in the sandbox: {e}"),
        }
        // The user's own repository, in place: its `.git` read-only inside.
        config.protect_git = self.row.workspace.is_some();
        if let Some(live) = &config.live_pool {
            let (store, org) = (self.store.clone(), self.row.org_id.clone());
            let limit: outboard_sandbox::pool::LimitFn = std::sync::Arc::new(move || {
                let (store, org) = (store.clone(), org.clone());
                Box::pin(async move {
                    match outboard_org::quota::Quotas::for_org(&store, &org).await {
                        Ok(q) => usize::try_from(q.live_sandboxes).unwrap_or(usize::MAX),
                        Err(e) => {
                            tracing::warn!(%org, "cannot read the live_sandboxes quota: {e}");
                            outboard_org::quota::Quotas::default().live_sandboxes as usize
                        }
                    }
                })
            });
            config.pool = Some(live.ticket(self.row.org_id.as_str(), limit));
        }
        // A workspace the server made is held to the org's quota while commands run; a
        // directory of the user's own, worked on in place, is not metered.
        if self.row.workspace.is_none() {
            let watch = std::sync::Arc::new(outboard_org::quota::WorkspaceWatch::new(
                self.store.clone(),
                self.row.org_id.clone(),
                self.workspace_dir.clone(),
            ));
            let check: outboard_sandbox::WorkspaceCheck = std::sync::Arc::new(move |start| {
                let watch = watch.clone();
                Box::pin(async move { watch.check(start).await })
            });
            config.workspace_watch = Some(outboard_sandbox::WorkspaceWatch(check));
        }
        let lost = std::mem::take(&mut self.lost_jobs);
        let sandbox = Sandbox::with_reports(config, self.workspace_dir.clone(), tx, jobs_tx, lost);
        self.sandbox = Some(sandbox.clone());
        sandbox
    }

    /// How many characters of a tool result the model sees in this session.
    fn result_chars(&self) -> usize {
        self.window.result_chars(self.limits.result_chars)
    }

    /// Hands the conversation and tools to a new turn task (a new turn, or one being resumed).
    fn spawn_turn(&mut self, turn_id: TurnId, resume: agent::Resume) -> Result<(), ErrorBody> {
        let (turn, tx, cancel) = self.lend(turn_id.clone(), resume)?;
        let task = tokio::spawn(agent::run_turn(turn));
        // A panic in the turn must not wedge the session: the watcher reports the end either way.
        tokio::spawn(async move {
            let end = task.await.ok().map(Box::new);
            let _ = tx.send(Command::TurnEnded(end)).await;
        });
        self.running = Some(Running { turn_id, cancel, compaction: None });
        Ok(())
    }

    /// Starts a compaction asked for between turns; `reply` is answered when it ends (or at
    /// once, with the refusal, which is also returned).
    fn start_compaction(
        &mut self,
        focus: Option<String>,
        reply: oneshot::Sender<Result<SessionCompactResponse, ErrorBody>>,
    ) -> Result<(), ErrorBody> {
        let refused = if self.running.is_some() {
            Some(ErrorBody::new(
                ErrorCode::Conflict,
                "a turn is running in this session: compact when it has ended (long turns \
                 compact by themselves)",
            ))
        } else if let Some(reason) = &self.row.failure {
            Some(ErrorBody::new(ErrorCode::Conflict, format!("this session failed: {reason}")))
        } else if self.shutdown.is_cancelled() {
            Some(ErrorBody::new(
                ErrorCode::ShuttingDown,
                "the server is restarting; ask again in a moment",
            ))
        } else {
            None
        };
        if let Some(e) = refused {
            let _ = reply.send(Err(e.clone()));
            return Err(e);
        }
        let turn_id = TurnId(new_id("compaction"));
        let (turn, tx, cancel) = match self.lend(turn_id.clone(), agent::Resume::default()) {
            Ok(parts) => parts,
            Err(e) => {
                let _ = reply.send(Err(e.clone()));
                return Err(e);
            }
        };
        let task = tokio::spawn(agent::run_compaction(turn, focus));
        tokio::spawn(async move {
            let end = task.await.ok().map(Box::new);
            let _ = tx.send(Command::CompactEnded(end)).await;
        });
        self.running = Some(Running { turn_id, cancel, compaction: Some(reply) });
        Ok(())
    }

    async fn compaction_ended(
        &mut self,
        end: Option<Box<(TurnEnd, Result<agent::Compacted, agent::CompactError>)>>,
    ) {
        let reply = self.running.as_mut().and_then(|r| r.compaction.take());
        let outcome = match end {
            Some(end) => {
                let (end, result) = *end;
                self.turn_ended(Some(Box::new(end))).await;
                result.map_err(|e| {
                    let code = match e {
                        agent::CompactError::Nothing | agent::CompactError::NoRoom { .. } => {
                            ErrorCode::BadRequest
                        }
                        agent::CompactError::Stopped => ErrorCode::Conflict,
                        _ => ErrorCode::Internal,
                    };
                    ErrorBody::new(code, e.to_string())
                })
            }
            None => {
                self.running = None;
                self.turn_ended(None).await;
                Err(ErrorBody::new(ErrorCode::Internal, "internal error while compacting"))
            }
        };
        if let Some(reply) = reply {
            let _ = reply.send(outcome.map(|c| SessionCompactResponse {
                seq: c.seq,
                tokens_before: c.tokens_before,
                tokens_after: c.tokens_after,
            }));
        }
    }

    /// The conversation, the tool environment (made on first use) and what else a task needs
    /// to work on the session, lent to a turn or a compaction until it hands them back.
    fn lend(
        &mut self,
        turn_id: TurnId,
        resume: agent::Resume,
    ) -> Result<(Turn, mpsc::Sender<Command>, CancellationToken), ErrorBody> {
        let Some(tx) = self.tx.upgrade() else {
            return Err(gone());
        };
        let mut env = match self.env.take() {
            Some(env) => env,
            None => {
                if self.row.workspace.is_some() && !self.workspace_dir.is_dir() {
                    // Never recreate a user's directory that is gone (the server may be root).
                    return Err(ErrorBody::new(
                        ErrorCode::BadRequest,
                        format!(
                            "this session's workspace {} is not a directory any more: restore \
                             it, or start a new session",
                            self.workspace_dir.display()
                        ),
                    ));
                }
                let remote = match (&self.row.host, &self.hosts) {
                    (None, _) => None,
                    (Some(host), Some(hosts)) => {
                        let hosted = outboard_remote::workspace::RemoteWorkspace::new(
                            hosts.clone(),
                            host.clone(),
                            self.row.id.as_str().to_owned(),
                        );
                        Some(Arc::new(hosted) as Arc<dyn outboard_tools::HostedWorkspace>)
                    }
                    (Some(host), None) => {
                        return Err(ErrorBody::new(
                            ErrorCode::Internal,
                            format!(
                                "this session lives on sandbox host {host}, and this server has \
                                 no secret key to join hosts with; start it with its data \
                                 directory's secret.key"
                            ),
                        ))
                    }
                };
                let mut workspace = Workspace::new(self.workspace_dir.clone()).map_err(|e| {
                    ErrorBody::new(ErrorCode::Internal, format!("cannot create the workspace: {e}"))
                })?;
                if self.row.workspace.is_some() {
                    workspace = workspace.unmetered();
                }
                let touched = std::mem::take(&mut self.files_touched);
                let (org_touched, workspace_touched) = touched.into_iter().partition(|f| {
                    matches!(outboard_vfs::route(f), Ok(outboard_vfs::Route::Org(_)))
                });
                let org = OrgCtx {
                    fs: self.org_fs.clone(),
                    org_id: self.row.org_id.clone(),
                    author: Author { user: String::new(), session: Some(self.row.id.clone()) },
                    mcp: self.mcp.clone().map(|m| Arc::new(m) as Arc<dyn ExternalTools>),
                    secrets: self.network_deps.secrets.clone(),
                };
                ToolEnv {
                    workspace,
                    sandbox: self.new_sandbox(),
                    reads: ReadLedger::default(),
                    org: Some(org),
                    org_touched,
                    org_shown: std::mem::take(&mut self.org_shown),
                    workspace_touched,
                    scrub: self.scrub.as_ref().map_or_else(
                        || Arc::new(outboard_base::scrub::Scrubber::new(Vec::new())),
                        |s| s.text.clone(),
                    ),
                    metrics: Some(self.metrics.clone() as Arc<dyn outboard_harness::ToolMetrics>),
                    remote,
                }
            }
        };
        if let Some(org) = &mut env.org {
            org.author.user = self.turn_by.clone();
        }
        self.row.status = SessionStatus::Running;
        let cancel = CancellationToken::new();
        let turn = Turn {
            session_id: self.row.id.clone(),
            turn_id,
            provider: self.turn_provider(),
            conversation: self
                .conversation
                .take()
                .unwrap_or_else(|| agent::Conversation::new(self.result_chars())),
            window: self.window,
            env,
            emitter: emitter(tx.clone()),
            cancel: cancel.clone(),
            shutdown: self.shutdown.clone(),
            limits: self.limits.turn(),
            resume,
            role: agent::Role::Main,
            approvals: outboard_harness::approvals::Approvals {
                rules: Arc::default(),
                gate: self.gate.clone(),
                source: Some((self.store.clone(), self.row.org_id.clone())),
            },
            offered: Vec::new(),
            hooks: Default::default(),
        };
        Ok((turn, tx, cancel))
    }

    async fn turn_ended(&mut self, end: Option<Box<TurnEnd>>) {
        let running = self.running.take();
        match end {
            Some(end) => {
                let end = *end;
                self.conversation = Some(end.conversation);
                self.env = Some(end.env);
                self.window = end.window;
                // Committed as it goes idle (a client answering at once finds no turn running).
                if let Some(last) = end.last {
                    let committed = self.emit(last.clone(), true).await;
                    let r = agent::interrupted::noted(self.conversation.as_mut(), committed, &last);
                    if let Err(e) = r {
                        tracing::error!(session = %self.row.id, "cannot record the end of the turn: {e}");
                    }
                }
            }
            None => {
                // The turn task panicked (its conversation and tools are lost): record it, rebuild.
                tracing::error!(session = %self.row.id, "the turn task panicked");
                if let Some(r) = running.filter(|r| r.compaction.is_none()) {
                    let _ = self.emit(window::panicked(r.turn_id), true).await;
                }
                match self.read_loaded(None).await {
                    Ok(loaded) => self.conversation = Some(loaded.conversation),
                    Err(e) => tracing::error!(session = %self.row.id, "cannot reload: {e}"),
                }
            }
        }
        self.row.status = SessionStatus::Idle;
        for waiter in self.idle_waiters.drain(..) {
            let _ = waiter.send(());
        }
    }
}

/// Of a log's `mode_changed`, `todos` and `background_task` events, those whose state still
/// holds: the last `mode_changed`, the last `todos`, and the last event of each background command whose last event says it runs.
fn standing(marks: Vec<SessionEvent>) -> Vec<SessionEvent> {
    let mut todos = None;
    let mut mode = None;
    let mut tasks: Vec<SessionEvent> = Vec::new();
    for event in marks {
        match &event.kind {
            EventKind::Todos { .. } => todos = Some(event),
            EventKind::ModeChanged { .. } => mode = Some(event),
            EventKind::BackgroundTask { shell_id, status, .. } => {
                let running = *status == outboard_shared::TaskStatus::Running;
                let id = shell_id.clone();
                tasks.retain(|t| {
                    !matches!(&t.kind, EventKind::BackgroundTask { shell_id, .. } if *shell_id == id)
                });
                if running {
                    tasks.push(event);
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<SessionEvent> = mode.into_iter().chain(todos).chain(tasks).collect();
    out.sort_by_key(|e| e.seq);
    out
}

fn internal(e: StoreError) -> ErrorBody {
    ErrorBody::new(ErrorCode::Internal, e.to_string())
}

/// Assistant text a snapshot carries of the answer streaming now; a late joiner sees the rest
/// when the complete `assistant_message` lands. Half a MiB keeps a snapshot well inside the
/// client's 4 MiB frame limit even with JSON escaping.
pub const IN_FLIGHT_TEXT_BYTES: usize = 512 * 1024;

/// Output a snapshot carries of one running tool call: `Bash` streams at most 30,000 bytes to
/// watchers, so this only bites a tool that does not cap itself.
pub const IN_FLIGHT_TOOL_BYTES: usize = 64 * 1024;

/// Running tool calls a snapshot carries output of (a turn runs one at a time today; parallel
/// subagents will run a few).
pub const IN_FLIGHT_TOOL_CALLS: usize = 8;

/// Appended once where a snapshot's partial text was cut.
pub const IN_FLIGHT_CUT: &str =
    "\n[… cut here in the snapshot; the complete text follows when it is recorded]";

/// Folds one event into the turn's in-flight view, within its bounds.
fn track_in_flight(f: &mut InFlight, kind: &EventKind) {
    match kind {
        EventKind::AssistantDelta { text } => {
            push_capped(&mut f.assistant_text, text, IN_FLIGHT_TEXT_BYTES)
        }
        EventKind::ModelRetry { .. } | EventKind::AssistantMessage { .. } => {
            f.assistant_text.clear()
        }
        EventKind::ToolOutputDelta { call_id, text, .. } => {
            let running = f.tool_output.len();
            match f.tool_output.iter_mut().find(|o| &o.call_id == call_id) {
                Some(o) => push_capped(&mut o.text, text, IN_FLIGHT_TOOL_BYTES),
                None if running < IN_FLIGHT_TOOL_CALLS => {
                    let mut so_far =
                        ToolOutputSoFar { call_id: call_id.clone(), text: String::new() };
                    push_capped(&mut so_far.text, text, IN_FLIGHT_TOOL_BYTES);
                    f.tool_output.push(so_far);
                }
                None => {}
            }
        }
        EventKind::ToolResult { call_id, .. } => f.tool_output.retain(|o| &o.call_id != call_id),
        EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => *f = InFlight::default(),
        _ => {}
    }
}

/// Appends `more` to `buf` up to `cap` bytes (on a character boundary), then [`IN_FLIGHT_CUT`]
/// once; a buffer already cut takes nothing more.
fn push_capped(buf: &mut String, more: &str, cap: usize) {
    if buf.len() >= cap {
        return;
    }
    if buf.len() + more.len() <= cap {
        buf.push_str(more);
        return;
    }
    let mut end = cap - buf.len();
    while !more.is_char_boundary(end) {
        end -= 1;
    }
    buf.push_str(&more[..end]);
    // The marker is longer than a character, so the buffer is past the cap from here on.
    buf.push_str(IN_FLIGHT_CUT);
}

#[cfg(test)]
mod in_flight_tests;
