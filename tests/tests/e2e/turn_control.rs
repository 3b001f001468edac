//! Turn control over the protocol: interrupt mid-command, the step limit, a second turn while
//! one runs, attaching mid-turn.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{EventKind, StopReason};
use outboard_tests::fixture::{attach, driver, serve, turn_ended};
use outboard_tests::harness::{Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use pretty_assertions::assert_eq;
use serde_json::json;

#[tokio::test]
async fn interrupt_kills_the_running_command() {
    let mock = MockLlm::start(vec![MockStep::tool_call(
        "Bash",
        json!({"command": "echo started; sleep 30.2919; echo finished"}),
    )])
    .await
    .unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let (_token, mut c, sid) = driver(&server).await;
    c.request("turn/send", json!({"session_id": sid, "text": "sleep"})).await.unwrap().unwrap();
    // Wait until the command is running and has printed.
    c.events_until(
        |e| matches!(&e.kind, EventKind::ToolOutputDelta { text, .. } if text.contains("started")),
    )
    .await
    .unwrap();
    let r = c.request("turn/interrupt", json!({"session_id": sid})).await.unwrap().unwrap();
    assert_eq!(r, json!({"interrupted": true}));
    // That the sleep was killed, not waited for, shows in the result (no "finished") and in the
    // process table, not in a stopwatch.
    let events = c.events_until(turn_ended).await.unwrap();
    let result = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolResult { output, is_error, .. } => Some((output.clone(), *is_error)),
            _ => None,
        })
        .unwrap();
    assert!(result.1);
    assert!(!result.0.contains("finished"), "{}", result.0);
    outboard_tests::harness::wait_until("the sleep to be gone", Duration::from_secs(10), || {
        !outboard_tests::harness::host_process_with("30.2919")
    })
    .unwrap();
    match &events.last().unwrap().kind {
        EventKind::TurnCompleted { stop_reason, .. } => {
            assert_eq!(*stop_reason, StopReason::Interrupted)
        }
        other => panic!("{other:?}"),
    }
    // Interrupting an idle session says so.
    let r = c.request("turn/interrupt", json!({"session_id": sid})).await.unwrap().unwrap();
    assert_eq!(r, json!({"interrupted": false}));

    // The conversation continues coherently: the next request carries the interrupted call's result.
    mock.push(MockStep::text("OK, stopped."));
    c.request("turn/send", json!({"session_id": sid, "text": "what happened?"}))
        .await
        .unwrap()
        .unwrap();
    let events = c.events_until(turn_ended).await.unwrap();
    assert!(matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }));
    let body = mock.requests()[1].body.to_string();
    assert!(body.contains("what happened?"));
}

#[tokio::test]
async fn the_step_limit_ends_a_runaway_turn() {
    // The first model call is slow, so the second `turn/send` surely arrives mid-turn.
    let steps = (0..5)
        .map(|i| {
            MockStep::tool_call("Bash", json!({"command": format!("echo {i}")}))
                .latency(if i == 0 { 500 } else { 0 })
        })
        .collect();
    let mock = MockLlm::start(steps).await.unwrap();
    let server = serve(&mock, Api::OpenAi, &["--max-steps", "3"]);
    let (_token, mut c, sid) = driver(&server).await;
    c.request("turn/send", json!({"session_id": sid, "text": "loop"})).await.unwrap().unwrap();
    // A second turn while this one runs is refused.
    let busy = c.request("turn/send", json!({"session_id": sid, "text": "again"})).await.unwrap();
    assert_eq!(busy.unwrap_err().code, outboard_shared::ErrorCode::Conflict);
    let events = c.events_until(turn_ended).await.unwrap();
    match &events.last().unwrap().kind {
        EventKind::TurnCompleted { stop_reason, .. } => {
            assert_eq!(*stop_reason, StopReason::StepLimit)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn a_late_watcher_gets_the_log_then_live_events_without_gap() {
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Bash", json!({"command": "echo one; sleep 1; echo two"})),
        MockStep::text("Finished."),
    ])
    .await
    .unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let bob = server.add_user("bob", "acme").unwrap();
    let mut a = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = a.new_session().await.unwrap();
    a.request("turn/send", json!({"session_id": sid, "text": "go"})).await.unwrap().unwrap();
    a.events_until(
        |e| matches!(&e.kind, EventKind::ToolOutputDelta { text, .. } if text.contains("one")),
    )
    .await
    .unwrap();

    // Bob attaches mid-command: the snapshot has the log so far and the partial output.
    let (mut b, snap) = attach(&server, &bob, &sid, "watcher").await;
    let in_flight = snap.in_flight.expect("a turn is in flight");
    assert!(in_flight.tool_output.iter().any(|o| o.text.contains("one")), "{in_flight:?}");
    let mut seqs: Vec<u64> = snap.events.iter().map(|e| e.seq).collect();
    let live = b.events_until(turn_ended).await.unwrap();
    seqs.extend(live.iter().filter(|e| e.kind.is_durable()).map(|e| e.seq));
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap, no duplicate");

    let a_events = a.events_until(turn_ended).await.unwrap();
    assert_eq!(
        a_events.last().unwrap().seq,
        live.last().unwrap().seq,
        "both clients end at the same seq"
    );
}

/// A client that sends its next message the moment it sees `turn_completed` (a script, the
/// `run` loop of an integration) must find the session idle: the turn's end is committed by the
/// session in the same step that makes it idle, so no message lands in a gap between the two
/// and is refused with "a turn is already running".
#[tokio::test]
async fn a_message_sent_the_moment_a_turn_ends_starts_the_next_turn() {
    const TURNS: usize = 40;
    let steps = (0..TURNS).map(|i| MockStep::text(&format!("answer {i}"))).collect();
    let mock = MockLlm::start(steps).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let (_token, mut c, sid) = driver(&server).await;
    for i in 0..TURNS {
        let events = c.turn(&sid, &format!("message {i}")).await.unwrap_or_else(|e| {
            panic!("turn {i}, sent as soon as turn {} ended: {e}", i.saturating_sub(1))
        });
        assert!(
            matches!(events.last().map(|e| &e.kind), Some(EventKind::TurnCompleted { .. })),
            "turn {i}: {events:#?}"
        );
    }
    assert_eq!(mock.requests().len(), TURNS);
}
