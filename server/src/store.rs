//! The store: one SQLite file (`outboard.db` in the data dir, WAL mode) owned by one thread.
//!
//! Every other part of the server talks to it through [`Store`], a cloneable handle that sends a
//! closure to the owning thread over a bounded channel and awaits the answer. One owner means no
//! connection pool, no `SQLITE_BUSY` between our own writers, and a natural order of commits.
//!
//! Schema (append-only migrations in [`MIGRATIONS`]; a migration once shipped is never edited):
//! - `orgs`, `users` (unique name per org), `tokens` (SHA-256 of each bearer token, never the
//!   token itself; several per user so the embedded mode can mint one per process);
//! - `sessions` (owner, title, status, model label, `last_seq`, and `workspace_path`: the host
//!   directory an embedded session works in, in place; NULL for a directory under the data dir);
//! - `events`: the per-session log, the source of truth for a session. Primary key
//!   `(session_id, seq)`, so a duplicate `seq` is impossible, and [`Store::append_event`]
//!   checks in the same transaction that `seq` is exactly `last_seq + 1`, so a gap is impossible
//!   too. Each row holds the whole [`EventKind`] as JSON plus its `kind` and `turn_id` in columns,
//!   so recovery can find unfinished turns with an index instead of parsing every payload.
//! - `org_files`, `org_heads`, `org_file_changes`: the org's shared `/memory`, `/skills`, `/agents`
//!   files, every version kept; the queries live in [`crate::orgfs`], which runs them here
//!   through [`Store::call`]; `org_file_usage` counts their versions and bytes per org.
//! - `org_quotas`: per-org overrides of the quotas' defaults ([`crate::quota`]).
//! - `drive_grants`: the user a session's driving was granted to, if not its owner
//!   ([`crate::hub`]).
//! - `model_usage`: every model call's tokens, with the session's totals in `sessions.usage_*`
//!   and its `context_window` (written with the `assistant_message` or `compaction` that
//!   carries the usage);
//! - `sessions.source` (where the workspace came from), `org_secrets` (sealed credentials,
//!   [`crate::secrets`]), `session_pushes` (branches `session/push` created) and `uploads`
//!   (working trees waiting for their session, [`crate::uploads`]).
//! - `org_mcp_servers`: the org's MCP servers as defined, templates and all ([`crate::mcp`]).
//! - `org_tool_policies`: per org and tool pattern, `allow`, `ask` or `deny`
//!   ([`crate::toolpolicy`]).
//!
//! Durability: WAL with `synchronous = NORMAL` by default: a commit survives a crash of the
//! process (the WAL is written before `COMMIT` returns) but the last commits may be lost on power
//! loss. `FULL` (fsync per commit) is available through [`Durability::Full`];
//! `scripts/bench.sh` prints what each costs.

use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;

use outboard_shared::{
    EventKind, OrgId, SessionEvent, SessionId, SessionStatus, Usage, UsageGroup, UsageRow, UserId,
};
use tokio::sync::oneshot;

pub mod db;
pub mod lease;
pub mod pg;
pub mod pgtest;

use db::{params, Db, OptionalExtension};

use crate::auth::hash_token;
use outboard_base::util::{new_id, now_rfc3339, random_token};

/// Requests queued for the store thread. Commits take tens of microseconds, so 1024 queued jobs
/// is far more than a healthy server ever holds; when it is full, callers wait (backpressure)
/// instead of growing memory without bound.
const STORE_QUEUE: usize = 1024;

