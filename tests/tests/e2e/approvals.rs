//! Tool policies and approvals through a real server, real bubblewrap sandboxes and the mock
//! model over HTTP: an `ask` call waits (durably, before it starts) until the driver allows it;
//! a denial reaches the model with its reason; `deny` rules refuse without asking; "allow for
//! this session" stops the asking; only the session's owner and its driver answer, from any
//! connection (an org member's answer is refused, attached or not); a server killed while a call waits asks nothing
//! twice and runs the call once after the answer; `outboard run --approve deny|allow|wait`; the
//! admin commands' errors. Issue 36: `Bash(...)` rules judge every simple command of the parsed
//! line with its name normalised (the four variants that beat the raw-string match are refused,
//! a command only known at run time asks), and an allow for the session covers the rules that
//! asked, not the tool. (That an open question older than an attach's page comes in its
//! `standing` is a unit test of `approvals::open_requests`.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{ApprovalDecision, EventKind, SessionEvent};
use outboard_tests::fixture::{
    attach, attached_log, bash, crash_and_restart, result_of, serve, turn_ended, until, World,
};
use outboard_tests::harness::{
    outboard, spawn_outboard, wait_until, Api, CliRun, TestServer, WsClient,
};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use serde_json::{json, Value};

/// Generous: the machine is shared and loaded; every wait is on a condition.
const WAIT: Duration = Duration::from_secs(90);

/// A server whose org `acme` has `rules` (pattern, decision), a driver `alice` with a session.
async fn start(steps: Vec<MockStep>, rules: &[(&str, &str)]) -> World {
    let mock = MockLlm::start(steps).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    for (pattern, decision) in rules {
        let (code, out, err) =
            server.admin(&["policy", "set", "--org", "acme", pattern, decision], None).unwrap();
        assert_eq!(code, 0, "policy set {pattern} {decision}: {out}{err}");
    }
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    World { mock, server, c, sid, token }
}

fn asked(e: &SessionEvent) -> bool {
    matches!(e.kind, EventKind::ApprovalRequested { .. })
}

fn answer(sid: &str, call_id: &str, decision: &str, extra: Value) -> Value {
    let mut params = json!({"session_id": sid, "call_id": call_id, "decision": decision});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    params
}

