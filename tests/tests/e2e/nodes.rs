//! Server nodes on one PostgreSQL store: `admin nodes`; a session runs on one node at a time and
//! any node serves it (requests relayed to the node that runs it: attach, watch, drive, hand
//! over); a killed node's turn is taken over and completes; a node frozen past its lease cannot
//! append once thawed; a node stopped with SIGTERM hands its turn over; three nodes killed at
//! random, with watchers on other nodes; a rolling deploy under load.
//! Every node is a real `outboard-server` process; the store is the test run's PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outboard_shared::{ErrorCode, EventKind, SessionAttachResponse, SessionEvent};
use outboard_tests::fixture::driver;
use outboard_tests::harness::{bin, spawn_outboard, Api, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use outboard_tests::nodes::Cluster;
use outboard_tests::tmux::Tmux;
use serde_json::{json, Value};

fn nodes(server: &TestServer) -> Vec<Value> {
    let (code, out, err) = server.admin(&["nodes", "--json"], None).unwrap();
    assert_eq!(code, 0, "{out}{err}");
    out.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// How many tool results the conversation of a request holds (its step).
fn results_in(body: &Value) -> usize {
    body.to_string().matches("\"tool_result\"").count()
}

/// Attaches to `sid` on `url` as a watcher after `after`, retrying while no node runs the
/// session where asked (the refusal names the node that does) until `deadline`.
async fn attach_when_served(
    url: &str,
    token: &str,
    sid: &str,
    after: u64,
    deadline: Duration,
) -> (WsClient, SessionAttachResponse) {
    let give_up = Instant::now() + deadline;
    loop {
        let mut c = WsClient::connect(url, token).await.unwrap();
        let params = json!({"session_id": sid, "role": "watcher", "after_seq": after});
        match c.request("session/attach", params).await.unwrap() {
            Ok(snap) => return (c, serde_json::from_value(snap).unwrap()),
            Err(e) => {
                assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message);
                assert!(Instant::now() < give_up, "no node took the session over: {}", e.message);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The session's durable log once its turn completed, read through `c` (attached).
async fn until_completed(
    c: &mut WsClient,
    mut log: Vec<SessionEvent>,
    wait: Duration,
) -> Vec<SessionEvent> {
    let done = |log: &[SessionEvent]| {
        log.last().is_some_and(|e| matches!(e.kind, EventKind::TurnCompleted { .. }))
    };
    let deadline = Instant::now() + wait;
    while !done(&log) {
        assert!(Instant::now() < deadline, "the turn did not complete: {log:#?}");
        let e = c.event().await.unwrap();
        if e.kind.is_durable() && e.seq > log.last().map_or(0, |l| l.seq) {
            log.push(e);
        }
    }
    log
}

/// Seqs 1..n without a gap, and exactly one result per tool call.
fn assert_well_formed(log: &[SessionEvent]) {
    for (i, e) in log.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "a gap or a duplicate at position {i}: {log:#?}");
    }
    let mut results: HashMap<String, usize> = HashMap::new();
    for e in log {
        match &e.kind {
            EventKind::AssistantMessage { tool_calls, .. } => {
                for call in tool_calls {
                    results.entry(call.call_id.clone()).or_insert(0);
                }
            }
            EventKind::ToolResult { call_id, .. } => {
                *results.entry(call_id.clone()).or_insert(0) += 1;
            }
            _ => {}
        }
    }
    for (call, n) in results {
        assert_eq!(n, 1, "tool call {call} has {n} results");
    }
}

fn texts(log: &[SessionEvent]) -> Vec<String> {
    log.iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage { text, .. } if !text.is_empty() => Some(text.clone()),
            _ => None,
        })
        .collect()
}

async fn fresh_log(url: &str, token: &str, sid: &str) -> Vec<SessionEvent> {
    let (_, snap) = attach_when_served(url, token, sid, 0, Duration::from_secs(30)).await;
    snap.events
}

/// Nodes A and B on a fresh store with `lease_secs` leases, talking to `mock`.
fn two_nodes(mock: &MockLlm, lease_secs: u64) -> (Cluster, TestServer, TestServer) {
    let cluster = Cluster::new(Api::Anthropic, &mock.anthropic_base_url(), lease_secs).unwrap();
    let (a, b) = (cluster.start().unwrap(), cluster.start().unwrap());
    (cluster, a, b)
}

#[tokio::test]
async fn admin_nodes_lists_every_node_and_shows_a_killed_one_lost() {
    let mock = MockLlm::start(vec![]).await.unwrap();
    let (cluster, a, b) = two_nodes(&mock, 1);
    let listed = nodes(&a);
    assert_eq!(listed.len(), 2, "two nodes serve one store side by side: {listed:?}");
    assert!(listed.iter().all(|n| n["state"] == "serving" && n["leases"] == 0), "{listed:?}");
    let mut urls: Vec<&str> = listed.iter().map(|n| n["url"].as_str().unwrap()).collect();
    urls.sort_unstable();
    let mut want = [a.url.as_str(), b.url.as_str()];
    want.sort_unstable();
    assert_eq!(urls, want);
    let table = a.admin(&["nodes"], None).unwrap().1;
    assert!(table.starts_with("NODE ") && table.contains("serving"), "{table}");

    // Stopped cleanly: listed as stopped.
    let (_, clean) = b.terminate(Duration::from_secs(20));
    assert!(clean);
    let mut states: Vec<String> =
        nodes(&a).iter().map(|n| n["state"].as_str().unwrap().to_owned()).collect();
    states.sort_unstable();
    assert_eq!(states, ["serving", "stopped"]);

    // Killed: once its lease time passed without a heartbeat, it shows as lost.
    let c = cluster.start().unwrap();
    let _ = c.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let table = a.admin(&["nodes"], None).unwrap().1;
    assert!(table.contains(" lost "), "the killed node shows as lost: {table}");
}

/// Durable events of `c` up to and including the turn's completion.
async fn durable_until_completed(c: &mut WsClient) -> Vec<SessionEvent> {
    let events = tokio::time::timeout(
        Duration::from_secs(30),
        c.events_until(|e| matches!(e.kind, EventKind::TurnCompleted { .. })),
    )
    .await
    .expect("the turn did not complete within 30 s")
    .unwrap();
    events.into_iter().filter(|e| e.kind.is_durable()).collect()
}

fn presence_of(c: &WsClient, events: &[SessionEvent]) -> Option<(String, String)> {
    let me = c.welcome.as_ref().unwrap().connection_id;
    events.iter().rev().find_map(|e| match &e.kind {
        EventKind::Presence { attached } => attached
            .iter()
            .find(|p| p.connection_id == me)
            .map(|p| (p.user.clone(), format!("{:?}", p.role).to_lowercase())),
        _ => None,
    })
}

#[tokio::test]
async fn any_node_serves_a_session_that_another_node_runs() {
    let mock = MockLlm::start_responder(|_| Some(MockStep::text("done"))).await.unwrap();
    let (_cluster, a, b) = two_nodes(&mock, 2);
    let alice = a.add_user("alice", "acme").unwrap();
    let bob = a.add_user("bob", "acme").unwrap();

    let mut alice_a = WsClient::connect(&a.url, &alice).await.unwrap();
    let sid = alice_a.new_session().await.unwrap();
    let first = alice_a.completed_turn(&sid, "one", Duration::from_secs(30)).await.unwrap();
    let last_on_a = first.last().unwrap().seq;

    // A watcher on B: its attach reaches A, where the session runs, and A's turns reach it live.
    let mut bob_b = WsClient::connect(&b.url, &bob).await.unwrap();
    let snap = bob_b
        .request("session/attach", json!({"session_id": sid, "role": "watcher"}))
        .await
        .unwrap()
        .unwrap();
    let snap: SessionAttachResponse = serde_json::from_value(snap).unwrap();
    assert_eq!(snap.events.last().map(|e| e.seq), Some(last_on_a));
    let second = alice_a.completed_turn(&sid, "two", Duration::from_secs(30)).await.unwrap();
    let seen = durable_until_completed(&mut bob_b).await;
    let durable: Vec<SessionEvent> = second.into_iter().filter(|e| e.kind.is_durable()).collect();
    assert_eq!(seen, durable, "the watcher on B saw A's turn as A's driver did");

    // Alice's second terminal, on B, takes the wheel: its turn and interrupt run on A, and
    // presence names it by the id B gave it.
    let mut alice_b = WsClient::connect(&b.url, &alice).await.unwrap();
    alice_b
        .request("session/attach", json!({"session_id": sid, "role": "driver"}))
        .await
        .unwrap()
        .unwrap();
    let third = alice_b.completed_turn(&sid, "three", Duration::from_secs(30)).await.unwrap();
    assert!(third.iter().any(|e| matches!(e.kind, EventKind::TurnCompleted { .. })));
    let interrupted =
        alice_b.request("turn/interrupt", json!({"session_id": sid})).await.unwrap().unwrap();
    assert_eq!(interrupted["interrupted"], false);
    assert_eq!(
        durable_until_completed(&mut bob_b).await.len(),
        third.iter().filter(|e| e.kind.is_durable()).count()
    );

    // Bob asks to drive from B; Alice grants it from B; Bob's turn runs.
    bob_b.request("session/drive_request", json!({"session_id": sid})).await.unwrap().unwrap();
    let asked = tokio::time::timeout(
        Duration::from_secs(30),
        alice_b.events_until(|e| matches!(e.kind, EventKind::DriveRequested { .. })),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(
        matches!(&asked.last().unwrap().kind, EventKind::DriveRequested { user } if user == "bob")
    );
    alice_b
        .request("session/drive_grant", json!({"session_id": sid, "user": "bob"}))
        .await
        .unwrap()
        .unwrap();
    let granted = tokio::time::timeout(
        Duration::from_secs(30),
        bob_b.events_until(|e| {
            matches!(&e.kind, EventKind::Presence { attached }
                if attached.iter().any(|p| p.user == "bob" && p.role == outboard_shared::Role::Driver))
        }),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(presence_of(&bob_b, &granted), Some(("bob".into(), "driver".into())));
    let fourth = bob_b.completed_turn(&sid, "four", Duration::from_secs(30)).await.unwrap();
    let last = fourth.last().unwrap().seq;

    // A stops (a deploy): Bob's relay ends with a lagged, he attaches again after what he has,
    // and B now runs the session.
    drop(alice_a);
    drop(alice_b);
    let (_, clean) = a.terminate(Duration::from_secs(30));
    assert!(clean, "the node did not stop cleanly");
    let cut = loop {
        match tokio::time::timeout(Duration::from_secs(30), bob_b.frame()).await.unwrap() {
            Ok(outboard_shared::ServerFrame::Error(e)) => break e,
            Ok(_) => continue,
            Err(e) => panic!("the relay's end came as no lagged: {e}"),
        }
    };
    assert_eq!((cut.error.code, cut.fatal), (ErrorCode::Lagged, false), "{}", cut.error.message);
    let attach = json!({"session_id": sid, "role": "driver", "after_seq": last});
    let snap = bob_b.request("session/attach", attach).await.unwrap().unwrap();
    let snap: SessionAttachResponse = serde_json::from_value(snap).unwrap();
    assert!(snap.events.is_empty(), "nothing new while A stopped: {:#?}", snap.events);
    let fifth = bob_b.completed_turn(&sid, "five", Duration::from_secs(30)).await.unwrap();
    assert_eq!(fifth.first().map(|e| e.seq), Some(last + 1), "{fifth:#?}");
    let log = fresh_log(&b.url, &bob, &sid).await;
    assert_well_formed(&log);
    assert_eq!(texts(&log), ["done"; 5]);
}

/// Two nodes with `lease_secs` leases and a session whose turn runs a 3 s command on node A
/// (it appends to `ran.log` first, then sleeps); the model answers "done after the takeover"
/// once it has the command's result.
struct Running {
    cluster: Cluster,
    a: TestServer,
    b: TestServer,
    token: String,
    sid: String,
    /// The command's record: it exists once the command started.
    ran: std::path::PathBuf,
    _mock: MockLlm,
}

/// [`Running`], returned once the command has started on A.
async fn mid_command(lease_secs: u64) -> Running {
    let mock = MockLlm::start_responder(|body| {
        Some(match results_in(body) {
            0 => MockStep::tool_call(
                "Bash",
                json!({"command": "echo ran >> ran.log && sleep 3 && echo slept"}),
            ),
            _ => MockStep::text("done after the takeover"),
        })
    })
    .await
    .unwrap();
    let (cluster, a, b) = two_nodes(&mock, lease_secs);
    let (token, mut on_a, sid) = driver(&a).await;
    on_a.request("turn/send", json!({"session_id": sid, "text": "go"})).await.unwrap().unwrap();
    let ran = cluster.workspace(&sid).join("ran.log");
    // Async: the mock model runs on this test's one thread and must answer meanwhile.
    outboard_tests::harness::wait_until_async(
        "the command to start",
        Duration::from_secs(30),
        || ran.exists(),
    )
    .await
    .unwrap();
    Running { cluster, a, b, token, sid, ran, _mock: mock }
}

#[tokio::test]
async fn a_killed_nodes_turn_is_taken_over_and_no_command_runs_twice() {
    let Running { cluster: _cluster, a, b, token, sid, ran, _mock } = mid_command(2).await;

    // A dies in the middle of the command; B takes the turn over once A's lease expired.
    let killed = Instant::now();
    let _ = a.kill();
    let (mut on_b, snap) =
        attach_when_served(&b.url, &token, &sid, 0, Duration::from_secs(30)).await;
    eprintln!("taken over {} ms after the kill", killed.elapsed().as_millis());
    let log = until_completed(&mut on_b, snap.events, Duration::from_secs(30)).await;
    assert_well_formed(&log);
    assert_eq!(texts(&log).last().map(String::as_str), Some("done after the takeover"));
    let bash = log
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolResult { name, output, .. } if name == "Bash" => Some(output.clone()),
            _ => None,
        })
        .unwrap();
    assert!(bash.contains("outcome is unknown"), "the cut command is reported, not re-run: {bash}");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n", "the command ran once");
    assert_eq!(fresh_log(&b.url, &token, &sid).await, log);
}

/// The TUI attached through node B while node A, which ran the session, is dead but still
/// holds its lease: it says it waits for another node to take the session over (it used to say
/// "cannot attach" and stay detached), then shows the turn B took over, to its end.
// Multi-threaded: the test thread blocks while polling tmux, and the mock model must go on
// serving from another worker meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tui_attaching_during_a_failover_waits_and_lands_on_the_node_that_took_over() {
    // CI installs tmux (.ci/run); a missing tmux is a failure, never a skip.
    let tmux = Tmux::new("failover").expect("tmux is required: apt-get install tmux");
    let Running { cluster: _cluster, a, b, token, sid, _mock, .. } = mid_command(4).await;

    let _ = a.kill();
    let exe = bin("outboard").unwrap();
    let exe = exe.to_str().unwrap();
    let env = [("TERM", "xterm-256color"), ("NO_COLOR", "1")];
    tmux.spawn("w", &env, &[exe, "attach", &sid, "--server", &b.url, "--token", &token]);
    tmux.wait_for("w", "waiting for another node to take the session over", &b);
    tmux.wait_for("w", "done after the takeover", &b);
    assert!(!tmux.screen("w").contains("cannot attach"), "{}", tmux.screen("w"));
}

