//! The store across a PostgreSQL outage, on a cluster of the test's own that it stops and
//! starts again (a fast shutdown: the pooled connections end with `57P01`).

use std::time::Duration;

use outboard_base::util::now_rfc3339;
use outboard_shared::{EventKind, SessionEvent, SessionId};

use crate::pgtest::Cluster;
use crate::{Durability, Store, StoreError, StoreSpec};

fn event(sid: &SessionId, seq: u64, text: &str) -> SessionEvent {
    SessionEvent {
        session_id: sid.clone(),
        seq,
        ts: now_rfc3339(),
        kind: EventKind::UserMessage { text: text.into(), attachments: Vec::new() },
        parent: None,
    }
}

fn open(cluster: &Cluster) -> Store {
    let url = cluster.fresh_url().unwrap();
    Store::open_spec(&StoreSpec::Postgres { url, pool: 3 }, Durability::Normal, None).unwrap()
}

/// Stops the cluster for `outage` on a thread of its own, starting now.
fn outage(cluster: &'static Cluster, outage: Duration) -> std::thread::JoinHandle<()> {
    cluster.down();
    std::thread::spawn(move || {
        std::thread::sleep(outage);
        cluster.up().unwrap();
    })
}

fn own_cluster() -> &'static Cluster {
    Box::leak(Box::new(crate::pg::off_runtime(|| Cluster::start(false)).unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_wait_out_an_outage_and_stale_connections_are_retried() {
    let cluster = own_cluster();
    let store = open(cluster);
    let (alice, token) = store.add_user("acme", "alice").await.unwrap();
    let s = store.create_session(&alice, "t", "anthropic/m").await.unwrap();
    store.append_event(event(&s.id, 1, "before")).await.unwrap();

    // Down while idle: every pooled connection is stale when the server is back.
    let back = outage(cluster, Duration::from_secs(2));
    let appended = store.append_event(event(&s.id, 2, "during")).await;
    back.join().unwrap();
    appended.unwrap();
    assert!(store.unreachable_for().is_none(), "the store is reachable again");
    assert!(store.recovered_within(Duration::from_secs(30)), "and knows it came back lately");
    // Every worker's connection died in the outage: each one's next job still succeeds.
    for seq in 3..9 {
        store.append_event(event(&s.id, seq, "after")).await.unwrap();
        assert!(store.authenticate(&token).await.unwrap().is_some());
    }
    let texts: Vec<u64> =
        store.events_after(&s.id, 0).await.unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(texts, (1..9).collect::<Vec<_>>(), "each event once, none lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_seen_while_it_lasts_and_past_the_bound_a_call_says_unreachable() {
    let cluster = own_cluster();
    let mut store = open(cluster);
    store.set_retry_bound(Duration::from_millis(1500));
    let (alice, _) = store.add_user("acme", "alice").await.unwrap();
    cluster.down();
    let started = std::time::Instant::now();
    let err = store.create_session(&alice, "t", "anthropic/m").await.unwrap_err();
    assert!(matches!(err, StoreError::Unreachable { .. }), "{err:?}");
    assert!(err.is_unreachable());
    let text = err.to_string();
    assert!(text.contains("unreachable") && !text.contains("57P01"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(10), "bounded: {:?}", started.elapsed());
    assert!(store.unreachable_for().is_some(), "the outage is known");
    tokio::time::timeout(Duration::from_secs(5), store.unreachable(Duration::from_millis(200)))
        .await
        .expect("a waiter for the outage is woken");
    cluster.up().unwrap();
    store.create_session(&alice, "t", "anthropic/m").await.unwrap();
    assert!(store.unreachable_for().is_none());
}

#[tokio::test]
async fn an_append_run_again_finds_its_own_event_and_only_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::pgtest::open_test_store(&dir.path().join("outboard.db")).unwrap();
    let (alice, _) = store.add_user("acme", "alice").await.unwrap();
    let s = store.create_session(&alice, "t", "anthropic/m").await.unwrap();
    let first = event(&s.id, 1, "one");
    assert!(!store
        .call({
            let e = first.clone();
            move |c| crate::already_appended(c, &e)
        })
        .await
        .unwrap());
    store.append_event(first.clone()).await.unwrap();
    let (same, other) = (first.clone(), event(&s.id, 1, "another"));
    let found = store
        .call(move |c| {
            Ok((crate::already_appended(c, &same)?, crate::already_appended(c, &other)?))
        })
        .await
        .unwrap();
    assert_eq!(found, (true, false), "the event committed is found; another at its seq is not");
}
