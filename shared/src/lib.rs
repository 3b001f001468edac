//! Outboard's wire protocol, and nothing else: no IO, no runtime.
//!
//! Everything a client and the server say to each other over the WebSocket is defined here, as
//! serde types that are the single source of truth for `docs/PROTOCOL.md`. The rules (see that
//! document): JSON text frames, internally tagged enums with a `"type"` field, snake_case, additive
//! evolution only (new fields are `#[serde(default)]`, unknown event kinds decode as
//! [`EventKind::Unknown`] so an old client survives a new server).
//!
//! The headless JSONL schema of `outboard run --json` lives in [`headless`]; it reuses
//! [`SessionEvent`] so a script sees exactly what an attached client sees.

pub mod files;
pub mod headless;
mod ids;

pub use files::{
    AgentInfo, AgentsImportParams, AgentsImportResponse, AgentsListResponse, FileOp, FileVersion,
    FilesChangeResponse, FilesDeleteParams, FilesHistoryParams, FilesHistoryResponse,
    FilesListParams, FilesListResponse, FilesReadParams, FilesReadResponse, FilesRestoreParams,
    FilesWriteParams, ImportFile, SkillInfo, SkillsImportParams, SkillsImportResponse,
    SkillsListResponse,
};
pub use ids::{OrgId, RequestId, SessionId, TurnId, UserId};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version a client announces in [`Hello`]; the server refuses a different one.
pub const PROTOCOL_VERSION: u32 = 1;

/// The largest text frame either side accepts, in bytes. A larger frame is refused with
/// [`ErrorCode::TooLarge`] and the connection is closed: it is either a bug or an attack, and a
/// prompt of 4 MiB is better sent as a file in the workspace.
pub const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;

/// The most events one page of history holds (`session/attach`, `session/history`). 500 events
/// are several screens of transcript (a screen shows a few dozen), yet reading and encoding them
/// takes a few milliseconds, so the first screen of even a huge session arrives at once.
pub const HISTORY_PAGE_EVENTS: usize = 500;

/// The most bytes one page of history takes on the wire, the whole response frame included. A
/// quarter of [`MAX_FRAME_BYTES`]: a page is never near the frame limit even with the in-flight
/// partial output of a running turn added (about 1 MiB at most), and one page is a small enough
/// burst for a slow link. A single event larger than this still goes out alone in its page.
pub const HISTORY_PAGE_BYTES: usize = 1024 * 1024;

/// How often a client sends a WebSocket ping when it has nothing else to send. The server closes
/// a connection after its idle timeout (default 300 s) without any frame from the client; 30 s
/// keeps an idle TUI well inside it, even against a server configured ten times stricter.
pub const CLIENT_PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);

/// The most raw bytes (HTTP upgrade request and WebSocket frames together) the server reads from
/// a connection before it has accepted its `hello`. A client sends one small `hello` (well under
/// 1 KiB) and waits for `welcome`; anything larger is cut with [`ErrorCode::TooLarge`] and close
/// code [`close::TOO_BIG`] as soon as the limit is reached, so an unauthenticated peer can never
/// make the server buffer a large frame.
pub const MAX_PRE_HELLO_BYTES: usize = 64 * 1024;

/// The WebSocket close codes the server ends a connection with (RFC 6455 §7.4.1). The close
/// frame's reason is `"<error code>: <short text>"` (at most 123 bytes, the limit of a close
/// reason), e.g. `"idle_timeout: no frame from the client for 300 s"`; the fatal error frame sent
/// just before it carries the full message.
pub mod close {
    /// The server is going away (not used for restarts, see [`RESTART`]).
    pub const GOING_AWAY: u16 = 1001;
    /// The client broke a rule: no `hello` in time, a bad `hello`, a refused token, idle too long.
    pub const POLICY: u16 = 1008;
    /// The client sent more than a limit allows (a frame, or bytes before `hello`).
    pub const TOO_BIG: u16 = 1009;
    /// The server is restarting; reconnect in a moment.
    pub const RESTART: u16 = 1012;
    /// The longest close reason RFC 6455 allows (125 bytes of payload minus the 2-byte code).
    pub const MAX_REASON_BYTES: usize = 123;
}

// ---------------------------------------------------------------------------------------------
// Client → server
// ---------------------------------------------------------------------------------------------

/// A frame sent by a client. The first one on a connection must be [`ClientFrame::Hello`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    /// Opens the connection: protocol version and bearer token.
    Hello(Hello),
    /// A request; the server answers with a [`ServerFrame::Response`] carrying the same `id`.
    Request(Request),
}

