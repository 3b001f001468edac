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
//!
//! Children: `actor` (the command loop, lease, eviction, model and mode), `command` (the
//! commands and the harness's and network policy's seams), `publish` (append, scrub, broadcast,
//! attach snapshots), `turn` (a turn's start, the conversation lent out, its end), `sandbox`,
//! `compaction`, `in_flight` (what a late attacher gets), `rewind`, `load`, `prompt`, `window`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use outboard_shared::{
    ErrorBody, ErrorCode, EventKind, InFlight, SessionCompactResponse, SessionEvent, SessionId,
    SessionInfo, TurnId, TurnSendResponse,
};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::config::ServerConfig;
use outboard_harness::{self as agent, ToolEnv};
use outboard_llm::models::Models;
use outboard_org::orgfs::OrgFs;
use outboard_sandbox::Sandbox;
use outboard_store::{SessionRow, Store, StoreError};

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

mod actor;
mod command;
mod compaction;
mod in_flight;
mod load;
mod prompt;
mod publish;
mod rewind;
mod sandbox;
mod turn;
pub(crate) mod window;

pub use prompt::Prompt;

use command::Command;
pub use in_flight::{
    IN_FLIGHT_CUT, IN_FLIGHT_TEXT_BYTES, IN_FLIGHT_TOOL_BYTES, IN_FLIGHT_TOOL_CALLS,
};
use publish::Scrubbers;

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

impl Actor {}

fn internal(e: StoreError) -> ErrorBody {
    ErrorBody::new(ErrorCode::Internal, e.to_string())
}

#[cfg(test)]
mod in_flight_tests;
