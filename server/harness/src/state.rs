//! A turn's state: what it runs with ([`ToolEnv`], [`Turn`], [`Role`]), where a resumed turn
//! picks up ([`Resume`], rebuilt from the log by [`recover_plan`]), and how it ends.

use futures_util::future::BoxFuture;
use outboard_llm::Provider;
use outboard_sandbox::Sandbox;
use outboard_shared::{
    EventKind, FailureClass, SessionEvent, SessionId, StopReason, ToolCall, TurnId, Usage,
};
use outboard_tools::{self as tools, OrgCtx, ReadLedger, ToolOutcome};
use outboard_vfs::Workspace;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::approvals::Approvals;
use crate::approvals::Recorded;
use crate::compact::Window;
use crate::conversation::Conversation;
use crate::sink::{EmitError, Emitter};
use outboard_llm::ToolSpec;
use outboard_tools::recovery::{rebuilt_ledger, LEDGER_REBUILD_FILES};

/// The tool's name.
pub const TASK: &str = "Task";

/// Step budget and timeouts of a turn: the harness's own configuration, filled in by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnLimits {
    /// Model calls per turn before the turn stops with `step_limit`.
    pub max_steps: u32,
    /// Model calls of one subagent (`Task`): its own budget, not taken from its parent turn's.
    pub task_max_steps: u32,
    /// Default timeout of a Bash command when the model gives none.
    pub bash_timeout: std::time::Duration,
    /// Whether the exported spans carry a turn's prompt and its tool calls' input (`serve
    /// --otlp-content`); by default they carry figures and names only.
    pub span_content: bool,
}

/// Where each tool call is counted and timed; the server's metrics implement it.
pub trait ToolMetrics: Send + Sync + std::fmt::Debug {
    /// One call of `tool` ended (`is_error`), `took` long.
    fn tool_call(&self, tool: &str, is_error: bool, took: std::time::Duration);
}

/// The loop a subagent runs: the session's own, handed down by the turn module as a callback so
/// that the subagent module does not import the loop that calls it.
pub type Drive =
    for<'a> fn(&'a mut Turn, &'a mut Usage) -> BoxFuture<'a, Result<Ending, EmitError>>;

/// What a session's tools act on; owned by the running turn, or by the actor between turns.
#[derive(Debug)]
pub struct ToolEnv {
    /// `/workspace`.
    pub workspace: Workspace,
    /// Where `Bash` runs.
    pub sandbox: Sandbox,
    /// Which files the session has read (Claude Code's read-before-write rule).
    pub reads: ReadLedger,
    /// The org's shared files and who the tools act as; `None` outside a real session.
    pub org: Option<OrgCtx>,
    /// Org files the log shows this session read or wrote, whose versions are looked up when
    /// the next turn starts (after a restart; see [`files_touched`]).
    pub org_touched: Vec<String>,
    /// The org files the session's prompts have quoted, at the version last quoted (see
    /// `EventKind::OrgContext`): rebuilt from the log's `org_context` events on a load.
    pub org_shown: std::collections::BTreeMap<String, u64>,
    /// Workspace files the log shows this session read or wrote, read into the ledger (on the
    /// blocking pool, each read capped) when the next turn starts (after a restart).
    pub workspace_touched: Vec<String>,
    /// The org's secret values and their `[secret NAME]`: replaced in every tool result and
    /// output chunk before it is logged, sent to a client or to the model. Empty: nothing to do.
    pub scrub: Arc<outboard_base::scrub::Scrubber>,
    /// Where each tool call is counted and timed (`outboard_tool_call_duration_seconds`); `None`
    /// when nobody scrapes (tests that build an environment by hand).
    pub metrics: Option<Arc<dyn ToolMetrics>>,
    /// Where `/workspace` and `Bash` really are when the session lives on a sandbox host
    /// (`serve --sandbox remote`); `None`: `workspace` and `sandbox` here.
    pub remote: Option<Arc<dyn tools::HostedWorkspace>>,
}

/// Everything a turn needs.
pub struct Turn {
    /// The session.
    pub session_id: SessionId,
    /// This turn.
    pub turn_id: TurnId,
    /// The model.
    pub provider: Arc<Provider>,
    /// The conversation so far, ending with this turn's user message.
    pub conversation: Conversation,
    /// The session's context window and when to compact.
    pub window: Window,
    /// The tool environment.
    pub env: ToolEnv,
    /// Where events go.
    pub emitter: Emitter,
    /// Cancelled by `turn/interrupt`.
    pub cancel: CancellationToken,
    /// Cancelled when the server shuts down: the turn stops at its next checkpoint and stays open
    /// in the log, to be resumed when the server starts again.
    pub shutdown: CancellationToken,
    /// Step budget and timeouts.
    pub limits: TurnLimits,
    /// When resuming after a restart: the tool calls of the last assistant message that have no
    /// result yet, and the model calls this turn already made.
    pub resume: Resume,
    /// The session's own loop, or a subagent's.
    pub role: Role,
    /// The org's tool policy and the session's approvals in flight.
    pub approvals: Approvals,
    /// The names of the tools this loop's model is offered, set when the loop starts (empty
    /// before): an exported span names a called tool only when it is one of them (`spans`).
    pub offered: Vec<String>,
    /// The hooks this turn runs (read when the session's loop starts; a subagent's are its
    /// parent's).
    pub hooks: crate::hooks::set::Hooks,
}

