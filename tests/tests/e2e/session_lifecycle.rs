//! A session's life on the server: the title it gets from its first message when created without
//! one (and the `session_titled` event telling its clients), and its actor stopping when idle and
//! coming back, with its whole history, on the next request.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::{Duration, Instant};

use outboard_server::sandbox::SandboxConfig;
use outboard_server::{Limits, NetConfig, ServerConfig, ServerHandle};
use outboard_shared::{EventKind, SessionEvent, SessionInfo};
use outboard_tests::fixture::{driver, serve};
use outboard_tests::harness::{bin, outboard, Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use pretty_assertions::assert_eq;
use serde_json::json;

async fn list(c: &mut WsClient) -> Vec<SessionInfo> {
    let listed = c.request("session/list", json!({})).await.unwrap().unwrap();
    serde_json::from_value(listed["sessions"].clone()).unwrap()
}

async fn turn(c: &mut WsClient, sid: &str, text: &str) -> Vec<SessionEvent> {
    c.turn(sid, text).await.unwrap()
}

#[tokio::test]
async fn a_session_created_without_a_title_is_named_by_its_first_message() {
    let mock = MockLlm::start(vec![MockStep::text("ok"); 3]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let (token, mut c, sid) = driver(&server).await;
    assert_eq!(list(&mut c).await[0].title, "");
    let first = format!("\n   Fix the flaky login test in CI {}  \nthen run it", "é".repeat(40));
    let events = turn(&mut c, &sid, &first).await;
    // The first line, trimmed, cut at 60 characters (not bytes: é is two).
    let want = format!("Fix the flaky login test in CI {}", "é".repeat(29));
    assert_eq!(want.chars().count(), 60);
    assert_eq!(list(&mut c).await[0].title, want);
    // The attached clients are told, right after the message (the TUI's header follows it).
    let kinds: Vec<&EventKind> = events.iter().map(|e| &e.kind).collect();
    let told = kinds.iter().position(|k| matches!(k, EventKind::SessionTitled { .. }));
    let message = kinds.iter().position(|k| matches!(k, EventKind::UserMessage { .. }));
    assert_eq!(told, message.map(|m| m + 1), "{kinds:?}");
    assert!(matches!(kinds[told.unwrap()], EventKind::SessionTitled { title } if *title == want));
    // A later message does not rename it, nor tell anyone again.
    let later = turn(&mut c, &sid, "something else entirely").await;
    assert!(!later.iter().any(|e| matches!(e.kind, EventKind::SessionTitled { .. })));
    assert_eq!(list(&mut c).await[0].title, want);
    // `outboard sessions` shows it, and a re-attach's snapshot carries it.
    let run = outboard(&["sessions", "--json", "--server", &server.url, "--token", &token], None)
        .unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let listed: Vec<SessionInfo> = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(listed[0].title, want);
    let mut d = WsClient::connect(&server.url, &token).await.unwrap();
    let snap =
        d.request("session/attach", json!({"session_id": sid, "role": "watcher"})).await.unwrap();
    assert_eq!(snap.unwrap()["session"]["title"], json!(want));

    // A given title is kept; the org's title_bytes quota bounds a derived one.
    let created = c.request("session/create", json!({"title": "mine"})).await.unwrap().unwrap();
    let titled = created["session"]["id"].as_str().unwrap().to_owned();
    c.request("session/attach", json!({"session_id": titled, "role": "driver"}))
        .await
        .unwrap()
        .unwrap();
    turn(&mut c, &titled, "not the title").await;
    let out = std::process::Command::new(bin("outboard-server").unwrap())
        .args(["admin", "quota", "set", "--org", "acme", "title_bytes", "10"])
        .arg("--data")
        .arg(server.data_dir())
        .args(outboard_tests::harness::store_args(server.data_dir()).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let short = c.new_session().await.unwrap();
    mock.push(MockStep::text("ok"));
    turn(&mut c, &short, "abcdefghijklmnop").await;
    let sessions = list(&mut c).await;
    let title = |id: &str| sessions.iter().find(|s| s.id.0 == id).unwrap().title.clone();
    assert_eq!(title(&titled), "mine");
    assert_eq!(title(&short), "abcdefghij");
}

/// An in-process server (the real gateway on 127.0.0.1:0) whose actors stop after `idle`.
async fn server_with_idle(mock: &MockLlm, idle: Duration) -> (ServerHandle, tempfile::TempDir) {
    let data = tempfile::tempdir().unwrap();
    let mut llm = outboard_server::config::llm_config(
        Some("anthropic"),
        Some(&mock.anthropic_base_url()),
        Some("mock-model"),
    )
    .unwrap();
    llm.api_key = Some(outboard_server::Secret::new("sk-test"));
    let config = ServerConfig {
        data_dir: data.path().to_path_buf(),
        models: llm.into(),
        // The sandbox agent lives in the `outboard-server` binary, not in this test.
        sandbox: SandboxConfig {
            agent_exe: Some(bin("outboard-server").unwrap()),
            ..SandboxConfig::Bwrap
        },
        limits: Limits { session_idle: idle, ..Limits::default() },
        net: NetConfig::default(),
        allow_client_workspaces: false,
        place_on_hosts: false,
        store: None,
        workspaces: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    (outboard_server::launch(listener, config).await.unwrap(), data)
}

async fn wait_for(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + deadline;
    while !cond() {
        assert!(Instant::now() < until, "timed out after {deadline:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_session_actors_stop_and_come_back_with_their_history() {
    const SESSIONS: usize = 5;
    let idle = Duration::from_millis(200);
    let mock = MockLlm::start(vec![MockStep::text("first answer"); SESSIONS]).await.unwrap();
    let (server, _data) = server_with_idle(&mock, idle).await;
    let token = server.mint_token("acme", "alice").await.unwrap();

    let mut c = WsClient::connect(&server.url(), &token).await.unwrap();
    let mut sids = Vec::new();
    for i in 0..SESSIONS {
        let sid = c.new_session().await.unwrap();
        turn(&mut c, &sid, &format!("first message {i}")).await;
        sids.push(sid);
    }
    assert_eq!(server.live_session_actors(), SESSIONS);
    // Attached sessions keep their actors however long they are idle.
    tokio::time::sleep(idle * 4).await;
    assert_eq!(server.live_session_actors(), SESSIONS, "attached actors stay");

    drop(c);
    wait_for("every idle actor to stop", Duration::from_secs(30), || {
        server.live_session_actors() == 0
    })
    .await;

    // The next request brings a session back from its log: the whole history, and the
    // conversation the model sees.
    let mut c = WsClient::connect(&server.url(), &token).await.unwrap();
    let snap = c
        .request("session/attach", json!({"session_id": sids[2], "role": "driver"}))
        .await
        .unwrap()
        .unwrap();
    let events: Vec<SessionEvent> = serde_json::from_value(snap["events"].clone()).unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap");
    assert!(events.iter().any(|e| e.kind
        == EventKind::UserMessage { text: "first message 2".into(), attachments: Vec::new() }));
    assert!(events.iter().any(
        |e| matches!(&e.kind, EventKind::AssistantMessage { text, .. } if text == "first answer")
    ));
    assert_eq!(server.live_session_actors(), 1);

    mock.push(MockStep::text("second answer"));
    let second = turn(&mut c, &sids[2], "second message").await;
    let started = second.iter().find(|e| matches!(e.kind, EventKind::Checkpoint { .. })).unwrap();
    assert_eq!(started.seq, seqs.len() as u64 + 1, "the log goes on where it stopped");
    assert!(matches!(second.last().unwrap().kind, EventKind::TurnCompleted { .. }));
    let asked = mock.requests().last().unwrap().body.to_string();
    assert!(asked.contains("first message 2") && asked.contains("first answer"), "{asked}");
    assert!(asked.contains("second message"), "{asked}");
    server.shutdown().await;
}

/// Requests that race with actors stopping are never lost: with actors stopping after a few
/// milliseconds of idleness, every request still gets its normal answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_racing_an_eviction_are_answered() {
    let mock = MockLlm::start(vec![MockStep::text("ok")]).await.unwrap();
    let (server, _data) = server_with_idle(&mock, Duration::from_millis(2)).await;
    let token = server.mint_token("acme", "alice").await.unwrap();
    let mut c = WsClient::connect(&server.url(), &token).await.unwrap();
    let created = c.request("session/create", json!({})).await.unwrap().unwrap();
    let sid = created["session"]["id"].as_str().unwrap().to_owned();
    for i in 0..400u64 {
        // The owner's unattached connection may interrupt; each call reaches the actor.
        let r = c.request("turn/interrupt", json!({"session_id": sid})).await.unwrap();
        assert_eq!(r, Ok(json!({"interrupted": false})), "request {i}");
        if i % 50 == 49 {
            // Now and then the actor is seen stopped for sure (a loaded machine may stretch
            // every short gap below), and the next request meets the hub right after.
            wait_for("the idle actor to stop", Duration::from_secs(10), || {
                server.live_session_actors() == 0
            })
            .await;
        } else {
            // Gaps around the idle time: some requests arrive as the actor decides to stop.
            tokio::time::sleep(Duration::from_micros(500 + (i % 7) * 400)).await;
        }
    }
    server.shutdown().await;
}
