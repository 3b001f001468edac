//! Snapshot tests of whole screens: ratatui's `TestBackend` draws [`render::draw`] of an [`App`]
//! brought into a state by feeding it events, exactly as the runtime does; `insta` keeps the
//! expected screens in `snapshots/`. Colours are off (the snapshots are text).

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use outboard_shared::{
    EventKind, InFlight, OutputStream, PresenceEntry, Role, SandboxState, SessionAttachResponse,
    SessionEvent, SessionId, SessionInfo, SessionStatus, StopReason, ToolCall, ToolOutputSoFar,
    TurnId, Usage, UserId,
};
use pretty_assertions::assert_eq;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::json;

use super::app::{App, AppEvent, ConnState, Effect, Me};
use super::render;
use super::theme::Theme;

/// A session as the server lists it (shared with the other TUI test modules).
pub(super) fn info(id: &str, owner: &str, title: &str) -> SessionInfo {
    SessionInfo {
        id: SessionId(id.into()),
        title: title.into(),
        owner_id: UserId(format!("u_{owner}")),
        owner: owner.into(),
        status: SessionStatus::Idle,
        model: "anthropic/claude-sonnet-4-5".into(),
        model_name: None,
        last_seq: 0,
        created_at: "2026-11-29T07:00:00.000Z".into(),
        updated_at: "2026-11-29T07:18:16.123Z".into(),
        failure: None,
        workspace: None,
        source: None,
        network: outboard_shared::SessionNetwork::Org,
        attached: Vec::new(),
        usage: None,
        context_window: Some(200_000),
        context_window_source: None,
        context_window_from: None,
        todos: None,
    }
}

fn ev(seq: u64, kind: EventKind) -> SessionEvent {
    SessionEvent { session_id: SessionId("s_1".into()), seq, ts: String::new(), kind, parent: None }
}

/// Presence of connections `(user, role, connection id)`.
fn presence_of(entries: &[(&str, Role, u64)]) -> EventKind {
    EventKind::Presence {
        attached: entries
            .iter()
            .map(|(u, r, c)| PresenceEntry {
                user: (*u).into(),
                role: *r,
                client: "outboard-cli".into(),
                connection_id: *c,
            })
            .collect(),
    }
}

/// Our connection in [`app`]; the others' ids differ.
const MY_CONN: u64 = 7;

/// Presence where we (`me`) are the entry on [`MY_CONN`].
fn presence(entries: &[(&str, Role)], me: &str) -> EventKind {
    let with_ids: Vec<(&str, Role, u64)> = entries
        .iter()
        .enumerate()
        .map(|(i, (u, r))| (*u, *r, if *u == me { MY_CONN } else { 100 + i as u64 }))
        .collect();
    presence_of(&with_ids)
}

fn connected(app: &mut App, me: &str, connection_id: u64) {
    let me = Me { user: me.into(), connection_id };
    app.handle(AppEvent::Connection(ConnState::Connected, Some(me)));
}

/// An app connected as `me`, attached to s_1 (owned by alice) with `events`.
fn app(me: &str, role: Role, events: Vec<SessionEvent>, in_flight: Option<InFlight>) -> App {
    let mut app = App::new(Theme { color: false }, 80, 24);
    connected(&mut app, me, MY_CONN);
    let snapshot = SessionAttachResponse {
        session: info("s_1", "alice", "Fix the flaky test"),
        role,
        events,
        in_flight,
        has_more: false,
        cursor: None,
        standing: Vec::new(),
    };
    app.handle(AppEvent::Attached(Box::new(snapshot), false));
    let last = app.last_seq;
    let others: Vec<(&str, Role)> = match role {
        Role::Driver => vec![(me, Role::Driver), ("bob", Role::Watcher)],
        Role::Watcher => vec![("alice", Role::Driver), (me, Role::Watcher)],
    };
    app.handle(AppEvent::Server(Box::new(ev(last, presence(&others, me)))));
    app
}

fn screen(app: &App, w: u16, h: u16) -> String {
    let mut app = app.clone();
    app.handle(AppEvent::Resize(w, h));
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| render::draw(&app, f)).unwrap();
    terminal.backend().to_string()
}

fn turn_start() -> Vec<SessionEvent> {
    vec![
        ev(1, EventKind::TurnStarted { turn_id: TurnId("t_1".into()), by: "alice".into() }),
        ev(
            2,
            EventKind::UserMessage {
                text: "Why does the test flake?".into(),
                attachments: Vec::new(),
            },
        ),
    ]
}

fn bash_call(seq: u64) -> SessionEvent {
    ev(
        seq,
        EventKind::ToolCall {
            call: ToolCall {
                call_id: "c1".into(),
                name: "Bash".into(),
                input: json!({"command": "cargo test -p store"}),
            },
            target_before: None,
        },
    )
}

#[test]
fn empty_session() {
    let app = app("alice", Role::Driver, vec![], None);
    insta::assert_snapshot!(screen(&app, 80, 24));
}

#[test]
fn streaming_answer_mid_way() {
    let mut events = turn_start();
    events.push(ev(
        2,
        EventKind::AssistantDelta { text: "## The cause\n\nThe test *races* the ".into() },
    ));
    let mut app = app("alice", Role::Driver, events, None);
    for chunk in [
        "writer:\n\n1. it spawns",
        " a task\n2. it reads `last_seq`\n\n```rust\nlet seq = store",
        ".last_seq();",
    ] {
        app.handle(AppEvent::Server(Box::new(ev(
            2,
            EventKind::AssistantDelta { text: chunk.into() },
        ))));
    }
    assert!(app.running);
    insta::assert_snapshot!(screen(&app, 80, 24));
}

