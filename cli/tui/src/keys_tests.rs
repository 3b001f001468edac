//! The key flows of issue 51 (items 2 and 3) as the state machine sees them: key strings in
//! helix's notation (`"/rewind<ret><down><ret>"`) fed at given times, often in the same batch
//! as the event that opens a prompt or a picker, and the effects that come out. Times are
//! passed by hand (ms on the runtime's clock); nothing sleeps.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use outboard_shared::{
    ApprovalDecision, ApprovalKind, ApprovalScope, CheckpointInfo, EventKind, Role,
    SessionAttachResponse, SessionEvent, SessionId, StopReason, TurnId, Usage,
};
use pretty_assertions::assert_eq;
use serde_json::json;

use super::app::guard::{QUIET_MS, QUIT_MS};
use super::app::{App, AppEvent, ConnState, Effect, Me};
use super::theme::Theme;

/// The keys of a helix-style key string: characters, and `<ret>`, `<esc>`, `<down>`, `<up>`,
/// `<bs>`, `<S-tab>`, `<C-c>`, `<C-o>`, `<tab>`.
pub(super) fn parse_keys(text: &str) -> Vec<KeyEvent> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '<' {
            if let Some(end) = rest.find('>') {
                let name = &rest[1..end];
                let (code, mods) = match name {
                    "ret" => (KeyCode::Enter, KeyModifiers::NONE),
                    "esc" => (KeyCode::Esc, KeyModifiers::NONE),
                    "down" => (KeyCode::Down, KeyModifiers::NONE),
                    "up" => (KeyCode::Up, KeyModifiers::NONE),
                    "bs" => (KeyCode::Backspace, KeyModifiers::NONE),
                    "tab" => (KeyCode::Tab, KeyModifiers::NONE),
                    "S-tab" => (KeyCode::BackTab, KeyModifiers::SHIFT),
                    "C-c" => (KeyCode::Char('c'), KeyModifiers::CONTROL),
                    "C-o" => (KeyCode::Char('o'), KeyModifiers::CONTROL),
                    other => panic!("unknown key <{other}>"),
                };
                out.push(KeyEvent::new(code, mods));
                rest = &rest[end + 1..];
                continue;
            }
        }
        out.push(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// Feeds `text`'s keys, all read at `at`; the effects they made.
pub(super) fn keys(app: &mut App, at: u64, text: &str) -> Vec<Effect> {
    parse_keys(text).into_iter().flat_map(|k| app.handle_at(at, AppEvent::Key(k))).collect()
}

fn ev(seq: u64, kind: EventKind) -> SessionEvent {
    SessionEvent { session_id: SessionId("s_1".into()), seq, ts: String::new(), kind, parent: None }
}

/// alice, driving s_1, with a turn running since t=0.
fn driving() -> App {
    let mut app = App::new(Theme { color: false }, 100, 30);
    let me = Me { user: "alice".into(), connection_id: 7 };
    app.handle_at(0, AppEvent::Connection(ConnState::Connected, Some(me)));
    let snapshot = SessionAttachResponse {
        session: super::tests::info("s_1", "alice", "t"),
        role: Role::Driver,
        events: vec![
            ev(1, EventKind::TurnStarted { turn_id: TurnId("t_1".into()), by: "alice".into() }),
            ev(2, EventKind::UserMessage { text: "go".into(), attachments: Vec::new() }),
        ],
        in_flight: None,
        has_more: false,
        cursor: None,
        standing: Vec::new(),
    };
    app.handle_at(0, AppEvent::Attached(Box::new(snapshot), false));
    assert!(app.running);
    app
}

fn asks(seq: u64, id: &str, kind: ApprovalKind) -> AppEvent {
    AppEvent::Server(Box::new(ev(
        seq,
        EventKind::ApprovalRequested {
            call_id: id.into(),
            name: "Bash".into(),
            input: json!({"command": "rm -rf target"}),
            rule: "Bash".into(),
            covers: Some(vec!["Bash".into()]),
            unjudged: None,
            kind,
            path: None,
            plan: (kind == ApprovalKind::Plan).then(|| "1. do it".into()),
            questions: None,
        },
    )))
}

fn answers(effects: &[Effect]) -> Vec<(ApprovalDecision, ApprovalScope)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Answer(a) => Some((a.decision, a.scope)),
            _ => None,
        })
        .collect()
}