/// The handshake's first frame.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Must equal [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// The user's bearer token (from `outboard-server admin user add`).
    pub token: String,
    /// Free-form client name and version, for logs and presence (`outboard-cli/0.1.0`).
    #[serde(default)]
    pub client: String,
}

impl std::fmt::Debug for Hello {
    // The token is a credential: never print it, not even in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hello")
            .field("protocol_version", &self.protocol_version)
            .field("token", &"<redacted>")
            .field("client", &self.client)
            .finish()
    }
}

/// A request: an id chosen by the client and a method with its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Echoed in the response; unique among the client's requests in flight.
    pub id: RequestId,
    /// The method and its parameters.
    #[serde(flatten)]
    pub method: Method,
}

/// Declares every request method once — its variant, wire name, params type and result type —
/// and derives from that one list the [`Method`] enum (the wire), [`Method::name`], the
/// [`MethodKind`] table ([`MethodKind::ALL`], [`Method::NAMES`], [`MethodKind::from_name`]) and
/// one [`Call`] marker type per method in [`methods`], so that a client request is typed by its
/// method (`client.call::<methods::SessionAttach>(params)`) and the server's list of known methods
/// cannot fall behind the enum.
macro_rules! methods {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = $name:literal ($params:ty) -> $response:ty;
    )*) => {
        /// Every request method, tagged by `"method"` with its parameters under `"params"`.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "method", content = "params")]
        pub enum Method {
            $(
                $(#[doc = $doc])*
                #[serde(rename = $name)]
                $variant($params),
            )*
        }

        /// Which method a request is, without its parameters: the table of methods.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum MethodKind {
            $(
                $(#[doc = $doc])*
                $variant,
            )*
        }

        impl MethodKind {
            /// Every method, in declaration order.
            pub const ALL: &'static [MethodKind] = &[$(MethodKind::$variant),*];

            /// The wire name (`"session/attach"`).
            pub fn name(self) -> &'static str {
                match self {
                    $(MethodKind::$variant => $name,)*
                }
            }

            /// The method with this wire name, if there is one.
            pub fn from_name(name: &str) -> Option<MethodKind> {
                match name {
                    $($name => Some(MethodKind::$variant),)*
                    _ => None,
                }
            }
        }

        impl Method {
            /// The wire names of every method, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// Which method this is.
            pub fn kind(&self) -> MethodKind {
                match self {
                    $(Method::$variant(_) => MethodKind::$variant,)*
                }
            }
        }

        /// One marker type per method, implementing [`Call`]: its name, params and result.
        pub mod methods {
            use super::*;

            $(
                $(#[doc = $doc])*
                #[derive(Debug, Clone, Copy, PartialEq, Eq)]
                pub struct $variant;

                impl Call for $variant {
                    const NAME: &'static str = $name;
                    const KIND: MethodKind = MethodKind::$variant;
                    type Params = $params;
                    type Response = $response;

                    fn method(params: $params) -> Method {
                        Method::$variant(params)
                    }
                }
            )*
        }
    };
}

/// A request method as a type: what it is called, what it takes and what it answers. Implemented
/// by the markers of [`methods`], all declared in one table.
pub trait Call: 'static {
    /// The wire name.
    const NAME: &'static str;
    /// The method in [`MethodKind`].
    const KIND: MethodKind;
    /// Its `params`.
    type Params: Serialize + serde::de::DeserializeOwned + Send + 'static;
    /// Its `result`.
    type Response: Serialize + serde::de::DeserializeOwned + Send + 'static;

    /// The request's [`Method`] with these params.
    fn method(params: Self::Params) -> Method;
}

