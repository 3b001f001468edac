//! The handle every other part of the server holds: [`Store`], cloneable, which sends a closure
//! to the worker threads that own the connections over a bounded channel and awaits the answer.
//! SQLite has one worker (one owner: no `SQLITE_BUSY` between our own writers, a natural order of
//! commits); PostgreSQL has a pool of them taking from the same queue.

use std::path::Path;
use std::sync::mpsc as std_mpsc;

use outboard_shared::{OrgId, SessionEvent, SessionId, SessionStatus, UsageGroup, UsageRow};
use tokio::sync::oneshot;

use outboard_base::digest::hash_token;
use outboard_base::util::now_rfc3339;

use crate::db::{self, params, Db, OptionalExtension};
use crate::error::StoreError;
use crate::events::*;
use crate::lease;
use crate::orgs::*;
use crate::pg;
use crate::retry::{self, Health, Worker};
use crate::rows::*;
use crate::schema::{self, open_connection};
use crate::sessions::*;
use crate::spec::{Durability, StoreSpec};
use crate::usage::usage_report;

/// Requests queued for the store thread. Commits take tens of microseconds, so 1024 queued jobs
/// is far more than a healthy server ever holds; when it is full, callers wait (backpressure)
/// instead of growing memory without bound.
const STORE_QUEUE: usize = 1024;

/// How long a job is retried while PostgreSQL cannot be reached, by default: a restart of the
/// database, a failover or a short network cut are waited out (a turn's appends wait with
/// them); past this the job fails with [`StoreError::Unreachable`].
pub const DEFAULT_RETRY_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

/// Told how long each job of a store worker took (a read, or a write with its commit): the
/// server's metrics implement it; the store knows nothing of them.
pub trait JobObserver: Send + Sync {
    /// One job took `took`.
    fn job_done(&self, took: std::time::Duration);
}

/// A job of the store's workers (see [`crate::retry`]).
type Job = Box<dyn retry::Work>;