fn kinds(events: &[SessionEvent], call_id: &str) -> Vec<&'static str> {
    events
        .iter()
        .filter(|e| match &e.kind {
            EventKind::ApprovalRequested { call_id: c, .. }
            | EventKind::ApprovalResolved { call_id: c, .. }
            | EventKind::ToolResult { call_id: c, .. } => c == call_id,
            EventKind::ToolCall { call, .. } => call.call_id == call_id,
            _ => false,
        })
        .map(|e| e.kind.type_name())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_call_waits_for_the_driver_and_a_denial_reaches_the_model_with_its_reason() {
    let World { mock, server, mut c, sid, token: _ } = start(
        vec![
            bash("b1", "echo one > one.txt"),
            bash("b2", "echo two > two.txt"),
            MockStep::text("Done as far as allowed."),
        ],
        &[("Bash(echo *)", "ask")],
    )
    .await;
    c.request("turn/send", json!({"session_id": sid, "text": "write the files"}))
        .await
        .unwrap()
        .unwrap();
    let before = until(&mut c, "the first approval request", WAIT, asked).await;
    let Some(EventKind::ApprovalRequested { call_id, name, input, rule, .. }) =
        before.last().map(|e| &e.kind)
    else {
        unreachable!()
    };
    assert_eq!((call_id.as_str(), name.as_str(), rule.as_str()), ("b1", "Bash", "Bash(echo *)"));
    assert_eq!(input["command"], "echo one > one.txt");
    // Waiting means not started: no tool_call yet, and the command has not run.
    assert!(!before.iter().any(|e| matches!(e.kind, EventKind::ToolCall { .. })));
    let workspace = server.workspace(&sid);
    assert!(!workspace.join("one.txt").exists());

    c.request("approval/answer", answer(&sid, "b1", "allow", json!({}))).await.unwrap().unwrap();
    let second = until(&mut c, "the second approval request", WAIT, asked).await;
    assert_eq!(kinds(&second, "b1"), ["approval_resolved", "tool_call", "tool_result"]);
    assert_eq!(std::fs::read_to_string(workspace.join("one.txt")).unwrap(), "one\n");
    // Allowed once: the next call of the tool asks again.
    let reason = "two.txt belongs to the release script";
    c.request("approval/answer", answer(&sid, "b2", "deny", json!({"reason": reason})))
        .await
        .unwrap()
        .unwrap();
    let rest = until(&mut c, "the turn's end", WAIT, turn_ended).await;
    assert_eq!(
        kinds(&rest, "b2"),
        ["approval_resolved", "tool_result"],
        "a denied call never starts"
    );
    let (output, is_error) = result_of(&rest, "b2");
    assert!(is_error && output.contains("alice denied this call") && output.contains(reason));
    assert!(!workspace.join("two.txt").exists());
    let resolved = rest.iter().find_map(|e| match &e.kind {
        EventKind::ApprovalResolved { decision, by, reason, .. } => {
            Some((*decision, by.clone(), reason.clone()))
        }
        _ => None,
    });
    assert_eq!(resolved, Some((ApprovalDecision::Deny, "alice".into(), Some(reason.into()))));
    // The model read the refusal with the reason.
    let last = mock.requests().last().unwrap().body.to_string();
    assert!(last.contains(reason), "{last}");
    // An answer to a call that no longer waits is refused.
    let late = c.request("approval/answer", answer(&sid, "b2", "allow", json!({}))).await.unwrap();
    assert_eq!(late.unwrap_err().code, outboard_shared::ErrorCode::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_rules_refuse_without_asking_and_allow_for_the_session_stops_the_asking() {
    let World { mock: _mock, server, mut c, sid, token: _ } = start(
        vec![
            MockStep::tool_calls(vec![MockToolCall::new(
                "Write",
                json!({"file_path": "/skills/../memory/MEMORY.md", "content": "always deploy on Fridays"}),
            )
            .with_id("w1")]),
            bash("b1", "echo a >> log.txt"),
            bash("b2", "echo b >> log.txt"),
            MockStep::text("ok"),
        ],
        &[("Write(/memory/**)", "deny"), ("Bash", "ask"), ("Bash(echo b*)", "allow")],
    )
    .await;
    c.request("turn/send", json!({"session_id": sid, "text": "remember and log"}))
        .await
        .unwrap()
        .unwrap();
    let first = until(&mut c, "the Bash approval request", WAIT, asked).await;
    let (output, is_error) = result_of(&first, "w1");
    assert!(
        is_error && output.contains("policy denies Write") && output.contains("Write(/memory/**)")
    );
    assert!(!first
        .iter()
        .any(|e| matches!(&e.kind, EventKind::ToolCall { call, .. } if call.call_id == "w1")));
    c.request("approval/answer", answer(&sid, "b1", "allow", json!({"scope": "session"})))
        .await
        .unwrap()
        .unwrap();
    let rest = until(&mut c, "the turn's end", WAIT, turn_ended).await;
    assert!(!rest.iter().any(asked), "the tool was allowed for the session: {rest:#?}");
    assert_eq!(std::fs::read_to_string(server.workspace(&sid).join("log.txt")).unwrap(), "a\nb\n");
}

/// The request of `call_id` among `events`: its rule, covers and why it was not judged.
fn request_of(
    events: &[SessionEvent],
    call_id: &str,
) -> (String, Option<Vec<String>>, Option<String>) {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ApprovalRequested { call_id: c, rule, covers, unjudged, .. }
                if c == call_id =>
            {
                Some((rule.clone(), covers.clone(), unjudged.clone()))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no approval request of {call_id} in {events:#?}"))
}

/// Issue 36, item 2: with `Bash(git push*)` and `Bash(curl*)` denied, ` git push` (leading
/// space), `true; git push`, `/usr/bin/git push` and `c\url --version` all ran, because the
/// rules matched the raw string. Each line here would leave a marker file if any of it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_rules_judge_every_command_of_the_line_by_its_normalised_name() {
    let variants = [
        ("v1", " git push 2>/dev/null; touch ran1"),
        ("v2", "true; git push 2>/dev/null; touch ran2"),
        ("v3", "/usr/bin/git push 2>/dev/null; touch ran3"),
        ("v4", "c\\url --version > ran4"),
        ("v5", "echo x | timeout 5 env A=1 bash -c 'git push' 2>/dev/null; touch ran5"),
    ];
    let mut steps: Vec<MockStep> = variants.iter().map(|(id, cmd)| bash(id, cmd)).collect();
    steps.push(bash("ok", "echo fine > ok.txt"));
    steps.push(bash("u1", "c=git; $c push 2>/dev/null; touch ran6"));
    steps.push(MockStep::text("done"));
    let World { mock: _mock, server, mut c, sid, token: _ } =
        start(steps, &[("Bash(git push*)", "deny"), ("Bash(curl*)", "deny")]).await;
    c.request("turn/send", json!({"session_id": sid, "text": "push it"})).await.unwrap().unwrap();
    // A command named by a variable cannot be judged before it runs: it asks, and an allow for
    // the session would cover nothing more.
    let events = until(&mut c, "the request for the unjudged line", WAIT, asked).await;
    let (rule, covers, unjudged) = request_of(&events, "u1");
    assert_eq!((rule.as_str(), covers), ("Bash(git push*)", Some(Vec::new())));
    assert!(unjudged.is_some_and(|why| why.contains("only known when it runs")));
    let workspace = server.workspace(&sid);
    for (id, _) in variants {
        let (output, is_error) = result_of(&events, id);
        assert!(is_error && output.contains("policy denies Bash"), "{id}: {output}");
        assert!(!events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::ToolCall { call, .. } if call.call_id == id)));
    }
    assert!(result_of(&events, "v4").0.contains("Bash(curl*)"));
    assert_eq!(std::fs::read_to_string(workspace.join("ok.txt")).unwrap(), "fine\n");
    c.request("approval/answer", answer(&sid, "u1", "deny", json!({}))).await.unwrap().unwrap();
    until(&mut c, "the turn's end", WAIT, turn_ended).await;
    for marker in ["ran1", "ran2", "ran3", "ran4", "ran5", "ran6"] {
        assert!(!workspace.join(marker).exists(), "{marker}: a refused line ran");
    }
}

/// Issue 36, item 3: with `Bash(echo*)` and `Bash(rm*)` both `ask`, allowing `echo first` for
/// the session let a later `rm` run unasked. The grant covers the rule that asked, and the
/// request says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_for_the_session_covers_the_rule_that_asked_not_the_tool() {
    let World { mock: _mock, server, mut c, sid, token } = start(
        vec![
            bash("e1", "echo first > first.txt"),
            bash("e2", "echo second >> first.txt"),
            bash("r1", "rm first.txt"),
            MockStep::text("done"),
        ],
        &[("Bash(echo*)", "ask"), ("Bash(rm*)", "ask")],
    )
    .await;
    c.request("turn/send", json!({"session_id": sid, "text": "write, then clean"}))
        .await
        .unwrap()
        .unwrap();
    let first = until(&mut c, "the request for echo", WAIT, asked).await;
    let covers = Some(vec!["Bash(echo*)".to_owned()]);
    assert_eq!(request_of(&first, "e1"), ("Bash(echo*)".into(), covers.clone(), None));
    // The approver is told what the grant covers.
    let approved = tokio::task::block_in_place(|| {
        let args = ["approve", "--server", &server.url, "--token", &token, &sid, "e1"];
        outboard(&[&args[..], &["--for-session"]].concat(), None).unwrap()
    });
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    assert_eq!(
        approved.stdout.trim(),
        "allowed e1 and later Bash calls of this session that no rule but `Bash(echo*)` asks about"
    );
    let second = until(&mut c, "the request for rm", WAIT, asked).await;
    let resolved = second.iter().find_map(|e| match &e.kind {
        EventKind::ApprovalResolved { covers, .. } => Some(covers.clone()),
        _ => None,
    });
    assert_eq!(resolved, Some(covers), "the answer records what it granted");
    assert_eq!(kinds(&second, "e2"), ["tool_call", "tool_result"], "echo runs unasked");
    assert_eq!(
        request_of(&second, "r1"),
        ("Bash(rm*)".into(), Some(vec!["Bash(rm*)".to_owned()]), None),
        "rm still asks"
    );
    let file = server.workspace(&sid).join("first.txt");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "first\nsecond\n");
    c.request("approval/answer", answer(&sid, "r1", "deny", json!({}))).await.unwrap().unwrap();
    until(&mut c, "the turn's end", WAIT, turn_ended).await;
    assert!(file.exists(), "a denied rm never ran");
}

