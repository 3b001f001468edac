//! Subagents (`Task`) through a real server, real bubblewrap sandboxes and the mock model over
//! HTTP, each conversation answered from its own script (`outboard_tests::conversations`): a
//! child that writes, runs a command and reports; two children of one message running at once;
//! a server killed mid-child that resumes it without running its command twice; an interrupt
//! that stops a child; a watcher that sees every child event marked with its parent; read-only
//! calls of one message started together and answered in call order; an org agent whose
//! `tools` list is enforced; at most `MAX_PARALLEL_CALLS` calls of one message at once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{EventKind, SessionEvent, StopReason};
use outboard_tests::conversations::Scripts;
use outboard_tests::fixture::{
    self, attach, attached_log, bash, crash_and_restart, result_event, turn_ended, turn_within,
    until, World,
};
use outboard_tests::harness::{host_process_with, wait_until, Api};
use outboard_tests::mock_llm::{MockStep, MockToolCall};
use serde_json::{json, Value};

/// Generous: the machine is shared and loaded; every wait is on a condition.
const WAIT: Duration = Duration::from_secs(90);

fn task(id: &str, description: &str, prompt: &str) -> MockToolCall {
    MockToolCall::new(
        "Task",
        json!({"description": description, "prompt": prompt, "subagent_type": "general-purpose"}),
    )
    .with_id(id)
}

/// The result of the call `call_id` among `events`, and its parent.
fn result_of(events: &[SessionEvent], call_id: &str) -> (String, bool, Option<String>) {
    let (output, is_error) = fixture::result_of(events, call_id);
    (output, is_error, result_event(events, call_id).parent.clone())
}