/// Append-only migrations: index + 1 is the schema version.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE orgs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    created_at  TEXT NOT NULL
);
CREATE TABLE users (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    name        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (org_id, name)
);
CREATE TABLE tokens (
    token_hash  TEXT PRIMARY KEY,
    user_id     TEXT NOT NULL REFERENCES users(id),
    label       TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    owner_id    TEXT NOT NULL REFERENCES users(id),
    title       TEXT NOT NULL,
    status      TEXT NOT NULL,
    model       TEXT NOT NULL,
    last_seq    INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE INDEX sessions_by_org ON sessions(org_id, updated_at);
CREATE TABLE events (
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    turn_id     TEXT,
    payload     TEXT NOT NULL,
    ts          TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"#,
    r#"
-- The turn in flight, kept in the same transaction as the events that open and close it, so
-- recovery finds unfinished turns with one indexed query and `status` can never disagree with the
-- log.
ALTER TABLE sessions ADD COLUMN open_turn TEXT;
ALTER TABLE sessions ADD COLUMN failure TEXT;
UPDATE sessions SET open_turn = (
    SELECT e.turn_id FROM events e
    WHERE e.session_id = sessions.id AND e.kind = 'turn_started'
      AND NOT EXISTS (SELECT 1 FROM events f WHERE f.session_id = e.session_id
                      AND f.turn_id = e.turn_id AND f.kind IN ('turn_completed', 'turn_failed'))
    ORDER BY e.seq DESC LIMIT 1);
CREATE INDEX sessions_open_turn ON sessions(open_turn) WHERE open_turn IS NOT NULL;
"#,
    r#"
-- The org's shared files (/memory, /skills): every version ever written, a delete being a
-- version with no content. `change` is the org-wide change counter at the time of the version,
-- so a projection can fetch what changed since it last looked.
CREATE TABLE org_files (
    id             INTEGER PRIMARY KEY,
    org_id         TEXT NOT NULL REFERENCES orgs(id),
    path           TEXT NOT NULL,
    version        INTEGER NOT NULL,
    op             TEXT NOT NULL,
    content        TEXT,
    size           INTEGER NOT NULL,
    sha256         TEXT NOT NULL,
    author         TEXT NOT NULL,
    session_id     TEXT,
    restored_from  INTEGER,
    at             TEXT NOT NULL,
    at_ms          INTEGER NOT NULL,
    change         INTEGER NOT NULL,
    UNIQUE (org_id, path, version)
);
-- The current version of each path, maintained in the same transaction as the version.
CREATE TABLE org_heads (
    org_id   TEXT NOT NULL,
    path     TEXT NOT NULL,
    file_id  INTEGER NOT NULL REFERENCES org_files(id),
    version  INTEGER NOT NULL,
    deleted  INTEGER NOT NULL,
    change   INTEGER NOT NULL,
    PRIMARY KEY (org_id, path)
) WITHOUT ROWID;
CREATE INDEX org_heads_by_change ON org_heads(org_id, change);
CREATE TABLE org_file_changes (
    org_id  TEXT PRIMARY KEY,
    change  INTEGER NOT NULL
) WITHOUT ROWID;
"#,
    r#"
-- Per-org quotas (`crate::quota`): a row overrides the default of its key; no row, the default.
CREATE TABLE org_quotas (
    org_id  TEXT NOT NULL REFERENCES orgs(id),
    key     TEXT NOT NULL,
    value   INTEGER NOT NULL,
    set_at  TEXT NOT NULL,
    PRIMARY KEY (org_id, key)
) WITHOUT ROWID;
-- What the org's files hold, every version counted, kept in the same transaction as each
-- version (`orgfs::apply`) so a quota check is one indexed read instead of a scan.
CREATE TABLE org_file_usage (
    org_id    TEXT PRIMARY KEY,
    versions  INTEGER NOT NULL,
    bytes     INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO org_file_usage (org_id, versions, bytes)
    SELECT org_id, COUNT(*), COALESCE(SUM(size), 0) FROM org_files GROUP BY org_id;
-- Sessions created per org in the last hour (`sessions_per_hour`).
CREATE INDEX sessions_by_org_created ON sessions(org_id, created_at);
"#,
    r#"
-- Driving granted to a user who does not own the session (`session/drive_grant`), kept until the
-- owner takes it back or it is granted on (`crate::hub`): the grantee's new connection (after a
-- reconnect, or to a restarted server) may attach as driver again.
CREATE TABLE drive_grants (
    session_id  TEXT PRIMARY KEY REFERENCES sessions(id),
    user_id     TEXT NOT NULL REFERENCES users(id),
    granted_at  TEXT NOT NULL
) WITHOUT ROWID;
"#,
    r#"
-- The host directory a session works in, in place (embedded mode), recorded so that a later
-- `--session ID` from anywhere finds it; NULL: `<data dir>/workspaces/<id>`.
ALTER TABLE sessions ADD COLUMN workspace_path TEXT;
"#,
    r#"
-- Where a session's workspace came from (`SessionSource` as JSON: a repository at a commit, an
-- upload, a local path); NULL: an empty directory of the server's.
ALTER TABLE sessions ADD COLUMN source TEXT;
-- Org credentials for hosts (`crate::secrets`): the value sealed with the server's key, so a copy
-- of this file alone does not reveal it.
CREATE TABLE org_secrets (
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    host        TEXT NOT NULL,
    name        TEXT NOT NULL,
    nonce       BLOB NOT NULL,
    sealed      BLOB NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (org_id, host, name)
) WITHOUT ROWID;
-- Branches `session/push` created (`crate::workspace`): a push only ever creates a branch or
-- fast-forwards one an earlier push of the same session created.
CREATE TABLE session_pushes (
    remote_url  TEXT NOT NULL,
    branch      TEXT NOT NULL,
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    commit_id   TEXT NOT NULL,
    pushed_at   TEXT NOT NULL,
    PRIMARY KEY (remote_url, branch)
) WITHOUT ROWID;
-- Working trees uploaded for a session not created yet (`crate::uploads`); the archive is a file
-- under `<data dir>/uploads/`.
CREATE TABLE uploads (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    user_id     TEXT NOT NULL REFERENCES users(id),
    bytes       INTEGER NOT NULL,
    branch      TEXT,
    created_at  TEXT NOT NULL
) WITHOUT ROWID;
"#,
    r#"
-- Where an org's sandboxes may connect (`crate::netpolicy`): the policy as JSON; no row, the
-- default (`registries`).
CREATE TABLE org_network (
    org_id  TEXT PRIMARY KEY REFERENCES orgs(id),
    policy  TEXT NOT NULL,
    set_at  TEXT NOT NULL
) WITHOUT ROWID;
-- Every connection a sandbox's proxy made or refused, newest last, trimmed per org.
CREATE TABLE network_log (
    id           INTEGER PRIMARY KEY,
    org_id       TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    user         TEXT NOT NULL,
    host         TEXT NOT NULL,
    port         INTEGER NOT NULL,
    allowed      INTEGER NOT NULL,
    reason       TEXT,
    bytes_up     INTEGER NOT NULL,
    bytes_down   INTEGER NOT NULL,
    duration_ms  INTEGER NOT NULL,
    at           TEXT NOT NULL
);
CREATE INDEX network_log_by_org ON network_log(org_id, id);
"#,
    r#"
-- What a session asked of the network (`netpolicy::Narrowing` as its snake_case name); NULL: the
-- org's policy.
ALTER TABLE sessions ADD COLUMN network TEXT;
-- Whether the proxy terminated the connection's TLS to inject an org secret.
ALTER TABLE network_log ADD COLUMN intercepted INTEGER NOT NULL DEFAULT 0;
-- An org secret bound to outbound HTTP for its host (`admin secret set --inject-header`): the
-- header template (`{}` is the value), the placeholder variables the sandbox gets (JSON array of
-- names), and extra roots (PEM) that verify the host's certificate.
ALTER TABLE org_secrets ADD COLUMN inject_header TEXT;
ALTER TABLE org_secrets ADD COLUMN placeholders TEXT;
ALTER TABLE org_secrets ADD COLUMN upstream_ca TEXT;
-- The org's sandbox CA (`netproxy::ca`): its certificate, and its key sealed like a secret.
CREATE TABLE org_ca (
    org_id      TEXT PRIMARY KEY REFERENCES orgs(id),
    subject     TEXT NOT NULL,
    cert_pem    TEXT NOT NULL,
    nonce       BLOB NOT NULL,
    sealed_key  BLOB NOT NULL,
    created_at  TEXT NOT NULL
) WITHOUT ROWID;
"#,
    r#"
-- Schema 10 (after the network's 9): token usage. Each model call's usage, written in the
-- transaction of the `assistant_message` that carries it (`model_usage`; kept when its session is
-- deleted, since the tokens were spent), the session's running totals beside its row, and the
-- context window a session was created with (NULL: the server's, or its model family's).
ALTER TABLE sessions ADD COLUMN context_window INTEGER;
ALTER TABLE sessions ADD COLUMN usage_input INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_output INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_cache_read INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN usage_cache_write INTEGER NOT NULL DEFAULT 0;
CREATE TABLE model_usage (
    session_id          TEXT NOT NULL,
    seq                 INTEGER NOT NULL,
    turn_id             TEXT,
    org_id              TEXT NOT NULL,
    user_id             TEXT NOT NULL,
    model               TEXT NOT NULL,
    input_tokens        INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cache_read_tokens   INTEGER NOT NULL,
    cache_write_tokens  INTEGER NOT NULL,
    at                  TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE INDEX model_usage_by_org ON model_usage(org_id, at);
"#,
    r#"
-- Schema 11: the model's todo list in numbers (`TodoWrite`), written in the transaction of the
-- `todos` event that carries the list, so `session/list` shows progress without reading logs.
-- NULL until the session's first `TodoWrite`.
ALTER TABLE sessions ADD COLUMN todos_done INTEGER;
ALTER TABLE sessions ADD COLUMN todos_total INTEGER;
"#,
    r#"
-- Schema 12: subagents (`Task`). A subagent's events are in its session's log like the
-- session's own, each naming the `call_id` of the `Task` call that runs it; NULL for the
-- session's own events.
ALTER TABLE events ADD COLUMN parent TEXT;
"#,
    r#"
-- Schema 13: the org's MCP servers (`crate::mcp`, `admin mcp add`). `spec` is the transport as
-- JSON (URL and header templates, or command, arguments and environment templates): templates
-- name secrets (`{secret:NAME}`), never hold their values.
CREATE TABLE org_mcp_servers (
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    name        TEXT NOT NULL,
    spec        TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (org_id, name)
) WITHOUT ROWID;
"#,
    r#"
-- Schema 14: tool policies (`admin policy set`): per org and tool pattern, allow | ask | deny.
CREATE TABLE org_tool_policies (
    org_id    TEXT NOT NULL REFERENCES orgs(id),
    pattern   TEXT NOT NULL,
    decision  TEXT NOT NULL CHECK (decision IN ('allow', 'ask', 'deny')),
    set_at    TEXT NOT NULL,
    PRIMARY KEY (org_id, pattern)
) WITHOUT ROWID;
"#,
    r#"
-- Schema 15: models per session (`crate::models`). `model_name` is the session's model by its
-- name in the server's catalog (NULL: written before names, found by its `model` label); both
-- change in the transaction of a `model_changed` event.
ALTER TABLE sessions ADD COLUMN model_name TEXT;
"#,
    r#"
-- Schema 16: sandbox hosts (`crate::remote::registry`, `admin hosts add`). The join token is
-- sealed with the server's secret key (bound to the host's name); `pin` is the SHA-256 of the
-- host's certificate, pinned at the first join; `capacity` is what the host told at its last
-- join. `sessions.host` names the host a session's workspace lives on (NULL: this server).
CREATE TABLE sandbox_hosts (
    name          TEXT PRIMARY KEY,
    url           TEXT NOT NULL,
    token_nonce   BLOB NOT NULL,
    token_sealed  BLOB NOT NULL,
    pin           TEXT,
    capacity      INTEGER,
    added_at      TEXT NOT NULL,
    joined_at     TEXT
) WITHOUT ROWID;
ALTER TABLE sessions ADD COLUMN host TEXT;
CREATE INDEX sessions_by_host ON sessions(host) WHERE host IS NOT NULL;
"#,
    r#"
-- Several server nodes on one store (`crate::store::lease`): the nodes that heartbeat, and which
-- node owns each session with work to do, with the epoch that fences a node that lost it.
CREATE TABLE nodes (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    url           TEXT,
    state         TEXT NOT NULL,
    started_at    TEXT NOT NULL,
    heartbeat_at  TEXT NOT NULL,
    heartbeat_ms  INTEGER NOT NULL,
    lease_ms      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE session_leases (
    session_id   TEXT PRIMARY KEY REFERENCES sessions(id),
    node_id      TEXT NOT NULL,
    epoch        INTEGER NOT NULL,
    expires_ms   INTEGER NOT NULL,
    acquired_at  TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX session_leases_by_node ON session_leases(node_id);
"#,
    r#"
-- Schema 18: a node's process id, so a node starting on the same host can tell a predecessor
-- that was killed (its process is gone) from one still serving, and take its leases at once.
ALTER TABLE nodes ADD COLUMN pid INTEGER;
"#,
];

/// How long a store worker waits between attempts to connect again to PostgreSQL, at most.
const RECONNECT_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// A new connection to `url` for a worker whose connection broke: tried until it works, backing
/// off up to [`RECONNECT_BACKOFF_MAX`] (the worker's jobs wait; the queue is bounded, so callers
/// wait too rather than pile up).
fn reconnected(url: &str) -> Db {
    let mut wait = std::time::Duration::from_millis(100);
    loop {
        match pg::connect(url) {
            Ok(client) => {
                tracing::info!("connected to PostgreSQL again");
                return Db::postgres(client);
            }
            Err(e) => {
                tracing::warn!("cannot connect to PostgreSQL again: {e}; retrying in {wait:?}");
                std::thread::sleep(wait);
                wait = (wait * 2).min(RECONNECT_BACKOFF_MAX);
            }
        }
    }
}

/// How hard a commit is pushed to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// WAL + `synchronous=NORMAL`: survives a process crash; may lose the last commits on power loss.
    Normal,
    /// WAL + `synchronous=FULL`: fsync on every commit; survives power loss.
    Full,
}

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite said no.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL said no (or its connection broke).
    #[error("database error: {}", pg::describe(.0))]
    Postgres(#[from] postgres::Error),
    /// A query that must return a row returned none.
    #[error("database error: the query returned no row")]
    NoRows,
    /// A cell is not of the type its reader expects.
    #[error("database error: column {column} is not {want}")]
    Type {
        /// The column index.
        column: usize,
        /// What was expected.
        want: &'static str,
    },
    /// This node's lease on the session is gone (another node took it over): it must not write
    /// for the session again.
    #[error("session {0} is owned by another node now")]
    Fenced(String),
    /// A stored payload does not decode.
    #[error("corrupt event payload in the store: {0}")]
    Corrupt(String),
    /// A `seq` other than `last_seq + 1` was appended (a bug in the caller).
    #[error("event seq {got} does not follow the session's last seq {last}")]
    SeqGap {
        /// The session's last seq.
        last: u64,
        /// The seq offered.
        got: u64,
    },
    /// The name is taken (user name within an org).
    #[error("{0} already exists")]
    Exists(String),
    /// Something was not found.
    #[error("{0} not found")]
    NotFound(String),
    /// The store thread is gone (the server is shutting down).
    #[error("the store is closed")]
    Closed,
    /// The database file could not be opened.
    #[error("cannot open the database {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// The PostgreSQL server could not be reached or refused us (the URL's password is never
    /// part of the message).
    #[error("cannot connect to PostgreSQL at {target}: {reason}")]
    Connect {
        /// `host:port/dbname` of the URL.
        target: String,
        /// Why.
        reason: String,
    },
    /// The OS could not produce a random token.
    #[error("cannot generate a token: {0}")]
    Random(std::io::Error),
}

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

    /// The wire view.
    pub fn info(&self) -> outboard_shared::SessionInfo {
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
                self.context_window
                    .unwrap_or_else(|| crate::llm::context::context_window(&self.model)),
            ),
            todos: self.todos,
        }
    }
}