/// Which loop a [`Turn`] drives.
pub enum Role {
    /// The session's own loop: every tool, `Task` included.
    Main,
    /// A subagent's loop, run by a `Task` call (see [`child`]).
    Child(ChildRole),
}

/// Where a resumed turn picks up.
#[derive(Debug, Default)]
pub struct Resume {
    /// Tool calls without a result, in order.
    pub pending: Vec<PendingCall>,
    /// Model calls already made in this turn (they count against the step limit).
    pub steps_used: u32,
    /// The tokens of those calls, from their `assistant_message`s, so `turn_completed` sums the
    /// whole turn across a restart.
    pub usage: Usage,
}

/// A tool call found without a result in the log.
#[derive(Debug, Clone)]
pub struct PendingCall {
    /// The call.
    pub call: ToolCall,
    /// Whether its `tool_call` event was written, i.e. it may have started running; with the
    /// target file's digest at that moment for writes.
    pub started: Option<Option<String>>,
    /// For a started `Task` call: its subagent's events so far, from which the subagent
    /// resumes.
    pub child_log: Vec<SessionEvent>,
    /// For a call not started: what the log holds of a person's approval of it.
    pub approval: Option<Recorded>,
}

/// What a turn hands back to its session.
pub struct TurnEnd {
    /// The conversation including everything this turn added.
    pub conversation: Conversation,
    /// The window, smaller than the turn started with if the provider taught it so (kept by
    /// the session for its next turns, not across a restart).
    pub window: Window,
    /// The tool environment.
    pub env: ToolEnv,
    /// The turn's terminal event (`turn_completed` or `turn_failed`), which the session
    /// commits when it takes the rest back; `None` for a turn suspended for a shutdown (its
    /// end is recorded by the node that resumes it) and for a compaction.
    pub last: Option<EventKind>,
}

/// How a turn ended, before it is written to the log.
pub enum Ending {
    Completed(StopReason),
    /// The turn failed: one line for a person, and its class (a provider's errors are
    /// classified, see `outboard_llm::explain`).
    Failed(String, FailureClass),
    /// Stopped at a checkpoint for a server shutdown: nothing is written, the turn stays open.
    Suspended,
}

pub(crate) fn not_run() -> ToolOutcome {
    ToolOutcome {
        output: "Not run: the user interrupted the turn.".into(),
        is_error: true,
        attachments: Vec::new(),
    }
}

/// What the model is told of a `Write`/`Edit` cut by a restart whose target has changed since.
pub const WRITE_MAYBE_DONE: &str = "The harness restarted while this write ran. The file no \
    longer holds its previous content, so the write most likely completed; Read the file to \
    confirm before relying on it.";

/// What the model is told of a command whose result never reached the log: it is never run
/// twice. The node that resumes the turn cannot tell which of the two happened (a node cut off
/// from the store stops renewing its leases and its heartbeat alike), so both are named.
pub const COMMAND_OUTCOME_UNKNOWN: &str = "This command's result was never recorded: the server \
    running this session restarted, or lost its lease on the session (its store was unreachable \
    for longer than the lease) and another server node took the turn over, while the command \
    ran. Its outcome is unknown. Check its effects (files, processes) before running it again.";

/// What the model is told of an MCP call whose result never reached the log: like a command,
/// never run twice.
pub const MCP_OUTCOME_UNKNOWN: &str = "This MCP tool call's result was never recorded: the \
    server running this session restarted, or lost its lease on the session (its store was \
    unreachable for longer than the lease) and another server node took the turn over, while \
    the call ran. Its outcome is unknown. Check its effects with the server's read-only tools \
    before calling it again.";

/// Calls of one assistant message running at once, at most: Claude Code's default, enough to
/// overlap the model latency of several subagents, few enough that one message cannot start
/// hundreds of model streams.
pub const MAX_PARALLEL_CALLS: usize = 10;

