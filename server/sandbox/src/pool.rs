//! The per-org cap on live sandboxes (the `live_sandboxes` quota).
//!
//! A live sandbox (running or frozen) holds memory, processes and a host uid; an org that opens
//! many sessions would otherwise pile up frozen sandboxes until their 30-minute idle stop. When
//! a session needs a sandbox and its org is at the cap, the least recently used *frozen*
//! sandbox of the org is stopped (its workspace stays; its session provisions a fresh one on its
//! next command, like after an idle stop). When every live sandbox of the org is running a
//! command, the new one is refused with a message naming the quota.
//!
//! One server-wide registry, shared by the session managers through a cheap handle: a `std`
//! mutex held for a map update, never across an await. Members hold a weak sender to their
//! manager, so the registry never keeps a session's sandbox alive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use outboard_shared::SandboxState;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use outboard_sandbox_init::error::SandboxError;

use crate::request::Request;

/// How long a sandbox waits for an evicted one to stop before it starts anyway (an evicted
/// sandbox is frozen and stops in milliseconds; one that just woke up finishes its command
/// first).
const EVICT_WAIT: Duration = Duration::from_secs(2);

/// Unique ids of pool members.
static NEXT_MEMBER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[derive(Debug)]
struct Member {
    id: u64,
    suspended: bool,
    last_used: Instant,
    manager: mpsc::WeakSender<Request>,
}

/// The registry of live sandboxes by org.
#[derive(Debug, Clone, Default)]
pub struct LivePool {
    orgs: Arc<Mutex<HashMap<String, Vec<Member>>>>,
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

impl LivePool {
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
            Ok(orgs) => orgs.values().flatten().filter_map(|m| m.manager.upgrade()).collect(),
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
        self.orgs.lock().map(|orgs| orgs.get(org).map_or(0, Vec::len)).unwrap_or(0)
    }
}

impl PoolTicket {
    /// A fresh member id for one manager.
    pub fn member_id() -> u64 {
        NEXT_MEMBER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Makes room for member `id` and registers it as running; evicts the org's least recently
    /// used frozen sandbox when the org is at its cap.
    pub async fn admit(
        &self,
        id: u64,
        manager: mpsc::WeakSender<Request>,
    ) -> Result<(), SandboxError> {
        let limit = (self.limit)().await.max(1);
        let victim = {
            let mut orgs = self.lock()?;
            let members = orgs.entry(self.org.clone()).or_default();
            members.retain(|m| m.id != id);
            let victim = if members.len() >= limit {
                let lru = members
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.suspended)
                    .min_by_key(|(_, m)| m.last_used)
                    .map(|(i, _)| i);
                match lru {
                    Some(i) => Some(members.remove(i)),
                    None => {
                        return Err(SandboxError::Start(format!(
                            "your org already has {} live sandboxes, all running commands \
                             (quota live_sandboxes = {}); wait for one to finish, or ask an \
                             admin to raise it (`outboard-server admin quota set --org ORG \
                             live_sandboxes N`)",
                            members.len(),
                            limit
                        )))
                    }
                }
            } else {
                None
            };
            members.push(Member { id, suspended: false, last_used: Instant::now(), manager });
            victim
        };
        if let Some(victim) = victim.and_then(|m| m.manager.upgrade()) {
            tracing::info!(org = %self.org, limit, "live sandbox quota: stopping the least recently used frozen sandbox");
            let (reply, stopped) = oneshot::channel();
            if victim.try_send(Request::Stop(reply)).is_ok() {
                let _ = tokio::time::timeout(EVICT_WAIT, stopped).await;
            }
        }
        Ok(())
    }

    /// Records a state change of member `id`.
    pub fn update(&self, id: u64, state: SandboxState) {
        let Ok(mut orgs) = self.lock() else { return };
        let Some(members) = orgs.get_mut(&self.org) else { return };
        match state {
            SandboxState::Provisioning | SandboxState::Running | SandboxState::Suspended => {
                if let Some(m) = members.iter_mut().find(|m| m.id == id) {
                    m.suspended = state == SandboxState::Suspended;
                    m.last_used = Instant::now();
                }
            }
            _ => members.retain(|m| m.id != id),
        }
        if members.is_empty() {
            orgs.remove(&self.org);
        }
    }

    fn lock(
        &self,
    ) -> Result<std::sync::MutexGuard<'_, HashMap<String, Vec<Member>>>, SandboxError> {
        self.pool
            .orgs
            .lock()
            .map_err(|_| SandboxError::Start("the sandbox pool is poisoned".into()))
    }
}
