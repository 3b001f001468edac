//! The SQLite schema: append-only migrations (a migration once shipped is never edited; index + 1
//! is the schema version), applied at open, and the connection's settings. PostgreSQL's dialect of
//! the same schema is in [`crate::pg`].

use std::path::Path;

use outboard_base::util::now_rfc3339;

use crate::db::{params, Db};
use crate::error::StoreError;
use crate::spec::Durability;

/// Append-only migrations: index + 1 is the schema version.
pub const MIGRATIONS: &[&str] = &[
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
-- Several server nodes on one store (`crate::lease`): the nodes that heartbeat, and which
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
    r#"
-- Schema 19: the SHA-256 of the key a node authenticates its relays with (`x-outboard-relay`):
-- the owner of a session checks it, so relays between nodes are told from clients.
ALTER TABLE nodes ADD COLUMN relay_key_hash TEXT;
"#,
    r#"
-- Schema 20: the log by kind, so the state an attach shows beside its page (the last mode, the
-- last todo list, running background commands, open questions) is read without walking the
-- whole log: a 100,000-event session took 60 ms to attach to.
CREATE INDEX events_by_kind ON events(session_id, kind, seq);
"#,
    r#"
-- Schema 21: an upload's archive members (the org's `upload_files_per_day` quota counts them)
-- and when a session used it (a used upload no longer counts as waiting for its user).
ALTER TABLE uploads ADD COLUMN files INTEGER NOT NULL DEFAULT 0;
ALTER TABLE uploads ADD COLUMN used_at TEXT;
"#,
    r#"
-- Schema 22: the org's web search backend (`admin search set`, `crate::search` of the org
-- crate): `anthropic`, `openai`, `searxng:URL` or `brave[:URL]`; no row, no `WebSearch`.
CREATE TABLE org_search (
    org_id   TEXT PRIMARY KEY REFERENCES orgs(id),
    backend  TEXT NOT NULL,
    set_at   TEXT NOT NULL
) WITHOUT ROWID;
"#,
    r#"
-- Schema 23: the org's hooks (`admin hook add`, `hooks` of the org crate): webhooks the server
-- calls, signed with the org secret for the URL's host, on an event of Claude Code's contract.
CREATE TABLE org_hooks (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    event       TEXT NOT NULL,
    matcher     TEXT NOT NULL,
    url         TEXT NOT NULL,
    timeout_ms  INTEGER NOT NULL,
    added_at    TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX org_hooks_by_org ON org_hooks(org_id, added_at);
"#,
];

pub fn open_connection(
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

pub fn migrate_sqlite(conn: &mut Db) -> Result<(), StoreError> {
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
