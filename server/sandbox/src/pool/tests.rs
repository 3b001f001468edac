//! The org's queue for live sandboxes: the order of grants on the pool alone (managers stood in
//! by channels), and real bubblewrap sandboxes under a small quota: everyone completes, never
//! more than the quota live, the waiters are told, and both bounds are reached.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outboard_shared::{SandboxQueue, SandboxState};
use pretty_assertions::assert_eq;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::{Sandbox, SandboxConfig, SandboxTransition};

const T: Duration = Duration::from_secs(30);

/// A manager's inbox stood in by a channel: its weak sender for the pool, and the receiver
/// with the strong sender (a session's handle) that keep it open.
fn inbox() -> (mpsc::WeakSender<Request>, (mpsc::Receiver<Request>, mpsc::Sender<Request>)) {
    let (tx, rx) = mpsc::channel(8);
    (tx.downgrade(), (rx, tx))
}

#[tokio::test]
async fn the_queue_is_first_come_first_served_and_a_raised_cap_lets_waiters_in() {
    let pool = LivePool::new(PoolBounds { queue: 8, wait: T });
    let ticket = pool.ticket("acme", fixed_limit(1));
    let (first, mut first_rx) = inbox();
    let holder = PoolTicket::member_id();
    assert!(matches!(ticket.request(holder, first).await, Ok(Admission::Admitted(None))));
    let mut waiters = Vec::new();
    let mut inboxes = Vec::new();
    for expected in 1..=3 {
        let (manager, rx) = inbox();
        inboxes.push(rx);
        let id = PoolTicket::member_id();
        let Ok(Admission::Queued(waiting)) = ticket.request(id, manager).await else {
            panic!("the org is full: a new sandbox waits")
        };
        assert_eq!(waiting.place(), QueuePlace { position: expected, limit: 1 });
        waiters.push((id, waiting));
    }
    // The holder, between two commands, is asked to freeze for them.
    assert!(matches!(first_rx.0.try_recv(), Ok(Request::Yield)));
    assert_eq!((pool.live("acme"), pool.waiting("acme")), (1, 3));

    let (granted_tx, mut granted) = mpsc::channel(8);
    for (id, waiting) in waiters {
        let granted_tx = granted_tx.clone();
        tokio::spawn(async move {
            let got = waiting.granted(&CancellationToken::new()).await;
            granted_tx.send((id, got.is_ok())).await.unwrap();
        });
    }
    let order: Vec<u64> = {
        let mut ids = Vec::new();
        let mut holder = holder;
        for _ in 0..2 {
            ticket.update(holder, SandboxState::Stopped);
            let (id, ok) = granted.recv().await.unwrap();
            assert!(ok);
            assert_eq!(pool.live("acme"), 1, "a stop hands its slot over, never adds one");
            ids.push(id);
            holder = id;
        }
        ids
    };
    assert!(order[0] < order[1], "granted in the order they came: {order:?}");

    // The cap raised to 3: the next request (even of another session) lets the last waiter in
    // before itself.
    let raised = pool.ticket("acme", fixed_limit(3));
    let (manager, _rx) = inbox();
    assert!(matches!(
        raised.request(PoolTicket::member_id(), manager).await,
        Ok(Admission::Admitted(None))
    ));
    assert!(granted.recv().await.unwrap().1);
    assert_eq!((pool.live("acme"), pool.waiting("acme")), (3, 0));
}

#[tokio::test]
async fn a_waiter_that_leaves_gives_its_place_and_a_slot_handed_to_it_on() {
    let pool = LivePool::new(PoolBounds { queue: 8, wait: T });
    let ticket = pool.ticket("acme", fixed_limit(1));
    let (manager, _holder_rx) = inbox();
    let holder = PoolTicket::member_id();
    assert!(matches!(ticket.request(holder, manager).await, Ok(Admission::Admitted(None))));
    let mut inboxes = Vec::new();
    let mut queue = || {
        let (manager, rx) = inbox();
        inboxes.push(rx);
        let id = PoolTicket::member_id();
        (id, ticket.request(id, manager))
    };
    let queued = |admission| match admission {
        Ok(Admission::Queued(waiting)) => waiting,
        _ => panic!("the org is full: queued"),
    };
    let (_, a) = queue();
    let leaving = queued(a.await);
    let (b_id, b) = queue();
    let staying = queued(b.await);
    drop(leaving);
    assert_eq!(pool.waiting("acme"), 1, "the one that left is out of the queue");
    let (c_id, c) = queue();
    let last = queued(c.await);
    // The holder stops: its slot is handed to b, registered on b's behalf before b wakes.
    ticket.update(holder, SandboxState::Stopped);
    assert!(ticket.holds(b_id) && !ticket.holds(holder));
    assert_eq!(pool.waiting("acme"), 1);
    // b gives up before it wakes: the slot goes on to c, the count unchanged.
    drop(staying);
    assert!(ticket.holds(c_id) && !ticket.holds(b_id));
    assert_eq!((pool.live("acme"), pool.waiting("acme")), (1, 0));
    assert!(matches!(last.granted(&CancellationToken::new()).await, Ok(None)));
}

/// A sandbox under `pool`'s cap of `limit` for org acme, and its transitions.
fn boxed(
    pool: &LivePool,
    limit: usize,
) -> (Sandbox, mpsc::Receiver<SandboxTransition>, tempfile::TempDir) {
    let config = SandboxConfig {
        pool: Some(pool.ticket("acme", fixed_limit(limit))),
        ..SandboxConfig::Bwrap
    };
    let dir = tempfile::tempdir().unwrap();
    let (tx, rx) = mpsc::channel(64);
    (Sandbox::with_transitions(config, dir.path().to_path_buf(), tx), rx, dir)
}

