//! A session's network, put together for its sandbox: the org's policy narrowed by the session
//! ([`outboard_org::netpolicy`]), the org's credentials bound to outbound HTTP and its CA
//! ([`outboard_org::secrets`]), and where the proxy's records go: the org's network log and, for every
//! refusal, a `network` event in the session's own log.
//!
//! What it owns: the [`Decide`] and [`Audit`] the proxy ([`outboard_egress`]) is given, the
//! task that writes audit records in batches, and the coalescing of refusal events.
//! What it does not: the session. Events leave through [`RefusalEvents`], which the session
//! actor implements, so this module knows nothing of actors.
//!
//! Design choices:
//! - **Fail closed.** When the policy cannot be read when the sandbox starts, every connection
//!   is refused with that reason; when the secrets cannot be read, nothing is injected (the host
//!   is then tunnelled and sees no credential).
//! - **The proxy never waits on the store.** Audit records go through a bounded queue
//!   ([`AUDIT_QUEUE`]); when it is full a record is counted, not kept, and the next batch
//!   writes a row saying how many were lost.
//! - **Refusal events are coalesced.** A client retrying one refused host in a loop makes one
//!   event per destination every [`COALESCE`] (the folded ones counted in `repeated`), and a
//!   session gets at most [`EVENTS_PER_MINUTE`]; every refusal still has its log row.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use outboard_shared::{EventKind, SessionNetwork};
use tokio::sync::{mpsc, oneshot};

use outboard_egress::{
    Audit, AuditEntry, Decide, Injection, NetLimits, RefusedBy, SessionNet, Verdict,
};
use outboard_org::netpolicy::{self, Decision, LogRow, SessionPolicy};
use outboard_org::secrets::{Outbound, Secrets};
use outboard_store::{SessionRow, Store};

/// Audit records waiting to be written, per session: a burst of a parallel `npm install`
/// (a few hundred connections) fits; beyond, records are counted and dropped rather than the
/// proxy made to wait on the store.
pub const AUDIT_QUEUE: usize = 1024;

/// Records written in one transaction at most.
const AUDIT_BATCH: usize = 256;

/// One refusal event per destination per this long; the others are counted in the next one.
pub const COALESCE: Duration = Duration::from_secs(5);

/// Refusal events per session per minute at most: enough to follow what a build tried, few
/// enough that a scan of hosts does not flood the log (its rows are in the network log).
pub const EVENTS_PER_MINUTE: u32 = 60;

/// Destinations the coalescer remembers at most: beyond, the quiet ones are forgotten.
const COALESCE_KEYS: usize = 256;

/// Where a session's refusal events go.
pub trait RefusalEvents: Send + Sync + 'static {
    /// Appends `event` (an [`EventKind::Network`]) to the session's log; `false` when the
    /// session is gone.
    fn refused(&self, event: EventKind) -> BoxFuture<'static, bool>;
}