methods! {
    /// Create a session owned by the caller. Answered with [`SessionCreateResponse`].
    SessionCreate = "session/create" (SessionCreateParams) -> SessionCreateResponse;
    /// List the sessions of the caller's org. Answered with [`SessionListResponse`].
    SessionList = "session/list" (SessionListParams) -> SessionListResponse;
    /// Attach to a session's events. Answered with [`SessionAttachResponse`] (a snapshot), then
    /// live [`ServerFrame::Event`]s with a higher `seq`.
    SessionAttach = "session/attach" (SessionAttachParams) -> SessionAttachResponse;
    /// A page of a session's durable events older than a cursor (from `session/attach` or an
    /// earlier page). Answered with [`SessionHistoryResponse`].
    SessionHistory = "session/history" (SessionHistoryParams) -> SessionHistoryResponse;
    /// Stop receiving a session's events. Answered with [`Empty`].
    SessionDetach = "session/detach" (SessionRef) -> Empty;
    /// Start a turn with a user message. Answered with [`TurnSendResponse`] once the message is
    /// durable; the turn's progress arrives as events.
    TurnSend = "turn/send" (TurnSendParams) -> TurnSendResponse;
    /// Interrupt the turn in flight, if any. Answered with [`TurnInterruptResponse`].
    TurnInterrupt = "turn/interrupt" (SessionRef) -> TurnInterruptResponse;
    /// Liveness check. Answered with [`Empty`].
    Ping = "ping" (Empty) -> Empty;
    /// A watcher asks the current driver to hand driving over. Answered with [`Empty`]; the
    /// attached clients get a transient [`EventKind::DriveRequested`].
    SessionDriveRequest = "session/drive_request" (SessionRef) -> Empty;
    /// The current driver hands driving to an attached watcher. Answered with [`Empty`]; a
    /// [`EventKind::Presence`] follows with the new roles.
    SessionDriveGrant = "session/drive_grant" (DriveGrantParams) -> Empty;
    /// The session's owner takes driving back (always allowed to the owner). Answered with
    /// [`Empty`]; a [`EventKind::Presence`] follows.
    SessionDriveTake = "session/drive_take" (SessionRef) -> Empty;
    /// List the org's live files under a path. Answered with [`FilesListResponse`].
    FilesList = "files/list" (FilesListParams) -> FilesListResponse;
    /// Read an org file (any version). Answered with [`FilesReadResponse`].
    FilesRead = "files/read" (FilesReadParams) -> FilesReadResponse;
    /// Every version of an org file. Answered with [`FilesHistoryResponse`].
    FilesHistory = "files/history" (FilesHistoryParams) -> FilesHistoryResponse;
    /// Write an org file as a person. Answered with [`FilesChangeResponse`].
    FilesWrite = "files/write" (FilesWriteParams) -> FilesChangeResponse;
    /// Delete an org file (a tombstone version). Answered with [`FilesChangeResponse`].
    FilesDelete = "files/delete" (FilesDeleteParams) -> FilesChangeResponse;
    /// Make an earlier version current again. Answered with [`FilesChangeResponse`].
    FilesRestore = "files/restore" (FilesRestoreParams) -> FilesChangeResponse;
    /// The org's skills. Answered with [`SkillsListResponse`].
    SkillsList = "skills/list" (Empty) -> SkillsListResponse;
    /// Write a directory of skills under `/skills`. Answered with [`SkillsImportResponse`].
    SkillsImport = "skills/import" (SkillsImportParams) -> SkillsImportResponse;
    /// The org's agent types (`/agents/NAME.md`), usable or not. Answered with
    /// [`AgentsListResponse`].
    AgentsList = "agents/list" (Empty) -> AgentsListResponse;
    /// Write agent files under `/agents`, each checked first. Answered with
    /// [`AgentsImportResponse`].
    AgentsImport = "agents/import" (AgentsImportParams) -> AgentsImportResponse;
    /// Delete one of the caller's sessions: its log, its workspace (never an in-place
    /// directory) and its server-side git state. Answered with [`Empty`]; refused while a turn
    /// is in flight.
    SessionDelete = "session/delete" (SessionRef) -> Empty;
    /// Move a session whose sandbox host is gone (or must go) to another registered host: its
    /// workspace is made again there (empty), the model is told with a durable
    /// [`EventKind::SystemReminder`], and its next turn runs there. Answered with
    /// [`SessionRestoreResponse`]; refused while a turn runs and for a session not on a host.
    SessionRestore = "session/restore" (SessionRef) -> SessionRestoreResponse;
    /// Commit a repository session's changes and push them as a new branch with the org's
    /// credential. Answered with [`SessionPushResponse`]; [`ServerFrame::Progress`] frames
    /// carrying the request's id come first.
    SessionPush = "session/push" (SessionPushParams) -> SessionPushResponse;
    /// Token usage of the caller's org, grouped by session, user or day, per model. Answered
    /// with [`UsageReportResponse`].
    UsageReport = "usage/report" (UsageReportParams) -> UsageReportResponse;
    /// Compact the session's conversation now: the model summarises it and the harness goes on
    /// from the summary and the most recent steps. Answered with [`SessionCompactResponse`] once
    /// the [`EventKind::Compaction`] is durable; refused while a turn runs.
    SessionCompact = "session/compact" (SessionCompactParams) -> SessionCompactResponse;
    /// The driver kills one of the session's background commands (`Bash` with
    /// `run_in_background`). Answered with [`Empty`]; a [`EventKind::BackgroundTask`] with
    /// status `killed` follows.
    SessionKillTask = "session/kill_task" (KillTaskParams) -> Empty;
    /// Answer a tool call waiting for approval ([`EventKind::ApprovalRequested`]): the session's
    /// driver, or any member of its org who is not attached to it as a watcher. Answered with
    /// [`Empty`] once the loop has the answer; an [`EventKind::ApprovalResolved`] follows.
    ApprovalAnswer = "approval/answer" (ApprovalAnswerParams) -> Empty;
    /// The models this server offers. Answered with [`ModelsListResponse`].
    ModelsList = "models/list" (Empty) -> ModelsListResponse;
    /// The driver picks the session's model for its next turn (a turn in flight finishes with
    /// the model it started with). Answered with [`SessionSetModelResponse`] once the
    /// [`EventKind::ModelChanged`] is durable.
    SessionSetModel = "session/set_model" (SessionSetModelParams) -> SessionSetModelResponse;
}

