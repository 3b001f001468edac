//! What the methods answer: the `result` of each request (`*Response`, and the records they hold:
//! [`InFlight`], [`ModelInfo`], [`UsageRow`], …), the result of `POST /v1/uploads`, and the size of
//! a page of history those results carry.

use serde::{Deserialize, Serialize};

use crate::events::{Role, SessionEvent, Usage};
use crate::ids::TurnId;
use crate::session::SessionInfo;
#[cfg(doc)]
use crate::{connection::MAX_FRAME_BYTES, events::EventKind};

/// The most events one page of history holds (`session/attach`, `session/history`). 500 events
/// are several screens of transcript (a screen shows a few dozen), yet reading and encoding them
/// takes a few milliseconds, so the first screen of even a huge session arrives at once.
pub const HISTORY_PAGE_EVENTS: usize = 500;

/// The most bytes one page of history takes on the wire, the whole response frame included. A
/// quarter of [`MAX_FRAME_BYTES`]: a page is never near the frame limit even with the in-flight
/// partial output of a running turn added (about 1 MiB at most), and one page is a small enough
/// burst for a slow link. A single event larger than this still goes out alone in its page.
pub const HISTORY_PAGE_BYTES: usize = 1024 * 1024;

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

/// Result of `POST /v1/uploads`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadResponse {
    /// Give it to `session/create` as `source: {type: "upload", upload_id}`.
    pub upload_id: String,
    /// Bytes received.
    pub bytes: u64,
}

/// Result of `usage/report`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReportResponse {
    /// Sorted by key, then model.
    pub rows: Vec<UsageRow>,
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

/// Result of `models/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelsListResponse {
    /// The models, the default first.
    pub models: Vec<ModelInfo>,
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
    /// Where [`ModelInfo::context_window`] came from (absent from an older server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window_source: Option<crate::WindowSource>,
    /// Who said it or what sets it, for a person (`llama.cpp /props at http://…`, or for a
    /// guess the flag and the config key that set the real one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window_from: Option<String>,
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

/// Result of `session/set_model`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSetModelResponse {
    /// The session as it now is (its `model` the new one's label).
    pub session: SessionInfo,
}

/// Result of `session/set_mode`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSetModeResponse {
    /// The session's mode now.
    pub mode: crate::events::SessionMode,
    /// The `seq` of the [`crate::EventKind::ModeChanged`] that recorded it (the last durable
    /// seq when the mode was already that one: nothing was written).
    pub seq: u64,
}