#[test]
fn tool_cell_running_then_finished() {
    let mut events = turn_start();
    events.push(ev(
        3,
        EventKind::AssistantMessage {
            text: "Let me run the tests.".into(),
            tool_calls: vec![],
            usage: None,
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
    ));
    events.push(bash_call(4));
    let mut app = app("alice", Role::Driver, events, None);
    app.handle(AppEvent::Server(Box::new(ev(
        4,
        EventKind::ToolOutputDelta {
            call_id: "c1".into(),
            stream: OutputStream::Stdout,
            text: "running 12 tests\ntest a ... ok\n".into(),
        },
    ))));
    insta::assert_snapshot!("tool_running", screen(&app, 80, 24));
    app.handle(AppEvent::Server(Box::new(ev(
        5,
        EventKind::ToolResult {
            call_id: "c1".into(),
            name: "Bash".into(),
            output: "running 12 tests\ntest a ... ok\ntest b ... FAILED\n\nExit code 101".into(),
            is_error: true,
            duration_ms: 2340,
            attachments: Vec::new(),
        },
    ))));
    app.handle(AppEvent::Server(Box::new(ev(
        6,
        EventKind::Sandbox { state: SandboxState::Running, ms: 3.0, queue: None },
    ))));
    app.handle(AppEvent::Server(Box::new(ev(
        7,
        EventKind::TurnCompleted {
            turn_id: TurnId("t_1".into()),
            stop_reason: StopReason::EndTurn,
            usage: Usage { input_tokens: 1200, output_tokens: 80, ..Usage::default() },
        },
    ))));
    insta::assert_snapshot!("tool_finished", screen(&app, 80, 24));
}

#[test]
fn status_line_shows_how_full_the_context_window_is() {
    let mut events = turn_start();
    let usage = |input_tokens| Usage {
        input_tokens,
        output_tokens: 1_000,
        cache_read_tokens: input_tokens / 2,
        cache_write_tokens: 0,
    };
    events.push(ev(
        3,
        EventKind::AssistantMessage {
            text: "Reading.".into(),
            tool_calls: vec![],
            usage: Some(usage(20_000)),
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
    ));
    let mut app = app("alice", Role::Driver, events, None);
    let status = |app: &App| screen(app, 120, 6);
    assert!(status(&app).contains("ctx 21.0k/200.0k (10%)"), "{}", status(&app));
    // The latest call counts, not the sum: a later, bigger prompt is what fills the window.
    app.handle(AppEvent::Server(Box::new(ev(
        4,
        EventKind::AssistantMessage {
            text: "More.".into(),
            tool_calls: vec![],
            usage: Some(usage(169_000)),
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
    ))));
    assert!(status(&app).contains("ctx 170.0k/200.0k (85%)"), "{}", status(&app));
    insta::assert_snapshot!(screen(&app, 120, 6));
}

#[test]
fn a_guessed_window_is_stated_once_and_marked_in_the_status_line() {
    let guessed = |last_seq| {
        let mut session = info("s_g", "alice", "New");
        session.last_seq = last_seq;
        session.context_window = Some(128_000);
        session.context_window_source = Some(outboard_shared::WindowSource::ProviderDefault);
        session.context_window_from = Some("a guess: set --context-window".into());
        SessionAttachResponse {
            session,
            role: Role::Driver,
            events: Vec::new(),
            in_flight: None,
            has_more: false,
            cursor: None,
            standing: Vec::new(),
        }
    };
    let mut app = App::new(Theme { color: false }, 100, 24);
    connected(&mut app, "alice", MY_CONN);
    app.handle(AppEvent::Attached(Box::new(guessed(0)), false));
    let notice = "context window 128000 tokens — a guess: set --context-window";
    assert_eq!(screen(&app, 100, 24).matches(notice).count(), 1, "{}", screen(&app, 100, 24));
    // Re-attached after a reconnect: not said again.
    app.handle(AppEvent::Attached(Box::new(guessed(0)), true));
    assert_eq!(screen(&app, 100, 24).matches(notice).count(), 1);
    let usage = Usage { input_tokens: 10_000, output_tokens: 0, ..Usage::default() };
    app.handle(AppEvent::Server(Box::new(SessionEvent {
        session_id: SessionId("s_g".into()),
        ..ev(
            1,
            EventKind::AssistantMessage {
                text: "Hi.".into(),
                tool_calls: vec![],
                usage: Some(usage),
                reasoning: Vec::new(),
                model: None,
                searches: Vec::new(),
            },
        )
    })));
    assert!(screen(&app, 120, 6).contains("ctx 10.0k/128.0k? (7%)"), "{}", screen(&app, 120, 6));
    // An existing session (something in its log) is not told again.
    let mut app = App::new(Theme { color: false }, 100, 24);
    connected(&mut app, "alice", MY_CONN);
    app.handle(AppEvent::Attached(Box::new(guessed(5)), false));
    assert!(!screen(&app, 100, 24).contains(notice));
}

#[test]
fn edit_as_a_diff() {
    let mut events = turn_start();
    events.push(ev(
        3,
        EventKind::ToolCall {
            call: ToolCall {
                call_id: "c2".into(),
                name: "Edit".into(),
                input: json!({
                    "file_path": "/workspace/src/store.rs",
                    "old_string": "fn last_seq(&self) -> u64 {\n    self.seq\n}",
                    "new_string": "fn last_seq(&self) -> u64 {\n    self.seq.load(Ordering::Acquire)\n}",
                }),
            },
            target_before: None,
        },
    ));
    events.push(ev(
        4,
        EventKind::ToolResult {
            call_id: "c2".into(),
            name: "Edit".into(),
            output: "The file /workspace/src/store.rs has been updated at line 41. Here's the \
                     result of running `cat -n` on a snippet of the edited file:\n    \
                     40\t\n    41\tfn last_seq(&self) -> u64 {\n    42\t    \
                     self.seq.load(Ordering::Acquire)\n    43\t}\n    44\t\n"
                .into(),
            is_error: false,
            duration_ms: 4,
            attachments: Vec::new(),
        },
    ));
    let app = app("alice", Role::Driver, events, None);
    insta::assert_snapshot!(screen(&app, 80, 24));
}

#[test]
fn the_header_takes_the_title_the_server_gives_the_session_from_its_first_message() {
    let mut app = app("alice", Role::Driver, vec![], None);
    if let Some(s) = &mut app.session {
        s.title.clear();
    }
    let header = |app: &App| screen(app, 80, 6).lines().next().unwrap_or_default().to_owned();
    assert!(header(&app).contains(" untitled "), "{}", header(&app));
    for e in turn_start() {
        app.handle(AppEvent::Server(Box::new(e)));
    }
    let titled = EventKind::SessionTitled { title: "Why does the test flake?".into() };
    app.handle(AppEvent::Server(Box::new(ev(2, titled))));
    assert!(header(&app).contains(" Why does the test flake? "), "{}", header(&app));
    assert!(!header(&app).contains("untitled"), "{}", header(&app));
}

#[test]
fn watcher_view_with_disabled_composer() {
    let mut events = turn_start();
    events.push(ev(
        3,
        EventKind::AssistantMessage {
            text: "Looking.".into(),
            tool_calls: vec![],
            usage: None,
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
    ));
    events.push(bash_call(4));
    let in_flight = InFlight {
        assistant_text: String::new(),
        tool_output: vec![ToolOutputSoFar { call_id: "c1".into(), text: "compiling…\n".into() }],
    };
    let mut app = app("bob", Role::Watcher, events, Some(in_flight));
    // A watcher's message is not sent.
    for c in "hello".chars() {
        app.handle(AppEvent::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)));
    }
    assert_eq!(
        app.handle(AppEvent::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE))),
        vec![]
    );
    insta::assert_snapshot!(screen(&app, 80, 24));
}

