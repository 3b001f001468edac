//! Sessions on sandbox hosts, end to end: the real harness (`serve --sandbox remote`), two real
//! `outboard-server sandbox-host` processes each in its own network namespace (reached over a
//! veth pair), the mock LLM over HTTP/SSE and a real WebSocket client. A scripted session's
//! file tools and commands run on the host it was placed on; a harness restart finds the same
//! workspace and the same (frozen) sandbox; a host killed mid-command gives the model a clear
//! error; `outboard sessions restore` moves the session to the other host and it goes on there.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{EventKind, SessionEvent};
use outboard_tests::harness::{bin, outboard, tool_results, Api, TestServer, WsClient};
use outboard_tests::hosts::{HostProcess, NetNs};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::json;

/// The port every host listens on inside its own namespace (each has its own stack).
const HOST_PORT: u16 = 7701;

/// A turn's durable events, which must end completed within 90 s.
async fn turn(c: &mut WsClient, sid: &str, text: &str) -> Vec<SessionEvent> {
    c.completed_turn(sid, text, Duration::from_secs(90)).await.unwrap()
}

/// Registers host `name` at `ns`'s address on the harness and starts it there with the token
/// `admin hosts add` printed, offering `capacity` workspaces.
fn add_host(server: &TestServer, name: &str, ns: &NetNs, capacity: u32) -> HostProcess {
    let url = format!("ws://{}:{HOST_PORT}", ns.address());
    let (code, token, stderr) = server.admin(&["hosts", "add", name, "--url", &url], None).unwrap();
    assert_eq!(code, 0, "{stderr}");
    let token = token.trim();
    assert!(!token.is_empty() && !stderr.contains(token), "the token is printed once, on stdout");
    let data = tempfile::tempdir().unwrap().keep();
    let capacity = capacity.to_string();
    let extra = ["--capacity", &capacity, "--sandbox-freeze-after", "1"];
    HostProcess::spawn_exe(
        &bin("outboard-server").unwrap(),
        Some(ns),
        &data,
        token,
        &extra,
        HOST_PORT,
        "info",
    )
    .unwrap()
}

