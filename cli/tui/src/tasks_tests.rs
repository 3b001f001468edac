//! Snapshot tests of the todo panel and `/tasks` (see [`super::tasks`]), drawn like the other
//! screens in `tests.rs`: an [`App`] fed events as the runtime feeds them, on a `TestBackend`.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use outboard_shared::{
    EventKind, PresenceEntry, Role, SessionAttachResponse, SessionEvent, SessionId, TaskStatus,
    TodoItem, TodoStatus, TurnId,
};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::app::{App, AppEvent, ConnState, Effect, Me};
use super::render;
use super::theme::Theme;

const MY_CONN: u64 = 7;

fn ev(seq: u64, kind: EventKind) -> SessionEvent {
    SessionEvent { session_id: SessionId("s_1".into()), seq, ts: String::new(), kind, parent: None }
}

fn todo(content: &str, status: TodoStatus, active: &str) -> TodoItem {
    TodoItem { content: content.into(), status, active_form: active.into() }
}

fn task(shell_id: &str, command: &str, status: TaskStatus, exit_code: Option<i32>) -> EventKind {
    EventKind::BackgroundTask {
        shell_id: shell_id.into(),
        command: command.into(),
        status,
        exit_code,
    }
}

/// An app attached to s_1 (alice's) as `me` in `role`, with `events` in the snapshot.
fn app(me: &str, role: Role, events: Vec<SessionEvent>) -> App {
    let mut app = App::new(Theme { color: false }, 80, 24);
    let who = Me { user: me.into(), connection_id: MY_CONN };
    app.handle(AppEvent::Connection(ConnState::Connected, Some(who)));
    let session = super::tests::info("s_1", "alice", "Fix the flaky test");
    let snapshot = SessionAttachResponse {
        session,
        role,
        events,
        in_flight: None,
        has_more: false,
        cursor: None,
        standing: Vec::new(),
    };
    app.handle(AppEvent::Attached(Box::new(snapshot), false));
    let attached = vec![
        PresenceEntry {
            user: "alice".into(),
            role: Role::Driver,
            client: "outboard-cli".into(),
            connection_id: if role == Role::Driver { MY_CONN } else { 100 },
        },
        PresenceEntry {
            user: "bob".into(),
            role: Role::Watcher,
            client: "outboard-cli".into(),
            connection_id: if role == Role::Watcher { MY_CONN } else { 101 },
        },
    ];
    let last = app.last_seq;
    app.handle(AppEvent::Server(Box::new(ev(last, EventKind::Presence { attached }))));
    app
}

fn screen(app: &App, w: u16, h: u16) -> String {
    let mut app = app.clone();
    app.handle(AppEvent::Resize(w, h));
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| render::draw(&app, f)).unwrap();
    terminal.backend().to_string()
}

fn enter(app: &mut App, line: &str) -> Vec<Effect> {
    app.handle(AppEvent::Paste(line.into()));
    app.handle(AppEvent::Key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)))
}

fn planned() -> Vec<SessionEvent> {
    vec![
        ev(1, EventKind::TurnStarted { turn_id: TurnId("t_1".into()), by: "alice".into() }),
        ev(
            2,
            EventKind::UserMessage { text: "Fix the flaky test".into(), attachments: Vec::new() },
        ),
        ev(
            3,
            EventKind::Todos {
                todos: vec![
                    todo("Reproduce the flake", TodoStatus::Completed, "Reproducing the flake"),
                    todo("Fix the race", TodoStatus::InProgress, "Fixing the race"),
                    todo("Run the suite 50 times", TodoStatus::Pending, "Running the suite"),
                ],
            },
        ),
    ]
}

#[test]
fn the_todo_panel_for_a_watcher() {
    let app = app("bob", Role::Watcher, planned());
    insta::assert_snapshot!(screen(&app, 80, 20));
}

#[test]
fn a_new_list_replaces_the_panel_and_an_empty_one_removes_it() {
    let mut app = app("alice", Role::Driver, planned());
    let done = vec![todo("Reproduce the flake", TodoStatus::Completed, "Reproducing")];
    app.handle(AppEvent::Server(Box::new(ev(4, EventKind::Todos { todos: done }))));
    assert!(screen(&app, 80, 20).contains("Todos 1/1"));
    app.handle(AppEvent::Server(Box::new(ev(5, EventKind::Todos { todos: vec![] }))));
    assert!(!screen(&app, 80, 20).contains("Todos"));
}

#[test]
fn tasks_lists_background_commands_and_the_driver_kills_one() {
    let mut events = planned();
    events.push(ev(4, task("bash_1f2e3d4c", "npm run dev", TaskStatus::Running, None)));
    events.push(ev(5, task("bash_77aa0b1c", "cargo test", TaskStatus::Running, None)));
    events.push(ev(6, task("bash_77aa0b1c", "cargo test", TaskStatus::Completed, Some(101))));
    let mut driver = app("alice", Role::Driver, events.clone());
    assert!(enter(&mut driver, "/tasks").is_empty());
    insta::assert_snapshot!(screen(&driver, 80, 20));

    let effects = enter(&mut driver, "/tasks kill bash_1f2e3d4c");
    assert_eq!(effects, [Effect::KillTask("bash_1f2e3d4c".into())]);
    assert!(enter(&mut driver, "/tasks kill bash_77aa0b1c").is_empty(), "it has ended");
    assert_eq!(driver.notice.as_deref(), Some("bash_77aa0b1c is not running (see /tasks)"));

    let mut watcher = app("bob", Role::Watcher, events);
    assert!(enter(&mut watcher, "/tasks kill bash_1f2e3d4c").is_empty());
    assert!(watcher.notice.as_deref().unwrap_or("").starts_with("only the driver"));
    // The kill's event reaches everyone: the list shows it killed.
    watcher.handle(AppEvent::Server(Box::new(ev(
        7,
        task("bash_1f2e3d4c", "npm run dev", TaskStatus::Killed, None),
    ))));
    assert!(!watcher.work.is_running("bash_1f2e3d4c"));
    assert!(screen(&watcher, 80, 20).contains("bash_1f2e3d4c killed: npm run dev"));
}
