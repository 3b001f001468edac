//! Recovery at start, one rule at a time (docs/ARCHITECTURE.md, "Durability"): a log
//! that ends inside a turn is resumed by the server on its own, with nobody attached. Most cases
//! write the log with the store API (so the cut point is exact), then start a real server on it;
//! one kills a real server in the middle of a command.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::path::Path;
use std::time::Duration;

use outboard_shared::{EventKind, SessionEvent, ToolCall};
use outboard_tests::fixture::{
    self, call_results, craft_log, crafted_answer, crafted_call, crafted_opening, crafted_result,
    crafted_start, driver, kinds, serve,
};
use outboard_tests::harness::{Api, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn call(id: &str, name: &str, input: Value) -> ToolCall {
    crafted_call(id, name, input)
}

fn opening() -> Vec<EventKind> {
    crafted_opening("do the thing")
}

/// Writes a session log cut at an exact point; returns (data dir, session id, token).
async fn craft(events: Vec<EventKind>) -> (tempfile::TempDir, String, String) {
    let data = tempfile::tempdir().unwrap();
    let (sid, token) = craft_log(data.path(), "anthropic/mock-model", events).await;
    (data, sid, token)
}

fn workspace(data: &Path, sid: &str) -> std::path::PathBuf {
    let dir = data.join("workspaces").join(sid);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Attaches and collects the session's durable events until its turn has ended.
async fn settled_log(server: &TestServer, token: &str, sid: &str) -> Vec<SessionEvent> {
    let log = fixture::settled_log(server, token, sid, Duration::from_secs(30)).await;
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>(), "no gap, no duplicate");
    log
}

#[tokio::test]
async fn after_a_user_message_the_model_is_called_again() {
    let mock = MockLlm::start(vec![MockStep::text("Resumed answer.")]).await.unwrap();
    let (data, sid, token) = craft(opening()).await;
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();
    let log = settled_log(&server, &token, &sid).await;
    assert_eq!(
        kinds(&log),
        ["turn_started", "user_message", "assistant_message", "turn_completed"]
    );
    assert_eq!(mock.requests().len(), 1);
    assert!(mock.requests()[0].body.to_string().contains("do the thing"));
}

#[tokio::test]
async fn after_a_tool_result_the_model_is_called_again() {
    let mock = MockLlm::start(vec![MockStep::text("Saw the result.")]).await.unwrap();
    let glob = call("c1", "Glob", json!({"pattern": "*"}));
    let mut events = opening();
    events.extend([
        crafted_answer(std::slice::from_ref(&glob), None),
        crafted_start(&glob),
        crafted_result(&glob, "RESULT-MARKER"),
    ]);
    let (data, sid, token) = craft(events).await;
    let server = TestServer::start_in(data, Api::OpenAi, &mock.openai_base_url(), &[]).unwrap();
    let log = settled_log(&server, &token, &sid).await;
    assert_eq!(kinds(&log)[5..], ["assistant_message", "turn_completed"]);
    let body = mock.requests()[0].body.to_string();
    assert!(body.contains("RESULT-MARKER"), "the model sees the recorded result: {body}");
}

#[tokio::test]
async fn read_only_tools_run_again_and_unstarted_calls_run() {
    let mock = MockLlm::start(vec![MockStep::text("Done.")]).await.unwrap();
    let read = call("c1", "Read", json!({"file_path": "notes.txt"}));
    let write = call("c2", "Write", json!({"file_path": "new.txt", "content": "fresh\n"}));
    let mut events = opening();
    events.extend([
        crafted_answer(&[read.clone(), write], None),
        // The Read had started; the Write never did.
        crafted_start(&read),
    ]);
    let (data, sid, token) = craft(events).await;
    std::fs::write(workspace(data.path(), &sid).join("notes.txt"), "line one\n").unwrap();
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();
    let log = settled_log(&server, &token, &sid).await;
    let r = call_results(&log);
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].0.as_str(), r[0].2), ("c1", false));
    assert!(r[0].1.contains("line one"), "{}", r[0].1);
    assert_eq!((r[1].0.as_str(), r[1].2), ("c2", false));
    assert_eq!(std::fs::read_to_string(server.workspace(&sid).join("new.txt")).unwrap(), "fresh\n");
    assert_eq!(*kinds(&log).last().unwrap(), "turn_completed");
}