#[tokio::test]
async fn a_node_frozen_past_its_lease_cannot_append_once_thawed() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let mock = MockLlm::start_responder(move |_| {
        Some(match counter.fetch_add(1, Ordering::SeqCst) {
            // The frozen node's call: its answer waits in the node's socket while it sleeps.
            0 => MockStep::text("late words of the frozen node").latency(1500),
            _ => MockStep::text("done by the node that took over"),
        })
    })
    .await
    .unwrap();
    let (_cluster, a, b) = two_nodes(&mock, 2);
    let (token, mut on_a, sid) = driver(&a).await;
    on_a.request("turn/send", json!({"session_id": sid, "text": "go"})).await.unwrap().unwrap();
    outboard_tests::harness::wait_until_async("the model call", Duration::from_secs(60), || {
        calls.load(Ordering::SeqCst) >= 1
    })
    .await
    .unwrap();
    let pid = a.pid().to_string();
    assert!(std::process::Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());

    // B takes the session over past A's lease and completes the turn.
    let (mut on_b, snap) =
        attach_when_served(&b.url, &token, &sid, 0, Duration::from_secs(30)).await;
    let log = until_completed(&mut on_b, snap.events, Duration::from_secs(30)).await;
    assert_eq!(texts(&log), ["done by the node that took over"]);

    // A wakes up with its model's answer at hand: it must not write it, nor anything else.
    assert!(std::process::Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    outboard_tests::harness::wait_until("the thawed node to stop", Duration::from_secs(30), || {
        a.log().contains("lease was taken over by another node")
    })
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = fresh_log(&b.url, &token, &sid).await;
    assert_eq!(after, log, "the thawed node appended to a session it lost");
    assert_well_formed(&after);
    // And it still serves: its node is alive, and serves the session from B, where it runs.
    let mut again = WsClient::connect(&a.url, &token).await.unwrap();
    let snap = again
        .request("session/attach", json!({"session_id": sid, "role": "watcher"}))
        .await
        .unwrap()
        .unwrap();
    let snap: SessionAttachResponse = serde_json::from_value(snap).unwrap();
    assert_eq!(snap.events, log);
}

