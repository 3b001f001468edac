//! Subagents in the TUI (see [`super::subagents`]): a `Task` call and its child's events as one
//! group, from crafted event sequences fed to an [`App`] as the runtime feeds them, drawn on a
//! `TestBackend` like the screens of `tests.rs`.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use outboard_shared::{
    EventKind, InFlight, OutputStream, PresenceEntry, Role, SessionAttachResponse, SessionEvent,
    SessionHistoryResponse, SessionId, StopReason, ToolCall, ToolOutputSoFar, TurnId, Usage,
};
use pretty_assertions::assert_eq;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::{json, Value};

use super::app::{App, AppEvent, ConnState, Me};
use super::render;
use super::subagents::{CHILD_ITEMS_EXPANDED, CHILD_ITEMS_SHOWN};
use super::theme::Theme;

const MY_CONN: u64 = 7;

/// A session's log as the server would send it: durable events take the next `seq`, transient
/// ones carry the last.
struct Log {
    seq: u64,
    events: Vec<SessionEvent>,
}

impl Log {
    fn new(first_seq: u64) -> Self {
        Log { seq: first_seq - 1, events: Vec::new() }
    }

    fn push(&mut self, parent: Option<&str>, kind: EventKind) -> &mut Self {
        if kind.is_durable() {
            self.seq += 1;
        }
        self.events.push(SessionEvent {
            session_id: SessionId("s_1".into()),
            seq: self.seq,
            ts: String::new(),
            kind,
            parent: parent.map(str::to_owned),
        });
        self
    }

    /// An event of the session's main loop.
    fn main(&mut self, kind: EventKind) -> &mut Self {
        self.push(None, kind)
    }

    /// An event of the subagent of the `Task` call `parent`.
    fn child(&mut self, parent: &str, kind: EventKind) -> &mut Self {
        self.push(Some(parent), kind)
    }

    fn take(&mut self) -> Vec<SessionEvent> {
        std::mem::take(&mut self.events)
    }
}

fn call(id: &str, name: &str, input: Value) -> ToolCall {
    ToolCall { call_id: id.into(), name: name.into(), input }
}

fn task_call(id: &str, description: &str) -> ToolCall {
    call(
        id,
        "Task",
        json!({"description": description, "prompt": format!("Please {description}."),
               "subagent_type": "general-purpose"}),
    )
}

fn message(text: &str, calls: Vec<ToolCall>, usage: Option<Usage>) -> EventKind {
    EventKind::AssistantMessage {
        text: text.into(),
        tool_calls: calls,
        usage,
        reasoning: Vec::new(),
        model: None,
        searches: Vec::new(),
    }
}

fn tool_call(c: ToolCall) -> EventKind {
    EventKind::ToolCall { call: c, target_before: None }
}

fn result(id: &str, name: &str, output: &str, is_error: bool, ms: u64) -> EventKind {
    EventKind::ToolResult {
        call_id: id.into(),
        name: name.into(),
        output: output.into(),
        is_error,
        duration_ms: ms,
        attachments: Vec::new(),
    }
}

fn delta(text: &str) -> EventKind {
    EventKind::AssistantDelta { text: text.into() }
}

fn turn_started(log: &mut Log, text: &str) {
    log.main(EventKind::TurnStarted { turn_id: TurnId("t_1".into()), by: "alice".into() });
    log.main(EventKind::UserMessage { text: text.into(), attachments: Vec::new() });
}

fn turn_completed(stop_reason: StopReason) -> EventKind {
    EventKind::TurnCompleted {
        turn_id: TurnId("t_1".into()),
        stop_reason,
        usage: Usage { input_tokens: 5_000, output_tokens: 300, ..Usage::default() },
    }
}

/// The main loop starts the subagent `id`: its message with the call, the call's `tool_call`,
/// the child's prompt.
fn start_task(log: &mut Log, id: &str, description: &str) {
    log.main(message("", vec![task_call(id, description)], None));
    log.main(tool_call(task_call(id, description)));
    log.child(
        id,
        EventKind::UserMessage { text: format!("Please {description}."), attachments: Vec::new() },
    );
}

