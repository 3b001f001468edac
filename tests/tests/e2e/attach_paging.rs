//! A long session stays cheap to watch: against the real server, a session of 20,000 events
//! (written through the server's own store before it starts) is attached to in one small frame
//! holding its newest events, `session/history` pages back through every `seq` once down to 1,
//! and a reconnect far behind gets the rest as ordered event frames before anything live.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_shared::{
    EventKind, SessionAttachResponse, SessionHistoryResponse, HISTORY_PAGE_BYTES,
    HISTORY_PAGE_EVENTS,
};
use outboard_tests::fixture::{attach, craft_log};
use outboard_tests::harness::{Api, TestServer, WsClient};
use outboard_tests::long_session;
use outboard_tests::mock_llm::MockLlm;
use pretty_assertions::assert_eq;
use serde_json::json;

/// Events in the session: the long session.
const EVENTS: u64 = 20_000;
/// Tool results of 6 KB: a page of 500 such events would be over the byte bound, so the pages
/// here end by bytes, not by count.
const RESULT_BYTES: usize = 6_000;

struct Long {
    server: TestServer,
    _mock: MockLlm,
    session: String,
    last: u64,
    alice: String,
    bob: String,
    eve: String,
}

async fn long_session() -> Long {
    let data = tempfile::tempdir().unwrap();
    let store = long_session::open(data.path()).unwrap();
    let (owner, alice) = long_session::user(&store, "alice", "acme").await.unwrap();
    let (_, bob) = long_session::user(&store, "bob", "acme").await.unwrap();
    let (_, eve) = long_session::user(&store, "eve", "other").await.unwrap();
    let (session, last) =
        long_session::seed(&store, &owner, EVENTS, 8, RESULT_BYTES).await.unwrap();
    drop(store);
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();
    Long { server, _mock: mock, session: session.0, last, alice, bob, eve }
}