/// One model the server offers (`models/list`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The name clients pick it by (`outboard run --model NAME`, `/model NAME`).
    pub name: String,
    /// The wire protocol: `anthropic`, `openai` or `responses`.
    pub provider: String,
    /// The provider's model id sent in each request.
    pub model: String,
    /// `provider/model`, as sessions and usage reports show it.
    pub label: String,
    /// Its context window in tokens.
    pub context_window: u64,
    /// The output tokens asked for per call.
    pub max_tokens: u32,
    /// The extended-thinking budget in tokens, when thinking is on (Anthropic).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<u32>,
    /// Its prices, when the server's model file gives them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<ModelPrices>,
    /// Whether new sessions get it when they name none.
    #[serde(default)]
    pub default: bool,
}

/// Prices of a model in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModelPrices {
    /// Uncached input.
    pub input: f64,
    /// Output (thinking included).
    pub output: f64,
    /// Input read from the prompt cache.
    #[serde(default)]
    pub cache_read: f64,
    /// Input written to the prompt cache.
    #[serde(default)]
    pub cache_write: f64,
}

/// Result of `models/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelsListResponse {
    /// The models, the default first.
    pub models: Vec<ModelInfo>,
}

/// Parameters of `session/set_model`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSetModelParams {
    /// The session.
    pub session_id: SessionId,
    /// A model's name from `models/list`.
    pub model: String,
}

/// Result of `session/set_model`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSetModelResponse {
    /// The session as it now is (its `model` the new one's label).
    pub session: SessionInfo,
}

/// Parameters of `approval/answer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalAnswerParams {
    /// The session.
    pub session_id: SessionId,
    /// The call waiting, as its [`EventKind::ApprovalRequested`] named it.
    pub call_id: String,
    /// Run it or not.
    pub decision: ApprovalDecision,
    /// For `allow`: this call only, or every call of the same tool for the rest of the session.
    #[serde(default)]
    pub scope: ApprovalScope,
    /// For `deny`: why, passed to the model with the refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The longest reason a person may give with a denial (bytes); the model reads it.
pub const MAX_APPROVAL_REASON_BYTES: usize = 2048;

/// An answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run the call.
    Allow,
    /// Do not run it; the model is told so (with the reason).
    Deny,
}

/// How far an `allow` reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalScope {
    /// This call only.
    #[default]
    Once,
    /// Every later call of the same tool in this session runs without asking.
    Session,
}

/// Parameters of `session/compact`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCompactParams {
    /// The session.
    pub session_id: SessionId,
    /// What the summary should keep in particular (`/compact the failing test`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus: Option<String>,
}

/// Result of `session/compact`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCompactResponse {
    /// The `seq` of the [`EventKind::Compaction`].
    pub seq: u64,
    /// The conversation's estimated tokens before.
    pub tokens_before: u64,
    /// And after.
    pub tokens_after: u64,
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

/// Parameters of `session/kill_task`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillTaskParams {
    /// The session.
    pub session_id: SessionId,
    /// The background command, as its [`EventKind::BackgroundTask`] named it.
    pub shell_id: String,
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

/// A session's todo list in numbers, as `session/list` shows it (`3/7`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoProgress {
    /// Items completed.
    pub done: u32,
    /// Items in the list.
    pub total: u32,
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

/// How `usage/report` groups its rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageGroup {
    /// One row per session (and model).
    #[default]
    Session,
    /// One row per user who owns the sessions (and model).
    User,
    /// One row per UTC day of the model calls (and model).
    Day,
}

/// Parameters of `usage/report`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReportParams {
    /// Only this session (of the caller's org).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    /// The grouping (default `session`).
    #[serde(default)]
    pub by: UsageGroup,
    /// Only model calls at or after this time: `YYYY-MM-DD` (UTC midnight) or RFC 3339 UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// One row of `usage/report`: the calls of one group to one model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRow {
    /// The group: a session id, a user name, or a day (`YYYY-MM-DD`).
    pub key: String,
    /// The model, as `provider/model`.
    pub model: String,
    /// Model calls counted.
    pub calls: u64,
    /// Their tokens.
    pub usage: Usage,
}