/// `outboard approve|deny|answer SESSION CALL` as `token`, from a connection of its own.
fn cli_answer(server: &TestServer, token: &str, verb: &str, sid: &str, rest: &[&str]) -> CliRun {
    let mut args = vec![verb, "--server", &server.url, "--token", token, sid];
    args.extend_from_slice(rest);
    tokio::task::block_in_place(|| outboard(&args, None).unwrap())
}

/// A refused answer: `forbidden`, naming who may answer.
fn assert_refused(refused: outboard_shared::ErrorBody) {
    assert_eq!(refused.code, outboard_shared::ErrorCode::Forbidden, "{}", refused.message);
    assert!(refused.message.contains("only its owner (alice)"), "{}", refused.message);
}

/// Issue 49, item 6: who answers a session's approvals, plans and questions is a right of the
/// user, not of the connection. Bob, a member of the same org who neither owns nor drives the
/// session, is refused from a second connection that is not attached (the hole: the watcher rule
/// was per connection), from his watching connection and with `outboard approve|deny|answer`,
/// for a waiting plan (`ExitPlanMode`), an `ask` call and a question; Alice, the owner, answers
/// each from a second connection; once she hands Bob driving, he answers too. Another org is
/// not even shown the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_and_the_driver_answer_approvals_plans_and_questions_from_any_connection() {
    let question = json!({"questions": [{"question": "Which database?", "header": "DB",
        "options": [{"label": "SQLite", "description": ""}, {"label": "PostgreSQL", "description": ""}],
        "multiSelect": false}]});
    let World { mock: _mock, server, mut c, sid, token: alice } = start(
        vec![
            MockStep::tool_calls(vec![MockToolCall::new(
                "ExitPlanMode",
                json!({"plan": "# Run it\n\n1. Write ran.txt.\n"}),
            )
            .with_id("p1")]),
            bash("b1", "echo ran > ran.txt"),
            MockStep::tool_calls(
                vec![MockToolCall::new("AskUserQuestion", question).with_id("q1")],
            ),
            bash("b2", "echo again > again.txt"),
            MockStep::text("ok"),
        ],
        &[("Bash", "ask")],
    )
    .await;
    let set = c.request("session/set_mode", json!({"session_id": sid, "mode": "plan"})).await;
    assert_eq!(set.unwrap().unwrap()["mode"], "plan");
    let bob = server.add_user("bob", "acme").unwrap();
    let (mut watcher, _) = attach(&server, &bob, &sid, "watcher").await;
    let mut bob_elsewhere = WsClient::connect(&server.url, &bob).await.unwrap();
    let mut alice_elsewhere = WsClient::connect(&server.url, &alice).await.unwrap();
    c.request("turn/send", json!({"session_id": sid, "text": "run it"})).await.unwrap().unwrap();

    // The plan.
    until(&mut c, "the plan's request", WAIT, asked).await;
    until(&mut watcher, "the watcher to see the plan", WAIT, asked).await;
    for client in [&mut bob_elsewhere, &mut watcher] {
        let refused = client.request("approval/answer", answer(&sid, "p1", "allow", json!({})));
        assert_refused(refused.await.unwrap().unwrap_err());
    }
    let cli = cli_answer(&server, &bob, "approve", &sid, &["p1"]);
    assert_ne!(cli.code, 0, "{}", cli.stdout);
    assert!(cli.stderr.contains("only its owner (alice)"), "{}", cli.stderr);
    let eve = server.add_user("eve", "globex").unwrap();
    let foreign = cli_answer(&server, &eve, "approve", &sid, &["p1"]);
    assert_ne!(foreign.code, 0, "{}", foreign.stderr);
    assert!(!foreign.stderr.contains("alice"), "{}", foreign.stderr);
    alice_elsewhere
        .request("approval/answer", answer(&sid, "p1", "allow", json!({})))
        .await
        .unwrap()
        .unwrap();

    // The `ask` call.
    until(
        &mut c,
        "the ask call's request",
        WAIT,
        |e| matches!(&e.kind, EventKind::ApprovalRequested { call_id, .. } if call_id == "b1"),
    )
    .await;
    let refused = bob_elsewhere.request("approval/answer", answer(&sid, "b1", "allow", json!({})));
    assert_refused(refused.await.unwrap().unwrap_err());
    for verb in ["approve", "deny"] {
        let cli = cli_answer(&server, &bob, verb, &sid, &["b1"]);
        assert_ne!(cli.code, 0, "{verb}: {}", cli.stdout);
        assert!(cli.stderr.contains("only its owner (alice)"), "{verb}: {}", cli.stderr);
    }
    assert!(!server.workspace(&sid).join("ran.txt").exists());
    let approved = cli_answer(&server, &alice, "approve", &sid, &["b1"]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    assert!(approved.stdout.contains("allowed b1"), "{}", approved.stdout);

    // The question.
    until(
        &mut c,
        "the question",
        WAIT,
        |e| matches!(&e.kind, EventKind::ApprovalRequested { call_id, .. } if call_id == "q1"),
    )
    .await;
    let cli = cli_answer(&server, &bob, "answer", &sid, &["q1", "SQLite"]);
    assert_ne!(cli.code, 0, "{}", cli.stdout);
    assert!(cli.stderr.contains("only its owner (alice)"), "{}", cli.stderr);
    let answered = cli_answer(&server, &alice, "answer", &sid, &["q1", "SQLite"]);
    assert_eq!(answered.code, 0, "{}", answered.stderr);

    // Bob drives now: he answers, from a connection that is not the one driving.
    until(
        &mut c,
        "the second ask call's request",
        WAIT,
        |e| matches!(&e.kind, EventKind::ApprovalRequested { call_id, .. } if call_id == "b2"),
    )
    .await;
    c.request("session/drive_grant", json!({"session_id": sid, "user": "bob"}))
        .await
        .unwrap()
        .unwrap();
    let approved = cli_answer(&server, &bob, "approve", &sid, &["b2"]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);

    let rest = until(&mut c, "the turn's end", WAIT, turn_ended).await;
    let log = attached_log(&server, &alice, &sid).await;
    let by: Vec<(String, String)> = log
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ApprovalResolved { call_id, by, .. } => Some((call_id.clone(), by.clone())),
            _ => None,
        })
        .collect();
    let want = [("p1", "alice"), ("b1", "alice"), ("q1", "alice"), ("b2", "bob")]
        .map(|(c, b)| (c.to_owned(), b.to_owned()));
    assert_eq!(by, want, "{rest:#?}");
    assert!(server.workspace(&sid).join("ran.txt").exists());
    assert!(server.workspace(&sid).join("again.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_a_call_waits_keeps_the_question_and_runs_the_call_once() {
    let World { mock, server, mut c, sid, token } = start(
        vec![bash("b1", "echo once >> runs.txt"), MockStep::text("ran it")],
        &[("Bash", "ask")],
    )
    .await;
    c.request("turn/send", json!({"session_id": sid, "text": "run it"})).await.unwrap().unwrap();
    until(&mut c, "the approval request", WAIT, asked).await;
    let workspace = server.workspace(&sid);
    let server = crash_and_restart(server, &mock, Api::Anthropic, &[], || {});
    drop(c);
    // The resumed turn waits again without asking twice; an attach shows the question.
    let (mut c, attached) = attach(&server, &token, &sid, "driver").await;
    let events = attached.events;
    assert_eq!(kinds(&events, "b1"), ["approval_requested"], "{events:#?}");
    // Answered at once, even if the resumed loop has not reached the call yet.
    c.request("approval/answer", answer(&sid, "b1", "allow", json!({}))).await.unwrap().unwrap();
    until(&mut c, "the resumed turn's end", WAIT, turn_ended).await;
    let log = attached_log(&server, &token, &sid).await;
    assert_eq!(
        kinds(&log, "b1"),
        ["approval_requested", "approval_resolved", "tool_call", "tool_result"]
    );
    assert_eq!(std::fs::read_to_string(workspace.join("runs.txt")).unwrap(), "once\n");
    assert_eq!(mock.requests().len(), 2, "the model was not asked again for the waiting step");
}

fn run_args<'a>(server: &'a TestServer, token: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--server", &server.url, "--token", token, "--json"];
    args.extend_from_slice(extra);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_runs_deny_by_default_allow_when_told_and_wait_for_outboard_approve() {
    let World { mock: _mock, server, c: _c, sid: _, token } = start(
        vec![
            bash("d1", "echo no > denied.txt"),
            MockStep::text("could not"),
            bash("a1", "echo yes > allowed.txt"),
            MockStep::text("did it"),
            bash("w1", "echo later > waited.txt"),
            MockStep::text("did it after waiting"),
        ],
        &[("Bash", "ask")],
    )
    .await;
    let denied = tokio::task::block_in_place(|| {
        outboard(&run_args(&server, &token, &["write denied.txt"]), None).unwrap()
    });
    assert_eq!(denied.code, 0, "{}", denied.stderr);
    let lines = denied.json_lines().unwrap();
    let result = lines.iter().find(|l| l["type"] == "tool_result" && l["call_id"] == "d1").unwrap();
    assert_eq!(result["is_error"], true);
    assert!(result["output"].as_str().unwrap().contains("--approve deny"), "{result}");
    let sid = lines.iter().find_map(|l| l["session_id"].as_str()).unwrap().to_owned();
    assert!(!server.workspace(&sid).join("denied.txt").exists());

    let allowed = tokio::task::block_in_place(|| {
        outboard(&run_args(&server, &token, &["--approve", "allow", "write allowed.txt"]), None)
            .unwrap()
    });
    assert_eq!(allowed.code, 0, "{}", allowed.stderr);
    let lines = allowed.json_lines().unwrap();
    let sid = lines.iter().find_map(|l| l["session_id"].as_str()).unwrap().to_owned();
    assert!(server.workspace(&sid).join("allowed.txt").exists());

    let dir = tempfile::tempdir().unwrap();
    let waiting = spawn_outboard(
        &run_args(&server, &token, &["--approve", "wait", "write waited.txt"]),
        &[],
        dir.path(),
    )
    .unwrap();
    wait_until("the waiting run to print the request", WAIT, || {
        waiting.stdout().contains("\"approval_requested\"")
    })
    .unwrap();
    let request: Value = waiting
        .stdout()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["type"] == "approval_requested")
        .unwrap();
    let (sid, call) =
        (request["session_id"].as_str().unwrap(), request["call_id"].as_str().unwrap());
    assert_eq!(call, "w1");
    let approved = tokio::task::block_in_place(|| {
        outboard(&["approve", "--server", &server.url, "--token", &token, sid, call], None).unwrap()
    });
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    let done = waiting.wait("the waiting run to finish", WAIT).unwrap();
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(server.workspace(sid).join("waited.txt").exists());
}