type Job = Box<dyn FnOnce(&mut Db) + Send>;

/// A handle to the store thread. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    tx: tokio::sync::mpsc::Sender<Job>,
    backend: db::Backend,
    url: Option<std::sync::Arc<str>>,
    node: lease::Node,
}

/// Where the store lives (`--store`, `OUTBOARD_STORE`). Its `Debug` shows no credentials (a
/// configuration printed for a bug report must not carry the database password).
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// The SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database, with the connections this node keeps to it.
    Postgres {
        /// `postgres://user@host:port/db`.
        url: String,
        /// Connections (store worker threads).
        pool: usize,
    },
}

/// Connections a node keeps to PostgreSQL by default.
pub const DEFAULT_PG_POOL: usize = 8;

impl std::fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            StoreSpec::Postgres { pool, .. } => f
                .debug_struct("Postgres")
                .field("target", &self.describe())
                .field("pool", pool)
                .finish(),
        }
    }
}

impl StoreSpec {
    /// `postgres://…`/`postgresql://…` is PostgreSQL; `sqlite:PATH` or any other text is a
    /// SQLite file.
    pub fn parse(text: &str) -> StoreSpec {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            StoreSpec::Postgres { url: text.to_owned(), pool: DEFAULT_PG_POOL }
        } else {
            StoreSpec::Sqlite(PathBuf::from(text.strip_prefix("sqlite:").unwrap_or(text)))
        }
    }

    /// For messages and logs: the file, or the server without credentials.
    pub fn describe(&self) -> String {
        match self {
            StoreSpec::Sqlite(p) => p.display().to_string(),
            StoreSpec::Postgres { url, .. } => format!("postgres://{}", pg::target_of(url)),
        }
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path`, migrates it, and starts its thread.
    pub fn open(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        Store::open_observed(path, durability, None)
    }

    /// [`Store::open`], timing each job of the thread into `metrics`.
    pub fn open_observed(
        path: &Path,
        durability: Durability,
        metrics: Option<crate::metrics::StoreMetrics>,
    ) -> Result<Store, StoreError> {
        let mut conn = Db::sqlite(open_connection(path, durability)?);
        migrate(&mut conn)?;
        Store::start(vec![conn], metrics, None)
    }

    /// Opens the store `spec` names: a `postgres://` (or `postgresql://`) URL, or a SQLite file
    /// (`sqlite:PATH` or a bare path).
    pub fn open_spec(
        spec: &StoreSpec,
        durability: Durability,
        metrics: Option<crate::metrics::StoreMetrics>,
    ) -> Result<Store, StoreError> {
        match spec {
            StoreSpec::Sqlite(path) => Store::open_observed(path, durability, metrics),
            StoreSpec::Postgres { url, pool } => {
                // The blocking driver runs a small runtime of its own per connection, which
                // cannot start inside the caller's (an async test, a server's start): connecting
                // and migrating happen on a thread of their own.
                let (url2, pool) = (url.clone(), (*pool).max(1));
                let conns = std::thread::Builder::new()
                    .name("outboard-store-open".into())
                    .spawn(move || -> Result<Vec<Db>, StoreError> {
                        let mut conns = Vec::with_capacity(pool);
                        for _ in 0..pool {
                            conns.push(Db::postgres(pg::connect(&url2)?));
                        }
                        if let Some(first) = conns.first_mut() {
                            pg::migrate(first)?;
                        }
                        Ok(conns)
                    })
                    .map_err(|e| StoreError::Corrupt(format!("cannot start a thread: {e}")))?
                    .join()
                    .map_err(|_| {
                        StoreError::Corrupt("the store's opening thread panicked".into())
                    })??;
                let mut store = Store::start(conns, metrics, Some(url.clone()))?;
                store.backend = db::Backend::Postgres;
                store.url = Some(std::sync::Arc::from(url.as_str()));
                Ok(store)
            }
        }
    }

    /// One worker thread per connection, all taking jobs from the one bounded queue. With
    /// `reconnect` (a PostgreSQL URL), a worker whose connection broke connects again before its
    /// next job (the job that met the break failed with its error; nothing half-done stays, as
    /// the server rolled its transaction back).
    fn start(
        conns: Vec<Db>,
        metrics: Option<crate::metrics::StoreMetrics>,
        reconnect: Option<String>,
    ) -> Result<Store, StoreError> {
        let (tx, rx) = tokio::sync::mpsc::channel::<Job>(STORE_QUEUE);
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        for (i, mut conn) in conns.into_iter().enumerate() {
            let (rx, metrics, reconnect) = (rx.clone(), metrics.clone(), reconnect.clone());
            let (ready_tx, ready_rx) = std_mpsc::channel::<()>();
            std::thread::Builder::new()
                .name(format!("outboard-store-{i}"))
                .spawn(move || {
                    let _ = ready_tx.send(());
                    loop {
                        // The lock is held only while waiting for the next job, so the other
                        // workers run theirs meanwhile.
                        let job = match rx.lock() {
                            Ok(mut rx) => rx.blocking_recv(),
                            Err(_) => None,
                        };
                        let Some(job) = job else { break };
                        if let Some(url) = reconnect.as_deref().filter(|_| conn.is_broken()) {
                            conn = reconnected(url);
                        }
                        let started = std::time::Instant::now();
                        job(&mut conn);
                        if let Some(m) = &metrics {
                            m.job_done(started.elapsed());
                        }
                    }
                })
                .map_err(|e| StoreError::Corrupt(format!("cannot start the store thread: {e}")))?;
            let _ = ready_rx.recv();
        }
        Ok(Store {
            tx,
            backend: db::Backend::Sqlite,
            url: None,
            node: lease::Node::new(lease::DEFAULT_LEASE),
        })
    }

    /// This node: its id and the session leases it holds ([`lease`]).
    pub fn node(&self) -> &lease::Node {
        &self.node
    }

    /// Sets the lease time (before any lease is taken: `serve --lease`).
    pub fn set_lease_time(&mut self, lease: std::time::Duration) {
        self.node = lease::Node::new(lease);
    }

    /// The ids of org file versions committed by any node of this store (`None` on SQLite,
    /// where this process is the only writer): see [`pg::listen`]. At most `capacity` wait.
    pub fn org_file_changes(&self, capacity: usize) -> Option<tokio::sync::mpsc::Receiver<i64>> {
        let url = self.url.as_deref()?.to_owned();
        let mut raw = pg::listen(url, pg::ORG_FILES_CHANNEL, capacity);
        let (tx, rx) = tokio::sync::mpsc::channel(capacity);
        tokio::spawn(async move {
            while let Some(payload) = raw.recv().await {
                if let Ok(id) = payload.parse() {
                    if tx.send(id).await.is_err() {
                        return;
                    }
                }
            }
        });
        Some(rx)
    }

    /// Takes the lease on `session` for this node, or says who holds it.
    pub async fn acquire_lease(
        &self,
        session: &SessionId,
    ) -> Result<Result<lease::Lease, lease::Held>, StoreError> {
        let (node, session) = (self.node.clone(), session.clone());
        self.call(move |c| lease::acquire(c, &node, &session)).await
    }

    /// Renews this node's leases and heartbeat; the sessions it lost.
    pub async fn renew_leases(&self) -> Result<Vec<SessionId>, StoreError> {
        let node = self.node.clone();
        self.call(move |c| lease::renew(c, &node)).await
    }

    /// Gives the lease on `session` taken at `epoch` back (`None`: whichever this node holds).
    pub async fn release_lease(
        &self,
        session: &SessionId,
        epoch: Option<i64>,
    ) -> Result<(), StoreError> {
        let (node, session) = (self.node.clone(), session.clone());
        self.call(move |c| lease::release(c, &node, &session, epoch)).await
    }

    /// Gives back every lease this node holds; how many.
    pub async fn release_all_leases(&self) -> Result<usize, StoreError> {
        let node = self.node.clone();
        self.call(move |c| lease::release_all(c, &node)).await
    }

    /// The sessions with an open turn that no other node holds a live lease on
    /// ([`lease::orphaned`]).
    pub async fn orphaned_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let node = self.node.clone();
        self.call(move |c| lease::orphaned(c, &node)).await
    }

    /// Records this node as `state` (`serving`, `draining`, `stopped`) at `url`.
    pub async fn heartbeat(&self, name: &str, url: &str, state: &str) -> Result<(), StoreError> {
        let (node, name, url, state) =
            (self.node.clone(), name.to_owned(), url.to_owned(), state.to_owned());
        self.call(move |c| {
            lease::heartbeat(c, &node, &name, &url, &state)?;
            if state == "serving" {
                // A predecessor on this host that was killed holds leases nobody renews.
                let expired = lease::expire_dead_here(c, &node, &name)?;
                if expired > 0 {
                    tracing::info!(
                        leases = expired,
                        "took over the leases of a node of this host that died"
                    );
                }
            }
            Ok(())
        })
        .await
    }

    /// Records this node, if it registered, as `state` (`draining`, `stopped`): a stopped node's
    /// leases are left to expire or to be given back by their sessions.
    pub async fn set_node_state(&self, state: &'static str) -> Result<(), StoreError> {
        let node = self.node.clone();
        self.call(move |c| {
            c.execute(
                "UPDATE nodes SET state = ?4, heartbeat_at = ?2, heartbeat_ms = ?3 WHERE id = ?1",
                params![
                    node.id.as_ref(),
                    outboard_base::util::now_rfc3339(),
                    lease::now_ms(),
                    state
                ],
            )
            .map(drop)
        })
        .await
    }

    /// The nodes that heartbeat within `within`.
    pub async fn nodes(
        &self,
        within: std::time::Duration,
    ) -> Result<Vec<lease::NodeRow>, StoreError> {
        self.call(move |c| lease::nodes(c, within)).await
    }

    /// The engine underneath.
    pub fn backend(&self) -> db::Backend {
        self.backend
    }

    /// The PostgreSQL URL it was opened with (for the listener connection); `None` on SQLite.
    pub fn postgres_url(&self) -> Option<&str> {
        self.url.as_deref()
    }

    /// Jobs queued for the store thread and not yet taken (at most [`STORE_QUEUE`]).
    pub fn queue_depth(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Runs `f` on the store thread and returns its result.
    pub async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let _ = reply_tx.send(f(conn));
        });
        self.tx.send(job).await.map_err(|_| StoreError::Closed)?;
        reply_rx.await.map_err(|_| StoreError::Closed)?
    }

    /// How many sessions have each status (for `outboard_sessions`).
    pub async fn session_counts(&self) -> Result<Vec<(SessionStatus, i64)>, StoreError> {
        self.call(|c| {
            let mut stmt = c.prepare("SELECT status, COUNT(*) FROM sessions GROUP BY status")?;
            let rows = stmt.query_map((), |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
            let mut counts = Vec::new();
            for row in rows {
                let (status, n) = row?;
                counts.push((status_from(&status), n));
            }
            Ok(counts)
        })
        .await
    }

    /// Creates the org if missing and the user (failing if the name is taken), and returns the
    /// user with a fresh token.
    pub async fn add_user(&self, org: &str, user: &str) -> Result<(UserRow, String), StoreError> {
        let (org, user) = (org.to_owned(), user.to_owned());
        self.call(move |c| {
            let tx = c.transaction()?;
            let org_id = ensure_org(&tx, &org)?;
            if find_user(&tx, &org_id, &user)?.is_some() {
                return Err(StoreError::Exists(format!("user {user:?} in org {org:?}")));
            }
            let row = insert_user(&tx, &org_id, &org, &user)?;
            let token = insert_token(&tx, &row.id, "admin")?;
            tx.commit()?;
            Ok((row, token))
        })
        .await
    }

    /// Creates the org and user if missing and returns a fresh token for the user (the embedded
    /// mode mints one per process).
    pub async fn mint_token(
        &self,
        org: &str,
        user: &str,
        label: &str,
    ) -> Result<(UserRow, String), StoreError> {
        let (org, user, label) = (org.to_owned(), user.to_owned(), label.to_owned());
        self.call(move |c| {
            let tx = c.transaction()?;
            let org_id = ensure_org(&tx, &org)?;
            let row = match find_user(&tx, &org_id, &user)? {
                Some(row) => row,
                None => insert_user(&tx, &org_id, &org, &user)?,
            };
            let token = insert_token(&tx, &row.id, &label)?;
            tx.commit()?;
            Ok((row, token))
        })
        .await
    }

    /// The user a token belongs to, if any.
    pub async fn authenticate(&self, token: &str) -> Result<Option<UserRow>, StoreError> {
        let hash = hash_token(token);
        self.call(move |c| {
            c.query_row(
                "SELECT u.id, u.name, o.id, o.name FROM tokens t
                 JOIN users u ON u.id = t.user_id JOIN orgs o ON o.id = u.org_id
                 WHERE t.token_hash = ?1",
                [hash],
                user_from_row,
            )
            .optional()
        })
        .await
    }

    /// Creates a session owned by `owner` (no quota check: [`crate::quota::create_session`]
    /// is the way in for requests).
    pub async fn create_session(
        &self,
        owner: &UserRow,
        title: &str,
        model: &str,
    ) -> Result<SessionRow, StoreError> {
        let row = SessionRow::new(owner, title, model);
        let r = row.clone();
        self.call(move |c| insert_session(c, &r)).await?;
        Ok(row)
    }

    /// One session, if it exists.
    pub async fn session(&self, id: &SessionId) -> Result<Option<SessionRow>, StoreError> {
        let id = id.0.clone();
        self.call(move |c| {
            c.query_row(&format!("{SESSION_SELECT} WHERE s.id = ?1"), [id], session_from_row)
                .optional()
        })
        .await
    }

    /// The sessions of an org, most recent activity first.
    pub async fn list_sessions(
        &self,
        org: &OrgId,
        limit: u32,
    ) -> Result<Vec<SessionRow>, StoreError> {
        let org = org.0.clone();
        self.call(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "{SESSION_SELECT} WHERE s.org_id = ?1 ORDER BY s.updated_at DESC, s.id LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![org, limit], session_from_row)?;
            rows.collect::<Result<Vec<_>, _>>()
        })
        .await
    }

    /// Marks a session as failed for good, with the reason (a corrupt log, say). Its turns are
    /// refused from then on; the reason is what `turn/send` answers.
    pub async fn fail_session(&self, id: &SessionId, reason: &str) -> Result<(), StoreError> {
        let (id, reason) = (id.0.clone(), reason.to_owned());
        self.call(move |c| {
            c.execute(
                "UPDATE sessions SET status = 'failed', failure = ?2 WHERE id = ?1",
                params![id, reason],
            )?;
            Ok(())
        })
        .await
    }

    /// Sessions whose log ends inside a turn: the ones to resume at start.
    pub async fn sessions_with_open_turns(&self) -> Result<Vec<SessionRow>, StoreError> {
        self.call(move |c| {
            let mut stmt = c.prepare_cached(&format!(
                "{SESSION_SELECT} WHERE s.open_turn IS NOT NULL AND s.status != 'failed'"
            ))?;
            let rows = stmt.query_map((), session_from_row)?;
            rows.collect::<Result<Vec<_>, _>>()
        })
        .await
    }

    /// Appends a durable event; `event.seq` must be the session's `last_seq + 1`. Returns once
    /// the commit is done (see the module header for what that guarantees).
    pub async fn append_event(&self, event: SessionEvent) -> Result<(), StoreError> {
        let node = self.node.clone();
        self.call(move |c| {
            appending(c, Some((&node, &event.session_id.0)), |c| insert_event(c, &event, None))
        })
        .await
    }

    /// Like [`Store::append_event`], and in the same transaction gives the session `title` if
    /// it has none yet (the title derived from its first message, see [`derived_title`]), so a
    /// session never has a durable first message without its title. Returns the session's title
    /// after the commit.
    /// Appends `events` (consecutive seqs of one session) in one transaction: all or none.
    pub async fn append_events(&self, events: Vec<SessionEvent>) -> Result<(), StoreError> {
        let node = self.node.clone();
        self.call(move |c| {
            let Some(first) = events.first() else { return Ok(()) };
            let sid = first.session_id.0.clone();
            appending(c, Some((&node, &sid)), |c| {
                events.iter().try_for_each(|event| insert_event(c, event, None))
            })
        })
        .await
    }

    pub async fn append_event_titled(
        &self,
        event: SessionEvent,
        title: String,
    ) -> Result<String, StoreError> {
        let node = self.node.clone();
        self.call(move |c| {
            appending(c, Some((&node, &event.session_id.0)), |c| {
                insert_event(c, &event, Some(&title))
            })?;
            c.query_row("SELECT title FROM sessions WHERE id = ?1", [&event.session_id.0], |r| {
                r.get(0)
            })
        })
        .await
    }

    /// The durable events of a session with `seq > after`, in order.
    pub async fn events_after(
        &self,
        session: &SessionId,
        after: u64,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        self.events_after_limited(session, after, u32::MAX).await
    }

    /// At most `limit` durable events of a session with `seq > after`, in order: a range read
    /// on the `(session_id, seq)` primary key, however long the log.
    pub async fn events_after_limited(
        &self,
        session: &SessionId,
        after: u64,
        limit: u32,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let sid = session.clone();
        self.call(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT seq, payload, ts, parent FROM events WHERE session_id = ?1 AND seq > ?2
                 ORDER BY seq LIMIT ?3",
            )?;
            let rows =
                stmt.query_map(params![sid.0, to_i64(after), i64::from(limit)], event_row)?;
            decode_events(&sid, rows)
        })
        .await
    }

    /// The durable events of a session of the given kinds (`turn_started`, …), in order: what
    /// a session actor needs at start without reading the whole log (the `kind` column is
    /// filtered before any payload is decoded).
    pub async fn events_of_kinds(
        &self,
        session: &SessionId,
        kinds: &'static [&'static str],
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let sid = session.clone();
        self.call(move |c| {
            let list =
                kinds.iter().map(|k| format!("'{}'", k.replace('\'', ""))).collect::<Vec<_>>();
            let mut stmt = c.prepare_cached(&format!(
                "SELECT seq, payload, ts, parent FROM events WHERE session_id = ?1 AND kind IN ({})
                 ORDER BY seq",
                list.join(", ")
            ))?;
            let rows = stmt.query_map(params![sid.0], event_row)?;
            decode_events(&sid, rows)
        })
        .await
    }

    /// The newest `limit` durable events of a session with `seq < before`, oldest first: the
    /// primary key walked backwards from `before`, so a page costs the same at any depth.
    pub async fn events_before(
        &self,
        session: &SessionId,
        before: u64,
        limit: u32,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let sid = session.clone();
        self.call(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT seq, payload, ts, parent FROM events WHERE session_id = ?1 AND seq < ?2
                 ORDER BY seq DESC LIMIT ?3",
            )?;
            let rows =
                stmt.query_map(params![sid.0, to_i64(before), i64::from(limit)], event_row)?;
            let mut events = decode_events(&sid, rows)?;
            events.reverse();
            Ok(events)
        })
        .await
    }
}