/// Result of `usage/report`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReportResponse {
    /// Sorted by key, then model.
    pub rows: Vec<UsageRow>,
}

impl Method {
    /// The wire name of the method, for logs and errors.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }
}

/// No parameters, or no result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// Parameters of `session/create`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCreateParams {
    /// A human title; the server derives one from the first message when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The host directory to work in, in place, as `/workspace` (an absolute path). Only a server
    /// whose clients run on its own host accepts it (the embedded server); others answer
    /// `bad_request`. Absent: a fresh directory in the server's data dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Where the workspace's files come from: a repository the server clones, or a working tree
    /// uploaded beforehand (`POST /v1/uploads`). Exclusive with `workspace`. While the server
    /// prepares it, [`ServerFrame::Progress`] frames carrying the request's id precede the
    /// response; a failure leaves no session and no files behind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceSpec>,
    /// What the session's sandbox may reach: the org's policy (the default) or nothing
    /// (`none`). A session can narrow its org's policy, never widen it.
    #[serde(default, skip_serializing_if = "SessionNetwork::is_org")]
    pub network: SessionNetwork,
    /// The model's context window in tokens for this session, overriding the server's (a local
    /// model whose `n_ctx` is smaller than its family's window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// The model to use, by its name in `models/list`; absent: the server's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A session's network (`session/create`'s `network`, `outboard run --network`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionNetwork {
    /// The org's policy (`outboard-server admin network show --org ORG`).
    #[default]
    Org,
    /// No network at all: every connection is refused.
    None,
}

impl SessionNetwork {
    /// Whether this is the org's policy, unnarrowed.
    pub fn is_org(&self) -> bool {
        *self == SessionNetwork::Org
    }

    /// Its name on the wire and the command line.
    pub fn as_str(&self) -> &'static str {
        match self {
            SessionNetwork::Org => "org",
            SessionNetwork::None => "none",
        }
    }
}

impl std::str::FromStr for SessionNetwork {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "org" => Ok(SessionNetwork::Org),
            "none" => Ok(SessionNetwork::None),
            other => Err(format!(
                "unknown network {other:?}: `org` (the org's policy) or `none` (no network)"
            )),
        }
    }
}

/// What a new session's workspace is made from (`session/create`'s `source`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SourceSpec {
    /// A git repository over HTTP(S), cloned by the server outside the sandbox with the org's
    /// credential for its host. The URL carries no credentials.
    Repo {
        /// `https://host[:port]/path` (or `http://`).
        url: String,
        /// A branch, a tag or a full commit id; the repository's default branch when absent.
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        git_ref: Option<String>,
    },
    /// A working tree uploaded with `POST /v1/uploads`, by the same user.
    Upload {
        /// The id the upload was answered with.
        upload_id: String,
    },
}

/// Where a session's workspace came from, as sessions are listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SessionSource {
    /// A host directory worked on in place (embedded mode).
    Local {
        /// The directory.
        path: String,
    },
    /// A repository the server cloned.
    Repo {
        /// The repository's URL (no credentials).
        url: String,
        /// The ref asked for, or the default branch it resolved to.
        #[serde(rename = "ref")]
        git_ref: String,
        /// The commit checked out: the base of `diff` and the parent of `push`.
        commit: String,
    },
    /// An uploaded working tree.
    Upload {
        /// The uploaded tree's size in bytes.
        bytes: u64,
        /// The branch checked out, when the upload came from a git work tree.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        branch: Option<String>,
    },
}

impl SessionSource {
    /// One short label for status lines and listings: `repo@ref`, `upload`, or the path.
    pub fn label(&self) -> String {
        match self {
            SessionSource::Local { path } => path.clone(),
            SessionSource::Repo { url, git_ref, .. } => {
                let name = url.trim_end_matches('/').trim_end_matches(".git");
                let name = name.rsplit('/').next().unwrap_or(name);
                format!("{name}@{git_ref}")
            }
            SessionSource::Upload { branch: Some(branch), .. } => format!("upload@{branch}"),
            SessionSource::Upload { branch: None, .. } => "upload".to_owned(),
        }
    }
}

/// Parameters of `session/push`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionPushParams {
    /// The session.
    pub session_id: SessionId,
    /// The branch to create; `outboard/<short session id>` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The commit's author as `Name <email>` (the CLI sends the local git identity); absent:
    /// the user's Outboard name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
}

/// Result of `session/restore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRestoreResponse {
    /// The sandbox host the session was on.
    pub from_host: String,
    /// The sandbox host it is on now.
    pub host: String,
}