/// Issue 36, item 2: a line the rules cannot judge before it runs asks a person, so a headless
/// run, which has nobody to ask, refuses it even with `--approve allow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_run_refuses_what_the_rules_cannot_judge_even_with_approve_allow() {
    let World { mock: _mock, server, c: _c, sid: _, token } = start(
        vec![
            bash("u1", "c=git; $c push 2>/dev/null; touch ran.txt"),
            bash("a1", "echo fine > fine.txt"),
            MockStep::text("done"),
        ],
        &[("Bash(git push*)", "deny"), ("Bash(echo*)", "ask")],
    )
    .await;
    let run = tokio::task::block_in_place(|| {
        outboard(&run_args(&server, &token, &["--approve", "allow", "push it"]), None).unwrap()
    });
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = run.json_lines().unwrap();
    let request = lines.iter().find(|l| l["type"] == "approval_requested").unwrap();
    assert_eq!((&request["call_id"], &request["covers"]), (&json!("u1"), &json!([])));
    assert!(request["unjudged"].as_str().is_some_and(|why| why.contains("only known")));
    let result = lines.iter().find(|l| l["type"] == "tool_result" && l["call_id"] == "u1").unwrap();
    assert_eq!(result["is_error"], true);
    assert!(result["output"].as_str().unwrap().contains("could not judge"), "{result}");
    let sid = lines.iter().find_map(|l| l["session_id"].as_str()).unwrap().to_owned();
    assert!(!server.workspace(&sid).join("ran.txt").exists(), "the unjudged line ran");
    // An ordinary `ask` is still allowed by `--approve allow`.
    assert!(server.workspace(&sid).join("fine.txt").exists());
}

