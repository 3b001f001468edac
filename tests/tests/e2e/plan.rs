//! Plan mode (issue 38, item 1) through a real server, real bubblewrap sandboxes, the `outboard`
//! binary and the mock model over HTTP: a session in plan mode refuses a `Write` and a mutating
//! `Bash` at call time (and runs `ls`/`git status`), with the same tools and system prompt as
//! outside it; `ExitPlanMode` saves the plan as an org file and waits; `outboard approve` ends
//! plan mode and the model carries the plan out (a `Write` then works); `outboard deny --reason`
//! sends it back and the model sees the reason; `outboard run --plan` prints the plan and exits
//! 0 with `--approve deny`, carries it out with `--approve allow`; `AskUserQuestion` is answered
//! with `outboard answer`, its input's bounds are checked, and a headless run tells the model
//! that nobody can answer.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{ApprovalKind, EventKind, SessionEvent, SessionMode};
use outboard_tests::fixture::{result_of, serve, turn_ended, until, World};
use outboard_tests::harness::{outboard, Api, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use serde_json::{json, Value};

/// Generous: the machine is shared and loaded; every wait is on a condition.
const WAIT: Duration = Duration::from_secs(90);

const PLAN: &str = "# Add new.txt\n\n1. Write new.txt with the greeting.\n";

async fn start(steps: Vec<MockStep>) -> World {
    let mock = MockLlm::start(steps).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    World { mock, server, c, sid, token }
}

fn call(id: &str, name: &str, input: Value) -> MockStep {
    MockStep::tool_calls(vec![MockToolCall::new(name, input).with_id(id)])
}

fn bash(id: &str, command: &str) -> MockStep {
    call(id, "Bash", json!({"command": command}))
}

fn asked(e: &SessionEvent) -> bool {
    matches!(e.kind, EventKind::ApprovalRequested { .. })
}

async fn plan_mode(c: &mut WsClient, sid: &str) {
    let set = c
        .request("session/set_mode", json!({"session_id": sid, "mode": "plan"}))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(set["mode"], "plan");
}

/// `outboard COMMAND… --server URL --token TOKEN ARGS…`: the connection flags after the words
/// of the command (`plans ls`), which are those before the first that is not a command's.
fn cli<'a>(server: &'a TestServer, token: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let words = if args[0] == "plans" { 2 } else { 1 };
    let mut out = args[..words].to_vec();
    out.extend_from_slice(&["--server", &server.url, "--token", token]);
    out.extend_from_slice(&args[words..]);
    out
}