/// The most live sandboxes of acme seen while `work` ran, sampled every 2 ms.
async fn peak_while<F: std::future::Future>(pool: &LivePool, work: F) -> (usize, F::Output) {
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (pool, done) = (pool.clone(), done.clone());
        tokio::spawn(async move {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(pool.live("acme"));
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            peak
        })
    };
    let out = work.await;
    done.store(true, Ordering::Relaxed);
    (sampler.await.unwrap(), out)
}

fn drain(rx: &mut mpsc::Receiver<SandboxTransition>) -> Vec<SandboxTransition> {
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

#[tokio::test]
async fn sessions_beyond_the_quota_wait_their_turn_and_all_complete() {
    let pool = LivePool::new(PoolBounds { queue: 16, wait: T });
    let boxes: Vec<_> = (0..6).map(|_| boxed(&pool, 2)).collect();
    let runs = boxes.iter().enumerate().map(|(i, (sandbox, _, _))| async move {
        let command = format!("sleep 0.3; echo done-{i}");
        sandbox.exec(&command, T, &mut |_, _| {}, CancellationToken::new()).await
    });
    let (peak, results) = peak_while(&pool, futures_util::future::join_all(runs)).await;
    for (i, result) in results.into_iter().enumerate() {
        assert_eq!(result.unwrap().output.trim(), format!("done-{i}"));
    }
    assert_eq!(peak, 2, "never more than the quota live at once, and the quota used");
    let mut waited = 0;
    for (_, mut rx, _) in boxes {
        let states = drain(&mut rx);
        if let Some(w) = states.iter().find(|t| t.state == SandboxState::Waiting) {
            waited += 1;
            let queue = w.queue.unwrap();
            assert_eq!(queue.limit, 2);
            assert!((1..=4).contains(&queue.position), "{queue:?}");
            let after: Vec<_> = states.iter().map(|t| t.state).collect();
            let at = after.iter().position(|s| *s == SandboxState::Waiting).unwrap();
            assert_eq!(after[at + 1], SandboxState::Provisioning, "{after:?}");
        }
    }
    assert_eq!(waited, 4, "each sandbox past the quota waited, and said so");
    assert_eq!(pool.waiting("acme"), 0);
}

#[tokio::test]
async fn many_starts_at_once_never_pass_the_quota_and_the_queue_bound_refuses_the_rest() {
    let pool = LivePool::new(PoolBounds { queue: 3, wait: T });
    let boxes: Vec<_> = (0..12).map(|_| boxed(&pool, 2)).collect();
    let runs = boxes.iter().map(|(sandbox, _, _)| async move {
        sandbox.exec("sleep 0.5; echo ran", T, &mut |_, _| {}, CancellationToken::new()).await
    });
    let (peak, results) = peak_while(&pool, futures_util::future::join_all(runs)).await;
    assert!(peak <= 2, "{peak} live sandboxes under a quota of 2");
    let (ran, refused): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    assert_eq!((ran.len(), refused.len()), (5, 7), "2 run, 3 wait, the rest are refused");
    for e in refused {
        let text = e.unwrap_err().to_string();
        assert!(
            text.contains("quota live_sandboxes = 2") && text.contains("3 sessions are waiting"),
            "{text}"
        );
        for n in 3..=12 {
            assert!(!text.contains(&format!("{n} live sandboxes")), "{text}");
        }
    }
    assert_eq!((pool.live("acme") <= 2, pool.waiting("acme")), (true, 0));
}

#[tokio::test]
async fn a_waiter_gives_up_after_the_longest_wait_and_an_interrupted_one_leaves_the_queue() {
    let pool = LivePool::new(PoolBounds { queue: 8, wait: Duration::from_millis(400) });
    let (holder, _, _d1) = boxed(&pool, 1);
    let (waiter, mut waiter_rx, _d2) = boxed(&pool, 1);
    let long = {
        let holder = holder.clone();
        tokio::spawn(async move {
            holder.exec("sleep 3; echo held", T, &mut |_, _| {}, CancellationToken::new()).await
        })
    };
    // The first sandbox of a test binary waits for the agent's build: a generous deadline.
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    while pool.live("acme") == 0 {
        assert!(std::time::Instant::now() < deadline, "the holder never took its slot");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The wait bound.
    let started = std::time::Instant::now();
    let e = waiter.exec("echo never", T, &mut |_, _| {}, CancellationToken::new()).await;
    let text = e.unwrap_err().to_string();
    assert!(text.contains("no live sandbox of your org came free within 400 ms"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    let states: Vec<_> = drain(&mut waiter_rx).into_iter().map(|t| (t.state, t.queue)).collect();
    assert_eq!(
        states,
        vec![
            (SandboxState::Waiting, Some(SandboxQueue { position: 1, limit: 1 })),
            (SandboxState::Stopped, None)
        ]
    );
    assert_eq!(pool.waiting("acme"), 0);

    // An interrupt while waiting: the command fails at once and its place is given up.
    let cancel = CancellationToken::new();
    let interrupted = {
        let (waiter, cancel) = (waiter.clone(), cancel.clone());
        tokio::spawn(async move { waiter.exec("echo never", T, &mut |_, _| {}, cancel).await })
    };
    while pool.waiting("acme") == 0 {
        assert!(std::time::Instant::now() < deadline, "never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cancel.cancel();
    let text = interrupted.await.unwrap().unwrap_err().to_string();
    assert!(text.contains("interrupted while waiting"), "{text}");
    assert_eq!((pool.waiting("acme"), pool.live("acme")), (0, 1));
    assert_eq!(long.await.unwrap().unwrap().output.trim(), "held");
}