#[test]
fn keys_typed_in_the_batch_that_opens_a_prompt_go_to_the_composer_and_answer_nothing() {
    let mut app = driving();
    keys(&mut app, 1_000, "hello ");
    app.handle_at(1_010, asks(3, "c1", ApprovalKind::Tool));
    // Same batch: before any frame showed the prompt.
    let effects = keys(&mut app, 1_010, "yes and no and always");
    assert!(answers(&effects).is_empty(), "{effects:?}");
    assert_eq!(app.composer.text(), "hello yes and no and always", "nothing typed is lost");
    // Drawn now; typing right after it still is the composer's.
    app.drawn(1_020);
    assert!(answers(&keys(&mut app, 1_100, "y")).is_empty());
    assert_eq!(app.composer.text(), "hello yes and no and alwaysy");
    // Typing goes on: the prompt waits QUIET_MS after the last key.
    assert!(answers(&keys(&mut app, 1_100 + QUIET_MS - 1, "<bs>")).is_empty());
    assert!(!app.prompt_armed());
    // Quiet for QUIET_MS: `y` answers, once.
    let at = 1_100 + 2 * QUIET_MS;
    assert_eq!(
        answers(&keys(&mut app, at, "y")),
        vec![(ApprovalDecision::Allow, ApprovalScope::Once)]
    );
    assert_eq!(app.composer.text(), "hello yes and no and always");
}

#[test]
fn allow_for_the_session_is_shift_tab_never_a_letter_nor_enter() {
    let mut app = driving();
    app.handle_at(0, asks(3, "c1", ApprovalKind::Tool));
    app.drawn(10);
    let at = 10 + QUIET_MS;
    // `a` (once the session's key) is a letter of a word now: typing, no answer.
    assert!(answers(&keys(&mut app, at, "a")).is_empty());
    assert!(answers(&keys(&mut app, at + 1, "<ret>")).is_empty(), "Enter answers nothing");
    let later = at + 1 + QUIET_MS;
    assert_eq!(
        answers(&keys(&mut app, later, "<S-tab>")),
        vec![(ApprovalDecision::Allow, ApprovalScope::Session)]
    );
}

#[test]
fn a_denial_s_reason_borrows_the_composer_and_gives_its_text_back() {
    let mut app = driving();
    keys(&mut app, 0, "half a thought");
    app.handle_at(0, asks(3, "c1", ApprovalKind::Tool));
    app.drawn(0);
    let at = QUIET_MS;
    keys(&mut app, at, "n");
    assert!(app.approvals.denying);
    assert_eq!(app.composer.text(), "", "the reason starts empty");
    let effects = keys(&mut app, at + 1, "not now<ret>");
    assert_eq!(answers(&effects), vec![(ApprovalDecision::Deny, ApprovalScope::Once)]);
    let Some(Effect::Answer(a)) = effects.first() else { panic!("{effects:?}") };
    assert_eq!(a.reason.as_deref(), Some("not now"));
    assert_eq!(app.composer.text(), "half a thought", "the message being typed is back");
}

#[test]
fn the_next_request_of_a_batch_waits_to_be_seen_too() {
    let mut app = driving();
    app.handle_at(0, asks(3, "c1", ApprovalKind::Tool));
    app.handle_at(0, asks(4, "c2", ApprovalKind::Tool));
    app.drawn(0);
    // `yy`: the first allows c1; the second lands on c2, which nobody has seen yet.
    let effects = keys(&mut app, QUIET_MS, "yy");
    assert_eq!(answers(&effects).len(), 1, "{effects:?}");
    app.handle_at(
        QUIET_MS,
        AppEvent::Server(Box::new(ev(
            5,
            EventKind::ApprovalResolved {
                call_id: "c1".into(),
                name: "Bash".into(),
                decision: ApprovalDecision::Allow,
                scope: ApprovalScope::Once,
                by: "alice".into(),
                reason: None,
                covers: None,
                answers: None,
            },
        ))),
    );
    assert!(!app.prompt_armed());
    assert_eq!(app.composer.text(), "y");
}

#[test]
fn a_plan_prompt_takes_y_only_once_seen() {
    let mut app = driving();
    app.handle_at(0, asks(3, "p1", ApprovalKind::Plan));
    assert!(answers(&keys(&mut app, 5, "y")).is_empty());
    app.drawn(10);
    assert_eq!(answers(&keys(&mut app, 10 + QUIET_MS + 5, "<bs>")).len(), 0);
    let at = 10 + 2 * QUIET_MS + 5;
    assert_eq!(answers(&keys(&mut app, at, "y")).len(), 1);
}