#[test]
fn reconnecting_state() {
    let mut app = app("alice", Role::Driver, turn_start(), None);
    app.handle(AppEvent::Connection(
        ConnState::Reconnecting { attempt: 3, reason: "connection refused".into() },
        None,
    ));
    insta::assert_snapshot!(screen(&app, 80, 24));
}

#[test]
fn session_picker() {
    let mut app = app("alice", Role::Driver, vec![], None);
    let mut t = |c| app.handle(AppEvent::Key(KeyEvent::new(c, KeyModifiers::NONE)));
    for c in "/sess".chars() {
        t(KeyCode::Char(c));
    }
    t(KeyCode::Tab);
    assert_eq!(t(KeyCode::Enter), vec![Effect::ListSessions]);
    app.handle(AppEvent::Sessions(vec![
        info("s_1", "alice", "Fix the flaky test"),
        info("s_2", "bob", "Upgrade tokio"),
    ]));
    // A picker takes keys read after it was first drawn (`keys_tests` has the keys before).
    app.drawn(0);
    app.handle(AppEvent::Key(KeyEvent::new(KeyCode::Down, KeyModifiers::NONE)));
    insta::assert_snapshot!(screen(&app, 80, 24));
    let chosen = app.handle(AppEvent::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)));
    assert_eq!(chosen, vec![Effect::Attach(SessionId("s_2".into()))]);
}

#[test]
fn small_terminal_40x12() {
    let mut events = turn_start();
    events.push(ev(
        3,
        EventKind::AssistantMessage {
            text: "The writer races the reader; see `store.rs`.".into(),
            tool_calls: vec![],
            usage: None,
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
    ));
    events.push(bash_call(4));
    let app = app("alice", Role::Driver, events, None);
    insta::assert_snapshot!(screen(&app, 40, 12));
}

#[test]
fn keys_interrupt_quit_and_scroll() {
    let mut events = turn_start();
    for i in 0..40 {
        events.push(ev(
            3 + i,
            EventKind::AssistantMessage {
                text: format!("line {i}"),
                tool_calls: vec![],
                usage: None,
                reasoning: Vec::new(),
                model: None,
                searches: Vec::new(),
            },
        ));
    }
    let mut app = app("alice", Role::Driver, events, None);
    let key = |c| AppEvent::Key(KeyEvent::new(c, KeyModifiers::NONE));
    assert_eq!(app.handle(key(KeyCode::Esc)), vec![Effect::Interrupt]);
    app.handle(key(KeyCode::PageUp));
    assert_eq!(app.scroll, 18);
    app.handle(AppEvent::Scroll(-3));
    assert_eq!(app.scroll, 15);
    app.handle(key(KeyCode::PageDown));
    assert_eq!(app.scroll, 0);
    let ctrl_c = AppEvent::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert_eq!(app.handle(ctrl_c.clone()), vec![]);
    assert_eq!(app.handle(ctrl_c), vec![Effect::Quit]);
}

#[test]
fn the_status_line_shows_where_the_workspace_came_from() {
    let mut app = app("alice", Role::Driver, vec![], None);
    if let Some(s) = app.session.as_mut() {
        s.source = Some(outboard_shared::SessionSource::Repo {
            url: "https://git.example/acme/shop.git".into(),
            git_ref: "v2.1".into(),
            commit: "0123456789abcdef0123456789abcdef01234567".into(),
        });
    }
    let text = screen(&app, 160, 8);
    assert!(text.contains("│ shop@v2.1 "), "{text}");
}

#[test]
fn the_status_line_shows_a_session_waiting_for_a_live_sandbox() {
    let mut app = app("alice", Role::Driver, vec![], None);
    let queue = Some(outboard_shared::SandboxQueue { position: 3, limit: 8 });
    let waiting = EventKind::Sandbox { state: SandboxState::Waiting, ms: 0.0, queue };
    app.handle(AppEvent::Server(Box::new(ev(1, waiting))));
    let text = screen(&app, 160, 8);
    assert!(text.contains("sandbox waiting for a slot (#3 in line, org quota 8)"), "{text}");
    let running = EventKind::Sandbox { state: SandboxState::Provisioning, ms: 0.0, queue: None };
    app.handle(AppEvent::Server(Box::new(ev(2, running))));
    let text = screen(&app, 160, 8);
    assert!(text.contains("sandbox starting") && !text.contains("in line"), "{text}");
}

#[test]
fn slash_commands() {
    let mut app = app("bob", Role::Watcher, vec![], None);
    let mut run = |line: &str| {
        app.composer.set(line);
        app.handle(AppEvent::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)))
    };
    assert_eq!(run("/drive"), vec![Effect::DriveRequest]);
    assert_eq!(run("/handover carol"), vec![Effect::DriveGrant("carol".into())]);
    assert_eq!(run("/attach s_9"), vec![Effect::Attach(SessionId("s_9".into()))]);
    assert_eq!(run("/new"), vec![Effect::NewSession]);
    assert_eq!(run("/memory"), vec![Effect::Memory(None)]);
    assert_eq!(run("/memory deploys.md"), vec![Effect::Memory(Some("deploys.md".into()))]);
    assert_eq!(run("/skills"), vec![Effect::Skills]);
    assert_eq!(run("/agents"), vec![Effect::Agents]);
    assert_eq!(run("/diff"), vec![Effect::Diff(false)]);
    assert_eq!(run("/diff --stat"), vec![Effect::Diff(true)]);
    assert_eq!(run("/compact"), vec![Effect::Compact(None)]);
    assert_eq!(
        run("/compact  the failing test  and its fix"),
        vec![Effect::Compact(Some("the failing test  and its fix".into()))]
    );
    app.composer.set("/qu");
    assert_eq!(app.completions(), vec!["/quit"]);
}