/// The tool names of the model request `body`.
fn tools_of(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn start(scripts: &Scripts, extra: &[&str]) -> World {
    World::start(scripts.start().await.unwrap(), Api::Anthropic, extra).await
}

#[tokio::test]
async fn a_child_writes_runs_a_command_and_only_its_report_reaches_the_parent() {
    let scripts = Scripts::default();
    scripts.add(
        "build the greeting",
        vec![
            MockStep::tool_calls(vec![task("task_1", "Write greeting", "child-1: write it")]),
            MockStep::text("The agent wrote hello.txt."),
        ],
    );
    scripts.add(
        "child-1",
        vec![
            MockStep::tool_calls(vec![MockToolCall::new(
                "Write",
                json!({"file_path": "/workspace/hello.txt", "content": "hello from the child\n"}),
            )
            .with_id("c1_write")]),
            bash("c1_bash", "cat hello.txt; echo ran >> runs.txt"),
            MockStep::text("REPORT: hello.txt holds the greeting.").usage(40, 9),
        ],
    );
    let World { mock, server, mut c, sid, token } = start(&scripts, &[]).await;
    // A watcher attached before the turn sees it all live.
    let (mut watcher, _) = attach(&server, &token, &sid, "watcher").await;

    let events = turn_within(&mut c, &sid, "build the greeting", WAIT).await;
    let (report, is_error, parent) = result_of(&events, "task_1");
    assert_eq!(
        (report.as_str(), is_error, parent),
        ("REPORT: hello.txt holds the greeting.", false, None)
    );
    let written = std::fs::read_to_string(server.workspace(&sid).join("hello.txt")).unwrap();
    assert_eq!(written, "hello from the child\n");
    assert_eq!(std::fs::read_to_string(server.workspace(&sid).join("runs.txt")).unwrap(), "ran\n");
    let (out, _, parent) = result_of(&events, "c1_bash");
    assert!(out.contains("hello from the child"), "{out}");
    assert_eq!(parent.as_deref(), Some("task_1"), "a child's events name their Task call");

    // Every event between the Task's start and its result is the child's, in the one log.
    let start = events
        .iter()
        .position(
            |e| matches!(&e.kind, EventKind::ToolCall { call, .. } if call.call_id == "task_1"),
        )
        .unwrap();
    let end = events
        .iter()
        .position(
            |e| matches!(&e.kind, EventKind::ToolResult { call_id, .. } if call_id == "task_1"),
        )
        .unwrap();
    // (The sandbox's state changes are the session's, whoever's command woke it.)
    let durable: Vec<&SessionEvent> = events[start + 1..end]
        .iter()
        .filter(|e| e.kind.is_durable() && !matches!(e.kind, EventKind::Sandbox { .. }))
        .collect();
    assert!(durable.iter().all(|e| e.parent.as_deref() == Some("task_1")), "{durable:#?}");
    let kinds: Vec<&str> = durable.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(
        kinds,
        [
            "user_message",
            "assistant_message",
            "tool_call",
            "tool_result",
            "assistant_message",
            "tool_call",
            "tool_result",
            "assistant_message"
        ]
    );

    // The watcher got the same events, parents included.
    let seen = until(&mut watcher, "the watcher to see the turn end", WAIT, |e| {
        matches!(e.kind, EventKind::TurnCompleted { .. })
    })
    .await;
    let nested = |events: &[SessionEvent]| {
        events
            .iter()
            .filter(|e| e.kind.is_durable() && e.parent.as_deref() == Some("task_1"))
            .count()
    };
    assert_eq!(nested(&seen), nested(&events));

    // What the models saw: the child has its own conversation and no Task or TodoWrite; the
    // parent's next request has the report as the Task's result and none of the child's calls.
    let requests = mock.requests();
    let child_first = requests
        .iter()
        .find(|r| outboard_tests::conversations::first_user_text(&r.body).starts_with("child-1"))
        .unwrap();
    let tools = tools_of(&child_first.body);
    assert!(!tools.contains(&"Task".to_owned()) && !tools.contains(&"TodoWrite".to_owned()));
    assert!(tools.contains(&"Bash".to_owned()), "{tools:?}");
    let system = child_first.body["system"].to_string();
    assert!(system.contains("You are a subagent"), "{system}");
    let main_tools = tools_of(&requests[0].body);
    assert!(main_tools.contains(&"Task".to_owned()), "{main_tools:?}");
    let parent_last = requests
        .iter()
        .rev()
        .find(|r| outboard_tests::conversations::first_user_text(&r.body) == "build the greeting")
        .unwrap();
    let body = parent_last.body.to_string();
    assert!(body.contains("REPORT: hello.txt holds the greeting."));
    assert!(!body.contains("c1_bash"), "the child's calls stay out of the parent's conversation");

    // The turn's usage counts the child's model calls too.
    let usage = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::TurnCompleted { usage, .. } => Some(*usage),
            _ => None,
        })
        .unwrap();
    assert!(usage.output_tokens >= 9, "{usage:?}");
}

