//! Background commands and the todo list through a real server, a real bubblewrap sandbox and
//! the mock model over HTTP: a background loop keeps its sandbox unfrozen, `BashOutput` returns
//! only what is new, `KillShell` stops it and its end reaches the model at its next step; a job
//! across a server crash is reported lost, never re-run; a foreground command past its timeout is
//! killed and says so; `TodoWrite` reaches a watcher, survives a restart and shows in
//! `session/list`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{EventKind, SandboxState, SessionEvent, TaskStatus};
use outboard_tests::fixture::{
    attach, attached_log, crash_and_restart, results_of, turn_within, until, World,
};
use outboard_tests::harness::{host_process_with, wait_until, Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::{json, Value};

/// Generous: the machine is shared and loaded; every wait is on a condition.
const WAIT: Duration = Duration::from_secs(60);

/// The shell id in `Bash`'s answer to a background command.
fn shell_id(events: &[SessionEvent]) -> String {
    let (out, is_error) = results_of(events, "Bash").pop().expect("a Bash result");
    assert!(!is_error, "{out}");
    let at = out.find("ID: ").expect("an id") + 4;
    out[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// The line numbers `lineN` in a `BashOutput` answer.
fn line_numbers(out: &str) -> Vec<u32> {
    out.lines().filter_map(|l| l.strip_prefix("line")?.parse().ok()).collect()
}

/// The text of the last message of the model request `n`.
fn last_message_text(mock: &MockLlm, n: usize) -> String {
    let requests = mock.requests();
    let body = &requests[n].body;
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    match &last["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| b["text"].as_str().or(b["content"].as_str()).unwrap_or("").to_owned())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

async fn start(extra: &[&str]) -> World {
    World::anthropic(vec![], extra).await
}

#[tokio::test]
async fn a_background_loop_keeps_the_sandbox_unfrozen_is_read_in_parts_killed_and_reported() {
    let World { mock, server, mut c, sid, .. } = start(&["--sandbox-freeze-after", "1"]).await;
    // Each line also goes to a workspace file, so the test can see the loop go on from outside.
    let command =
        "for i in $(seq 1 100000); do echo line$i; echo line$i >> progress; sleep 0.1; done";
    mock.push(MockStep::tool_call("Bash", json!({"command": command, "run_in_background": true})));
    mock.push(MockStep::text("Started."));
    let events = turn_within(&mut c, &sid, "start the loop", WAIT).await;
    let id = shell_id(&events);
    assert!(id.starts_with("bash_"), "{id}");
    assert!(host_process_with("seq 1 100000"), "the loop runs");
    assert!(
        events.iter().any(|e| matches!(&e.kind, EventKind::BackgroundTask { shell_id, status: TaskStatus::Running, .. } if *shell_id == id)),
        "its start is an event"
    );

    // The turn has ended and the freeze period (1 s) passes many times over while the loop runs:
    // 30 lines are 3 s of it. A frozen sandbox would stop the file growing.
    let progress = server.workspace(&sid).join("progress");
    wait_until("the background loop to write 30 lines after its turn ended", WAIT, || {
        std::fs::read_to_string(&progress).is_ok_and(|t| t.contains("line30\n"))
    })
    .unwrap();

    mock.push(MockStep::tool_call("BashOutput", json!({"bash_id": id})));
    mock.push(MockStep::tool_call("BashOutput", json!({"bash_id": id})));
    mock.push(MockStep::tool_call("BashOutput", json!({"bash_id": id, "filter": "^line[0-9]*7$"})));
    mock.push(MockStep::tool_call("KillShell", json!({"shell_id": id})));
    mock.push(MockStep::tool_call("BashOutput", json!({"bash_id": id})));
    mock.push(MockStep::tool_call("KillShell", json!({"shell_id": id})));
    mock.push(MockStep::text("Stopped."));
    let events = turn_within(&mut c, &sid, "read it, then stop it", WAIT).await;
    let states: Vec<SandboxState> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Sandbox { state, .. } => Some(state),
            _ => None,
        })
        .collect();
    assert!(!states.contains(&SandboxState::Suspended), "never frozen while it ran: {states:?}");
    assert!(!states.contains(&SandboxState::Running), "never thawed either: {states:?}");

    let reads = results_of(&events, "BashOutput");
    assert_eq!(reads.len(), 4, "{reads:?}");
    let first = line_numbers(&reads[0].0);
    assert!(reads[0].0.starts_with("<status>running</status>"), "{}", reads[0].0);
    assert_eq!(first.first(), Some(&1), "the first read starts at the beginning");
    assert!(first.len() >= 30, "{}", reads[0].0);
    let contiguous = first.windows(2).all(|w| w[1] == w[0] + 1);
    assert!(contiguous, "nothing lost in between: {first:?}");
    let second = line_numbers(&reads[1].0);
    let last_seen = *first.last().unwrap();
    assert!(
        second.iter().all(|&n| n > last_seen),
        "the second read has only new lines (after line{last_seen}): {second:?}"
    );
    let filtered = line_numbers(&reads[2].0);
    assert!(filtered.iter().all(|n| n % 10 == 7), "only lines matching the filter: {filtered:?}");

    let kills = results_of(&events, "KillShell");
    assert_eq!(kills[0], (format!("Successfully killed shell: {id}"), false));
    assert!(reads[3].0.starts_with("<status>killed</status>"), "{}", reads[3].0);
    assert!(kills[1].1 && kills[1].0.contains("is not running (status: killed)"), "{kills:?}");
    assert!(
        events.iter().any(|e| matches!(&e.kind, EventKind::BackgroundTask { shell_id, status: TaskStatus::Killed, .. } if *shell_id == id)),
        "its end is an event"
    );
    // Stopped for good: the file stops growing.
    let len = std::fs::read_to_string(&progress).unwrap().len();
    assert!(!host_process_with("seq 1 100000"), "the loop's processes are gone");
    assert!(std::fs::read_to_string(&progress).unwrap().len() <= len + 16);

    // With nothing running the idle timer counts again: the sandbox freezes.
    until(&mut c, "the freeze once nothing runs", WAIT, |e| {
        matches!(e.kind, EventKind::Sandbox { state: SandboxState::Suspended, .. })
    })
    .await;
}

#[tokio::test]
async fn a_background_command_that_ends_is_told_to_the_model_at_its_next_step() {
    let World { mock, server: _server, mut c, sid, .. } = start(&[]).await;
    mock.push(MockStep::tool_call(
        "Bash",
        json!({"command": "echo working; sleep 1; echo finished; exit 3", "run_in_background": true}),
    ));
    mock.push(MockStep::text("Started."));
    let events = turn_within(&mut c, &sid, "start it", WAIT).await;
    let id = shell_id(&events);
    let requests_before = mock.requests().len();
    // Its end arrives as an event with nobody asking (the turn is over).
    until(&mut c, "the job's end", WAIT, |e| {
        matches!(&e.kind, EventKind::BackgroundTask { shell_id, status: TaskStatus::Completed, exit_code: Some(3), .. } if *shell_id == id)
    })
    .await;

    mock.push(MockStep::tool_call("BashOutput", json!({"bash_id": id})));
    mock.push(MockStep::text("It failed with 3."));
    let events = turn_within(&mut c, &sid, "how did it go?", WAIT).await;
    let told = last_message_text(&mock, requests_before);
    assert!(told.contains("how did it go?"), "{told}");
    assert!(
        told.contains(&format!("<system-reminder>\nBackground shell {id} (echo working"))
            && told.contains("completed with exit code 3"),
        "the first step of the next turn is told, after the user's message: {told}"
    );
    let reminders: Vec<&SessionEvent> =
        events.iter().filter(|e| matches!(e.kind, EventKind::SystemReminder { .. })).collect();
    assert_eq!(reminders.len(), 1, "durable, once");
    let read = &results_of(&events, "BashOutput")[0].0;
    assert!(read.contains("<status>completed</status>\n<exit_code>3</exit_code>"), "{read}");
    assert!(read.contains("working\n") && read.contains("finished\n"), "{read}");
    // Told once: the step after the BashOutput has no new reminder.
    let after = last_message_text(&mock, requests_before + 1);
    assert!(!after.contains("system-reminder"), "{after}");
}

#[tokio::test]
async fn a_background_job_across_a_server_crash_is_reported_lost_and_never_re_run() {
    let World { mock, server, mut c, sid, token } = start(&[]).await;
    mock.push(MockStep::tool_call(
        "Bash",
        json!({"command": "echo run >> runs; sleep 987654", "run_in_background": true}),
    ));
    mock.push(MockStep::text("Started."));
    let events = turn_within(&mut c, &sid, "start it", WAIT).await;
    let id = shell_id(&events);
    let workspace = server.workspace(&sid);
    // The shell's command line shows before its `echo` ran: wait for both.
    let job_ran = || {
        host_process_with("987654")
            && std::fs::read_to_string(workspace.join("runs")).is_ok_and(|s| s == "run\n")
    };
    wait_until("the job's process", WAIT, job_ran).unwrap();
    // Its start is durable before the crash.
    if !events.iter().any(|e| matches!(e.kind, EventKind::BackgroundTask { .. })) {
        until(&mut c, "the job's start", WAIT, |e| {
            matches!(e.kind, EventKind::BackgroundTask { .. })
        })
        .await;
    }
    let server = crash_and_restart(server, &mock, Api::Anthropic, &[], || {
        wait_until("the sandbox to die with the server", WAIT, || !host_process_with("987654"))
            .unwrap();
    });
    // The owner's token from the first process is still valid: the store kept it.
    drop(c);
    let (mut c, attached) = attach(&server, &token, &sid, "driver").await;
    let mut log = attached.events;
    if !log
        .iter()
        .any(|e| matches!(e.kind, EventKind::BackgroundTask { status: TaskStatus::Lost, .. }))
    {
        log.extend(
            until(&mut c, "the job reported lost", WAIT, |e| {
                matches!(e.kind, EventKind::BackgroundTask { status: TaskStatus::Lost, .. })
            })
            .await,
        );
    }
    assert!(log.iter().any(|e| matches!(&e.kind, EventKind::BackgroundTask { shell_id, status: TaskStatus::Lost, .. } if *shell_id == id)));

    let before = mock.requests().len();
    mock.push(MockStep::tool_call("BashOutput", json!({"bash_id": id})));
    mock.push(MockStep::text("It was lost."));
    let events = turn_within(&mut c, &sid, "and the job?", WAIT).await;
    let told = last_message_text(&mock, before);
    assert!(
        told.contains(&format!("Background shell {id}")) && told.contains("was lost"),
        "{told}"
    );
    let read = &results_of(&events, "BashOutput")[0].0;
    assert!(read.starts_with("<status>lost</status>"), "{read}");
    assert_eq!(std::fs::read_to_string(workspace.join("runs")).unwrap(), "run\n", "never re-run");
    assert!(!host_process_with("987654"));
}

#[tokio::test]
async fn a_foreground_command_past_its_timeout_is_killed_and_says_so() {
    let World { mock, server: _server, mut c, sid, .. } = start(&[]).await;
    mock.push(MockStep::tool_call(
        "Bash",
        json!({"command": "echo begun; sleep 600123; echo never", "timeout": 1000}),
    ));
    mock.push(MockStep::text("It timed out."));
    let events = turn_within(&mut c, &sid, "run it", WAIT).await;
    let (out, is_error) = results_of(&events, "Bash").pop().unwrap();
    assert!(is_error, "{out}");
    assert!(out.contains("begun"), "{out}");
    assert!(!out.contains("never"), "{out}");
    assert!(out.contains("Command timed out after 1000 ms and was killed"), "{out}");
    assert!(!host_process_with("600123"), "its processes are gone");
}

#[tokio::test]
async fn todo_write_reaches_a_watcher_survives_a_restart_and_shows_in_the_listing() {
    let World { mock, server, mut c, sid, token } = start(&[]).await;
    let (mut watcher, _) = attach(&server, &token, &sid, "watcher").await;
    let todos = json!([
        {"content": "Read the code", "status": "completed", "activeForm": "Reading the code"},
        {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing the bug"},
        {"content": "Run the tests", "status": "pending", "activeForm": "Running the tests"}
    ]);
    let two_active = json!([
        {"content": "a", "status": "in_progress", "activeForm": "doing a"},
        {"content": "b", "status": "in_progress", "activeForm": "doing b"}
    ]);
    mock.push(MockStep::tool_call("TodoWrite", json!({"todos": two_active})));
    mock.push(MockStep::tool_call("TodoWrite", json!({"todos": todos})));
    mock.push(MockStep::text("Planned."));
    let events = turn_within(&mut c, &sid, "plan it", WAIT).await;
    let writes = results_of(&events, "TodoWrite");
    assert!(writes[0].1 && writes[0].0.contains("Items 1, 2 are all in_progress"), "{writes:?}");
    assert!(!writes[1].1, "{writes:?}");
    let lists: Vec<usize> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Todos { todos } => Some(todos.len()),
            _ => None,
        })
        .collect();
    assert_eq!(lists, [3], "only the valid list is recorded");

    let seen = until(&mut watcher, "the list at the watcher", WAIT, |e| {
        matches!(e.kind, EventKind::Todos { .. })
    })
    .await;
    let EventKind::Todos { todos: got } = &seen.last().unwrap().kind else { unreachable!() };
    assert_eq!(serde_json::to_value(got).unwrap(), todos, "the watcher gets the list");

    let listed = c.request("session/list", json!({})).await.unwrap().unwrap();
    assert_eq!(listed["sessions"][0]["todos"], json!({"done": 1, "total": 3}));

    let server = crash_and_restart(server, &mock, Api::Anthropic, &[], || {});
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let listed = c.request("session/list", json!({})).await.unwrap().unwrap();
    assert_eq!(listed["sessions"][0]["todos"], json!({"done": 1, "total": 3}), "kept");
    let log = attached_log(&server, &token, &sid).await;
    let last = log.iter().rev().find_map(|e| match &e.kind {
        EventKind::Todos { todos } => Some(serde_json::to_value(todos).unwrap()),
        _ => None,
    });
    assert_eq!(last, Some(todos), "the log gives the list back after a restart");
}