fn to_i64(seq: u64) -> i64 {
    seq.min(i64::MAX as u64) as i64
}

type EventRow = (i64, String, String, Option<String>);

fn event_row(r: &db::Row<'_>) -> db::Result<EventRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
}

fn decode_events(
    sid: &SessionId,
    rows: impl Iterator<Item = crate::store::db::Result<EventRow>>,
) -> Result<Vec<SessionEvent>, StoreError> {
    let mut out = Vec::new();
    for row in rows {
        let (seq, payload, ts, parent) = row?;
        let kind: EventKind = serde_json::from_str(&payload)
            .map_err(|e| StoreError::Corrupt(format!("session {} seq {seq}: {e}", sid.0)))?;
        out.push(SessionEvent { session_id: sid.clone(), seq: seq as u64, ts, kind, parent });
    }
    Ok(out)
}

impl Store {
    /// The token usage of `org`'s model calls, grouped `by` session, user or day and by model,
    /// only `session`'s when given, only at or after `since` (an RFC 3339 prefix) when given.
    pub async fn usage_report(
        &self,
        org: &OrgId,
        by: UsageGroup,
        session: Option<SessionId>,
        since: Option<String>,
    ) -> Result<Vec<UsageRow>, StoreError> {
        let org = org.clone();
        self.call(move |c| usage_report(c, &org, by, session.as_ref(), since.as_deref())).await
    }

