//! `outboard run --server` outlives restarts of its server: a real `outboard-server` process is
//! SIGKILLed mid-turn (while a command runs) and restarted on the same port and data dir, and the
//! real `outboard` binary reconnects, re-attaches after the last `seq` it printed and finishes with
//! the turn's real status. The JSONL it prints has every durable `seq` once, in order, with a
//! `reconnected` line at each join; no command runs twice. Also: a server that does not come back
//! in time (or `--reconnect-for 0`) ends the run with exit 3, a Ctrl-C while disconnected is sent
//! as `turn/interrupt` once connected again, and a granted non-owner driver drives again after the
//! reconnect.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::path::PathBuf;
use std::time::Duration;

use outboard_shared::{EventKind, Role, SessionEvent, StopReason};
use outboard_tests::fixture::serve;
use outboard_tests::harness::{spawn_outboard, wait_until, Api, BackgroundCli, TestServer};
use outboard_tests::mock_llm::MockLlm;
use outboard_tests::scripted::{self, say, script, tool};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

/// How long a test waits for a step of the turn (a model call and a command in a sandbox on a
/// machine busy compiling): a deadline for a condition, not a timing assertion.
const STEP: Duration = Duration::from_secs(60);

struct World {
    mock: MockLlm,
    /// `None` while it is down.
    server: Option<TestServer>,
    /// Where it listens, before and after restarts.
    url: String,
    /// Its data dir while it is down.
    data: Option<tempfile::TempDir>,
    token: String,
    out: tempfile::TempDir,
}

async fn world() -> World {
    let mock = scripted::start().await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let url = server.url.clone();
    World { mock, server: Some(server), url, data: None, token, out: tempfile::tempdir().unwrap() }
}

impl World {
    fn server(&self) -> &TestServer {
        self.server.as_ref().expect("the server is up")
    }

    /// `outboard run --server … --json EXTRA… PROMPT` in the background, as `token`'s user.
    fn run(&self, token: &str, extra: &[&str], prompt: &str) -> BackgroundCli {
        let mut args = vec!["run", "--server", &self.url, "--json"];
        args.extend_from_slice(extra);
        args.push(prompt);
        let env =
            [("OUTBOARD_TOKEN", token), ("RUST_LOG", "outboard_cli=debug,outboard_client=debug")];
        spawn_outboard(&args, &env, self.out.path()).unwrap()
    }

    /// SIGKILLs the server (its data dir is kept for [`World::restart`]).
    fn kill(&mut self) {
        let server = self.server.take().expect("the server is up");
        self.data = server.kill();
    }

    /// Starts the server again on the same port and data dir.
    fn restart(&mut self) {
        let data = self.data.take().expect("the server is down");
        let base = self.mock.anthropic_base_url();
        let server = TestServer::restart_at(&self.url, data, Api::Anthropic, &base, &[]).unwrap();
        self.server = Some(server);
    }
}

/// The session id from the run's `run_started` line, once it is out.
fn session_of(cli: &BackgroundCli) -> String {
    wait_until("the run_started line", STEP, || cli.stdout().contains("run_started")).unwrap();
    let first: Value = serde_json::from_str(cli.stdout().lines().next().unwrap()).unwrap();
    first["session_id"].as_str().unwrap().to_owned()
}

fn steps_log(server: &TestServer, sid: &str) -> PathBuf {
    server.workspace(sid).join("steps.log")
}

fn wait_for_line(path: &std::path::Path, line: &str) {
    let want = format!("{line}\n");
    wait_until(&format!("{line:?} in {}", path.display()), STEP, || {
        std::fs::read_to_string(path).is_ok_and(|t| t.contains(&want))
    })
    .unwrap();
}

/// A Bash step that appends `line` to steps.log, then takes `sleep` seconds: the server is killed
/// during the sleep, while the command is in flight.
fn step(line: &str, sleep: u32) -> Value {
    let command = if sleep == 0 {
        format!("echo {line} >> steps.log")
    } else {
        format!("echo {line} >> steps.log; sleep {sleep}")
    };
    tool("Bash", json!({ "command": command }))
}

