//! Riding out a PostgreSQL outage: each store worker runs its jobs through a [`Worker`], which
//! connects again and runs a job again when its connection broke, backing off, for as long as
//! the outage lasts up to a bound; and [`Health`], shared by the workers and every handle, says
//! whether the store is reachable now (what the gateway tells a client that connects meanwhile).
//!
//! Which jobs may run again: one whose connection broke before it committed anything (the
//! server rolled its transaction back), or one the server itself ended (a `57P01` from a
//! shutdown, a class-08 refusal: nothing of the statement took effect). A job whose link broke
//! under a commit cannot know whether the commit took effect: it runs again only if it checks
//! that itself ([`crate::Store::call_idempotent`]: the log's appends look for their event), and
//! otherwise fails with [`StoreError::CommitUnknown`], said as it is. A job that can run only
//! once ([`crate::Store::call_no_rerun`]) fails with its connection's error.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::db::Db;
use crate::error::{Broken, StoreError};
use crate::pg;
use crate::spec::target_of;

/// The first wait before connecting again; it doubles up to [`RECONNECT_BACKOFF_MAX`].
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(100);

/// The longest wait between two attempts to connect again.
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// One queued job: a closure and where its answer goes.
pub(crate) trait Work: Send {
    /// Runs the job once: `None` once it has its answer (success, or a failure that is not the
    /// connection's), to [`Work::deliver`]; the connection's failure otherwise.
    fn attempt(&mut self, db: &mut Db) -> Option<StoreError>;
    /// Sends the answer [`Work::attempt`] got.
    fn deliver(self: Box<Self>);
    /// Answers with `error`, for good.
    fn answer(self: Box<Self>, error: StoreError);
    /// Whether its caller still waits for the answer (one that gave up is not run again).
    fn awaited(&self) -> bool;
    /// When it may run again.
    fn rerun(&self) -> Rerun;
}

/// When a job whose connection broke may run again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rerun {
    /// Never ([`crate::Store::call_no_rerun`]).
    Never,
    /// Unless the link broke under a commit.
    BeforeCommit,
    /// Always: it checks itself whether its change is there.
    Always,
}

/// A [`crate::Store::call`].
pub(crate) struct Call<R, F> {
    f: F,
    reply: Option<oneshot::Sender<Result<R, StoreError>>>,
    rerun: Rerun,
    answer: Option<Result<R, StoreError>>,
}

impl<R, F> Call<R, F> {
    pub(crate) fn new(f: F, reply: oneshot::Sender<Result<R, StoreError>>, rerun: Rerun) -> Self {
        Call { f, reply: Some(reply), rerun, answer: None }
    }
}

impl<R, F> Work for Call<R, F>
where
    R: Send,
    F: FnMut(&mut Db) -> Result<R, StoreError> + Send,
{
    fn attempt(&mut self, db: &mut Db) -> Option<StoreError> {
        match (self.f)(db) {
            Err(e) if e.broken() != Broken::No => Some(e),
            result => {
                self.answer = Some(result);
                None
            }
        }
    }

    fn deliver(mut self: Box<Self>) {
        if let (Some(reply), Some(answer)) = (self.reply.take(), self.answer.take()) {
            let _ = reply.send(answer);
        }
    }

    fn answer(mut self: Box<Self>, error: StoreError) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(Err(error));
        }
    }

    fn awaited(&self) -> bool {
        self.reply.as_ref().is_some_and(|r| !r.is_closed())
    }

    fn rerun(&self) -> Rerun {
        self.rerun
    }
}

/// Whether the store is reachable, shared by its workers and handles.
#[derive(Debug)]
pub(crate) struct Health {
    state: watch::Sender<State>,
    /// How long a job is retried, in milliseconds.
    bound_ms: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default)]
struct State {
    /// Since when jobs meet broken connections (`None`: the store answers).
    down_since: Option<Instant>,
    /// When the last outage ended.
    recovered_at: Option<Instant>,
}

impl Health {
    pub(crate) fn new(bound: Duration) -> Health {
        Health {
            state: watch::Sender::new(State::default()),
            bound_ms: AtomicU64::new(bound.as_millis() as u64),
        }
    }

    pub(crate) fn set_bound(&self, bound: Duration) {
        self.bound_ms.store(bound.as_millis() as u64, Ordering::Relaxed);
    }

    fn bound(&self) -> Duration {
        Duration::from_millis(self.bound_ms.load(Ordering::Relaxed))
    }