    /// Deletes a session and everything of it in the database (its log, its grant, its push
    /// records); false when there was no such session.
    pub async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError> {
        let id = id.0.clone();
        self.call(move |c| {
            let tx = c.transaction()?;
            for table in ["events", "drive_grants", "session_pushes", "session_leases"] {
                tx.execute(&format!("DELETE FROM {table} WHERE session_id = ?1"), [&id])?;
            }
            let n = tx.execute("DELETE FROM sessions WHERE id = ?1", [&id])?;
            tx.commit()?;
            Ok(n > 0)
        })
        .await
    }

    /// Which session created `branch` of `remote_url` with `session/push`, and its last commit.
    pub async fn push_record(
        &self,
        remote_url: &str,
        branch: &str,
    ) -> Result<Option<(SessionId, String)>, StoreError> {
        let (url, branch) = (remote_url.to_owned(), branch.to_owned());
        self.call(move |c| {
            c.query_row(
                "SELECT session_id, commit_id FROM session_pushes
                 WHERE remote_url = ?1 AND branch = ?2",
                [&url, &branch],
                |r| Ok((SessionId(r.get(0)?), r.get(1)?)),
            )
            .optional()
        })
        .await
    }

    /// Records that `session` pushed `commit` to `branch` of `remote_url`.
    pub async fn record_push(
        &self,
        remote_url: &str,
        branch: &str,
        session: &SessionId,
        commit: &str,
    ) -> Result<(), StoreError> {
        let (url, branch, sid, commit) =
            (remote_url.to_owned(), branch.to_owned(), session.0.clone(), commit.to_owned());
        self.call(move |c| {
            c.execute(
                "INSERT INTO session_pushes (remote_url, branch, session_id, commit_id, pushed_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (remote_url, branch) DO UPDATE SET commit_id = ?4, pushed_at = ?5",
                params![url, branch, sid, commit, now_rfc3339()],
            )?;
            Ok(())
        })
        .await
    }
}

