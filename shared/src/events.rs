//! Session events: [`SessionEvent`] and its [`EventKind`]s, the log every attached client and
//! `outboard run --json` sees, with the types the events carry (tool calls, usage, reasoning,
//! presence and [`Role`]s, todos, background tasks, approval answers, compaction triggers,
//! sandbox states).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::files::FileOp;
#[cfg(doc)]
use crate::handshake::Welcome;
use crate::ids::{SessionId, TurnId};
use crate::media::Attachment;
use crate::websearch::ProviderSearch;
// Only named in a doc; `responses` builds on this module, so the link goes through the crate root.
#[cfg(doc)]
use crate::SessionAttachResponse;

/// One event of a session. Durable kinds (see [`EventKind::is_durable`]) are the session's log,
/// each with a new `seq` one greater than the last. Transient kinds carry the `seq` of the last
/// durable event before them: a client that resumes with `after_seq` misses no durable event and
/// gets the transient state again through [`SessionAttachResponse::in_flight`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionEvent {
    /// The session.
    pub session_id: SessionId,
    /// Position in the session's log (see above for transient events).
    pub seq: u64,
    /// Server time of the event, RFC 3339 UTC with milliseconds.
    pub ts: String,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
    /// The `call_id` of the `Task` call whose subagent produced this event; absent for the
    /// session's own events. A subagent's events are the same kinds as the session's (its
    /// prompt as `user_message`, its `assistant_message`s, tool calls and results), interleaved
    /// in the one log; the `Task` call's `tool_result` is the subagent's final report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// What happened in a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// A turn began (durable).
    TurnStarted {
        /// The turn.
        turn_id: TurnId,
        /// Who sent the message that started it.
        by: String,
    },
    /// The user's message (durable).
    UserMessage {
        /// The message.
        text: String,
        /// Images sent with it, as the model is shown them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
    },
    /// A chunk of assistant text as it streams (transient).
    AssistantDelta {
        /// The chunk.
        text: String,
    },
    /// A complete assistant message with the tool calls it makes (durable).
    AssistantMessage {
        /// The message's text (may be empty when it only calls tools).
        text: String,
        /// The tool calls, in order.
        #[serde(default)]
        tool_calls: Vec<ToolCall>,
        /// The tokens of the model call that produced it (absent in logs written before usage
        /// was recorded, and for a call whose provider reported none).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// The model's reasoning before this message, kept so it can be sent back to the provider
        /// that made it as that provider requires (Anthropic thinking blocks with their signatures
        /// across tool steps; OpenAI Responses reasoning items). Absent when the model reasoned
        /// not at all or not visibly.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<Reasoning>,
        /// The model that answered, as `provider/model` (absent in logs written before models
        /// were recorded per step).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// The web searches the provider ran on its own servers while it answered (its
        /// `web_search` tool), with their sources and the provider's blocks to send back.
        /// Absent when it ran none.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        searches: Vec<ProviderSearch>,
    },
    /// The harness started running a tool call (durable: recovery needs to know it began).
    ToolCall {
        /// The call.
        #[serde(flatten)]
        call: ToolCall,
        /// For a file write (`Write`, `Edit`): the SHA-256 (hex) of the target file's content just
        /// before the write, or `"absent"` when it did not exist. After a crash, the write is
        /// re-run only if the file still holds exactly that content.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target_before: Option<String>,
    },
    /// Output of a running tool as it comes (transient).
    ToolOutputDelta {
        /// The tool call's id.
        call_id: String,
        /// `stdout` or `stderr`.
        stream: OutputStream,
        /// The chunk.
        text: String,
    },
    /// A tool call's result, as the model will see it (durable).
    ToolResult {
        /// The tool call's id.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The result text.
        output: String,
        /// The call failed; `output` says why.
        #[serde(default)]
        is_error: bool,
        /// Wall time of the call.
        #[serde(default)]
        duration_ms: u64,
        /// What the model is shown besides the text: the picture or PDF a `Read` returned.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        attachments: Vec<Attachment>,
    },
    /// The model call failed and is retried after a delay (transient).
    ModelRetry {
        /// The attempt about to be made (2 for the first retry).
        attempt: u32,
        /// Delay before the next attempt.
        delay_ms: u64,
        /// What failed (HTTP status and provider message, or a cut stream).
        reason: String,
    },
    /// The turn ended normally (durable).
    TurnCompleted {
        /// The turn.
        turn_id: TurnId,
        /// Why the model stopped.
        stop_reason: StopReason,
        /// Tokens used by the turn, summed over its model calls.
        usage: Usage,
    },
    /// The turn ended in failure (durable).
    TurnFailed {
        /// The turn.
        turn_id: TurnId,
        /// One line for a person.
        error: String,
        /// What kind of failure, when the server classified it (a model provider's errors are);
        /// `outboard run` picks its exit status by it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        class: Option<FailureClass>,
    },
    /// The sandbox changed state (durable).
    Sandbox {
        /// The new state.
        state: SandboxState,
        /// How long the transition took.
        ms: f64,
        /// With `waiting`: where the session stands in its org's queue for a live sandbox.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue: Option<SandboxQueue>,
    },
    /// The sandbox's network proxy refused a connection (durable): the destination, the policy
    /// that refused it, why, and what would allow it. Refusals of one destination are coalesced:
    /// at most one event per destination every few seconds, `repeated` counting those folded
    /// into it.
    Network {
        /// As the sandbox's client named it (empty when its request could not be read).
        host: String,
        /// Its port (0 when unknown).
        port: u16,
        /// What refused it (`org acme: registries`, `session none`, `limits`, …).
        policy: String,
        /// Why.
        reason: String,
        /// The command that would allow it.
        hint: String,
        /// Earlier refusals of the same destination not sent as events of their own.
        #[serde(default, skip_serializing_if = "is_zero_u32")]
        repeated: u32,
    },
    /// The conversation the model sees was compacted (durable): from here on it is the summary,
    /// then the messages of the events from `kept_from_seq` on, kept verbatim. The log keeps
    /// every event it replaces; a replay applies the same cut, so a restarted server rebuilds
    /// the same conversation.
    Compaction {
        /// The model's summary of the replaced part.
        summary: String,
        /// The first `seq` it replaces (1, or the seq of the compaction it summarises again).
        from_seq: u64,
        /// The first event kept verbatim (an `assistant_message`); everything from `from_seq`
        /// up to it is replaced by the summary.
        kept_from_seq: u64,
        /// The conversation's estimated tokens before (system prompt and tools included).
        tokens_before: u64,
        /// And after.
        tokens_after: u64,
        /// What started it.
        trigger: CompactionTrigger,
        /// What the person asked the summary to keep (`manual` only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        focus: Option<String>,
        /// The tokens of the model call that wrote the summary.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// A compaction started; its `compaction` event follows, or nothing if it failed
    /// (transient: clients show that the model is summarising).
    CompactionStarted {
        /// What started it.
        trigger: CompactionTrigger,
    },
    /// Who is attached to the session and in which role; sent whenever that changes
    /// (transient).
    Presence {
        /// Every attached connection, the driver first.
        attached: Vec<PresenceEntry>,
    },
    /// A watcher asks the driver to hand driving over (transient); the driver answers with
    /// `session/drive_grant`.
    DriveRequested {
        /// The watcher's user name.
        user: String,
    },
    /// The session got its title, derived from its first message (transient; sent right after
    /// that `user_message`, whose commit stored it): a client showing the session's title shows
    /// this one from now on. Later attaches read it in the session's info.
    SessionTitled {
        /// The title.
        title: String,
    },
    /// An org file (`/memory/**`, `/skills/**`) changed, by any session or person of the org
    /// (transient; sent to every live session of the org).
    MemoryChanged {
        /// The file.
        path: String,
        /// Its new current version.
        version: u64,
        /// What changed it.
        op: FileOp,
        /// Who.
        author: String,
        /// From which session (`None` for a person's command).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<SessionId>,
    },
    /// The model's todo list, replaced whole by each `TodoWrite` (durable): the last one in the
    /// log is the session's list.
    Todos {
        /// Every item, in the model's order.
        todos: Vec<TodoItem>,
    },
    /// A background command (`Bash` with `run_in_background`) started or changed state
    /// (durable): one event when it starts, one when it ends.
    BackgroundTask {
        /// Its id, as `BashOutput` and `KillShell` name it.
        shell_id: String,
        /// The command.
        command: String,
        /// Where it stands.
        status: TaskStatus,
        /// Its exit code (status `completed`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// A note the harness added to the model's conversation at the start of a step (durable),
    /// e.g. that a background command ended; the model sees it as a `<system-reminder>`.
    SystemReminder {
        /// The note, `<system-reminder>` tags included.
        text: String,
    },
    /// A tool call waits for a person's answer before it runs (durable): the org's policy for
    /// the tool says `ask`. The turn is paused until `approval/answer`; a restart keeps the
    /// question open.
    ApprovalRequested {
        /// The call, as the `assistant_message` named it.
        call_id: String,
        /// The tool.
        name: String,
        /// Its input, as the model sent it (secrets scrubbed).
        input: Value,
        /// The policy rule that asks (`mcp__github__*`, `Write(/skills/**)`).
        rule: String,
        /// What an `allow` with `scope: session` would cover: later calls of this tool whose
        /// every asking rule is one of these patterns. Empty: nothing beyond this call (what
        /// asks could not be judged before it runs). Absent from servers that granted the whole
        /// tool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        covers: Option<Vec<String>>,
        /// Why part of the call could not be judged before it runs (`$cmd push`, `eval "$x"`),
        /// when that is what asks: a client answering by itself refuses it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unjudged: Option<String>,
        /// What is asked: a tool call the policy asks about (absent: `tool`), a plan to approve
        /// (`ExitPlanMode`), or questions to answer (`AskUserQuestion`).
        #[serde(default, skip_serializing_if = "ApprovalKind::is_tool")]
        kind: ApprovalKind,
        /// For a `plan`: the org file it was saved as (`/plans/<date>-<slug>.md`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        /// For a `plan`: its text, whole.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan: Option<String>,
        /// For a `question`: the questions, each with its options (an answer may also be any
        /// other text).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        questions: Option<Vec<Question>>,
    },
    /// An approval request was answered (durable). An `allow` is followed by the call's
    /// `tool_call`; a `deny` by its `tool_result` saying so.
    ApprovalResolved {
        /// The call.
        call_id: String,
        /// The tool (so an `allow` for the session is rebuilt from the log).
        name: String,
        /// The answer.
        decision: ApprovalDecision,
        /// How far an `allow` reaches.
        #[serde(default)]
        scope: ApprovalScope,
        /// Who answered (a user name, or `policy` for a headless `outboard run --approve`).
        by: String,
        /// Why, for a denial.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// For an `allow` with `scope: session`: the rules it granted for this tool (as the
        /// request's `covers`). Absent from servers that granted the whole tool.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        covers: Option<Vec<String>>,
        /// For a `question` answered with `allow`: one answer per question, in order.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answers: Option<Vec<String>>,
    },
    /// The session's model was changed (durable, `session/set_model`): its next turn uses it.
    ModelChanged {
        /// The model's name in `models/list`.
        model: String,
        /// Its `provider/model`.
        label: String,
        /// The session's context window with it, in tokens.
        context_window: u64,
        /// Who changed it.
        by: String,
    },
    /// The session's mode changed (durable): `session/set_mode` (`/plan`, Shift-Tab, `--plan`),
    /// or an approved plan (`ExitPlanMode`) that ends plan mode. The last one in the log is the
    /// session's mode; none: `default`.
    ModeChanged {
        /// The mode from now on.
        mode: SessionMode,
        /// Who changed it (for an approved plan: who approved it).
        by: String,
    },
    /// The state just before a prompt (durable, written before its `turn_started`): the
    /// workspace's snapshot in the server's shadow repository and the log position the
    /// conversation stood at. The Nth top-level `user_message` is prompt N; its checkpoint is the
    /// last `checkpoint` event before it.
    Checkpoint {
        /// The snapshot's git tree id; absent when the files could not be snapshot (a session
        /// on a sandbox host).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tree: Option<String>,
        /// The seq of the last durable event before the checkpoint.
        at_seq: u64,
    },
    /// The session went back to a checkpoint (durable, `session/rewind`). With `conversation`,
    /// the conversation from here on is what it was right after event `to_seq` (a replay of
    /// the log applies it there); with `code`, the workspace's files were restored to the
    /// checkpoint's snapshot.
    Rewound {
        /// The checkpoint (prompt N).
        checkpoint: u32,
        /// The log position the conversation went back to.
        to_seq: u64,
        /// Whether the files were restored.
        code: bool,
        /// Whether the conversation went back.
        conversation: bool,
        /// The workspace's snapshot just before the restore (nothing is lost: it can be
        /// restored in turn); absent without `code`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_tree: Option<String>,
        /// Who rewound.
        by: String,
    },
    /// The org files a turn's prompt quotes (`/memory/MEMORY.md`, each skill's `SKILL.md`,
    /// each agent file) that are new to the session or changed since its previous turn's
    /// prompt quoted them (durable; logged at the turn's start, before its first model call):
    /// what a person sees of the org's words their model is about to read, and who wrote them.
    OrgContext {
        /// The files, each at the version the prompt quotes.
        files: Vec<OrgContextFile>,
    },
    /// An event kind this client does not know; skip it.
    #[serde(other)]
    Unknown,
}

impl EventKind {
    /// Durable events are written to the session's log before anyone sees them and get a new `seq`.
    pub fn is_durable(&self) -> bool {
        !matches!(
            self,
            EventKind::AssistantDelta { .. }
                | EventKind::ToolOutputDelta { .. }
                | EventKind::ModelRetry { .. }
                | EventKind::CompactionStarted { .. }
                | EventKind::Presence { .. }
                | EventKind::DriveRequested { .. }
                | EventKind::SessionTitled { .. }
                | EventKind::MemoryChanged { .. }
                | EventKind::Unknown
        )
    }

    /// Whether events of this kind come from an agent loop (the session's or a subagent's):
    /// what a client draws under a subagent's `Task` when it carries a `parent`. The others (a
    /// background command's state, a network refusal, presence) are the session's, whoever
    /// caused them.
    pub fn is_loop_event(&self) -> bool {
        matches!(
            self,
            EventKind::UserMessage { .. }
                | EventKind::AssistantDelta { .. }
                | EventKind::AssistantMessage { .. }
                | EventKind::ToolCall { .. }
                | EventKind::ToolOutputDelta { .. }
                | EventKind::ToolResult { .. }
                | EventKind::ModelRetry { .. }
                | EventKind::CompactionStarted { .. }
                | EventKind::Compaction { .. }
                | EventKind::TurnStarted { .. }
                | EventKind::TurnCompleted { .. }
                | EventKind::TurnFailed { .. }
                | EventKind::SystemReminder { .. }
                | EventKind::ApprovalRequested { .. }
                | EventKind::ApprovalResolved { .. }
        )
    }

    /// The wire name of the kind.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::TurnStarted { .. } => "turn_started",
            EventKind::UserMessage { .. } => "user_message",
            EventKind::AssistantDelta { .. } => "assistant_delta",
            EventKind::AssistantMessage { .. } => "assistant_message",
            EventKind::ToolCall { .. } => "tool_call",
            EventKind::ToolOutputDelta { .. } => "tool_output_delta",
            EventKind::ToolResult { .. } => "tool_result",
            EventKind::ModelRetry { .. } => "model_retry",
            EventKind::TurnCompleted { .. } => "turn_completed",
            EventKind::TurnFailed { .. } => "turn_failed",
            EventKind::Network { .. } => "network",
            EventKind::Sandbox { .. } => "sandbox",
            EventKind::Compaction { .. } => "compaction",
            EventKind::CompactionStarted { .. } => "compaction_started",
            EventKind::Presence { .. } => "presence",
            EventKind::DriveRequested { .. } => "drive_requested",
            EventKind::SessionTitled { .. } => "session_titled",
            EventKind::MemoryChanged { .. } => "memory_changed",
            EventKind::Todos { .. } => "todos",
            EventKind::BackgroundTask { .. } => "background_task",
            EventKind::SystemReminder { .. } => "system_reminder",
            EventKind::ApprovalRequested { .. } => "approval_requested",
            EventKind::ApprovalResolved { .. } => "approval_resolved",
            EventKind::ModelChanged { .. } => "model_changed",
            EventKind::ModeChanged { .. } => "mode_changed",
            EventKind::Checkpoint { .. } => "checkpoint",
            EventKind::Rewound { .. } => "rewound",
            EventKind::OrgContext { .. } => "org_context",
            EventKind::Unknown => "unknown",
        }
    }
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// One org file of an [`EventKind::OrgContext`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrgContextFile {
    /// `/memory/MEMORY.md`, `/skills/NAME/SKILL.md`, `/agents/NAME.md`.
    pub path: String,
    /// The version the prompt quotes.
    pub version: u64,
    /// Who wrote that version (a user, or `session ID`).
    pub author: String,
    /// The version the session's previous prompt quoted; absent when the file is new to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<u64>,
}

