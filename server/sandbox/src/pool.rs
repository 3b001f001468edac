//! The per-org cap on live sandboxes (the `live_sandboxes` quota), and the fair queue in front
//! of it.
//!
//! A live sandbox (running or frozen) holds memory, processes and a host uid; an org that opens
//! many sessions would otherwise pile up frozen sandboxes until their 30-minute idle stop. When
//! a session needs a sandbox and its org is at the cap, the least recently used *frozen*
//! sandbox of the org is stopped (its workspace stays; its session provisions a fresh one on its
//! next command, like after an idle stop). When every live sandbox of the org is running a
//! command, the new one waits in the org's queue, first come first served, until one stops or
//! freezes; it fails only when the queue is full ([`PoolBounds::queue`]) or after the longest
//! wait ([`PoolBounds::wait`]). A command used to be refused at once (a team sharing one server
//! met that daily, and the model saw a tool error); waiting is what a person would do.
//!
//! One server-wide registry, shared by the session managers through a cheap handle: a `std`
//! mutex held for a map update, never across an await. The count and the claim are one step
//! under that lock, and a slot that frees is handed to the first waiter under the same lock
//! (the waiter's member is registered on its behalf before it wakes), so no start can slip in
//! between a count and a claim. Members hold a weak sender to their manager, so the registry
//! never keeps a session's sandbox alive.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use outboard_shared::SandboxState;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use outboard_sandbox_init::error::SandboxError;

use crate::request::Request;

/// How long a sandbox waits for an evicted one to stop before it starts anyway (an evicted
/// sandbox is frozen and stops in milliseconds; one that just woke up finishes its command
/// first).
const EVICT_WAIT: Duration = Duration::from_secs(2);

/// Sessions of one org that may wait for a live sandbox at once: dozens of people sharing a
/// server wait in line; past this, something is wrong (a runaway script opening sessions) and a
/// quick refusal is the better answer.
pub const DEFAULT_QUEUE: usize = 256;

/// How long a session waits in its org's queue before its command fails: longer than the
/// default command timeout (120 s) twice over, so a waiter outlasts a slow command ahead of it.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(300);

/// Unique ids of pool members.
static NEXT_MEMBER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The queue's two bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolBounds {
    /// Sessions of one org waiting at once; the next one is refused.
    pub queue: usize,
    /// How long one session waits for a slot before its command fails.
    pub wait: Duration,
}

impl Default for PoolBounds {
    fn default() -> Self {
        PoolBounds { queue: DEFAULT_QUEUE, wait: DEFAULT_WAIT }
    }
}

#[derive(Debug)]
struct Member {
    id: u64,
    suspended: bool,
    last_used: Instant,
    manager: mpsc::WeakSender<Request>,
}

/// A session waiting for a slot: what it will be registered as, and where its grant goes (the
/// victim to stop, if the slot was a frozen sandbox's).
#[derive(Debug)]
struct Waiter {
    id: u64,
    manager: mpsc::WeakSender<Request>,
    grant: oneshot::Sender<Option<mpsc::WeakSender<Request>>>,
}

/// One org's live sandboxes, its queue and the cap it last read.
#[derive(Debug, Default)]
struct OrgSlots {
    members: Vec<Member>,
    queue: VecDeque<Waiter>,
    limit: usize,
}