#[tokio::test]
async fn two_children_of_one_message_run_at_the_same_time() {
    let scripts = Scripts::default();
    scripts.add(
        "split the work",
        vec![
            MockStep::tool_calls(vec![
                task("task_a", "Wait for b", "child-a: wait"),
                task("task_b", "Signal a", "child-b: signal"),
            ]),
            MockStep::text("Both done."),
        ],
    );
    // a waits (in the sandbox) for a file that b writes (with the file tool, outside it): run
    // one after the other, a would wait out its timeout first.
    scripts.add(
        "child-a",
        vec![
            MockStep::tool_calls(vec![MockToolCall::new(
                "Bash",
                json!({"command": "for i in $(seq 1 400); do [ -f b.flag ] && { echo saw b; exit 0; }; sleep 0.1; done; echo no b; exit 1", "timeout": 60000}),
            )
            .with_id("a_wait")]),
            MockStep::text("a: saw b."),
        ],
    );
    scripts.add(
        "child-b",
        vec![
            MockStep::tool_calls(vec![MockToolCall::new(
                "Write",
                json!({"file_path": "/workspace/b.flag", "content": "b\n"}),
            )
            .with_id("b_write")]),
            MockStep::text("b: wrote the flag."),
        ],
    );
    let World { mock: _mock, server: _server, mut c, sid, .. } = start(&scripts, &[]).await;
    let events = turn_within(&mut c, &sid, "split the work", WAIT).await;
    let (waited, is_error, _) = result_of(&events, "a_wait");
    assert!(!is_error && waited.contains("saw b"), "a saw b's flag while it waited: {waited}");
    assert_eq!(result_of(&events, "task_a").0, "a: saw b.");
    assert_eq!(result_of(&events, "task_b").0, "b: wrote the flag.");
    // Both starts are durable before either result, and the results come in call order.
    let pos = |f: &dyn Fn(&EventKind) -> bool| events.iter().position(|e| f(&e.kind)).unwrap();
    let start_b =
        pos(&|k| matches!(k, EventKind::ToolCall { call, .. } if call.call_id == "task_b"));
    let result_a =
        pos(&|k| matches!(k, EventKind::ToolResult { call_id, .. } if call_id == "task_a"));
    let result_b =
        pos(&|k| matches!(k, EventKind::ToolResult { call_id, .. } if call_id == "task_b"));
    assert!(start_b < result_a && result_a < result_b);
    assert!(events.iter().any(|e| matches!(
        e.kind,
        EventKind::TurnCompleted { stop_reason: StopReason::EndTurn, .. }
    )));
}

// `wait_until` blocks its thread while the mock model (a task of this runtime) must answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_child_resumes_the_child_and_never_runs_its_command_twice() {
    let scripts = Scripts::default();
    scripts.add(
        "delegate it",
        vec![
            MockStep::tool_calls(vec![task("task_k", "Run it", "child-k: run")]),
            MockStep::text("The agent ran it."),
        ],
    );
    scripts.add(
        "child-k",
        vec![
            bash("k_first", "echo once >> runs.txt"),
            bash("k_slow", "echo run >> slow.txt; sleep 876543"),
            MockStep::text("REPORT: ran both."),
        ],
    );
    let World { mock, server, mut c, sid, token } = start(&scripts, &[]).await;
    let params = json!({"session_id": sid, "text": "delegate it"});
    c.request("turn/send", params).await.unwrap().unwrap();
    let workspace = server.workspace(&sid);
    // The shell's command line shows before its `echo` ran: wait for both.
    let slow_ran = || {
        host_process_with("876543")
            && std::fs::read_to_string(workspace.join("slow.txt")).is_ok_and(|s| s == "run\n")
    };
    if let Err(e) = wait_until("the child's slow command to run", WAIT, slow_ran) {
        panic!("{e}: {:#?}", attached_log(&server, &token, &sid).await);
    }
    let server = crash_and_restart(server, &mock, Api::Anthropic, &[], || {
        wait_until("the sandbox to die with the server", WAIT, || !host_process_with("876543"))
            .unwrap();
    });
    drop(c);
    let (mut c, _) = attach(&server, &token, &sid, "driver").await;
    until(&mut c, "the resumed turn to end", WAIT, turn_ended).await;
    let log = attached_log(&server, &token, &sid).await;
    let (report, is_error, _) = result_of(&log, "task_k");
    assert_eq!((report.as_str(), is_error), ("REPORT: ran both.", false));
    let (slow, is_error, parent) = result_of(&log, "k_slow");
    assert!(is_error && slow.contains("outcome is unknown"), "{slow}");
    assert_eq!(parent.as_deref(), Some("task_k"));
    assert_eq!(std::fs::read_to_string(workspace.join("runs.txt")).unwrap(), "once\n");
    assert_eq!(std::fs::read_to_string(workspace.join("slow.txt")).unwrap(), "run\n");
    // One start of each command in the log, and the child's first step was not asked again.
    let starts = |id: &str| {
        log.iter()
            .filter(|e| matches!(&e.kind, EventKind::ToolCall { call, .. } if call.call_id == id))
            .count()
    };
    assert_eq!((starts("k_first"), starts("k_slow"), starts("task_k")), (1, 1, 1));
    assert_eq!(scripts.asked("child-k", 0), 1);
    assert!(log.iter().any(|e| matches!(
        e.kind,
        EventKind::TurnCompleted { stop_reason: StopReason::EndTurn, .. }
    )));
}

