//! The sandbox lifecycle as a session lives it, through a real server: nothing starts before the
//! first `Bash`; an idle sandbox is frozen and a background process survives the freeze; a killed
//! sandbox is replaced over the same workspace and the session goes on. (The sandbox's own unit
//! tests in `server/sandbox/src/handle/tests.rs` cover limits, timeouts, the output cap and isolation.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{EventKind, SandboxState, SessionEvent};
use outboard_tests::fixture::driver;
use outboard_tests::harness::{Api, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::json;

fn sandbox_states(events: &[SessionEvent]) -> Vec<SandboxState> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Sandbox { state, .. } => Some(state),
            _ => None,
        })
        .collect()
}

/// The `ms` of each sandbox event.
fn sandbox_ms(events: &[SessionEvent]) -> Vec<f64> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Sandbox { ms, .. } => Some(ms),
            _ => None,
        })
        .collect()
}

async fn turn(c: &mut WsClient, sid: &str, text: &str) -> Vec<SessionEvent> {
    c.turn(sid, text).await.unwrap()
}

fn bash_output(events: &[SessionEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult { name, output, .. } if name == "Bash" => Some(output.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn lazy_start_freeze_with_a_surviving_background_process_and_replacement() {
    let mock = MockLlm::start(vec![
        // Turn 1: file tools only — no sandbox.
        MockStep::tool_call("Write", json!({"file_path": "a.txt", "content": "kept\n"})),
        MockStep::tool_call("Read", json!({"file_path": "a.txt"})),
        MockStep::text("Wrote it."),
        // Turn 2: a background process.
        MockStep::tool_call(
            "Bash",
            json!({"command": "(while true; do sleep 0.05; done) & echo $! > bg.pid; echo started"}),
        ),
        MockStep::text("Started."),
        // Turn 3, after a freeze: the background process still answers.
        MockStep::tool_call("Bash", json!({"command": "kill -0 $(cat bg.pid) && echo alive"})),
        MockStep::text("Alive."),
        // Turn 4, after the sandbox was killed from outside: a fresh one, same workspace.
        MockStep::tool_call("Bash", json!({"command": "cat a.txt; kill -0 $(cat bg.pid) || echo gone"})),
        MockStep::text("Replaced."),
    ])
    .await
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(
        data,
        Api::Anthropic,
        &mock.anthropic_base_url(),
        &["--sandbox-freeze-after", "1"],
    )
    .unwrap();
    let (_token, mut c, sid) = driver(&server).await;

    let events = turn(&mut c, &sid, "write a file").await;
    assert_eq!(sandbox_states(&events), [], "no sandbox before the first Bash");

    let events = turn(&mut c, &sid, "start a background loop").await;
    assert_eq!(sandbox_states(&events), [SandboxState::Provisioning, SandboxState::Running]);
    assert!(bash_output(&events).contains("started"));

    // Idle for the freeze period: a durable `suspended` event arrives with nobody calling.
    let frozen = tokio::time::timeout(
        Duration::from_secs(15),
        c.events_until(|e| {
            matches!(e.kind, EventKind::Sandbox { state: SandboxState::Suspended, .. })
        }),
    )
    .await
    .expect("the idle sandbox is frozen")
    .unwrap();
    assert_eq!(sandbox_states(&frozen), [SandboxState::Suspended], "frozen once, nothing else");
    let freeze_ms = sandbox_ms(&frozen);
    assert!(
        freeze_ms.iter().all(|&ms| ms > 0.0),
        "the freeze's latency is recorded: {freeze_ms:?}"
    );

    let events = turn(&mut c, &sid, "is it alive?").await;
    assert_eq!(sandbox_states(&events), [SandboxState::Running], "thawed, not re-provisioned");
    // The thaw's latency (thaw to the agent's pong) is measured, not the 0 of a state that is
    // only noticed, and it is the event's only sandbox transition.
    let resume_ms = sandbox_ms(&events);
    assert!(resume_ms.len() == 1 && resume_ms[0] > 0.0, "{resume_ms:?}");
    assert!(bash_output(&events).contains("alive"), "{}", bash_output(&events));

    // Kill the sandbox from outside (its bubblewrap process is the server's child).
    let killed = std::process::Command::new("pkill")
        .args(["-KILL", "-P", &server.pid().to_string(), "bwrap"])
        .status()
        .unwrap();
    assert!(killed.success(), "a bwrap child of the server was running");
    let events = turn(&mut c, &sid, "still there?").await;
    assert_eq!(
        sandbox_states(&events),
        [SandboxState::Dead, SandboxState::Provisioning, SandboxState::Running],
        "the death is noticed, then a fresh sandbox is provisioned"
    );
    let out = bash_output(&events);
    assert!(out.contains("kept"), "the workspace survives: {out}");
    assert!(out.contains("gone"), "background processes do not: {out}");
    assert!(matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }));
}

/// Three sessions of one org under a `live_sandboxes` quota of 1, their commands sent at once:
/// every turn completes (before, two of them got "your org already has 1 live sandboxes" as a
/// failed `Bash`), and the sessions that waited logged a `sandbox` event `waiting` with their
/// place in the org's queue, then `provisioning`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_past_the_live_sandbox_quota_wait_for_a_sandbox_and_all_complete() {
    use outboard_tests::scripted::{say, script, tool};
    let org = outboard_tests::fixture::Org::start(&[]).await;
    let server = &org.server;
    let token = server.add_user("ada", "acme").unwrap();
    outboard_tests::fixture::admin_ok(
        server,
        &["quota", "set", "--org", "acme", "live_sandboxes", "1"],
        None,
    );
    let mut clients = Vec::new();
    for i in 0..3 {
        let mut c = WsClient::connect(&server.url, &token).await.unwrap();
        let sid = c.new_session().await.unwrap();
        let steps =
            [tool("Bash", json!({"command": format!("sleep 1; echo ran-{i}")})), say("done")];
        let params = json!({"session_id": sid, "text": script(&steps)});
        c.request("turn/send", params).await.unwrap().unwrap();
        clients.push((c, sid));
    }
    let mut waited = 0;
    for (i, (c, _)) in clients.iter_mut().enumerate() {
        let events = c.completion(Duration::from_secs(120)).await.unwrap();
        assert_eq!(bash_output(&events).trim(), format!("ran-{i}"), "{events:#?}");
        let waiting: Vec<_> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Sandbox { state: SandboxState::Waiting, queue, .. } => Some(*queue),
                _ => None,
            })
            .collect();
        if let [Some(queue)] = waiting.as_slice() {
            waited += 1;
            assert_eq!(queue.limit, 1);
            assert!((1..=2).contains(&queue.position), "{queue:?}");
            let states = sandbox_states(&events);
            let at = states.iter().position(|s| *s == SandboxState::Waiting).unwrap();
            assert_eq!(states[at + 1], SandboxState::Provisioning, "{states:?}");
        }
    }
    assert_eq!(waited, 2, "two of the three waited for the org's one live sandbox");
}
