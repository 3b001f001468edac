//! The TUI's state and its update function, Elm style: [`App::handle`] takes one [`AppEvent`]
//! (a key, a paste, a server event, a connection change) and returns the [`Effect`]s for the
//! runtime to perform (requests to the server, quitting). Nothing here does IO, so every screen
//! is reachable from a test by feeding events.
//!
//! The transcript's lines are rendered ([`crate::cells`]: markdown, diffs, wrapping) when a cell
//! changes or the width does, and stored in the cell; drawing (the `render` module) only picks the
//! visible lines. That keeps a frame proportional to the screen, not to the transcript.
//!
//! The update is split by what comes in: [`keys`] (the composer and the prompts), [`commands`]
//! (the slash commands) and [`apply`] (snapshots, live events, older pages).

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use outboard_shared::{
    ApprovalKind, ApprovalScope, EventKind, PresenceEntry, Role, SandboxQueue, SandboxState,
    SessionAttachResponse, SessionEvent, SessionHistoryResponse, SessionId, SessionInfo,
    StopReason, Usage,
};
use ratatui::text::Line;

use crate::cells::render_cell;
pub use crate::cells::{CellKind, TOOL_OUTPUT_LINES};
use crate::composer::Composer;
use crate::markdown;
use crate::theme::Theme;

// Plain state types other modules read too; re-exported so their `tui::app::` paths stay valid.
use crate::rewind::Picked;
pub use crate::state::{ConnState, Picker, ToolCell};

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
    /// Time passed (the runtime wakes the app at [`App::wake_at`]): a prompt arms, the spinner
    /// turns, a notice expires.
    Tick,
    /// The terminal gained (`true`) or lost the focus (focus reporting).
    Focus(bool),
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
    Answer(crate::approvals::Answer),
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
    /// Tell the person, away from the terminal, that a long turn ended (the runtime rings the
    /// bell or sends an OSC 9 notification, as configured).
    Notify(String),
    /// Leave.
    Quit,
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
    pub work: crate::tasks::Work,
    /// Who is attached.
    pub presence: Vec<PresenceEntry>,
    /// The composer.
    pub composer: Composer,
    /// Lines scrolled up from the bottom (0 follows the stream).
    pub scroll: usize,
    /// The session picker, when open.
    pub picker: Option<Picker>,
    /// The rewind picker, when open.
    pub rewind_picker: Option<crate::rewind::RewindPicker>,
    /// A one-line message in the status area (cleared by the next key, or after
    /// [`guard::NOTICE_MS`]).
    pub notice: Option<String>,
    /// The time of the latest event (ms on the runtime's clock; see [`guard`]).
    pub now: u64,
    /// The time of the event being handled (a key's: when it was read).
    pub event_at: u64,
    /// What the key guards, the notice and Ctrl-C need to know of time.
    pub guards: guard::Guards,
    /// The terminal has the focus (until it reports otherwise).
    pub focused: bool,
    /// The running turn's clock and counters, the last turn's figures.
    pub turn: crate::state::TurnStats,
    /// A long turn that ends while the terminal is unfocused is announced ([`Effect::Notify`]).
    pub notify: bool,
    /// The running turn's retry line (a cell index), updated by its next retry.
    pub retry_cell: Option<usize>,
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
    pub approvals: crate::approvals::Approvals,
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
            work: crate::tasks::Work::default(),
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
            now: 0,
            event_at: 0,
            guards: guard::Guards::default(),
            focused: true,
            turn: crate::state::TurnStats::default(),
            notify: true,
            retry_cell: None,
            rewind_armed: false,
            last_seq: 0,
            history: History::default(),
            expand_tasks: false,
            approvals: crate::approvals::Approvals::default(),
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

    /// Applies one event at the time of the last one ([`App::handle_at`] gives it its own);
    /// returns what the runtime must do.
    pub fn handle(&mut self, event: AppEvent) -> Vec<Effect> {
        let was_running = self.running;
        let mut effects = self.update(event);
        if was_running && !self.running {
            effects.extend(self.turn_ended());
        }
        self.sync_guards();
        effects
    }

    fn update(&mut self, event: AppEvent) -> Vec<Effect> {
        let before = self.content_len();
        let effects = match event {
            AppEvent::Key(key) => self.key(key),
            AppEvent::Paste(text) => {
                self.composer.insert(&text);
                self.guards.typed_at = Some(self.event_at);
                Vec::new()
            }
            AppEvent::Tick => Vec::new(),
            AppEvent::Focus(focused) => {
                self.focused = focused;
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
}

mod apply;
mod commands;
pub mod guard;
mod keys;
pub(crate) mod turn;
pub use turn::error_line as turn_error_line;
