//! Hooks with Claude Code's contract through the real server (issue 52, items 1 and 2): a
//! repository's hooks run in the session's sandbox (exit 2 refuses a call with stderr as the
//! reason, a formatter rewrites a file after `Edit`, `UserPromptSubmit` adds context to the
//! next request, a hang is let through or blocks with `onFailure: "block"`); an org webhook on
//! loopback gets a signed body and denies a tool; a settings file the model writes runs only
//! in the sandbox, and a settings file that is a link to a host file is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use axum::routing::post;
use outboard_shared::{EventKind, SessionEvent};
use outboard_tests::fixture::{self, admin_ok};
use outboard_tests::harness::{Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use serde_json::{json, Value};

fn bash(id: &str, command: &str) -> MockToolCall {
    MockToolCall::new("Bash", json!({"command": command})).with_id(id)
}

/// The text and error flag of the `tool_result` the model was sent for `id`.
fn sent(mock: &MockLlm, id: &str) -> (String, bool) {
    for request in mock.requests().iter().rev() {
        for message in request.body["messages"].as_array().into_iter().flatten() {
            for block in message["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_result" && block["tool_use_id"] == id {
                    let text = match &block["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(parts) => {
                            parts.iter().filter_map(|p| p["text"].as_str()).collect()
                        }
                        _ => String::new(),
                    };
                    return (text, block["is_error"] == true);
                }
            }
        }
    }
    panic!("no result for {id} was sent to the model");
}