// `wait_until` blocks its thread while the mock model (a task of this runtime) must answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_stops_the_children() {
    let scripts = Scripts::default();
    scripts.add(
        "start and stop",
        vec![MockStep::tool_calls(vec![task("task_i", "Sleep", "child-i: sleep")])],
    );
    scripts.add("child-i", vec![bash("i_sleep", "sleep 765432")]);
    let World { mock: _mock, server: _server, mut c, sid, .. } = start(&scripts, &[]).await;
    c.request("turn/send", json!({"session_id": sid, "text": "start and stop"}))
        .await
        .unwrap()
        .unwrap();
    wait_until("the child's command to run", WAIT, || host_process_with("765432")).unwrap();
    c.request("turn/interrupt", json!({"session_id": sid})).await.unwrap().unwrap();
    let events = until(&mut c, "the turn to end", WAIT, turn_ended).await;
    assert!(events.iter().any(|e| matches!(
        e.kind,
        EventKind::TurnCompleted { stop_reason: StopReason::Interrupted, .. }
    )));
    let (out, is_error, _) = result_of(&events, "task_i");
    assert!(is_error && out.contains("Interrupted"), "{out}");
    wait_until("the child's command to be killed", WAIT, || !host_process_with("765432")).unwrap();
}

#[tokio::test]
async fn read_only_calls_of_one_message_start_together_and_answer_in_call_order() {
    let scripts = Scripts::default();
    let read = |id: &str, file: &str| {
        MockToolCall::new("Read", json!({"file_path": format!("/workspace/{file}")})).with_id(id)
    };
    scripts.add(
        "read them",
        vec![
            bash("setup", "echo one > one.txt; echo two > two.txt"),
            MockStep::tool_calls(vec![
                read("r1", "one.txt"),
                MockToolCall::new("Glob", json!({"pattern": "*.txt"})).with_id("g1"),
                read("r2", "two.txt"),
                MockToolCall::new(
                    "Write",
                    json!({"file_path": "/workspace/one.txt", "content": "uno\n"}),
                )
                .with_id("w1"),
            ]),
            MockStep::text("Read."),
        ],
    );
    let World { mock: _mock, server, mut c, sid, .. } = start(&scripts, &[]).await;
    let events = turn_within(&mut c, &sid, "read them", WAIT).await;
    let order: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCall { call, .. } if call.call_id != "setup" => {
                Some(format!("start {}", call.call_id))
            }
            EventKind::ToolResult { call_id, .. } if call_id != "setup" => {
                Some(format!("result {call_id}"))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        [
            "start r1",
            "start g1",
            "start r2",
            "result r1",
            "result g1",
            "result r2",
            "start w1",
            "result w1"
        ],
        "the reads run as one group; the write after them, alone"
    );
    // The write needed the read of one.txt recorded by a call of the group.
    let (out, is_error, _) = result_of(&events, "w1");
    assert!(!is_error, "{out}");
    assert_eq!(std::fs::read_to_string(server.workspace(&sid).join("one.txt")).unwrap(), "uno\n");
}

