//! A sandbox host that hangs (frozen with SIGSTOP mid-command) never makes a session
//! unkillable: the real harness (`serve --sandbox remote`, short liveness settings), a real
//! `outboard-server sandbox-host` in its own network namespace, the mock LLM and a WebSocket
//! client. A call fails by its deadline, a host that misses its pings is marked down, an
//! interrupt ends the turn although the host never acknowledges it, and the session takes a
//! new turn afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::{Duration, Instant};

use outboard_shared::{EventKind, SessionEvent, StopReason};
use outboard_tests::harness::{bin, tool_results, Api, TestServer, WsClient};
use outboard_tests::hosts::{HostProcess, NetNs};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::json;

/// The port the host listens on inside its namespace.
const HOST_PORT: u16 = 7702;

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let status =
        std::process::Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status();
    assert!(status.unwrap().success(), "kill -{signal} {pid}");
}

/// Events until the running turn ends, at most `wait`.
async fn turn_end(c: &mut WsClient, wait: Duration) -> Vec<SessionEvent> {
    let ended = c.events_until(|e| {
        matches!(e.kind, EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. })
    });
    tokio::time::timeout(wait, ended).await.expect("the turn never ended").unwrap()
}

/// Starts a turn whose first step is a `Bash`, waits for the call to be on its way to the host,
/// freezes the host, and returns when it froze.
async fn freeze_mid_command(c: &mut WsClient, sid: &str, host: &HostProcess) -> Instant {
    c.request("turn/send", json!({"session_id": sid, "text": "go"})).await.unwrap().unwrap();
    // The command's own first output: it runs on the host (a fixed sleep after the call's event
    // was not enough on a loaded machine, where the link to a host marked down was still being
    // made, and the interrupt then ended a call that never reached the host).
    c.events_until(
        |e| matches!(&e.kind, EventKind::ToolOutputDelta { text, .. } if text.contains("started")),
    )
    .await
    .unwrap();
    signal(host.pid().unwrap(), "STOP");
    Instant::now()
}

fn stop_reason(events: &[SessionEvent]) -> Option<StopReason> {
    events.iter().find_map(|e| match &e.kind {
        EventKind::TurnCompleted { stop_reason, .. } => Some(*stop_reason),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_host_fails_its_calls_in_bounded_time_and_an_interrupt_always_ends_the_turn() {
    let mock = MockLlm::start(vec![
        // 1: a command of 1 s: its call's deadline is 1 s + the 2 s grace.
        MockStep::tool_call("Bash", json!({"command": "echo started; sleep 30", "timeout": 1000})),
        MockStep::text("the call timed out"),
        // 2: a command of the default 120 s: only the pings end it (6 s of silence).
        MockStep::tool_call("Bash", json!({"command": "echo started; sleep 100"})),
        MockStep::text("the host is down"),
        // 3: interrupted; the host never acknowledges.
        MockStep::tool_call("Bash", json!({"command": "echo started; sleep 100"})),
        // 4: a new turn on the thawed host.
        MockStep::tool_call("Bash", json!({"command": "echo back"})),
        MockStep::text("back"),
    ])
    .await
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let liveness = [
        "--host-ping-secs",
        "1",
        "--host-ping-timeout-secs",
        "6",
        "--host-call-grace-secs",
        "2",
        "--host-cancel-wait-secs",
        "2",
    ];
    let mut extra = vec!["--sandbox", "remote"];
    extra.extend(liveness);
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &extra).unwrap();
    let token = server.add_user("ada", "acme").unwrap();
    let ns = NetNs::create().unwrap();
    let url = format!("ws://{}:{HOST_PORT}", ns.address());
    let (code, host_token, stderr) =
        server.admin(&["hosts", "add", "h1", "--url", &url], None).unwrap();
    assert_eq!(code, 0, "{stderr}");
    let host_data = tempfile::tempdir().unwrap();
    let host = HostProcess::spawn_exe(
        &bin("outboard-server").unwrap(),
        Some(&ns),
        host_data.path(),
        host_token.trim(),
        &[],
        HOST_PORT,
        "info",
    )
    .unwrap();
    let pid = host.pid().unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();

    // 1. The call's deadline: no interrupt, no missed ping yet.
    let frozen = freeze_mid_command(&mut c, &sid, &host).await;
    let events = turn_end(&mut c, Duration::from_secs(30)).await;
    let took = frozen.elapsed();
    signal(pid, "CONT");
    let got = tool_results(&events);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(got[0].2, "{got:#?}");
    assert!(
        got[0].1.contains("sandbox host h1")
            && got[0].1.contains("did not answer the call within 3 s"),
        "{got:#?}"
    );
    assert!(took < Duration::from_secs(6), "past the deadline of 3 s: {took:?}");
    assert_eq!(stop_reason(&events), Some(StopReason::EndTurn));

    // 2. The pings: a command with a long timeout, the host silent for the ping timeout.
    let frozen = freeze_mid_command(&mut c, &sid, &host).await;
    let events = turn_end(&mut c, Duration::from_secs(60)).await;
    let took = frozen.elapsed();
    signal(pid, "CONT");
    let got = tool_results(&events);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(got[0].1.contains("stopped answering (no answer to the link's pings"), "{got:#?}");
    assert!(took < Duration::from_secs(20), "marked down after 6 s of silence: {took:?}");

    // 3. The interrupt: answered by nobody, it still ends the turn.
    let _frozen = freeze_mid_command(&mut c, &sid, &host).await;
    let asked = Instant::now();
    let r = c.request("turn/interrupt", json!({"session_id": sid})).await.unwrap().unwrap();
    assert_eq!(r, json!({"interrupted": true}));
    let events = turn_end(&mut c, Duration::from_secs(30)).await;
    let took = asked.elapsed();
    let got = tool_results(&events);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(got[0].1.contains("did not answer the interrupt within 2 s"), "{got:#?}");
    assert_eq!(stop_reason(&events), Some(StopReason::Interrupted));
    assert!(took < Duration::from_secs(5), "the cancel wait is 2 s: {took:?}");

    // 4. The session takes a new turn at once (the host frozen still), which runs once the
    // host is back.
    c.request("turn/send", json!({"session_id": sid, "text": "again"})).await.unwrap().unwrap();
    signal(pid, "CONT");
    let events = turn_end(&mut c, Duration::from_secs(60)).await;
    let got = tool_results(&events);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!((got[0].1.trim(), got[0].2), ("back", false), "{got:#?}");
    assert_eq!(stop_reason(&events), Some(StopReason::EndTurn));
}
