//! Checkpoints, rewind and fork: the requests and answers of `session/checkpoints`,
//! `session/rewind` and `session/fork`. Every prompt of a session has a checkpoint, the state
//! just before it ran: a snapshot of the workspace and the position in the log. They are
//! numbered from 1 in the order of the session's prompts (its top-level `user_message` events),
//! and a number stays valid for the session's life: a rewind adds to the log, it removes nothing.

use serde::{Deserialize, Serialize};

use crate::ids::SessionId;
use crate::session::SessionInfo;

/// One checkpoint, as `session/checkpoints` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointInfo {
    /// Its number: checkpoint N is the state just before prompt N.
    pub n: u32,
    /// The prompt that followed it.
    pub prompt: String,
    /// Who sent the prompt.
    pub by: String,
    /// When the prompt was sent (RFC 3339 UTC).
    pub ts: String,
    /// The `seq` of the prompt's `user_message`.
    pub seq: u64,
    /// Whether the workspace's files were snapshot (false for a session on a sandbox host, or
    /// a prompt sent before the server made checkpoints): only then can its code be restored.
    pub code: bool,
    /// Whether the prompt is part of the conversation now (false once a rewind went back past
    /// it).
    pub current: bool,
    /// Whether its files were dropped to keep the session's checkpoints within the org's
    /// `checkpoint_bytes` quota (then `code` is false too). Absent when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dropped: bool,
}

/// Result of `session/checkpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCheckpointsResponse {
    /// Oldest first.
    pub checkpoints: Vec<CheckpointInfo>,
}

/// Parameters of `session/rewind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRewindParams {
    /// The session.
    pub session_id: SessionId,
    /// The checkpoint to go back to ([`CheckpointInfo::n`]).
    pub checkpoint: u32,
    /// Restore the workspace's files as they were.
    pub code: bool,
    /// Take the conversation back to just before the checkpoint's prompt.
    pub conversation: bool,
}

/// Result of `session/rewind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRewindResponse {
    /// The `seq` of the [`crate::EventKind::Rewound`] that recorded it.
    pub seq: u64,
    /// The checkpoint's prompt, for the composer (the user edits it and sends it again).
    pub prompt: String,
}

/// Parameters of `session/fork`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionForkParams {
    /// The session to fork.
    pub session_id: SessionId,
    /// Start from this checkpoint (its conversation and files); absent: from now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<u32>,
}

/// Result of `session/fork`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionForkResponse {
    /// The new session (the caller owns it).
    pub session: SessionInfo,
    /// The prompt of the checkpoint it started from, for the composer; absent for a fork of now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
}
