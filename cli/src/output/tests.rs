use super::*;
use outboard_shared::headless::{RunFinishedTag, RunStartedTag, SCHEMA_VERSION};
use outboard_shared::{ApprovalDecision, ApprovalScope, ToolCall};
use outboard_shared::{SessionId, TurnId, Usage};
use pretty_assertions::assert_eq;
use serde_json::json;

fn call(name: &str, input: Value) -> ToolCall {
    ToolCall { call_id: "c1".into(), name: name.into(), input }
}

fn ev(seq: u64, kind: EventKind) -> SessionEvent {
    SessionEvent {
        session_id: SessionId::from("s_1"),
        seq,
        ts: "2026-01-01T00:00:00.000Z".into(),
        kind,
        parent: None,
    }
}

#[test]
fn tool_call_summaries() {
    let cases = [
        (call("Bash", json!({"command": "ls -la"})), "Bash(ls -la)"),
        (call("Bash", json!({"command": "cd /x\nmake test", "description": "d"})), "Bash(cd /x …)"),
        (
            call("Read", json!({"file_path": "/workspace/a.rs", "offset": 3})),
            "Read(/workspace/a.rs)",
        ),
        (
            call("Write", json!({"file_path": "/workspace/x.txt", "content": "hi"})),
            "Write(/workspace/x.txt)",
        ),
        (
            call(
                "Edit",
                json!({"file_path": "/memory/MEMORY.md", "old_string": "a", "new_string": "b"}),
            ),
            "Edit(/memory/MEMORY.md)",
        ),
        (call("Glob", json!({"pattern": "**/*.rs"})), "Glob(**/*.rs)"),
        (
            call("Grep", json!({"pattern": "fn main", "path": "/workspace"})),
            "Grep(fn main in /workspace)",
        ),
        (call("TodoWrite", json!({"todos": [{}, {}, {}]})), "TodoWrite(3 todos)"),
        (
            call("Task", json!({"prompt": "Look\nhard.", "description": "find the flake"})),
            "Task(find the flake)",
        ),
        (call("WebFetch", json!({"url": "https://example.com"})), "WebFetch(https://example.com)"),
        (call("Bash", json!("{\"command\": \"ls")), "Bash({\"command\": \"ls)"),
        (call("Bash", json!({})), "Bash()"),
    ];
    for (call, want) in cases {
        assert_eq!(tool_call_summary(&call), want);
    }
}

#[test]
fn long_arguments_are_truncated_on_a_character_boundary() {
    let long = "é".repeat(200);
    let got = tool_call_summary(&call("Bash", json!({"command": long})));
    assert_eq!(got, format!("Bash({}…)", "é".repeat(SUMMARY_CHARS - 1)));
    assert_eq!(truncate("short", 10), "short");
    assert_eq!(truncate("abcdef", 4), "abc…");
}

#[test]
fn tool_result_summaries() {
    assert_eq!(tool_result_summary("total 8\na\nb\n", false, 35), "total 8… (3 lines, 35 ms)");
    assert_eq!(tool_result_summary("done", false, 2), "done (1 line, 2 ms)");
    assert_eq!(tool_result_summary("", false, 1), "(no output, 1 ms)");
    assert_eq!(
        tool_result_summary("exit code 2\nNo such file\n", true, 12),
        "exit code 2… (error, 2 lines, 12 ms)"
    );
}

