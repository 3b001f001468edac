use crate::rows::*;
use crate::*;
use outboard_base::digest::hash_token;
use outboard_base::util::now_rfc3339;
use outboard_shared::TurnId;
use outboard_shared::{EventKind, SessionEvent, SessionId};
use pretty_assertions::assert_eq;

fn event(sid: &SessionId, seq: u64, text: &str) -> SessionEvent {
    SessionEvent {
        session_id: sid.clone(),
        seq,
        ts: now_rfc3339(),
        kind: EventKind::UserMessage { text: text.into(), attachments: Vec::new() },
        parent: None,
    }
}

#[test]
fn derived_titles_are_the_first_line_cut_on_a_char_boundary() {
    assert_eq!(derived_title("\n  fix the build \nthen test", 256), "fix the build");
    assert_eq!(derived_title(&"x".repeat(100), 256), "x".repeat(TITLE_CHARS));
    let accents = "é".repeat(100);
    assert_eq!(derived_title(&accents, 256), "é".repeat(TITLE_CHARS));
    // Within the byte quota, never splitting a character (é is two bytes).
    assert_eq!(derived_title(&accents, 7), "ééé");
    assert_eq!(derived_title("   \n\t\n", 256), "");
}

#[tokio::test]
async fn a_titled_append_names_only_an_untitled_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = pgtest::open_test_store(&dir.path().join("outboard.db")).unwrap();
    let (alice, _) = store.add_user("acme", "alice").await.unwrap();
    let s = store.create_session(&alice, "", "anthropic/m").await.unwrap();
    let title = store.append_event_titled(event(&s.id, 1, "one"), "one".into()).await;
    assert_eq!(title.unwrap(), "one");
    let title = store.append_event_titled(event(&s.id, 2, "two"), "two".into()).await;
    assert_eq!(title.unwrap(), "one", "a session keeps the title it has");
    assert_eq!(store.session(&s.id).await.unwrap().unwrap().title, "one");
    assert_eq!(store.list_sessions(&alice.org_id, 10).await.unwrap()[0].title, "one");
}

#[tokio::test]
async fn users_tokens_sessions_and_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outboard.db");
    let spec = pgtest::test_spec(&path);
    let store = Store::open_spec(&spec, Durability::Normal, None).unwrap();
    let (alice, token) = store.add_user("acme", "alice").await.unwrap();
    assert!(matches!(store.add_user("acme", "alice").await, Err(StoreError::Exists(_))));
    assert_eq!(store.authenticate(&token).await.unwrap(), Some(alice.clone()));
    assert_eq!(store.authenticate("ob_wrong").await.unwrap(), None);

    let s = store.create_session(&alice, "t", "anthropic/m").await.unwrap();
    store.append_event(event(&s.id, 1, "one")).await.unwrap();
    store
        .append_event(SessionEvent {
            session_id: s.id.clone(),
            seq: 2,
            ts: now_rfc3339(),
            kind: EventKind::TurnStarted { turn_id: TurnId("t_1".into()), by: "alice".into() },
            parent: None,
        })
        .await
        .unwrap();
    // A duplicate and a gap are both refused.
    assert!(matches!(
        store.append_event(event(&s.id, 2, "dup")).await,
        Err(StoreError::SeqGap { last: 2, got: 2 })
    ));
    assert!(matches!(
        store.append_event(event(&s.id, 5, "gap")).await,
        Err(StoreError::SeqGap { last: 2, got: 5 })
    ));
    let after1 = store.events_after(&s.id, 1).await.unwrap();
    assert_eq!(after1.len(), 1);
    assert_eq!(after1[0].seq, 2);
    assert_eq!(store.session(&s.id).await.unwrap().unwrap().last_seq, 2);

    // A batch is all or none: its second event's gap leaves the first out too, and the
    // connection's cached statements serve the next append as before.
    assert!(matches!(
        store.append_events(vec![event(&s.id, 3, "three"), event(&s.id, 5, "five")]).await,
        Err(StoreError::SeqGap { last: 3, got: 5 })
    ));
    assert_eq!(store.events_after(&s.id, 2).await.unwrap().len(), 0);
    assert_eq!(store.session(&s.id).await.unwrap().unwrap().last_seq, 2);
    store.append_events(vec![event(&s.id, 3, "three"), event(&s.id, 4, "four")]).await.unwrap();
    store.append_event(event(&s.id, 5, "five")).await.unwrap();
    assert_eq!(store.events_after(&s.id, 2).await.unwrap().len(), 3);
    assert_eq!(store.session(&s.id).await.unwrap().unwrap().last_seq, 5);

    // Reopening keeps everything and does not re-run migrations.
    drop(store);
    let store = Store::open_spec(&spec, Durability::Full, None).unwrap();
    assert_eq!(store.events_after(&s.id, 0).await.unwrap().len(), 5);
    let (again, token2) = store.mint_token("acme", "alice", "embedded").await.unwrap();
    assert_eq!(again.id, alice.id);
    assert_ne!(token, token2);
    assert_eq!(store.list_sessions(&alice.org_id, 10).await.unwrap().len(), 1);
    let (_, other) = store.mint_token("other", "bob", "x").await.unwrap();
    let bob = store.authenticate(&other).await.unwrap().unwrap();
    assert!(store.list_sessions(&bob.org_id, 10).await.unwrap().is_empty());
}