#[tokio::test]
async fn a_node_stopped_with_sigterm_hands_its_turn_over_mid_way() {
    let mock = MockLlm::start_responder(|body| {
        let step = results_in(body);
        Some(if step < 4 {
            MockStep::tool_call(
                "Bash",
                json!({"command": format!("echo step {step} >> steps.log")}),
            )
            .latency(300)
        } else {
            MockStep::text("all steps done")
        })
    })
    .await
    .unwrap();
    let (cluster, a, b) = two_nodes(&mock, 2);
    let (token, mut on_a, sid) = driver(&a).await;
    on_a.request("turn/send", json!({"session_id": sid, "text": "go"})).await.unwrap().unwrap();
    let mut seen: Vec<SessionEvent> = Vec::new();
    while !seen.iter().any(|e| matches!(e.kind, EventKind::ToolResult { .. })) {
        let e = on_a.event().await.unwrap();
        if e.kind.is_durable() {
            seen.push(e);
        }
    }

    // The deploy: A drains. Its client reconnects to B and resumes from its last seq.
    let (_, clean) = a.terminate(Duration::from_secs(30));
    assert!(clean, "the node did not stop cleanly");
    while let Ok(e) = on_a.event().await {
        if e.kind.is_durable() && e.seq > seen.last().map_or(0, |l| l.seq) {
            seen.push(e);
        }
    }
    let after = seen.last().map_or(0, |l| l.seq);
    let (mut on_b, snap) =
        attach_when_served(&b.url, &token, &sid, after, Duration::from_secs(30)).await;
    seen.extend(snap.events);
    let log = until_completed(&mut on_b, seen, Duration::from_secs(60)).await;
    assert_well_formed(&log);
    assert!(!log.iter().any(|e| matches!(e.kind, EventKind::TurnFailed { .. })), "{log:#?}");
    assert_eq!(texts(&log).last().map(String::as_str), Some("all steps done"));
    let steps = std::fs::read_to_string(cluster.workspace(&sid).join("steps.log")).unwrap();
    assert_eq!(steps, "step 0\nstep 1\nstep 2\nstep 3\n", "each step ran once, in order");
    assert_eq!(fresh_log(&b.url, &token, &sid).await, log);
}