#[test]
fn a_compaction_is_one_line_and_resets_the_context_fill() {
    let mut events = turn_start();
    events.push(ev(
        3,
        EventKind::AssistantMessage {
            text: "Reading.".into(),
            tool_calls: vec![],
            usage: Some(Usage { input_tokens: 160_000, output_tokens: 500, ..Usage::default() }),
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        },
    ));
    let mut app = app("alice", Role::Driver, events, None);
    assert!(screen(&app, 120, 8).contains("ctx 160.5k/200.0k (80%)"), "{}", screen(&app, 120, 8));
    app.handle(AppEvent::Server(Box::new(ev(
        3,
        EventKind::CompactionStarted { trigger: outboard_shared::CompactionTrigger::Auto },
    ))));
    assert!(
        screen(&app, 120, 8).contains("compacting the conversation…"),
        "{}",
        screen(&app, 120, 8)
    );
    app.handle(AppEvent::Server(Box::new(ev(
        4,
        EventKind::Compaction {
            summary: "The user wants the build fixed.".into(),
            from_seq: 1,
            kept_from_seq: 3,
            tokens_before: 160_412,
            tokens_after: 31_000,
            trigger: outboard_shared::CompactionTrigger::Auto,
            focus: None,
            usage: None,
        },
    ))));
    let text = screen(&app, 160, 8);
    assert!(
        text.contains(
            "⟳ compacted the conversation (the context window was filling up): ~160,412 → \
             ~31,000 tokens"
        ),
        "{text}"
    );
    assert!(text.contains("ctx 31.0k/200.0k (15%)"), "{text}");
    assert!(!text.contains("compacting the conversation…"), "{text}");
}

#[test]
fn two_terminals_of_one_user_each_show_their_own_role() {
    // Alice drives from one terminal (connection 1) and watches from another (connection 2):
    // the server names connections in presence, and each app takes the role of its own entry.
    let snapshot = |role| SessionAttachResponse {
        session: info("s_1", "alice", "Fix the flaky test"),
        role,
        events: turn_start(),
        in_flight: None,
        has_more: false,
        cursor: None,
        standing: Vec::new(),
    };
    let both = presence_of(&[("alice", Role::Driver, 1), ("alice", Role::Watcher, 2)]);
    let mut driver = App::new(Theme { color: false }, 80, 24);
    connected(&mut driver, "alice", 1);
    driver.handle(AppEvent::Attached(Box::new(snapshot(Role::Driver)), false));
    let mut watcher = App::new(Theme { color: false }, 80, 24);
    connected(&mut watcher, "alice", 2);
    watcher.handle(AppEvent::Attached(Box::new(snapshot(Role::Watcher)), false));
    for app in [&mut driver, &mut watcher] {
        app.handle(AppEvent::Server(Box::new(ev(2, both.clone()))));
    }
    assert!(driver.driving(), "connection 1 drives");
    assert!(!watcher.driving(), "connection 2 only watches, although its user drives elsewhere");

    // The wheel moves to the second terminal (a grant or a take there): the roles swap.
    let swapped = presence_of(&[("alice", Role::Driver, 2), ("alice", Role::Watcher, 1)]);
    for app in [&mut driver, &mut watcher] {
        app.handle(AppEvent::Server(Box::new(ev(2, swapped.clone()))));
    }
    assert!(!driver.driving());
    assert!(watcher.driving());
    // The watcher's composer says so; typing there sends nothing.
    driver.handle(AppEvent::Paste("hello".into()));
    let effects = driver.handle(AppEvent::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)));
    assert!(!effects.iter().any(|e| matches!(e, Effect::Send(_))), "{effects:?}");
}

#[test]
fn a_network_refusal_is_one_line_naming_the_host_the_policy_and_the_fix() {
    let mut events = turn_start();
    events.push(ev(
        3,
        EventKind::Network {
            host: "evil.example".into(),
            port: 443,
            policy: "org acme: registries".into(),
            reason: "evil.example:443 is not allowed by the org's network policy".into(),
            hint: "outboard-server admin network set --org acme registries+ evil.example".into(),
            repeated: 2,
        },
    ));
    let app = app("alice", Role::Driver, events, None);
    let text = screen(&app, 200, 24);
    let line = "⊘ network: evil.example:443 refused (and 2 more times) by org acme: registries: \
                evil.example:443 is not allowed by the org's network policy; outboard-server admin";
    assert!(text.contains(line), "{text}");
    assert!(text.contains("registries+ evil.example"), "{text}");
}

/// A turn of `n` user/assistant exchanges from `seq` on, enough lines to fill a screen.
fn exchanges(mut seq: u64, n: usize, label: &str) -> Vec<SessionEvent> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(ev(
            seq,
            EventKind::UserMessage {
                text: format!("{label} question {i}"),
                attachments: Vec::new(),
            },
        ));
        seq += 1;
        let answer = EventKind::AssistantMessage {
            text: format!("{label} answer {i}"),
            tool_calls: Vec::new(),
            usage: None,
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        };
        out.push(ev(seq, answer));
        seq += 1;
    }
    out
}