/// One attached connection, as listed by [`EventKind::Presence`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PresenceEntry {
    /// The user's name.
    pub user: String,
    /// Its role on this connection.
    pub role: Role,
    /// The client name from its `hello` (`outboard-cli/0.1.0`).
    #[serde(default)]
    pub client: String,
    /// The connection, as its `welcome` named it ([`Welcome::connection_id`]): roles belong to
    /// connections, and two terminals of one user are two entries. 0 from an older server.
    #[serde(default)]
    pub connection_id: u64,
}

/// How a client takes part in a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Receives events; cannot send turns.
    Watcher,
    /// Receives events, sends turns and interrupts. One connection drives a session at a time:
    /// the owner by attaching as driver, anyone else when the driver grants it.
    Driver,
}

/// A piece of a model's reasoning, as its provider returned it. Only the provider that made it
/// can read it back: each dialect sends its own kinds and leaves the others out, so a session that
/// switches model mid-way loses nothing but the other model's private reasoning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reasoning {
    /// An Anthropic extended-thinking block: the (summarised) thinking and the signature that
    /// lets the API verify it when it is sent back.
    Thinking {
        /// The thinking text, as streamed.
        thinking: String,
        /// The block's signature, opaque.
        signature: String,
    },
    /// An Anthropic thinking block the safety system encrypted: sent back as is, never shown.
    RedactedThinking {
        /// The encrypted block, opaque.
        data: String,
    },
    /// An OpenAI Responses API reasoning item.
    OpenaiReasoning {
        /// The item's id (`rs_…`).
        id: String,
        /// Its summary parts, in order (may be empty).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        summary: Vec<String>,
        /// The encrypted reasoning (`include: ["reasoning.encrypted_content"]`), which lets a
        /// stateless caller carry it across steps.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<String>,
    },
}