/// A turn cut while two writes ran: `a` did not exist when its write started (and still does not:
/// it must run again); `b` held "old b\n" (if it holds anything else now, the write happened, or
/// someone else wrote, and it must not run again).
fn two_writes(a: &str, b: &str) -> Vec<EventKind> {
    let untouched = call("c1", "Write", json!({"file_path": a, "content": "new a\n"}));
    let applied = call("c2", "Write", json!({"file_path": b, "content": "new b\n"}));
    let mut events = opening();
    events.extend([
        crafted_answer(&[untouched.clone(), applied.clone()], None),
        EventKind::ToolCall { call: untouched, target_before: Some("absent".into()) },
        EventKind::ToolCall {
            call: applied,
            target_before: Some(outboard_server::auth::hex_sha256(b"old b\n")),
        },
    ]);
    events
}

#[tokio::test]
async fn a_write_runs_again_only_if_its_target_is_unchanged() {
    let mock = MockLlm::start(vec![MockStep::text("Done.")]).await.unwrap();
    let (data, sid, token) = craft(two_writes("a.txt", "b.txt")).await;
    std::fs::write(workspace(data.path(), &sid).join("b.txt"), "written before the crash\n")
        .unwrap();
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();
    let log = settled_log(&server, &token, &sid).await;
    let ws = server.workspace(&sid);
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "new a\n");
    assert_eq!(std::fs::read_to_string(ws.join("b.txt")).unwrap(), "written before the crash\n");
    let r = call_results(&log);
    assert_eq!(r.len(), 2);
    // The whole sentence, as the model reads it (a lost line continuation once put runs of
    // spaces in it).
    assert_eq!(
        r[1].1,
        "The harness restarted while this write ran. The file no longer holds its previous \
         content, so the write most likely completed; Read the file to confirm before relying \
         on it."
    );
}

#[tokio::test]
async fn an_org_file_write_runs_again_only_if_its_head_is_unchanged() {
    use outboard_server::orgfs::{Author, OrgFs, Precondition};
    use outboard_server::vfs::OrgPath;
    let mock = MockLlm::start(vec![MockStep::text("Done.")]).await.unwrap();
    let (data, sid, token) = craft(two_writes("/memory/a.md", "/memory/b.md")).await;
    {
        // The write of b.md committed before the crash (its head is no longer "old b").
        let store = outboard_tests::harness::open_store(data.path()).unwrap();
        let user = store.authenticate(&token).await.unwrap().unwrap();
        let fs = OrgFs::new(store, data.path().join("orgs"));
        let author = Author { user: "alice".into(), session: None };
        let b = OrgPath::parse("/memory/b.md").unwrap();
        fs.write(
            &user.org_id,
            &b,
            "written before the crash\n".into(),
            &author,
            outboard_shared::FileOp::Write,
            Precondition::Any,
        )
        .await
        .unwrap();
    }
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();
    let log = settled_log(&server, &token, &sid).await;
    let r = call_results(&log);
    assert_eq!(r.len(), 2);
    assert!(!r[0].2 && r[0].1.contains("File created successfully at: /memory/a.md"), "{r:?}");
    // The whole sentence, as the model reads it (a lost line continuation once put runs of
    // spaces in it).
    assert_eq!(
        r[1].1,
        "The harness restarted while this write ran. The file no longer holds its previous \
         content, so the write most likely completed; Read the file to confirm before relying \
         on it."
    );
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let b = c.request("files/read", json!({"path": "/memory/b.md"})).await.unwrap().unwrap();
    assert_eq!(b["content"], "written before the crash\n");
    assert_eq!(b["file"]["version"], 1, "the write was not run twice");
}