/// What to do with a log that ends inside a turn: the open turn and where it resumes — the tool
/// calls of its last assistant message that have no result (with whether each had started), and
/// the model calls it already made. `None` when the last turn ended.
///
/// Whatever the last durable item is, the resumed turn does the right next thing: after a user
/// message or the last tool result it calls the model again; after an assistant message it
/// settles the calls without a result first (see `recover_call`).
pub fn recover_plan(log: &[outboard_shared::SessionEvent]) -> Option<(TurnId, Resume)> {
    let mut open: Option<TurnId> = None;
    let mut resume = Resume::default();
    for event in log {
        if let Some(parent) = &event.parent {
            // A subagent's event: kept for its `Task` call if that call may resume; the
            // subagent's own steps and calls are its business (see `child::plan`).
            if let Some(p) = resume.pending.iter_mut().find(|p| &p.call.call_id == parent) {
                p.child_log.push(event.clone());
            }
            continue;
        }
        match &event.kind {
            EventKind::TurnStarted { turn_id, .. } => {
                open = Some(turn_id.clone());
                resume = Resume::default();
            }
            EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => {
                open = None;
                resume.pending.clear();
            }
            kind => resume.track(kind),
        }
    }
    open.map(|turn_id| (turn_id, resume))
}

impl Resume {
    /// Takes one event of a loop's open work into account: a model call (a step, its tokens,
    /// its tool calls now pending), a call's start or result, a summary's tokens (part of the
    /// work's cost). The main loop's plan and a subagent's share it.
    pub(crate) fn track(&mut self, kind: &EventKind) {
        match kind {
            EventKind::AssistantMessage { tool_calls, usage, .. } => {
                self.steps_used += 1;
                self.usage.add(usage.unwrap_or_default());
                self.pending = tool_calls
                    .iter()
                    .map(|c| PendingCall {
                        call: c.clone(),
                        started: None,
                        child_log: Vec::new(),
                        approval: None,
                    })
                    .collect();
            }
            EventKind::ApprovalRequested { call_id, rule, covers, path, .. } => {
                if let Some(p) = self.pending.iter_mut().find(|p| &p.call.call_id == call_id) {
                    // A request written before `covers` existed: its rule.
                    let covers = covers.clone().unwrap_or_else(|| vec![rule.clone()]);
                    p.approval = Some(Recorded::Open { covers, path: path.clone() });
                }
            }
            EventKind::ApprovalResolved {
                call_id, decision, scope, by, reason, answers, ..
            } => {
                if let Some(p) = self.pending.iter_mut().find(|p| &p.call.call_id == call_id) {
                    let path = match p.approval.take() {
                        Some(Recorded::Open { path, .. }) => path,
                        _ => None,
                    };
                    let answer = crate::approvals::Answer {
                        decision: *decision,
                        scope: *scope,
                        by: by.clone(),
                        reason: reason.clone(),
                        answers: answers.clone(),
                    };
                    p.approval = Some(Recorded::Answered(answer, path));
                }
            }
            EventKind::ToolCall { call, target_before } => {
                if let Some(p) = self.pending.iter_mut().find(|p| p.call.call_id == call.call_id) {
                    p.started = Some(target_before.clone());
                }
            }
            EventKind::ToolResult { call_id, .. } => {
                self.pending.retain(|p| &p.call.call_id != call_id)
            }
            EventKind::Compaction { usage: Some(u), .. } => self.usage.add(*u),
            _ => {}
        }
    }
}

/// The workspace files this session read or wrote successfully, from its log: after a restart
/// the read ledger (in memory) is rebuilt from them with their current content, so a resumed turn
/// can go on editing the files it was working on. A change made by someone else while the server
/// was down is therefore not detected — the price of not storing every file's digest per read.
pub fn files_touched(log: &[outboard_shared::SessionEvent]) -> Vec<String> {
    files_touched_in(log.iter().filter(|e| e.parent.is_none()))
}

/// What the session's prompts have quoted of the org ([`ToolEnv::org_shown`]), from its
/// `org_context` events.
pub fn org_shown(log: &[SessionEvent]) -> std::collections::BTreeMap<String, u64> {
    let mut shown = std::collections::BTreeMap::new();
    for event in log.iter().filter(|e| e.parent.is_none()) {
        if let EventKind::OrgContext { files } = &event.kind {
            for f in files {
                shown.insert(f.path.clone(), f.version);
            }
        }
    }
    shown
}

/// [`files_touched`] of the given events (one loop's: the session's or a subagent's).
pub fn files_touched_in<'a>(log: impl Iterator<Item = &'a SessionEvent>) -> Vec<String> {
    let mut touched = FilesTouched::default();
    for event in log {
        touched.add(event);
    }
    touched.into_files()
}

/// The workspace or org file a call of a file-writing tool writes (`Write`, `Edit`:
/// `file_path`; `NotebookEdit`: `notebook_path`); `None` for the other tools.
pub fn written_path<'a>(tool: &str, input: &'a serde_json::Value) -> Option<&'a str> {
    let key = match tool {
        "Write" | "Edit" => "file_path",
        "NotebookEdit" => "notebook_path",
        _ => return None,
    };
    input.get(key)?.as_str()
}

