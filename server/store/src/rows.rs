//! The rows the store hands out: users and sessions as the server sees them, how they are read
//! from a query's row and turned into the wire's view.

use outboard_shared::{OrgId, SessionId, SessionStatus, Usage, UserId};

use outboard_base::util::{new_id, now_rfc3339};

use crate::error::StoreError;

/// A user with their org, as authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    /// User id.
    pub id: UserId,
    /// User name.
    pub name: String,
    /// Org id.
    pub org_id: OrgId,
    /// Org name.
    pub org: String,
}

/// A session row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// Session id.
    pub id: SessionId,
    /// Owning org.
    pub org_id: OrgId,
    /// Owning user.
    pub owner_id: UserId,
    /// Owning user's name.
    pub owner: String,
    /// Title.
    pub title: String,
    /// Status.
    pub status: SessionStatus,
    /// `provider/model`.
    pub model: String,
    /// The model's name in the server's catalog; `None`: a session made before names.
    pub model_name: Option<String>,
    /// The sandbox host its workspace and sandbox live on (`serve --sandbox remote`); `None`:
    /// this server.
    pub host: Option<String>,
    /// Last durable seq.
    pub last_seq: u64,
    /// Created, RFC 3339.
    pub created_at: String,
    /// Last event, RFC 3339.
    pub updated_at: String,
    /// Why the session failed for good, when `status` is `failed`.
    pub failure: Option<String>,
    /// The host directory it works in, in place; `None`: one under the data dir.
    pub workspace: Option<String>,
    /// Where the workspace came from.
    pub source: Option<outboard_shared::SessionSource>,
    /// What its sandbox may reach.
    pub network: outboard_shared::SessionNetwork,
    /// The context window it was created with; `None`: the model family's.
    pub context_window: Option<u64>,
    /// The tokens of all its model calls so far.
    pub usage: Usage,
    /// Its todo list in numbers; `None` before its first `TodoWrite`.
    pub todos: Option<outboard_shared::TodoProgress>,
}

impl SessionRow {
    /// A new idle session of `owner`, created now (not stored yet).
    pub fn new(owner: &UserRow, title: &str, model: &str) -> SessionRow {
        let now = now_rfc3339();
        SessionRow {
            id: SessionId(new_id("s")),
            org_id: owner.org_id.clone(),
            owner_id: owner.id.clone(),
            owner: owner.name.clone(),
            title: title.to_owned(),
            status: SessionStatus::Idle,
            model: model.to_owned(),
            model_name: None,
            host: None,
            last_seq: 0,
            created_at: now.clone(),
            updated_at: now,
            failure: None,
            workspace: None,
            source: None,
            network: outboard_shared::SessionNetwork::Org,
            context_window: None,
            usage: Usage::default(),
            todos: None,
        }
    }

    /// The wire view; a session whose context window was never recorded gets
    /// `default_window(model)` (the model catalog's, which the store does not know).
    pub fn info(&self, default_window: fn(&str) -> u64) -> outboard_shared::SessionInfo {
        outboard_shared::SessionInfo {
            id: self.id.clone(),
            title: self.title.clone(),
            owner_id: self.owner_id.clone(),
            owner: self.owner.clone(),
            status: self.status,
            model: self.model.clone(),
            model_name: self.model_name.clone(),
            last_seq: self.last_seq,
            created_at: self.created_at.clone(),
            updated_at: self.updated_at.clone(),
            failure: self.failure.clone(),
            workspace: self.workspace.clone(),
            source: self.source.clone().or_else(|| {
                self.workspace.clone().map(|path| outboard_shared::SessionSource::Local { path })
            }),
            network: self.network,
            attached: Vec::new(),
            usage: Some(self.usage),
            context_window: Some(
                self.context_window.unwrap_or_else(|| default_window(&self.model)),
            ),
            context_window_source: None,
            context_window_from: None,
            todos: self.todos,
        }
    }
}

/// A todo list in numbers: items completed of items listed.
pub fn todo_progress(todos: &[outboard_shared::TodoItem]) -> outboard_shared::TodoProgress {
    let done = todos.iter().filter(|t| t.status == outboard_shared::TodoStatus::Completed).count();
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    outboard_shared::TodoProgress { done: count(done), total: count(todos.len()) }
}