impl Reasoning {
    /// The readable text of the piece, for a person (empty for encrypted kinds).
    pub fn text(&self) -> String {
        match self {
            Reasoning::Thinking { thinking, .. } => thinking.clone(),
            Reasoning::RedactedThinking { .. } => String::new(),
            Reasoning::OpenaiReasoning { summary, .. } => summary.join("\n\n"),
        }
    }
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call.
    pub call_id: String,
    /// The tool's name (`Read`, `Bash`, …).
    pub name: String,
    /// The arguments as the model sent them. Invalid JSON from the model is kept as a JSON string
    /// so the log shows exactly what arrived.
    pub input: Value,
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Why a turn failed, as far as a script needs to know to decide what to do (each has its own
/// exit status of `outboard run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The model's server cannot be reached: nothing listens, its name does not resolve, TLS
    /// fails, or the connection timed out (after the retries that could help).
    ProviderUnreachable,
    /// The provider refused the credentials (401, 403).
    ProviderAuth,
    /// The provider does not know the model, or the URL is not its API (404).
    ModelNotFound,
    /// The provider is rate-limiting or failing (429, 5xx, a stream cut midway) and still was
    /// after the retries: trying later may succeed.
    ProviderUnavailable,
    /// The provider refused the request itself (another 4xx) or sent what cannot be read.
    ProviderRejected,
    /// Anything else (the event log, a closed session).
    Other,
    /// A class this client does not know (a newer server).
    #[serde(other)]
    Unknown,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model hit its output token limit.
    MaxTokens,
    /// The harness hit the turn's step limit.
    StepLimit,
    /// A user interrupted the turn.
    Interrupted,
    /// A reason this client does not know.
    #[serde(other)]
    Unknown,
}

/// Token usage of one model call, or summed over several.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included (so `input_tokens` alone is the size of the prompt).
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from the provider's prompt cache (Anthropic
    /// `cache_read_input_tokens`, OpenAI `prompt_tokens_details.cached_tokens`). Absent: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Of `input_tokens`, those written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`; OpenAI reports none). Absent: 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Adds another call's usage to this one.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }

