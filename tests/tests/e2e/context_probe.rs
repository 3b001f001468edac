//! An unknown model's context window asked of its server (issue #35, item 4): against the real
//! server and the mock LLM playing llama.cpp, vLLM or Ollama over HTTP. A session on a llama.cpp
//! that says 32,768 tokens gets that window and runs a 21-step task without compacting, where
//! the 8,192 of a server that says nothing compacts it; `--context-window` (and a session's own
//! window) win without a probe; a probe that hangs falls back to the default within its timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::{Duration, Instant};

use outboard_server::llm::context::DEFAULT_CONTEXT_WINDOW;
use outboard_shared::EventKind;
use outboard_tests::fixture::{driver, serve};
use outboard_tests::harness::{Api, TestServer, WsClient, MODEL_OWN_WINDOW};
use outboard_tests::long_turn::long_turn_mock;
use outboard_tests::mock_llm::MockLlm;
use outboard_tests::mock_window::MockWindow;
use serde_json::json;

/// The window `session/create` reports for a new session (with `params`).
async fn created_window(c: &mut WsClient, params: serde_json::Value) -> u64 {
    let created = c.request("session/create", params).await.unwrap().unwrap();
    created["session"]["context_window"].as_u64().unwrap()
}

/// A server of `mock` (Chat Completions) with no window of the suites' own.
fn own_window_server(mock: &MockLlm, extra: &[&str]) -> TestServer {
    let mut flags = vec![MODEL_OWN_WINDOW];
    flags.extend_from_slice(extra);
    serve(mock, Api::OpenAi, &flags)
}

/// Runs the 21-step task of `mock` in a new session; the compactions it took.
async fn compactions_of_a_21_step_task(server: &TestServer) -> (u64, usize) {
    let (_token, mut c, sid) = driver(server).await;
    let window = c.request("session/list", json!({})).await.unwrap().unwrap()["sessions"][0]
        ["context_window"]
        .as_u64()
        .unwrap();
    let events = tokio::time::timeout(Duration::from_secs(120), c.turn(&sid, "Run the task."))
        .await
        .expect("the turn ends")
        .unwrap();
    assert!(
        matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }),
        "{:?}",
        events.last().unwrap().kind
    );
    let compactions =
        events.iter().filter(|e| matches!(e.kind, EventKind::Compaction { .. })).count();
    (window, compactions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_llamacpp_window_is_asked_for_and_spares_the_compactions_of_the_default() {
    let mock = long_turn_mock(21, None, 0).await.unwrap();
    mock.serve_window(MockWindow::LlamaCpp(32_768));
    let server = own_window_server(&mock, &[]);
    let (window, compactions) = compactions_of_a_21_step_task(&server).await;
    assert_eq!(window, 32_768, "the session runs with the window llama.cpp said");
    assert_eq!(compactions, 0, "21 steps fit in 32,768 tokens");
    let log = server.log();
    assert!(
        log.contains("context window 32768 tokens for model mock-model from llama.cpp /props at"),
        "the log says where the window came from"
    );
    assert_eq!(
        mock.window_probes().iter().filter(|p| p.as_str() == "GET /props").count(),
        1,
        "asked once: {:?}",
        mock.window_probes()
    );

    // The same task on a server that says nothing: the default, and compactions.
    let silent = long_turn_mock(21, None, 0).await.unwrap();
    let server = own_window_server(&silent, &[]);
    let (window, compactions) = compactions_of_a_21_step_task(&server).await;
    assert_eq!(window, DEFAULT_CONTEXT_WINDOW, "404 everywhere: the default");
    // The default does not hold the task: it compacts, or (the tools' definitions grew with
    // WebSearch and NotebookEdit) the prompt and tools alone fill it and it cannot even do that.
    let no_room = server.log().contains("the system prompt and the tools alone take");
    assert!(compactions >= 1 || no_room, "the 8,192-token default holds the same task");
    assert!(server.log().contains("does not say model mock-model's context window"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_dialect_is_understood() {
    for (says, want) in [
        (MockWindow::LlamaCppTopLevel(16_384), 16_384),
        (MockWindow::Vllm(65_536), 65_536),
        (MockWindow::Ollama(131_072), 131_072),
    ] {
        let mock = MockLlm::start(Vec::new()).await.unwrap();
        mock.serve_window(says);
        let server = own_window_server(&mock, &[]);
        let (_token, mut c, _sid) = driver(&server).await;
        assert_eq!(created_window(&mut c, json!({})).await, want, "{says:?}");
        // Remembered: a second session asks no more.
        let asked = mock.window_probes().len();
        assert_eq!(created_window(&mut c, json!({})).await, want);
        assert_eq!(mock.window_probes().len(), asked, "{says:?}: asked once per model");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_wins_without_a_probe_and_a_hung_probe_falls_back() {
    let mock = MockLlm::start(Vec::new()).await.unwrap();
    mock.serve_window(MockWindow::LlamaCpp(32_768));
    let server = own_window_server(&mock, &["--context-window", "50000"]);
    let (_token, mut c, _sid) = driver(&server).await;
    assert_eq!(created_window(&mut c, json!({})).await, 50_000);
    assert_eq!(created_window(&mut c, json!({"context_window": 12_000})).await, 12_000);
    assert!(mock.window_probes().is_empty(), "{:?}", mock.window_probes());
    drop(server);

    let mock = MockLlm::start(Vec::new()).await.unwrap();
    let server = own_window_server(&mock, &[]);
    let (_token, mut c, _sid) = driver(&server).await;
    // The session of `driver` asked already (404s); a session's own window asks nothing.
    let asked = mock.window_probes().len();
    assert_eq!(asked, 3, "the three dialects, once: {:?}", mock.window_probes());
    assert_eq!(created_window(&mut c, json!({"context_window": 12_000})).await, 12_000);
    assert_eq!(mock.window_probes().len(), asked);
    drop(server);

    let hung = MockLlm::start(Vec::new()).await.unwrap();
    hung.serve_window(MockWindow::Hang);
    let server = own_window_server(&hung, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let started = Instant::now();
    assert_eq!(created_window(&mut c, json!({})).await, DEFAULT_CONTEXT_WINDOW);
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the probe's timeout: {:?}",
        started.elapsed()
    );
}
