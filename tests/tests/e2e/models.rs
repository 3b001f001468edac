//! Models per session and Anthropic extended thinking, against the real server (`serve --models
//! FILE`), the real `outboard` binary and the mock LLM over HTTP/SSE: `models/list` and `outboard
//! models`, `session/create {model}`, a switch between turns (`session/set_model`, `outboard run
//! --session ID --model NAME`) that the log records per step, and thinking blocks carried back
//! verbatim across tool steps (the mock refuses a request that drops or changes one, as the API
//! does) and kept in the log.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{EventKind, Reasoning, SessionEvent};
use outboard_tests::harness::{outboard, Api, TestServer, WsClient};
use outboard_tests::mock_llm::{mock_signature, MockLlm, MockStep};
use pretty_assertions::assert_eq;
use serde_json::json;

/// A model file offering `claude` (Anthropic, thinking on, the default) and `gpt` (OpenAI),
/// both at the mock.
fn models_file(dir: &std::path::Path, mock: &MockLlm) -> std::path::PathBuf {
    let path = dir.join("models.toml");
    let text = format!(
        r#"
default = "claude"

[[models]]
name = "claude"
provider = "anthropic"
model = "claude-sonnet-4-5"
base_url = "{anthropic}"
api_key_env = "ANTHROPIC_API_KEY"
max_tokens = 8192
thinking_budget = 2048
prices = {{ input = 3.0, output = 15.0 }}

[[models]]
name = "gpt"
provider = "openai"
model = "gpt-4.1"
base_url = "{openai}"
context_window = 64000
"#,
        anthropic = mock.anthropic_base_url(),
        openai = mock.openai_base_url(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn start(mock: &MockLlm) -> (TestServer, tempfile::TempDir) {
    let files = tempfile::tempdir().unwrap();
    let file = models_file(files.path(), mock);
    let data = tempfile::tempdir().unwrap();
    let server =
        TestServer::start_in(data, Api::Anthropic, "unused", &["--models", file.to_str().unwrap()])
            .unwrap();
    (server, files)
}

async fn turn(c: &mut WsClient, sid: &str, text: &str) -> Vec<SessionEvent> {
    c.completed_turn(sid, text, Duration::from_secs(60)).await.unwrap()
}

/// The `model` of each `assistant_message`.
fn answered_by(events: &[SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage { model, .. } => Some(model.clone().unwrap_or_default()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn thinking_blocks_go_back_verbatim_across_tool_steps_and_stay_in_the_log() {
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Glob", json!({"pattern": "*"}))
            .with_thinking("The user wants the files. I will glob first."),
        MockStep::text("There are no files.").with_thinking("Empty workspace, say so."),
        // The next turn: earlier turns' thinking may go back too (the API ignores it).
        MockStep::text("Still none."),
    ])
    .await
    .unwrap();
    let (server, _files) = start(&mock);
    let token = server.add_user("ada", "acme").unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    let events = turn(&mut c, &sid, "which files are there?").await;

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    }
    // The second step's request carries the first answer's thinking block first in its
    // assistant message, text and signature unchanged (the mock would have answered 400).
    let assistant = &requests[1].body["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    let thought = "The user wants the files. I will glob first.";
    assert_eq!(
        assistant["content"][0],
        json!({"type": "thinking", "thinking": thought, "signature": mock_signature(thought)})
    );
    assert_eq!(assistant["content"][1]["type"], "tool_use");

    // The log keeps each step's thinking with its signature, and which model answered.
    let reasoning: Vec<Vec<Reasoning>> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage { reasoning, .. } => Some(reasoning.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasoning,
        [
            vec![Reasoning::Thinking {
                thinking: thought.into(),
                signature: mock_signature(thought)
            }],
            vec![Reasoning::Thinking {
                thinking: "Empty workspace, say so.".into(),
                signature: mock_signature("Empty workspace, say so.")
            }],
        ]
    );
    assert_eq!(answered_by(&events), ["anthropic/claude-sonnet-4-5"; 2]);

    // After a restart, the conversation rebuilt from the log sends the same blocks.
    drop(c);
    let (data, _) = server.terminate(Duration::from_secs(10));
    let files = tempfile::tempdir().unwrap();
    let file = models_file(files.path(), &mock);
    let server = TestServer::start_in(
        data.unwrap(),
        Api::Anthropic,
        "unused",
        &["--models", file.to_str().unwrap()],
    )
    .unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    c.request("session/attach", json!({"session_id": sid, "role": "driver"}))
        .await
        .unwrap()
        .unwrap();
    turn(&mut c, &sid, "and now?").await;
    let third = &mock.requests()[2].body;
    let sent = third["messages"][1]["content"][0].clone();
    assert_eq!(
        sent,
        json!({"type": "thinking", "thinking": thought, "signature": mock_signature(thought)})
    );
}

// Multi-threaded: the test blocks on the `outboard` binary while the mock answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_switches_model_between_turns_and_the_log_says_which_answered() {
    let mock = MockLlm::start(vec![
        MockStep::text("Claude here."),
        MockStep::text("GPT here."),
        MockStep::text("GPT again, from the CLI."),
    ])
    .await
    .unwrap();
    let (server, _files) = start(&mock);
    let token = server.add_user("ada", "acme").unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();

    // The catalog, the default first.
    let listed = c.request("models/list", json!({})).await.unwrap().unwrap();
    let names: Vec<&str> =
        listed["models"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["claude", "gpt"]);
    assert_eq!(listed["models"][0]["default"], true);
    assert_eq!(listed["models"][0]["thinking_budget"], 2048);
    assert_eq!(listed["models"][1]["context_window"], 64000);
    assert_eq!(listed["models"][1]["label"], "openai/gpt-4.1");

    // A model the server does not offer is refused with the names it does.
    let refused = c.request("session/create", json!({"model": "opus"})).await.unwrap().unwrap_err();
    assert_eq!(refused.code, outboard_shared::ErrorCode::BadRequest);
    assert!(refused.message.contains("claude, gpt"), "{}", refused.message);

    let created = c.request("session/create", json!({})).await.unwrap().unwrap();
    let sid = created["session"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["session"]["model"], "anthropic/claude-sonnet-4-5");
    assert_eq!(created["session"]["model_name"], "claude");
    c.request("session/attach", json!({"session_id": sid, "role": "driver"}))
        .await
        .unwrap()
        .unwrap();
    let first = turn(&mut c, &sid, "hello").await;
    assert_eq!(answered_by(&first), ["anthropic/claude-sonnet-4-5"]);

    let changed = c
        .request("session/set_model", json!({"session_id": sid, "model": "gpt"}))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(changed["session"]["model"], "openai/gpt-4.1");
    assert_eq!(changed["session"]["context_window"], 64000);
    let bad = c
        .request("session/set_model", json!({"session_id": sid, "model": "nope"}))
        .await
        .unwrap()
        .unwrap_err();
    assert!(bad.message.contains("offers no model \"nope\""), "{}", bad.message);
    let second = turn(&mut c, &sid, "hello again").await;
    assert_eq!(answered_by(&second), ["openai/gpt-4.1"]);
    let paths: Vec<String> = mock.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/v1/messages", "/v1/chat/completions"]);
    // The second model sees the whole conversation, the first model's answer included.
    assert!(mock.requests()[1].body.to_string().contains("Claude here."));

    // The change is in the durable log, between the turns; the listing shows the new model.
    let attached = c
        .request("session/history", json!({"session_id": sid, "before": 1_000_000}))
        .await
        .unwrap()
        .unwrap();
    let kinds: Vec<&str> = attached["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    let at = kinds.iter().position(|k| *k == "model_changed").expect("a model_changed event");
    assert_eq!(kinds[at - 1], "turn_completed");
    let change = &attached["events"][at];
    assert_eq!(change["model"], "gpt");
    assert_eq!(change["by"], "ada");
    let listed = c.request("session/list", json!({})).await.unwrap().unwrap();
    assert_eq!(listed["sessions"][0]["model"], "openai/gpt-4.1");

    // Usage is reported per model that answered.
    let report = c.request("usage/report", json!({"by": "session"})).await.unwrap().unwrap();
    let mut models: Vec<&str> =
        report["rows"].as_array().unwrap().iter().map(|r| r["model"].as_str().unwrap()).collect();
    models.sort();
    assert_eq!(models, ["anthropic/claude-sonnet-4-5", "openai/gpt-4.1"]);

    // The CLI: `outboard models` and `outboard run --session ID --model NAME`.
    drop(c);
    let connect = ["--server", server.url.as_str(), "--token", token.as_str()];
    let out = outboard(&[&["models"][..], &connect[..]].concat(), None).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[1].starts_with("*  claude  anthropic/claude-sonnet-4-5"), "{}", out.stdout);
    assert!(lines[2].contains("gpt") && lines[2].contains("64k"), "{}", out.stdout);
    let out = outboard(
        &[&["run"][..], &connect[..], &["--session", &sid, "--model", "claude", "once more"][..]]
            .concat(),
        None,
    )
    .unwrap();
    // `claude` is answered by the mock's Anthropic side: its script's next step.
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("GPT again, from the CLI."), "{}", out.stdout);
    assert!(
        out.stderr.contains("model: claude (anthropic/claude-sonnet-4-5), by ada"),
        "{}",
        out.stderr
    );
    assert_eq!(mock.requests().last().unwrap().path, "/v1/messages");
}

#[test]
fn a_bad_model_file_stops_the_start_with_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("models.toml");
    std::fs::write(
        &file,
        "[[models]]\nname = \"a\"\nprovider = \"openai\"\nmodel = \"m\"\nthinking_budget = 4096\n",
    )
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let err =
        TestServer::start_in(data, Api::Anthropic, "unused", &["--models", file.to_str().unwrap()])
            .err()
            .expect("the server refuses the file");
    let text = format!("{err:#}");
    assert!(text.contains("thinking_budget is Anthropic's extended thinking"), "{text}");
}