    /// Input tokens neither read from nor written to the cache (billed at the base rate).
    pub fn uncached_input_tokens(&self) -> u64 {
        self.input_tokens.saturating_sub(self.cache_read_tokens + self.cache_write_tokens)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where a session waiting for a live sandbox stands (`sandbox` events with state `waiting`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxQueue {
    /// Its place in the org's queue, 1 for the first in line.
    pub position: u32,
    /// The org's quota of live sandboxes (`live_sandboxes`), all of them busy.
    pub limit: u32,
}

/// The sandbox lifecycle states (the state machine of docs/ARCHITECTURE.md, `sandbox/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    /// No sandbox exists.
    None,
    /// Every live sandbox the org's quota allows is running a command: the session waits in
    /// the org's queue for one to free (then `provisioning`, or `stopped` when it gave up).
    Waiting,
    /// A sandbox is being started.
    Provisioning,
    /// The sandbox is running.
    Running,
    /// The sandbox is frozen.
    Suspended,
    /// The sandbox died.
    Dead,
    /// The sandbox was stopped.
    Stopped,
    /// A state this client does not know.
    #[serde(other)]
    Unknown,
}

/// What started a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionTrigger {
    /// The next request would have passed the session's threshold of its context window.
    Auto,
    /// The provider refused a request as too long for its window; the step is retried once.
    Overflow,
    /// A person asked (`/compact`, `session/compact`).
    Manual,
}

impl CompactionTrigger {
    /// The wire name (`auto`, `overflow`, `manual`).
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionTrigger::Auto => "auto",
            CompactionTrigger::Overflow => "overflow",
            CompactionTrigger::Manual => "manual",
        }
    }
}