/// The request `call_id` asked: its kind, path and plan.
fn request(
    events: &[SessionEvent],
    call_id: &str,
) -> (ApprovalKind, Option<String>, Option<String>) {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ApprovalRequested { call_id: c, kind, path, plan, .. } if c == call_id => {
                Some((*kind, path.clone(), plan.clone()))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no request for {call_id} in {events:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_refuses_changes_then_an_approved_plan_is_carried_out() {
    let World { mock, server, mut c, sid, token } = start(vec![
        call("w1", "Write", json!({"file_path": "new.txt", "content": "hi\n"})),
        bash("b1", "touch made.txt"),
        bash("b2", "echo x > redirected.txt"),
        bash("b3", "ls -la && git status; find . -name '*.txt'"),
        call("p1", "ExitPlanMode", json!({"plan": PLAN})),
        call("w2", "Write", json!({"file_path": "new.txt", "content": "hi\n"})),
        MockStep::text("Done: new.txt is written."),
    ])
    .await;
    plan_mode(&mut c, &sid).await;
    c.request("turn/send", json!({"session_id": sid, "text": "add new.txt"}))
        .await
        .unwrap()
        .unwrap();
    let before = until(&mut c, "the plan's approval request", WAIT, asked).await;
    let workspace = server.workspace(&sid);
    for (id, says) in
        [("w1", "Write changes files"), ("b1", "`touch made.txt`"), ("b2", "`> redirected.txt`")]
    {
        let (output, is_error) = result_of(&before, id);
        assert!(is_error, "{id}: {output}");
        assert!(
            output.contains("this session is planning") && output.contains(says),
            "{id}: {output}"
        );
    }
    for file in ["new.txt", "made.txt", "redirected.txt"] {
        assert!(!workspace.join(file).exists(), "{file} was made in plan mode");
    }
    let (output, _) = result_of(&before, "b3");
    assert!(!output.contains("planning"), "read-only commands run: {output}");
    // Refused at call time: a refused call never starts.
    assert!(!before
        .iter()
        .any(|e| matches!(&e.kind, EventKind::ToolCall { call, .. } if call.call_id != "b3")));

    let (kind, path, plan) = request(&before, "p1");
    assert_eq!(kind, ApprovalKind::Plan);
    assert_eq!(plan.as_deref(), Some(PLAN));
    let path = path.unwrap();
    assert!(path.starts_with("/plans/") && path.ends_with("-add-new-txt.md"), "{path}");
    let read = c.request("files/read", json!({"path": path})).await.unwrap().unwrap();
    assert_eq!(read["content"], PLAN);
    assert_eq!(
        (read["file"]["author"].as_str(), read["file"]["session"].as_str()),
        (Some("alice"), Some(sid.as_str()))
    );
    // It waits: nothing more was asked of the model.
    assert_eq!(mock.requests().len(), 5);

    let approved = tokio::task::block_in_place(|| {
        outboard(&cli(&server, &token, &["approve", &sid, "p1"]), None).unwrap()
    });
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    let rest = until(&mut c, "the turn's end", WAIT, turn_ended).await;
    assert!(rest
        .iter()
        .any(|e| matches!(e.kind, EventKind::ModeChanged { mode: SessionMode::Default, .. })));
    let (output, is_error) = result_of(&rest, "p1");
    assert!(
        !is_error && output.contains("approved your plan") && output.contains(&path),
        "{output}"
    );
    let (output, is_error) = result_of(&rest, "w2");
    assert!(!is_error, "after the approval a Write works: {output}");
    assert_eq!(std::fs::read_to_string(workspace.join("new.txt")).unwrap(), "hi\n");

    let requests = mock.requests();
    let first = &requests[0].body;
    assert!(first["messages"].to_string().contains("Plan mode is active"), "the model is told");
    // The same tools and system prompt in both modes: the prompt cache holds.
    for r in &requests[1..] {
        assert_eq!(r.body["tools"], first["tools"]);
        assert_eq!(r.body["system"], first["system"]);
    }
    let names: Vec<&str> =
        first["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"ExitPlanMode") && names.contains(&"AskUserQuestion"), "{names:?}");
    // The request after the approval carries the approval, not another plan-mode reminder.
    let after = requests[5].body["messages"].to_string();
    assert!(after.contains("Plan mode is off") || after.contains("approved your plan"), "{after}");
    assert_eq!(after.matches("Plan mode is active").count(), 1, "told once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_plan_comes_back_with_the_reason_and_the_model_revises() {
    let revised = "# Use SQLite\n\n1. Store it in SQLite.\n";
    let World { mock, server, mut c, sid, token } = start(vec![
        call("p1", "ExitPlanMode", json!({"plan": PLAN})),
        call("p2", "ExitPlanMode", json!({"plan": revised})),
        call("w1", "Write", json!({"file_path": "still.txt", "content": "x"})),
        MockStep::text("I keep planning."),
    ])
    .await;
    plan_mode(&mut c, &sid).await;
    c.request("turn/send", json!({"session_id": sid, "text": "plan it"})).await.unwrap().unwrap();
    until(&mut c, "the first plan", WAIT, asked).await;
    let reason = "use SQLite, not files";
    let denied = tokio::task::block_in_place(|| {
        outboard(&cli(&server, &token, &["deny", &sid, "p1", "--reason", reason]), None).unwrap()
    });
    assert_eq!(denied.code, 0, "{}", denied.stderr);
    let second = until(&mut c, "the revised plan", WAIT, asked).await;
    let (output, is_error) = result_of(&second, "p1");
    assert!(
        is_error && output.contains(reason) && output.contains("still in plan mode"),
        "{output}"
    );
    let seen = mock.requests()[1].body["messages"].to_string();
    assert!(seen.contains(reason), "the model sees the reason");
    assert_eq!(request(&second, "p2").2.as_deref(), Some(revised));
    // Still planning: sending the revision back too, the Write after it is refused.
    c.request("approval/answer", json!({"session_id": sid, "call_id": "p2", "decision": "deny"}))
        .await
        .unwrap()
        .unwrap();
    let rest = until(&mut c, "the turn's end", WAIT, turn_ended).await;
    let (output, is_error) = result_of(&rest, "w1");
    assert!(is_error && output.contains("planning"), "{output}");
    assert!(!rest.iter().any(|e| matches!(e.kind, EventKind::ModeChanged { .. })));

    // Both plans are org files teammates list and read.
    let listed = tokio::task::block_in_place(|| {
        outboard(&cli(&server, &token, &["plans", "ls", "--json"]), None).unwrap()
    });
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let files: Vec<Value> = serde_json::from_str(listed.stdout.trim()).unwrap();
    let paths: Vec<&str> = files.iter().filter_map(|f| f["path"].as_str()).collect();
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(paths.iter().any(|p| p.ends_with("-use-sqlite.md")), "{paths:?}");
    let shown = tokio::task::block_in_place(|| {
        let revised_path = paths.iter().find(|p| p.ends_with("-use-sqlite.md")).unwrap();
        outboard(&cli(&server, &token, &["plans", "cat", revised_path]), None).unwrap()
    });
    assert_eq!((shown.code, shown.stdout.as_str()), (0, revised));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_plan_prints_the_plan_and_exits_0_with_approve_deny_and_carries_it_out_with_allow() {
    let World { mock: _mock, server, c: _c, sid: _, token } = start(vec![
        call("p1", "ExitPlanMode", json!({"plan": PLAN})),
        call("p2", "ExitPlanMode", json!({"plan": PLAN})),
        call("w1", "Write", json!({"file_path": "new.txt", "content": "hi\n"})),
        MockStep::text("Written."),
    ])
    .await;
    let denied = tokio::task::block_in_place(|| {
        outboard(&cli(&server, &token, &["run", "--json", "--plan", "add new.txt"]), None).unwrap()
    });
    assert_eq!(denied.code, 0, "{}", denied.stderr);
    let lines = denied.json_lines().unwrap();
    let plan = lines.iter().find(|l| l["type"] == "plan").expect("a plan line");
    assert_eq!(plan["plan"], PLAN);
    assert_eq!(plan["call_id"], "p1");
    assert!(plan["path"].as_str().unwrap().starts_with("/plans/"), "{plan}");
    assert!(lines.iter().any(|l| l["type"] == "mode_changed" && l["mode"] == "plan"));
    let last = lines.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["exit_code"].as_i64()),
        (Some("run_finished"), Some(0))
    );
    let sid = plan["session_id"].as_str().unwrap();
    assert!(!server.workspace(sid).join("new.txt").exists());

    let allowed = tokio::task::block_in_place(|| {
        outboard(
            &cli(
                &server,
                &token,
                &["run", "--json", "--plan", "--approve", "allow", "add new.txt"],
            ),
            None,
        )
        .unwrap()
    });
    assert_eq!(allowed.code, 0, "{}", allowed.stderr);
    let lines = allowed.json_lines().unwrap();
    assert!(lines.iter().any(|l| l["type"] == "plan" && l["call_id"] == "p2"));
    let w1 = lines.iter().find(|l| l["type"] == "tool_result" && l["call_id"] == "w1").unwrap();
    assert_eq!(w1["is_error"], false, "{w1}");
    let sid = lines.iter().find_map(|l| l["session_id"].as_str()).unwrap();
    assert_eq!(std::fs::read_to_string(server.workspace(sid).join("new.txt")).unwrap(), "hi\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_are_answered_with_outboard_answer_checked_and_refused_headless() {
    let question = |options: usize| {
        let options: Vec<Value> = ["SQLite", "PostgreSQL", "MySQL", "Redis", "Files"]
            .iter()
            .take(options)
            .map(|l| json!({"label": l, "description": ""}))
            .collect();
        json!({"questions": [{"question": "Which database?", "header": "DB", "options": options, "multiSelect": false}]})
    };
    let World { mock: _mock, server, mut c, sid, token } = start(vec![
        call("q0", "AskUserQuestion", question(5)),
        call("q1", "AskUserQuestion", question(2)),
        MockStep::text("SQLite it is."),
        call("q2", "AskUserQuestion", question(2)),
        MockStep::text("I assumed SQLite."),
    ])
    .await;
    c.request("turn/send", json!({"session_id": sid, "text": "ask me"})).await.unwrap().unwrap();
    let before = until(&mut c, "the question", WAIT, asked).await;
    let (output, is_error) = result_of(&before, "q0");
    assert!(is_error && output.contains("question 1 has 5 options; give 2 to 4"), "{output}");
    assert_eq!(request(&before, "q1").0, ApprovalKind::Question);
    let answered = tokio::task::block_in_place(|| {
        outboard(&cli(&server, &token, &["answer", &sid, "q1", "SQLite"]), None).unwrap()
    });
    assert_eq!(answered.code, 0, "{}", answered.stderr);
    let rest = until(&mut c, "the turn's end", WAIT, turn_ended).await;
    let (output, is_error) = result_of(&rest, "q1");
    assert!(!is_error && output.contains("\"Which database?\"=\"SQLite\""), "{output}");

    // A headless run has nobody to ask: the model is told so, and the run goes on.
    let headless = tokio::task::block_in_place(|| {
        outboard(&cli(&server, &token, &["run", "--json", "ask me"]), None).unwrap()
    });
    assert_eq!(headless.code, 0, "{}", headless.stderr);
    let lines = headless.json_lines().unwrap();
    let q2 = lines.iter().find(|l| l["type"] == "tool_result" && l["call_id"] == "q2").unwrap();
    assert_eq!(q2["is_error"], true);
    assert!(q2["output"].as_str().unwrap().contains("no one can answer"), "{q2}");
}