#[tokio::test]
async fn an_org_agent_with_a_restricted_tools_list_cannot_call_other_tools() {
    let scripts = Scripts::default();
    let definition = "---\nname: reader\ndescription: Reads code, never changes it.\ntools: Read, \
                      Grep, WebSearch\n---\nOnly read; never run commands.\n";
    scripts.add(
        "define a reader",
        vec![
            MockStep::tool_calls(vec![MockToolCall::new(
                "Write",
                json!({"file_path": "/agents/reader.md", "content": definition}),
            )
            .with_id("define")]),
            MockStep::tool_calls(vec![MockToolCall::new(
                "Task",
                json!({"description": "Look around", "prompt": "child-r: look", "subagent_type": "reader"}),
            )
            .with_id("task_r")]),
            MockStep::text("The reader reported."),
        ],
    );
    scripts.add(
        "child-r",
        vec![
            bash("r_bash", "echo should-not-run > ran.txt"),
            MockStep::text("REPORT: I have no Bash."),
        ],
    );
    scripts.add("which agents", vec![MockStep::text("reader and general-purpose")]);
    let World { mock, server, mut c, sid, .. } = start(&scripts, &[]).await;
    let events = turn_within(&mut c, &sid, "define a reader", WAIT).await;
    let (defined, is_error, _) = result_of(&events, "define");
    assert!(
        !is_error && defined.contains("Note: agent type \"reader\" is usable, but:"),
        "{defined}"
    );
    assert!(defined.contains("WebSearch"), "the model learns what was left out: {defined}");
    let (out, is_error, parent) = result_of(&events, "r_bash");
    assert!(is_error, "{out}");
    assert!(out.contains("\"Bash\" is not available to the \"reader\" agent"), "{out}");
    assert!(out.contains("Its tools are: Grep, Read."), "{out}");
    assert_eq!(parent.as_deref(), Some("task_r"));
    assert!(!server.workspace(&sid).join("ran.txt").exists(), "the command never ran");
    assert_eq!(result_of(&events, "task_r").0, "REPORT: I have no Bash.");

    let requests = mock.requests();
    let child = requests
        .iter()
        .find(|r| outboard_tests::conversations::first_user_text(&r.body).starts_with("child-r"))
        .unwrap();
    assert_eq!(tools_of(&child.body), ["Grep", "Read"], "only its tools are offered");
    let system = child.body["system"].to_string();
    assert!(system.contains("Only read; never run commands."), "{system}");
    assert!(system.contains("in /agents/reader.md: version 1, written by "), "{system}");

    // The next turn's Task tool lists it, with its tools.
    turn_within(&mut c, &sid, "which agents", WAIT).await;
    let requests = mock.requests();
    let task = requests.last().unwrap().body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Task")
        .unwrap()["description"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(task.contains("; Tools: Grep, Read): Reads code, never changes it.\n"), "{task}");
    assert!(task.contains("- reader (/agents/reader.md v1 by "), "{task}");
}

#[tokio::test]
async fn at_most_ten_calls_of_one_message_run_at_once() {
    let scripts = Scripts::default();
    let n = outboard_server::agent::MAX_PARALLEL_CALLS + 2;
    let tasks =
        (0..n).map(|i| task(&format!("task_{i}"), "Wait", &format!("child-{i}: wait"))).collect();
    scripts.add("start twelve", vec![MockStep::tool_calls(tasks), MockStep::text("All done.")]);
    // Each child is one slow model call: with every child started at once, all their prompts
    // would be in the log long before the first answer.
    for i in 0..n {
        scripts
            .add(&format!("child-{i}:"), vec![MockStep::text(&format!("done {i}")).latency(3_000)]);
    }
    let World { mock: _mock, server: _server, mut c, sid, .. } = start(&scripts, &[]).await;
    let events = turn_within(&mut c, &sid, "start twelve", WAIT).await;
    let prompts: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.parent.is_some() && matches!(e.kind, EventKind::UserMessage { .. }))
        .map(|(i, _)| i)
        .collect();
    let first_report = events
        .iter()
        .position(|e| e.parent.is_some() && matches!(e.kind, EventKind::AssistantMessage { .. }))
        .unwrap();
    assert_eq!(prompts.len(), n);
    let before = prompts.iter().filter(|&&p| p < first_report).count();
    assert_eq!(
        before,
        outboard_server::agent::MAX_PARALLEL_CALLS,
        "the first ten start at once, the rest only as others end"
    );
    for i in 0..n {
        assert_eq!(result_of(&events, &format!("task_{i}")).0, format!("done {i}"));
    }
}