/// Inserts a new session row, usable inside a bigger transaction.
pub fn insert_session(c: &Db, r: &SessionRow) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO sessions (id, org_id, owner_id, title, status, model, last_seq,
                               created_at, updated_at, workspace_path, source, context_window,
                               network, model_name, host)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        params![
            r.id.0,
            r.org_id.0,
            r.owner_id.0,
            r.title,
            status_str(r.status),
            r.model,
            r.created_at,
            r.updated_at,
            r.workspace,
            source_json(r.source.as_ref())?,
            r.context_window.map(|w| w.min(i64::MAX as u64) as i64),
            (!r.network.is_org()).then(|| r.network.as_str()),
            r.model_name,
            r.host,
        ],
    )?;
    Ok(())
}

/// The id of the org named `name`, if it exists.
pub fn org_id_by_name(c: &Db, name: &str) -> Result<Option<OrgId>, StoreError> {
    Ok(c.query_row("SELECT id FROM orgs WHERE name = ?1", [name], |r| r.get(0))
        .optional()?
        .map(OrgId))
}

/// The name of the org `id` (for messages), or its id when it has none.
pub fn org_name(c: &Db, id: &OrgId) -> String {
    c.query_row("SELECT name FROM orgs WHERE id = ?1", [&id.0], |r| r.get(0))
        .unwrap_or_else(|_| id.0.clone())
}

/// The append itself, in its own transaction.
pub fn append_event(
    c: &mut Db,
    event: &SessionEvent,
    title: Option<&str>,
) -> Result<(), StoreError> {
    appending(c, None, |c| insert_event(c, event, title))
}

/// Appends `events` in order in one transaction, with the same checks as [`append_event`]: a
/// step's events that commit together, and how tests and benchmarks build logs of a hundred
/// thousand events in a second instead of paying one commit per event.
pub fn append_events(c: &mut Db, events: &[SessionEvent]) -> Result<(), StoreError> {
    appending(c, None, |c| events.iter().try_for_each(|event| insert_event(c, event, None)))
}

/// Moves session `id` to sandbox host `host` and appends `event` (the note that tells the model)
/// in one transaction: a restore either happens with its note or not at all.
pub fn move_session_host(
    c: &mut Db,
    id: &SessionId,
    host: &str,
    event: &SessionEvent,
) -> Result<(), StoreError> {
    appending(c, None, |c| {
        c.execute("UPDATE sessions SET host = ?2 WHERE id = ?1", params![id.0, host])?;
        insert_event(c, event, None)
    })
}

/// Runs `insert` in a transaction of its own. The event log's hot path (three appends a tool
/// call), so it runs on cached statements only: `BEGIN`, the checks, the insert, the
/// session's update and `COMMIT` are parsed once per connection, not once per event.
/// With `fence` (this node, the session), the append is refused unless the node still holds
/// the session's lease ([`lease::check`]), in the same transaction.
fn appending(
    c: &mut Db,
    fence: Option<(&lease::Node, &str)>,
    insert: impl FnOnce(&Db) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    // Nothing of a refused append stays: a failed insert or commit rolls the transaction back,
    // leaving the log as it was.
    let tx = c.transaction()?;
    if let Some((node, session)) = fence {
        lease::check(&tx, node, session)?;
    }
    insert(&tx)?;
    tx.commit()
}

