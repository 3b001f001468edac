//! The TUI's state and its update function, Elm style: [`App::handle`] takes one [`AppEvent`]
//! (a key, a paste, a server event, a connection change) and returns the [`Effect`]s for the
//! runtime to perform (requests to the server, quitting). Nothing here does IO, so every screen
//! is reachable from a test by feeding events.
//!
//! The transcript's lines are rendered (markdown, diffs, wrapping) here, when a cell changes or
//! the width does, and stored in the cell; drawing (the `render` module) only picks the visible
//! lines. That keeps a frame proportional to the screen, not to the transcript.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use outboard_shared::{
    ApprovalKind, ApprovalScope, EventKind, PresenceEntry, Role, SandboxQueue, SandboxState,
    SessionAttachResponse, SessionEvent, SessionHistoryResponse, SessionId, SessionInfo,
    StopReason, Usage,
};
use ratatui::text::{Line, Span};

use super::composer::Composer;
use super::format::{format_ms, tool_summary};
use super::theme::Theme;
use super::{diff, markdown, wrap};

// Plain state types other modules read too; re-exported so their `tui::app::` paths stay valid.
use super::rewind::Picked;
pub use super::state::{ConnState, Picker, ToolCell};

/// Tool output lines shown in a cell (the tail); the full output is in the log.
pub const TOOL_OUTPUT_LINES: usize = 8;

/// The tool whose calls run a subagent: its call is a group in the transcript.
pub const TASK_TOOL: &str = "Task";

/// Lines scrolled per mouse-wheel step.
pub const WHEEL_LINES: usize = 3;

/// The slash commands, with a one-line help each (shown by `/help` and completion).
pub const COMMANDS: &[(&str, &str)] = &[
    ("/help", "this list"),
    ("/new", "start a new session"),
    ("/sessions", "pick a session of your org to attach to"),
    ("/attach", "ID — attach to a session"),
    ("/drive", "take driving (owner) or ask the driver for it"),
    ("/handover", "USER — hand driving to a watcher"),
    ("/memory", "[PATH] list the org's memory, or show one file"),
    ("/skills", "list the org's skills"),
    ("/agents", "the agent types the model's Task tool can start"),
    ("/diff", "the session's changes against its base (--stat: a summary)"),
    ("/compact", "[FOCUS] summarise the conversation now, keeping FOCUS in particular"),
    ("/model", "[NAME] the models on offer, or use NAME from the next turn"),
    ("/plan", "switch plan mode on or off (also Shift-Tab): plan first, change nothing"),
    ("/plans", "list the org's plans"),
    (
        "/rewind",
        "[N [code|conversation]] pick a checkpoint to go back to (also Esc Esc), or go back to N",
    ),
    ("/fork", "[N] a new session from checkpoint N (default: now), side by side"),
    ("/interrupt", "interrupt the running turn (also Esc)"),
    ("/tasks", "the background commands; /tasks kill ID stops one"),
    ("/quit", "leave (also Ctrl-C twice)"),
];

/// Who this client is, in the server's words (its `welcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    /// Our user name.
    pub user: String,
    /// This connection's id: `presence` entries name connections, and our role is the one of the
    /// entry with this id (the same user may be attached from another terminal in another role).
    pub connection_id: u64,
}

/// Everything that can happen to the app.
#[derive(Debug, Clone, PartialEq)]
pub enum AppEvent {
    /// A key press.
    Key(KeyEvent),
    /// Bracketed paste.
    Paste(String),
    /// Mouse wheel: positive = up (older).
    Scroll(i32),
    /// The terminal's new size.
    Resize(u16, u16),
    /// Connection state changed; once connected, who the server says we are.
    Connection(ConnState, Option<Me>),
    /// An attach succeeded: a fresh snapshot (`resumed`: after a reconnect or lag, with the
    /// events after our last `seq` only).
    Attached(Box<SessionAttachResponse>, bool),
    /// A live session event.
    Server(Box<SessionEvent>),
    /// A page of older history of this session (`session/history`), or why it failed.
    Older(SessionId, Result<Box<SessionHistoryResponse>, String>),
    /// The org's sessions, for the picker.
    Sessions(Vec<SessionInfo>),
    /// Something to tell the user (a refused request, a warning).
    Notice(String),
    /// The session's checkpoints (`session/checkpoints`), for the rewind picker, or why they
    /// could not be listed.
    Checkpoints(Result<Vec<outboard_shared::CheckpointInfo>, String>),
    /// A rewind was made: its prompt goes back into the composer.
    Rewound(String),
    /// A fork was made: attach to it, its checkpoint's prompt (if any) in the composer.
    Forked(SessionId, Option<String>),
}

/// What the runtime must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Send a user message to the attached session.
    Send(String),
    /// Interrupt the turn.
    Interrupt,
    /// Create a session and attach to it as driver.
    NewSession,
    /// Fetch the session list.
    ListSessions,
    /// Attach to a session (as driver when we own it, else watcher).
    Attach(SessionId),
    /// Fetch the page of this session's history before this `seq` (the user scrolled up past
    /// the oldest event loaded).
    LoadOlder(SessionId, u64),
    /// Ask the driver for the wheel.
    DriveRequest,
    /// The owner takes the wheel.
    DriveTake,
    /// Hand the wheel to this user.
    DriveGrant(String),
    /// List the org's memory (`None`) or show one org file.
    Memory(Option<String>),
    /// List the org's skills.
    Skills,
    /// List the agent types (`Task`'s `subagent_type`).
    Agents,
    /// Show the session's diff (`true`: the summary only).
    Diff(bool),
    /// Compact the session's conversation, with what the summary should focus on.
    Compact(Option<String>),
    /// Kill this background command of the session.
    KillTask(String),
    /// Answer a call waiting for approval.
    Answer(super::approvals::Answer),
    /// List the models the server offers (the session's marked).
    Models(Option<String>),
    /// Use this model (by name) from the session's next turn.
    SetModel(String),
    /// Switch the session's mode.
    SetMode(outboard_shared::SessionMode),
    /// List the org's plans.
    Plans,
    /// List the session's checkpoints.
    Checkpoints,
    /// Take the session back to checkpoint N: its files (`code`), its conversation, or both.
    Rewind {
        /// The checkpoint.
        n: u32,
        /// Restore the files.
        code: bool,
        /// Take the conversation back.
        conversation: bool,
    },
    /// A new session from checkpoint N (`None`: now).
    Fork(Option<u32>),
    /// Leave.
    Quit,
}

/// What a transcript cell holds.
#[derive(Debug, Clone, PartialEq)]
pub enum CellKind {
    /// A user's message.
    User {
        /// Who sent it.
        by: String,
        /// The text.
        text: String,
    },
    /// A complete assistant message.
    Assistant(String),
    /// The model's reasoning before a message (Anthropic thinking, OpenAI reasoning summaries):
    /// one folded line, shown whole with Ctrl-O.
    Thinking(String),
    /// A tool call.
    Tool(ToolCell),
    /// A `Task` call: its subagent's events as one collapsible group.
    Task(super::subagents::TaskCell),
    /// A line from the harness or the client (turn ended, failed, retry, drive request).
    Notice {
        /// The text.
        text: String,
        /// Drawn as an error.
        error: bool,
    },
}