fn checkpoint(n: u32) -> CheckpointInfo {
    CheckpointInfo {
        n,
        prompt: format!("prompt {n}"),
        by: "alice".into(),
        ts: "2026-12-07T20:00:00Z".into(),
        seq: u64::from(n) * 10,
        code: true,
        current: true,
        dropped: false,
    }
}

/// alice, driving s_1, idle.
fn idle() -> App {
    let mut app = driving();
    app.handle_at(
        0,
        AppEvent::Server(Box::new(ev(
            3,
            EventKind::TurnCompleted {
                turn_id: TurnId("t_1".into()),
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
            },
        ))),
    );
    app
}

#[test]
fn a_picker_never_takes_keys_typed_before_it_was_drawn() {
    let mut app = idle();
    assert_eq!(keys(&mut app, 100, "/rewind<ret>"), vec![Effect::Checkpoints]);
    // The listing comes back while a message is being typed, in the same batch as its Enter.
    app.handle_at(150, AppEvent::Checkpoints(Ok(vec![checkpoint(1), checkpoint(2)])));
    let effects = keys(&mut app, 150, "hi<down><ret>");
    assert_eq!(effects, vec![Effect::Send("hi".into())], "the Enter was the message's");
    assert!(app.rewind_picker.is_some(), "the picker is still open, untouched");
    assert_eq!(app.rewind_picker.as_ref().map(|p| p.selected), Some(1));
    // Drawn: now its keys are its own.
    app.drawn(160);
    let effects = keys(&mut app, 400, "<up><ret><ret>");
    assert_eq!(effects, vec![Effect::Rewind { n: 1, code: true, conversation: true }]);
}

#[test]
fn esc_closes_a_picker_even_before_it_was_drawn() {
    let mut app = idle();
    keys(&mut app, 0, "/sessions<ret>");
    app.handle_at(10, AppEvent::Sessions(vec![super::tests::info("s_2", "alice", "x")]));
    assert_eq!(keys(&mut app, 10, "<ret>"), vec![], "typed before it was drawn");
    assert!(app.picker.is_some());
    keys(&mut app, 11, "<esc>");
    assert!(app.picker.is_none());
    // Open again and drawn: Enter attaches.
    app.handle_at(20, AppEvent::Sessions(vec![super::tests::info("s_2", "alice", "x")]));
    app.drawn(30);
    assert_eq!(keys(&mut app, 200, "<ret>"), vec![Effect::Attach(SessionId("s_2".into()))]);
}

#[test]
fn ctrl_c_interrupts_a_running_turn_then_clears_then_quits() {
    let mut app = driving();
    keys(&mut app, 0, "draft");
    assert_eq!(keys(&mut app, 10, "<C-c>"), vec![Effect::Interrupt]);
    assert!(app.turn.interrupting);
    assert_eq!(app.composer.text(), "draft", "an interrupt keeps the draft");
    // The turn ends interrupted.
    app.handle_at(
        500,
        AppEvent::Server(Box::new(ev(
            3,
            EventKind::TurnCompleted {
                turn_id: TurnId("t_1".into()),
                stop_reason: StopReason::Interrupted,
                usage: Usage::default(),
            },
        ))),
    );
    assert!(!app.running);
    let last = app.cells.last().map(|c| format!("{:?}", c.kind)).unwrap_or_default();
    assert!(last.contains("[Request interrupted by user]"), "{last}");
    // Idle: the first Ctrl-C clears the composer, the next two quit.
    assert_eq!(keys(&mut app, 600, "<C-c>"), vec![]);
    assert_eq!(app.composer.text(), "");
    assert_eq!(keys(&mut app, 700, "<C-c>"), vec![]);
    assert_eq!(app.notice.as_deref(), Some("press Ctrl-C again to quit"));
    assert_eq!(keys(&mut app, 800, "<C-c>"), vec![Effect::Quit]);
}

#[test]
fn a_lone_ctrl_c_expires_and_another_key_disarms_it() {
    let mut app = idle();
    keys(&mut app, 0, "<C-c>");
    app.handle_at(QUIT_MS + 1, AppEvent::Tick);
    assert_eq!(keys(&mut app, QUIT_MS + 2, "<C-c>"), vec![], "the first one expired");
    keys(&mut app, QUIT_MS + 3, "x<bs>");
    assert_eq!(keys(&mut app, QUIT_MS + 4, "<C-c>"), vec![]);
    assert_eq!(keys(&mut app, QUIT_MS + 5, "<C-c>"), vec![Effect::Quit]);
}