fn seqs(events: &[outboard_shared::SessionEvent]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

#[tokio::test]
async fn a_new_client_gets_the_newest_page_in_one_small_frame_and_pages_back_to_seq_1() {
    let long = long_session().await;
    assert!(long.last >= EVENTS);
    // A watcher (not the owner) reads the whole history.
    let (mut bob, attached) = attach(&long.server, &long.bob, &long.session, "watcher").await;
    let first_frame = bob.last_frame_bytes;
    assert!(
        first_frame <= HISTORY_PAGE_BYTES,
        "the first frame is {first_frame} bytes, over the page bound {HISTORY_PAGE_BYTES}"
    );
    let newest = seqs(&attached.events);
    assert!(!newest.is_empty() && newest.len() <= HISTORY_PAGE_EVENTS, "{}", newest.len());
    assert_eq!(newest.last(), Some(&long.last), "the page holds the newest events");
    assert!(newest.windows(2).all(|w| w[1] == w[0] + 1), "the page is contiguous");
    assert!(attached.has_more);
    assert_eq!(attached.cursor, newest.first().copied());

    let mut seen = newest;
    let mut cursor = attached.cursor.unwrap();
    let mut pages = 1;
    let mut has_more = attached.has_more;
    while has_more {
        let page = bob
            .request("session/history", json!({"session_id": long.session, "before": cursor}))
            .await
            .unwrap()
            .unwrap();
        assert!(
            bob.last_frame_bytes <= HISTORY_PAGE_BYTES,
            "page {pages} is {} bytes",
            bob.last_frame_bytes
        );
        let page: SessionHistoryResponse = serde_json::from_value(page).unwrap();
        let s = seqs(&page.events);
        assert!(!s.is_empty(), "page {pages} before {cursor} is empty but has_more was true");
        assert_eq!(s.last(), Some(&(cursor - 1)), "page {pages} ends right before the cursor");
        assert_eq!(page.cursor, s[0]);
        cursor = page.cursor;
        has_more = page.has_more;
        seen.extend(s);
        pages += 1;
        assert!(pages < 1_000, "paging does not end");
    }
    assert_eq!(cursor, 1);
    seen.sort_unstable();
    let every: Vec<u64> = (1..=long.last).collect();
    assert!(
        seen == every,
        "{} seqs seen for {} events (a gap or a duplicate)",
        seen.len(),
        long.last
    );
    // The pages ended by bytes: far more of them than the count bound alone would make.
    assert!(pages > long.last as usize / HISTORY_PAGE_EVENTS, "{pages} pages");

    // A smaller limit is honoured; another org's user cannot read it.
    let small = bob
        .request("session/history", json!({"session_id": long.session, "before": 100, "limit": 7}))
        .await
        .unwrap()
        .unwrap();
    let small: SessionHistoryResponse = serde_json::from_value(small).unwrap();
    assert_eq!(seqs(&small.events), (93..100).collect::<Vec<_>>());
    let mut eve = WsClient::connect(&long.server.url, &long.eve).await.unwrap();
    let refused = eve
        .request("session/history", json!({"session_id": long.session, "before": 100}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code, outboard_shared::ErrorCode::NotFound, "{}", refused.message);
}

#[tokio::test]
async fn a_reconnect_far_behind_gets_every_missed_event_in_order_before_live_ones() {
    let long = long_session().await;
    let mut alice = WsClient::connect(&long.server.url, &long.alice).await.unwrap();
    let attached = alice
        .request(
            "session/attach",
            json!({"session_id": long.session, "role": "driver", "after_seq": 100}),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(alice.last_frame_bytes <= HISTORY_PAGE_BYTES, "{}", alice.last_frame_bytes);
    let attached: SessionAttachResponse = serde_json::from_value(attached).unwrap();
    assert!(!attached.has_more, "with after_seq the rest comes as events");
    let mut durable = seqs(&attached.events);
    assert_eq!(durable.first(), Some(&101));
    assert!((durable.len() as u64) < long.last - 100, "the snapshot alone was not paged");
    // Then every missed event as its own frame, in order, before the (transient) presence of
    // this very attach, which was broadcast after the snapshot.
    let rest = alice.events_until(|e| !e.kind.is_durable() || e.seq == long.last).await.unwrap();
    for e in &rest {
        assert!(alice.last_frame_bytes <= HISTORY_PAGE_BYTES);
        if e.kind.is_durable() {
            durable.push(e.seq);
        } else {
            panic!(
                "a live {} came before the catch-up ended at seq {:?}",
                e.kind.type_name(),
                durable.last()
            );
        }
    }
    assert!(durable == (101..=long.last).collect::<Vec<_>>(), "a gap or a duplicate");
    let live = alice.event().await.unwrap();
    assert!(matches!(live.kind, EventKind::Presence { .. }), "{live:?}");
    assert_eq!(live.seq, long.last);
}

#[tokio::test]
async fn state_from_before_the_page_comes_with_the_attach() {
    // The todo list and two background commands are set early; 600 events follow, so the newest
    // page holds none of them.
    use outboard_shared::{TaskStatus, TodoItem, TodoStatus, TurnId};
    let todos = vec![TodoItem {
        content: "Fix the build".into(),
        status: TodoStatus::InProgress,
        active_form: "Fixing the build".into(),
    }];
    let task = |id: &str, status| EventKind::BackgroundTask {
        shell_id: id.into(),
        command: "npm run dev".into(),
        status,
        exit_code: None,
    };
    let mut kinds = vec![
        EventKind::TurnStarted { turn_id: TurnId("t_0".into()), by: "alice".into() },
        EventKind::Todos { todos: todos.clone() },
        task("bash_1", TaskStatus::Running),
        task("bash_2", TaskStatus::Running),
        task("bash_2", TaskStatus::Killed),
        EventKind::TurnCompleted {
            turn_id: TurnId("t_0".into()),
            stop_reason: outboard_shared::StopReason::EndTurn,
            usage: Default::default(),
        },
    ];
    for i in 0..200 {
        let turn_id = TurnId(format!("t_{}", i + 1));
        kinds.push(EventKind::TurnStarted { turn_id: turn_id.clone(), by: "alice".into() });
        kinds
            .push(EventKind::UserMessage { text: format!("message {i}"), attachments: Vec::new() });
        kinds.push(EventKind::TurnCompleted {
            turn_id,
            stop_reason: outboard_shared::StopReason::EndTurn,
            usage: Default::default(),
        });
    }
    let data = tempfile::tempdir().unwrap();
    let (sid, alice) = craft_log(data.path(), "anthropic/mock-model", kinds).await;
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();
    let (_c, snap) = attach(&server, &alice, &sid, "watcher").await;
    assert!(snap.has_more && snap.cursor.unwrap() > 6, "the early events are not in the page");
    // bash_1 ran when the server stopped: the restarted actor records it lost (the newest
    // event), so only the todo list still holds.
    let last = snap.events.last().unwrap();
    assert!(
        matches!(&last.kind, EventKind::BackgroundTask { shell_id, status: TaskStatus::Lost, .. } if shell_id == "bash_1"),
        "{last:?}"
    );
    assert_eq!(snap.standing.len(), 1, "{:?}", snap.standing);
    assert_eq!(snap.standing[0].seq, 2);
    assert_eq!(snap.standing[0].kind, EventKind::Todos { todos });
}