/// One transcript cell and its rendered lines at the current width.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// The content.
    pub kind: CellKind,
    /// The content rendered and wrapped at [`App::width`].
    pub lines: Vec<Line<'static>>,
}

/// The whole state of the TUI.
#[derive(Debug, Clone)]
pub struct App {
    /// Colours.
    pub theme: Theme,
    /// Terminal size.
    pub width: u16,
    /// Terminal height.
    pub height: u16,
    /// Our user name, once connected.
    pub me: Option<String>,
    /// Our connection's id, once connected ([`Me::connection_id`]).
    pub connection_id: Option<u64>,
    /// The attached session.
    pub session: Option<SessionInfo>,
    /// Our role in it.
    pub role: Role,
    /// The connection.
    pub conn: ConnState,
    /// The transcript.
    pub cells: Vec<Cell>,
    /// Assistant text streaming now (not yet a complete message).
    pub streaming: String,
    /// `streaming` rendered.
    pub streaming_lines: Vec<Line<'static>>,
    /// Who sent the turn in flight (for the next user message cell).
    pub turn_by: Option<String>,
    /// A turn is in flight.
    pub running: bool,
    /// Tokens used in this session: its total at attach, plus every model call since.
    pub usage: Usage,
    /// The input tokens of the latest model call: how full the context window is now.
    pub context_used: Option<u64>,
    /// The sandbox's last state and transition time.
    pub sandbox: Option<(SandboxState, f64)>,
    /// With a `waiting` sandbox: the session's place in its org's queue.
    pub sandbox_queue: Option<SandboxQueue>,
    /// The session's todo list and background commands.
    pub work: super::tasks::Work,
    /// Who is attached.
    pub presence: Vec<PresenceEntry>,
    /// The composer.
    pub composer: Composer,
    /// Lines scrolled up from the bottom (0 follows the stream).
    pub scroll: usize,
    /// The session picker, when open.
    pub picker: Option<Picker>,
    /// The rewind picker, when open.
    pub rewind_picker: Option<super::rewind::RewindPicker>,
    /// A one-line message in the status area (cleared by the next key).
    pub notice: Option<String>,
    /// Ctrl-C was pressed once; the next one quits.
    pub quit_armed: bool,
    /// Esc was pressed once on an empty composer; the next one lists the checkpoints.
    pub rewind_armed: bool,
    /// The last durable `seq` applied (duplicates at or below it are skipped).
    pub last_seq: u64,
    /// How much of the session's history is loaded: an attach brings its newest page only.
    pub history: History,
    /// Ctrl-O: every subagent group shown whole (else a running one shows its newest items and
    /// a finished one folds to its header and report).
    pub expand_tasks: bool,
    /// Tool calls waiting for approval, and the driver's prompt.
    pub approvals: super::approvals::Approvals,
    /// The session's mode (its last `mode_changed`).
    pub mode: outboard_shared::SessionMode,
    /// What the driver sent while a turn ran: sent when it ends well, back in the composer when
    /// it is interrupted or fails (or the wheel is lost). At most [`MAX_QUEUED`] bytes.
    pub queued: Option<String>,
}

/// The most a queued message may hold (bytes): far above anything typed, far below a frame.
pub const MAX_QUEUED: usize = 64 * 1024;

/// The part of a session's history not loaded yet, paged in as the user scrolls up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct History {
    /// The `seq` of the oldest event loaded (`before` of the next `session/history`).
    pub cursor: Option<u64>,
    /// Older events exist on the server.
    pub has_more: bool,
    /// A page is being fetched (one at a time).
    pub loading: bool,
}

impl App {
    /// A fresh app for a terminal of `width`×`height`.
    pub fn new(theme: Theme, width: u16, height: u16) -> Self {
        App {
            theme,
            width,
            height,
            me: None,
            connection_id: None,
            session: None,
            role: Role::Watcher,
            conn: ConnState::Connecting,
            cells: Vec::new(),
            streaming: String::new(),
            streaming_lines: Vec::new(),
            work: super::tasks::Work::default(),
            turn_by: None,
            running: false,
            queued: None,
            usage: Usage::default(),
            context_used: None,
            sandbox: None,
            sandbox_queue: None,
            presence: Vec::new(),
            composer: Composer::default(),
            scroll: 0,
            picker: None,
            rewind_picker: None,
            notice: None,
            quit_armed: false,
            rewind_armed: false,
            last_seq: 0,
            history: History::default(),
            expand_tasks: false,
            approvals: super::approvals::Approvals::default(),
            mode: outboard_shared::SessionMode::Default,
        }
    }

    /// The width the transcript wraps at.
    pub fn text_width(&self) -> usize {
        usize::from(self.width).saturating_sub(1).max(10)
    }

    /// Total transcript lines (cells, separators, the streaming tail, the history line).
    pub fn transcript_len(&self) -> usize {
        let cells: usize = self.cells.iter().map(|c| c.lines.len() + 1).sum();
        cells + self.streaming_lines.len() + usize::from(self.history_note().is_some())
    }

    /// Transcript lines without the history line (which comes and goes as one scrolls).
    fn content_len(&self) -> usize {
        self.transcript_len() - usize::from(self.history_note().is_some())
    }