/// An app attached to s_1 (alice's) as `me` in `role` with `events`, `in_flight` when mid-turn.
fn app_with(
    me: &str,
    role: Role,
    events: Vec<SessionEvent>,
    in_flight: Option<InFlight>,
    page: (bool, Option<u64>),
) -> App {
    let mut app = App::new(Theme { color: false }, 80, 24);
    let who = Me { user: me.into(), connection_id: MY_CONN };
    app.handle(AppEvent::Connection(ConnState::Connected, Some(who)));
    let snapshot = SessionAttachResponse {
        session: super::tests::info("s_1", "alice", "Fix the flaky test"),
        role,
        events,
        in_flight,
        has_more: page.0,
        cursor: page.1,
        standing: Vec::new(),
    };
    app.handle(AppEvent::Attached(Box::new(snapshot), false));
    let entry = |user: &str, role, connection_id| PresenceEntry {
        user: user.into(),
        role,
        client: "outboard-cli".into(),
        connection_id,
    };
    let attached = match role {
        Role::Driver => vec![entry(me, Role::Driver, MY_CONN), entry("bob", Role::Watcher, 100)],
        Role::Watcher => vec![entry("alice", Role::Driver, 100), entry(me, Role::Watcher, MY_CONN)],
    };
    let last = app.last_seq;
    live(&mut app, vec![presence_event(last, attached)]);
    app
}

fn presence_event(seq: u64, attached: Vec<PresenceEntry>) -> SessionEvent {
    SessionEvent {
        session_id: SessionId("s_1".into()),
        seq,
        ts: String::new(),
        kind: EventKind::Presence { attached },
        parent: None,
    }
}

fn app(events: Vec<SessionEvent>) -> App {
    app_with("alice", Role::Driver, events, None, (false, None))
}

fn live(app: &mut App, events: Vec<SessionEvent>) {
    for e in events {
        app.handle(AppEvent::Server(Box::new(e)));
    }
}

fn ctrl_o(app: &mut App) {
    let effects =
        app.handle(AppEvent::Key(KeyEvent::new(KeyCode::Char('o'), KeyModifiers::CONTROL)));
    assert_eq!(effects, Vec::new(), "Ctrl-O only changes the view");
}

fn screen(app: &App, w: u16, h: u16) -> String {
    let mut app = app.clone();
    app.handle(AppEvent::Resize(w, h));
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| render::draw(&app, f)).unwrap();
    terminal.backend().to_string()
}

/// The screen's lines holding `needle`.
fn lines_with(text: &str, needle: &str) -> Vec<String> {
    // `TestBackend` draws each row in quotes.
    text.lines()
        .filter(|l| l.contains(needle))
        .map(|l| l.trim_matches('"').trim_end().to_owned())
        .collect()
}

/// A child that runs Bash, then Write, then reports.
fn bash_then_write(log: &mut Log, id: &str) {
    log.child(id, delta("I'll run the tests first."));
    log.child(
        id,
        message(
            "I'll run the tests first.",
            vec![call("k1", "Bash", json!({"command": "cargo test -p store"}))],
            Some(Usage { input_tokens: 1_800, output_tokens: 40, ..Usage::default() }),
        ),
    );
    log.child(id, tool_call(call("k1", "Bash", json!({"command": "cargo test -p store"}))));
    log.child(
        id,
        EventKind::ToolOutputDelta {
            call_id: "k1".into(),
            stream: OutputStream::Stdout,
            text: "running 12 tests\n".into(),
        },
    );
    log.child(
        id,
        result("k1", "Bash", "running 12 tests\ntest a ... FAILED\nExit code 101", true, 2_300),
    );
    let write =
        call("k2", "Write", json!({"file_path": "/workspace/notes.md", "content": "race\n"}));
    log.child(id, message("", vec![write.clone()], None));
    log.child(id, tool_call(write));
    log.child(id, result("k2", "Write", "ok", false, 3));
}

const REPORT: &str = "The test races the writer.\n\nThe reader sees `last_seq` before the commit.";