/// [`files_touched`] taken one event at a time, owning what it keeps, so that a long log can be
/// read in pages: the path of each `Read`/`Write`/`Edit`/`NotebookEdit` call whose result has
/// not come yet,
/// and the files touched so far, once each, in the order each was first touched.
#[derive(Debug, Default)]
pub struct FilesTouched {
    /// The `file_path` of each file tool's call, by call id, until its result.
    calls: std::collections::HashMap<String, String>,
    seen: std::collections::HashSet<String>,
    files: Vec<String>,
}

impl FilesTouched {
    /// Takes one event into account (a subagent's too: filtering is the caller's).
    pub fn add(&mut self, event: &SessionEvent) {
        match &event.kind {
            EventKind::AssistantMessage { tool_calls, .. } => {
                for c in tool_calls {
                    let path = match c.name.as_str() {
                        "Read" => c.input.get("file_path").and_then(|p| p.as_str()),
                        name => written_path(name, &c.input),
                    };
                    if let Some(path) = path {
                        self.calls.insert(c.call_id.clone(), path.to_owned());
                    }
                }
            }
            EventKind::ToolResult { call_id, name, is_error, .. }
                if matches!(name.as_str(), "Read" | "Write" | "Edit" | "NotebookEdit") =>
            {
                // Its call is settled either way; a failed one touched nothing.
                if let Some(path) = self.calls.remove(call_id.as_str()) {
                    if !is_error && !self.seen.contains(&path) {
                        self.seen.insert(path.clone());
                        self.files.push(path);
                    }
                }
            }
            _ => {}
        }
    }

    /// The files touched, in first-touch order.
    pub fn into_files(self) -> Vec<String> {
        self.files
    }
}

/// Records the current versions of the org files the log showed this session touched (after a
/// restart) in its ledger.
pub(crate) async fn rebuild_org_reads(env: &mut ToolEnv) {
    let touched = std::mem::take(&mut env.org_touched);
    let Some(org) = env.org.as_ref().filter(|_| !touched.is_empty()) else { return };
    if let Ok(heads) = org.fs.heads(&org.org_id, touched).await {
        for head in heads.into_iter().filter(|h| !h.deleted) {
            env.reads.record_org(&head.path, head.version);
        }
    }
}

/// Reads the files the log showed this session touched into its ledger, on the blocking pool:
/// many files, each up to the Read limit, must not hold an async worker.
pub(crate) async fn rebuild_reads(env: &mut ToolEnv) {
    let files = std::mem::take(&mut env.workspace_touched);
    if files.is_empty() {
        return;
    }
    if let Some(remote) = &env.remote {
        let recent = files[files.len().saturating_sub(LEDGER_REBUILD_FILES)..].to_vec();
        match remote.stamps(recent).await {
            Ok(rebuilt) => env.reads.merge(rebuilt),
            Err(e) => tracing::warn!("the read ledger could not be rebuilt on the host: {e}"),
        }
        return;
    }
    let workspace = env.workspace.clone();
    match tokio::task::spawn_blocking(move || rebuilt_ledger(&workspace, &files)).await {
        Ok(rebuilt) => env.reads.merge(rebuilt),
        Err(e) => tracing::warn!("the read ledger could not be rebuilt: {e}"),
    }
}

/// What a subagent's loop knows beyond a [`Turn`]'s.
pub struct ChildRole {
    /// Its system prompt.
    pub(crate) system: String,
    /// Its agent type's name.
    pub(crate) agent: String,
    /// The tools it may call.
    pub(crate) tools: Vec<&'static str>,
    /// Whether it has the org's MCP tools too: an agent type without a `tools` list has every
    /// tool, MCP ones included; a list names only built-in tools.
    pub(crate) mcp: bool,
}

impl ChildRole {
    /// The tools offered to its model.
    pub(crate) fn specs(&self) -> Vec<ToolSpec> {
        outboard_tools::specs()
            .into_iter()
            .filter(|s| self.tools.contains(&s.name.as_str()))
            .collect()
    }

    /// The answer to a call of a tool this agent does not have; `None` when it has it.
    pub(crate) fn refusal(&self, tool: &str) -> Option<ToolOutcome> {
        if self.tools.contains(&tool) || (self.mcp && outboard_mcp::is_mcp_name(tool)) {
            return None;
        }
        let why = match tool {
            TASK => " (a subagent cannot start subagents)",
            "TodoWrite" => " (the todo list is the main agent's)",
            _ => "",
        };
        Some(ToolOutcome::error(format!(
            "The tool \"{tool}\" is not available to the \"{}\" agent{why}. Its tools are: {}. \
             Do the task with these, and say in your final report what needed another tool.",
            self.agent,
            self.tools.join(", ")
        )))
    }
}