    /// The line above the oldest event loaded: whether older history is coming or there is none.
    pub fn history_note(&self) -> Option<&'static str> {
        if self.session.is_none() || self.cells.is_empty() {
            return None;
        }
        match self.history {
            History { loading: true, .. } => Some("loading older…"),
            History { has_more: true, .. } => Some("older history: scroll up to load it"),
            // Said only to someone scrolled up looking for more; a short session needs no label.
            _ if self.scroll > 0 => Some("beginning of session"),
            _ => None,
        }
    }

    /// Whether this client may send messages.
    pub fn driving(&self) -> bool {
        self.role == Role::Driver
    }

    /// Whether we own the attached session.
    pub fn owner(&self) -> bool {
        matches!((&self.session, &self.me), (Some(s), Some(me)) if &s.owner == me)
    }

    /// Slash commands matching what is typed (for the completion line).
    pub fn completions(&self) -> Vec<&'static str> {
        let text = self.composer.text();
        if !text.starts_with('/') || text.contains(char::is_whitespace) {
            return Vec::new();
        }
        COMMANDS.iter().map(|(c, _)| *c).filter(|c| c.starts_with(text)).collect()
    }

    /// Applies one event; returns what the runtime must do.
    pub fn handle(&mut self, event: AppEvent) -> Vec<Effect> {
        let before = self.content_len();
        let effects = match event {
            AppEvent::Key(key) => self.key(key),
            AppEvent::Paste(text) => {
                self.composer.insert(&text);
                Vec::new()
            }
            AppEvent::Scroll(lines) => self.scroll_by(lines),
            AppEvent::Resize(w, h) => {
                let rewrap = w != self.width;
                self.width = w;
                self.height = h;
                if rewrap {
                    self.rerender_all();
                }
                Vec::new()
            }
            AppEvent::Connection(state, me) => {
                if let Some(me) = me {
                    self.me = Some(me.user);
                    self.connection_id = Some(me.connection_id);
                }
                self.conn = state;
                Vec::new()
            }
            AppEvent::Attached(snapshot, resumed) => {
                self.attached(*snapshot, resumed);
                self.release_queued()
            }
            AppEvent::Server(event) => {
                self.apply(*event);
                self.release_queued()
            }
            AppEvent::Older(id, page) => {
                // Lines above the view: the view, counted from the bottom, stays where it is.
                self.older(&id, page);
                return Vec::new();
            }
            AppEvent::Sessions(sessions) => {
                self.picker = Some(Picker { sessions, selected: 0 });
                Vec::new()
            }
            AppEvent::Checkpoints(listed) => {
                self.checkpoints_listed(listed);
                Vec::new()
            }
            AppEvent::Rewound(prompt) => {
                self.composer.set(prompt);
                self.notice = Some("rewound: its prompt is back in the composer".into());
                Vec::new()
            }
            AppEvent::Forked(id, prompt) => {
                if let Some(prompt) = prompt {
                    self.composer.set(prompt);
                }
                self.notice = Some(format!("forked: {id}"));
                vec![Effect::Attach(id)]
            }
            AppEvent::Notice(text) => {
                // A listing (several lines) goes into the transcript; one line to the status.
                if text.is_empty() {
                    self.notice = None;
                } else if text.contains('\n') {
                    self.push_notice(text, false);
                } else {
                    self.notice = Some(text);
                }
                Vec::new()
            }
        };
        // Scrolled up: stay on the same lines while new ones arrive below.
        let after = self.content_len();
        if self.scroll > 0 && after > before {
            self.scroll += after - before;
        }
        effects
    }

    fn scroll_by(&mut self, lines: i32) -> Vec<Effect> {
        let max = self.transcript_len();
        let by = lines.unsigned_abs() as usize;
        self.scroll =
            if lines > 0 { (self.scroll + by).min(max) } else { self.scroll.saturating_sub(by) };
        // The oldest line loaded is on screen: fetch the page before it.
        let top_visible = self.scroll + self.page().unsigned_abs() as usize >= max;
        match (&self.session, self.history) {
            (Some(s), History { cursor: Some(before), has_more: true, loading: false })
                if lines > 0 && top_visible =>
            {
                self.history.loading = true;
                vec![Effect::LoadOlder(s.id.clone(), before)]
            }
            _ => Vec::new(),
        }
    }

    /// Puts a page of older history above the transcript. Its events are drawn on their own
    /// (a scratch app applies them) so the live state — running, streaming, the last `seq` —
    /// is not touched by events from the past.
    fn older(&mut self, id: &SessionId, page: Result<Box<SessionHistoryResponse>, String>) {
        if self.session.as_ref().is_none_or(|s| s.id != *id) {
            return;
        }
        self.history.loading = false;
        let page = match page {
            Ok(page) => page,
            Err(e) => {
                self.notice = Some(format!("cannot load older history: {e}"));
                return;
            }
        };
        if self.history.cursor.is_some_and(|c| page.events.last().is_some_and(|e| e.seq >= c)) {
            return;
        }
        let mut past = App::new(self.theme, self.width, self.height);
        past.session = self.session.clone();
        past.connection_id = self.connection_id;
        past.expand_tasks = self.expand_tasks;
        for event in page.events {
            past.apply(event);
        }
        past.flush_streaming();
        // A call at the end of the older page whose result opens the newer part is one cell:
        // the older page has its input, the newer part its result. So is a subagent's group
        // split by the boundary: the older page has the call and the first child events.
        let mut merged = Vec::new();
        for (i, cell) in past.cells.iter_mut().enumerate() {
            match &mut cell.kind {
                CellKind::Tool(older) if older.result.is_none() => {
                    let newer = self.cells.iter().position(
                        |c| matches!(&c.kind, CellKind::Tool(t) if t.call_id == older.call_id),
                    );
                    if let Some(j) = newer {
                        if let CellKind::Tool(t) = self.cells.remove(j).kind {
                            older.result = t.result;
                            if older.output.is_empty() {
                                older.output = t.output;
                            }
                        }
                        merged.push(i);
                    }
                }
                CellKind::Task(older) if older.result.is_none() => {
                    if let Some(j) = self.task_index(&older.call_id) {
                        if let CellKind::Task(t) = self.cells.remove(j).kind {
                            older.absorb(t);
                        }
                        merged.push(i);
                    }
                }
                _ => {}
            }
        }
        past.cells.append(&mut self.cells);
        self.cells = past.cells;
        for i in merged {
            self.rerender(i);
        }
        self.history.cursor = Some(page.cursor);
        self.history.has_more = page.has_more;
    }

    /// The approval prompt's keys (see [`super::approvals`]); `None` lets the key through.
    fn approval_key(&mut self, key: KeyEvent) -> Option<Vec<Effect>> {
        if self.approvals.is_empty() || !self.driving() {
            return None;
        }
        let plain = !key.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
        if self.approvals.question().is_some() && !self.approvals.denying {
            return self.question_key(key, plain);
        }
        if self.approvals.denying {
            return match key.code {
                KeyCode::Enter if plain => {
                    let reason = self.composer.text().to_owned();
                    self.composer.clear();
                    let answer = self.approvals.deny(&reason)?;
                    Some(vec![Effect::Answer(answer)])
                }
                KeyCode::Esc => {
                    self.approvals.denying = false;
                    self.composer.clear();
                    Some(Vec::new())
                }
                _ => None,
            };
        }
        let KeyCode::Char(c) = key.code else { return None };
        if !plain {
            return None;
        }
        let plan = self.approvals.first().is_some_and(|r| r.kind == ApprovalKind::Plan);
        match c {
            'y' | 'Y' => Some(
                self.approvals.allow(ApprovalScope::Once).map(Effect::Answer).into_iter().collect(),
            ),
            'a' | 'A' if !plan => Some(
                self.approvals
                    .allow(ApprovalScope::Session)
                    .map(Effect::Answer)
                    .into_iter()
                    .collect(),
            ),
            'n' | 'N' => {
                self.approvals.denying = true;
                self.composer.clear();
                Some(Vec::new())
            }
            // Modal: a key meant for the prompt never lands in a message.
            _ => Some(Vec::new()),
        }
    }

    /// The keys of a question's prompt: a digit picks (or toggles), Enter confirms a multiple
    /// choice or gives the typed answer, `o` types another answer, `n` declines.
    fn question_key(&mut self, key: KeyEvent, plain: bool) -> Option<Vec<Effect>> {
        let answered = |answer: Option<super::approvals::Answer>| {
            Some(answer.map(Effect::Answer).into_iter().collect())
        };
        if self.approvals.other {
            return match key.code {
                KeyCode::Enter if plain => {
                    let text = self.composer.text().to_owned();
                    self.composer.clear();
                    answered(self.approvals.give(text))
                }
                KeyCode::Esc => {
                    self.approvals.other = false;
                    self.composer.clear();
                    Some(Vec::new())
                }
                _ => None,
            };
        }
        match key.code {
            KeyCode::Enter if plain => answered(self.approvals.confirm()),
            KeyCode::Char(c) if plain => match c {
                '1'..='9' => answered(self.approvals.pick(c as usize - '0' as usize)),
                'o' | 'O' => {
                    self.approvals.other = true;
                    self.composer.clear();
                    Some(Vec::new())
                }
                'n' | 'N' => {
                    self.approvals.denying = true;
                    self.composer.clear();
                    Some(Vec::new())
                }
                _ => Some(Vec::new()),
            },
            _ => None,
        }
    }

    /// `/plan` and Shift-Tab: the driver switches plan mode.
    fn toggle_mode(&mut self) -> Vec<Effect> {
        if self.session.is_none() {
            self.notice = Some("attach to a session first".into());
            return Vec::new();
        }
        if !self.driving() {
            self.notice =
                Some("only the driver switches plan mode: /drive asks for the wheel".into());
            return Vec::new();
        }
        let mode = match self.mode {
            outboard_shared::SessionMode::Plan => outboard_shared::SessionMode::Default,
            outboard_shared::SessionMode::Default => outboard_shared::SessionMode::Plan,
        };
        vec![Effect::SetMode(mode)]
    }

    fn page(&self) -> i32 {
        i32::from(self.height.saturating_sub(6).max(1))
    }

    fn key(&mut self, key: KeyEvent) -> Vec<Effect> {
        if key.kind == KeyEventKind::Release {
            return Vec::new();
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            if self.quit_armed {
                return vec![Effect::Quit];
            }
            self.quit_armed = true;
            self.composer.clear();
            self.notice = Some("press Ctrl-C again to quit".into());
            return Vec::new();
        }
        self.quit_armed = false;
        let rewind_armed = std::mem::take(&mut self.rewind_armed);
        self.notice = None;
        if let Some(picker) = &mut self.rewind_picker {
            return match picker.key(key.code) {
                Picked::Open => Vec::new(),
                Picked::Closed => {
                    self.rewind_picker = None;
                    Vec::new()
                }
                Picked::Rewind { n, code, conversation } => {
                    self.rewind_picker = None;
                    self.rewind_to(n, code, conversation)
                }
            };
        }
        if let Some(picker) = &mut self.picker {
            match key.code {
                KeyCode::Esc => self.picker = None,
                KeyCode::Up => picker.selected = picker.selected.saturating_sub(1),
                KeyCode::Down => {
                    picker.selected =
                        (picker.selected + 1).min(picker.sessions.len().saturating_sub(1))
                }
                KeyCode::Enter => {
                    let chosen = picker.sessions.get(picker.selected).map(|s| s.id.clone());
                    self.picker = None;
                    if let Some(id) = chosen {
                        return vec![Effect::Attach(id)];
                    }
                }
                _ => {}
            }
            return Vec::new();
        }
        if let Some(effects) = self.approval_key(key) {
            return effects;
        }
        match key.code {
            KeyCode::Esc if self.running && self.driving() => {
                self.notice = Some("interrupting…".into());
                return vec![Effect::Interrupt];
            }
            KeyCode::Esc if self.composer.text().is_empty() && !self.running => {
                if rewind_armed {
                    return self.command("/rewind");
                }
                self.rewind_armed = true;
                self.notice = Some("Esc again: rewind to a checkpoint".into());
                return Vec::new();
            }
            KeyCode::BackTab => return self.toggle_mode(),
            KeyCode::PageUp => return self.scroll_by(self.page()),
            KeyCode::PageDown => return self.scroll_by(-self.page()),
            KeyCode::Enter if key.modifiers.intersects(KeyModifiers::ALT | KeyModifiers::SHIFT) => {
                self.composer.insert("\n")
            }
            KeyCode::Char('j') if ctrl => self.composer.insert("\n"),
            KeyCode::Enter => return self.submit(),
            KeyCode::Tab => {
                if let [only] = self.completions()[..] {
                    self.composer.set(format!("{only} "));
                }
            }
            KeyCode::Backspace => self.composer.backspace(),
            KeyCode::Delete => self.composer.delete(),
            KeyCode::Left => self.composer.left(),
            KeyCode::Right => self.composer.right(),
            KeyCode::Home => self.composer.home(),
            KeyCode::End => self.composer.end(),
            KeyCode::Up => self.composer.up(),
            KeyCode::Down => self.composer.down(),
            KeyCode::Char('u') if ctrl => self.composer.clear(),
            KeyCode::Char('o') if ctrl => self.toggle_tasks(),
            KeyCode::Char(c) if !ctrl => self.composer.insert(c.encode_utf8(&mut [0; 4])),
            _ => {}
        }
        Vec::new()
    }

    fn submit(&mut self) -> Vec<Effect> {
        let text = self.composer.text().trim().to_owned();
        if text.is_empty() {
            return Vec::new();
        }
        if text.starts_with('/') {
            self.composer.take();
            return self.command(&text);
        }
        if self.session.is_none() {
            // Typed before the attach is answered (a fast typist at start-up): sent once it
            // is, if this connection drives; back in the composer if it watches.
            return self.queue(text, "queued: sent once the session is attached");
        }
        if !self.driving() {
            self.notice = Some("you are watching: /drive asks for the wheel".into());
            return Vec::new();
        }
        if self.running {
            return self
                .queue(text, "queued: sent when this turn ends (Esc interrupts and returns it)");
        }
        if self.conn != ConnState::Connected {
            self.notice = Some("not connected; the message is kept".into());
            return Vec::new();
        }
        self.scroll = 0;
        vec![Effect::Send(self.composer.take())]
    }

    /// Holds `text` (the composer's) until the running turn ends (or the first attach is
    /// answered); a second one joins the first. `notice` says when it goes.
    fn queue(&mut self, text: String, notice: &str) -> Vec<Effect> {
        let held = self.queued.as_ref().map_or(0, |q| q.len() + 2);
        if held + text.len() > MAX_QUEUED {
            self.notice =
                Some("the queued message is full: wait for the turn, or Esc to interrupt".into());
            return Vec::new();
        }
        self.composer.take();
        match &mut self.queued {
            Some(q) => {
                q.push_str("\n\n");
                q.push_str(&text);
            }
            None => self.queued = Some(text),
        }
        self.notice = Some(notice.to_owned());
        Vec::new()
    }

    /// The queued message, sent once no turn runs and we are connected; back into the composer
    /// when we no longer drive.
    fn release_queued(&mut self) -> Vec<Effect> {
        if self.queued.is_none() {
            return Vec::new();
        }
        if !self.driving() {
            self.unqueue("you no longer drive: the queued message is back in the composer");
            return Vec::new();
        }
        // Disconnected, it waits for the attach that follows the reconnect.
        if self.running || self.conn != ConnState::Connected {
            return Vec::new();
        }
        let text = self.queued.take().unwrap_or_default();
        self.notice = None;
        self.scroll = 0;
        vec![Effect::Send(text)]
    }

    /// Puts the queued message back in front of what the composer holds.
    fn unqueue(&mut self, why: &str) {
        let Some(queued) = self.queued.take() else { return };
        let typed = self.composer.take();
        let text = if typed.trim().is_empty() { queued } else { format!("{queued}\n\n{typed}") };
        self.composer.set(text);
        self.notice = Some(why.to_owned());
    }

    fn command(&mut self, line: &str) -> Vec<Effect> {
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or("");
        let arg = words.next().map(str::to_owned);
        if name == "/tasks" {
            return self.tasks_command(arg.as_deref(), words.next());
        }
        match (name, arg) {
            ("/help", _) => {
                let text =
                    COMMANDS.iter().map(|(c, h)| format!("{c} {h}")).collect::<Vec<_>>().join("\n");
                self.push_notice(format!("{text}\nPgUp/PgDn or the wheel scroll; Esc interrupts; Alt-Enter or Ctrl-J for a newline; Ctrl-O shows subagents' work and the model's thinking whole or folds them"), false);
                Vec::new()
            }
            ("/new", _) => vec![Effect::NewSession],
            ("/sessions", _) => vec![Effect::ListSessions],
            ("/attach", Some(id)) => vec![Effect::Attach(SessionId(id))],
            ("/drive", _) => {
                if self.driving() {
                    self.notice = Some("you are driving already".into());
                    Vec::new()
                } else if self.owner() {
                    vec![Effect::DriveTake]
                } else {
                    self.notice = Some("asked the driver for the wheel".into());
                    vec![Effect::DriveRequest]
                }
            }
            ("/handover", Some(user)) => vec![Effect::DriveGrant(user)],
            ("/memory", path) => vec![Effect::Memory(path)],
            ("/skills", _) => vec![Effect::Skills],
            ("/agents", _) => vec![Effect::Agents],
            ("/diff", arg) => match &self.session {
                Some(s) => {
                    let stat = arg.as_deref() == Some("--stat");
                    self.notice = Some(format!("fetching the diff of {}…", s.id));
                    vec![Effect::Diff(stat)]
                }
                None => {
                    self.notice = Some("attach to a session first".into());
                    Vec::new()
                }
            },
            ("/compact", _) => {
                // The focus is the rest of the line, every word of it.
                let focus = line.trim_start().trim_start_matches("/compact").trim();
                if self.running {
                    self.notice = Some("a turn is running: compact when it ends".into());
                    return Vec::new();
                }
                self.notice = Some("compacting the conversation…".into());
                vec![Effect::Compact((!focus.is_empty()).then(|| focus.to_owned()))]
            }
            ("/model", None) => {
                vec![Effect::Models(self.session.as_ref().and_then(|s| s.model_name.clone()))]
            }
            ("/model", Some(name)) => {
                if self.session.is_none() {
                    self.notice = Some("attach to a session first".into());
                    Vec::new()
                } else if !self.driving() {
                    self.notice =
                        Some("only the driver picks the model: /drive asks for the wheel".into());
                    Vec::new()
                } else {
                    vec![Effect::SetModel(name)]
                }
            }
            ("/plan", _) => self.toggle_mode(),
            ("/plans", _) => vec![Effect::Plans],
            ("/rewind", arg) => self.rewind_command(arg.as_deref(), words.next()),
            ("/fork", arg) => match arg.as_deref().map(str::parse::<u32>) {
                None => vec![Effect::Fork(None)],
                Some(Ok(n)) => vec![Effect::Fork(Some(n))],
                Some(Err(_)) => {
                    self.notice = Some("/fork, or /fork N (a checkpoint's number)".into());
                    Vec::new()
                }
            },
            ("/interrupt", _) => vec![Effect::Interrupt],
            ("/quit", _) => vec![Effect::Quit],
            ("/attach" | "/handover", None) => {
                self.notice = Some(format!("{name} needs an argument (see /help)"));
                Vec::new()
            }
            _ => {
                self.notice = Some(format!("unknown command {name}; /help lists them"));
                Vec::new()
            }
        }
    }

    /// `/rewind` opens the rewind picker on the checkpoints (a watcher gets their list);
    /// `/rewind N [code|conversation]` (the driver, between turns) goes back to one (both).
    fn rewind_command(&mut self, n: Option<&str>, what: Option<&str>) -> Vec<Effect> {
        let Some(n) = n else { return vec![Effect::Checkpoints] };
        let (code, conversation) = match what {
            None => (true, true),
            Some("code") => (true, false),
            Some("conversation") => (false, true),
            Some(_) => {
                self.notice = Some("/rewind N, /rewind N code or /rewind N conversation".into());
                return Vec::new();
            }
        };
        match n.parse::<u32>() {
            Ok(n) => self.rewind_to(n, code, conversation),
            Err(_) => {
                self.notice =
                    Some("/rewind N: N is a checkpoint's number (/rewind lists them)".into());
                Vec::new()
            }
        }
    }

    /// Rewinds to checkpoint `n` (the driver, between turns), or says why not.
    fn rewind_to(&mut self, n: u32, code: bool, conversation: bool) -> Vec<Effect> {
        let refusal = if !self.driving() {
            Some("only the driver rewinds: /drive asks for the wheel")
        } else if self.running {
            Some("a turn is running: rewind when it ends (Esc interrupts)")
        } else {
            None
        };
        if let Some(refusal) = refusal {
            self.notice = Some(refusal.into());
            return Vec::new();
        }
        self.notice = Some(format!("rewinding to checkpoint {n}…"));
        vec![Effect::Rewind { n, code, conversation }]
    }

    /// The answer to `/rewind`: the picker for the driver between turns; otherwise (a watcher,
    /// a turn running, nothing to rewind to) the list, which says how to go back.
    fn checkpoints_listed(&mut self, listed: Result<Vec<outboard_shared::CheckpointInfo>, String>) {
        match listed {
            Ok(checkpoints) if !checkpoints.is_empty() && self.driving() && !self.running => {
                self.rewind_picker = Some(super::rewind::RewindPicker::new(checkpoints));
            }
            Ok(checkpoints) => self.push_notice(checkpoints_listing(&checkpoints), false),
            Err(e) => self.notice = Some(format!("no checkpoints: {e}")),
        }
    }

    /// `/tasks` lists the background commands; `/tasks kill ID` (the driver) stops one.
    fn tasks_command(&mut self, sub: Option<&str>, id: Option<&str>) -> Vec<Effect> {
        match (sub, id) {
            (None, _) => {
                let listing = self.work.listing();
                self.push_notice(listing, false);
                Vec::new()
            }
            (Some("kill"), Some(id)) if !self.driving() => {
                self.notice =
                    Some(format!("only the driver kills {id}: /drive asks for the wheel"));
                Vec::new()
            }
            (Some("kill"), Some(id)) if !self.work.is_running(id) => {
                self.notice = Some(format!("{id} is not running (see /tasks)"));
                Vec::new()
            }
            (Some("kill"), Some(id)) => vec![Effect::KillTask(id.to_owned())],
            _ => {
                self.notice = Some("/tasks, or /tasks kill ID".into());
                Vec::new()
            }
        }
    }

    fn attached(&mut self, snapshot: SessionAttachResponse, resumed: bool) {
        let same = self.session.as_ref().is_some_and(|s| s.id == snapshot.session.id);
        // The first attach keeps what was typed before it was answered (see `submit`).
        if !same && self.session.is_some() {
            self.unqueue("another session: the queued message is back in the composer");
        }
        // The replay below ends old turns again: the message queued here stays queued.
        let queued = self.queued.take();
        let total = snapshot.session.usage;
        if !(resumed && same) {
            self.cells.clear();
            self.last_seq = 0;
            self.usage = Usage::default();
            self.context_used = None;
            self.sandbox = None;
            self.sandbox_queue = None;
            self.work = super::tasks::Work::default();
            self.approvals = super::approvals::Approvals::default();
            self.mode = outboard_shared::SessionMode::Default;
            self.presence.clear();
            self.scroll = 0;
            self.history =
                History { cursor: snapshot.cursor, has_more: snapshot.has_more, loading: false };
        }
        self.running = false;
        self.role = snapshot.role;
        self.session = Some(snapshot.session);
        self.streaming.clear();
        self.clear_child_streaming();
        // What still holds from before the page: the todo panel, the running commands.
        for event in &snapshot.standing {
            if let EventKind::ModeChanged { mode, .. } = &event.kind {
                self.mode = *mode;
            }
            self.work.apply(&event.kind);
            self.approvals.apply(&event.kind, event.parent.as_deref());
        }
        for event in snapshot.events {
            self.apply(event);
        }
        // The session's total counts every call up to the snapshot, pages not loaded included;
        // a resumed attach adds the calls it missed instead.
        if let (false, Some(total)) = (resumed && same, total) {
            self.usage = total;
        }
        if let Some(in_flight) = snapshot.in_flight {
            self.running = true;
            self.streaming = in_flight.assistant_text;
            for partial in in_flight.tool_output {
                if let Some(cell) = self.tool_mut(&partial.call_id) {
                    cell.output = partial.text;
                } else if let Some(i) = self.child_tool_index(&partial.call_id) {
                    if let CellKind::Task(group) = &mut self.cells[i].kind {
                        if let Some(cell) = group.tool_mut(&partial.call_id) {
                            cell.output = partial.text;
                        }
                    }
                }
            }
            self.rerender_all();
        }
        self.rerender_streaming();
        self.queued = queued;
    }

    /// Applies one session event to the transcript.
    pub fn apply(&mut self, event: SessionEvent) {
        if self.session.as_ref().is_some_and(|s| s.id != event.session_id) {
            return;
        }
        if event.kind.is_durable() {
            if event.seq <= self.last_seq {
                return;
            }
            self.last_seq = event.seq;
            if let Some(s) = &mut self.session {
                s.last_seq = event.seq;
            }
        }
        self.approvals.apply(&event.kind, event.parent.as_deref());
        // Every model call, the session's, its subagents' and its summaries', as it lands: an
        // attach starts from the session's total (see `attached`).
        if let EventKind::AssistantMessage { usage: Some(u), .. }
        | EventKind::Compaction { usage: Some(u), .. } = &event.kind
        {
            self.usage.add(*u);
        }
        if let Some(parent) = event.parent {
            if event.kind.is_loop_event() {
                self.apply_child(parent, event.kind);
                return;
            }
        }
        match event.kind {
            EventKind::TurnStarted { by, .. } => {
                self.running = true;
                self.turn_by = Some(by);
            }
            EventKind::UserMessage { text, .. } => {
                let by = self.turn_by.clone().unwrap_or_default();
                self.push(CellKind::User { by, text });
            }
            EventKind::AssistantDelta { text } => {
                self.streaming.push_str(&text);
                self.rerender_streaming();
            }
            EventKind::AssistantMessage { text, usage, reasoning, searches, .. } => {
                if let Some(usage) = usage {
                    self.context_used = Some(usage.input_tokens + usage.output_tokens);
                }
                self.streaming.clear();
                self.rerender_streaming();
                let thought: Vec<String> =
                    reasoning.iter().map(|r| r.text()).filter(|t| !t.trim().is_empty()).collect();
                if !reasoning.is_empty() {
                    self.push(CellKind::Thinking(thought.join("\n\n")));
                }
                let notices = searches.iter().map(|s| s.lines(8).join("\n  "));
                notices.for_each(|text| self.push(CellKind::Notice { text, error: false }));
                if !text.trim().is_empty() {
                    self.push(CellKind::Assistant(text));
                }
            }
            EventKind::ToolCall { call, .. } if call.name == TASK_TOOL => {
                match self.task_index(&call.call_id) {
                    Some(i) => {
                        if let CellKind::Task(t) = &mut self.cells[i].kind {
                            t.set_call(&call.input);
                        }
                        self.rerender(i);
                    }
                    None => self.push(CellKind::Task(super::subagents::TaskCell::from_call(&call))),
                }
            }
            EventKind::ToolCall { call, .. } => {
                if self.tool_mut(&call.call_id).is_none() {
                    self.push(CellKind::Tool(ToolCell::started(call)));
                }
            }
            EventKind::ToolOutputDelta { call_id, text, .. } => {
                if let Some(i) = self.tool_index(&call_id) {
                    if let CellKind::Tool(t) = &mut self.cells[i].kind {
                        t.output.push_str(&text);
                    }
                    self.rerender(i);
                } else if let Some(i) = self.child_tool_index(&call_id) {
                    if let CellKind::Task(group) = &mut self.cells[i].kind {
                        if let Some(t) = group.tool_mut(&call_id) {
                            t.output.push_str(&text);
                        }
                    }
                    self.rerender(i);
                }
            }
            EventKind::ToolResult { call_id, name, output, is_error, duration_ms, .. }
                if name == TASK_TOOL =>
            {
                // The subagent's report. Its call may be on an older page not loaded yet.
                let i = match self.task_index(&call_id) {
                    Some(i) => i,
                    None => {
                        let group = super::subagents::TaskCell::new(call_id);
                        self.push(CellKind::Task(group));
                        self.cells.len() - 1
                    }
                };
                if let CellKind::Task(t) = &mut self.cells[i].kind {
                    t.result = Some((is_error, output, duration_ms));
                }
                self.rerender(i);
            }
            EventKind::ToolResult { call_id, name, output, is_error, duration_ms, .. } => {
                let result = (is_error, output, duration_ms);
                let i = match self.tool_index(&call_id) {
                    Some(i) => {
                        if let CellKind::Tool(t) = &mut self.cells[i].kind {
                            t.result = Some(result);
                        }
                        i
                    }
                    None => {
                        self.push(CellKind::Tool(ToolCell::from_result(call_id, name, result)));
                        self.cells.len() - 1
                    }
                };
                self.rerender(i);
            }
            EventKind::CompactionStarted { .. } => {
                self.notice = Some("compacting the conversation…".into());
            }
            EventKind::Compaction { tokens_before, tokens_after, trigger, .. } => {
                self.context_used = Some(tokens_after);
                self.notice = None;
                let line = crate::output::compaction_line(trigger, tokens_before, tokens_after);
                self.push_notice(line, false);
            }
            EventKind::ModelRetry { attempt, delay_ms, reason } => {
                self.streaming.clear();
                self.rerender_streaming();
                self.push_notice(
                    format!("model call failed ({reason}); attempt {attempt} in {delay_ms} ms"),
                    true,
                );
            }
            EventKind::TurnCompleted { stop_reason, .. } => {
                self.running = false;
                self.flush_streaming();
                self.cut_open_tasks();
                if stop_reason == StopReason::Interrupted {
                    self.unqueue("interrupted: the queued message is back in the composer");
                }
                match stop_reason {
                    StopReason::Interrupted => self.push_notice("interrupted".into(), true),
                    StopReason::StepLimit => {
                        self.push_notice("stopped at the step limit".into(), true)
                    }
                    StopReason::MaxTokens => {
                        self.push_notice("the model hit its output limit".into(), true)
                    }
                    _ => {}
                }
            }
            EventKind::TurnFailed { error, .. } => {
                self.running = false;
                self.flush_streaming();
                self.cut_open_tasks();
                self.unqueue("the turn failed: the queued message is back in the composer");
                self.push_notice(format!("turn failed: {error}"), true);
            }
            EventKind::Sandbox { state, ms, queue } => {
                self.sandbox = Some((state, ms));
                self.sandbox_queue = queue;
            }
            EventKind::Network { host, port, policy, reason, hint, repeated } => {
                let line =
                    crate::output::network_line(&host, port, &policy, &reason, &hint, repeated);
                self.push_notice(line, true);
            }
            EventKind::MemoryChanged { path, version, op, author, .. } => {
                let what = match op {
                    outboard_shared::FileOp::Delete => "deleted",
                    outboard_shared::FileOp::Restore => "restored",
                    outboard_shared::FileOp::Import => "imported",
                    _ => "updated",
                };
                self.push_notice(format!("{author} {what} {path} (v{version})"), false);
            }
            EventKind::Presence { attached } => {
                // By connection, not by name: two terminals of one user are two entries.
                let driving = attached
                    .iter()
                    .any(|p| p.role == Role::Driver && Some(p.connection_id) == self.connection_id);
                self.role = if driving { Role::Driver } else { Role::Watcher };
                self.presence = attached;
            }
            EventKind::DriveRequested { user } => {
                if self.driving() {
                    self.push_notice(
                        format!("{user} asks to drive — /handover {user} to give them the wheel"),
                        false,
                    );
                }
            }
            EventKind::Todos { .. } => {
                self.work.apply(&event.kind);
            }
            EventKind::BackgroundTask { ref shell_id, ref command, status, exit_code } => {
                if status != outboard_shared::TaskStatus::Running {
                    let line = crate::output::task_line(shell_id, command, status, exit_code);
                    self.push_notice(line, false);
                }
                self.work.apply(&event.kind);
            }
            EventKind::ApprovalRequested { .. } | EventKind::ApprovalResolved { .. } => {
                if let Some((line, error)) = super::approvals::transcript_line(&event.kind) {
                    self.push_notice(line, error);
                }
            }
            EventKind::ModelChanged { model, label, context_window, by } => {
                if let Some(s) = &mut self.session {
                    s.model = label.clone();
                    s.model_name = Some(model.clone());
                    s.context_window = Some(context_window);
                }
                self.push_notice(
                    format!("model: {model} ({label}) from the next turn, by {by}"),
                    false,
                );
            }
            EventKind::SessionTitled { title } => {
                if let Some(s) = &mut self.session {
                    s.title = title;
                }
            }
            EventKind::ModeChanged { mode, by } => {
                self.mode = mode;
                let what = match mode {
                    outboard_shared::SessionMode::Plan => {
                        "plan mode: the model explores and proposes a plan; it changes nothing"
                    }
                    outboard_shared::SessionMode::Default => "plan mode off",
                };
                self.push_notice(format!("{what} (by {by})"), false);
            }
            EventKind::Rewound { checkpoint, code, conversation, by, .. } => {
                let line = crate::output::rewound_line(checkpoint, code, conversation, &by);
                self.push_notice(line, false);
            }
            EventKind::OrgContext { files } => {
                self.push_notice(crate::output::org_context_line(&files), false);
            }
            EventKind::SystemReminder { .. }
            | EventKind::Checkpoint { .. }
            | EventKind::Unknown => {}
        }
    }

    /// A child's event: into its `Task` call's group, opened headed by the call's id when the
    /// call is not loaded (the page began mid-child).
    fn apply_child(&mut self, parent: String, kind: EventKind) {
        let i = match self.task_index(&parent) {
            Some(i) => i,
            None => {
                self.push(CellKind::Task(super::subagents::TaskCell::new(parent)));
                self.cells.len() - 1
            }
        };
        if let CellKind::Task(t) = &mut self.cells[i].kind {
            t.apply(kind);
        }
        self.rerender(i);
    }

    /// The turn ended: a group still open got no report and will get none.
    fn cut_open_tasks(&mut self) {
        // Open groups are the turn's own: the scan stops at the message that started it.
        for i in (0..self.cells.len()).rev() {
            match &mut self.cells[i].kind {
                CellKind::User { .. } => break,
                CellKind::Task(t) if t.running() => {
                    t.cut = true;
                    self.rerender(i);
                }
                _ => {}
            }
        }
    }

    /// A resumed attach's `in_flight` has the main loop's text only: what children had streamed
    /// before the drop is stale (their next complete message brings it whole).
    fn clear_child_streaming(&mut self) {
        for i in (0..self.cells.len()).rev() {
            match &mut self.cells[i].kind {
                CellKind::User { .. } => break,
                CellKind::Task(t) if !t.streaming.is_empty() => {
                    t.streaming.clear();
                    self.rerender(i);
                }
                _ => {}
            }
        }
    }

    /// Ctrl-O: every group whole, or back to the newest items of running ones and folded
    /// finished ones.
    fn toggle_tasks(&mut self) {
        self.expand_tasks = !self.expand_tasks;
        let (mut tasks, mut thinking) = (false, false);
        for i in 0..self.cells.len() {
            match self.cells[i].kind {
                CellKind::Task(_) => tasks = true,
                CellKind::Thinking(_) => thinking = true,
                _ => continue,
            }
            self.rerender(i);
        }
        let what = if self.expand_tasks { "shown whole" } else { "folded" };
        if tasks {
            self.notice = Some(format!("subagents' work {what} (Ctrl-O)"));
        } else if thinking {
            self.notice = Some(format!("thinking {what} (Ctrl-O)"));
        }
    }

    fn task_index(&self, call_id: &str) -> Option<usize> {
        self.cells
            .iter()
            .rposition(|c| matches!(&c.kind, CellKind::Task(t) if t.call_id == call_id))
    }

    /// The group holding the child tool call `call_id` (a delta sent without its parent, an
    /// attach's partial output): running groups are searched, newest first.
    fn child_tool_index(&self, call_id: &str) -> Option<usize> {
        self.cells.iter().rposition(
            |c| matches!(&c.kind, CellKind::Task(t) if t.running() && t.has_tool(call_id)),
        )
    }

    fn flush_streaming(&mut self) {
        if !self.streaming.trim().is_empty() {
            let text = std::mem::take(&mut self.streaming);
            self.push(CellKind::Assistant(text));
        }
        self.streaming.clear();
        self.rerender_streaming();
    }

    fn tool_index(&self, call_id: &str) -> Option<usize> {
        self.cells
            .iter()
            .rposition(|c| matches!(&c.kind, CellKind::Tool(t) if t.call_id == call_id))
    }

    fn tool_mut(&mut self, call_id: &str) -> Option<&mut ToolCell> {
        let i = self.tool_index(call_id)?;
        match &mut self.cells[i].kind {
            CellKind::Tool(t) => Some(t),
            _ => None,
        }
    }

    fn push(&mut self, kind: CellKind) {
        let lines = render_cell(&kind, self.expand_tasks, self.text_width(), &self.theme);
        self.cells.push(Cell { kind, lines });
    }

    /// Adds a notice cell.
    pub fn push_notice(&mut self, text: String, error: bool) {
        self.push(CellKind::Notice { text, error });
    }

    fn rerender(&mut self, i: usize) {
        let width = self.text_width();
        let cell = &mut self.cells[i];
        cell.lines = render_cell(&cell.kind, self.expand_tasks, width, &self.theme);
    }

    fn rerender_all(&mut self) {
        for i in 0..self.cells.len() {
            self.rerender(i);
        }
        self.rerender_streaming();
    }

    fn rerender_streaming(&mut self) {
        self.streaming_lines = if self.streaming.is_empty() {
            Vec::new()
        } else {
            markdown::render(&self.streaming, self.text_width(), &self.theme)
        };
    }
}