/// One item of the model's todo list (Claude Code's `TodoWrite`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    /// What to do, imperative (`Run the tests`).
    pub content: String,
    /// Where it stands.
    pub status: TodoStatus,
    /// The same in the present continuous, shown while it is in progress (`Running the tests`).
    #[serde(rename = "activeForm")]
    pub active_form: String,
}

/// Where a todo item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on (at most one item at a time).
    InProgress,
    /// Done.
    Completed,
}

/// Where a background command stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Running in the sandbox.
    Running,
    /// Exited by itself (see `exit_code`).
    Completed,
    /// Killed (`KillShell`, `session/kill_task`, or the sandbox was replaced).
    Killed,
    /// It was running when the server stopped or crashed: it is gone and is never re-run.
    Lost,
    /// A status this client does not know.
    #[serde(other)]
    Unknown,
}

/// An answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run the call.
    Allow,
    /// Do not run it; the model is told so (with the reason).
    Deny,
}

/// What an approval request asks a person.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// May this tool call run (the org's policy says `ask`)?
    #[default]
    Tool,
    /// Is this plan good to carry out (`ExitPlanMode`)? `allow` ends plan mode, `deny` (with a
    /// reason) keeps planning.
    Plan,
    /// The model's questions (`AskUserQuestion`): `allow` with the answers, `deny` declines.
    Question,
}