    /// A job met a broken connection.
    fn down(&self, error: &StoreError) {
        self.state.send_if_modified(|s| {
            if s.down_since.is_some() {
                return false;
            }
            tracing::warn!(error = %error, "the store (PostgreSQL) is unreachable; retrying");
            s.down_since = Some(Instant::now());
            true
        });
    }

    /// A job got an answer from the database.
    fn up(&self) {
        self.state.send_if_modified(|s| {
            let Some(since) = s.down_since.take() else { return false };
            tracing::info!(
                after_ms = since.elapsed().as_millis() as u64,
                "the store (PostgreSQL) is reachable again"
            );
            s.recovered_at = Some(Instant::now());
            true
        });
    }

    pub(crate) fn down_for(&self) -> Option<Duration> {
        self.state.borrow().down_since.map(|t| t.elapsed())
    }

    pub(crate) fn recovered_within(&self, within: Duration) -> bool {
        self.state.borrow().recovered_at.is_some_and(|t| t.elapsed() < within)
    }

    /// Resolves once the store has been unreachable for `patience`.
    pub(crate) async fn outage(&self, patience: Duration) {
        let mut rx = self.state.subscribe();
        loop {
            let since = rx.borrow_and_update().down_since;
            match since {
                Some(since) if since.elapsed() >= patience => return,
                Some(since) => {
                    let left = patience - since.elapsed();
                    // Woken early when the store comes back (then it waits for the next outage).
                    let _ = tokio::time::timeout(left, rx.changed()).await;
                }
                None => {
                    if rx.changed().await.is_err() {
                        // The store is gone: never an outage to report.
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }
}

/// A store worker's connection and how it runs a job across an outage.
pub(crate) struct Worker {
    conn: Db,
    /// The PostgreSQL URL to connect again to (`None`: SQLite, never retried).
    url: Option<String>,
    health: std::sync::Arc<Health>,
}

impl Worker {
    pub(crate) fn new(conn: Db, url: Option<String>, health: std::sync::Arc<Health>) -> Worker {
        Worker { conn, url, health }
    }

    /// Runs `job` until it answers: again on a new connection while its failures are the
    /// connection's and it may run again (see the module header), for at most the bound.
    pub(crate) fn run(&mut self, mut job: Box<dyn Work>) {
        let started = Instant::now();
        let mut wait = RECONNECT_BACKOFF_MIN;
        loop {
            let (error, committed) = match self.attempt(job.as_mut()) {
                None => {
                    // Known reachable before the caller hears of it.
                    self.health.up();
                    return job.deliver();
                }
                Some(failed) => failed,
            };
            let Some(url) = self.url.clone() else { return job.answer(error) };
            self.health.down(&error);
            let target = target_of(&url);
            match job.rerun() {
                Rerun::Never => return job.answer(error),
                Rerun::BeforeCommit if committed && error.broken() == Broken::Cut => {
                    tracing::warn!(error = %error, "the store's connection broke under a commit");
                    return job.answer(StoreError::CommitUnknown { target });
                }
                Rerun::BeforeCommit | Rerun::Always => {}
            }
            loop {
                if started.elapsed() >= self.health.bound() || !job.awaited() {
                    tracing::warn!(error = %error, "gave up a store job: PostgreSQL is unreachable");
                    let waited_s = started.elapsed().as_secs();
                    return job.answer(StoreError::Unreachable { target, waited_s });
                }
                std::thread::sleep(wait);
                wait = (wait * 2).min(RECONNECT_BACKOFF_MAX);
                match pg::connect(&url) {
                    Ok(client) => {
                        tracing::info!("connected to PostgreSQL again");
                        self.conn = Db::postgres(client);
                        break;
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot connect to PostgreSQL yet"),
                }
            }
        }
    }

    /// One attempt of `job` (on a new connection first if this one is known broken): `None`
    /// once it answered, else the connection's failure and whether a commit was sent.
    fn attempt(&mut self, job: &mut dyn Work) -> Option<(StoreError, bool)> {
        if let Some(url) = self.url.as_deref().filter(|_| self.conn.is_broken()) {
            match pg::connect(url) {
                Ok(client) => self.conn = Db::postgres(client),
                Err(e) => return Some((e, false)),
            }
        }
        self.conn.take_commits();
        let error = job.attempt(&mut self.conn)?;
        Some((error, self.conn.take_commits() > 0))
    }
}
