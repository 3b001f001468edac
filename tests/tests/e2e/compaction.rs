//! Sessions longer than the model's window (issue #14, items 4 and 5), against the real server,
//! the mock LLM over HTTP/SSE and real sandboxes: a 1,000-step turn in a 16,000-token window
//! compacts again and again and completes with every request inside the window and well formed;
//! a SIGKILL during a summary resumes the turn without running a command twice; a provider's
//! "too long" is answered by compacting and retrying; `session/compact` compacts on request,
//! with a focus. The mock answers from each request's body (a summary request is recognised by
//! the harness's instruction mark), so the script does not need to know when compactions come.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_server::llm::context::estimate_tokens;
use outboard_shared::{EventKind, SessionEvent};
use outboard_tests::fixture::{attach, driver, serve};
use outboard_tests::harness::{outboard, wait_until, Api, TestServer, WsClient};
use outboard_tests::long_turn::{is_summary, last_step, long_turn_mock, step_call};
use outboard_tests::mock_llm::{MockLlm, MockStep, RecordedRequest};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const WINDOW: u64 = 16_000;

/// Checks one Anthropic request: inside the window (with its `max_tokens`), user first, roles
/// alternating, every tool call answered in the next message and every result answering one.
fn check_request(i: usize, r: &RecordedRequest) {
    let input = estimate_tokens(r.raw.len());
    let max_tokens = r.body["max_tokens"].as_u64().unwrap();
    assert!(input <= WINDOW, "request {i}: ~{input} tokens in a {WINDOW}-token window");
    assert!(
        input + max_tokens <= WINDOW,
        "request {i}: ~{input} tokens and max_tokens {max_tokens} pass the window"
    );
    let messages = r.body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "user", "request {i}");
    let ids = |m: &Value, kind: &str, field: &str| -> Vec<String> {
        m["content"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter(|b| b["type"] == kind)
                    .map(|b| b[field].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    for (j, pair) in messages.windows(2).enumerate() {
        assert_ne!(
            pair[0]["role"],
            pair[1]["role"],
            "request {i}: messages {j} and {} alternate",
            j + 1
        );
        if pair[0]["role"] == "assistant" {
            assert_eq!(
                ids(&pair[0], "tool_use", "id"),
                ids(&pair[1], "tool_result", "tool_use_id"),
                "request {i}: the calls of message {j} and the results after them"
            );
        }
    }
    if let Some(first) = messages.first() {
        assert!(
            ids(first, "tool_result", "tool_use_id").is_empty(),
            "request {i}: an orphan result"
        );
    }
}

fn compactions(events: &[SessionEvent]) -> Vec<(u64, u64, u64, u64)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Compaction {
                from_seq, kept_from_seq, tokens_before, tokens_after, ..
            } => Some((*from_seq, *kept_from_seq, *tokens_before, *tokens_after)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_step_turn_compacts_and_stays_inside_the_window() {
    const STEPS: u64 = 1_000;
    let mock = long_turn_mock(STEPS, Some(500), 0).await.unwrap();
    let server =
        serve(&mock, Api::Anthropic, &["--context-window", "16000", "--max-steps", "2000"]);
    let (_token, mut c, sid) = driver(&server).await;
    let events = c.turn(&sid, "Run the long scripted task.").await.unwrap();
    let end = events.last().unwrap();
    assert!(
        matches!(
            &end.kind,
            EventKind::TurnCompleted { stop_reason: outboard_shared::StopReason::EndTurn, .. }
        ),
        "{:?}",
        end.kind
    );

    let requests = mock.requests();
    let summaries = requests.iter().filter(|r| is_summary(&r.body)).count();
    let steps = requests.len() - summaries;
    assert_eq!(steps as u64, STEPS + 1, "one model call per step, and the last answer");
    for (i, r) in requests.iter().enumerate() {
        check_request(i, r);
    }
    let done = compactions(&events);
    assert_eq!(done.len(), summaries, "every summary became a compaction");
    assert!(done.len() >= 20, "{} compactions in {STEPS} steps", done.len());
    for w in done.windows(2) {
        assert!(w[1].0 > w[0].0 && w[1].1 > w[0].1, "each compaction starts after the last: {w:?}");
    }
    assert!(done.iter().all(|c| c.3 < c.2), "each one shrinks the conversation: {done:?}");
    // The log keeps every step.
    let results =
        events.iter().filter(|e| matches!(e.kind, EventKind::ToolResult { .. })).count() as u64;
    assert_eq!(results, STEPS);

    // Item 5: the 100 kB result is whole in the log and cut in the middle for the model, which is
    // told how to see the rest.
    let logged = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolResult { call_id, output, .. } if call_id == "step-500" => Some(output),
            _ => None,
        })
        .unwrap();
    assert!(logged.starts_with(&"x".repeat(100_000)), "{}", logged.len());
    let seen =
        requests.iter().find(|r| !is_summary(&r.body) && last_step(&r.body) == Some(500)).unwrap();
    let shown = seen.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|b| b["tool_use_id"] == "step-500")
        .unwrap();
    let shown = shown["content"].as_str().unwrap();
    // A 16,000-token window caps a result at an eighth of it: 8,000 characters.
    assert!(shown.len() < 8_000 + 600, "{}", shown.len());
    assert!(shown.contains("characters (0 lines) cut from the middle"), "{shown}");
    assert!(shown.contains("Read it with offset and limit"), "{shown}");

    // The next turn starts from the compacted conversation, which a fresh actor rebuilds from the
    // log the same way (the session is evicted and revived on a restart of the server).
    let n = requests.len();
    let events = c.turn(&sid, "Thanks.").await.unwrap();
    assert!(matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }));
    let next = &mock.requests()[n];
    let first = next.body["messages"][0].to_string();
    assert!(first.contains("<summary>") && first.contains("Steps up to"), "{first}");
    check_request(n, next);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_during_a_summary_resumes_the_turn_and_runs_no_command_twice() {
    const STEPS: u64 = 120;
    // The third summary takes a while: the kill lands inside it.
    let mock = long_turn_mock(STEPS, None, 3).await.unwrap();
    let flags = ["--context-window", "16000", "--max-steps", "1000"];
    let server = serve(&mock, Api::Anthropic, &flags);
    let (token, mut c, sid) = driver(&server).await;
    c.request("turn/send", json!({"session_id": sid, "text": "Run the long scripted task."}))
        .await
        .unwrap()
        .unwrap();
    wait_until("the third summary request", Duration::from_secs(120), || {
        mock.requests().iter().filter(|r| is_summary(&r.body)).count() >= 3
    })
    .unwrap();
    let before = mock.requests().len();
    let url = server.url.clone();
    let workspace = server.workspace(&sid);
    let data = server.kill().unwrap();
    let server =
        TestServer::restart_at(&url, data, Api::Anthropic, &mock.anthropic_base_url(), &flags)
            .unwrap();
    // The server resumes the turn by itself; a watcher follows it to its end.
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let snapshot = c
        .request("session/attach", json!({"session_id": sid, "role": "watcher"}))
        .await
        .unwrap()
        .unwrap();
    let ended = |e: &SessionEvent| {
        matches!(e.kind, EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. })
    };
    let snapshot: outboard_shared::SessionAttachResponse =
        serde_json::from_value(snapshot).unwrap();
    let mut end = snapshot.events.last().filter(|e| ended(e)).cloned();
    if end.is_none() {
        end = c.events_until(ended).await.unwrap().pop();
    }
    let end = end.unwrap();
    assert!(matches!(end.kind, EventKind::TurnCompleted { .. }), "{:?}", end.kind);
    let requests = mock.requests();
    assert!(requests.len() > before, "the resumed turn called the model again");
    // The summary cut by the kill is asked again: the resumed turn is over the threshold too.
    assert!(is_summary(&requests[before].body), "the first call after the restart is a summary");
    for (i, r) in requests.iter().enumerate() {
        check_request(i, r);
    }
    let ran = std::fs::read_to_string(workspace.join("ran.txt")).unwrap();
    let expected: Vec<String> =
        (1..STEPS).filter(|n| n.is_multiple_of(10)).map(|n| n.to_string()).collect();
    assert_eq!(ran.lines().collect::<Vec<_>>(), expected, "every command ran exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_long_answer_from_the_provider_is_compacted_and_retried_once() {
    // The server believes the window is 64,000 tokens; the model behind it (a llama.cpp with a
    // small n_ctx) takes 16,000: its refusal is the only signal.
    const STEPS: u64 = 40;
    let mock = MockLlm::start_responder(move |body| {
        let size = estimate_tokens(body.to_string().len());
        if size > WINDOW {
            return Some(MockStep::status(400).body(
                &json!({"error": {"code": 400, "type": "exceed_context_size_error",
                    "message": "the request exceeds the available context size, try increasing it"}})
                    .to_string(),
            ));
        }
        if is_summary(body) {
            return Some(MockStep::text("Summary: the steps so far read the files."));
        }
        let next = last_step(body).map_or(0, |n| n + 1);
        if next >= STEPS {
            return Some(MockStep::text("All steps done."));
        }
        Some(MockStep::tool_calls(vec![step_call(next, None)]))
    })
    .await
    .unwrap();
    let server = serve(&mock, Api::Anthropic, &["--context-window", "64000", "--max-steps", "200"]);
    let (_token, mut c, sid) = driver(&server).await;
    let events = c.turn(&sid, "Run the scripted task.").await.unwrap();
    assert!(
        matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }),
        "{:?}",
        events.last()
    );
    let triggers: Vec<outboard_shared::CompactionTrigger> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Compaction { trigger, .. } => Some(*trigger),
            _ => None,
        })
        .collect();
    // The refusal taught the session the real window: the compactions after the first one come
    // before the provider has to refuse anything.
    use outboard_shared::CompactionTrigger::{Auto, Overflow};
    assert_eq!(triggers.first(), Some(&Overflow), "{triggers:?}");
    assert!(triggers.len() >= 2 && triggers[1..].iter().all(|t| *t == Auto), "{triggers:?}");
    let refused = mock.requests().iter().filter(|r| r.usage.is_none()).count();
    assert_eq!(refused, 1, "one refusal, and the retry fit");
    assert!(server.log().contains("the session goes on assuming a window of"), "{}", server.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_compact_summarises_on_request_with_a_focus() {
    let mock = long_turn_mock(6, None, 0).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let bob = server.add_user("bob", "acme").unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();

    let refused =
        c.request("session/compact", json!({"session_id": sid})).await.unwrap().unwrap_err();
    assert_eq!(refused.code, outboard_shared::ErrorCode::BadRequest, "{refused:?}");
    assert!(refused.message.contains("nothing to compact"), "{}", refused.message);

    let events = c.turn(&sid, "Read the files.").await.unwrap();
    assert!(matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }));
    let n = mock.requests().len();
    // Only the driver compacts.
    let (mut watcher, _) = attach(&server, &bob, &sid, "watcher").await;
    let denied =
        watcher.request("session/compact", json!({"session_id": sid})).await.unwrap().unwrap_err();
    assert_ne!(denied.code, outboard_shared::ErrorCode::Internal, "{denied:?}");
    let long = "x".repeat(5_000);
    let too_long = c
        .request("session/compact", json!({"session_id": sid, "focus": long}))
        .await
        .unwrap()
        .unwrap_err();
    assert!(too_long.message.contains("at most 2000"), "{}", too_long.message);

    let done = c
        .request("session/compact", json!({"session_id": sid, "focus": "the file names"}))
        .await
        .unwrap()
        .unwrap();
    assert!(
        done["tokens_after"].as_u64().unwrap() < done["tokens_before"].as_u64().unwrap(),
        "{done}"
    );
    let asked = &mock.requests()[n];
    assert!(is_summary(&asked.body));
    assert!(asked.body["messages"].to_string().contains("focus on: the file names"));
    // The watcher saw it as one event.
    let seen =
        watcher.events_until(|e| matches!(e.kind, EventKind::Compaction { .. })).await.unwrap();
    let EventKind::Compaction { trigger, focus, .. } = &seen.last().unwrap().kind else {
        unreachable!()
    };
    assert_eq!(*trigger, outboard_shared::CompactionTrigger::Manual);
    assert_eq!(focus.as_deref(), Some("the file names"));

    // The next turn goes on from the summary.
    let events = c.turn(&sid, "And now?").await.unwrap();
    assert!(matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }));
    let first = mock.requests()[n + 1].body["messages"][0].to_string();
    assert!(first.contains("<summary>"), "{first}");

    // `outboard compact` does the same from a script, once nobody drives the session.
    c.request("session/detach", json!({"session_id": sid})).await.unwrap().unwrap();
    let run = outboard(
        &["compact", "--json", "--server", &server.url, "--token", &token, &sid, "the", "tests"],
        None,
    )
    .unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let done: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert!(done["seq"].as_u64().unwrap() > 0, "{done}");
    let asked = mock.requests().into_iter().rev().find(|r| is_summary(&r.body)).unwrap();
    assert!(asked.body["messages"].to_string().contains("focus on: the tests"));
}