#[test]
fn approval_lines_say_what_waits_and_how_to_answer() {
    let asked = EventKind::ApprovalRequested {
        call_id: "toolu_9".into(),
        name: "Bash".into(),
        input: json!({"command": "git push origin main"}),
        rule: "Bash(git push*)".into(),
        covers: Some(vec!["Bash(git push*)".into()]),
        unjudged: None,
        kind: Default::default(),
        path: None,
        plan: None,
        questions: None,
    };
    assert_eq!(
        approval_lines("s_1", &asked).unwrap(),
        [
            "? Bash(git push origin main) waits for approval (org rule Bash(git push*))",
            "  answer with: outboard approve s_1 toolu_9  |  outboard deny s_1 toolu_9 --reason \
             TEXT",
            "  approve --for-session also allows later Bash calls of this session that no rule \
             but `Bash(git push*)` asks about",
        ]
    );
    let unjudged = EventKind::ApprovalRequested {
        call_id: "toolu_9".into(),
        name: "Bash".into(),
        input: json!({"command": "$cmd push"}),
        rule: "Bash(git push*)".into(),
        covers: Some(Vec::new()),
        unjudged: Some("a command is only known when it runs".into()),
        kind: Default::default(),
        path: None,
        plan: None,
        questions: None,
    };
    let lines = approval_lines("s_1", &unjudged).unwrap();
    assert_eq!(lines[1], "  not judged before it runs: a command is only known when it runs");
    assert_eq!(
        lines[3],
        "  approve --for-session also allows nothing beyond this call (what asks could not be \
         judged before it runs)"
    );
    let denied = EventKind::ApprovalResolved {
        call_id: "toolu_9".into(),
        name: "Bash".into(),
        decision: ApprovalDecision::Deny,
        scope: ApprovalScope::Once,
        by: "bob".into(),
        reason: Some("not today".into()),
        covers: None,
        answers: None,
    };
    assert_eq!(approval_lines("s_1", &denied).unwrap(), ["  ✗ denied by bob: not today"]);
    let for_session = EventKind::ApprovalResolved {
        call_id: "toolu_9".into(),
        name: "Bash".into(),
        decision: ApprovalDecision::Allow,
        scope: ApprovalScope::Session,
        by: "bob".into(),
        reason: None,
        covers: Some(vec!["Bash(echo*)".into(), "Bash(ls*)".into()]),
        answers: None,
    };
    assert_eq!(
        approval_lines("s_1", &for_session).unwrap(),
        ["  ✓ allowed by bob, with later Bash calls of this session that no rule but \
             `Bash(echo*)`, `Bash(ls*)` asks about"]
    );
    assert_eq!(approval_lines("s_1", &EventKind::Unknown), None);
}

#[test]
fn retry_lines() {
    assert_eq!(
        retry_line(2, 1500, "529 overloaded"),
        "  retrying model call (attempt 2, in 1.5 s): 529 overloaded"
    );
}

fn started() -> RunStarted {
    RunStarted {
        kind: RunStartedTag::RunStarted,
        schema_version: SCHEMA_VERSION,
        session_id: SessionId::from("s_1"),
        server: "ws://127.0.0.1:1".into(),
        embedded: true,
        context_window: None,
        context_window_source: None,
        context_window_from: None,
    }
}

#[test]
fn json_lines_start_with_run_started_and_events_round_trip() {
    let mut p = Printer::new(Mode::Json, Vec::new(), Vec::new());
    p.run_started(&started()).unwrap();
    let event = ev(
        3,
        EventKind::ToolCall { call: call("Bash", json!({"command": "ls"})), target_before: None },
    );
    p.event(&event).unwrap();
    p.run_finished(&RunFinished {
        kind: RunFinishedTag::RunFinished,
        session_id: SessionId::from("s_1"),
        exit_code: 0,
        error: None,
    })
    .unwrap();
    let (out, err) = p.into_inner();
    let out = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3);
    let first: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(
        first,
        json!({"type": "run_started", "schema_version": 1, "session_id": "s_1",
               "server": "ws://127.0.0.1:1", "embedded": true})
    );
    let second: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(second["type"], "tool_call");
    assert_eq!(serde_json::from_str::<SessionEvent>(lines[1]).unwrap(), event);
    assert_eq!(
        serde_json::from_str::<Value>(lines[2]).unwrap(),
        json!({"type": "run_finished", "session_id": "s_1", "exit_code": 0})
    );
    assert!(err.is_empty());
}