impl ApprovalKind {
    /// Whether it is the default, `tool` (left out of the JSON).
    pub fn is_tool(&self) -> bool {
        *self == ApprovalKind::Tool
    }
}

/// One question of an `AskUserQuestion` call (Claude Code's shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// The question, whole.
    pub question: String,
    /// A short label for it (a chip, a tab).
    #[serde(default)]
    pub header: String,
    /// Two to four choices.
    pub options: Vec<QuestionOption>,
    /// Whether several options may be chosen (the answer lists them, comma-separated).
    #[serde(default, rename = "multiSelect")]
    pub multi_select: bool,
}

/// One choice of a [`Question`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionOption {
    /// What is chosen (the answer's text when picked).
    pub label: String,
    /// What it means.
    #[serde(default)]
    pub description: String,
}

/// A session's mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// The model may use every tool its org's policy allows.
    #[default]
    Default,
    /// The model explores and proposes a plan (`ExitPlanMode`); tools that change anything are
    /// refused when called.
    Plan,
}

impl SessionMode {
    /// The wire name (`default`, `plan`).
    pub fn as_str(&self) -> &'static str {
        match self {
            SessionMode::Default => "default",
            SessionMode::Plan => "plan",
        }
    }
}

/// How far an `allow` reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalScope {
    /// This call only.
    #[default]
    Once,
    /// Later calls of the same tool in this session run without asking when every rule that
    /// asks about them is one the request's `covers` named.
    Session,
}