#[test]
fn the_token_itself_is_never_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outboard.db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let token = rt.block_on(async {
        let store = Store::open(&path, Durability::Normal).unwrap();
        store.add_user("acme", "alice").await.unwrap().1
    });
    let conn = rusqlite::Connection::open(&path).unwrap();
    let hashes: Vec<String> = conn
        .prepare("SELECT token_hash FROM tokens")
        .unwrap()
        .query_map((), |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(hashes, vec![hash_token(&token)]);
}

#[tokio::test]
async fn standing_events_are_the_last_mode_and_todos_every_background_event_and_what_follows_the_last_turn_end(
) {
    let dir = tempfile::tempdir().unwrap();
    let store = pgtest::open_test_store(&dir.path().join("outboard.db")).unwrap();
    let (alice, _) = store.add_user("acme", "alice").await.unwrap();
    let s = store.create_session(&alice, "", "anthropic/m").await.unwrap();
    let turn = serde_json::json!("t1");
    let usage = serde_json::json!({"input_tokens": 1, "output_tokens": 1});
    let kinds = [
        serde_json::json!({"type": "mode_changed", "mode": "plan", "by": "alice"}),
        serde_json::json!({"type": "todos", "todos": []}),
        serde_json::json!({"type": "approval_requested", "call_id": "c1", "name": "Bash", "input": {}, "rule": "Bash"}),
        serde_json::json!({"type": "background_task", "shell_id": "s1", "command": "sleep 9", "status": "running"}),
        serde_json::json!({"type": "mode_changed", "mode": "default", "by": "alice"}),
        serde_json::json!({"type": "turn_completed", "turn_id": turn, "stop_reason": "end_turn", "usage": usage}),
        serde_json::json!({"type": "todos", "todos": []}),
        serde_json::json!({"type": "approval_requested", "call_id": "c2", "name": "Bash", "input": {}, "rule": "Bash"}),
        serde_json::json!({"type": "approval_requested", "call_id": "c3", "name": "Bash", "input": {}, "rule": "Bash"}),
        serde_json::json!({"type": "approval_resolved", "call_id": "c3", "name": "Bash", "decision": "allow", "by": "alice"}),
        serde_json::json!({"type": "background_task", "shell_id": "s1", "command": "sleep 9", "status": "completed"}),
        serde_json::json!({"type": "turn_failed", "turn_id": turn, "error": "a subagent's turn"}),
    ];
    let mut events = Vec::new();
    for (i, kind) in kinds.into_iter().enumerate() {
        let mut e = event(&s.id, i as u64 + 1, "filler");
        e.kind = serde_json::from_value(kind).unwrap();
        // The last turn end is a subagent's: it does not close what its parent asked.
        if i == 11 {
            e.parent = Some("call_task".into());
        }
        events.push(e);
        // Other events between, which the answer must not hold.
        events.push(event(&s.id, 100 + i as u64, "filler"));
    }
    events.sort_by_key(|e| e.seq);
    let mut seq = 0;
    for e in &mut events {
        seq += 1;
        e.seq = seq;
    }
    let by_kind = |kind: &str| -> Vec<u64> {
        events.iter().filter(|e| e.kind.type_name() == kind).map(|e| e.seq).collect()
    };
    let (modes, todos, tasks) =
        (by_kind("mode_changed"), by_kind("todos"), by_kind("background_task"));
    let (ends, asked, resolved) =
        (by_kind("turn_completed"), by_kind("approval_requested"), by_kind("approval_resolved"));
    let failed = by_kind("turn_failed");
    store.append_events(events.clone()).await.unwrap();

    let got = store
        .standing_events(
            &s.id,
            &["mode_changed", "todos"],
            &["background_task"],
            &["approval_requested", "approval_resolved", "turn_completed", "turn_failed"],
        )
        .await
        .unwrap();
    let got: Vec<u64> = got.iter().map(|e| e.seq).collect();
    // The last mode and todo list; both background events; from the last top-level turn end on:
    // that end, the two questions asked after it, the answer and the subagent's end.
    let mut want = vec![*modes.last().unwrap(), *todos.last().unwrap()];
    want.extend(&tasks);
    want.extend([ends[0], asked[1], asked[2], resolved[0], failed[0]]);
    want.sort_unstable();
    assert_eq!(got, want);
}