fn reminders(events: &[SessionEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SystemReminder { text } => Some(text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn settings(workspace: &Path, file: &str, hooks: Value) {
    std::fs::create_dir_all(workspace.join(".claude")).unwrap();
    let text = serde_json::to_string_pretty(&json!({ "hooks": hooks })).unwrap();
    std::fs::write(workspace.join(".claude").join(file), text).unwrap();
}

struct Session {
    mock: MockLlm,
    server: outboard_tests::harness::TestServer,
    client: WsClient,
    sid: String,
    workspace: std::path::PathBuf,
}

async fn session() -> Session {
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = fixture::serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("bob", "acme").unwrap();
    let mut client = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = client.new_session().await.unwrap();
    let workspace = server.workspace(&sid);
    std::fs::create_dir_all(&workspace).unwrap();
    Session { mock, server, client, sid, workspace }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_pre_tool_use_hook_blocks_rm_rf_and_the_model_gets_its_reason() {
    let mut s = session().await;
    std::fs::create_dir_all(s.workspace.join("victim")).unwrap();
    std::fs::write(s.workspace.join("victim/keep.txt"), "keep").unwrap();
    let guard = "if grep -q 'rm -rf'; then echo \"rm -rf is not allowed in $CLAUDE_PROJECT_DIR\" \
                 >&2; exit 2; fi";
    settings(
        &s.workspace,
        "settings.json",
        json!({"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": guard}]}]}),
    );
    s.mock.push(MockStep::tool_calls(vec![
        bash("rm", "rm -rf /workspace/victim"),
        bash("ok", "echo fine > /workspace/ran.txt"),
    ]));
    s.mock.push(MockStep::text("done"));
    s.client.turn(&s.sid, "clean up").await.unwrap();
    let (text, is_error) = sent(&s.mock, "rm");
    assert!(is_error, "{text}");
    assert!(text.contains("rm -rf is not allowed in /workspace"), "{text}");
    assert_eq!(std::fs::read_to_string(s.workspace.join("victim/keep.txt")).unwrap(), "keep");
    let (text, is_error) = sent(&s.mock, "ok");
    assert!(!is_error, "{text}");
    assert_eq!(std::fs::read_to_string(s.workspace.join("ran.txt")).unwrap(), "fine\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_tool_use_formatter_rewrites_the_file_after_edit() {
    let mut s = session().await;
    let format = "f=$(sed -n 's/.*\"file_path\":\"\\([^\"]*\\)\".*/\\1/p'); \
                  tr a-z A-Z < \"$f\" > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"";
    settings(
        &s.workspace,
        "settings.json",
        json!({"PostToolUse": [{"matcher": "Edit|MultiEdit", "hooks": [{"command": format}]}]}),
    );
    let path = "/workspace/notes.txt";
    s.mock.push(MockStep::tool_calls(vec![MockToolCall::new(
        "Write",
        json!({"file_path": path, "content": "hello world"}),
    )
    .with_id("w")]));
    s.mock.push(MockStep::tool_calls(vec![MockToolCall::new("Read", json!({"file_path": path}))]));
    s.mock.push(MockStep::tool_calls(vec![MockToolCall::new(
        "Edit",
        json!({"file_path": path, "old_string": "world", "new_string": "there"}),
    )
    .with_id("e")]));
    s.mock.push(MockStep::text("done"));
    s.client.turn(&s.sid, "edit the notes").await.unwrap();
    let (text, is_error) = sent(&s.mock, "e");
    assert!(!is_error, "{text}");
    // Write is not matched (the file stayed as written until the Edit); Edit is.
    assert_eq!(std::fs::read_to_string(s.workspace.join("notes.txt")).unwrap(), "HELLO THERE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_prompt_submit_stdout_reaches_the_next_model_request() {
    let mut s = session().await;
    settings(
        &s.workspace,
        "settings.local.json",
        json!({"UserPromptSubmit": [{"hooks": [{"command":
            "echo \"CONTEXT-FROM-HOOK prompt=$(grep -o 'deploy please' | head -1)\""}]}]}),
    );
    s.mock.push(MockStep::text("ok"));
    s.client.turn(&s.sid, "deploy please").await.unwrap();
    let body = s.mock.requests()[0].body.to_string();
    assert!(body.contains("CONTEXT-FROM-HOOK prompt=deploy please"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_past_its_timeout_is_let_through_unless_it_says_block() {
    let mut s = session().await;
    settings(
        &s.workspace,
        "settings.json",
        json!({"PreToolUse": [
            {"matcher": "Bash", "hooks": [{"command": "sleep 30", "timeout": 1}]},
            {"matcher": "Write", "hooks": [{"command": "sleep 30", "timeout": 1, "onFailure": "block"}]}
        ]}),
    );
    s.mock.push(MockStep::tool_calls(vec![
        bash("b", "echo through > /workspace/through.txt"),
        MockToolCall::new("Write", json!({"file_path": "/workspace/blocked.txt", "content": "x"}))
            .with_id("w"),
    ]));
    s.mock.push(MockStep::text("done"));
    let events = s.client.turn(&s.sid, "go").await.unwrap();
    assert_eq!(std::fs::read_to_string(s.workspace.join("through.txt")).unwrap(), "through\n");
    let (text, is_error) = sent(&s.mock, "w");
    assert!(is_error && text.contains("did not finish within 1.0s"), "{text}");
    assert!(!s.workspace.join("blocked.txt").exists());
    let log = reminders(&events);
    assert!(log.contains("sleep 30` did not finish within 1.0s; let through"), "{log}");
    assert!(log.contains("did not finish within 1.0s; blocked"), "{log}");
}

#[derive(Default)]
struct Received {
    valid: usize,
    invalid: usize,
    tools: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_org_webhook_gets_a_signed_body_and_denies_a_tool() {
    const KEY: &str = "webhook-signing-key-0123456789";
    let received = Arc::new(Mutex::new(Received::default()));
    let seen = received.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let seen = seen.clone();
            async move {
                let signature = headers
                    .get("x-outboard-signature")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let input: Value = serde_json::from_slice(&body).unwrap_or_default();
                let mut seen = seen.lock().unwrap();
                if !outboard_hooks::sign::verify(KEY.as_bytes(), &body, &signature) {
                    seen.invalid += 1;
                    return axum::Json(json!({}));
                }
                seen.valid += 1;
                seen.tools.push(input["tool_name"].as_str().unwrap_or_default().to_owned());
                axum::Json(json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "the org forbids Bash on Fridays"}}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut s = session().await;
    let url = format!("http://{addr}/hook");
    let added = admin_ok(
        &s.server,
        &["hook", "add", "--org", "acme", "--event", "PreToolUse", "--matcher", "Bash", &url],
        None,
    );
    assert!(added.starts_with("hook-"), "{added}");
    let host = addr.to_string();
    admin_ok(&s.server, &["secret", "set", "--org", "acme", "--host", &host, "hookkey"], Some(KEY));
    let listed = admin_ok(&s.server, &["hook", "list", "--org", "acme"], None);
    assert!(listed.contains(&url) && !listed.contains(KEY), "{listed}");

    s.mock.push(MockStep::tool_calls(vec![
        bash("b", "echo ran > /workspace/org.txt"),
        MockToolCall::new("Write", json!({"file_path": "/workspace/w.txt", "content": "w"}))
            .with_id("w"),
    ]));
    s.mock.push(MockStep::text("done"));
    let events = s.client.turn(&s.sid, "go").await.unwrap();
    let (text, is_error) = sent(&s.mock, "b");
    assert!(is_error && text.contains("the org forbids Bash on Fridays"), "{text}");
    assert!(!s.workspace.join("org.txt").exists());
    assert!(!sent(&s.mock, "w").1, "Write is not matched");
    {
        let seen = received.lock().unwrap();
        assert_eq!((seen.valid, seen.invalid), (1, 0));
        assert_eq!(seen.tools, vec!["Bash".to_owned()]);
    }
    let log = serde_json::to_string(&events).unwrap();
    assert!(!log.contains(KEY), "the key is never in the log");

    // Fail closed: the webhook down, the call is refused.
    let id = added.lines().next().unwrap();
    admin_ok(&s.server, &["hook", "remove", "--org", "acme", id], None);
    let dead = "http://127.0.0.1:9/hook";
    admin_ok(&s.server, &["hook", "add", "--org", "acme", "--event", "PreToolUse", dead], None);
    s.mock.push(MockStep::tool_calls(vec![bash("c", "echo ran > /workspace/closed.txt")]));
    s.mock.push(MockStep::text("done"));
    s.client.turn(&s.sid, "again").await.unwrap();
    let (text, is_error) = sent(&s.mock, "c");
    assert!(is_error && text.contains("failed (cannot be signed"), "{text}");
    assert!(!s.workspace.join("closed.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_settings_run_only_in_the_sandbox_and_a_linked_settings_file_is_refused() {
    let mut s = session().await;
    let host = tempfile::tempdir().unwrap();
    let marker = host.path().join("pwned");
    // The model writes a settings file whose hook writes a host path (and proves it ran).
    let hook = format!(
        "mkdir -p {dir} 2>/dev/null; echo pwned > {marker}; id -u > /workspace/hook-ran",
        dir = host.path().display(),
        marker = marker.display()
    );
    let planted =
        json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"command": hook}]}]}});
    s.mock.push(MockStep::tool_calls(vec![MockToolCall::new(
        "Write",
        json!({"file_path": "/workspace/.claude/settings.json", "content": planted.to_string()}),
    )
    .with_id("plant")]));
    s.mock.push(MockStep::text("planted"));
    s.client.turn(&s.sid, "set up the project").await.unwrap();
    assert!(!sent(&s.mock, "plant").1);

    // A settings file that is a link to a host file whose hook would mark the workspace.
    let host_settings = host.path().join("settings.json");
    let linked = json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"command":
        "echo linked > /workspace/linked-ran"}]}]}});
    std::fs::write(&host_settings, linked.to_string()).unwrap();
    std::os::unix::fs::symlink(&host_settings, s.workspace.join(".claude/settings.local.json"))
        .unwrap();

    s.mock.push(MockStep::tool_calls(vec![bash("b", "echo hi")]));
    s.mock.push(MockStep::text("done"));
    let events = s.client.turn(&s.sid, "go on").await.unwrap();
    assert!(!sent(&s.mock, "b").1);
    // The planted hook ran, in the sandbox: its workspace write is there, the host path is not.
    assert!(s.workspace.join("hook-ran").exists(), "the planted hook did not run");
    assert!(!marker.exists(), "a repository hook wrote a host file");
    // The link was refused, never followed, and the log says so.
    assert!(!s.workspace.join("linked-ran").exists(), "a linked settings file was followed");
    let log = reminders(&events);
    assert!(log.contains(".claude/settings.local.json: not read"), "{log}");
    assert_eq!(std::fs::read_to_string(&host_settings).unwrap(), linked.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_hook_that_blocks_sends_the_model_back_with_its_reason() {
    let mut s = session().await;
    let check = "if [ ! -f /workspace/checked ]; then touch /workspace/checked; \
                 echo 'tests fail: run them again' >&2; exit 2; fi";
    settings(&s.workspace, "settings.json", json!({"Stop": [{"hooks": [{"command": check}]}]}));
    s.mock.push(MockStep::text("done"));
    s.mock.push(MockStep::text("really done"));
    let events = s.client.turn(&s.sid, "finish").await.unwrap();
    assert!(matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }));
    let requests = s.mock.requests();
    assert_eq!(requests.len(), 2, "the model was called again once");
    let body = requests[1].body.to_string();
    assert!(body.contains("Stop hook feedback: tests fail: run them again"), "{body}");
    let stop_active: Vec<_> = events
        .iter()
        .filter(
            |e| matches!(&e.kind, EventKind::SystemReminder { text } if text.contains("Stop hook")),
        )
        .collect();
    assert_eq!(stop_active.len(), 1);
}
