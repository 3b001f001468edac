use super::*;
use crate::output::Mode;
use crate::testing::{ev, fake_server, Script};
use outboard_shared::{ErrorBody, Method, Usage};
use outboard_shared::{ErrorCode, EventKind, StopReason, TurnId};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

fn args(url: &str, token: Option<&str>, json: bool, session: Option<&str>) -> RunArgs {
    RunArgs {
        connect: ConnectArgs {
            server: Some(url.to_owned()),
            token: token.map(str::to_owned),
            ..ConnectArgs::default()
        },
        json,
        session: session.map(str::to_owned),
        images: Vec::new(),
        // The fake server takes one connection: these tests pin the run without reconnects.
        reconnect_for: std::time::Duration::ZERO,
        source: crate::args::SourceArgs::default(),
        upload: None,
        approve: crate::args::ApproveMode::Deny,
        plan: false,
        stream: Default::default(),
        prompt: Some("list the files\nand more".into()),
    }
}

struct Ran {
    code: i32,
    out: String,
    err: String,
}

async fn run_with(args: &RunArgs, interrupts: &mut mpsc::Receiver<()>) -> Ran {
    let mode = if args.json { Mode::Json } else { Mode::Plain };
    let mut printer = Printer::new(mode, Vec::new(), Vec::new());
    // A deadline, so a run that never sees its turn end fails the test instead of hanging it.
    let running = run(args, args.prompt.clone().unwrap_or_default(), interrupts, &mut printer);
    let code = tokio::time::timeout(std::time::Duration::from_secs(10), running)
        .await
        .expect("the run did not end within 10 s (is the turn's end event missing?)");
    let (out, err) = printer.into_inner();
    Ran { code, out: String::from_utf8(out).unwrap(), err: String::from_utf8(err).unwrap() }
}

fn no_interrupts() -> mpsc::Receiver<()> {
    mpsc::channel(1).1
}

fn completed() -> EventKind {
    EventKind::TurnCompleted {
        turn_id: TurnId::from("t_1"),
        stop_reason: StopReason::EndTurn,
        usage: Usage { input_tokens: 10, output_tokens: 2, ..Usage::default() },
    }
}

fn happy_turn() -> Vec<EventKind> {
    vec![
        EventKind::TurnStarted { turn_id: TurnId::from("t_1"), by: "ada".into() },
        EventKind::AssistantDelta { text: "Two ".into() },
        EventKind::AssistantDelta { text: "files.".into() },
        EventKind::AssistantMessage {
            text: "Two files.".into(),
            tool_calls: vec![],
            usage: None,
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
        completed(),
    ]
}

#[tokio::test]
async fn a_json_run_creates_a_session_and_prints_the_turn() {
    let (url, mut seen) = fake_server(Script { turn: happy_turn(), ..Script::default() }).await;
    let ran = run_with(&args(&url, Some("tok"), true, None), &mut no_interrupts()).await;
    assert_eq!(ran.code, 0, "{}", ran.err);
    let lines: Vec<Value> = ran.out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let types: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "run_started",
            "turn_started",
            "assistant_delta",
            "assistant_delta",
            "assistant_message",
            "turn_completed",
            "run_finished"
        ]
    );
    assert_eq!(
        lines[0],
        json!({"type": "run_started", "schema_version": 1, "session_id": "s_new",
               "server": url, "embedded": false})
    );
    assert_eq!(lines[6], json!({"type": "run_finished", "session_id": "s_new", "exit_code": 0}));
    assert_eq!(ran.err, "");

    let methods: Vec<Method> = std::iter::from_fn(|| seen.try_recv().ok()).collect();
    assert_eq!(
        methods,
        [
            Method::SessionCreate(outboard_shared::SessionCreateParams {
                title: Some("list the files".into()),
                workspace: None,
                source: None,
                network: outboard_shared::SessionNetwork::Org,
                context_window: None,
                model: None,
            }),
            Method::SessionAttach(outboard_shared::SessionAttachParams {
                session_id: SessionId::from("s_new"),
                role: Role::Driver,
                after_seq: Some(0)
            }),
            Method::TurnSend(outboard_shared::TurnSendParams {
                session_id: SessionId::from("s_new"),
                text: "list the files\nand more".into(),
                images: Vec::new()
            }),
        ]
    );
}