#[test]
fn a_message_after_an_interrupt_is_sent_on_its_own() {
    let mut app = driving();
    keys(&mut app, 0, "<esc>");
    app.handle_at(
        100,
        AppEvent::Server(Box::new(ev(
            3,
            EventKind::TurnCompleted {
                turn_id: TurnId("t_1".into()),
                stop_reason: StopReason::Interrupted,
                usage: Usage::default(),
            },
        ))),
    );
    assert_eq!(
        keys(&mut app, 200, "only the tests<ret>"),
        vec![Effect::Send("only the tests".into())]
    );
}

#[test]
fn the_app_wakes_for_the_prompt_to_arm_for_the_spinner_and_for_a_notice() {
    let mut app = driving();
    assert_eq!(app.wake_at(), Some(super::app::guard::SPIN_MS), "the spinner turns");
    let mut app2 = idle();
    assert_eq!(app2.wake_at(), None, "an idle app sleeps");
    keys(&mut app2, 50, "/nonsense<ret>");
    assert_eq!(app2.wake_at(), Some(50 + super::app::guard::NOTICE_MS));
    app2.handle_at(50 + super::app::guard::NOTICE_MS, AppEvent::Tick);
    assert_eq!(app2.notice, None, "notices expire");
    app.handle_at(0, asks(3, "c1", ApprovalKind::Tool));
    app.drawn(40);
    app.handle_at(41, AppEvent::Tick);
    assert_eq!(app.wake_at(), Some(41 + super::app::guard::SPIN_MS).min(Some(40 + QUIET_MS)));
}

fn screen(app: &App, w: u16, h: u16) -> String {
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).expect("a test backend");
    terminal.draw(|f| super::render::draw(app, f)).expect("a frame");
    terminal.backend().to_string()
}

/// The prompt as it opens in the middle of typing, then once armed; the spinner.
#[test]
fn an_approval_opening_while_typing_then_armed() {
    let mut app = driving();
    keys(&mut app, 0, "yes I think");
    app.handle_at(3_000, asks(3, "c1", ApprovalKind::Tool));
    keys(&mut app, 3_000, " so");
    app.drawn(3_000);
    insta::assert_snapshot!("approval_while_typing", screen(&app, 100, 16));
    app.handle_at(3_000 + QUIET_MS, AppEvent::Tick);
    insta::assert_snapshot!("approval_armed", screen(&app, 100, 16));
}