/// Result of `session/push`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionPushResponse {
    /// The branch pushed.
    pub branch: String,
    /// The commit it now points at.
    pub commit: String,
    /// The repository pushed to.
    pub url: String,
    /// Whether the branch was created by this push (false: fast-forwarded a branch an earlier
    /// push of this session created).
    pub created: bool,
}

/// Progress of a long request (a clone, an upload being unpacked, a push), sent before its
/// response on the requesting connection only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressFrame {
    /// The request this is progress of.
    pub request_id: RequestId,
    /// What is happening: `resolving`, `receiving`, `resolving_deltas`, `checking_out`,
    /// `unpacking`, `pushing`, … (new phases may appear).
    pub phase: String,
    /// Units done in this phase.
    pub done: u64,
    /// Units in this phase, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// A line a person can read, e.g. `Receiving objects: 45% (4500/10000), 40.1 MiB`.
    pub message: String,
}

/// The HTTP endpoints beside the WebSocket, on the same listener, authenticated with the same
/// bearer token (`Authorization: Bearer TOKEN`).
pub mod http {
    /// `POST`: the body is a working tree as a tar archive (see `docs/PROTOCOL.md`), answered
    /// with [`super::UploadResponse`] as JSON; `413` beyond the server's cap.
    pub const UPLOADS: &str = "/v1/uploads";
    /// `GET /v1/sessions/{id}/diff[?stat=1]`: the workspace's changes against its base as a
    /// unified git diff (`text/x-diff`), or `git diff --stat` output.
    pub const SESSIONS: &str = "/v1/sessions";
    /// The header naming the branch of an upload made from a git work tree.
    pub const UPLOAD_BRANCH_HEADER: &str = "x-outboard-branch";
    /// The reserved member of an upload's archive holding the branch's history as a
    /// `git bundle`; it never lands in the workspace (the server makes `.git` from it).
    pub const UPLOAD_HISTORY_BUNDLE: &str = ".outboard-upload/history.bundle";
}

/// Result of `POST /v1/uploads`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadResponse {
    /// Give it to `session/create` as `source: {type: "upload", upload_id}`.
    pub upload_id: String,
    /// Bytes received.
    pub bytes: u64,
}

/// Parameters of `session/list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionListParams {
    /// At most this many sessions, newest activity first (server default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// A request that names one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRef {
    /// The session.
    pub session_id: SessionId,
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

/// Parameters of `session/attach`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionAttachParams {
    /// The session.
    pub session_id: SessionId,
    /// The role asked for.
    pub role: Role,
    /// Resume after this durable `seq` (the last one the client saw): the response holds the
    /// first page after it and the rest up to the snapshot follows as `event` frames. Absent: the
    /// newest page of history only ([`SessionAttachResponse::has_more`] tells if there is more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_seq: Option<u64>,
}

/// Parameters of `session/history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHistoryParams {
    /// The session.
    pub session_id: SessionId,
    /// Events with a `seq` below this one: the `cursor` of the attach or of the previous page.
    pub before: u64,
    /// At most this many events (default and most: [`HISTORY_PAGE_EVENTS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Result of `session/history`: the page of events just before `before`, at most
/// [`HISTORY_PAGE_EVENTS`] events and [`HISTORY_PAGE_BYTES`] in all (one larger event alone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionHistoryResponse {
    /// Durable events, oldest first, the last one's `seq` being `before - 1`.
    pub events: Vec<SessionEvent>,
    /// Older events exist: ask again with `before: cursor`.
    pub has_more: bool,
    /// The `seq` of the oldest event returned (`before` when none was).
    pub cursor: u64,
}

/// Parameters of `session/drive_grant`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriveGrantParams {
    /// The session.
    pub session_id: SessionId,
    /// The name of the attached watcher who gets driving.
    pub user: String,
}

/// Parameters of `turn/send`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnSendParams {
    /// The session.
    pub session_id: SessionId,
    /// The user's message.
    pub text: String,
}

// ---------------------------------------------------------------------------------------------
// Server → client
// ---------------------------------------------------------------------------------------------

/// A frame sent by the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The handshake succeeded.
    Welcome(Welcome),
    /// The answer to a [`Request`].
    Response(Response),
    /// A session event for a session this connection is attached to.
    Event(EventFrame),
    /// A connection-level error not tied to a request (bad handshake, malformed frame). When
    /// `fatal`, the server closes the connection after sending it.
    Error(ConnectionError),
    /// Progress of a request of this connection that takes a while (see [`ProgressFrame`]).
    Progress(ProgressFrame),
}

