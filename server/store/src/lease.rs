//! Session ownership by lease, for several server nodes on one store.
//!
//! A session with work to do is owned by one node at a time: a `session_leases` row names the
//! node, an `epoch` (the fencing token) and when the lease expires. A node takes a lease that is
//! free, expired or already its own (a new owner raises the epoch), renews all of its leases in
//! one statement every third of the lease time, and gives a lease back when its session has
//! nothing left to do (or the node drains). A node that stops renewing (killed, paused,
//! partitioned) loses its leases when they expire; another node takes them over.
//!
//! Fencing: every append of a session this node holds a lease on checks, in the append's own
//! transaction, that the row still names this node with the same epoch, locking the row on
//! PostgreSQL (`FOR UPDATE`) so a takeover waits for the append's commit or the append sees the
//! takeover. A node that lost its lease therefore cannot write for that session again: the
//! append fails with [`StoreError::Fenced`] and nothing of it is stored.
//!
//! Times are milliseconds since the epoch of each node's clock; nodes are expected to keep their
//! clocks in step (NTP) far closer than the lease time. Fencing does not depend on clocks.
//!
//! The same rules hold on a SQLite file, which several processes of one host may open (two
//! embedded servers of one user): a session is run by one of them at a time. A node that starts
//! expires the leases of the nodes of its host whose process is gone ([`expire_dead_here`]), so
//! a restart after a crash resumes their turns at once rather than after the lease time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use outboard_shared::SessionId;
use serde::Serialize;

use crate::db::{params, Backend, Db, OptionalExtension as _};
use crate::error::StoreError;

/// How long a lease lasts without renewal, by default.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// This node: its id and the leases it holds or held (session → epoch, and whether it is known
/// lost), shared by every clone of the store handle, so appends are fenced without their callers
/// passing epochs around. A lease stays here after it is lost, so every later append of that
/// session keeps failing, until the node gives it back ([`release`]) or takes it again.
#[derive(Debug, Clone)]
pub struct Node {
    /// A new id per process start.
    pub id: Arc<str>,
    /// The lease time.
    pub lease: Duration,
    held: Arc<Mutex<HashMap<String, (i64, bool)>>>,
    /// What this node registered (its URL, its relay key's hash), which each renewal
    /// re-asserts ([`reassert`]).
    own: Arc<Mutex<Registration>>,
}

/// What a node says of itself in its `nodes` row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Registration {
    url: Option<String>,
    relay_key_hash: Option<String>,
}

impl Node {
    /// A node with a fresh id.
    pub fn new(lease: Duration) -> Node {
        Node {
            id: Arc::from(outboard_base::util::new_id("n")),
            lease,
            held: Arc::new(Mutex::new(HashMap::new())),
            own: Arc::default(),
        }
    }

    fn registered(&self) -> Registration {
        self.own.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The epoch of this node's lease on `session`, if it holds one.
    pub fn epoch(&self, session: &str) -> Option<i64> {
        self.held.lock().ok()?.get(session).map(|(e, _)| *e)
    }

    fn hold(&self, session: &str, epoch: i64) {
        if let Ok(mut held) = self.held.lock() {
            held.insert(session.to_owned(), (epoch, false));
        }
    }

    /// Marks the lease on `session` lost; true the first time.
    fn lose(&self, session: &str) -> bool {
        match self.held.lock() {
            Ok(mut held) => match held.get_mut(session) {
                Some((_, lost)) if !*lost => {
                    *lost = true;
                    true
                }
                _ => false,
            },
            Err(_) => false,
        }
    }

    fn forget(&self, session: &str) {
        if let Ok(mut held) = self.held.lock() {
            held.remove(session);
        }
    }

    /// The sessions this node holds leases on (not known lost).
    pub fn held(&self) -> Vec<SessionId> {
        self.held
            .lock()
            .map(|h| {
                h.iter().filter(|(_, (_, lost))| !lost).map(|(s, _)| SessionId(s.clone())).collect()
            })
            .unwrap_or_default()
    }
}

/// A lease as taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token: raised each time the session changes owner.
    pub epoch: i64,
}

/// Why a lease was not taken: another node holds it, until `expires_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The owning node.
    pub node: String,
    /// Its epoch.
    pub epoch: i64,
    /// When it expires unless renewed.
    pub expires_ms: i64,
    /// The owning node's name, if it registered.
    pub name: Option<String>,
    /// Where the owning node serves clients, if it registered.
    pub url: Option<String>,
}