/// How many characters of a first message's first line become the title of a session created
/// without one: the same 60 as the CLI's titles, so a listing looks alike whoever created it.
pub const TITLE_CHARS: usize = 60;

/// The title of a session created without one, from its first user message: the first non-empty
/// line, trimmed, cut at [`TITLE_CHARS`] characters and at `max_bytes` (the org's `title_bytes`
/// quota), always on a character boundary.
pub fn derived_title(message: &str, max_bytes: usize) -> String {
    let first = message.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let mut end = first.char_indices().nth(TITLE_CHARS).map_or(first.len(), |(i, _)| i);
    end = end.min(max_bytes);
    while !first.is_char_boundary(end) {
        end -= 1;
    }
    first[..end].trim_end().to_owned()
}

pub const SESSION_SELECT: &str = "SELECT s.id, s.org_id, s.owner_id, u.name, s.title, s.status,
    s.model, s.last_seq, s.created_at, s.updated_at, s.failure, s.workspace_path,
    s.source, s.context_window, s.usage_input, s.usage_output, s.usage_cache_read,
    s.usage_cache_write, s.network, s.todos_done, s.todos_total, s.model_name, s.host FROM sessions s JOIN users u ON u.id = s.owner_id";

pub fn session_from_row(r: &crate::db::Row<'_>) -> crate::db::Result<SessionRow> {
    Ok(SessionRow {
        id: SessionId(r.get(0)?),
        org_id: OrgId(r.get(1)?),
        owner_id: UserId(r.get(2)?),
        owner: r.get(3)?,
        title: r.get(4)?,
        status: status_from(&r.get::<_, String>(5)?),
        model: r.get(6)?,
        last_seq: r.get::<_, i64>(7)? as u64,
        created_at: r.get(8)?,
        updated_at: r.get(9)?,
        failure: r.get(10)?,
        workspace: r.get(11)?,
        // A source this build cannot read is shown as none rather than failing the listing.
        source: r.get::<_, Option<String>>(12)?.and_then(|json| serde_json::from_str(&json).ok()),
        context_window: r.get::<_, Option<i64>>(13)?.map(|w| w.max(1) as u64),
        usage: Usage {
            input_tokens: r.get::<_, i64>(14)?.max(0) as u64,
            output_tokens: r.get::<_, i64>(15)?.max(0) as u64,
            cache_read_tokens: r.get::<_, i64>(16)?.max(0) as u64,
            cache_write_tokens: r.get::<_, i64>(17)?.max(0) as u64,
        },
        // A network this build does not know is read as none: never wider than asked.
        network: r
            .get::<_, Option<String>>(18)?
            .map_or(outboard_shared::SessionNetwork::Org, |n| {
                n.parse().unwrap_or(outboard_shared::SessionNetwork::None)
            }),
        todos: match (r.get::<_, Option<i64>>(19)?, r.get::<_, Option<i64>>(20)?) {
            (Some(done), Some(total)) => Some(outboard_shared::TodoProgress {
                done: u32::try_from(done.max(0)).unwrap_or(u32::MAX),
                total: u32::try_from(total.max(0)).unwrap_or(u32::MAX),
            }),
            _ => None,
        },
        model_name: r.get(21)?,
        host: r.get(22)?,
    })
}

pub fn source_json(
    source: Option<&outboard_shared::SessionSource>,
) -> Result<Option<String>, StoreError> {
    source
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("session source: {e}")))
}

pub fn status_str(s: SessionStatus) -> &'static str {
    match s {
        SessionStatus::Idle => "idle",
        SessionStatus::Running => "running",
        SessionStatus::Failed => "failed",
        SessionStatus::Unknown => "unknown",
    }
}

pub fn status_from(s: &str) -> SessionStatus {
    match s {
        "idle" => SessionStatus::Idle,
        "running" => SessionStatus::Running,
        "failed" => SessionStatus::Failed,
        _ => SessionStatus::Unknown,
    }
}

/// A `UserRow` from `SELECT u.id, u.name, o.id, o.name`.
pub fn user_from_row(r: &crate::db::Row<'_>) -> crate::db::Result<UserRow> {
    Ok(UserRow { id: UserId(r.get(0)?), name: r.get(1)?, org_id: OrgId(r.get(2)?), org: r.get(3)? })
}
