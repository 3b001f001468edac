//! A session as clients see it: [`SessionInfo`] (as `session/list` lists it and `session/attach`
//! answers) and the descriptors it shares with requests: its status, source, network and todo
//! progress.

use serde::{Deserialize, Serialize};

use crate::events::{PresenceEntry, Usage};
use crate::ids::{SessionId, UserId};

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
    /// Where [`SessionInfo::context_window`] came from (in `session/create` and `session/attach`
    /// answers; absent elsewhere and from an older server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window_source: Option<crate::WindowSource>,
    /// Who said it or what sets it, for a person (see [`crate::ModelInfo`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window_from: Option<String>,
    /// The model's todo list in numbers (absent until its first `TodoWrite`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub todos: Option<TodoProgress>,
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

/// A session's todo list in numbers, as `session/list` shows it (`3/7`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoProgress {
    /// Items completed.
    pub done: u32,
    /// Items in the list.
    pub total: u32,
}