/// The node a refusal names (`… (NAME at ws://ADDR) …`), if any.
fn owner_in(message: &str) -> Option<String> {
    let at = message.find("ws://")?;
    let rest = &message[at..];
    let end = rest.find([')', ' ', ',', ';']).unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

/// Attaches to `sid` as a watcher on whichever node runs it: tries `first`, then follows the
/// node a refusal names, retrying (nodes die and come back meanwhile) until `deadline`.
async fn attach_anywhere(
    urls: &[String],
    first: usize,
    token: &str,
    sid: &str,
    deadline: Duration,
) -> (WsClient, SessionAttachResponse) {
    let give_up = Instant::now() + deadline;
    let mut url = urls[first % urls.len()].clone();
    let mut turn = first;
    loop {
        assert!(Instant::now() < give_up, "no node served session {sid}");
        let Ok(mut c) = WsClient::connect(&url, token).await else {
            turn += 1;
            url = urls[turn % urls.len()].clone();
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let params = json!({"session_id": sid, "role": "watcher", "after_seq": 0});
        match c.request("session/attach", params).await {
            Ok(Ok(snap)) => return (c, serde_json::from_value(snap).unwrap()),
            Ok(Err(e)) => {
                assert_eq!(e.code, ErrorCode::Unavailable, "{}", e.message);
                turn += 1;
                url = owner_in(&e.message).unwrap_or_else(|| urls[turn % urls.len()].clone());
            }
            Err(_) => {
                turn += 1;
                url = urls[turn % urls.len()].clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A model whose turns run `steps` `Bash` steps (`echo step N >> steps.log && sleep SECS`, the
/// answer 200 ms late), then say "all steps done".
async fn stepping_model(steps: usize, step_secs: f64) -> MockLlm {
    MockLlm::start_responder(move |body| {
        let step = results_in(body);
        Some(if step < steps {
            MockStep::tool_call(
                "Bash",
                json!({"command": format!("echo step {step} >> steps.log && sleep {step_secs}")}),
            )
            .latency(200)
        } else {
            MockStep::text("all steps done")
        })
    })
    .await
    .unwrap()
}

/// The `steps.log` of `sid`, after checking that no step of the `steps` wrote its line twice.
fn steps_ran_at_most_once(cluster: &Cluster, sid: &str, steps: usize) -> String {
    let log = std::fs::read_to_string(cluster.workspace(sid).join("steps.log")).unwrap();
    for step in 0..steps {
        let line = format!("step {step}");
        let n = log.lines().filter(|l| *l == line).count();
        assert!(n <= 1, "{sid}: {line} ran {n} times: {log:?}");
    }
    log
}

/// Follows `sid` as a watcher through whatever happens to the nodes, starting on the node
/// `urls[first]` (the nodes' addresses as they are now, updated as they restart): after any
/// error (a `lagged`, a node gone) it attaches again after the last durable event it holds, on
/// the next node. Returns the durable events it was sent, once each, up to the turn's end.
async fn watch_through(
    urls: Arc<std::sync::Mutex<Vec<String>>>,
    first: usize,
    token: String,
    sid: String,
    deadline: Duration,
) -> Vec<SessionEvent> {
    let give_up = Instant::now() + deadline;
    let mut log: Vec<SessionEvent> = Vec::new();
    let mut turn = first;
    let url_of = |turn: usize| {
        let urls = urls.lock().unwrap();
        urls[turn % urls.len()].clone()
    };
    loop {
        assert!(Instant::now() < give_up, "the watcher of {sid} never saw its turn end: {log:#?}");
        let after = log.last().map_or(0, |e| e.seq);
        let done = |log: &[SessionEvent]| {
            log.last().is_some_and(|e| matches!(e.kind, EventKind::TurnCompleted { .. }))
        };
        let keep = |log: &mut Vec<SessionEvent>, e: SessionEvent| {
            if e.kind.is_durable() && e.seq > log.last().map_or(0, |l| l.seq) {
                log.push(e);
            }
        };
        if let Ok(mut c) = WsClient::connect(&url_of(turn), &token).await {
            let params = json!({"session_id": sid, "role": "watcher", "after_seq": after});
            if let Ok(Ok(snap)) = c.request("session/attach", params).await {
                let snap: SessionAttachResponse = serde_json::from_value(snap).unwrap();
                for e in snap.events {
                    keep(&mut log, e);
                }
                while !done(&log) {
                    match c.event().await {
                        Ok(e) => keep(&mut log, e),
                        Err(_) => break,
                    }
                }
                if done(&log) {
                    return log;
                }
            }
        }
        turn += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Long commands on nodes killed at random (the crash harness's every kind of session on nodes
/// killed at random is the next test, and `scripts/crash.sh nodes` its long run): three
/// nodes on one store, sessions of several `Bash` steps started on every node, nodes killed
/// with SIGKILL and restarted while the turns run. Every turn completes on whichever node took
/// it over, every log is gap-free with one result per call, and no command ran twice. Each
/// session has a watcher that starts on another node than the one its turn started on and
/// follows it through the kills: it ends with exactly the log a fresh attach reads.
/// `OUTBOARD_NODES_SESSIONS`, `OUTBOARD_NODES_KILLS`, `OUTBOARD_NODES_STEPS` (at most 45) and
/// `OUTBOARD_NODES_STEP_MS` (each step's command) size the run.
#[tokio::test]
async fn three_nodes_killed_at_random_lose_no_turn_and_run_no_command_twice() {
    let knob = |name: &str, default: usize| {
        std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let sessions = knob("OUTBOARD_NODES_SESSIONS", 6);
    let kills = knob("OUTBOARD_NODES_KILLS", 3);
    // At most 45 steps: a turn stops at 50.
    let steps_per_turn = knob("OUTBOARD_NODES_STEPS", 3).min(45);
    let step_secs = knob("OUTBOARD_NODES_STEP_MS", 400) as f64 / 1000.0;
    let mock = stepping_model(steps_per_turn, step_secs).await;
    let cluster = Cluster::new(Api::Anthropic, &mock.anthropic_base_url(), 1).unwrap();
    let mut nodes: Vec<TestServer> = (0..3).map(|_| cluster.start().unwrap()).collect();
    let token = nodes[0].add_user("alice", "acme").unwrap();
    // Kills pile sessions onto the surviving nodes: more than the default 8 sandboxes of one org
    // live on one node in the long run, and each must still run its commands.
    let cap = (sessions + 8).to_string();
    let (code, out, err) =
        nodes[0].admin(&["quota", "set", "--org", "acme", "live_sandboxes", &cap], None).unwrap();
    assert_eq!(code, 0, "{out}{err}");

    let mut sids = Vec::new();
    for i in 0..sessions {
        let mut c = WsClient::connect(&nodes[i % 3].url, &token).await.unwrap();
        let sid = c.new_session().await.unwrap();
        c.request("turn/send", json!({"session_id": sid, "text": "go"})).await.unwrap().unwrap();
        sids.push(sid);
    }
    let urls = Arc::new(std::sync::Mutex::new(nodes.iter().map(|n| n.url.clone()).collect()));
    let watchers: Vec<_> = sids
        .iter()
        .enumerate()
        .map(|(i, sid)| {
            let watch = watch_through(
                urls.clone(),
                i + 1,
                token.clone(),
                sid.clone(),
                Duration::from_secs(240),
            );
            tokio::spawn(watch)
        })
        .collect();

    // The chaos: a node dies every 1.5 s and comes back 0.5 s later, at a new address.
    let mut seed = 0x9e37_79b9_u64;
    let started = Instant::now();
    for _ in 0..kills {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let victim = (seed >> 33) as usize % nodes.len();
        let data = nodes.remove(victim).kill().unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        nodes.insert(victim, cluster.start_in(data).unwrap());
        urls.lock().unwrap()[victim] = nodes[victim].url.clone();
    }

    eprintln!("{kills} kills in {} s", started.elapsed().as_secs());
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let mut watched = Vec::new();
    for (i, sid) in sids.iter().enumerate() {
        let (mut c, snap) = attach_anywhere(&urls, i, &token, sid, Duration::from_secs(60)).await;
        let log = until_completed(&mut c, snap.events, Duration::from_secs(90)).await;
        assert_well_formed(&log);
        assert_eq!(texts(&log).last().map(String::as_str), Some("all steps done"), "{sid}");
        // A step's line is written at most once; one whose result is not "cut" exactly once.
        let steps = steps_ran_at_most_once(&cluster, sid, steps_per_turn);
        let completed = log
            .iter()
            .filter(|e| {
                matches!(&e.kind, EventKind::ToolResult { output, .. }
                    if !output.contains("outcome is unknown"))
            })
            .count();
        let outputs: Vec<&str> = log
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::ToolResult { output, .. } => Some(output.as_str()),
                _ => None,
            })
            .collect();
        assert!(
            steps.lines().count() >= completed,
            "{sid}: {steps:?} for {completed} results: {outputs:#?}"
        );
        watched.push(log);
    }
    for (i, (watcher, log)) in watchers.into_iter().zip(watched).enumerate() {
        let seen = watcher.await.unwrap();
        assert_eq!(seen, log, "the watcher of {} saw what a fresh attach reads", sids[i]);
    }
}

/// The crash harness (`outboard_tests::crash`) on three nodes of one store: a session of each
/// kind (its own commands and edit, a subagent's, a background command, a command waiting for
/// approval, an MCP call, a turn that compacts, a request through the proxy), a random node
/// SIGKILLed and restarted four times. Every session completes on whichever node took it over,
/// gap-free, no command or MCP call run twice, every approval answered, and every watcher that
/// followed its session from node to node holds what a fresh attach reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_session_survives_nodes_killed_at_random() {
    use outboard_tests::crash::{run, seed, CrashConfig};
    let seed = seed();
    let config = CrashConfig {
        sessions: 7,
        kills: 4,
        api: Api::Anthropic,
        gap_ms: (300, 1200),
        seed,
        live_sandboxes: None,
        nodes: 3,
    };
    match run(config).await {
        Ok(report) => eprintln!("crash harness on three nodes: {report:?}"),
        Err(e) => {
            panic!("crash harness on three nodes failed: {e:#}\nreplay with CRASH_SEED={seed}")
        }
    }
}

/// `admin token revoke`, run against the store while two nodes serve, closes the token's
/// connections on both nodes; another token's connections stay.
#[tokio::test]
async fn a_revoked_token_is_cut_on_every_node() {
    let mock = MockLlm::start(vec![]).await.unwrap();
    let (_cluster, a, b) = two_nodes(&mock, 2);
    let token = a.add_user("alice", "acme").unwrap();
    let other = a.add_user("bob", "acme").unwrap();
    let mut on_a = WsClient::connect(&a.url, &token).await.unwrap();
    let mut on_b = WsClient::connect(&b.url, &token).await.unwrap();
    let mut bob = WsClient::connect(&b.url, &other).await.unwrap();

    let (code, listed, err) = a.admin(&["token", "ls"], None).unwrap();
    assert_eq!(code, 0, "{err}");
    let id = listed.lines().find(|l| l.contains("alice")).unwrap().split_whitespace().next();
    let (code, _, err) = b.admin(&["token", "revoke", id.unwrap()], None).unwrap();
    assert_eq!(code, 0, "{err}");

    for c in [&mut on_a, &mut on_b] {
        let failure = outboard_tests::fixture::until_cut(c, Duration::from_secs(10)).await;
        assert!(failure.contains("revoked"), "{failure}");
    }
    assert!(bob.request("session/list", json!({})).await.unwrap().is_ok());
}

/// An org file written through one node reaches the live sessions of the org on another node as
/// `memory_changed` (the store's notification of the commit), once each.
#[tokio::test]
async fn an_org_file_written_on_one_node_is_announced_to_sessions_on_another() {
    let mock = MockLlm::start_responder(|_| Some(MockStep::text("ok"))).await.unwrap();
    let (_cluster, a, b) = two_nodes(&mock, 2);
    // A session live on A, watched there.
    let (token, mut on_a, sid) = driver(&a).await;
    on_a.completed_turn(&sid, "hello", Duration::from_secs(30)).await.unwrap();

    // Written on B, twice.
    let mut on_b = WsClient::connect(&b.url, &token).await.unwrap();
    for content in ["one\n", "two\n"] {
        let params = json!({"path": "/memory/notes.md", "content": content});
        on_b.request("files/write", params).await.unwrap().unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let e = on_a.event().await.unwrap();
        if let EventKind::MemoryChanged { path, version, author, .. } = e.kind {
            seen.push((path, version, author));
        }
    }
    assert_eq!(
        seen,
        [
            ("/memory/notes.md".to_owned(), 1, "alice".to_owned()),
            ("/memory/notes.md".into(), 2, "alice".into())
        ]
    );

    // Written on A: announced on A once, not again when its own notification comes back.
    let params = json!({"path": "/memory/notes.md", "content": "three\n"});
    on_a.request("files/write", params).await.unwrap().unwrap();
    let params = json!({"path": "/memory/other.md", "content": "x\n"});
    on_b.request("files/write", params).await.unwrap().unwrap();
    let mut versions = Vec::new();
    while versions.last().map(|(p, _): &(String, u64)| p.as_str()) != Some("/memory/other.md") {
        let e = on_a.event().await.unwrap();
        if let EventKind::MemoryChanged { path, version, .. } = e.kind {
            versions.push((path, version));
        }
    }
    assert_eq!(versions, [("/memory/notes.md".to_owned(), 3), ("/memory/other.md".into(), 1)]);
}

/// A rolling deploy: each of three nodes in turn is stopped with SIGTERM and started again at
/// its address while `outboard run` clients drive multi-step turns through every node. No
/// client sees anything but reconnects (it exits 0 and warns of nothing), no turn fails, every
/// log is gap-free with one result per call, and no command ran twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_deploy_under_load_fails_no_turn_and_shows_clients_only_reconnects() {
    const STEPS: usize = 8;
    let mock = stepping_model(STEPS, 0.3).await;
    let cluster = Cluster::new(Api::Anthropic, &mock.anthropic_base_url(), 2).unwrap();
    let mut nodes: Vec<TestServer> = (0..3).map(|_| cluster.start().unwrap()).collect();
    let token = nodes[0].add_user("alice", "acme").unwrap();
    let dirs: Vec<tempfile::TempDir> = (0..6).map(|_| tempfile::tempdir().unwrap()).collect();
    let clients: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            let url = nodes[i % 3].url.clone();
            let args = ["run", "--server", &url, "--json", "--reconnect-for", "90s", "go"];
            spawn_outboard(&args, &[("OUTBOARD_TOKEN", &token)], dir.path()).unwrap()
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // The deploy: one node after the other drains and comes back at its address.
    for i in 0..nodes.len() {
        let url = nodes[i].url.clone();
        let (data, clean) = nodes.remove(i).terminate(Duration::from_secs(30));
        assert!(clean, "node {i} did not stop cleanly");
        nodes.insert(i, cluster.restart_at(&url, data.unwrap()).unwrap());
        tokio::time::sleep(Duration::from_millis(700)).await;
    }

    let mut reconnects = 0;
    for (i, client) in clients.into_iter().enumerate() {
        let run = tokio::task::block_in_place(|| {
            client.wait("a client through the deploy", Duration::from_secs(180)).unwrap()
        });
        assert_eq!(run.code, 0, "client {i}: {}\n{}", run.stdout, run.stderr);
        assert!(
            !run.stderr.contains("warning") && !run.stderr.contains("error"),
            "client {i} saw more than reconnects: {}",
            run.stderr
        );
        let lines = run.json_lines().unwrap();
        reconnects += lines.iter().filter(|l| l["type"] == "reconnected").count();
        let sid = lines.iter().find_map(|l| l["session_id"].as_str()).unwrap().to_owned();
        let log = fresh_log(&nodes[i % 3].url, &token, &sid).await;
        assert_well_formed(&log);
        assert!(!log.iter().any(|e| matches!(e.kind, EventKind::TurnFailed { .. })), "{log:#?}");
        assert_eq!(texts(&log).last().map(String::as_str), Some("all steps done"), "{sid}");
        steps_ran_at_most_once(&cluster, &sid, STEPS);
    }
    assert!(reconnects >= 2, "the deploy cut the clients of at least two nodes: {reconnects}");
}

/// A client connection reaches at most `MAX_RELAYS` sessions on other nodes at once: one more
/// is refused with the owner's URL (the client may connect there), and a detach makes room.
#[tokio::test]
async fn one_connection_relays_at_most_sixteen_sessions_and_a_detach_makes_room() {
    const MAX_RELAYS: usize = 16; // gateway/relay.rs
    let mock = MockLlm::start(vec![]).await.unwrap();
    let (_cluster, a, b) = two_nodes(&mock, 10);
    let token = a.add_user("alice", "acme").unwrap();
    // Attached on A, the sessions run there.
    let mut on_a = WsClient::connect(&a.url, &token).await.unwrap();
    let mut sids = Vec::new();
    for _ in 0..=MAX_RELAYS {
        sids.push(on_a.new_session().await.unwrap());
    }
    let mut on_b = WsClient::connect(&b.url, &token).await.unwrap();
    let attach = |sid: &str| json!({"session_id": sid, "role": "watcher"});
    for sid in &sids[..MAX_RELAYS] {
        on_b.request("session/attach", attach(sid)).await.unwrap().unwrap();
    }
    let refused = on_b.request("session/attach", attach(&sids[MAX_RELAYS])).await.unwrap();
    let refused = refused.unwrap_err();
    assert_eq!(refused.code, ErrorCode::Unavailable, "{}", refused.message);
    assert_eq!(refused.node_url.as_deref(), Some(a.url.as_str()));
    on_b.request("session/detach", json!({"session_id": sids[0]})).await.unwrap().unwrap();
    on_b.request("session/attach", attach(&sids[MAX_RELAYS])).await.unwrap().unwrap();
}

/// Issue 36, item 11: relays from one node share its address, so one user's relays filled the
/// owner's per-address cap and locked another org's user out with 429. Authenticated relays
/// leave the per-address count and are capped per user; a connection that only claims to be a
/// relay is counted as a client.
#[tokio::test]
async fn relays_from_a_node_are_capped_per_user_not_per_address() {
    const CAP: usize = 4;
    let mock = MockLlm::start(vec![]).await.unwrap();
    let cluster = Cluster::new(Api::Anthropic, &mock.anthropic_base_url(), 10)
        .unwrap()
        .with_flags(&["--max-connections-per-ip", &CAP.to_string()]);
    let (a, b) = (cluster.start().unwrap(), cluster.start().unwrap());
    let alice = a.add_user("alice", "acme").unwrap();
    let bob = a.add_user("bob", "other").unwrap();
    // Alice's sessions run on A (one connection of 127.0.0.1 there).
    let mut on_a = WsClient::connect(&a.url, &alice).await.unwrap();
    let mut sids = Vec::new();
    for _ in 0..=CAP {
        sids.push(on_a.new_session().await.unwrap());
    }
    // Through B she watches CAP of them: CAP relays from B to A, all from 127.0.0.1.
    let mut on_b = WsClient::connect(&b.url, &alice).await.unwrap();
    let attach = |sid: &str| json!({"session_id": sid, "role": "watcher"});
    for sid in &sids[..CAP] {
        on_b.request("session/attach", attach(sid)).await.unwrap().unwrap();
    }
    // Bob, of another org, still gets in on A from the same address.
    let mut bob_on_a = WsClient::connect(&a.url, &bob).await.unwrap();
    bob_on_a.request("ping", json!({})).await.unwrap().unwrap();
    // Alice's next relay is over her own cap on A.
    let refused = on_b.request("session/attach", attach(&sids[CAP])).await.unwrap().unwrap_err();
    assert_eq!(refused.code, ErrorCode::Unavailable, "{}", refused.message);
    assert!(
        refused.message.contains(&format!("alice already holds {CAP} connections relayed")),
        "{}",
        refused.message
    );
    // A claimed relay with a made-up key counts on the address like any client: two fit beside
    // alice's and bob's connections, the third is refused.
    let fake = || {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let mut request = a.url.as_str().into_client_request().unwrap();
        let claim = format!("{} {}", "n_madeup", "0".repeat(64));
        request.headers_mut().insert("x-outboard-relay", claim.parse().unwrap());
        tokio_tungstenite::connect_async(request)
    };
    let _f1 = fake().await.unwrap();
    let _f2 = fake().await.unwrap();
    let err = fake().await.err().unwrap().to_string();
    assert!(err.contains("429"), "{err}");
}