/// A model that answers the summary request with a tool call (issue 35, item 3): `respond` gets
/// whether the request forbade tool calls and says whether the model summarises.
async fn turn_with_a_stubborn_summariser(
    respond: fn(bool) -> bool,
) -> (MockLlm, Vec<SessionEvent>) {
    const STEPS: u64 = 60;
    let mock = MockLlm::start_responder(move |body| {
        if is_summary(body) {
            let forbidden = body["tool_choice"] == json!({"type": "none"});
            return Some(if respond(forbidden) {
                MockStep::text("Summary: the steps so far read the files.")
            } else {
                MockStep::tool_calls(vec![outboard_tests::mock_llm::MockToolCall::new(
                    "Bash",
                    json!({"command": "echo not a summary"}),
                )])
            });
        }
        let next = last_step(body).map_or(0, |n| n + 1);
        if next >= STEPS {
            return Some(MockStep::text("All steps done."));
        }
        Some(MockStep::tool_calls(vec![step_call(next, None)]))
    })
    .await
    .unwrap();
    let window = WINDOW.to_string();
    let server = serve(&mock, Api::Anthropic, &["--context-window", &window, "--max-steps", "200"]);
    let (_token, mut c, sid) = driver(&server).await;
    let events = c.turn(&sid, "Run the scripted task.").await.unwrap();
    assert!(
        matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }),
        "{:?}",
        events.last()
    );
    (mock, events)
}