/// What every session's network is made from.
#[derive(Debug, Clone)]
pub struct NetworkDeps {
    pub store: Store,
    /// The org secrets; `None`: nothing is injected (a server without a secret key).
    pub secrets: Option<Secrets>,
    pub limits: NetLimits,
    /// Where the proxy's connections are counted (`outboard_egress_*`).
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// A session's network as its sandbox gets it.
#[derive(Debug, Clone)]
pub struct SessionNetworkParts {
    /// For `SandboxConfig::network`.
    pub net: SessionNet,
    /// Every value of the org's secrets and what replaces it in tool results (`[secret NAME]`).
    pub scrub: Vec<(String, String)>,
}

/// Builds the network of `row`'s sandbox.
pub async fn build(
    deps: &NetworkDeps,
    row: &SessionRow,
    events: Arc<dyn RefusalEvents>,
) -> SessionNetworkParts {
    let policy = match SessionPolicy::load(&deps.store, &row.org_id, row.network).await {
        Ok(p) => Ok(p),
        Err(e) => {
            tracing::error!(session = %row.id, "cannot read the network policy; the sandbox gets no network: {e}");
            Err(e.to_string())
        }
    };
    let mut outbound = read_outbound(deps, &row.org_id).await;
    if row.network == SessionNetwork::None {
        // Nothing to inject into: every connection is refused. The values are still scrubbed.
        outbound.injections.clear();
        outbound.env.clear();
    }
    // With any secret in the org, not only a bound one: a secret bound while the session runs
    // is injected at the next refresh, and that needs the CA in the sandbox's bundle already.
    let any_secret = !outbound.injections.is_empty() || !outbound.scrub.is_empty();
    let ca = match (&deps.secrets, any_secret && row.network != SessionNetwork::None) {
        (Some(secrets), true) => match secrets.org_ca(&row.org_id).await {
            Ok(ca) => Some(Arc::new(ca)),
            Err(e) => {
                tracing::error!(session = %row.id, "cannot make the org's sandbox CA; injected hosts are refused: {e}");
                None
            }
        },
        _ => None,
    };
    let id = row.org_id.clone();
    let org_name = match deps.store.call(move |c| Ok(outboard_store::org_name(c, &id))).await {
        Ok(name) => name,
        Err(_) => row.org_id.to_string(),
    };
    let scrub = outbound.scrub.clone();
    let env = outbound.env.clone();
    let decider = Arc::new(Decider { policy, outbound: RwLock::new(Arc::new(outbound)) });
    if let (Some(secrets), true) = (&deps.secrets, row.network != SessionNetwork::None) {
        refresh_outbound(Arc::downgrade(&decider), secrets.clone(), row.org_id.clone());
    }
    let (tx, rx) = mpsc::channel(AUDIT_QUEUE);
    let dropped = Arc::new(AtomicU64::new(0));
    let writer = AuditWriter {
        store: deps.store.clone(),
        org: row.org_id.clone(),
        session: row.id.to_string(),
        user: row.owner.clone(),
        dropped: dropped.clone(),
        events,
        coalescer: Coalescer::default(),
    };
    tokio::spawn(writer.run(rx));
    SessionNetworkParts {
        net: SessionNet {
            org: row.org_id.clone(),
            org_name,
            session: row.id.clone(),
            user: row.owner.clone(),
            decide: decider,
            audit: Arc::new(AuditSink { tx, dropped, metrics: deps.metrics.clone() }),
            limits: deps.limits,
            ca,
            env,
        },
        scrub,
    }
}

/// The org's secrets as a sandbox gets them; none when they cannot be read (logged).
async fn read_outbound(deps: &NetworkDeps, org: &outboard_shared::OrgId) -> Outbound {
    let Some(secrets) = &deps.secrets else { return Outbound::default() };
    match secrets.outbound(org).await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(%org, "cannot read the org's secrets; nothing is injected or scrubbed: {e}");
            Outbound::default()
        }
    }
}

/// Every value of `org`'s secrets and its `[secret NAME]`, for a session without a proxy.
pub async fn scrub_values(
    deps: &NetworkDeps,
    org: &outboard_shared::OrgId,
) -> Vec<(String, String)> {
    read_outbound(deps, org).await.scrub
}

/// The session's policy and the org's injections, re-read every [`netpolicy::REFRESH`].
struct Decider {
    /// `Err`: the policy could not be read when the sandbox started.
    policy: Result<Arc<SessionPolicy>, String>,
    outbound: RwLock<Arc<Outbound>>,
}

impl Decide for Decider {
    fn decide(&self, host: &str, port: u16) -> Verdict {
        let policy = match &self.policy {
            Ok(p) => p,
            Err(e) => {
                return Verdict::Refuse {
                    policy: "unreadable policy".into(),
                    reason: format!("the server could not read the org's network policy ({e})"),
                    hint: "ask an admin to check the server's log and `outboard-server admin \
                           network show`, then start a new session"
                        .into(),
                }
            }
        };
        match policy.decide(host, port) {
            Decision::Allow => Verdict::Allow,
            Decision::Refuse { policy, reason, hint } => Verdict::Refuse { policy, reason, hint },
        }
    }

    fn allows_literal(&self, ip: IpAddr, port: u16) -> bool {
        self.policy.as_ref().is_ok_and(|p| p.allows_literal(ip, port))
    }

    fn injections(&self, host: &str, port: u16) -> Vec<Arc<Injection>> {
        match self.outbound.read() {
            Ok(o) => o.for_host(host, port),
            Err(poisoned) => poisoned.into_inner().for_host(host, port),
        }
    }
}