fn insert_event(tx: &Db, event: &SessionEvent, title: Option<&str>) -> Result<(), StoreError> {
    let payload =
        serde_json::to_string(&event.kind).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let turn_id = match &event.kind {
        EventKind::TurnStarted { turn_id, .. }
        | EventKind::TurnCompleted { turn_id, .. }
        | EventKind::TurnFailed { turn_id, .. } => Some(turn_id.0.clone()),
        _ => None,
    };
    let last: i64 = tx
        .prepare_cached("SELECT last_seq FROM sessions WHERE id = ?1")?
        .query_row([&event.session_id.0], |r| r.get(0))?;
    if event.seq != last as u64 + 1 {
        return Err(StoreError::SeqGap { last: last as u64, got: event.seq });
    }
    cached(
        tx,
        "INSERT INTO events (session_id, seq, kind, turn_id, payload, ts, parent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            event.session_id.0,
            event.seq as i64,
            event.kind.type_name(),
            turn_id,
            payload,
            event.ts,
            event.parent
        ],
    )?;
    match &event.kind {
        EventKind::TurnStarted { turn_id, .. } => cached(
            tx,
            "UPDATE sessions SET last_seq = ?2, updated_at = ?3, open_turn = ?4,
                                 status = 'running' WHERE id = ?1",
            params![event.session_id.0, event.seq as i64, event.ts, turn_id.0],
        )?,
        EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => cached(
            tx,
            "UPDATE sessions SET last_seq = ?2, updated_at = ?3, open_turn = NULL,
                 status = CASE WHEN status = 'failed' THEN 'failed' ELSE 'idle' END WHERE id = ?1",
            params![event.session_id.0, event.seq as i64, event.ts],
        )?,
        _ => cached(
            tx,
            "UPDATE sessions SET last_seq = ?2, updated_at = ?3 WHERE id = ?1",
            params![event.session_id.0, event.seq as i64, event.ts],
        )?,
    };
    if let EventKind::AssistantMessage { usage: Some(u), .. }
    | EventKind::Compaction { usage: Some(u), .. } = &event.kind
    {
        record_usage(tx, event, u)?;
    }
    if let EventKind::ModelChanged { model, label, context_window, .. } = &event.kind {
        cached(
            tx,
            "UPDATE sessions SET model_name = ?2, model = ?3, context_window = ?4 WHERE id = ?1",
            params![
                event.session_id.0,
                model,
                label,
                (*context_window).min(i64::MAX as u64) as i64
            ],
        )?;
    }
    if let EventKind::Todos { todos } = &event.kind {
        let progress = todo_progress(todos);
        cached(
            tx,
            "UPDATE sessions SET todos_done = ?2, todos_total = ?3 WHERE id = ?1",
            params![event.session_id.0, progress.done, progress.total],
        )?;
    }
    if let Some(title) = title.filter(|t| !t.is_empty()) {
        cached(
            tx,
            "UPDATE sessions SET title = ?2 WHERE id = ?1 AND title = ''",
            params![event.session_id.0, title],
        )?;
    }
    Ok(())
}

/// Runs `sql` on a statement parsed once per connection (the event log's hot path).
fn cached(c: &Db, sql: &str, params: impl db::Params) -> Result<usize, StoreError> {
    c.prepare_cached(sql)?.execute(params)
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

const SESSION_SELECT: &str = "SELECT s.id, s.org_id, s.owner_id, u.name, s.title, s.status,
    s.model, s.last_seq, s.created_at, s.updated_at, s.failure, s.workspace_path,
    s.source, s.context_window, s.usage_input, s.usage_output, s.usage_cache_read,
    s.usage_cache_write, s.network, s.todos_done, s.todos_total, s.model_name, s.host FROM sessions s JOIN users u ON u.id = s.owner_id";

/// Records one model call's usage (inside the transaction appending the `assistant_message` that
/// carries it): a `model_usage` row for reports, and the session's running totals. The turn is
/// the session's open one, the user its owner, the model the one that answered (the session's
/// label for a compaction, and in logs written before the model was recorded per message).
fn record_usage(tx: &Db, event: &SessionEvent, u: &Usage) -> Result<(), StoreError> {
    let n = |v: u64| v.min(i64::MAX as u64) as i64;
    cached(
        tx,
        "INSERT INTO model_usage (session_id, seq, turn_id, org_id, user_id, model, input_tokens,
                                  output_tokens, cache_read_tokens, cache_write_tokens, at)
         SELECT id, ?2, open_turn, org_id, owner_id, COALESCE(?8, model), ?3, ?4, ?5, ?6, ?7
         FROM sessions WHERE id = ?1",
        params![
            event.session_id.0,
            event.seq as i64,
            n(u.input_tokens),
            n(u.output_tokens),
            n(u.cache_read_tokens),
            n(u.cache_write_tokens),
            event.ts,
            match &event.kind {
                EventKind::AssistantMessage { model, .. } => model.as_deref(),
                _ => None,
            }
        ],
    )?;
    cached(
        tx,
        "UPDATE sessions SET usage_input = usage_input + ?2, usage_output = usage_output + ?3,
             usage_cache_read = usage_cache_read + ?4, usage_cache_write = usage_cache_write + ?5
         WHERE id = ?1",
        params![
            event.session_id.0,
            n(u.input_tokens),
            n(u.output_tokens),
            n(u.cache_read_tokens),
            n(u.cache_write_tokens)
        ],
    )?;
    Ok(())
}

/// The rows of `usage/report` for `org` (see [`Store::usage_report`]).
pub fn usage_report(
    c: &Db,
    org: &OrgId,
    by: UsageGroup,
    session: Option<&SessionId>,
    since: Option<&str>,
) -> Result<Vec<UsageRow>, StoreError> {
    let key = match by {
        UsageGroup::Session => "m.session_id",
        UsageGroup::User => "COALESCE(u.name, m.user_id)",
        UsageGroup::Day => "substr(m.at, 1, 10)",
    };
    let sql = format!(
        "SELECT {key} AS k, m.model, COUNT(*), SUM(m.input_tokens), SUM(m.output_tokens),
                SUM(m.cache_read_tokens), SUM(m.cache_write_tokens)
         FROM model_usage m LEFT JOIN users u ON u.id = m.user_id
         WHERE m.org_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR m.session_id = ?2)
           AND (CAST(?3 AS TEXT) IS NULL OR m.at >= ?3)
         GROUP BY k, m.model ORDER BY k, m.model"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![org.0, session.map(|s| s.0.as_str()), since], |r| {
        let n = |i: usize| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
        Ok(UsageRow {
            key: r.get(0)?,
            model: r.get(1)?,
            calls: n(2)?,
            usage: Usage {
                input_tokens: n(3)?,
                output_tokens: n(4)?,
                cache_read_tokens: n(5)?,
                cache_write_tokens: n(6)?,
            },
        })
    })?;
    rows.collect::<Result<Vec<_>, _>>()
}

fn session_from_row(r: &crate::store::db::Row<'_>) -> crate::store::db::Result<SessionRow> {
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

fn source_json(
    source: Option<&outboard_shared::SessionSource>,
) -> Result<Option<String>, StoreError> {
    source
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("session source: {e}")))
}

fn status_str(s: SessionStatus) -> &'static str {
    match s {
        SessionStatus::Idle => "idle",
        SessionStatus::Running => "running",
        SessionStatus::Failed => "failed",
        SessionStatus::Unknown => "unknown",
    }
}

fn status_from(s: &str) -> SessionStatus {
    match s {
        "idle" => SessionStatus::Idle,
        "running" => SessionStatus::Running,
        "failed" => SessionStatus::Failed,
        _ => SessionStatus::Unknown,
    }
}

fn ensure_org(c: &Db, name: &str) -> Result<OrgId, StoreError> {
    if let Some(id) =
        c.query_row("SELECT id FROM orgs WHERE name = ?1", [name], |r| r.get(0)).optional()?
    {
        return Ok(OrgId(id));
    }
    let id = new_id("o");
    c.execute(
        "INSERT INTO orgs (id, name, created_at) VALUES (?1, ?2, ?3)",
        params![id, name, now_rfc3339()],
    )?;
    Ok(OrgId(id))
}

fn find_user(c: &Db, org_id: &OrgId, name: &str) -> Result<Option<UserRow>, StoreError> {
    c.query_row(
        "SELECT u.id, u.name, o.id, o.name FROM users u JOIN orgs o ON o.id = u.org_id
         WHERE u.org_id = ?1 AND u.name = ?2",
        params![org_id.0, name],
        user_from_row,
    )
    .optional()
}

/// A `UserRow` from `SELECT u.id, u.name, o.id, o.name`.
fn user_from_row(r: &crate::store::db::Row<'_>) -> crate::store::db::Result<UserRow> {
    Ok(UserRow { id: UserId(r.get(0)?), name: r.get(1)?, org_id: OrgId(r.get(2)?), org: r.get(3)? })
}