#[test]
fn plain_output_streams_text_and_summarises_tools() {
    let mut p = Printer::new(Mode::Plain, Vec::new(), Vec::new());
    let turn = TurnId::from("t_1");
    let events = [
        EventKind::TurnStarted { turn_id: turn.clone(), by: "ada".into() },
        EventKind::UserMessage { text: "list".into(), attachments: Vec::new() },
        EventKind::AssistantDelta { text: "Let me ".into() },
        EventKind::AssistantDelta { text: "look.".into() },
        EventKind::AssistantMessage {
            text: "Let me look.".into(),
            tool_calls: vec![call("Bash", json!({"command": "ls"}))],
            usage: None,
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
        EventKind::ToolCall { call: call("Bash", json!({"command": "ls"})), target_before: None },
        EventKind::ToolOutputDelta {
            call_id: "c1".into(),
            stream: outboard_shared::OutputStream::Stdout,
            text: "a\nb\n".into(),
        },
        EventKind::ToolResult {
            call_id: "c1".into(),
            name: "Bash".into(),
            output: "a\nb\n".into(),
            is_error: false,
            duration_ms: 35,
            attachments: Vec::new(),
        },
        EventKind::ModelRetry { attempt: 1, delay_ms: 2000, reason: "429".into() },
        // A provider that does not stream: the whole message is printed.
        EventKind::AssistantMessage {
            text: "Two files.".into(),
            tool_calls: vec![],
            usage: None,
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
        EventKind::TurnCompleted {
            turn_id: turn,
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        },
    ];
    for (i, kind) in events.into_iter().enumerate() {
        p.event(&ev(i as u64, kind)).unwrap();
    }
    p.run_finished(&RunFinished {
        kind: RunFinishedTag::RunFinished,
        session_id: SessionId::from("s_1"),
        exit_code: 0,
        error: None,
    })
    .unwrap();
    let (out, err) = p.into_inner();
    assert_eq!(String::from_utf8(out).unwrap(), "Let me look.\nTwo files.\n");
    assert_eq!(
        String::from_utf8(err).unwrap(),
        "● Bash(ls)\n  ⎿  a… (2 lines, 35 ms)\n  retrying model call (attempt 1, in 2 s): 429\n"
    );
}

fn child(seq: u64, parent: &str, kind: EventKind) -> SessionEvent {
    SessionEvent { parent: Some(parent.to_owned()), ..ev(seq, kind) }
}

fn task(id: &str, description: &str) -> ToolCall {
    ToolCall {
        call_id: id.into(),
        name: "Task".into(),
        input: json!({"description": description, "prompt": "p",
                      "subagent_type": "general-purpose"}),
    }
}

fn tool_result(id: &str, name: &str, output: &str, ms: u64) -> EventKind {
    EventKind::ToolResult {
        call_id: id.into(),
        name: name.into(),
        output: output.into(),
        is_error: false,
        duration_ms: ms,
        attachments: Vec::new(),
    }
}

#[test]
fn two_interleaved_subagents_print_under_their_tasks_each_line_labelled() {
    let mut p = Printer::new(Mode::Plain, Vec::new(), Vec::new());
    let bash = |id: &str, command: &str| ToolCall {
        call_id: id.into(),
        name: "Bash".into(),
        input: json!({"command": command}),
    };
    let (a, b) = (task("c_a", "check the server crate"), task("c_b", "check the client"));
    let events = [
        ev(3, EventKind::AssistantDelta { text: "Two checks.".into() }),
        ev(
            3,
            EventKind::AssistantMessage {
                text: "Two checks.".into(),
                tool_calls: vec![a.clone(), b.clone()],
                usage: None,
                reasoning: Vec::new(),
                model: None,
                searches: Vec::new(),
            },
        ),
        ev(4, EventKind::ToolCall { call: a, target_before: None }),
        ev(5, EventKind::ToolCall { call: b, target_before: None }),
        child(6, "c_a", EventKind::UserMessage { text: "p".into(), attachments: Vec::new() }),
        child(7, "c_b", EventKind::UserMessage { text: "p".into(), attachments: Vec::new() }),
        child(7, "c_a", EventKind::AssistantDelta { text: "Building".into() }),
        child(7, "c_b", EventKind::AssistantDelta { text: "Linting".into() }),
        child(
            8,
            "c_a",
            EventKind::AssistantMessage {
                text: "Building the server.".into(),
                tool_calls: vec![bash("a1", "cargo build -p server")],
                usage: None,
                reasoning: Vec::new(),
                model: None,
                searches: Vec::new(),
            },
        ),
        child(
            9,
            "c_a",
            EventKind::ToolCall { call: bash("a1", "cargo build -p server"), target_before: None },
        ),
        child(
            10,
            "c_b",
            EventKind::ToolCall { call: bash("b1", "cargo clippy"), target_before: None },
        ),
        child(
            10,
            "c_a",
            EventKind::ToolOutputDelta {
                call_id: "a1".into(),
                stream: outboard_shared::OutputStream::Stdout,
                text: "Compiling".into(),
            },
        ),
        child(11, "c_b", tool_result("b1", "Bash", "clean\n", 900)),
        child(
            12,
            "c_b",
            EventKind::AssistantMessage {
                text: "The client is clean.\n\n1. no warnings\n2. no errors\n3. fmt ok".into(),
                tool_calls: vec![],
                usage: None,
                reasoning: Vec::new(),
                model: None,
                searches: Vec::new(),
            },
        ),
        ev(13, tool_result("c_b", "Task", "The client is clean.", 2_000)),
        // One subagent left: its lines need no label.
        child(14, "c_a", tool_result("a1", "Bash", "Finished\n", 4_000)),
        child(14, "c_a", EventKind::ModelRetry { attempt: 2, delay_ms: 500, reason: "529".into() }),
        ev(15, tool_result("c_a", "Task", "The server builds.", 6_000)),
        ev(16, EventKind::AssistantDelta { text: "Both fine.".into() }),
        ev(
            16,
            EventKind::AssistantMessage {
                text: "Both fine.".into(),
                tool_calls: vec![],
                usage: None,
                reasoning: Vec::new(),
                model: None,
                searches: Vec::new(),
            },
        ),
    ];
    for e in &events {
        p.event(e).unwrap();
    }
    let (out, err) = p.into_inner();
    // stdout is the main loop's words only.
    assert_eq!(String::from_utf8(out).unwrap(), "Two checks.\nBoth fine.");
    assert_eq!(
        String::from_utf8(err).unwrap(),
        "● Task(check the server crate) · general-purpose\n\
         ● Task(check the client) · general-purpose\n\
         \x20 │ [check the server crate] Building the server.\n\
         \x20 │ [check the server crate] ● Bash(cargo build -p server)\n\
         \x20 │ [check the client] ● Bash(cargo clippy)\n\
         \x20 │ [check the client]   ⎿  clean (1 line, 900 ms)\n\
         \x20 │ [check the client] The client is clean.\n\
         \x20 │ [check the client] 1. no warnings\n\
         \x20 │ [check the client] 2. no errors\n\
         \x20 │ [check the client] …\n\
         \x20 ⎿  The client is clean. (1 line, 2000 ms)\n\
         \x20 │   ⎿  Finished (1 line, 4000 ms)\n\
         \x20 │ retrying model call (attempt 2, in 0.5 s): 529\n\
         \x20 ⎿  The server builds. (1 line, 6000 ms)\n"
    );
}

#[test]
fn the_running_tasks_are_bounded_and_forgotten_at_the_turns_end() {
    let mut p = Printer::new(Mode::Plain, Vec::new(), Vec::new());
    for i in 0..=MAX_RUNNING_TASKS {
        let call = task(&format!("c_{i}"), &format!("job {i}"));
        p.event(&ev(i as u64, EventKind::ToolCall { call, target_before: None })).unwrap();
    }
    assert_eq!(p.running_tasks(), MAX_RUNNING_TASKS);
    // The oldest was forgotten: its lines carry its call id; a tracked one its label.
    let bash =
        ToolCall { call_id: "k".into(), name: "Bash".into(), input: json!({"command": "ls"}) };
    let call = EventKind::ToolCall { call: bash, target_before: None };
    p.event(&child(100, "c_0", call.clone())).unwrap();
    p.event(&child(101, "c_1", call)).unwrap();
    let done = EventKind::TurnCompleted {
        turn_id: TurnId::from("t_1"),
        stop_reason: StopReason::Interrupted,
        usage: Usage::default(),
    };
    p.event(&ev(102, done)).unwrap();
    assert_eq!(p.running_tasks(), 0, "a turn's end ends its subagents");
    let (_, err) = p.into_inner();
    let err = String::from_utf8(err).unwrap();
    assert!(err.contains("  │ [c_0] ● Bash(ls)\n"), "{err}");
    assert!(err.contains("  │ [job 1] ● Bash(ls)\n"), "{err}");
}

#[test]
fn json_lines_carry_the_parent_of_a_subagents_events() {
    let mut p = Printer::new(Mode::Json, Vec::new(), Vec::new());
    let call = task("c_a", "check");
    p.event(&ev(4, EventKind::ToolCall { call, target_before: None })).unwrap();
    let delta = EventKind::AssistantDelta { text: "Building".into() };
    p.event(&child(5, "c_a", delta)).unwrap();
    p.event(&child(6, "c_a", tool_result("a1", "Bash", "ok", 3))).unwrap();
    let (out, err) = p.into_inner();
    let lines: Vec<Value> =
        String::from_utf8(out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let parents: Vec<Option<&str>> = lines.iter().map(|l| l["parent"].as_str()).collect();
    assert_eq!(parents, [None, Some("c_a"), Some("c_a")]);
    assert!(lines[0].get("parent").is_none(), "absent, not null, for the session's own");
    assert!(err.is_empty());
}

#[test]
fn a_failed_turn_prints_one_error_line_in_both_modes() {
    for mode in [Mode::Plain, Mode::Json] {
        let mut p = Printer::new(mode, Vec::new(), Vec::new());
        let failed = EventKind::TurnFailed {
            turn_id: TurnId::from("t_1"),
            error: "no API key".into(),
            class: None,
        };
        p.event(&ev(4, failed)).unwrap();
        let (_, err) = p.into_inner();
        assert_eq!(String::from_utf8(err).unwrap(), "error: no API key\n");
    }
}