impl OrgSlots {
    /// Registers `id` if the org has room, stopping its least recently used frozen sandbox when
    /// at the cap: `Some(victim)` when claimed, `None` when every live sandbox runs a command.
    /// The count and the claim in one call, under the pool's lock.
    fn claim(
        &mut self,
        id: u64,
        manager: mpsc::WeakSender<Request>,
    ) -> Option<Option<mpsc::WeakSender<Request>>> {
        let victim = if self.members.len() >= self.limit {
            let lru = self
                .members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.suspended)
                .min_by_key(|(_, m)| m.last_used)
                .map(|(i, _)| i)?;
            Some(self.members.remove(lru).manager)
        } else {
            None
        };
        self.members.push(Member { id, suspended: false, last_used: Instant::now(), manager });
        Some(victim)
    }

    /// Hands free slots (or frozen sandboxes) to the waiters, first come first served.
    fn hand_over(&mut self) {
        while let Some(first) = self.queue.front() {
            let Some(victim) = self.claim(first.id, first.manager.clone()) else { return };
            if let Some(waiter) = self.queue.pop_front() {
                // The receiver lives as long as the waiter is queued (see `Waiting`'s drop).
                let _ = waiter.grant.send(victim);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.members.is_empty() && self.queue.is_empty()
    }
}

type Orgs = HashMap<String, OrgSlots>;

/// The registry of live sandboxes by org.
#[derive(Debug, Clone, Default)]
pub struct LivePool {
    orgs: Arc<Mutex<Orgs>>,
    bounds: PoolBounds,
}

/// Where a ticket reads its org's cap, at each admission (so an admin's change applies to the
/// next sandbox at once). The sandbox module does not know the store; the session passes this.
pub type LimitFn = Arc<dyn Fn() -> BoxFuture<'static, usize> + Send + Sync>;

/// A constant cap.
pub fn fixed_limit(limit: usize) -> LimitFn {
    Arc::new(move || Box::pin(std::future::ready(limit)))
}

/// One session's place in the pool: its org and where the org's cap comes from.
#[derive(Clone)]
pub struct PoolTicket {
    pool: LivePool,
    org: String,
    limit: LimitFn,
}

impl std::fmt::Debug for PoolTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolTicket").field("org", &self.org).finish_non_exhaustive()
    }
}

impl PartialEq for PoolTicket {
    fn eq(&self, other: &Self) -> bool {
        self.pool == other.pool && self.org == other.org && Arc::ptr_eq(&self.limit, &other.limit)
    }
}

impl Eq for PoolTicket {}

impl PartialEq for LivePool {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.orgs, &other.orgs)
    }
}

impl Eq for LivePool {}

/// Where a waiting session stands, for its `sandbox` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuePlace {
    /// 1 for the first in line.
    pub position: u32,
    /// The org's cap.
    pub limit: u32,
}

/// What [`PoolTicket::request`] decided.
pub enum Admission {
    /// Registered; stop this frozen sandbox first, if any ([`PoolTicket::evict`]).
    Admitted(Option<mpsc::WeakSender<Request>>),
    /// In the org's queue: wait with [`Waiting::granted`].
    Queued(Waiting),
}

/// A place in an org's queue. Dropped before its grant is used, it leaves the queue (or, if a
/// slot was handed to it meanwhile, passes that slot on to the next in line).
pub struct Waiting {
    pool: LivePool,
    org: String,
    id: u64,
    limit: usize,
    place: QueuePlace,
    grant: Option<oneshot::Receiver<Option<mpsc::WeakSender<Request>>>>,
}

impl LivePool {
    /// A registry whose queues keep to `bounds`.
    pub fn new(bounds: PoolBounds) -> LivePool {
        LivePool { orgs: Arc::default(), bounds }
    }

    /// A ticket for a sandbox of `org`, whose cap `limit` answers.
    pub fn ticket(&self, org: &str, limit: LimitFn) -> PoolTicket {
        PoolTicket { pool: self.clone(), org: org.to_owned(), limit }
    }

    /// Stops every live sandbox of every org (server shutdown): left to the process's exit, a
    /// frozen sandbox would stay frozen with its SIGKILL pending until the next start reaps it.
    /// Waits at most `deadline` (a manager still running a command answers after it); returns
    /// how many were asked to stop.
    pub async fn stop_all(&self, deadline: Duration) -> usize {
        let managers: Vec<mpsc::Sender<Request>> = match self.orgs.lock() {
            Ok(orgs) => {
                orgs.values().flat_map(|o| &o.members).filter_map(|m| m.manager.upgrade()).collect()
            }
            Err(_) => Vec::new(),
        };
        let asked = managers.len();
        let stops = managers.into_iter().map(|manager| async move {
            let (reply, stopped) = oneshot::channel();
            if manager.send(Request::Stop(reply)).await.is_ok() {
                let _ = stopped.await;
            }
        });
        if tokio::time::timeout(deadline, futures_util::future::join_all(stops)).await.is_err() {
            tracing::warn!(
                "some sandboxes were still running a command at shutdown; the next start reaps them"
            );
        }
        asked
    }