/// The server's answer to [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The server's protocol version (equal to the client's, or the handshake fails).
    pub protocol_version: u32,
    /// Server name and version.
    pub server: String,
    /// Who the token belongs to.
    pub user: UserInfo,
    /// This connection's id, unique for the life of the server process; `presence` entries
    /// carry the same id, so a client knows which entry is itself even when its user is
    /// attached from several terminals. 0 from a server that predates it.
    #[serde(default)]
    pub connection_id: u64,
}

/// A user as clients see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// The user's id.
    pub id: UserId,
    /// The user's name, unique within the org.
    pub name: String,
    /// The org's id.
    pub org_id: OrgId,
    /// The org's name.
    pub org: String,
}

/// The answer to a request: exactly one of `result` and `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// The request's id.
    pub id: RequestId,
    /// The method's result object on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// What went wrong otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl Response {
    /// A successful response carrying `result`.
    pub fn ok<T: Serialize>(id: RequestId, result: &T) -> Self {
        match serde_json::to_value(result) {
            Ok(v) => Response { id, result: Some(v), error: None },
            Err(e) => Response::err(id, ErrorBody::new(ErrorCode::Internal, e.to_string())),
        }
    }

    /// A failed response.
    pub fn err(id: RequestId, error: ErrorBody) -> Self {
        Response { id, result: None, error: Some(error) }
    }
}

/// A machine-readable error code and a message that tells a person what to do next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The kind of error.
    pub code: ErrorCode,
    /// One line for a person.
    pub message: String,
    /// With `unavailable` for a session another server node runs: where that node serves
    /// clients (`ws://…` or `wss://…`), for a client to connect there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_url: Option<String>,
}

impl ErrorBody {
    /// An error with a code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody { code, message: message.into(), node_url: None }
    }

    /// The error, naming the server node where the session runs ([`ErrorBody::node_url`]).
    pub fn at_node(mut self, url: Option<String>) -> Self {
        self.node_url = url;
        self
    }
}

impl std::fmt::Display for ErrorBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code.as_str())
    }
}

/// Error codes. New codes may be added; clients treat an unknown code like `internal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The frame or parameters are malformed.
    BadRequest,
    /// The first frame was not `hello`, or a request came before the handshake finished.
    HandshakeRequired,
    /// The client speaks another protocol version.
    ProtocolVersion,
    /// The token is missing or wrong.
    Unauthorized,
    /// The caller may not do this (another org's session, a watcher sending a turn).
    Forbidden,
    /// No such session (or not visible to the caller's org).
    NotFound,
    /// The request conflicts with the current state (a turn is already running).
    Conflict,
    /// The frame exceeds [`MAX_FRAME_BYTES`].
    TooLarge,
    /// The method is not known to this server.
    UnknownMethod,
    /// The client fell too far behind the event stream; re-attach with the last `seq`.
    Lagged,
    /// The server is shutting down or restarting.
    ShuttingDown,
    /// The connection sent no frame (request or WebSocket ping) for the server's idle timeout;
    /// clients ping well within it ([`CLIENT_PING_INTERVAL`]).
    IdleTimeout,
    /// A bug or an unexpected failure on the server.
    Internal,
    /// The caller's org reached one of its quotas (sessions per hour, org file versions or
    /// bytes, title length); the message names the quota and how an admin raises it.
    QuotaExceeded,
    /// Something the request needs cannot be had now (no sandbox host answers to take a new
    /// session); the message says what; retrying later may work.
    Unavailable,
    /// A code this client does not know.
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::HandshakeRequired => "handshake_required",
            ErrorCode::ProtocolVersion => "protocol_version",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::UnknownMethod => "unknown_method",
            ErrorCode::Lagged => "lagged",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::IdleTimeout => "idle_timeout",
            ErrorCode::Internal => "internal",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Unknown => "unknown",
        }
    }
}

/// A connection-level error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionError {
    /// What went wrong.
    #[serde(flatten)]
    pub error: ErrorBody,
    /// The server closes the connection after this frame.
    #[serde(default)]
    pub fatal: bool,
}

/// A session event delivered to an attached connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventFrame {
    /// The event.
    pub event: SessionEvent,
}

/// The status of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// No turn in flight.
    Idle,
    /// A turn is in flight.
    Running,
    /// The session cannot continue (see its last `turn_failed`).
    Failed,
    /// A status this client does not know.
    #[serde(other)]
    Unknown,
}