#[tokio::test]
async fn a_command_in_flight_is_never_run_twice() {
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Bash", json!({"command": "echo ran >> ran.log; sleep 30"})),
        MockStep::text("I will check ran.log before going on."),
    ])
    .await
    .unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let (token, mut c, sid) = driver(&server).await;
    c.request("turn/send", json!({"session_id": sid, "text": "run it"})).await.unwrap().unwrap();
    let ran_log = server.workspace(&sid).join("ran.log");
    // Async: the mock model runs on this test's one thread and must answer meanwhile. The
    // deadline is for a hung server, not a measure: on a loaded 2-core CI machine the first
    // checkpoint, sandbox and model call of a fresh server took longer than 10 s.
    outboard_tests::harness::wait_until_async(
        "the command to start",
        Duration::from_secs(60),
        || std::fs::read_to_string(&ran_log).is_ok_and(|s| s == "ran\n"),
    )
    .await
    .unwrap();
    let data = server.kill().unwrap();

    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();
    let log = settled_log(&server, &token, &sid).await;
    assert_eq!(
        kinds(&log),
        [
            "checkpoint",
            "turn_started",
            "user_message",
            "assistant_message",
            "tool_call",
            "tool_result",
            "assistant_message",
            "turn_completed"
        ]
    );
    let r = call_results(&log);
    assert!(r[0].2, "{:?}", r[0]);
    assert_eq!(
        r[0].1,
        "This command's result was never recorded: the server running this session restarted, \
         or lost its lease on the session (its store was unreachable for longer than the lease) \
         and another server node took the turn over, while the command ran. Its outcome is \
         unknown. Check its effects (files, processes) before running it again."
    );
    assert_eq!(std::fs::read_to_string(server.workspace(&sid).join("ran.log")).unwrap(), "ran\n");
    assert!(mock.requests()[1].body.to_string().contains("outcome is unknown"));
    // And the session goes on.
    mock.push(MockStep::text("Still here."));
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    c.request("session/attach", json!({"session_id": sid, "role": "driver", "after_seq": 7}))
        .await
        .unwrap()
        .unwrap();
    c.request("turn/send", json!({"session_id": sid, "text": "ok?"})).await.unwrap().unwrap();
    let events = c
        .events_until(|e| {
            matches!(e.kind, EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. })
        })
        .await
        .unwrap();
    assert!(matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }));
}

#[tokio::test]
async fn an_unreadable_log_fails_the_session_visibly() {
    let mock = MockLlm::start(vec![]).await.unwrap();
    let (data, sid, token) = craft(opening()).await;
    let store = outboard_tests::harness::open_store(data.path()).unwrap();
    let sql =
        format!("UPDATE events SET payload = '{{not json' WHERE session_id = '{sid}' AND seq = 2");
    store.call(move |c| c.execute_batch(&sql)).await.unwrap();
    drop(store);
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sessions = c.request("session/list", json!({})).await.unwrap().unwrap();
    // The list shows the session; once its actor has loaded, it is failed with the reason.
    assert_eq!(sessions["sessions"][0]["id"], sid);
    let mut failure = Value::Null;
    for _ in 0..200 {
        let s = c.request("session/list", json!({})).await.unwrap().unwrap();
        if s["sessions"][0]["status"] == "failed" {
            failure = s["sessions"][0]["failure"].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(failure.as_str().unwrap_or("").contains("cannot be read"), "{failure}");
    let refused = c.request("turn/send", json!({"session_id": sid, "text": "hi"})).await.unwrap();
    assert!(refused.unwrap_err().message.contains("failed"));
    assert_eq!(mock.requests().len(), 0);
}

#[tokio::test]
async fn sigterm_stops_at_a_checkpoint_and_the_turn_resumes_on_start() {
    // A slow answer is streaming when the server is told to stop.
    let mock = MockLlm::start(vec![
        MockStep::text("one two three four five six seven eight nine ten").chunk_delay(300),
        MockStep::text("The resumed answer."),
    ])
    .await
    .unwrap();
    let server = serve(&mock, Api::OpenAi, &[]);
    let (token, mut c, sid) = driver(&server).await;
    c.request("turn/send", json!({"session_id": sid, "text": "talk"})).await.unwrap().unwrap();
    c.events_until(|e| matches!(e.kind, EventKind::AssistantDelta { .. })).await.unwrap();

    let stopper = tokio::task::spawn_blocking(move || server.terminate(Duration::from_secs(30)));
    // The attached client is told the server is going away.
    let told = loop {
        match c.event().await {
            Ok(_) => continue,
            Err(e) => break e.to_string(),
        }
    };
    assert!(told.contains("shutting_down") || told.contains("restart"), "{told}");
    let (data, clean) = stopper.await.unwrap();
    assert!(clean, "the server exits 0 after a graceful shutdown");
    // That it did not wait for the slow stream shows in the log below: a drain that waited would
    // have committed the first answer, not the re-requested one.

    let server =
        TestServer::start_in(data.unwrap(), Api::OpenAi, &mock.openai_base_url(), &[]).unwrap();
    let log = settled_log(&server, &token, &sid).await;
    assert_eq!(
        kinds(&log),
        ["checkpoint", "turn_started", "user_message", "assistant_message", "turn_completed"]
    );
    match &log[3].kind {
        EventKind::AssistantMessage { text, .. } => assert_eq!(text, "The resumed answer."),
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.requests().len(), 2, "the cut-off call was re-issued once");
}
