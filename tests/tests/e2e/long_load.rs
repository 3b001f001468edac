//! A long session's first turn after a load reads the conversation from its last compaction
//! on, not the whole log: against the real server, a session of 40,000 events (≈ 80 MB of tool
//! results, written through the server's own store before it starts) whose last compaction
//! covers all but its last turn runs a turn while the server's peak memory stays within a
//! bound that a read of the whole log passes several times over.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_tests::fixture::{attach, turn_ended, turn_within};
use outboard_tests::harness::{Api, TestServer};
use outboard_tests::long_session;
use outboard_tests::mock_llm::MockLlm;
use outboard_tests::mock_step::MockStep;
use outboard_tests::speed::high_water;

/// Events in the session.
const EVENTS: u64 = 40_000;
/// Each `Bash` result; 8 steps a turn, so 10,000-odd results hold ≈ 80 MB.
const RESULT_BYTES: usize = 8_000;
const STEPS: u64 = 8;
/// How much the server's peak RSS may grow over the first turn. The turn needs the last turn's
/// events, the gate's few events and a windowed scan for the files touched; a read of the whole
/// log decodes every result (≈ 80 MB of text, and the conversation built from it again).
const GROWTH_BOUND: u64 = 40 << 20;

#[tokio::test]
async fn the_first_turn_after_a_load_reads_from_the_last_compaction() {
    let data = tempfile::tempdir().unwrap();
    let store = long_session::open(data.path()).unwrap();
    let (owner, alice) = long_session::user(&store, "alice", "acme").await.unwrap();
    let (session, last) =
        long_session::seed(&store, &owner, EVENTS, STEPS, RESULT_BYTES).await.unwrap();
    let (_, kept_from) = long_session::compact(&store, &session, last, STEPS).await.unwrap();
    drop(store);
    let mock = MockLlm::start(vec![MockStep::text("Carried on.")]).await.unwrap();
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();

    let (mut c, attached) = attach(&server, &alice, &session.0, "driver").await;
    assert!(attached.has_more, "the attach pages the long log");
    let before = high_water(server.pid());
    assert!(before > 0);
    let events = turn_within(&mut c, &session.0, "go on", Duration::from_secs(120)).await;
    assert!(
        matches!(
            events.last().map(|e| &e.kind),
            Some(outboard_shared::EventKind::TurnCompleted { .. })
        ),
        "{:?}",
        events.last()
    );
    assert!(events.iter().any(turn_ended));
    let after = high_water(server.pid());

    // The model got the summary and the kept turn, not the whole history.
    let requests = mock.requests();
    let body = &requests.last().unwrap().body;
    let messages = body["messages"].as_array().unwrap();
    let text = serde_json::to_string(messages).unwrap();
    assert!(text.contains("they all ran"), "the summary opens the conversation");
    assert!(!text.contains("step 0 of turn 1\\n"), "nothing the compaction replaced is sent");
    assert!(messages.len() < 40, "{} messages", messages.len());
    assert!(kept_from > EVENTS - 40);

    let growth = after.saturating_sub(before);
    eprintln!("peak RSS over the first turn: {} → {} MiB", before >> 20, after >> 20);
    assert!(
        growth <= GROWTH_BOUND,
        "the first turn raised the server's peak RSS by {} MiB ({} → {} MiB), over the bound of \
         {} MiB: the load read more than the conversation since the last compaction",
        growth >> 20,
        before >> 20,
        after >> 20,
        GROWTH_BOUND >> 20
    );
}