/// Checks the JSONL of a run: `run_started` first and `run_finished` last; durable events with
/// consecutive `seq`s (none missing, none twice) across the reconnects; each `reconnected` line
/// says the `seq` printed just before it. Returns the durable events and the reconnected lines.
fn check_jsonl(stdout: &str) -> (Vec<SessionEvent>, Vec<Value>) {
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.first().unwrap()["type"], "run_started", "{stdout}");
    assert_eq!(lines.last().unwrap()["type"], "run_finished", "{stdout}");
    let mut durable: Vec<SessionEvent> = Vec::new();
    let mut reconnected = Vec::new();
    for line in &lines[1..lines.len() - 1] {
        if line["type"] == "reconnected" {
            let printed = durable.last().map_or(0, |e| e.seq);
            assert_eq!(line["after_seq"], printed, "resumed after what it printed: {line}");
            reconnected.push(line.clone());
            continue;
        }
        let event: SessionEvent = serde_json::from_value(line.clone()).unwrap();
        if event.kind.is_durable() {
            durable.push(event);
        }
    }
    let seqs: Vec<u64> = durable.iter().map(|e| e.seq).collect();
    let first = seqs.first().copied().unwrap_or(1);
    let want: Vec<u64> = (first..first + seqs.len() as u64).collect();
    assert_eq!(seqs, want, "every durable seq once, in order");
    (durable, reconnected)
}

