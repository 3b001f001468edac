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

// The modules, each building only on those before it in this order: ids, media, close,
// connection, handshake, files, websearch, events, session, responses, http, frames, requests,
// method, headless (two doc links name a later item, through the crate root). The crate root re-exports every public item,
// so each keeps its `outboard_shared::X` path.

pub mod close;
pub mod files;
pub mod headless;
pub mod http;

mod connection;
mod events;
mod frames;
mod handshake;
mod ids;
mod media;
mod method;
mod requests;
mod responses;
mod rewind;
mod session;
mod websearch;
mod window;

pub use connection::{
    ConnectionError, ErrorBody, ErrorCode, CLIENT_PING_INTERVAL, MAX_FRAME_BYTES,
    MAX_PRE_HELLO_BYTES,
};
pub use events::{
    ApprovalDecision, ApprovalKind, ApprovalScope, CompactionTrigger, EventKind, FailureClass,
    OrgContextFile, OutputStream, PresenceEntry, Question, QuestionOption, Reasoning, Role,
    SandboxQueue, SandboxState, SessionEvent, SessionMode, StopReason, TaskStatus, TodoItem,
    TodoStatus, ToolCall, Usage,
};
pub use files::{
    AgentInfo, AgentsImportParams, AgentsImportResponse, AgentsListResponse, FileOp, FileVersion,
    FilesChangeResponse, FilesDeleteParams, FilesHistoryParams, FilesHistoryResponse,
    FilesListParams, FilesListResponse, FilesReadParams, FilesReadResponse, FilesRestoreParams,
    FilesWriteParams, ImportFile, SkillInfo, SkillsImportParams, SkillsImportResponse,
    SkillsListResponse,
};
pub use frames::{EventFrame, ProgressFrame, Response, ServerFrame};
pub use handshake::{Hello, UserInfo, Welcome, PROTOCOL_VERSION};
pub use ids::{OrgId, RequestId, SessionId, TurnId, UserId};
pub use media::{Attachment, AttachmentKind, ImageUpload, MAX_MESSAGE_IMAGES};
pub use method::{methods, Call, ClientFrame, Method, MethodKind, Request};
pub use requests::{
    ApprovalAnswerParams, DriveGrantParams, Empty, KillTaskParams, SessionAttachParams,
    SessionCompactParams, SessionCreateParams, SessionHistoryParams, SessionListParams,
    SessionPushParams, SessionRef, SessionSetModeParams, SessionSetModelParams, SourceSpec,
    TurnSendParams, UsageGroup, UsageReportParams, MAX_APPROVAL_REASON_BYTES,
    MAX_QUESTION_ANSWER_BYTES,
};
pub use responses::{
    InFlight, ModelInfo, ModelPrices, ModelsListResponse, SessionAttachResponse,
    SessionCompactResponse, SessionCreateResponse, SessionHistoryResponse, SessionListResponse,
    SessionPushResponse, SessionRestoreResponse, SessionSetModeResponse, SessionSetModelResponse,
    ToolOutputSoFar, TurnInterruptResponse, TurnSendResponse, UploadResponse, UsageReportResponse,
    UsageRow, HISTORY_PAGE_BYTES, HISTORY_PAGE_EVENTS,
};
pub use rewind::{
    CheckpointInfo, SessionCheckpointsResponse, SessionForkParams, SessionForkResponse,
    SessionRewindParams, SessionRewindResponse,
};
pub use session::{SessionInfo, SessionNetwork, SessionSource, SessionStatus, TodoProgress};
pub use websearch::{ProviderSearch, WebSource};
pub use window::{thousands, WindowSource};
