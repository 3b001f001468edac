//! What a client asks with: the `params` of each request method (`*Params`, [`SessionRef`],
//! [`Empty`]) and the values only they carry (where a new session's files come from, how usage is
//! grouped, the longest denial reason).

use serde::{Deserialize, Serialize};

use crate::events::{ApprovalDecision, ApprovalScope, Role, SessionMode};
use crate::ids::SessionId;
use crate::session::SessionNetwork;
#[cfg(doc)]
use crate::{
    events::EventKind,
    frames::ServerFrame,
    responses::{SessionAttachResponse, HISTORY_PAGE_EVENTS},
};

/// No parameters, or no result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// A request that names one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRef {
    /// The session.
    pub session_id: SessionId,
}

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

/// Parameters of `session/list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionListParams {
    /// At most this many sessions, newest activity first (server default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
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

/// Parameters of `turn/send`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnSendParams {
    /// The session.
    pub session_id: SessionId,
    /// The user's message.
    pub text: String,
    /// Images sent with it (at most [`crate::MAX_MESSAGE_IMAGES`]); the server checks and scales
    /// them, and refuses them for a model that takes no images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<crate::ImageUpload>,
}

/// Parameters of `session/drive_grant`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriveGrantParams {
    /// The session.
    pub session_id: SessionId,
    /// The name of the attached watcher who gets driving.
    pub user: String,
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

/// Parameters of `session/compact`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCompactParams {
    /// The session.
    pub session_id: SessionId,
    /// What the summary should keep in particular (`/compact the failing test`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus: Option<String>,
}

/// Parameters of `session/kill_task`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillTaskParams {
    /// The session.
    pub session_id: SessionId,
    /// The background command, as its [`EventKind::BackgroundTask`] named it.
    pub shell_id: String,
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
    /// For a `question` request answered with `allow`: one answer per question, in order (an
    /// option's label, several joined with `, ` for a multiple choice, or any other text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answers: Option<Vec<String>>,
}

/// The longest answer to one question (bytes); the model reads it.
pub const MAX_QUESTION_ANSWER_BYTES: usize = 2048;

/// Parameters of `session/set_mode`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSetModeParams {
    /// The session.
    pub session_id: SessionId,
    /// The mode from now on.
    pub mode: SessionMode,
}

/// The longest reason a person may give with a denial (bytes); the model reads it.
pub const MAX_APPROVAL_REASON_BYTES: usize = 2048;

/// Parameters of `session/set_model`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSetModelParams {
    /// The session.
    pub session_id: SessionId,
    /// A model's name from `models/list`.
    pub model: String,
}