/// TodoWrite shows the list, never its JSON; a turn's figures land in the status line.
#[test]
fn todo_write_is_a_list_and_the_last_turn_has_its_figures() {
    let mut app = driving();
    let todos = json!({"todos": [
        {"content": "Read the test", "status": "completed", "activeForm": "Reading the test"},
        {"content": "Fix the race", "status": "in_progress", "activeForm": "Fixing the race"},
        {"content": "Run the suite", "status": "pending", "activeForm": "Running the suite"},
    ]});
    let call =
        outboard_shared::ToolCall { call_id: "t1".into(), name: "TodoWrite".into(), input: todos };
    let server = |app: &mut App, at: u64, seq: u64, kind: EventKind| {
        app.handle_at(at, AppEvent::Server(Box::new(ev(seq, kind))));
    };
    server(&mut app, 100, 3, EventKind::ToolCall { call, target_before: None });
    server(
        &mut app,
        200,
        4,
        EventKind::ToolResult {
            call_id: "t1".into(),
            name: "TodoWrite".into(),
            output: "Todos have been modified successfully. Ensure that you continue".into(),
            is_error: false,
            duration_ms: 3,
            attachments: Vec::new(),
        },
    );
    server(
        &mut app,
        300,
        5,
        EventKind::AssistantMessage {
            text: "Done.".into(),
            tool_calls: vec![],
            usage: Some(Usage { input_tokens: 10_000, output_tokens: 2_000, ..Usage::default() }),
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
    );
    server(
        &mut app,
        12_300,
        6,
        EventKind::TurnCompleted {
            turn_id: TurnId("t_1".into()),
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        },
    );
    let shown = screen(&app, 100, 16);
    assert!(!shown.contains("\"todos\"") && !shown.contains("modified successfully"), "{shown}");
    assert!(shown.contains("last turn 12s · 12.0k tok · $0.06"), "{shown}");
    insta::assert_snapshot!("todo_write_as_a_list", shown);
}

/// A long turn that ends while the terminal is unfocused is announced; a focused one is not.
#[test]
fn a_long_turn_ending_unfocused_notifies() {
    let done = |at: u64, app: &mut App| {
        app.handle_at(
            at,
            AppEvent::Server(Box::new(ev(
                3,
                EventKind::TurnCompleted {
                    turn_id: TurnId("t_1".into()),
                    stop_reason: StopReason::EndTurn,
                    usage: Usage::default(),
                },
            ))),
        )
    };
    let mut focused = driving();
    assert_eq!(done(60_000, &mut focused), vec![]);
    let mut away = driving();
    away.handle_at(10, AppEvent::Focus(false));
    let effects = done(60_000, &mut away);
    assert!(
        matches!(effects.as_slice(), [Effect::Notify(t)] if t.contains("1 m 00 s")),
        "{effects:?}"
    );
    let mut short = driving();
    short.handle_at(10, AppEvent::Focus(false));
    assert_eq!(done(2_000, &mut short), vec![], "a short turn rings nothing");
}

/// Retries are one line, updated in place; a provider's error is one line without its HTML.
#[test]
fn retries_update_one_line_and_a_failure_is_one_line() {
    let mut app = driving();
    for attempt in 1..=3 {
        app.handle_at(
            attempt * 100,
            AppEvent::Server(Box::new(ev(
                3,
                EventKind::ModelRetry {
                    attempt: attempt as u32,
                    delay_ms: 2_000,
                    reason: "overloaded (529)\n<html><body>busy</body></html>".into(),
                },
            ))),
        );
    }
    let retries: Vec<String> =
        app.cells.iter().map(|c| format!("{:?}", c.kind)).filter(|k| k.contains("retry")).collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(retries[0].contains("retry 3 in 2.0 s") && !retries[0].contains("html"));
    app.handle_at(
        500,
        AppEvent::Server(Box::new(ev(
            4,
            EventKind::TurnFailed {
                turn_id: TurnId("t_1".into()),
                error: "ANTHROPIC_API_KEY is rejected (401): check the key\n<!DOCTYPE html><html>"
                    .into(),
                class: None,
            },
        ))),
    );
    let last = format!("{:?}", app.cells.last().map(|c| &c.kind));
    assert!(
        last.contains("turn failed: ANTHROPIC_API_KEY is rejected (401): check the key\""),
        "{last}"
    );
    assert_eq!(
        super::app::turn_error_line("upstream: <html><body>502</body></html>", 80),
        "upstream"
    );
}

/// Two questions: a digit answers the first; the second waits to be seen before a digit picks.
#[test]
fn each_question_of_a_request_waits_to_be_seen() {
    let mut app = driving();
    let question = |q: &str| outboard_shared::Question {
        question: q.into(),
        header: String::new(),
        options: vec![
            outboard_shared::QuestionOption { label: "one".into(), description: String::new() },
            outboard_shared::QuestionOption { label: "two".into(), description: String::new() },
        ],
        multi_select: false,
    };
    app.handle_at(
        0,
        AppEvent::Server(Box::new(ev(
            3,
            EventKind::ApprovalRequested {
                call_id: "q1".into(),
                name: "AskUserQuestion".into(),
                input: json!({}),
                rule: "AskUserQuestion".into(),
                covers: None,
                unjudged: None,
                kind: ApprovalKind::Question,
                path: None,
                plan: None,
                questions: Some(vec![question("first?"), question("second?")]),
            },
        ))),
    );
    app.drawn(0);
    // `12` in one go: `1` answers the first; `2` lands before the second was seen.
    assert_eq!(keys(&mut app, QUIET_MS, "12"), vec![]);
    assert_eq!(app.approvals.picked, vec!["one".to_owned()]);
    assert_eq!(app.composer.text(), "2");
    app.drawn(QUIET_MS + 1);
    let effects = keys(&mut app, 2 * QUIET_MS + 1 + QUIET_MS, "2");
    let Some(Effect::Answer(a)) = effects.first() else { panic!("{effects:?}") };
    assert_eq!(a.answers, Some(vec!["one".to_owned(), "two".to_owned()]));
}