#[test]
fn a_child_with_bash_and_write_then_its_report_is_one_group() {
    let mut log = Log::new(1);
    turn_started(&mut log, "Why does the test flake?");
    start_task(&mut log, "c_task", "find the flake");
    let mut app = app(log.take());
    assert!(app.running);

    bash_then_write(&mut log, "c_task");
    let events = log.take();
    // The child's delta streams into its group, never into the main assistant text.
    live(&mut app, events[..1].to_vec());
    assert_eq!(app.streaming, "", "a child's text is not the main loop's");
    let text = screen(&app, 80, 24);
    assert!(text.contains("  │ I'll run the tests first."), "{text}");
    live(&mut app, events[1..].to_vec());
    let running = screen(&app, 80, 24);
    insta::assert_snapshot!("task_running_with_bash_and_write", running);

    log.child(
        "c_task",
        message(
            REPORT,
            vec![],
            Some(Usage { input_tokens: 2_400, output_tokens: 90, ..Usage::default() }),
        ),
    );
    log.main(result("c_task", "Task", REPORT, false, 12_300));
    log.main(delta("It is a race; see the report."));
    log.main(message("It is a race; see the report.", vec![], None));
    log.main(turn_completed(StopReason::EndTurn));
    live(&mut app, log.take());
    let done = screen(&app, 80, 24);
    // Folded once done: the header with its counts, the report's first line.
    assert_eq!(
        lines_with(&done, "Task("),
        ["✓ Task(find the flake) · general-purpose · 2 tool uses · 2.5k tokens · 12.3 s"]
    );
    assert!(done.contains("  └ The test races the writer. … · ctrl-o expands"), "{done}");
    assert!(!done.contains("cargo test -p store"), "a finished group is folded: {done}");
    assert!(done.contains("It is a race; see the report."), "{done}");
    insta::assert_snapshot!("task_done_folded", done);
}

#[test]
fn ctrl_o_shows_every_group_whole_and_folds_them_again() {
    let mut log = Log::new(1);
    turn_started(&mut log, "Why does the test flake?");
    start_task(&mut log, "c_task", "find the flake");
    bash_then_write(&mut log, "c_task");
    log.child("c_task", message(REPORT, vec![], None));
    log.main(result("c_task", "Task", REPORT, false, 12_300));
    log.main(turn_completed(StopReason::EndTurn));
    let mut app = app(log.take());
    let folded = screen(&app, 80, 24);
    assert!(!folded.contains("Bash cargo test"), "{folded}");

    ctrl_o(&mut app);
    let whole = screen(&app, 80, 24);
    assert!(whole.contains("  │ › Please find the flake."), "{whole}");
    assert!(whole.contains("  │ ✗ Bash cargo test -p store · exit 101 · 2.3 s"), "{whole}");
    assert!(whole.contains("  │ ✓ Write /workspace/notes.md · done · 3 ms"), "{whole}");
    // The report is the result, once (not also as the child's last message).
    assert_eq!(lines_with(&whole, "The test races the writer.").len(), 1, "{whole}");
    assert!(whole.contains("  └ The test races the writer."), "{whole}");
    assert!(whole.contains("    The reader sees last_seq before the commit."), "{whole}");
    insta::assert_snapshot!("task_done_expanded", whole);

    ctrl_o(&mut app);
    assert_eq!(app.notice.as_deref(), Some("subagents' work folded (Ctrl-O)"));
    app.notice = None;
    assert_eq!(screen(&app, 80, 24), folded);
}