/// A handle to the store thread. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    tx: tokio::sync::mpsc::Sender<Job>,
    backend: db::Backend,
    url: Option<std::sync::Arc<str>>,
    node: lease::Node,
    health: std::sync::Arc<Health>,
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
        metrics: Option<std::sync::Arc<dyn JobObserver>>,
    ) -> Result<Store, StoreError> {
        let conn = open_connection(path, durability)?;
        let checkpoints = crate::checkpoint::start(&conn, path, durability)?;
        let mut conn = Db::sqlite(conn);
        migrate(&mut conn)?;
        checkpoints.wake();
        Store::start(vec![conn], metrics, None, Some(checkpoints))
    }

    /// Opens the store `spec` names: a `postgres://` (or `postgresql://`) URL, or a SQLite file
    /// (`sqlite:PATH` or a bare path).
    pub fn open_spec(
        spec: &StoreSpec,
        durability: Durability,
        metrics: Option<std::sync::Arc<dyn JobObserver>>,
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
                let mut store = Store::start(conns, metrics, Some(url.clone()), None)?;
                store.backend = db::Backend::Postgres;
                store.url = Some(std::sync::Arc::from(url.as_str()));
                Ok(store)
            }
        }
    }

    /// One worker thread per connection, all taking jobs from the one bounded queue. With
    /// `reconnect` (a PostgreSQL URL), a job that meets a broken connection is run again on a
    /// new one while the outage lasts, up to the retry bound ([`Worker::run`] says which jobs
    /// may be run again).
    /// With `checkpoints` (SQLite), each job ends by waking the WAL's checkpoint thread.
    fn start(
        conns: Vec<Db>,
        metrics: Option<std::sync::Arc<dyn JobObserver>>,
        reconnect: Option<String>,
        checkpoints: Option<crate::checkpoint::Waker>,
    ) -> Result<Store, StoreError> {
        let (tx, rx) = tokio::sync::mpsc::channel::<Job>(STORE_QUEUE);
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let health = std::sync::Arc::new(Health::new(DEFAULT_RETRY_BOUND));
        for (i, conn) in conns.into_iter().enumerate() {
            let (rx, metrics, checkpoints) = (rx.clone(), metrics.clone(), checkpoints.clone());
            let mut worker = Worker::new(conn, reconnect.clone(), health.clone());
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
                        let started = std::time::Instant::now();
                        worker.run(job);
                        if let Some(m) = &metrics {
                            m.job_done(started.elapsed());
                        }
                        if let Some(c) = &checkpoints {
                            c.wake();
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
            health,
        })
    }

    /// How long a job is retried while PostgreSQL cannot be reached (default
    /// [`DEFAULT_RETRY_BOUND`]), for every handle of this store.
    pub fn set_retry_bound(&mut self, bound: std::time::Duration) {
        self.health.set_bound(bound);
    }

    /// How long the store has been unreachable, if it is now: since a job first met a broken
    /// connection, until a job succeeds again.
    pub fn unreachable_for(&self) -> Option<std::time::Duration> {
        self.health.down_for()
    }

    /// Resolves once the store has been unreachable for `patience` (at once if it has been
    /// already); never while it answers. For callers that should say so rather than wait out
    /// the outage (a client's handshake).
    pub async fn unreachable(&self, patience: std::time::Duration) {
        self.health.outage(patience).await;
    }

    /// Whether the store came back from an outage within `within` (a node then leaves other
    /// nodes' leases alone until they have had the time to renew them).
    pub fn recovered_within(&self, within: std::time::Duration) -> bool {
        self.health.recovered_within(within)
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

    /// Records the SHA-256 of the key this node's relays to other nodes present.
    pub async fn set_relay_key_hash(&self, hash: &str) -> Result<(), StoreError> {
        let (node, hash) = (self.node.clone(), hash.to_owned());
        self.call(move |c| lease::set_relay_key_hash(c, &node, &hash)).await
    }

    /// The relay key hash node `id` registered, if it is not stopped.
    pub async fn relay_key_hash(&self, id: &str) -> Result<Option<String>, StoreError> {
        let id = id.to_owned();
        self.call(move |c| lease::relay_key_hash(c, &id)).await
    }

    /// Writes this node's URL and relay key hash back into its row if they were changed there;
    /// the URL found instead, if so ([`lease::reassert`]).
    pub async fn reassert_node(&self) -> Result<Option<String>, StoreError> {
        let node = self.node.clone();
        self.call(move |c| lease::reassert(c, &node)).await
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

    /// Runs `f` on a store thread and returns its result. On PostgreSQL, `f` runs again on a
    /// new connection when its connection broke before anything of it was committed (so it
    /// must not have effects outside the database); one that broke while committing fails
    /// with [`StoreError::CommitUnknown`] (see [`Store::call_idempotent`]).
    pub async fn call<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnMut(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        self.submit(f, retry::Rerun::BeforeCommit).await
    }

    /// [`Store::call`] for an `f` that may run again even after a commit whose outcome is
    /// unknown: it finds out itself whether its change is there (the log's appends).
    pub async fn call_idempotent<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnMut(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        self.submit(f, retry::Rerun::Always).await
    }

    /// [`Store::call`] for an `f` that can run only once (it consumes what it captured): a
    /// broken connection fails it, as the connection's error, rather than running it again.
    pub async fn call_no_rerun<R, F>(&self, f: F) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        let mut f = Some(f);
        let once = move |c: &mut Db| match f.take() {
            Some(f) => f(c),
            None => Err(StoreError::Closed),
        };
        self.submit(once, retry::Rerun::Never).await
    }

    async fn submit<R, F>(&self, f: F, rerun: retry::Rerun) -> Result<R, StoreError>
    where
        R: Send + 'static,
        F: FnMut(&mut Db) -> Result<R, StoreError> + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel();
        let job: Job = Box::new(retry::Call::new(f, reply_tx, rerun));
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
                [&hash],
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
            c.query_row(&format!("{SESSION_SELECT} WHERE s.id = ?1"), [&id], session_from_row)
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
        let mut rerun = false;
        self.call_idempotent(move |c| {
            if std::mem::replace(&mut rerun, true) && already_appended(c, &event)? {
                return Ok(());
            }
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
        let mut rerun = false;
        self.call_idempotent(move |c| {
            let (Some(first), Some(last)) = (events.first(), events.last()) else { return Ok(()) };
            // All or none committed: the last one tells.
            if std::mem::replace(&mut rerun, true) && already_appended(c, last)? {
                return Ok(());
            }
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
        let mut rerun = false;
        self.call_idempotent(move |c| {
            if !(std::mem::replace(&mut rerun, true) && already_appended(c, &event)?) {
                appending(c, Some((&node, &event.session_id.0)), |c| {
                    insert_event(c, &event, Some(&title))
                })?;
            }
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
        self.events_of_kinds_between(session, kinds, 0, u64::MAX).await
    }

    /// The durable events of a session of the given kinds with `after < seq <= upto`, in
    /// order: [`Self::events_of_kinds`] one window of the log at a time, for a scan of a long
    /// log whose memory does not grow with it (a window of seqs, not a `LIMIT`, so that each
    /// read is one bounded range of the index whichever kinds it asks for).
    pub async fn events_of_kinds_between(
        &self,
        session: &SessionId,
        kinds: &'static [&'static str],
        after: u64,
        upto: u64,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let sid = session.clone();
        self.call(move |c| {
            let list =
                kinds.iter().map(|k| format!("'{}'", k.replace('\'', ""))).collect::<Vec<_>>();
            let mut stmt = c.prepare_cached(&format!(
                "SELECT seq, payload, ts, parent FROM events WHERE session_id = ?1 AND kind IN ({})
                 AND seq > ?2 AND seq <= ?3 ORDER BY seq",
                list.join(", ")
            ))?;
            let rows = stmt.query_map(params![sid.0, to_i64(after), to_i64(upto)], event_row)?;
            decode_events(&sid, rows)
        })
        .await
    }

    /// What an attach shows of the state older than its page, read through the index on
    /// `(session_id, kind, seq)` so that it costs the same at any length of log: the newest
    /// event of each of `last_kinds`, every event of `all_kinds`, and the events of
    /// `since_end_kinds` from the session's last top-level turn end on (that end included: it
    /// closes what was asked before it), oldest first.
    pub async fn standing_events(
        &self,
        session: &SessionId,
        last_kinds: &'static [&'static str],
        all_kinds: &'static [&'static str],
        since_end_kinds: &'static [&'static str],
    ) -> Result<Vec<SessionEvent>, StoreError> {
        let sid = session.clone();
        self.call(move |c| {
            let quoted = |kinds: &[&str]| {
                kinds
                    .iter()
                    .map(|k| format!("'{}'", k.replace('\'', "")))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            // Each query names its rows by `seq IN (SELECT seq … kind …)`: the subquery walks
            // only the index, and SQLite, without statistics, would otherwise take the primary
            // key for the order and read the whole log.
            let last_end: i64 = c.query_row(
                // Newest first, to the first top-level one (MAX would read every turn's end).
                "SELECT COALESCE((SELECT seq FROM events WHERE session_id = ?1 AND parent IS NULL
                 AND seq IN (SELECT seq FROM events WHERE session_id = ?1
                             AND kind IN ('turn_completed', 'turn_failed'))
                 ORDER BY seq DESC LIMIT 1), 0)",
                params![sid.0],
                |r| r.get(0),
            )?;
            let mut events = Vec::new();
            for kind in last_kinds {
                let mut stmt = c.prepare_cached(&format!(
                    "SELECT seq, payload, ts, parent FROM events WHERE session_id = ?1
                     AND seq = (SELECT MAX(seq) FROM events WHERE session_id = ?1 AND kind = {})",
                    quoted(&[kind])
                ))?;
                let rows = stmt.query_map(params![sid.0], event_row)?;
                events.extend(decode_events(&sid, rows)?);
            }
            let mut stmt = c.prepare_cached(&format!(
                "SELECT seq, payload, ts, parent FROM events WHERE session_id = ?1
                 AND seq IN (SELECT seq FROM events WHERE session_id = ?1 AND kind IN ({}))
                 ORDER BY seq",
                quoted(all_kinds)
            ))?;
            let rows = stmt.query_map(params![sid.0], event_row)?;
            events.extend(decode_events(&sid, rows)?);
            let mut stmt = c.prepare_cached(&format!(
                "SELECT seq, payload, ts, parent FROM events WHERE session_id = ?1
                 AND seq IN (SELECT seq FROM events WHERE session_id = ?1 AND kind IN ({})
                             AND seq >= ?2)
                 ORDER BY seq",
                quoted(since_end_kinds)
            ))?;
            let rows = stmt.query_map(params![sid.0, last_end], event_row)?;
            events.extend(decode_events(&sid, rows)?);
            events.sort_by_key(|e| e.seq);
            events.dedup_by_key(|e| e.seq);
            Ok(events)
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

fn migrate(conn: &mut Db) -> Result<(), StoreError> {
    if conn.backend() == db::Backend::Postgres {
        return pg::migrate(conn);
    }
    schema::migrate_sqlite(conn)
}

#[cfg(test)]
mod outage_tests;