fn render_cell(kind: &CellKind, expand: bool, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    let indent = [Span::raw("  ")];
    match kind {
        CellKind::User { by, text } => {
            let mut out = Vec::new();
            for (i, l) in text.lines().enumerate() {
                let mut spans =
                    vec![Span::styled(if i == 0 { "› " } else { "  " }, theme.accent())];
                spans.push(Span::styled(l.to_owned(), theme.bold()));
                out.extend(wrap::wrap_line(&Line::from(spans), width, &indent));
            }
            if !by.is_empty() {
                if let Some(first) = out.first_mut() {
                    first.spans.push(Span::styled(format!("  — {by}"), theme.dim()));
                }
            }
            out
        }
        CellKind::Assistant(text) => markdown::render(text, width, theme),
        CellKind::Thinking(text) if expand && !text.is_empty() => {
            let mut out = vec![Line::from(Span::styled("✻ Thinking", theme.dim()))];
            for l in text.lines() {
                out.extend(wrap::wrap_line(
                    &Line::from(Span::styled(l.to_owned(), theme.dim())),
                    width,
                    &indent,
                ));
            }
            out
        }
        CellKind::Thinking(text) => {
            let words = text.split_whitespace().count();
            let what = match words {
                0 => "✻ Thought (hidden by the provider)".to_owned(),
                n => format!("✻ Thought for {n} words (Ctrl-O shows it)"),
            };
            vec![Line::from(Span::styled(what, theme.dim()))]
        }
        CellKind::Notice { text, error } => {
            let style = if *error { theme.warn() } else { theme.dim() };
            text.lines()
                .flat_map(|l| {
                    wrap::wrap_line(
                        &Line::from(Span::styled(format!("· {l}"), style)),
                        width,
                        &indent,
                    )
                })
                .collect()
        }
        CellKind::Tool(t) => tool_lines(t, width, theme),
        CellKind::Task(t) => super::subagents::lines(t, expand, width, theme),
    }
}