fn summaries(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Compaction { summary, .. } => Some(summary.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_calls_a_tool_instead_of_summarising_is_asked_again_without_tools() {
    let (mock, events) = turn_with_a_stubborn_summariser(|forbidden| forbidden).await;
    let summaries = summaries(&events);
    assert!(!summaries.is_empty(), "the turn compacted");
    assert!(summaries.iter().all(|s| s.starts_with("Summary: the steps")), "{summaries:?}");
    // Each compaction: one request as usual, one again with tool calls forbidden — the same
    // tools on offer, so the provider's cached prefix holds.
    let requests = mock.requests();
    let asked: Vec<&RecordedRequest> = requests.iter().filter(|r| is_summary(&r.body)).collect();
    assert_eq!(asked.len(), 2 * summaries.len());
    for pair in asked.chunks(2) {
        assert_eq!(pair[0].body.get("tool_choice"), None);
        assert_eq!(pair[1].body["tool_choice"], json!({"type": "none"}));
        assert_eq!(pair[0].body["tools"], pair[1].body["tools"]);
        assert_eq!(pair[0].body["messages"], pair[1].body["messages"]);
    }
    for (i, r) in requests.iter().enumerate() {
        check_request(i, r);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_never_summarises_gets_a_digest_and_the_turn_stays_in_its_window() {
    let (mock, events) = turn_with_a_stubborn_summariser(|_| false).await;
    let summaries = summaries(&events);
    assert!(!summaries.is_empty(), "the turn compacted");
    for s in &summaries {
        assert!(s.starts_with("(The model gave no summary"), "{s}");
        assert!(s.contains("- You called "), "{s}");
        assert!(s.len() < 12_000, "the digest keeps to the summary's budget: {}", s.len());
    }
    for (i, r) in mock.requests().iter().enumerate() {
        check_request(i, r);
    }
}