#[test]
fn a_running_child_shows_its_newest_items_and_how_many_more() {
    let mut log = Log::new(1);
    turn_started(&mut log, "Survey the crate.");
    start_task(&mut log, "c_task", "read every module");
    for i in 0..8 {
        let read =
            call(&format!("r{i}"), "Read", json!({"file_path": format!("/workspace/src/m{i}.rs")}));
        log.child("c_task", message("", vec![read.clone()], None));
        log.child("c_task", tool_call(read));
        log.child("c_task", result(&format!("r{i}"), "Read", "fn main() {}", false, 2));
    }
    let bash = call("b1", "Bash", json!({"command": "cargo build"}));
    log.child("c_task", message("", vec![bash.clone()], None));
    log.child("c_task", tool_call(bash));
    log.child(
        "c_task",
        EventKind::ToolOutputDelta {
            call_id: "b1".into(),
            stream: OutputStream::Stderr,
            text: "   Compiling store v0.1.0\n".into(),
        },
    );
    log.child("c_task", delta("Nine modules so far"));
    let app = app(log.take());
    let text = screen(&app, 80, 24);
    assert_eq!(
        lines_with(&text, "Task("),
        ["⋯ Task(read every module) · general-purpose · running · 9 tool uses"]
    );
    // 9 tool calls: the newest CHILD_ITEMS_SHOWN shown, the rest counted.
    let hidden = 9 - CHILD_ITEMS_SHOWN;
    assert!(text.contains(&format!("  │ … +{hidden} more (ctrl-o shows all)")), "{text}");
    assert!(!text.contains("m3.rs"), "{text}");
    assert!(text.contains("  │ ✓ Read /workspace/src/m4.rs · done · 2 ms"), "{text}");
    assert!(text.contains("  │ ⋯ Bash cargo build"), "{text}");
    assert!(text.contains("  │   Compiling store v0.1.0"), "{text}");
    assert!(text.contains("  │ Nine modules so far"), "{text}");
    insta::assert_snapshot!("task_running_bounded", text);
}

#[test]
fn ctrl_o_on_a_running_child_still_bounds_what_it_shows() {
    let mut log = Log::new(1);
    turn_started(&mut log, "Survey the crate.");
    start_task(&mut log, "c_task", "read every module");
    let n = CHILD_ITEMS_EXPANDED + 5;
    for i in 0..n {
        let read = call(&format!("r{i}"), "Read", json!({"file_path": format!("/m{i}.rs")}));
        log.child("c_task", tool_call(read));
    }
    let mut app = app(log.take());
    ctrl_o(&mut app);
    let text = screen(&app, 80, 240);
    assert!(text.contains("  │ … +5 more (all of them once it is done)"), "{text}");
    assert!(!text.contains("/m4.rs"), "{text}");
    assert!(text.contains("/m5.rs"), "{text}");
    // Once done, the whole group.
    log = Log::new(app.last_seq + 1);
    log.main(result("c_task", "Task", "Read them all.", false, 10));
    live(&mut app, log.take());
    let text = screen(&app, 80, 240);
    assert!(text.contains("/m4.rs"), "{text}");
    assert!(!text.contains("more (all of them"), "{text}");
}

#[test]
fn two_children_running_at_once_each_fill_their_own_group() {
    let mut log = Log::new(1);
    turn_started(&mut log, "Check both crates.");
    log.main(message(
        "Two subagents.",
        vec![task_call("c_a", "check the server"), task_call("c_b", "check the client")],
        None,
    ));
    log.main(tool_call(task_call("c_a", "check the server")));
    log.main(tool_call(task_call("c_b", "check the client")));
    log.child(
        "c_a",
        EventKind::UserMessage { text: "Please check the server.".into(), attachments: Vec::new() },
    );
    log.child(
        "c_b",
        EventKind::UserMessage { text: "Please check the client.".into(), attachments: Vec::new() },
    );
    // Interleaved: deltas, calls and results of both.
    log.child("c_a", delta("Server: building"));
    log.child("c_b", delta("Client: linting"));
    let a1 = call("a1", "Bash", json!({"command": "cargo build -p server"}));
    let b1 = call("b1", "Bash", json!({"command": "cargo clippy -p cli"}));
    log.child("c_a", message("Server: building", vec![a1.clone()], None));
    log.child("c_b", message("Client: linting", vec![b1.clone()], None));
    log.child("c_a", tool_call(a1));
    log.child("c_b", tool_call(b1));
    log.child("c_b", result("b1", "Bash", "warning: unused", false, 900));
    log.child("c_a", result("a1", "Bash", "Finished", false, 4_000));
    log.child("c_b", message("The client is clean.", vec![], None));
    log.main(result("c_b", "Task", "The client is clean.", false, 2_000));
    // A watcher sees the same stream.
    let app = app_with("bob", Role::Watcher, log.take(), None, (false, None));
    assert_eq!(app.streaming, "");
    let text = screen(&app, 80, 24);
    assert_eq!(
        lines_with(&text, "Task("),
        [
            "⋯ Task(check the server) · general-purpose · running · 1 tool use",
            "✓ Task(check the client) · general-purpose · 1 tool use · 2.0 s",
        ]
    );
    // The running one shows its own items only; the finished one is folded to its report.
    assert!(text.contains("  │ Server: building"), "{text}");
    assert!(text.contains("  │ ✓ Bash cargo build -p server · exit 0 · 4.0 s"), "{text}");
    assert!(!text.contains("Client: linting"), "{text}");
    assert!(!text.contains("cargo clippy"), "{text}");
    assert!(text.contains("  └ The client is clean. · ctrl-o expands"), "{text}");
    insta::assert_snapshot!("two_children_interleaved", text);
}