fn tool_lines(t: &ToolCell, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    let (mark, mark_style) = match &t.result {
        None => ("⋯", theme.warn()),
        Some((false, _, _)) => ("✓", theme.ok()),
        Some((true, _, _)) => ("✗", theme.error()),
    };
    let header = Line::from(vec![
        Span::styled(format!("{mark} "), mark_style),
        Span::styled(t.name.clone(), theme.bold()),
        Span::raw(" "),
        Span::styled(tool_summary(&t.name, &t.input), theme.code()),
    ]);
    let gutter = [Span::styled("  │ ", theme.dim())];
    let mut out = wrap::wrap_line(&header, width, &gutter);
    let diff = match &t.result {
        None => diff::diff_lines(&t.name, &t.input, None, theme),
        Some((false, output, _)) => diff::diff_lines(&t.name, &t.input, Some(output), theme),
        Some((true, _, _)) => None,
    };
    let body: String = match (&t.result, &diff) {
        (_, Some(_)) => String::new(),
        (None, None) => t.output.clone(),
        (Some((_, result, _)), None) => {
            if t.name == "Bash" || *result != "(no output)" {
                result.clone()
            } else {
                String::new()
            }
        }
    };
    let mut body_lines: Vec<Line<'static>> = diff.unwrap_or_default();
    if !body.is_empty() && !matches!(t.name.as_str(), "Read") {
        let all: Vec<&str> = body.trim_end_matches('\n').lines().collect();
        let skip = all.len().saturating_sub(TOOL_OUTPUT_LINES);
        if skip > 0 {
            body_lines.push(Line::from(Span::styled(format!("… {skip} lines above"), theme.dim())));
        }
        body_lines.extend(all[skip..].iter().map(|l| Line::from((*l).to_owned())));
    }
    for l in body_lines {
        let mut spans = gutter.to_vec();
        spans.extend(l.spans);
        out.extend(wrap::wrap_line(&Line::from(spans), width, &gutter));
    }
    let footer = match &t.result {
        None => Span::styled("  └ running…", theme.warn()),
        Some((is_error, output, ms)) => {
            let status = if t.name == "Bash" {
                if *is_error {
                    output
                        .lines()
                        .rev()
                        .find_map(|l| {
                            l.trim().strip_prefix("Exit code ").map(|c| format!("exit {c}"))
                        })
                        .unwrap_or_else(|| "failed".into())
                } else {
                    "exit 0".into()
                }
            } else if *is_error {
                "error".into()
            } else {
                "done".into()
            };
            let style = if *is_error { theme.error() } else { theme.dim() };
            Span::styled(format!("  └ {status} · {}", format_ms(*ms)), style)
        }
    };
    out.push(Line::from(footer));
    out
}

/// `/rewind`'s listing, when no picker opens: one line a checkpoint, and how to go back to one.
fn checkpoints_listing(checkpoints: &[outboard_shared::CheckpointInfo]) -> String {
    if checkpoints.is_empty() {
        return "no checkpoints yet: each prompt makes one".into();
    }
    let mut lines = vec!["checkpoints (the state just before each prompt):".to_owned()];
    lines.extend(checkpoints.iter().map(crate::rewind::line));
    lines.push(
        "/rewind N: files and conversation · /rewind N code · /rewind N conversation · /fork N"
            .into(),
    );
    lines.join("\n")
}