/// Registers (or refreshes) this node in `nodes`.
pub fn heartbeat(
    c: &Db,
    node: &Node,
    name: &str,
    url: &str,
    state: &str,
) -> Result<(), StoreError> {
    if let Ok(mut own) = node.own.lock() {
        own.url = Some(url.to_owned());
    }
    let now = outboard_base::util::now_rfc3339();
    c.execute(
        "INSERT INTO nodes (id, name, url, state, started_at, heartbeat_at, heartbeat_ms, lease_ms,
                            pid)
         VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8)
         ON CONFLICT (id) DO UPDATE SET state = ?4, heartbeat_at = ?5, heartbeat_ms = ?6",
        params![
            node.id.as_ref(),
            name,
            url,
            state,
            now,
            now_ms(),
            node.lease.as_millis() as i64,
            i64::from(std::process::id())
        ],
    )?;
    Ok(())
}

/// Records the SHA-256 of the key this node's relays present (`relay_key_hash`), in its row
/// and for [`reassert`].
pub fn set_relay_key_hash(c: &Db, node: &Node, hash: &str) -> Result<(), StoreError> {
    if let Ok(mut own) = node.own.lock() {
        own.relay_key_hash = Some(hash.to_owned());
    }
    c.execute(
        "UPDATE nodes SET relay_key_hash = ?2 WHERE id = ?1",
        params![node.id.as_ref(), hash],
    )?;
    Ok(())
}

/// The relay key hash of the node `id`, if it is registered, not stopped, and has one.
pub fn relay_key_hash(c: &Db, id: &str) -> Result<Option<String>, StoreError> {
    let hash: Option<Option<String>> = c
        .query_row(
            "SELECT relay_key_hash FROM nodes WHERE id = ?1 AND state <> 'stopped'",
            [id],
            |r| r.get(0),
        )
        .optional()?;
    Ok(hash.flatten())
}