/// Keeps the decider's injections current while it lives.
fn refresh_outbound(
    decider: std::sync::Weak<Decider>,
    secrets: Secrets,
    org: outboard_shared::OrgId,
) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(netpolicy::REFRESH).await;
            let Some(decider) = decider.upgrade() else { return };
            match secrets.outbound(&org).await {
                Ok(fresh) => {
                    let fresh = Arc::new(fresh);
                    match decider.outbound.write() {
                        Ok(mut o) => *o = fresh,
                        Err(poisoned) => *poisoned.into_inner() = fresh,
                    }
                }
                Err(e) => tracing::warn!(%org, "cannot re-read the org's secrets: {e}"),
            }
        }
    });
}

/// What the audit queue carries.
enum Msg {
    Entry(AuditEntry),
    /// Answer once everything queued before has been written and its events sent.
    Flush(oneshot::Sender<()>),
}

/// The proxy's end of the audit queue.
struct AuditSink {
    tx: mpsc::Sender<Msg>,
    dropped: Arc<AtomicU64>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl Audit for AuditSink {
    fn record(&self, entry: AuditEntry) {
        self.metrics.egress(entry.allowed);
        if self.tx.try_send(Msg::Entry(entry)).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.metrics.egress_audit_dropped();
        }
    }

    fn flush(&self) -> BoxFuture<'static, ()> {
        let tx = self.tx.clone();
        Box::pin(async move {
            let (ack, done) = oneshot::channel();
            if tx.send(Msg::Flush(ack)).await.is_ok() {
                let _ = done.await;
            }
        })
    }
}

/// Writes a session's audit records and sends its refusal events.
struct AuditWriter {
    store: Store,
    org: outboard_shared::OrgId,
    session: String,
    user: String,
    dropped: Arc<AtomicU64>,
    events: Arc<dyn RefusalEvents>,
    coalescer: Coalescer,
}

