//! The org's shared files — `/memory/**`, `/skills/**` and `/agents/**` — as the wire sees them: the
//! `files/*`, `skills/*` and `agents/*` methods and the records they answer with.
//!
//! Every change of an org file is a new version (`version` counts from 1 per path); a delete is
//! a version too (a tombstone, `deleted: true`), so history is complete and any version can be
//! restored.

use serde::{Deserialize, Serialize};

use crate::ids::SessionId;

/// What made a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileOp {
    /// A whole-file write (`Write`, `files/write`).
    Write,
    /// A compare-and-replace (`Edit`).
    Edit,
    /// A delete (a tombstone).
    Delete,
    /// A copy of an earlier version (`files/restore`).
    Restore,
    /// `skills/import` or `agents/import`.
    Import,
    /// An operation this client does not know.
    #[serde(other)]
    Unknown,
}

impl FileOp {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FileOp::Write => "write",
            FileOp::Edit => "edit",
            FileOp::Delete => "delete",
            FileOp::Restore => "restore",
            FileOp::Import => "import",
            FileOp::Unknown => "unknown",
        }
    }
}

/// One version of an org file (without its content).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileVersion {
    /// Absolute, normalised: `/memory/deploys.md`, `/skills/deploy/SKILL.md`.
    pub path: String,
    /// 1 for the first version of the path, then +1 per change.
    pub version: u64,
    /// What made it.
    pub op: FileOp,
    /// Size of the content in bytes (0 for a tombstone).
    pub size: u64,
    /// SHA-256 of the content, hex (empty for a tombstone).
    pub sha256: String,
    /// The user who made it.
    pub author: String,
    /// The session it was made from (`None` for a person's command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    /// When, RFC 3339 UTC.
    pub at: String,
    /// This version is a delete.
    #[serde(default)]
    pub deleted: bool,
    /// For a restore: the version it copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<u64>,
}

/// Parameters of `files/list`: the live files at or beneath `path` (`/memory`, `/skills/x`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesListParams {
    /// A file or directory under `/memory` or `/skills`; `/` lists both.
    pub path: String,
    /// Also list deleted files (their tombstone is the current version).
    #[serde(default)]
    pub include_deleted: bool,
}

/// Result of `files/list`: current versions, sorted by path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesListResponse {
    /// The files.
    pub files: Vec<FileVersion>,
}

/// Parameters of `files/read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesReadParams {
    /// The file.
    pub path: String,
    /// A past version; the current one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
}

/// Result of `files/read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesReadResponse {
    /// The version read.
    pub file: FileVersion,
    /// Its content (empty for a tombstone).
    pub content: String,
}

/// Parameters of `files/history`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesHistoryParams {
    /// The file.
    pub path: String,
}

/// Result of `files/history`: every version, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesHistoryResponse {
    /// The versions.
    pub versions: Vec<FileVersion>,
}

/// Parameters of `files/write`: a person's whole-file write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesWriteParams {
    /// The file.
    pub path: String,
    /// The new content (UTF-8 text).
    pub content: String,
    /// The version the writer last saw (0: the file must not exist). When given and not the
    /// current version, the write is refused with `conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_version: Option<u64>,
}

/// Parameters of `files/delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesDeleteParams {
    /// The file.
    pub path: String,
    /// As in [`FilesWriteParams::base_version`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_version: Option<u64>,
}

/// Parameters of `files/restore`: make `version`'s content the current one (a new version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesRestoreParams {
    /// The file.
    pub path: String,
    /// The version to copy.
    pub version: u64,
}

/// Result of `files/write`, `files/delete` and `files/restore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesChangeResponse {
    /// The new current version (the unchanged current one when nothing changed).
    pub file: FileVersion,
    /// False when the content was already identical and no version was made.
    pub changed: bool,
}

/// One skill, from its `/skills/<name>/SKILL.md` front matter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillInfo {
    /// The directory name under `/skills`.
    pub name: String,
    /// The front matter's `description` (empty when missing).
    pub description: String,
    /// Live files in the skill's directory, `SKILL.md` included.
    pub files: u64,
    /// The current version of `SKILL.md` (0 when the directory has none).
    pub version: u64,
    /// What is wrong with the skill (no `SKILL.md`, no front matter, a `name` that differs from
    /// the directory), if anything; such a skill is not offered to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Result of `skills/list`, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillsListResponse {
    /// The skills.
    pub skills: Vec<SkillInfo>,
}

/// One file of `skills/import`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportFile {
    /// Relative to `/skills`: `deploy/SKILL.md`, `deploy/scripts/run.sh`.
    pub path: String,
    /// UTF-8 text.
    pub content: String,
}

/// Parameters of `skills/import`: files written under `/skills` in one transaction. A file whose
/// content is already current makes no new version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillsImportParams {
    /// The files.
    pub files: Vec<ImportFile>,
}

/// Result of `skills/import`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillsImportResponse {
    /// The versions made.
    pub written: Vec<FileVersion>,
    /// Files that were already current.
    pub unchanged: u64,
}

/// One agent type of the org, from `/agents/<name>.md`: Claude Code's agent file (front matter
/// `name`, `description`, optional `tools` and `model`; the body is the agent's system prompt).
/// A `general-purpose` type always exists besides these, built in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    /// The file's stem, which the front matter's `name` must equal (lowercase letters, digits,
    /// `-`).
    pub name: String,
    /// The front matter's `description` (empty when missing).
    pub description: String,
    /// The tools it may use, those of its `tools` list that exist here; absent: every tool a
    /// subagent may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// The front matter's `model` (`sonnet`, `opus`, `haiku`, `inherit` or a model id); absent:
    /// the session's model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The file: `/agents/<name>.md`.
    pub path: String,
    /// The file's current version.
    pub version: u64,
    /// Who wrote that version.
    pub author: String,
    /// What was left out of a usable agent (a tool that does not exist here, a cut prompt).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What makes the file unusable as an agent (no front matter, a missing `name` or
    /// `description`, a `name` that differs from the file's, no usable tool), if anything; such
    /// an agent is not offered to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Result of `agents/list`, sorted by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentsListResponse {
    /// The agents, usable or not (see [`AgentInfo::problem`]).
    pub agents: Vec<AgentInfo>,
    /// Files under `/agents` beyond the most the server reads, not listed and not offered.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Parameters of `agents/import`: agent files written under `/agents` in one transaction, each
/// `path` a `NAME.md` (relative to `/agents`). Every file is checked first: one that is not a
/// usable agent refuses the whole request, naming the file and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentsImportParams {
    /// The files.
    pub files: Vec<ImportFile>,
}

/// Result of `agents/import`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentsImportResponse {
    /// The versions made.
    pub written: Vec<FileVersion>,
    /// Files that were already current.
    pub unchanged: u64,
}
