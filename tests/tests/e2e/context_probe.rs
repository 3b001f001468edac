//! An unknown model's context window asked of its server (issues #35 and #56): against the real
//! server and the mock LLM playing llama.cpp, vLLM, a router, Ollama, LM Studio or LiteLLM over
//! HTTP. A session on a llama.cpp that says 32,768 tokens gets that window and runs a 21-step
//! task without compacting, and so does one on a server that says nothing (its API's usual
//! window, 128k on OpenAI's, 200k on Anthropic's, stated as a guess — the 8,192 of before
//! compacted it); `--context-window` (and a session's own window) win without a probe; a probe
//! that hangs falls back to the guess within its timeout; `outboard models --json` and `outboard
//! run` show where each window came from.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::{Duration, Instant};

use outboard_server::llm::context::{ANTHROPIC_DEFAULT_WINDOW, OPENAI_DEFAULT_WINDOW};
use outboard_shared::EventKind;
use outboard_tests::fixture::{driver, serve};
use outboard_tests::harness::{outboard, Api, TestServer, WsClient, MODEL_OWN_WINDOW};
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

    // The same task on a server that says nothing: the OpenAI API's usual window, a guess that
    // holds the task (8,192 tokens, the default before, could not even hold the prompt and tools).
    let silent = long_turn_mock(21, None, 0).await.unwrap();
    let server = own_window_server(&silent, &[]);
    let (window, compactions) = compactions_of_a_21_step_task(&server).await;
    assert_eq!(window, OPENAI_DEFAULT_WINDOW, "404 everywhere: the API's usual window");
    assert_eq!(compactions, 0, "all 21 steps run in the guessed window");
    let log = server.log();
    assert!(log.contains("does not say model mock-model's context window"), "{log}");
    assert!(log.contains("assuming 128000 tokens, a guess"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_dialect_is_understood() {
    for (says, want) in [
        (MockWindow::LlamaCppTopLevel(16_384), 16_384),
        (MockWindow::Vllm(65_536), 65_536),
        (MockWindow::Ollama(131_072), 131_072),
        (MockWindow::Router(262_144), 262_144),
        (MockWindow::LmStudio(24_576), 24_576),
        (MockWindow::LiteLlm(100_000), 100_000),
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
    assert_eq!(asked, 5, "the five endpoints, once: {:?}", mock.window_probes());
    assert_eq!(created_window(&mut c, json!({"context_window": 12_000})).await, 12_000);
    assert_eq!(mock.window_probes().len(), asked);
    drop(server);

    let hung = MockLlm::start(Vec::new()).await.unwrap();
    hung.serve_window(MockWindow::Hang);
    let server = own_window_server(&hung, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let started = Instant::now();
    assert_eq!(created_window(&mut c, json!({})).await, OPENAI_DEFAULT_WINDOW);
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the probe's timeout: {:?}",
        started.elapsed()
    );
}

/// `outboard models --json` of a server offering `models` (a model file's `[[models]]` text).
fn models_json(server: &TestServer) -> Vec<serde_json::Value> {
    let token = server.add_user("ada", "acme").unwrap();
    let out =
        outboard(&["models", "--json", "--server", &server.url, "--token", &token], None).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str::<Vec<serde_json::Value>>(out.stdout.trim()).unwrap()
}

/// A server on a model file of `entries`, its own windows (no suite-wide window).
fn file_server(entries: &str) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("models.toml");
    std::fs::write(&file, entries).unwrap();
    let data = tempfile::tempdir().unwrap();
    let flags = [MODEL_OWN_WINDOW, "--models", file.to_str().unwrap()];
    (TestServer::start_in(data, Api::Anthropic, "unused", &flags).unwrap(), dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_window_says_where_it_came_from_in_outboard_models() {
    // Unknown ids on a server that says nothing (Anthropic's and OpenAI's APIs), a llama.cpp
    // behind the Anthropic API, each local dialect, the table and the model file.
    let silent = MockLlm::start(Vec::new()).await.unwrap();
    let llamacpp = MockLlm::start(Vec::new()).await.unwrap();
    llamacpp.serve_window(MockWindow::LlamaCpp(32_768));
    let mut entries = format!(
        "[[models]]\nname = \"gw-claude\"\nprovider = \"anthropic\"\nmodel = \"team-alias\"\n\
         base_url = \"{a}\"\n\n\
         [[models]]\nname = \"gw-gpt\"\nprovider = \"openai\"\nmodel = \"team-alias\"\n\
         base_url = \"{o}\"\n\n\
         [[models]]\nname = \"llama-msgs\"\nprovider = \"anthropic\"\nmodel = \"mock-model\"\n\
         base_url = \"{l}\"\n\n\
         [[models]]\nname = \"sonnet\"\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n\
         base_url = \"{a}\"\n\n\
         [[models]]\nname = \"pinned\"\nprovider = \"openai\"\nmodel = \"team-alias\"\n\
         base_url = \"{o}\"\ncontext_window = 50000\n",
        a = silent.anthropic_base_url(),
        o = silent.openai_base_url(),
        l = llamacpp.anthropic_base_url(),
    );
    let mut mocks = Vec::new();
    for (name, says) in [
        ("vllm", MockWindow::Vllm(65_536)),
        ("router", MockWindow::Router(262_144)),
        ("ollama", MockWindow::Ollama(131_072)),
        ("lmstudio", MockWindow::LmStudio(24_576)),
        ("litellm", MockWindow::LiteLlm(100_000)),
    ] {
        let mock = MockLlm::start(Vec::new()).await.unwrap();
        mock.serve_window(says);
        entries.push_str(&format!(
            "\n[[models]]\nname = \"{name}\"\nprovider = \"openai\"\nmodel = \"mock-model\"\n\
             base_url = \"{}\"\n",
            mock.openai_base_url()
        ));
        mocks.push(mock);
    }
    let (server, _dir) = file_server(&entries);
    // A session of each model asks its server (once); `models/list` then shows what they said.
    let token = server.add_user("bob", "acme").unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    for name in
        ["gw-claude", "gw-gpt", "llama-msgs", "vllm", "router", "ollama", "lmstudio", "litellm"]
    {
        created_window(&mut c, json!({ "model": name })).await;
    }
    let listed = models_json(&server);
    let row = |name: &str| listed.iter().find(|m| m["name"] == name).unwrap().clone();
    let said = |name: &str| {
        let m = row(name);
        (
            m["context_window"].as_u64().unwrap(),
            m["context_window_source"].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(said("gw-claude"), (ANTHROPIC_DEFAULT_WINDOW, "provider_default".into()));
    assert_eq!(said("gw-gpt"), (OPENAI_DEFAULT_WINDOW, "provider_default".into()));
    let from = row("gw-gpt")["context_window_from"].as_str().unwrap().to_owned();
    assert!(
        from.contains("--context-window") && from.contains("context_window in the model file"),
        "{from}"
    );
    assert_eq!(said("llama-msgs"), (32_768, "probe".into()), "llama.cpp behind /v1/messages");
    assert!(row("llama-msgs")["context_window_from"]
        .as_str()
        .unwrap()
        .starts_with("llama.cpp /props at"));
    assert_eq!(said("vllm"), (65_536, "probe".into()));
    assert_eq!(said("router"), (262_144, "probe".into()));
    assert_eq!(said("ollama"), (131_072, "probe".into()));
    assert_eq!(said("lmstudio"), (24_576, "probe".into()));
    assert_eq!(said("litellm"), (100_000, "probe".into()));
    assert!(row("litellm")["context_window_from"]
        .as_str()
        .unwrap()
        .starts_with("LiteLLM /model/info"));
    assert_eq!(said("sonnet"), (200_000, "table".into()));
    assert_eq!(said("pinned"), (50_000, "config".into()));

    // The table says the same, the guesses explained under it.
    let out = outboard(&["models", "--server", &server.url, "--token", &token], None).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = |name: &str| {
        out.stdout.lines().find(|l| l.contains(&format!(" {name} "))).unwrap().to_owned()
    };
    assert!(line("gw-gpt").contains("128k    provider default"), "{}", out.stdout);
    assert!(line("lmstudio").contains("24576   probe"), "{}", out.stdout);
    assert!(out.stdout.contains("gw-claude: window 200k — a guess"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guessed_window_is_stated_once_by_run_and_in_run_started() {
    let mock = MockLlm::start(vec![
        outboard_tests::mock_llm::MockStep::text("one"),
        outboard_tests::mock_llm::MockStep::text("two"),
        outboard_tests::mock_llm::MockStep::text("three"),
    ])
    .await
    .unwrap();
    let server = own_window_server(&mock, &[]);
    let token = server.add_user("ada", "acme").unwrap();
    let connect = ["--server", server.url.as_str(), "--token", token.as_str()];
    let out = outboard(&[&["run"][..], &connect[..], &["hello"][..]].concat(), None).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let notes: Vec<&str> = out.stderr.lines().filter(|l| l.contains("context window")).collect();
    assert_eq!(notes.len(), 1, "{}", out.stderr);
    assert!(
        notes[0].starts_with("outboard: context window 128000 tokens — a guess"),
        "{}",
        notes[0]
    );
    assert!(notes[0].contains("--context-window"), "{}", notes[0]);

    let out =
        outboard(&[&["run", "--json"][..], &connect[..], &["hello"][..]].concat(), None).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let started: serde_json::Value =
        serde_json::from_str(out.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(started["type"], "run_started");
    assert_eq!(started["context_window"], 128_000);
    assert_eq!(started["context_window_source"], "provider_default");
    assert!(
        !out.stderr.contains("context window"),
        "--json says it in run_started: {}",
        out.stderr
    );

    // A session resumed is not told again; a flag's window is no guess.
    let sid = started["session_id"].as_str().unwrap().to_owned();
    let out =
        outboard(&[&["run"][..], &connect[..], &["--session", &sid, "again"][..]].concat(), None)
            .unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!out.stderr.contains("context window"), "{}", out.stderr);
}