/// Writes this node's URL and relay key hash into its row again when someone else changed them,
/// so that editing one row cannot redirect the relays to a node for long (a renewal is a third
/// of the lease time). Returns the URL the row held instead, when it was rewritten.
pub fn reassert(c: &Db, node: &Node) -> Result<Option<String>, StoreError> {
    let own = node.registered();
    let Some(url) = own.url else { return Ok(None) };
    let found: Option<(Option<String>, Option<String>)> = c
        .query_row("SELECT url, relay_key_hash FROM nodes WHERE id = ?1", [node.id.as_ref()], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    let Some((row_url, row_hash)) = found else { return Ok(None) };
    if row_url.as_deref() == Some(url.as_str()) && row_hash == own.relay_key_hash {
        return Ok(None);
    }
    c.execute(
        "UPDATE nodes SET url = ?2, relay_key_hash = ?3 WHERE id = ?1",
        params![node.id.as_ref(), url, own.relay_key_hash],
    )?;
    Ok(Some(row_url.unwrap_or_default()))
}

/// Expires the leases of nodes that ran on this host (`name`) in a process that is gone (killed
/// or crashed: it could not say it stopped), so a node restarting there takes its predecessor's
/// sessions over at once instead of after the lease time. Returns how many were expired.
pub fn expire_dead_here(c: &Db, node: &Node, name: &str) -> Result<usize, StoreError> {
    let mut stmt = c.prepare(
        "SELECT id, pid FROM nodes WHERE name = ?1 AND id <> ?2 AND state <> 'stopped'
                                   AND pid IS NOT NULL",
    )?;
    let candidates: Vec<(String, i64)> = stmt
        .query_map(params![name, node.id.as_ref()], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    drop(stmt);
    let mut expired = 0;
    for (id, pid) in candidates {
        if process_alive(pid) {
            continue;
        }
        expired += c.execute(
            "UPDATE session_leases SET expires_ms = 0 WHERE node_id = ?1 AND expires_ms > 0",
            [&id],
        )?;
        c.execute("UPDATE nodes SET state = 'stopped' WHERE id = ?1", [&id])?;
    }
    Ok(expired)
}

/// Whether a process `pid` of this host runs: it is in `/proc`, and not a zombie (killed, not
/// reaped yet by its parent).
fn process_alive(pid: i64) -> bool {
    if pid <= 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last `)` (a command may hold one).
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X')),
        Err(_) => false,
    }
}

/// Takes the lease on `session` for `node` if it is free, expired or already `node`'s; the
/// holder otherwise. Each take raises the epoch, also a take by the same node: an actor that
/// gives its lease back after a successor on this node took it (an idle actor stopping while a
/// request spawns the next) then gives back nothing, as its epoch is not the current one.
pub fn acquire(
    c: &mut Db,
    node: &Node,
    session: &SessionId,
) -> Result<Result<Lease, Held>, StoreError> {
    let now = now_ms();
    let expires = now + node.lease.as_millis() as i64;
    let tx = c.transaction()?;
    let taken: Option<i64> = tx
        .query_row(
            "INSERT INTO session_leases (session_id, node_id, epoch, expires_ms, acquired_at)
             VALUES (?1, ?2, 1, ?3, ?4)
             ON CONFLICT (session_id) DO UPDATE SET
                 epoch = session_leases.epoch + 1,
                 node_id = ?2, expires_ms = ?3, acquired_at = ?4
             WHERE session_leases.node_id = ?2 OR session_leases.expires_ms < ?5
             RETURNING epoch",
            params![session.0, node.id.as_ref(), expires, outboard_base::util::now_rfc3339(), now],
            |r| r.get(0),
        )
        .optional()?;
    let outcome = match taken {
        Some(epoch) => Ok(Lease { epoch }),
        None => Err(tx.query_row(
            "SELECT l.node_id, l.epoch, l.expires_ms, n.name, n.url
             FROM session_leases l LEFT JOIN nodes n ON n.id = l.node_id
             WHERE l.session_id = ?1",
            [&session.0],
            |r| {
                Ok(Held {
                    node: r.get(0)?,
                    epoch: r.get(1)?,
                    expires_ms: r.get(2)?,
                    name: r.get(3)?,
                    url: r.get(4)?,
                })
            },
        )?),
    };
    tx.commit()?;
    if let Ok(lease) = &outcome {
        node.hold(&session.0, lease.epoch);
    }
    Ok(outcome)
}

/// Renews every lease `node` still holds and refreshes its heartbeat; returns the sessions whose
/// lease it lost (taken over while it was not renewing), which it must stop writing for.
pub fn renew(c: &mut Db, node: &Node) -> Result<Vec<SessionId>, StoreError> {
    let expires = now_ms() + node.lease.as_millis() as i64;
    let tx = c.transaction()?;
    tx.execute(
        "UPDATE session_leases SET expires_ms = ?2 WHERE node_id = ?1 AND expires_ms > 0",
        params![node.id.as_ref(), expires],
    )?;
    let mut stmt =
        tx.prepare_cached("SELECT session_id, epoch FROM session_leases WHERE node_id = ?1")?;
    let still: HashMap<String, i64> = stmt
        .query_map([node.id.as_ref()], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    drop(stmt);
    tx.execute(
        "UPDATE nodes SET heartbeat_at = ?2, heartbeat_ms = ?3 WHERE id = ?1",
        params![node.id.as_ref(), outboard_base::util::now_rfc3339(), now_ms()],
    )?;
    tx.commit()?;
    let mut lost = Vec::new();
    for session in node.held() {
        if still.get(&session.0) != node.epoch(&session.0).as_ref() && node.lose(&session.0) {
            lost.push(session);
        }
    }
    Ok(lost)
}

/// Gives the lease on `session` back (expired at once, epoch kept, so the next owner's is
/// higher): the one taken at `epoch`, or whichever this node holds when `None`. A lease taken
/// again since (a higher epoch) is kept.
pub fn release(
    c: &Db,
    node: &Node,
    session: &SessionId,
    epoch: Option<i64>,
) -> Result<(), StoreError> {
    let Some(epoch) = epoch.or_else(|| node.epoch(&session.0)) else { return Ok(()) };
    c.execute(
        "UPDATE session_leases SET expires_ms = 0
         WHERE session_id = ?1 AND node_id = ?2 AND epoch = ?3",
        params![session.0, node.id.as_ref(), epoch],
    )?;
    if node.epoch(&session.0) == Some(epoch) {
        node.forget(&session.0);
    }
    Ok(())
}

/// Gives back every lease this node holds (a drain, once its turns stopped); how many.
pub fn release_all(c: &Db, node: &Node) -> Result<usize, StoreError> {
    let n = c.execute(
        "UPDATE session_leases SET expires_ms = 0 WHERE node_id = ?1 AND expires_ms > 0",
        [node.id.as_ref()],
    )?;
    if let Ok(mut held) = node.held.lock() {
        held.clear();
    }
    Ok(n)
}

/// The sessions with an open turn that no other node holds a live lease on: a node that died,
/// drained or was cut off left them, and this node may take them over (its own are skipped by
/// the caller, which knows its actors).
pub fn orphaned(c: &Db, node: &Node) -> Result<Vec<SessionId>, StoreError> {
    let mut stmt = c.prepare_cached(
        "SELECT s.id FROM sessions s
         WHERE s.open_turn IS NOT NULL AND s.status <> 'failed'
           AND NOT EXISTS (SELECT 1 FROM session_leases l
                           WHERE l.session_id = s.id AND l.node_id <> ?1 AND l.expires_ms >= ?2)",
    )?;
    let rows = stmt.query_map(params![node.id.as_ref(), now_ms()], |r| Ok(SessionId(r.get(0)?)))?;
    rows.collect()
}

/// The fencing check of an append, inside its transaction: refused unless `node` still holds
/// the lease on `session` with the epoch it took. Sessions this node holds no lease on are not
/// checked (writes outside a session's turns: restores, deletes).
pub fn check(c: &Db, node: &Node, session: &str) -> Result<(), StoreError> {
    let Some(epoch) = node.epoch(session) else { return Ok(()) };
    let sql = match c.backend() {
        Backend::Postgres => {
            "SELECT node_id, epoch FROM session_leases WHERE session_id = ?1 FOR UPDATE"
        }
        Backend::Sqlite => "SELECT node_id, epoch FROM session_leases WHERE session_id = ?1",
    };
    let row: Option<(String, i64)> =
        c.prepare_cached(sql)?.query_row([session], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
    match row {
        Some((owner, e)) if owner == *node.id && e == epoch => Ok(()),
        _ => {
            node.lose(session);
            Err(StoreError::Fenced(session.to_owned()))
        }
    }
}

/// A node as `admin nodes` shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodeRow {
    /// Its id.
    pub id: String,
    /// Its name (host name unless given).
    pub name: String,
    /// Where clients reach it.
    pub url: Option<String>,
    /// `serving`, `draining` or `stopped`.
    pub state: String,
    /// When it started.
    pub started_at: String,
    /// Its last heartbeat.
    pub heartbeat_at: String,
    /// Milliseconds since its last heartbeat.
    pub heartbeat_age_ms: i64,
    /// Leases it holds that have not expired.
    pub leases: i64,
    /// Its lease time: quiet for longer than this, it counts as gone.
    pub lease_ms: i64,
}

impl NodeRow {
    /// Serving or draining, and heartbeating within its lease time.
    pub fn alive(&self) -> bool {
        self.state != "stopped" && self.heartbeat_age_ms <= self.lease_ms
    }
}

/// `admin nodes` as a table; a node that is not `stopped` but missed its heartbeats for longer
/// than its lease time shows as `lost` (killed, or cut off: its leases are being taken over).
pub fn nodes_table(nodes: &[NodeRow]) -> String {
    if nodes.is_empty() {
        return "no node has served this store recently\n".into();
    }
    let mut out = format!(
        "{:<35} {:<16} {:<9} {:>10} {:>6}  {:<24} {}\n",
        "NODE", "NAME", "STATE", "HEARTBEAT", "LEASES", "STARTED", "URL"
    );
    for n in nodes {
        let state = if n.state != "stopped" && !n.alive() { "lost" } else { n.state.as_str() };
        out.push_str(&format!(
            "{:<35} {:<16} {:<9} {:>9.1}s {:>6}  {:<24} {}\n",
            n.id,
            n.name,
            state,
            n.heartbeat_age_ms as f64 / 1000.0,
            n.leases,
            n.started_at,
            n.url.as_deref().unwrap_or("-")
        ));
    }
    out
}

/// Every node that heartbeat within `within`, newest first, with its live leases.
pub fn nodes(c: &Db, within: Duration) -> Result<Vec<NodeRow>, StoreError> {
    let now = now_ms();
    let mut stmt = c.prepare(
        "SELECT n.id, n.name, n.url, n.state, n.started_at, n.heartbeat_at, n.heartbeat_ms,
                (SELECT COUNT(*) FROM session_leases l WHERE l.node_id = n.id AND l.expires_ms > ?1),
                n.lease_ms
         FROM nodes n WHERE n.heartbeat_ms > ?2 ORDER BY n.started_at DESC",
    )?;
    let rows = stmt.query_map(params![now, now - within.as_millis() as i64], |r| {
        Ok(NodeRow {
            id: r.get(0)?,
            name: r.get(1)?,
            url: r.get(2)?,
            state: r.get(3)?,
            started_at: r.get(4)?,
            heartbeat_at: r.get(5)?,
            heartbeat_age_ms: now - r.get::<_, i64>(6)?,
            leases: r.get(7)?,
            lease_ms: r.get(8)?,
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests;