    /// Live sandboxes of `org` now.
    pub fn live(&self, org: &str) -> usize {
        self.orgs.lock().map(|orgs| orgs.get(org).map_or(0, |o| o.members.len())).unwrap_or(0)
    }

    /// Sessions of `org` waiting for a live sandbox now.
    pub fn waiting(&self, org: &str) -> usize {
        self.orgs.lock().map(|orgs| orgs.get(org).map_or(0, |o| o.queue.len())).unwrap_or(0)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Orgs>, SandboxError> {
        self.orgs.lock().map_err(|_| SandboxError::Start("the sandbox pool is poisoned".into()))
    }

    /// Runs `f` on `org`'s slots, dropping the entry once it holds nothing.
    fn with_org<T>(&self, org: &str, f: impl FnOnce(&mut OrgSlots) -> T) -> Option<T> {
        let mut orgs = self.orgs.lock().ok()?;
        let slots = orgs.get_mut(org)?;
        let out = f(slots);
        if slots.is_empty() {
            orgs.remove(org);
        }
        Some(out)
    }
}

impl PoolTicket {
    /// A fresh member id for one manager.
    pub fn member_id() -> u64 {
        NEXT_MEMBER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Asks for a slot for member `id`: registered at once when the org has room (or a frozen
    /// sandbox to stop) and nobody waits before it; else a place at the end of the org's queue;
    /// refused when the queue is full.
    pub async fn request(
        &self,
        id: u64,
        manager: mpsc::WeakSender<Request>,
    ) -> Result<Admission, SandboxError> {
        let limit = (self.limit)().await.max(1);
        let bounds = self.pool.bounds;
        let mut orgs = self.pool.lock()?;
        let slots = orgs.entry(self.org.clone()).or_default();
        slots.members.retain(|m| m.id != id);
        slots.queue.retain(|w| w.id != id);
        slots.limit = limit;
        // A raised cap frees slots for those already waiting, before this one.
        slots.hand_over();
        if slots.queue.is_empty() {
            if let Some(victim) = slots.claim(id, manager.clone()) {
                return Ok(Admission::Admitted(victim));
            }
        }
        if slots.queue.len() >= bounds.queue {
            let waiting = slots.queue.len();
            if slots.is_empty() {
                orgs.remove(&self.org);
            }
            return Err(SandboxError::Start(format!(
                "all live sandboxes of your org are running commands (quota live_sandboxes = \
                 {limit}) and {waiting} sessions are waiting for one already, the most this \
                 server queues; retry later, or ask an admin to raise the quota \
                 (`outboard-server admin quota set --org ORG live_sandboxes N`)"
            )));
        }
        let (grant, granted) = oneshot::channel();
        slots.queue.push_back(Waiter { id, manager, grant });
        // The sandboxes between two commands freeze now rather than at their idle timer, so
        // the first of them to be idle lets a waiter in; one running a command hears it after.
        for member in slots.members.iter().filter(|m| !m.suspended) {
            if let Some(manager) = member.manager.upgrade() {
                let _ = manager.try_send(Request::Yield);
            }
        }
        let place = QueuePlace {
            position: u32::try_from(slots.queue.len()).unwrap_or(u32::MAX),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
        };
        Ok(Admission::Queued(Waiting {
            pool: self.pool.clone(),
            org: self.org.clone(),
            id,
            limit,
            place,
            grant: Some(granted),
        }))
    }

    /// Whether sessions of the org wait for a live sandbox now.
    pub fn has_waiters(&self) -> bool {
        self.pool.waiting(&self.org) > 0
    }

    /// Whether member `id` holds a slot now (an evicted one does not).
    pub fn holds(&self, id: u64) -> bool {
        self.pool.with_org(&self.org, |s| s.members.iter().any(|m| m.id == id)).unwrap_or(false)
    }

    /// Stops `victim`, a frozen sandbox whose slot this session took, waiting a moment for it.
    pub async fn evict(&self, victim: Option<mpsc::WeakSender<Request>>) {
        let Some(victim) = victim.and_then(|m| m.upgrade()) else { return };
        tracing::info!(org = %self.org, "live sandbox quota: stopping the least recently used frozen sandbox");
        let (reply, stopped) = oneshot::channel();
        let stop = async {
            if victim.send(Request::Stop(reply)).await.is_ok() {
                let _ = stopped.await;
            }
        };
        let _ = tokio::time::timeout(EVICT_WAIT, stop).await;
    }

    /// Records a state change of member `id`; a sandbox that stops or freezes lets the first
    /// waiter of the org in.
    pub fn update(&self, id: u64, state: SandboxState) {
        self.pool.with_org(&self.org, |slots| {
            match state {
                SandboxState::Provisioning | SandboxState::Running | SandboxState::Suspended => {
                    if let Some(m) = slots.members.iter_mut().find(|m| m.id == id) {
                        m.suspended = state == SandboxState::Suspended;
                        m.last_used = Instant::now();
                    }
                }
                SandboxState::Waiting => {}
                _ => slots.members.retain(|m| m.id != id),
            }
            slots.hand_over();
        });
    }
}

impl Waiting {
    /// Where this session stands in the queue.
    pub fn place(&self) -> QueuePlace {
        self.place
    }

    /// Waits for a slot, at most the pool's longest wait, and not past `cancel`: the frozen
    /// sandbox to stop when there is one ([`PoolTicket::evict`]).
    pub async fn granted(
        mut self,
        cancel: &CancellationToken,
    ) -> Result<Option<mpsc::WeakSender<Request>>, SandboxError> {
        let wait = self.pool.bounds.wait;
        let Some(granted) = self.grant.as_mut() else {
            return Err(SandboxError::Start("the sandbox queue lost this session's place".into()));
        };
        let outcome = tokio::select! {
            got = tokio::time::timeout(wait, granted) => got,
            () = cancel.cancelled() => {
                return Err(SandboxError::Start(
                    "interrupted while waiting for a live sandbox of the org; the command did \
                     not run"
                        .into(),
                ))
            }
        };
        match outcome {
            Ok(Ok(victim)) => {
                self.grant = None;
                Ok(victim)
            }
            Ok(Err(_)) => {
                Err(SandboxError::Start("the sandbox queue dropped this session's place".into()))
            }
            Err(_) => Err(SandboxError::Start(format!(
                "no live sandbox of your org came free within {}: all of them ran commands \
                 the whole time (quota live_sandboxes = {}); retry later, or ask an admin to \
                 raise the quota (`outboard-server admin quota set --org ORG live_sandboxes N`)",
                spoken(wait),
                self.limit
            ))),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.grant.is_none() {
            return;
        }
        let id = self.id;
        self.pool.with_org(&self.org, |slots| {
            let queued = slots.queue.len();
            slots.queue.retain(|w| w.id != id);
            if slots.queue.len() == queued {
                // The slot was handed over as this session gave up: pass it on.
                slots.members.retain(|m| m.id != id);
            }
            slots.hand_over();
        });
    }
}

/// A wait as a person reads it: `300 s`, or `250 ms` under a second.
fn spoken(wait: Duration) -> String {
    match wait.as_secs() {
        0 => format!("{} ms", wait.as_millis()),
        secs => format!("{secs} s"),
    }
}

#[cfg(test)]
mod tests;
