//! One proxy's shared state, one client connection, and the audit record each connection or
//! refusal writes when it ends; the answers the proxy gives in its own name.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use hyper::{Response, StatusCode};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::contract::{Audit, AuditEntry, RefusedBy, SessionNet};
use crate::leaves::Leaves;
use crate::meter::{Activity, Budget, Counters, BUDGET_SPENT};
use crate::target::{own_answer_headers, refusal_body, Refusal, Target};

/// How long connecting to one resolved address may take before the next is tried.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What every connection of one proxy shares.
pub(crate) struct Shared {
    pub(crate) ctx: SessionNet,
    pub(crate) server_ports: Vec<u16>,
    /// Slots under [`NetLimits::max_connections`].
    pub(crate) open: Arc<Semaphore>,
    /// Slots for answering connections over the cap ([`REFUSING`]).
    pub(crate) refusing: Arc<Semaphore>,
    pub(crate) budget: Arc<Budget>,
    /// The leaf certificates of intercepted hosts, when the session has the org's CA.
    pub(crate) leaves: Option<Leaves>,
    /// [`REFUSAL_LINGER`], but for tests.
    pub(crate) refusal_linger: Duration,
    pub(crate) cancel: CancellationToken,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("ctx", &self.ctx).finish_non_exhaustive()
    }
}

/// One client connection: its slot, its activity clock, and why it ended when the proxy cut it.
pub(crate) struct Conn {
    pub(crate) shared: Arc<Shared>,
    pub(crate) activity: Arc<Activity>,
    pub(crate) ended: Arc<Mutex<Option<String>>>,
    pub(crate) _slot: OwnedSemaphorePermit,
}

impl Conn {
    pub(crate) fn end(&self, why: String) {
        if let Ok(mut ended) = self.ended.lock() {
            ended.get_or_insert(why);
        }
    }

    pub(crate) fn idle_message(&self) -> String {
        format!(
            "closed after {} s without a byte either way (the idle timeout)",
            self.shared.ctx.limits.idle_timeout.as_secs_f64()
        )
    }
}

/// Connects to the first vetted address that answers.
pub(crate) async fn connect(addrs: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = String::from("no address to connect to");
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = format!("connecting to {addr}: {e}"),
            Err(_) => {
                last =
                    format!("connecting to {addr} took more than {} s", CONNECT_TIMEOUT.as_secs())
            }
        }
    }
    Err(last)
}

/// An audit record, written when dropped (so a connection cut by cancellation is recorded too).
pub(crate) struct Record {
    pub(crate) audit: Arc<dyn Audit>,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) allowed: bool,
    pub(crate) reason: Option<String>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) started: std::time::Instant,
    pub(crate) at: String,
    pub(crate) ended: Option<Arc<Mutex<Option<String>>>>,
    pub(crate) budget: Option<Arc<Budget>>,
    pub(crate) refused_by: Option<RefusedBy>,
    pub(crate) intercepted: bool,
}

impl Record {
    pub(crate) fn refused(shared: &Shared, host: &str, port: u16, reason: String) -> Record {
        Record {
            audit: shared.ctx.audit.clone(),
            host: host.to_string(),
            port,
            allowed: false,
            reason: Some(reason),
            counters: Arc::new(Counters::default()),
            started: std::time::Instant::now(),
            at: outboard_base::util::now_rfc3339(),
            ended: None,
            budget: None,
            refused_by: None,
            intercepted: false,
        }
    }

    /// A refusal the client was told about: the log's reason is `policy: reason`.
    pub(crate) fn refusal(shared: &Shared, host: &str, port: u16, refusal: &Refusal) -> Record {
        let why = format!("{}: {}", refusal.policy, refusal.reason);
        let mut record = Record::refused(shared, host, port, why);
        record.refused_by = Some(RefusedBy {
            policy: refusal.policy.clone(),
            reason: refusal.reason.clone(),
            hint: refusal.hint.clone(),
        });
        record
    }

    pub(crate) fn allowed(conn: &Conn, target: &Target, counters: Arc<Counters>) -> Record {
        Record {
            audit: conn.shared.ctx.audit.clone(),
            host: target.host.clone(),
            port: target.port,
            allowed: true,
            reason: None,
            counters,
            started: std::time::Instant::now(),
            at: outboard_base::util::now_rfc3339(),
            ended: Some(conn.ended.clone()),
            budget: Some(conn.shared.budget.clone()),
            refused_by: None,
            intercepted: false,
        }
    }

    /// Writes the record now.
    pub(crate) fn finish(self) {}
}

impl Drop for Record {
    fn drop(&mut self) {
        let mut reason = self.reason.take();
        if reason.is_none() {
            reason = self.ended.as_ref().and_then(|e| e.lock().ok().and_then(|e| e.clone()));
        }
        if reason.is_none() && self.budget.as_ref().is_some_and(|b| b.spent()) {
            reason = Some(BUDGET_SPENT.to_string());
        }
        self.audit.record(AuditEntry {
            host: std::mem::take(&mut self.host),
            port: self.port,
            allowed: self.allowed,
            reason,
            bytes_up: self.counters.up.load(Ordering::Relaxed),
            bytes_down: self.counters.down.load(Ordering::Relaxed),
            duration: self.started.elapsed(),
            intercepted: self.intercepted,
            at: std::mem::take(&mut self.at),
            refused_by: self.refused_by.take(),
        });
    }
}

pub(crate) fn own_answer(status: StatusCode, body: String) -> Response<Body> {
    let mut answer = Response::new(Body::from(body));
    *answer.status_mut() = status;
    own_answer_headers(answer.headers_mut());
    answer
}

pub(crate) fn refused(host: &str, port: u16, refusal: &Refusal) -> Response<Body> {
    own_answer(refusal.status, refusal_body(host, port, refusal))
}

pub(crate) fn unreachable(target: &Target, why: &str) -> Response<Body> {
    own_answer(
        StatusCode::BAD_GATEWAY,
        format!(
            "Outboard's network proxy could not reach {}:{}: {why}\n",
            target.host, target.port
        ),
    )
}
