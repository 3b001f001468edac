//! Byte accounting of proxied connections: a stream wrapper that counts bytes each way, notes
//! the time of the last byte (for the idle timeout) and charges the session's byte budget,
//! failing the stream once the budget is spent.
//!
//! Why a wrapper around the socket rather than counting in the copy loops: plain HTTP goes
//! through hyper, which sees only the wrapped socket, so one place counts what actually
//! crossed to and from the upstream. A `CONNECT` tunnel takes the socket back out
//! ([`Metered::into_parts`]) to splice it, and the same accounting comes along as a [`Tap`].

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::splice::{Dir, Meter};

/// When a connection last moved a byte, either way, on any of its sockets.
#[derive(Debug)]
pub(crate) struct Activity {
    base: Instant,
    /// Milliseconds since `base`.
    last: AtomicU64,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity { base: Instant::now(), last: AtomicU64::new(0) })
    }

    fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.fetch_max(ms, Ordering::Relaxed);
    }

    /// Resolves once `timeout` has passed without a byte.
    pub(crate) async fn idle(&self, timeout: Duration) {
        loop {
            let last = self.base + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let deadline = last + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// The session's byte budget, both directions of every connection together.
#[derive(Debug)]
pub(crate) struct Budget {
    limit: u64,
    used: AtomicU64,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget { limit, used: AtomicU64::new(0) })
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub(crate) fn spent(&self) -> bool {
        self.used() >= self.limit
    }

    fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.used())
    }

    fn charge(&self, n: usize) {
        self.used.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Bytes one upstream connection moved.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Sandbox → upstream.
    pub up: AtomicU64,
    /// Upstream → sandbox.
    pub down: AtomicU64,
}

/// The error a stream returns once the session's budget is spent.
pub(crate) const BUDGET_SPENT: &str = "the session's network byte budget is spent";

/// A socket that counts. `counters` and `budget` are set for the upstream side; the sandbox side
/// only notes activity.
pub(crate) struct Metered<T> {
    inner: T,
    activity: Arc<Activity>,
    counters: Option<Arc<Counters>>,
    budget: Option<Arc<Budget>>,
}

impl<T> Metered<T> {
    /// The sandbox's side of a connection.
    pub(crate) fn client(inner: T, activity: Arc<Activity>) -> Self {
        Metered { inner, activity, counters: None, budget: None }
    }

    /// The upstream side: bytes counted on `counters` and charged to `budget`.
    pub(crate) fn upstream(
        inner: T,
        activity: Arc<Activity>,
        counters: Arc<Counters>,
        budget: Arc<Budget>,
    ) -> Self {
        Metered { inner, activity, counters: Some(counters), budget: Some(budget) }
    }

    /// The socket and its accounting, for a tunnel that moves bytes without this wrapper
    /// ([`crate::splice`]).
    pub(crate) fn into_parts(self) -> (T, Tap) {
        let tap = Tap { activity: self.activity, counters: self.counters, budget: self.budget };
        (self.inner, tap)
    }

    fn budget_left(&self) -> io::Result<u64> {
        match &self.budget {
            Some(b) if b.remaining() == 0 => Err(io::Error::other(BUDGET_SPENT)),
            Some(b) => Ok(b.remaining()),
            None => Ok(u64::MAX),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Metered<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // A read may overshoot the budget by at most one read buffer; the next one fails.
        if let Err(e) = self.budget_left() {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.activity.touch();
            if let Some(c) = &self.counters {
                c.down.fetch_add(n as u64, Ordering::Relaxed);
            }
            if let Some(b) = &self.budget {
                b.charge(n);
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Metered<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let left = match self.budget_left() {
            Ok(left) => left,
            Err(e) => return Poll::Ready(Err(e)),
        };
        let take = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let polled = Pin::new(&mut self.inner).poll_write(cx, &buf[..take]);
        if let Poll::Ready(Ok(n)) = &polled {
            if *n > 0 {
                self.activity.touch();
                if let Some(c) = &self.counters {
                    c.up.fetch_add(*n as u64, Ordering::Relaxed);
                }
                if let Some(b) = &self.budget {
                    b.charge(*n);
                }
            }
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A [`Metered`] socket's accounting without the socket: what [`crate::splice`] charges as it
/// moves a tunnel's bytes. `a` is the sandbox's side, `b` the upstream.
pub(crate) struct Tap {
    activity: Arc<Activity>,
    counters: Option<Arc<Counters>>,
    budget: Option<Arc<Budget>>,
}

impl Meter for Tap {
    fn allowance(&self) -> io::Result<usize> {
        match &self.budget {
            Some(b) if b.remaining() == 0 => Err(io::Error::other(BUDGET_SPENT)),
            Some(b) => Ok(usize::try_from(b.remaining()).unwrap_or(usize::MAX)),
            None => Ok(usize::MAX),
        }
    }

    /// Counted and charged as read, either way: the budget stops a connection before it
    /// reads past it, not after it wrote.
    fn received(&self, dir: Dir, n: usize) {
        self.activity.touch();
        if let Some(c) = &self.counters {
            let counter = match dir {
                Dir::AToB => &c.up,
                Dir::BToA => &c.down,
            };
            counter.fetch_add(n as u64, Ordering::Relaxed);
        }
        if let Some(b) = &self.budget {
            b.charge(n);
        }
    }

    fn sent(&self, _dir: Dir, _n: usize) {
        self.activity.touch();
    }
}
