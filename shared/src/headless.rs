//! The JSONL schema of `outboard run --json`: one JSON object per line.
//!
//! The first line is a [`RunStarted`] (`"type": "run_started"`) carrying [`SCHEMA_VERSION`]; every
//! following line is a [`crate::SessionEvent`] exactly as attached clients receive it (its `type`
//! is the event kind: `assistant_delta`, `tool_result`, `assistant_message`, …); the last line is a
//! [`RunFinished`] with the exit status the process is about to return.
//!
//! When the connection to a remote server ends mid-turn (a restart), the run reconnects and
//! re-attaches after the last durable `seq` it printed; a [`Reconnected`] line marks the spot.
//! The events around it join with no gap and no duplicate: every durable `seq` appears exactly
//! once, in order, so a script can treat the stream as if the connection had never dropped.
//! Transient events (deltas) streamed while disconnected are not replayed; the complete
//! `assistant_message`/`tool_result` that follow them are.

use serde::{Deserialize, Serialize};

use crate::events::Role;
use crate::ids::SessionId;

/// Version of the headless schema. Bumped only for a change that breaks a script reading it.
pub const SCHEMA_VERSION: u32 = 1;

/// The first line of a `--json` run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStarted {
    /// Always `"run_started"`.
    #[serde(rename = "type")]
    pub kind: RunStartedTag,
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The session the run uses (new, or the one given with `--session`).
    pub session_id: SessionId,
    /// The server's URL (`ws://…`); `embedded` is true when the CLI started it in-process.
    pub server: String,
    /// Whether the server runs inside the CLI process.
    pub embedded: bool,
    /// The session's context window in tokens (additive in schema version 1, like the fields
    /// below: absent from an older server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Where it came from; `provider_default` is a guess (see `context_window_from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window_source: Option<crate::WindowSource>,
    /// Who said it or what sets it: for a guess, the flag and the config key that set the real
    /// one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window_from: Option<String>,
}

/// The last line of a `--json` run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFinished {
    /// Always `"run_finished"`.
    #[serde(rename = "type")]
    pub kind: RunFinishedTag,
    /// The session.
    pub session_id: SessionId,
    /// The process exit status: 0 completed, 1 the turn failed, 2 usage, 3 the Outboard server
    /// cannot be reached or refused the token, 4 the model provider cannot be reached, 5 it
    /// refused the credentials, 6 it does not know the model, 7 it was rate-limiting or failing
    /// after the retries, 130 interrupted.
    pub exit_code: i32,
    /// The failure, when `exit_code` is not 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Printed after the run reconnected to the server and re-attached its session (additive in
/// schema version 1: readers that do not know it skip it like an unknown event kind).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconnected {
    /// Always `"reconnected"`.
    #[serde(rename = "type")]
    pub kind: ReconnectedTag,
    /// The session.
    pub session_id: SessionId,
    /// Connection attempts it took, the successful one included (1: at the first try).
    pub attempts: u32,
    /// The last durable `seq` printed before the connection ended: the session was re-attached
    /// after it, so the next durable event printed has `after_seq + 1`.
    pub after_seq: u64,
    /// The role the server gave the new connection (`driver`, or `watcher` when driving was
    /// taken away while disconnected: the run then only watches its turn end).
    pub role: Role,
    /// Why the previous connection ended, as the client saw it.
    pub reason: String,
}

/// Printed while the server prepares the session's workspace (a clone, an unpacked upload),
/// before `run_started` (additive in schema version 1, like `reconnected`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Always `"progress"`.
    #[serde(rename = "type")]
    pub kind: ProgressTag,
    /// `resolving`, `receiving`, `resolving_deltas`, `checking_out`, `uploading`, … (new
    /// phases may appear).
    pub phase: String,
    /// Units done in this phase.
    pub done: u64,
    /// Units in this phase, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// What a person would read.
    pub message: String,
}

/// Printed when the model proposes its plan (`ExitPlanMode`) in a run with `--plan`
/// (additive in schema version 1, like `reconnected`): the plan whole and the org file it was
/// saved as. With `--approve deny` it is the run's last line before `run_finished`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanProposed {
    /// Always `"plan"`.
    #[serde(rename = "type")]
    pub kind: PlanTag,
    /// The session.
    pub session_id: SessionId,
    /// The `ExitPlanMode` call (`outboard approve|deny SESSION CALL_ID` answers it).
    pub call_id: String,
    /// The org file (`/plans/<date>-<slug>.md`; `outboard plans cat PATH`).
    pub path: String,
    /// The plan's text.
    pub plan: String,
}

/// The literal tag `"plan"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlanTag {
    /// `plan`
    #[default]
    #[serde(rename = "plan")]
    Plan,
}

/// The literal tag `"progress"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProgressTag {
    /// `progress`
    #[default]
    #[serde(rename = "progress")]
    Progress,
}

/// The literal tag `"reconnected"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReconnectedTag {
    /// `reconnected`
    #[default]
    #[serde(rename = "reconnected")]
    Reconnected,
}

/// The literal tag `"run_started"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunStartedTag {
    /// `run_started`
    #[default]
    #[serde(rename = "run_started")]
    RunStarted,
}

/// The literal tag `"run_finished"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunFinishedTag {
    /// `run_finished`
    #[default]
    #[serde(rename = "run_finished")]
    RunFinished,
}
