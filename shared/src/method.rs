//! The method table: every request method declared once (wire name, params, result), and what is
//! derived from it — the [`Method`] enum on the wire, the [`MethodKind`] table, the [`Call`] trait
//! and its marker types in [`methods`] — with the client frames that carry a method
//! ([`ClientFrame`], [`Request`]).

use serde::{Deserialize, Serialize};

use crate::files::{
    AgentsImportParams, AgentsImportResponse, AgentsListResponse, FilesChangeResponse,
    FilesDeleteParams, FilesHistoryParams, FilesHistoryResponse, FilesListParams,
    FilesListResponse, FilesReadParams, FilesReadResponse, FilesRestoreParams, FilesWriteParams,
    SkillsImportParams, SkillsImportResponse, SkillsListResponse,
};
use crate::handshake::Hello;
use crate::ids::RequestId;
use crate::requests::{
    ApprovalAnswerParams, DriveGrantParams, Empty, KillTaskParams, SessionAttachParams,
    SessionCompactParams, SessionCreateParams, SessionHistoryParams, SessionListParams,
    SessionPushParams, SessionRef, SessionSetModeParams, SessionSetModelParams, TurnSendParams,
    UsageReportParams,
};
use crate::responses::{
    ModelsListResponse, SessionAttachResponse, SessionCompactResponse, SessionCreateResponse,
    SessionHistoryResponse, SessionListResponse, SessionPushResponse, SessionRestoreResponse,
    SessionSetModeResponse, SessionSetModelResponse, TurnInterruptResponse, TurnSendResponse,
    UsageReportResponse,
};
use crate::rewind::{
    SessionCheckpointsResponse, SessionForkParams, SessionForkResponse, SessionRewindParams,
    SessionRewindResponse,
};
#[cfg(doc)]
use crate::{events::EventKind, frames::ServerFrame};

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
    /// The driver switches the session's mode (`plan` or `default`), at once: a turn in flight
    /// judges its next tool calls by the new mode. Answered with [`SessionSetModeResponse`] once
    /// the [`EventKind::ModeChanged`] is durable.
    SessionSetMode = "session/set_mode" (SessionSetModeParams) -> SessionSetModeResponse;
    /// The session's checkpoints, one per prompt (the state just before it). Answered with
    /// [`SessionCheckpointsResponse`].
    SessionCheckpoints = "session/checkpoints" (SessionRef) -> SessionCheckpointsResponse;
    /// The driver takes the session back to a checkpoint: its files, its conversation, or both.
    /// Answered with [`SessionRewindResponse`] once the [`EventKind::Rewound`] is durable (and
    /// the files restored); refused while a turn runs.
    SessionRewind = "session/rewind" (SessionRewindParams) -> SessionRewindResponse;
    /// A new session of the caller's, starting from a checkpoint of this one (or from now):
    /// its own copy of the workspace and the conversation up to there. Answered with
    /// [`SessionForkResponse`]; refused while a turn runs.
    SessionFork = "session/fork" (SessionForkParams) -> SessionForkResponse;
}

impl Method {
    /// The wire name of the method, for logs and errors.
    pub fn name(&self) -> &'static str {
        self.kind().name()
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

/// A frame sent by a client. The first one on a connection must be [`ClientFrame::Hello`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    /// Opens the connection: protocol version and bearer token.
    Hello(Hello),
    /// A request; the server answers with a [`ServerFrame::Response`] carrying the same `id`.
    Request(Request),
}