#[tokio::test]
async fn a_json_run_carries_the_parent_of_a_subagents_events_as_the_server_sent_it() {
    let task = outboard_shared::ToolCall {
        call_id: "c_task".into(),
        name: "Task".into(),
        input: json!({"description": "look", "prompt": "Look.", "subagent_type": "general-purpose"}),
    };
    let turn = vec![
        EventKind::TurnStarted { turn_id: TurnId::from("t_1"), by: "ada".into() },
        EventKind::AssistantMessage {
            text: String::new(),
            tool_calls: vec![task.clone()],
            usage: None,
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
        EventKind::ToolCall { call: task, target_before: None },
        EventKind::UserMessage { text: "Look.".into(), attachments: Vec::new() },
        EventKind::AssistantDelta { text: "Found it.".into() },
        EventKind::AssistantMessage {
            text: "Found it.".into(),
            tool_calls: vec![],
            usage: None,
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
        // A child's turn-shaped event must not end the run.
        completed(),
        EventKind::ToolResult {
            call_id: "c_task".into(),
            name: "Task".into(),
            output: "Found it.".into(),
            is_error: false,
            duration_ms: 5,
            attachments: Vec::new(),
        },
        completed(),
    ];
    let child = Some("c_task".to_owned());
    let parents =
        vec![None, None, None, child.clone(), child.clone(), child.clone(), child, None, None];
    let (url, _seen) = fake_server(Script { turn, parents, ..Script::default() }).await;
    let ran = run_with(&args(&url, Some("tok"), true, None), &mut no_interrupts()).await;
    assert_eq!(ran.code, 0, "{}", ran.err);
    let lines: Vec<Value> = ran.out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<(&str, Option<&str>)> = lines
        .iter()
        .filter(|l| !l["type"].as_str().unwrap().starts_with("run_"))
        .map(|l| (l["type"].as_str().unwrap(), l["parent"].as_str()))
        .collect();
    assert_eq!(
        events,
        [
            ("turn_started", None),
            ("assistant_message", None),
            ("tool_call", None),
            ("user_message", Some("c_task")),
            ("assistant_delta", Some("c_task")),
            ("assistant_message", Some("c_task")),
            ("turn_completed", Some("c_task")),
            ("tool_result", None),
            ("turn_completed", None),
        ]
    );
    for line in &lines {
        if line.get("parent").is_some() {
            assert_eq!(line["parent"], "c_task", "{line}");
        }
    }
}

#[tokio::test]
async fn continuing_a_session_attaches_after_its_last_seq_and_skips_history() {
    let (url, mut seen) = fake_server(Script { turn: happy_turn(), ..Script::default() }).await;
    let ran = run_with(&args(&url, Some("tok"), false, Some("s_old")), &mut no_interrupts()).await;
    assert_eq!(ran.code, 0, "{}", ran.err);
    assert_eq!(ran.out, "Two files.\n");
    let methods: Vec<Method> = std::iter::from_fn(|| seen.try_recv().ok()).collect();
    assert_eq!(
        methods[1],
        Method::SessionAttach(outboard_shared::SessionAttachParams {
            session_id: SessionId::from("s_old"),
            role: Role::Driver,
            after_seq: Some(7)
        })
    );
}

#[tokio::test]
async fn continuing_a_session_waits_while_another_node_takes_it_over() {
    let script = Script { turn: happy_turn(), unreachable_attaches: 2, ..Script::default() };
    let (url, mut seen) = fake_server(script).await;
    let ran = run_with(&args(&url, Some("tok"), false, Some("s_old")), &mut no_interrupts()).await;
    assert_eq!(ran.code, 0, "{}", ran.err);
    assert_eq!(ran.out, "Two files.\n");
    assert_eq!(ran.err, format!("outboard: {TAKEOVER_NOTICE}\n"));
    let methods: Vec<Method> = std::iter::from_fn(|| seen.try_recv().ok()).collect();
    let attaches = methods.iter().filter(|m| matches!(m, Method::SessionAttach(_))).count();
    assert_eq!(attaches, 3, "{methods:?}");
}

#[tokio::test]
async fn a_failed_turn_exits_1_with_one_error_line() {
    let turn = vec![EventKind::TurnFailed {
        turn_id: TurnId::from("t_1"),
        error: "the model refused".into(),
        class: Some(outboard_shared::FailureClass::ProviderRejected),
    }];
    let (url, _) = fake_server(Script { turn, ..Script::default() }).await;
    let ran = run_with(&args(&url, Some("tok"), true, None), &mut no_interrupts()).await;
    assert_eq!(ran.code, 1);
    assert_eq!(ran.err, "error: the model refused\n");
    let last: Value = serde_json::from_str(ran.out.lines().last().unwrap()).unwrap();
    assert_eq!(
        last,
        json!({"type": "run_finished", "session_id": "s_new", "exit_code": 1,
               "error": "the model refused"})
    );
}

#[tokio::test]
async fn a_wrong_token_exits_3() {
    let (url, _) = fake_server(Script::default()).await;
    let ran = run_with(&args(&url, Some("nope"), true, None), &mut no_interrupts()).await;
    assert_eq!(ran.code, 3);
    assert_eq!(ran.out, "", "no JSON before a session exists");
    assert_eq!(
        ran.err,
        "outboard: the server refused the token — create one with: outboard-server admin user add NAME --org ORG\n"
    );
}

#[tokio::test]
async fn a_server_without_a_token_exits_2() {
    let ran = run_with(&args("ws://127.0.0.1:9", None, false, None), &mut no_interrupts()).await;
    assert_eq!(ran.code, 2);
    assert_eq!(ran.err.lines().count(), 1);
    assert!(
        ran.err.starts_with("outboard: --server ws://127.0.0.1:9 needs a token"),
        "{}",
        ran.err
    );
}

#[tokio::test]
async fn a_lost_connection_mid_turn_exits_3() {
    let turn = vec![EventKind::TurnStarted { turn_id: TurnId::from("t_1"), by: "ada".into() }];
    let (url, _) = fake_server(Script { turn, close_after_turn: true, ..Script::default() }).await;
    let ran = run_with(&args(&url, Some("tok"), true, None), &mut no_interrupts()).await;
    assert_eq!(ran.code, 3);
    assert!(
        ran.err.starts_with("outboard: the connection ended before the turn did"),
        "{}",
        ran.err
    );
    let last: Value = serde_json::from_str(ran.out.lines().last().unwrap()).unwrap();
    assert_eq!(last["exit_code"], 3);
}

#[tokio::test]
async fn a_lagging_run_re_attaches_after_the_last_seq_it_saw() {
    let turn = vec![
        EventKind::TurnStarted { turn_id: TurnId::from("t_1"), by: "ada".into() },
        EventKind::UserMessage { text: "list the files".into(), attachments: Vec::new() },
    ];
    let missed = vec![
        // Already seen: skipped.
        ev(
            "s_new",
            10,
            EventKind::UserMessage { text: "list the files".into(), attachments: Vec::new() },
        ),
        ev(
            "s_new",
            11,
            EventKind::AssistantMessage {
                text: "Done.".into(),
                tool_calls: vec![],
                usage: None,
                reasoning: Vec::new(),
                model: None,
                searches: Vec::new(),
            },
        ),
        ev("s_new", 12, completed()),
    ];
    let script = Script { turn, lag_then_snapshot: Some(missed), ..Script::default() };
    let (url, mut seen) = fake_server(script).await;
    let ran = run_with(&args(&url, Some("tok"), true, None), &mut no_interrupts()).await;
    assert_eq!(ran.code, 0, "{}", ran.err);
    let types: Vec<String> = ran
        .out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        types,
        [
            "run_started",
            "turn_started",
            "user_message",
            "assistant_message",
            "turn_completed",
            "run_finished"
        ]
    );
    let methods: Vec<Method> = std::iter::from_fn(|| seen.try_recv().ok()).collect();
    assert_eq!(
        methods.last(),
        Some(&Method::SessionAttach(outboard_shared::SessionAttachParams {
            session_id: SessionId::from("s_new"),
            role: Role::Driver,
            after_seq: Some(10)
        }))
    );
}

#[tokio::test]
async fn ctrl_c_interrupts_the_turn_then_a_second_one_quits() {
    let turn = vec![
        EventKind::TurnStarted { turn_id: TurnId::from("t_1"), by: "ada".into() },
        EventKind::AssistantDelta { text: "Working".into() },
    ];
    let interrupt = vec![EventKind::TurnCompleted {
        turn_id: TurnId::from("t_1"),
        stop_reason: StopReason::Interrupted,
        usage: Usage::default(),
    }];
    let (url, mut seen) =
        fake_server(Script { turn: turn.clone(), interrupt, ..Script::default() }).await;
    let (tx, mut rx) = mpsc::channel(INTERRUPT_CHANNEL_CAPACITY);
    let args = args(&url, Some("tok"), false, None);
    let running = tokio::spawn(async move { run_with(&args, &mut rx).await });
    // Press Ctrl-C once the turn is under way.
    while !matches!(seen.recv().await, Some(Method::TurnSend(_))) {}
    tx.send(()).await.unwrap();
    let ran = running.await.unwrap();
    assert_eq!(ran.code, exit::INTERRUPTED);
    assert_eq!(ran.out, "Working\n");
    assert_eq!(ran.err, "interrupting… (press Ctrl-C again to quit now)\n(interrupted)\n");
    assert!(matches!(seen.recv().await, Some(Method::TurnInterrupt(_))));

    // A server that never ends the turn: the second Ctrl-C leaves at once.
    let (url, mut seen) = fake_server(Script { turn, ..Script::default() }).await;
    let (tx, mut rx) = mpsc::channel(INTERRUPT_CHANNEL_CAPACITY);
    let args = super::tests::args(&url, Some("tok"), true, None);
    let running = tokio::spawn(async move { run_with(&args, &mut rx).await });
    while !matches!(seen.recv().await, Some(Method::TurnSend(_))) {}
    tx.send(()).await.unwrap();
    tx.send(()).await.unwrap();
    let ran = running.await.unwrap();
    assert_eq!(ran.code, exit::INTERRUPTED);
    let last: Value = serde_json::from_str(ran.out.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "run_finished");
    assert_eq!(last["exit_code"], 130);
}

#[test]
fn prompts_come_from_the_argument_or_stdin() {
    assert_eq!(read_prompt("hi", std::io::empty()).unwrap(), "hi");
    assert_eq!(read_prompt("-", "from stdin\n".as_bytes()).unwrap(), "from stdin\n");
    let empty = read_prompt("-", "  \n".as_bytes()).unwrap_err();
    assert!(matches!(empty, RunError::EmptyPrompt));
    assert_eq!(empty.exit_code(), exit::USAGE);
}

#[test]
fn titles_are_the_first_line_truncated() {
    assert_eq!(session_title("\n  fix the build \nthen test"), "fix the build");
    assert_eq!(session_title(&"x".repeat(100)).chars().count(), TITLE_CHARS);
}

#[test]
fn exit_codes() {
    let server = |code| {
        RunError::Client(ClientError::Server {
            method: "turn/send",
            error: ErrorBody::new(code, "m"),
        })
    };
    let cases = [
        (RunError::MissingToken("ws://x".into()), exit::USAGE),
        (RunError::Stdin("closed".into()), exit::USAGE),
        (
            RunError::Client(ClientError::Connect {
                url: "ws://x".into(),
                reason: "r".into(),
                source: None,
            }),
            exit::CONNECT,
        ),
        (RunError::Client(ClientError::Unauthorized { message: "m".into() }), exit::CONNECT),
        (RunError::Client(ClientError::ProtocolVersion { message: "m".into() }), exit::CONNECT),
        (RunError::Lost(ClientError::Closed { reason: None }), exit::CONNECT),
        (
            RunError::GaveUp {
                budget: "2m".into(),
                attempts: 9,
                last: ClientError::Closed { reason: None },
            },
            exit::CONNECT,
        ),
        (
            RunError::Refused(ClientError::Server {
                method: "session/attach",
                error: ErrorBody::new(ErrorCode::NotFound, "no session"),
            }),
            exit::CONNECT,
        ),
        (RunError::Refused(ClientError::Unauthorized { message: "m".into() }), exit::CONNECT),
        (server(ErrorCode::NotFound), exit::USAGE),
        (server(ErrorCode::Conflict), exit::FAILED),
        (server(ErrorCode::Internal), exit::FAILED),
        (RunError::Output(std::io::ErrorKind::BrokenPipe.into()), exit::FAILED),
    ];
    for (err, code) in cases {
        assert_eq!(err.exit_code(), code, "{err}");
    }
}

/// The embedded server's errors: only a build with it has them.
#[cfg(feature = "embedded")]
#[test]
fn embedded_exit_codes() {
    let missing_key = EmbeddedError::MissingKey { provider: "Anthropic", var: "ANTHROPIC_API_KEY" };
    assert_eq!(RunError::Embedded(missing_key).exit_code(), exit::USAGE);
    let launch = EmbeddedError::Launch("port".into());
    assert_eq!(RunError::Embedded(launch).exit_code(), exit::CONNECT);
}