impl AuditWriter {
    async fn run(mut self, mut rx: mpsc::Receiver<Msg>) {
        let mut tick = tokio::time::interval(COALESCE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch = Vec::with_capacity(AUDIT_BATCH);
        let mut acks = Vec::new();
        loop {
            let mut take = |msg: Msg, batch: &mut Vec<AuditEntry>| match msg {
                Msg::Entry(e) => {
                    batch.push(e);
                    true
                }
                Msg::Flush(ack) => {
                    acks.push(ack);
                    false
                }
            };
            let open = tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => { take(msg, &mut batch); true }
                    None => false,
                },
                _ = tick.tick() => true,
            };
            // Up to a batch, and never past a flush: what it waits for is written first.
            while batch.len() < AUDIT_BATCH {
                match rx.try_recv() {
                    Ok(msg) => {
                        if !take(msg, &mut batch) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            let now = Instant::now();
            let mut events = Vec::new();
            for e in &batch {
                if let Some(by) = &e.refused_by {
                    events.extend(self.coalescer.offer(&e.host, e.port, by, now));
                }
            }
            events.extend(self.coalescer.due(now));
            self.write(std::mem::take(&mut batch)).await;
            for event in events {
                if !self.events.refused(event).await {
                    break;
                }
            }
            for ack in acks.drain(..) {
                let _ = ack.send(());
            }
            if !open {
                return;
            }
        }
    }

    async fn write(&self, batch: Vec<AuditEntry>) {
        let mut rows: Vec<LogRow> = batch.into_iter().map(|e| self.row(e)).collect();
        let lost = self.dropped.swap(0, Ordering::Relaxed);
        if lost > 0 {
            rows.push(LogRow {
                at: outboard_base::util::now_rfc3339(),
                session_id: self.session.clone(),
                user: self.user.clone(),
                host: String::new(),
                port: 0,
                allowed: false,
                reason: Some(format!(
                    "{lost} connection records were not kept: the audit queue ({AUDIT_QUEUE}) was full"
                )),
                bytes_up: 0,
                bytes_down: 0,
                duration_ms: 0,
                intercepted: false,
            });
        }
        if rows.is_empty() {
            return;
        }
        if let Err(e) = netpolicy::append(&self.store, &self.org, rows).await {
            tracing::warn!(session = %self.session, "cannot write the network log: {e}");
        }
    }

    fn row(&self, e: AuditEntry) -> LogRow {
        LogRow {
            at: e.at,
            session_id: self.session.clone(),
            user: self.user.clone(),
            host: e.host,
            port: e.port,
            allowed: e.allowed,
            reason: e.reason,
            bytes_up: e.bytes_up,
            bytes_down: e.bytes_down,
            duration_ms: u64::try_from(e.duration.as_millis()).unwrap_or(u64::MAX),
            intercepted: e.intercepted,
        }
    }
}

/// One destination's refusals since its last event.
#[derive(Debug)]
struct Slot {
    sent_at: Instant,
    /// Refusals folded since, and the newest of them.
    pending: u32,
    last: RefusedBy,
}

/// Turns refusals into few events (see the module header).
#[derive(Debug, Default)]
struct Coalescer {
    slots: HashMap<(String, u16), Slot>,
    minute: Option<Instant>,
    sent_this_minute: u32,
    /// Whether this minute's "more in the log" event went out.
    capped: bool,
}

impl Coalescer {
    /// The event for a refusal now, if one is due.
    fn offer(&mut self, host: &str, port: u16, by: &RefusedBy, now: Instant) -> Option<EventKind> {
        let key = (host.to_owned(), port);
        if let Some(slot) = self.slots.get_mut(&key) {
            if now.duration_since(slot.sent_at) < COALESCE {
                slot.pending += 1;
                slot.last = by.clone();
                return None;
            }
        }
        let repeated = self.slots.get(&key).map_or(0, |s| s.pending);
        let event = self.budgeted(now, host, port, by, repeated)?;
        if self.slots.len() >= COALESCE_KEYS && !self.slots.contains_key(&key) {
            self.slots.retain(|_, s| s.pending > 0 && now.duration_since(s.sent_at) < COALESCE);
            if self.slots.len() >= COALESCE_KEYS {
                self.slots.clear();
            }
        }
        self.slots.insert(key, Slot { sent_at: now, pending: 0, last: by.clone() });
        Some(event)
    }

    /// Events for destinations whose folded refusals have waited [`COALESCE`].
    fn due(&mut self, now: Instant) -> Vec<EventKind> {
        let ready: Vec<(String, u16)> = self
            .slots
            .iter()
            .filter(|(_, s)| s.pending > 0 && now.duration_since(s.sent_at) >= COALESCE)
            .map(|(k, _)| k.clone())
            .collect();
        let mut events = Vec::new();
        for key in ready {
            let Some(slot) = self.slots.remove(&key) else { continue };
            if let Some(e) = self.budgeted(now, &key.0, key.1, &slot.last, slot.pending - 1) {
                events.push(e);
                self.slots.insert(key, Slot { sent_at: now, pending: 0, last: slot.last });
            }
        }
        events
    }

    /// The event, unless the minute's budget is spent (then one event says so, once).
    fn budgeted(
        &mut self,
        now: Instant,
        host: &str,
        port: u16,
        by: &RefusedBy,
        repeated: u32,
    ) -> Option<EventKind> {
        if self.minute.is_none_or(|m| now.duration_since(m) >= Duration::from_secs(60)) {
            self.minute = Some(now);
            self.sent_this_minute = 0;
            self.capped = false;
        }
        if self.sent_this_minute >= EVENTS_PER_MINUTE {
            if self.capped {
                return None;
            }
            self.capped = true;
            return Some(EventKind::Network {
                host: String::new(),
                port: 0,
                policy: "audit".into(),
                reason: format!(
                    "more than {EVENTS_PER_MINUTE} refusals in a minute; the rest of this minute's \
                     are only in the network log"
                ),
                hint: "an admin sees every connection with `outboard-server admin network log \
                       --org ORG`"
                    .into(),
                repeated: 0,
            });
        }
        self.sent_this_minute += 1;
        Some(EventKind::Network {
            host: host.to_owned(),
            port,
            policy: by.policy.clone(),
            reason: by.reason.clone(),
            hint: by.hint.clone(),
            repeated,
        })
    }
}

#[cfg(test)]
mod tests;