#[test]
fn scrolling_up_past_the_oldest_event_loads_and_shows_the_older_page() {
    // The attach brought the newest page only: seq 101.. of a longer session.
    let mut app = App::new(Theme { color: false }, 60, 16);
    connected(&mut app, "alice", MY_CONN);
    let snapshot = SessionAttachResponse {
        session: info("s_1", "alice", "A long session"),
        role: Role::Driver,
        events: exchanges(101, 6, "newer"),
        in_flight: None,
        has_more: true,
        cursor: Some(101),
        standing: Vec::new(),
    };
    app.handle(AppEvent::Attached(Box::new(snapshot), false));
    assert!(screen(&app, 60, 16).contains("newer answer 5"));
    let page_up = AppEvent::Key(KeyEvent::new(KeyCode::PageUp, KeyModifiers::NONE));
    let mut asked = Vec::new();
    for _ in 0..10 {
        asked = app.handle(page_up.clone());
        if !asked.is_empty() {
            break;
        }
    }
    assert_eq!(asked, vec![Effect::LoadOlder(SessionId("s_1".into()), 101)]);
    let top = screen(&app, 60, 16);
    assert!(top.contains("loading older…"), "{top}");
    assert!(top.contains("newer question 0"), "{top}");
    // One fetch at a time.
    assert_eq!(app.handle(page_up.clone()), Vec::new());

    let page = outboard_shared::SessionHistoryResponse {
        events: exchanges(89, 6, "older"),
        has_more: false,
        cursor: 89,
    };
    let scroll = app.scroll;
    app.handle(AppEvent::Older(SessionId("s_1".into()), Ok(Box::new(page))));
    // The page goes above: the view, counted from the bottom, does not move.
    assert_eq!(app.scroll, scroll);
    for _ in 0..10 {
        assert_eq!(app.handle(page_up.clone()), Vec::new(), "nothing older to ask for");
    }
    let top = screen(&app, 60, 16);
    assert!(top.contains("beginning of session"), "{top}");
    assert!(top.contains("older question 0"), "{top}");
    let order: Vec<String> = app
        .cells
        .iter()
        .filter_map(|c| match &c.kind {
            super::app::CellKind::User { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(order.first().map(String::as_str), Some("older question 0"));
    assert_eq!(order.last().map(String::as_str), Some("newer question 5"));
    assert_eq!(app.last_seq, 112, "the live position is the newest event's, not the page's");
}

#[test]
fn a_tool_call_split_by_a_page_boundary_is_one_cell() {
    // The newest page starts with the result of a call whose input is in the older page.
    let mut app = App::new(Theme { color: false }, 80, 16);
    connected(&mut app, "alice", MY_CONN);
    let result = EventKind::ToolResult {
        call_id: "c1".into(),
        name: "Bash".into(),
        output: "built".into(),
        is_error: false,
        duration_ms: 7,
        attachments: Vec::new(),
    };
    let snapshot = SessionAttachResponse {
        session: info("s_1", "alice", "A long session"),
        role: Role::Driver,
        events: vec![ev(10, result)],
        in_flight: None,
        has_more: true,
        cursor: Some(10),
        standing: Vec::new(),
    };
    app.handle(AppEvent::Attached(Box::new(snapshot), false));
    let call =
        ToolCall { call_id: "c1".into(), name: "Bash".into(), input: json!({"command": "make"}) };
    let page = outboard_shared::SessionHistoryResponse {
        events: vec![
            ev(7, EventKind::TurnStarted { turn_id: TurnId("t".into()), by: "alice".into() }),
            ev(
                8,
                EventKind::AssistantMessage {
                    text: String::new(),
                    tool_calls: vec![call.clone()],
                    usage: None,
                    reasoning: Vec::new(),
                    model: None,
                    searches: Vec::new(),
                },
            ),
            ev(9, EventKind::ToolCall { call, target_before: None }),
        ],
        has_more: false,
        cursor: 7,
    };
    app.handle(AppEvent::Older(SessionId("s_1".into()), Ok(Box::new(page))));
    let tools: Vec<&super::app::ToolCell> = app
        .cells
        .iter()
        .filter_map(|c| match &c.kind {
            super::app::CellKind::Tool(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0].input, json!({"command": "make"}));
    assert_eq!(tools[0].result, Some((false, "built".into(), 7)));
    assert!(screen(&app, 80, 16).contains("make"), "{}", screen(&app, 80, 16));
}

#[test]
fn agents_lists_the_built_in_type_then_the_orgs_with_their_tools_and_problems() {
    let agent =
        |name: &str, tools: Option<Vec<&str>>, problem: Option<&str>| outboard_shared::AgentInfo {
            name: name.into(),
            description: format!("{name} things"),
            tools: tools.map(|t| t.into_iter().map(str::to_owned).collect()),
            model: None,
            path: format!("/agents/{name}.md"),
            version: 2,
            author: "alice".into(),
            warnings: if name == "reader" {
                vec!["WebSearch is not a subagent tool".into()]
            } else {
                vec![]
            },
            problem: problem.map(str::to_owned),
        };
    let list = outboard_shared::AgentsListResponse {
        agents: vec![
            agent("reader", Some(vec!["Read", "Grep"]), None),
            agent("broken", None, Some("no description")),
        ],
        omitted: 0,
    };
    assert_eq!(
        super::net::agents_text(&list),
        "agent types for the Task tool:\n  general-purpose: built in (tools: all)\n  \
         reader: reader things (tools: Read, Grep; v2) — WebSearch is not a subagent tool\n  \
         broken: broken things (tools: all; v2) — unusable: no description"
    );
    let none = outboard_shared::AgentsListResponse { agents: vec![], omitted: 0 };
    assert!(super::net::agents_text(&none).contains("`outboard agents import DIR`"));
}

#[test]
fn the_status_line_counts_the_sessions_total_then_every_call_and_estimates_the_cost() {
    let mut app = App::new(Theme { color: false }, 120, 8);
    connected(&mut app, "alice", MY_CONN);
    let mut session = info("s_1", "alice", "Fix the flaky test");
    // Calls made before the attach, on pages never loaded.
    session.usage = Some(Usage { input_tokens: 1_000_000, output_tokens: 0, ..Usage::default() });
    let snapshot = SessionAttachResponse {
        session,
        role: Role::Driver,
        events: turn_start(),
        in_flight: None,
        has_more: true,
        cursor: Some(1),
        standing: Vec::new(),
    };
    app.handle(AppEvent::Attached(Box::new(snapshot), false));
    let last = app.last_seq;
    let status = |app: &App| screen(app, 120, 8).lines().last().unwrap_or_default().to_owned();
    // claude-sonnet-4-5 lists at $3 per million input tokens.
    assert!(
        status(&app).contains("claude-sonnet-4-5 ~$3.00") && status(&app).contains("1.0M in 0 out"),
        "{}",
        status(&app)
    );
    for (i, text) in ["One.", "Two."].into_iter().enumerate() {
        app.handle(AppEvent::Server(Box::new(ev(
            last + 1 + i as u64,
            EventKind::AssistantMessage {
                text: text.into(),
                tool_calls: vec![],
                usage: Some(Usage { input_tokens: 0, output_tokens: 100_000, ..Usage::default() }),
                reasoning: Vec::new(),
                model: None,
                searches: Vec::new(),
            },
        ))));
    }
    // $15 per million output tokens: 200k more is $3.
    assert!(
        status(&app).contains("~$6.00") && status(&app).contains("1.0M in 200.0k out"),
        "{}",
        status(&app)
    );
}

#[test]
fn thinking_is_one_folded_line_that_ctrl_o_opens() {
    let mut events = turn_start();
    events.push(ev(
        3,
        EventKind::AssistantMessage {
            text: "The tests pass.".into(),
            tool_calls: vec![],
            usage: None,
            reasoning: vec![
                outboard_shared::Reasoning::Thinking {
                    thinking: "Run the suite first, then read the failures.".into(),
                    signature: "sig".into(),
                },
                outboard_shared::Reasoning::RedactedThinking { data: "opaque-data".into() },
            ],
            model: Some("anthropic/claude-sonnet-4-5".into()),
            searches: Vec::new(),
        },
    ));
    let mut app = app("alice", Role::Driver, events, None);
    let folded = screen(&app, 80, 24);
    assert!(folded.contains("✻ Thought for 8 words (Ctrl-O shows it)"), "{folded}");
    assert!(!folded.contains("read the failures"), "{folded}");
    app.handle(AppEvent::Key(KeyEvent::new(KeyCode::Char('o'), KeyModifiers::CONTROL)));
    let open = screen(&app, 80, 24);
    assert!(open.contains("Run the suite first, then read the failures."), "{open}");
    // The encrypted block is never shown.
    assert!(!open.contains("opaque-data"), "{open}");
    assert!(open.contains("thinking shown whole (Ctrl-O)"), "{open}");
}

/// A key pressed by someone who has seen the screen: a frame was drawn, and the key comes a
/// prompt's quiet time after it (see `app::guard`; `keys_tests` times keys by hand).
fn press(app: &mut App, code: KeyCode) -> Vec<Effect> {
    app.drawn(app.now);
    let at = app.now + super::app::guard::QUIET_MS;
    app.handle_at(at, AppEvent::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

fn type_text(app: &mut App, text: &str) {
    for c in text.chars() {
        press(app, KeyCode::Char(c));
    }
}

fn plan_request(seq: u64) -> SessionEvent {
    let plan = "# Add a --plan flag\n\n1. Parse --plan in cli/src/args.rs.\n2. Call session/set_mode before the turn.\n3. Test it end to end.";
    ev(
        seq,
        EventKind::ApprovalRequested {
            call_id: "p1".into(),
            name: "ExitPlanMode".into(),
            input: json!({"plan": plan}),
            rule: "ExitPlanMode".into(),
            covers: None,
            unjudged: None,
            kind: outboard_shared::ApprovalKind::Plan,
            path: Some("/plans/2026-12-04-add-a-plan-flag.md".into()),
            plan: Some(plan.into()),
            questions: None,
        },
    )
}

fn plan_mode(seq: u64) -> SessionEvent {
    ev(seq, EventKind::ModeChanged { mode: outboard_shared::SessionMode::Plan, by: "alice".into() })
}

/// Plan mode shows in the status line; a proposed plan is shown whole with its keys: `n` keeps
/// planning with the reason typed, `y` approves.
#[test]
fn a_plan_waits_for_approval_shown_whole() {
    let mut events = vec![plan_mode(1)];
    events.extend(turn_start().into_iter().map(|mut e| {
        e.seq += 1;
        e
    }));
    events.push(plan_request(4));
    let mut app = app("alice", Role::Driver, events, None);
    insta::assert_snapshot!(screen(&app, 100, 30));
    assert_eq!(press(&mut app, KeyCode::Char('a')), vec![], "no allow-for-session for a plan");
    press(&mut app, KeyCode::Char('n'));
    type_text(&mut app, "use the existing flag parser");
    let sent = press(&mut app, KeyCode::Enter);
    let Some(Effect::Answer(answer)) = sent.first() else { panic!("{sent:?}") };
    assert_eq!(
        (answer.decision, answer.reason.as_deref()),
        (outboard_shared::ApprovalDecision::Deny, Some("use the existing flag parser"))
    );
    let Some(Effect::Answer(approved)) = press(&mut app, KeyCode::Char('y')).first().cloned()
    else {
        panic!("y approves")
    };
    assert_eq!(approved.decision, outboard_shared::ApprovalDecision::Allow);
}

/// The model's questions are choices: a digit picks, `o` types another answer, and the answers
/// go once every question has one.
#[test]
fn questions_are_shown_as_choices() {
    let questions: Vec<outboard_shared::Question> = serde_json::from_value(json!([
        {"question": "Which database?", "header": "DB", "options": [
            {"label": "SQLite", "description": "one file, no server"},
            {"label": "PostgreSQL", "description": "the production one"}]},
        {"question": "Which port?", "header": "Port", "options": [
            {"label": "80", "description": ""}, {"label": "443", "description": ""}]}
    ]))
    .unwrap();
    let mut events = turn_start();
    events.push(ev(
        3,
        EventKind::ApprovalRequested {
            call_id: "q1".into(),
            name: "AskUserQuestion".into(),
            input: json!({}),
            rule: "AskUserQuestion".into(),
            covers: None,
            unjudged: None,
            kind: outboard_shared::ApprovalKind::Question,
            path: None,
            plan: None,
            questions: Some(questions),
        },
    ));
    let mut app = app("alice", Role::Driver, events, None);
    insta::assert_snapshot!(screen(&app, 80, 24));
    assert_eq!(press(&mut app, KeyCode::Char('2')), vec![], "one question of two answered");
    press(&mut app, KeyCode::Char('o'));
    type_text(&mut app, "8080");
    let sent = press(&mut app, KeyCode::Enter);
    let Some(Effect::Answer(answer)) = sent.first() else { panic!("{sent:?}") };
    assert_eq!(answer.answers, Some(vec!["PostgreSQL".to_owned(), "8080".to_owned()]));
    assert_eq!(answer.decision, outboard_shared::ApprovalDecision::Allow);
}

/// Shift-Tab and `/plan` switch the mode (the driver only); `/plans` lists the org's plans.
#[test]
fn shift_tab_and_slash_plan_switch_the_mode() {
    let mut app = app("alice", Role::Driver, vec![], None);
    assert_eq!(
        press(&mut app, KeyCode::BackTab),
        vec![Effect::SetMode(outboard_shared::SessionMode::Plan)]
    );
    let last = app.last_seq;
    app.handle(AppEvent::Server(Box::new(plan_mode(last + 1))));
    type_text(&mut app, "/plan");
    assert_eq!(
        press(&mut app, KeyCode::Enter),
        vec![Effect::SetMode(outboard_shared::SessionMode::Default)]
    );
    type_text(&mut app, "/plans");
    assert_eq!(press(&mut app, KeyCode::Enter), vec![Effect::Plans]);
    let mut watcher = super::tests::app("bob", Role::Watcher, vec![], None);
    assert_eq!(press(&mut watcher, KeyCode::BackTab), vec![]);
}

#[test]
fn rewind_and_fork_commands_and_esc_esc() {
    let mut app = app("alice", Role::Driver, vec![], None);
    let key = |c| AppEvent::Key(KeyEvent::new(c, KeyModifiers::NONE));
    // Esc Esc on an empty composer lists the checkpoints; a key between disarms it.
    assert_eq!(app.handle(key(KeyCode::Esc)), vec![]);
    app.handle(key(KeyCode::Left));
    assert_eq!(app.handle(key(KeyCode::Esc)), vec![]);
    assert_eq!(app.handle(key(KeyCode::Esc)), vec![Effect::Checkpoints]);
    let run = |app: &mut App, line: &str| {
        app.composer.set(line);
        app.handle(key(KeyCode::Enter))
    };
    assert_eq!(
        run(&mut app, "/rewind 2"),
        vec![Effect::Rewind { n: 2, code: true, conversation: true }]
    );
    assert_eq!(
        run(&mut app, "/rewind 3 code"),
        vec![Effect::Rewind { n: 3, code: true, conversation: false }]
    );
    assert_eq!(
        run(&mut app, "/rewind 3 conversation"),
        vec![Effect::Rewind { n: 3, code: false, conversation: true }]
    );
    assert_eq!(run(&mut app, "/rewind x"), vec![]);
    assert_eq!(run(&mut app, "/fork"), vec![Effect::Fork(None)]);
    assert_eq!(run(&mut app, "/fork 4"), vec![Effect::Fork(Some(4))]);
    // The rewound prompt comes back into the composer; a fork attaches to the new session.
    app.handle(AppEvent::Rewound("fix the build".into()));
    assert_eq!(app.composer.text(), "fix the build");
    let forked = app.handle(AppEvent::Forked(SessionId("s_f".into()), Some("again".into())));
    assert_eq!(forked, vec![Effect::Attach(SessionId("s_f".into()))]);
    assert_eq!(app.composer.text(), "again");

    let mut watcher = app_of_watcher();
    assert_eq!(run(&mut watcher, "/rewind 1"), vec![]);
    assert!(watcher.notice.as_deref().unwrap_or_default().contains("only the driver"));
}

/// `/rewind`'s answer opens the picker for the driver: ↑↓ and Enter pick a checkpoint, then
/// what to restore; the screen shows both steps. A watcher gets the list in the transcript.
#[test]
fn the_rewind_picker_picks_a_checkpoint_and_what_to_restore() {
    let checkpoint = |n: u32, prompt: &str| outboard_shared::CheckpointInfo {
        n,
        prompt: prompt.into(),
        by: "alice".into(),
        ts: "2026-12-04T20:00:00Z".into(),
        seq: u64::from(n) * 10,
        code: true,
        current: true,
        dropped: false,
    };
    let listed = || Ok(vec![checkpoint(1, "make hello.py"), checkpoint(2, "now in rust")]);
    let mut app = app("alice", Role::Driver, vec![], None);
    let key = |c| AppEvent::Key(KeyEvent::new(c, KeyModifiers::NONE));
    assert_eq!(app.handle(AppEvent::Checkpoints(listed())), vec![]);
    let shown = screen(&app, 100, 24);
    assert!(shown.contains("rewind to the state before which prompt?"), "{shown}");
    assert!(shown.contains("make hello.py") && shown.contains("› "), "{shown}");
    app.drawn(0);
    // The newest is highlighted; up to the first, Enter, then down to "conversation only".
    assert_eq!(app.handle(key(KeyCode::Up)), vec![]);
    assert_eq!(app.handle(key(KeyCode::Enter)), vec![]);
    let shown = screen(&app, 100, 24);
    assert!(shown.contains("checkpoint 1: restore what?"), "{shown}");
    assert!(shown.contains("3  code only"), "{shown}");
    assert_eq!(app.handle(key(KeyCode::Down)), vec![]);
    assert_eq!(
        app.handle(key(KeyCode::Enter)),
        vec![Effect::Rewind { n: 1, code: false, conversation: true }]
    );
    assert!(app.rewind_picker.is_none());
    // Keys while it is open never reach the composer; Esc closes it.
    app.handle(AppEvent::Checkpoints(listed()));
    app.drawn(0);
    app.handle(key(KeyCode::Char('x')));
    assert_eq!(app.composer.text(), "");
    app.handle(key(KeyCode::Esc));
    assert!(app.rewind_picker.is_none());

    let mut watcher = app_of_watcher();
    watcher.handle(AppEvent::Checkpoints(listed()));
    assert!(watcher.rewind_picker.is_none());
    let shown = screen(&watcher, 100, 24);
    assert!(shown.contains("checkpoints (the state just before each prompt)"), "{shown}");
}

fn app_of_watcher() -> App {
    app("bob", Role::Watcher, vec![], None)
}

fn turn_end(seq: u64, stop_reason: StopReason) -> SessionEvent {
    ev(
        seq,
        EventKind::TurnCompleted {
            turn_id: TurnId("t_1".into()),
            stop_reason,
            usage: Usage::default(),
        },
    )
}

#[test]
fn a_message_sent_while_a_turn_runs_is_queued_and_goes_out_when_it_ends() {
    let mut app = app("alice", Role::Driver, turn_start(), None);
    assert!(app.running);
    type_text(&mut app, "next one");
    assert_eq!(press(&mut app, KeyCode::Enter), vec![]);
    type_text(&mut app, "and more");
    assert_eq!(press(&mut app, KeyCode::Enter), vec![]);
    assert_eq!(app.composer.text(), "");
    assert_eq!(app.queued.as_deref(), Some("next one\n\nand more"));
    let shown = screen(&app, 100, 12);
    assert!(shown.contains("3 lines queued for the turn's end"), "{shown}");
    assert!(shown.contains("queued: sent when this turn ends"), "{shown}");
    let sent = app.handle(AppEvent::Server(Box::new(turn_end(3, StopReason::EndTurn))));
    assert_eq!(sent, vec![Effect::Send("next one\n\nand more".into())]);
    assert_eq!(app.queued, None);
    // Nothing queued, nothing running: Enter sends at once, as before.
    type_text(&mut app, "now");
    assert_eq!(press(&mut app, KeyCode::Enter), vec![Effect::Send("now".into())]);
}

#[test]
fn an_interrupted_turn_or_a_lost_wheel_returns_the_queued_message_to_the_composer() {
    let mut app = app("alice", Role::Driver, turn_start(), None);
    type_text(&mut app, "later");
    press(&mut app, KeyCode::Enter);
    type_text(&mut app, "draft");
    assert_eq!(press(&mut app, KeyCode::Esc), vec![Effect::Interrupt]);
    let sent = app.handle(AppEvent::Server(Box::new(turn_end(3, StopReason::Interrupted))));
    assert_eq!(sent, vec![]);
    assert_eq!(app.queued, None);
    assert_eq!(app.composer.text(), "later\n\ndraft");

    let mut other = self::app("alice", Role::Driver, turn_start(), None);
    type_text(&mut other, "mine");
    press(&mut other, KeyCode::Enter);
    let bob_drives = presence(&[("bob", Role::Driver), ("alice", Role::Watcher)], "alice");
    assert_eq!(other.handle(AppEvent::Server(Box::new(ev(3, bob_drives)))), vec![]);
    assert_eq!(other.queued, None);
    assert_eq!(other.composer.text(), "mine");
    let sent = other.handle(AppEvent::Server(Box::new(turn_end(4, StopReason::EndTurn))));
    assert_eq!(sent, vec![]);
}

#[test]
fn a_message_sent_before_the_attach_is_answered_waits_for_it() {
    let attach = |role| {
        AppEvent::Attached(
            Box::new(SessionAttachResponse {
                session: info("s_1", "alice", "Fix the flaky test"),
                role,
                events: Vec::new(),
                in_flight: None,
                has_more: false,
                cursor: None,
                standing: Vec::new(),
            }),
            false,
        )
    };
    // Connected, not attached yet: the message waits instead of being refused as a watcher's.
    let mut app = App::new(Theme { color: false }, 80, 24);
    connected(&mut app, "alice", MY_CONN);
    type_text(&mut app, "hello early");
    assert_eq!(press(&mut app, KeyCode::Enter), vec![]);
    assert_eq!(app.queued.as_deref(), Some("hello early"));
    assert!(screen(&app, 100, 12).contains("queued: sent once the session is attached"));
    assert_eq!(app.handle(attach(Role::Driver)), vec![Effect::Send("hello early".into())]);
    assert_eq!(app.queued, None);

    // Attached as a watcher: it comes back to the composer, not sent.
    let mut app = App::new(Theme { color: false }, 80, 24);
    connected(&mut app, "bob", MY_CONN);
    type_text(&mut app, "mine");
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.handle(attach(Role::Watcher)), vec![]);
    assert_eq!(app.queued, None);
    assert_eq!(app.composer.text(), "mine");
}

#[test]
fn the_queued_message_has_a_bound() {
    let mut app = app("alice", Role::Driver, turn_start(), None);
    let big = "x".repeat(super::app::MAX_QUEUED - 4);
    app.handle(AppEvent::Paste(big.clone()));
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.queued.as_ref().map(String::len), Some(big.len()));
    // Two bytes of separator and three of text pass the bound by one: refused, kept.
    type_text(&mut app, "abc");
    assert_eq!(press(&mut app, KeyCode::Enter), vec![]);
    assert_eq!(app.composer.text(), "abc");
    assert!(app.notice.as_deref().is_some_and(|n| n.contains("queued message is full")));
    assert_eq!(app.queued.as_ref().map(String::len), Some(big.len()));
}