/// `admin hosts ls --json`, one object per host.
fn hosts_ls(server: &TestServer) -> Vec<serde_json::Value> {
    let (code, out, err) = server.admin(&["hosts", "ls", "--json"], None).unwrap();
    assert_eq!(code, 0, "{err}");
    out.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_lives_on_its_host_across_a_harness_restart_and_moves_when_the_host_dies() {
    let notes = "/workspace/notes.txt";
    let mock = MockLlm::start(vec![
        // Turn 1, on h1.
        MockStep::tool_call("Write", json!({"file_path": notes, "content": "from the harness\n"})),
        MockStep::tool_call(
            "Bash",
            json!({"command": "cat /workspace/notes.txt; cd /tmp; echo cwd=$(pwd)"}),
        ),
        MockStep::tool_call("Read", json!({"file_path": notes})),
        MockStep::tool_call(
            "Edit",
            json!({"file_path": notes, "old_string": "harness", "new_string": "host"}),
        ),
        MockStep::tool_call("Grep", json!({"pattern": "host", "output_mode": "content"})),
        MockStep::text("Written on the host."),
        // Turn 2, after a harness restart: the same sandbox (its shell still in /tmp), and an
        // Edit allowed by the ledger rebuilt from the host.
        MockStep::tool_call("Bash", json!({"command": "pwd; cat /workspace/notes.txt"})),
        MockStep::tool_call(
            "Edit",
            json!({"file_path": notes, "old_string": "host", "new_string": "host, again"}),
        ),
        MockStep::text("Still there."),
        // Turn 3: the host dies during the command.
        MockStep::tool_call("Bash", json!({"command": "sleep 60"})),
        MockStep::text("The host went away."),
        // Turn 4, after `outboard sessions restore`: on h2.
        MockStep::tool_call(
            "Bash",
            json!({"command": "ls -A /workspace; echo on-h2 > /workspace/new.txt; cat /workspace/new.txt"}),
        ),
        MockStep::text("Starting over on the new host."),
    ])
    .await
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let base = mock.anthropic_base_url();
    let server =
        TestServer::start_in(data, Api::Anthropic, &base, &["--sandbox", "remote"]).unwrap();
    let token = server.add_user("ada", "acme").unwrap();

    // Before any host: a new session is refused with what to do.
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let refused = c.request("session/create", json!({})).await.unwrap().unwrap_err();
    assert_eq!(refused.code, outboard_shared::ErrorCode::Unavailable, "{refused:?}");
    assert!(refused.message.contains("admin hosts add"), "{}", refused.message);

    // Two hosts, each in its own network namespace; h1 has the most free capacity.
    let (ns1, ns2) = (NetNs::create().unwrap(), NetNs::create().unwrap());
    let mut h1 = add_host(&server, "h1", &ns1, 8);
    let h2 = add_host(&server, "h2", &ns2, 2);
    assert_ne!(ns1.inode().unwrap(), ns2.inode().unwrap());
    assert_ne!(
        outboard_tests::hosts::net_ns_of(h1.pid().unwrap()).unwrap(),
        outboard_tests::hosts::net_ns_of(std::process::id()).unwrap(),
        "the host runs in a network namespace of its own"
    );

    let sid = c.new_session().await.unwrap();
    let events = turn(&mut c, &sid, "write a note").await;
    let got = tool_results(&events);
    assert_eq!(got.len(), 5, "{got:#?}");
    assert!(got.iter().all(|(_, _, is_error)| !is_error), "{got:#?}");
    assert!(got[1].1.contains("from the harness") && got[1].1.contains("cwd=/tmp"), "{got:#?}");
    assert!(got[2].1.contains("from the harness"), "the Read ran on the host: {got:#?}");
    assert!(got[4].1.contains("from the host"), "the Grep ran on the host: {got:#?}");
    // The files are on h1, not on the harness.
    let on_h1 = h1.data().join("workspaces").join(&sid).join("notes.txt");
    assert_eq!(std::fs::read_to_string(&on_h1).unwrap(), "from the host\n");
    assert!(!server.workspace(&sid).join("notes.txt").exists());
    // Checkpoints of a session on a host hold the conversation only, and say so.
    let listed =
        c.request("session/checkpoints", json!({"session_id": sid})).await.unwrap().unwrap();
    assert_eq!(listed["checkpoints"][0]["code"], false, "{listed}");
    let params = json!({"session_id": sid, "checkpoint": 1, "code": true, "conversation": false});
    let refused = c.request("session/rewind", params).await.unwrap().unwrap_err();
    assert!(
        refused.message.contains("not supported yet for a session on a sandbox host"),
        "{refused:?}"
    );
    let refused = c.request("session/fork", json!({"session_id": sid})).await.unwrap().unwrap_err();
    assert!(refused.message.contains("not supported yet"), "{refused:?}");
    let ls = hosts_ls(&server);
    let h1_row = ls.iter().find(|h| h["name"] == "h1").unwrap();
    assert_eq!((h1_row["sessions"].as_u64(), h1_row["state"].as_str()), (Some(1), Some("up")));
    assert_eq!(h1_row["live_sandboxes"].as_u64(), Some(1), "{ls:#?}");
    assert_eq!(h1_row["capacity"].as_u64(), Some(8));
    assert!(h1_row["pin"].as_str().is_some_and(|p| p == h1.fingerprint()), "{ls:#?}");

    // The harness restarts; the host and its sandbox (frozen meanwhile) stay.
    let url = server.url.clone();
    drop(c);
    let data = server.kill().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await; // past the host's freeze timer
    let server =
        TestServer::restart_at(&url, data, Api::Anthropic, &base, &["--sandbox", "remote"])
            .unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let attach = json!({"session_id": sid, "role": "driver"});
    c.request("session/attach", attach.clone()).await.unwrap().unwrap();
    let events = turn(&mut c, &sid, "is it still there?").await;
    let got = tool_results(&events);
    assert_eq!(got.len(), 2, "{got:#?}");
    assert_eq!(got[0].1.trim(), "/tmp\nfrom the host", "the same sandbox: {got:#?}");
    assert!(!got[1].2, "the Edit is allowed by the ledger rebuilt on the host: {got:#?}");
    assert_eq!(std::fs::read_to_string(&on_h1).unwrap(), "from the host, again\n");

    // h1 dies during a command: the model is told, naming the host and the way out.
    c.request("turn/send", json!({"session_id": sid, "text": "sleep"})).await.unwrap().unwrap();
    c.events_until(|e| matches!(&e.kind, EventKind::ToolCall { call, .. } if call.name == "Bash"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await; // the command is on its way there
    h1.kill();
    let events =
        c.events_until(|e| matches!(e.kind, EventKind::TurnCompleted { .. })).await.unwrap();
    let got = tool_results(&events);
    assert_eq!(got.len(), 1, "{got:#?}");
    let (_, lost, is_error) = &got[0];
    assert!(*is_error, "{lost}");
    assert!(lost.contains("sandbox host h1") && lost.contains("sessions restore"), "{lost}");

    // Restore: the session moves to h2, whose workspace is new, and the model is told.
    let restored =
        outboard(&["sessions", "restore", "--server", &server.url, "--token", &token, &sid], None)
            .unwrap();
    assert_eq!(restored.code, 0, "{}", restored.stderr);
    assert!(restored.stdout.contains("from sandbox host h1 to h2"), "{}", restored.stdout);
    c.request("session/attach", attach).await.unwrap().unwrap();
    let events = turn(&mut c, &sid, "go on").await;
    let got = tool_results(&events);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0].1.trim(), "on-h2", "an empty workspace, then the new file: {got:#?}");
    let on_h2 = h2.data().join("workspaces").join(&sid).join("new.txt");
    assert_eq!(std::fs::read_to_string(on_h2).unwrap(), "on-h2\n");
    let last = mock.requests().last().unwrap().body.to_string();
    assert!(last.contains("moved from sandbox host h1 to h2"), "the model is told: {last}");
    let ls = hosts_ls(&server);
    let h1_row = ls.iter().find(|h| h["name"] == "h1").unwrap();
    assert_eq!(h1_row["state"], "down", "{ls:#?}");
    assert!(h1_row["error"].as_str().is_some_and(|e| e.contains("unreachable")), "{ls:#?}");
    let h2_row = ls.iter().find(|h| h["name"] == "h2").unwrap();
    assert_eq!(h2_row["sessions"].as_u64(), Some(1));
    // A host that still holds sessions is not removed.
    let (code, _, err) = server.admin(&["hosts", "rm", "h2"], None).unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("still holds 1 session"), "{err}");
}