fn stop_reason(durable: &[SessionEvent]) -> Option<StopReason> {
    durable.iter().rev().find_map(|e| match &e.kind {
        EventKind::TurnCompleted { stop_reason, .. } => Some(*stop_reason),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_survives_two_kills_of_its_server_and_no_command_runs_twice() {
    let mut w = world().await;
    let prompt =
        script(&[step("one", 10), step("two", 10), step("three", 0), say("All three steps ran.")]);
    let token = w.token.clone();
    let cli = w.run(&token, &[], &prompt);
    let sid = session_of(&cli);
    let log = steps_log(w.server(), &sid);

    // Killed while "one"'s command sleeps, then while "two"'s does.
    wait_for_line(&log, "one");
    w.kill();
    w.restart();
    wait_for_line(&log, "two");
    w.kill();
    w.restart();

    let ran = cli.wait("the run to finish after the restarts", Duration::from_secs(240)).unwrap();
    assert_eq!(ran.code, 0, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    let (durable, reconnected) = check_jsonl(&ran.stdout);
    assert!(!reconnected.is_empty(), "{}", ran.stdout);
    for line in &reconnected {
        assert_eq!(line["session_id"], sid.as_str());
        assert_eq!(line["role"], "driver");
        assert!(line["attempts"].as_u64().unwrap() >= 1, "{line}");
    }
    assert_eq!(stop_reason(&durable), Some(StopReason::EndTurn), "{}", ran.stdout);
    assert!(durable.iter().any(|e| matches!(&e.kind,
        EventKind::AssistantMessage { text, .. } if text == "All three steps ran.")));
    let last: Value = serde_json::from_str(ran.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last, json!({"type": "run_finished", "session_id": sid, "exit_code": 0}));
    // The two commands cut by a kill were not run again (the model was told their outcome is
    // unknown); every line is there exactly once.
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\nthree\n");
    let unknown = durable
        .iter()
        .filter(|e| {
            matches!(&e.kind, EventKind::ToolResult { output, is_error: true, .. }
                if output.contains("outcome is unknown"))
        })
        .count();
    assert_eq!(unknown, 2, "{}", ran.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_come_back_ends_the_run_with_exit_3() {
    for (budget, says) in
        [("2s", "reconnecting failed for 2s"), ("0", "the connection ended before the turn did")]
    {
        let mut w = world().await;
        let prompt = script(&[step("one", 60), say("unreachable")]);
        let token = w.token.clone();
        let cli = w.run(&token, &["--reconnect-for", budget], &prompt);
        let sid = session_of(&cli);
        wait_for_line(&steps_log(w.server(), &sid), "one");
        w.kill();
        let ran = cli.wait("the run to give up", STEP).unwrap();
        assert_eq!(ran.code, 3, "--reconnect-for {budget}: {}", ran.stderr);
        assert!(ran.stderr.contains(says), "--reconnect-for {budget}: {}", ran.stderr);
        let last: Value = serde_json::from_str(ran.stdout.lines().last().unwrap()).unwrap();
        assert_eq!(last["type"], "run_finished");
        assert_eq!(last["exit_code"], 3);
        assert!(last["error"].as_str().unwrap().contains(says), "{last}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_while_disconnected_interrupts_the_turn_once_reconnected() {
    let mut w = world().await;
    let prompt = script(&[step("one", 60), step("two", 60), say("not interrupted")]);
    let token = w.token.clone();
    let cli = w.run(&token, &[], &prompt);
    let sid = session_of(&cli);
    let log = steps_log(w.server(), &sid);
    wait_for_line(&log, "one");

    // Down, and the run knows it: Ctrl-C now is remembered.
    w.kill();
    wait_until("the run to notice", STEP, || cli.stderr().contains("reconnecting")).unwrap();
    cli.interrupt().unwrap();
    wait_until("the interrupt to be noted", STEP, || {
        cli.stderr().contains("interrupting once reconnected")
    })
    .unwrap();
    w.restart();

    let ran = cli.wait("the interrupted run to end", Duration::from_secs(120)).unwrap();
    assert_eq!(ran.code, 130, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    let (durable, reconnected) = check_jsonl(&ran.stdout);
    assert_eq!(reconnected.len(), 1, "{}", ran.stdout);
    assert_eq!(stop_reason(&durable), Some(StopReason::Interrupted), "{}", ran.stdout);
    assert!(!durable.iter().any(|e| matches!(&e.kind,
        EventKind::AssistantMessage { text, .. } if text == "not interrupted")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_driver_drives_again_after_the_reconnect() {
    use outboard_tests::harness::WsClient;
    let mut w = world().await;
    let bob = w.server().add_user("bob", "acme").unwrap();

    // Alice owns the session and hands the wheel to Bob's first connection.
    let mut alice = WsClient::connect(&w.url, &w.token).await.unwrap();
    let sid = alice.new_session().await.unwrap();
    let mut bob_tui = WsClient::connect(&w.url, &bob).await.unwrap();
    let watch = json!({"session_id": sid, "role": "watcher"});
    bob_tui.request("session/attach", watch).await.unwrap().unwrap();
    alice
        .request("session/drive_grant", json!({"session_id": sid, "user": "bob"}))
        .await
        .unwrap()
        .unwrap();
    drop(bob_tui);

    // Bob's headless run drives the session from a new connection, and again after the restart.
    let prompt = script(&[step("one", 10), say("Bob's turn is done.")]);
    let cli = w.run(&bob, &["--session", &sid], &prompt);
    let log = steps_log(w.server(), &sid);
    wait_for_line(&log, "one");
    drop(alice);
    w.kill();
    w.restart();

    let ran = cli.wait("Bob's run to finish", Duration::from_secs(120)).unwrap();
    assert_eq!(ran.code, 0, "stdout:\n{}\nstderr:\n{}", ran.stdout, ran.stderr);
    let (durable, reconnected) = check_jsonl(&ran.stdout);
    assert_eq!(reconnected.len(), 1, "{}", ran.stdout);
    assert_eq!(reconnected[0]["role"], serde_json::to_value(Role::Driver).unwrap());
    assert!(durable
        .iter()
        .any(|e| matches!(&e.kind, EventKind::TurnStarted { by, .. } if by == "bob")));
    assert_eq!(stop_reason(&durable), Some(StopReason::EndTurn));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\n");
}
