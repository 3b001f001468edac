use super::*;
use crate::{pgtest, Durability, Store};
use outboard_shared::{EventKind, SessionEvent};

fn event(sid: &SessionId, seq: u64) -> SessionEvent {
    SessionEvent {
        session_id: sid.clone(),
        seq,
        ts: outboard_base::util::now_rfc3339(),
        kind: EventKind::UserMessage { text: format!("m{seq}"), attachments: Vec::new() },
        parent: None,
    }
}

/// Two nodes on one store (the same file, or the same PostgreSQL schema).
fn two_nodes(dir: &std::path::Path, lease: Duration) -> (Store, Store) {
    let spec = pgtest::test_spec(&dir.join("outboard.db"));
    let mut a = Store::open_spec(&spec, Durability::Normal, None).unwrap();
    let mut b = Store::open_spec(&spec, Durability::Normal, None).unwrap();
    a.set_lease_time(lease);
    b.set_lease_time(lease);
    (a, b)
}

#[tokio::test]
async fn a_node_that_lost_its_lease_cannot_append_again() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_nodes(dir.path(), Duration::from_millis(300));
    let (alice, _) = a.add_user("acme", "alice").await.unwrap();
    let s = a.create_session(&alice, "t", "anthropic/m").await.unwrap();

    let first = a.acquire_lease(&s.id).await.unwrap().unwrap();
    a.append_event(event(&s.id, 1)).await.unwrap();
    // Held and not expired: the other node is told who has it.
    let held = b.acquire_lease(&s.id).await.unwrap().unwrap_err();
    assert_eq!(held.node, *a.node().id);
    assert_eq!(held.epoch, first.epoch);

    // A stops renewing (paused); past the lease, B takes over with a higher epoch.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = b.acquire_lease(&s.id).await.unwrap().unwrap();
    assert!(second.epoch > first.epoch);

    // A wakes up: its append is refused and leaves nothing; its renewal reports the loss.
    assert!(matches!(a.append_event(event(&s.id, 2)).await, Err(StoreError::Fenced(_))));
    assert!(matches!(
        a.append_events(vec![event(&s.id, 2), event(&s.id, 3)]).await,
        Err(StoreError::Fenced(_))
    ));
    assert_eq!(a.events_after(&s.id, 0).await.unwrap().len(), 1);
    // Known lost once fenced (renewal has nothing new to report), and it stays fenced.
    assert!(a.renew_leases().await.unwrap().is_empty());
    assert!(a.node().held().is_empty());
    assert!(matches!(a.append_event(event(&s.id, 2)).await, Err(StoreError::Fenced(_))));

    // B writes on; gives the lease back; A may take it again, and then B is fenced.
    b.append_event(event(&s.id, 2)).await.unwrap();
    b.release_lease(&s.id, None).await.unwrap();
    let third = a.acquire_lease(&s.id).await.unwrap().unwrap();
    assert!(third.epoch > second.epoch);
    assert!(b.append_event(event(&s.id, 3)).await.is_ok(), "B gave it back: unchecked");
    a.append_event(event(&s.id, 4)).await.unwrap();
    // A crashed B's leases expire; once taken over, B (renewing late) is fenced for good.
    b.acquire_lease(&s.id).await.unwrap().unwrap_err();
    let seqs: Vec<u64> =
        b.events_after(&s.id, 0).await.unwrap().into_iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [1, 2, 3, 4]);
}

#[tokio::test]
async fn renewal_keeps_a_lease_and_reports_one_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_nodes(dir.path(), Duration::from_millis(300));
    let (alice, _) = a.add_user("acme", "alice").await.unwrap();
    let kept = a.create_session(&alice, "kept", "anthropic/m").await.unwrap();
    let lost = a.create_session(&alice, "lost", "anthropic/m").await.unwrap();
    a.heartbeat("node-a", "ws://127.0.0.1:1", "serving").await.unwrap();
    a.acquire_lease(&kept.id).await.unwrap().unwrap();
    a.acquire_lease(&lost.id).await.unwrap().unwrap();
    // Renewed well within the lease time, `kept` stays A's past several lease times.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(a.renew_leases().await.unwrap().is_empty());
        assert!(b.acquire_lease(&kept.id).await.unwrap().is_err());
    }
    // B takes `lost` over by force of expiry: make it look expired, as a pause would.
    b.call({
        let id = lost.id.0.clone();
        move |c| c.execute("UPDATE session_leases SET expires_ms = 1 WHERE session_id = ?1", [&id])
    })
    .await
    .unwrap();
    b.acquire_lease(&lost.id).await.unwrap().unwrap();
    assert_eq!(a.renew_leases().await.unwrap(), vec![lost.id.clone()]);
    let nodes = b.nodes(Duration::from_secs(60)).await.unwrap();
    let row = nodes.iter().find(|n| n.id == *a.node().id).unwrap();
    assert_eq!((row.name.as_str(), row.state.as_str(), row.leases), ("node-a", "serving", 1));
}

#[tokio::test]
async fn a_nodes_url_and_relay_key_edited_in_its_row_are_written_back_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_nodes(dir.path(), Duration::from_millis(300));
    a.heartbeat("node-a", "wss://a.internal:7700", "serving").await.unwrap();
    a.set_relay_key_hash("hash-a").await.unwrap();
    let id = a.node().id.to_string();
    assert_eq!(b.relay_key_hash(&id).await.unwrap().as_deref(), Some("hash-a"));
    assert_eq!(a.reassert_node().await.unwrap(), None, "nothing changed");
    // Someone with write access to the store points the row elsewhere.
    b.call({
        let id = id.clone();
        move |c| {
            c.execute(
                "UPDATE nodes SET url = 'ws://10.77.0.2:8080', relay_key_hash = 'x' WHERE id = ?1",
                [&id],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(a.reassert_node().await.unwrap().as_deref(), Some("ws://10.77.0.2:8080"));
    let nodes = b.nodes(Duration::from_secs(60)).await.unwrap();
    let row = nodes.iter().find(|n| n.id == id).unwrap();
    assert_eq!(row.url.as_deref(), Some("wss://a.internal:7700"));
    assert_eq!(b.relay_key_hash(&id).await.unwrap().as_deref(), Some("hash-a"));
    // A stopped node's key authenticates nothing.
    a.set_node_state("stopped").await.unwrap();
    assert_eq!(b.relay_key_hash(&id).await.unwrap(), None);
}