/// A session as listed and attached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The session's id.
    pub id: SessionId,
    /// Its title.
    pub title: String,
    /// The owning user's id.
    pub owner_id: UserId,
    /// The owning user's name.
    pub owner: String,
    /// Whether a turn is in flight.
    pub status: SessionStatus,
    /// The provider and model this session talks to, as `provider/model`.
    pub model: String,
    /// The name of that model in `models/list` (absent from an older server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    /// The last durable `seq` of its log (0 when empty).
    pub last_seq: u64,
    /// Creation time, RFC 3339 UTC.
    pub created_at: String,
    /// Time of the last durable event, RFC 3339 UTC.
    pub updated_at: String,
    /// Why the session failed for good (status `failed`), e.g. an unreadable log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The host directory the session works in, when it was created with one (embedded mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Where its workspace came from (absent: an empty directory of the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SessionSource>,
    /// What its sandbox may reach (absent: the org's policy).
    #[serde(default, skip_serializing_if = "SessionNetwork::is_org")]
    pub network: SessionNetwork,
    /// Who is attached right now and in which role (in `session/list`; empty elsewhere).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attached: Vec<PresenceEntry>,
    /// Tokens used by every model call of the session so far (absent from an older server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The model's context window in tokens, as this session uses it: `session/create`'s
    /// `context_window`, else the server's `--context-window`, else the known window of the
    /// model's family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// The model's todo list in numbers (absent until its first `TodoWrite`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub todos: Option<TodoProgress>,
}

/// Result of `session/create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCreateResponse {
    /// The new session.
    pub session: SessionInfo,
}

/// Result of `session/list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionListResponse {
    /// The org's sessions, newest activity first.
    pub sessions: Vec<SessionInfo>,
}

/// Result of `session/attach`: everything needed to draw the session, with no gap before the live
/// events that follow it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionAttachResponse {
    /// The session.
    pub session: SessionInfo,
    /// The role granted.
    pub role: Role,
    /// Durable events, in order: without `after_seq` the newest page of history; with it the
    /// first page after it (the rest up to `session.last_seq` follows as `event` frames before
    /// any live event). A page holds at most [`HISTORY_PAGE_EVENTS`] events and the whole frame at
    /// most [`HISTORY_PAGE_BYTES`], unless one event alone or the in-flight output is larger.
    pub events: Vec<SessionEvent>,
    /// The turn in flight, if any: what has streamed so far and is not yet durable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlight>,
    /// Events older than `events` exist (only without `after_seq`): page back with
    /// `session/history {before: cursor}`. False from a server that sends the whole log.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub has_more: bool,
    /// The `seq` of the oldest event in `events`, the `before` of the next `session/history`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    /// Events older than `events` whose state still holds (without `after_seq`): the last
    /// `todos`, and the last `background_task` of each command still running, oldest first.
    /// A client applies them to its state (the todo panel, `/tasks`) before `events`; they are
    /// history too, and come again when older pages are read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub standing: Vec<SessionEvent>,
}

/// The not-yet-durable part of a turn in flight, so a client joining mid-stream can draw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    /// Assistant text streamed since the last durable event.
    #[serde(default)]
    pub assistant_text: String,
    /// Output streamed so far by tools that are running, by call id.
    #[serde(default)]
    pub tool_output: Vec<ToolOutputSoFar>,
}

/// Output streamed so far by one running tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOutputSoFar {
    /// The tool call's id.
    pub call_id: String,
    /// The output so far (stdout and stderr interleaved as they came).
    pub text: String,
}

/// Result of `turn/send`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnSendResponse {
    /// The turn started by this message.
    pub turn_id: TurnId,
    /// The durable `seq` of the `user_message` event.
    pub seq: u64,
}

/// Result of `turn/interrupt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnInterruptResponse {
    /// Whether a turn was in flight and is now being interrupted.
    pub interrupted: bool,
}

// ---------------------------------------------------------------------------------------------
// Session events
// ---------------------------------------------------------------------------------------------

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
    },
    /// The sandbox changed state (durable).
    Sandbox {
        /// The new state.
        state: SandboxState,
        /// How long the transition took.
        ms: f64,
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
    /// An event kind this client does not know; skip it.
    #[serde(other)]
    Unknown,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
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
            EventKind::MemoryChanged { .. } => "memory_changed",
            EventKind::Todos { .. } => "todos",
            EventKind::BackgroundTask { .. } => "background_task",
            EventKind::SystemReminder { .. } => "system_reminder",
            EventKind::ApprovalRequested { .. } => "approval_requested",
            EventKind::ApprovalResolved { .. } => "approval_resolved",
            EventKind::ModelChanged { .. } => "model_changed",
            EventKind::Unknown => "unknown",
        }
    }
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

fn is_zero(n: &u64) -> bool {
    *n == 0
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

/// The sandbox lifecycle states (the state machine of docs/ARCHITECTURE.md, `sandbox/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    /// No sandbox exists.
    None,
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