#[test]
fn a_failed_child_and_an_interrupted_one_say_so() {
    let mut log = Log::new(1);
    turn_started(&mut log, "Do two things.");
    log.main(message(
        "",
        vec![task_call("c_a", "deploy"), task_call("c_b", "watch the logs")],
        None,
    ));
    log.main(tool_call(task_call("c_a", "deploy")));
    log.main(tool_call(task_call("c_b", "watch the logs")));
    log.child(
        "c_a",
        EventKind::ModelRetry { attempt: 2, delay_ms: 500, reason: "529 overloaded".into() },
    );
    log.main(result(
        "c_a",
        "Task",
        "the subagent failed: the model call failed 4 times",
        true,
        8_000,
    ));
    let b1 = call("b1", "Bash", json!({"command": "tail -f log"}));
    log.child("c_b", message("", vec![b1.clone()], None));
    log.child("c_b", tool_call(b1));
    let mut first = app(log.take());
    // Interrupted: the turn ends with the second child's report never given.
    log = Log::new(first.last_seq + 1);
    log.main(turn_completed(StopReason::Interrupted));
    live(&mut first, log.take());
    let text = screen(&first, 80, 24);
    assert_eq!(
        lines_with(&text, "Task("),
        [
            "✗ Task(deploy) · general-purpose · failed · 0 tool uses · 8.0 s",
            "✗ Task(watch the logs) · general-purpose · interrupted · 1 tool use",
        ]
    );
    assert!(text.contains("  └ the subagent failed: the model call failed 4 times"), "{text}");
    assert!(text.contains("  └ the turn ended before the subagent reported"), "{text}");
    insta::assert_snapshot!("failed_and_interrupted_children", text);

    // A result that says the child was interrupted is shown as such.
    let mut log = Log::new(1);
    turn_started(&mut log, "Go.");
    start_task(&mut log, "c_x", "search");
    log.main(result("c_x", "Task", "Interrupted before the subagent finished.", true, 1_000));
    let other = app(log.take());
    let text = screen(&other, 80, 24);
    assert_eq!(
        lines_with(&text, "Task("),
        ["✗ Task(search) · general-purpose · interrupted · 0 tool uses · 1.0 s"]
    );
}