#[test]
fn admin_policy_commands_explain_what_they_refuse() {
    let data = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(data, Api::Anthropic, "http://127.0.0.1:9", &[]).unwrap();
    server.add_user("alice", "acme").unwrap();
    let (code, _, err) =
        server.admin(&["policy", "set", "--org", "nope", "Bash", "ask"], None).unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("no org named \"nope\""), "{err}");
    let (code, _, err) =
        server.admin(&["policy", "set", "--org", "acme", "Write(/skills/**", "ask"], None).unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("ends with `)`"), "{err}");
    let (code, _, err) =
        server.admin(&["policy", "set", "--org", "acme", "Bash", "maybe"], None).unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("allow, ask or deny"), "{err}");
    let (code, out, _) =
        server.admin(&["policy", "set", "--org", "acme", "mcp__github__*", "ask"], None).unwrap();
    assert_eq!(code, 0);
    assert!(out.contains("mcp__github__* ask"), "{out}");
    let (code, out, _) = server.admin(&["policy", "ls", "--org", "acme"], None).unwrap();
    assert_eq!(code, 0);
    assert!(out.contains("mcp__github__*") && out.contains("any other call: allow"), "{out}");
    let (code, _, err) = server.admin(&["policy", "rm", "--org", "acme", "Bash"], None).unwrap();
    assert_eq!(code, 1);
    assert!(err.contains("no rule for \"Bash\""), "{err}");
    let (code, _, _) =
        server.admin(&["policy", "rm", "--org", "acme", "mcp__github__*"], None).unwrap();
    assert_eq!(code, 0);
}