fn insert_user(c: &Db, org_id: &OrgId, org: &str, name: &str) -> Result<UserRow, StoreError> {
    let id = new_id("u");
    c.execute(
        "INSERT INTO users (id, org_id, name, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![id, org_id.0, name, now_rfc3339()],
    )?;
    Ok(UserRow {
        id: UserId(id),
        name: name.to_owned(),
        org_id: org_id.clone(),
        org: org.to_owned(),
    })
}

fn insert_token(c: &Db, user: &UserId, label: &str) -> Result<String, StoreError> {
    let token = random_token().map_err(StoreError::Random)?;
    c.execute(
        "INSERT INTO tokens (token_hash, user_id, label, created_at) VALUES (?1, ?2, ?3, ?4)",
        params![hash_token(&token), user.0, label, now_rfc3339()],
    )?;
    Ok(token)
}

fn open_connection(
    path: &Path,
    durability: Durability,
) -> Result<rusqlite::Connection, StoreError> {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let conn = rusqlite::Connection::open(path)
        .map_err(|source| StoreError::Open { path: path.to_owned(), source })?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(
        None,
        "synchronous",
        match durability {
            Durability::Normal => "NORMAL",
            Durability::Full => "FULL",
        },
    )?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Another process (`outboard-server admin`) may hold the write lock for a moment.
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    // The event log's statements and the org file system's stay parsed between calls.
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

fn migrate(conn: &mut Db) -> Result<(), StoreError> {
    if conn.backend() == db::Backend::Postgres {
        return pg::migrate(conn);
    }
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY,
                                                       applied_at TEXT NOT NULL)",
    )?;
    let tx = conn.transaction_immediate()?;
    let current: i64 =
        tx.query_row("SELECT COALESCE(MAX(version), 0) FROM schema_migrations", (), |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        tx.execute_batch(sql)?;
        tx.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?1, ?2)",
            params![(i + 1) as i64, now_rfc3339()],
        )?;
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboard_shared::TurnId;
    use pretty_assertions::assert_eq;

    fn event(sid: &SessionId, seq: u64, text: &str) -> SessionEvent {
        SessionEvent {
            session_id: sid.clone(),
            seq,
            ts: now_rfc3339(),
            kind: EventKind::UserMessage { text: text.into() },
            parent: None,
        }
    }

    #[test]
    fn derived_titles_are_the_first_line_cut_on_a_char_boundary() {
        assert_eq!(derived_title("\n  fix the build \nthen test", 256), "fix the build");
        assert_eq!(derived_title(&"x".repeat(100), 256), "x".repeat(TITLE_CHARS));
        let accents = "é".repeat(100);
        assert_eq!(derived_title(&accents, 256), "é".repeat(TITLE_CHARS));
        // Within the byte quota, never splitting a character (é is two bytes).
        assert_eq!(derived_title(&accents, 7), "ééé");
        assert_eq!(derived_title("   \n\t\n", 256), "");
    }

    #[tokio::test]
    async fn a_titled_append_names_only_an_untitled_session() {
        let dir = tempfile::tempdir().unwrap();
        let store = pgtest::open_test_store(&dir.path().join("outboard.db")).unwrap();
        let (alice, _) = store.add_user("acme", "alice").await.unwrap();
        let s = store.create_session(&alice, "", "anthropic/m").await.unwrap();
        let title = store.append_event_titled(event(&s.id, 1, "one"), "one".into()).await;
        assert_eq!(title.unwrap(), "one");
        let title = store.append_event_titled(event(&s.id, 2, "two"), "two".into()).await;
        assert_eq!(title.unwrap(), "one", "a session keeps the title it has");
        assert_eq!(store.session(&s.id).await.unwrap().unwrap().title, "one");
        assert_eq!(store.list_sessions(&alice.org_id, 10).await.unwrap()[0].title, "one");
    }

    #[tokio::test]
    async fn users_tokens_sessions_and_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outboard.db");
        let spec = pgtest::test_spec(&path);
        let store = Store::open_spec(&spec, Durability::Normal, None).unwrap();
        let (alice, token) = store.add_user("acme", "alice").await.unwrap();
        assert!(matches!(store.add_user("acme", "alice").await, Err(StoreError::Exists(_))));
        assert_eq!(store.authenticate(&token).await.unwrap(), Some(alice.clone()));
        assert_eq!(store.authenticate("ob_wrong").await.unwrap(), None);

        let s = store.create_session(&alice, "t", "anthropic/m").await.unwrap();
        store.append_event(event(&s.id, 1, "one")).await.unwrap();
        store
            .append_event(SessionEvent {
                session_id: s.id.clone(),
                seq: 2,
                ts: now_rfc3339(),
                kind: EventKind::TurnStarted { turn_id: TurnId("t_1".into()), by: "alice".into() },
                parent: None,
            })
            .await
            .unwrap();
        // A duplicate and a gap are both refused.
        assert!(matches!(
            store.append_event(event(&s.id, 2, "dup")).await,
            Err(StoreError::SeqGap { last: 2, got: 2 })
        ));
        assert!(matches!(
            store.append_event(event(&s.id, 5, "gap")).await,
            Err(StoreError::SeqGap { last: 2, got: 5 })
        ));
        let after1 = store.events_after(&s.id, 1).await.unwrap();
        assert_eq!(after1.len(), 1);
        assert_eq!(after1[0].seq, 2);
        assert_eq!(store.session(&s.id).await.unwrap().unwrap().last_seq, 2);

        // A batch is all or none: its second event's gap leaves the first out too, and the
        // connection's cached statements serve the next append as before.
        assert!(matches!(
            store.append_events(vec![event(&s.id, 3, "three"), event(&s.id, 5, "five")]).await,
            Err(StoreError::SeqGap { last: 3, got: 5 })
        ));
        assert_eq!(store.events_after(&s.id, 2).await.unwrap().len(), 0);
        assert_eq!(store.session(&s.id).await.unwrap().unwrap().last_seq, 2);
        store.append_events(vec![event(&s.id, 3, "three"), event(&s.id, 4, "four")]).await.unwrap();
        store.append_event(event(&s.id, 5, "five")).await.unwrap();
        assert_eq!(store.events_after(&s.id, 2).await.unwrap().len(), 3);
        assert_eq!(store.session(&s.id).await.unwrap().unwrap().last_seq, 5);

        // Reopening keeps everything and does not re-run migrations.
        drop(store);
        let store = Store::open_spec(&spec, Durability::Full, None).unwrap();
        assert_eq!(store.events_after(&s.id, 0).await.unwrap().len(), 5);
        let (again, token2) = store.mint_token("acme", "alice", "embedded").await.unwrap();
        assert_eq!(again.id, alice.id);
        assert_ne!(token, token2);
        assert_eq!(store.list_sessions(&alice.org_id, 10).await.unwrap().len(), 1);
        let (_, other) = store.mint_token("other", "bob", "x").await.unwrap();
        let bob = store.authenticate(&other).await.unwrap().unwrap();
        assert!(store.list_sessions(&bob.org_id, 10).await.unwrap().is_empty());
    }

    #[test]
    fn the_token_itself_is_never_stored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outboard.db");
        let rt = tokio::runtime::Runtime::new().unwrap();
        let token = rt.block_on(async {
            let store = Store::open(&path, Durability::Normal).unwrap();
            store.add_user("acme", "alice").await.unwrap().1
        });
        let conn = rusqlite::Connection::open(&path).unwrap();
        let hashes: Vec<String> = conn
            .prepare("SELECT token_hash FROM tokens")
            .unwrap()
            .query_map((), |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(hashes, vec![hash_token(&token)]);
    }
}