#[test]
fn a_page_that_begins_mid_child_is_merged_when_the_older_page_arrives() {
    let mut log = Log::new(1);
    turn_started(&mut log, "Why does the test flake?");
    start_task(&mut log, "c_task", "find the flake");
    let bash = call("k1", "Bash", json!({"command": "cargo test -p store"}));
    log.child("c_task", message("Running the tests.", vec![bash.clone()], None));
    log.child("c_task", tool_call(bash));
    let older = log.take();
    let cursor = log.seq + 1;
    // The newest page: the child's result of a call on the older page, more child work, the
    // report.
    log.child("c_task", result("k1", "Bash", "test a ... FAILED\nExit code 101", true, 2_300));
    let write = call("k2", "Write", json!({"file_path": "/workspace/notes.md", "content": "x"}));
    log.child("c_task", message("", vec![write.clone()], None));
    log.child("c_task", tool_call(write));
    log.child("c_task", result("k2", "Write", "ok", false, 3));
    log.child("c_task", message(REPORT, vec![], None));
    log.main(result("c_task", "Task", REPORT, false, 12_300));
    log.main(message("A race.", vec![], None));
    log.main(turn_completed(StopReason::EndTurn));
    let mut app = app_with("alice", Role::Driver, log.take(), None, (true, Some(cursor)));
    ctrl_o(&mut app);
    // Until the older page comes, the group is headed by the call's id.
    let before = screen(&app, 80, 24);
    assert_eq!(lines_with(&before, "Task("), ["✓ Task(c_task) · 1 tool use · 12.3 s"]);
    assert!(before.contains("  │ ✓ Write /workspace/notes.md"), "{before}");

    let page = SessionHistoryResponse { events: older, has_more: false, cursor: 1 };
    app.handle(AppEvent::Older(SessionId("s_1".into()), Ok(Box::new(page))));
    let after = screen(&app, 80, 40);
    assert_eq!(
        lines_with(&after, "Task("),
        ["✓ Task(find the flake) · general-purpose · 2 tool uses · 12.3 s"],
        "one group: {after}"
    );
    // The child call split by the boundary is one line, its input from the older page and its
    // result from the newer.
    assert_eq!(
        lines_with(&after, "Bash"),
        ["  │ ✗ Bash cargo test -p store · exit 101 · 2.3 s"],
        "{after}"
    );
    let order: Vec<usize> =
        ["Running the tests.", "Bash cargo test", "Write /workspace", "└ The test races"]
            .iter()
            .map(|needle| after.find(needle).unwrap_or_else(|| panic!("{needle} missing: {after}")))
            .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?} {after}");
    insta::assert_snapshot!("task_merged_across_pages", after);
}

#[test]
fn an_attach_mid_child_shows_the_partial_output_of_its_running_call() {
    let mut log = Log::new(1);
    turn_started(&mut log, "Build it.");
    start_task(&mut log, "c_task", "build the crate");
    let bash = call("k1", "Bash", json!({"command": "cargo build"}));
    log.child("c_task", message("", vec![bash.clone()], None));
    log.child("c_task", tool_call(bash));
    let in_flight = InFlight {
        assistant_text: String::new(),
        tool_output: vec![ToolOutputSoFar {
            call_id: "k1".into(),
            text: "   Compiling a\n   Compiling b\n".into(),
        }],
    };
    let mut app = app_with("bob", Role::Watcher, log.take(), Some(in_flight), (false, None));
    let text = screen(&app, 80, 24);
    assert!(text.contains("  │   Compiling b"), "{text}");
    // A later delta of the same call, sent without its parent, still lands in the group.
    let more = SessionEvent {
        session_id: SessionId("s_1".into()),
        seq: app.last_seq,
        ts: String::new(),
        kind: EventKind::ToolOutputDelta {
            call_id: "k1".into(),
            stream: OutputStream::Stdout,
            text: "   Compiling c\n".into(),
        },
        parent: None,
    };
    live(&mut app, vec![more]);
    assert!(screen(&app, 80, 24).contains("  │   Compiling c"), "{}", screen(&app, 80, 24));
}

#[test]
fn a_resumed_attach_drops_what_children_had_streamed() {
    let mut log = Log::new(1);
    turn_started(&mut log, "Look.");
    start_task(&mut log, "c_task", "look around");
    log.child("c_task", delta("Half a sente"));
    let mut app = app(log.take());
    assert!(screen(&app, 80, 24).contains("  │ Half a sente"), "{}", screen(&app, 80, 24));
    // The connection dropped; the re-attach brings what came since, and the main loop's text.
    log = Log::new(app.last_seq + 1);
    log.child("c_task", message("Half a sentence, whole.", vec![], None));
    let snapshot = SessionAttachResponse {
        session: super::tests::info("s_1", "alice", "Fix the flaky test"),
        role: Role::Driver,
        events: Vec::new(),
        in_flight: Some(InFlight { assistant_text: String::new(), tool_output: Vec::new() }),
        has_more: false,
        cursor: None,
        standing: Vec::new(),
    };
    app.handle(AppEvent::Attached(Box::new(snapshot), true));
    let text = screen(&app, 80, 24);
    assert!(!text.contains("Half a sente"), "{text}");
    live(&mut app, log.take());
    assert!(screen(&app, 80, 24).contains("  │ Half a sentence, whole."));
}
