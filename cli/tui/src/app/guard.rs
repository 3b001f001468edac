//! Keys that never answer a question the user has not seen (issue 51, item 2).
//!
//! Every event comes with its time ([`App::handle_at`]: milliseconds on the runtime's clock,
//! a key's taken when the terminal delivered it), and the runtime says when a frame reached
//! the screen ([`App::drawn`]). From these:
//!
//! - An approval, plan or question prompt takes its answer keys only once it has been on screen
//!   for [`QUIET_MS`] with no typing in between ([`App::prompt_armed`]). Before that, every key
//!   goes to the composer, as if the prompt were not there: nothing typed is lost, and the `y`
//!   of "yes" typed as the prompt opens is a letter of the message, not an answer. A new request
//!   taking the prompt's place (the next one of a batch), or a question's next question, starts
//!   the wait again; so does an answer, until its resolution closes the request.
//! - A picker (`/rewind`, `/sessions`) takes keys read after its first frame only
//!   ([`App::picker_takes`]); keys typed before it was drawn (the Enter of a message being
//!   typed when the listing came back) go to the composer. Esc closes it at any time.
//!
//! No timer lives here: [`App::wake_at`] tells the runtime when the screen next changes on its
//! own (a prompt arming, the spinner, a notice expiring), and the runtime sends a
//! [`AppEvent::Tick`] then. Tests pass times by hand and never sleep.

use super::*;

/// How long a prompt must be on screen with no typing before its keys answer it (ms).
pub const QUIET_MS: u64 = 400;

/// How long a notice stays in the status line (ms).
pub const NOTICE_MS: u64 = 6_000;

/// How long a first Ctrl-C waits for the second that quits (ms).
pub const QUIT_MS: u64 = 2_000;

/// The spinner's frame time while a turn runs (ms).
pub const SPIN_MS: u64 = 100;

/// The times the guards need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Guards {
    /// The prompt on screen: the request it is about (call id and question number), and when
    /// it was first drawn (`None`: not yet).
    pub prompt: Option<(String, Option<u64>)>,
    /// When the open picker was first drawn (`None`: not yet, or none open).
    pub picker: Option<u64>,
    /// The picker was open at the last check.
    pub picker_open: bool,
    /// The last key that went to the composer.
    pub typed_at: Option<u64>,
    /// When the notice in the status line was set, and its text.
    pub notice: Option<(u64, String)>,
    /// When Ctrl-C was pressed once (the next within [`QUIT_MS`] quits).
    pub quit_at: Option<u64>,
    /// The composer's text while it holds a denial's reason or another answer: back after.
    pub stash: Option<String>,
}

impl App {
    /// [`App::handle`] of an event that happened at `at` (the runtime's clock, ms).
    pub fn handle_at(&mut self, at: u64, event: AppEvent) -> Vec<Effect> {
        self.event_at = at;
        self.now = self.now.max(at);
        self.handle(event)
    }

    /// A frame showing the current state reached the screen at `at`.
    pub fn drawn(&mut self, at: u64) {
        if let Some((_, drawn @ None)) = &mut self.guards.prompt {
            *drawn = Some(at);
        }
        if self.guards.picker_open && self.guards.picker.is_none() {
            self.guards.picker = Some(at);
        }
    }

    /// Whether the prompt's keys answer it now: on screen for [`QUIET_MS`], no typing since
    /// [`QUIET_MS`].
    pub fn prompt_armed(&self) -> bool {
        let at = self.event_at.max(self.now);
        self.prompt_armed_at(at)
    }

    fn prompt_armed_at(&self, at: u64) -> bool {
        let Some((_, Some(drawn))) = &self.guards.prompt else { return false };
        let since = self.guards.typed_at.map_or(*drawn, |t| t.max(*drawn));
        at >= since + QUIET_MS
    }

    /// Whether a key read at the event's time goes to the open picker (it was drawn by then).
    pub(super) fn picker_takes(&self) -> bool {
        self.guards.picker.is_some_and(|drawn| self.event_at >= drawn)
    }

    /// When the screen next changes with no event (the runtime sends [`AppEvent::Tick`] then).
    pub fn wake_at(&self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut at = |t: u64| next = Some(next.map_or(t, |n| n.min(t)));
        if let Some((_, Some(drawn))) = &self.guards.prompt {
            if !self.prompt_armed_at(self.now) {
                let since = self.guards.typed_at.map_or(*drawn, |t| t.max(*drawn));
                at(since + QUIET_MS);
            }
        }
        if self.running {
            at(self.now + SPIN_MS);
        }
        if let Some((set, _)) = &self.guards.notice {
            at(set + NOTICE_MS);
        }
        if let Some(q) = self.guards.quit_at {
            at(q + QUIT_MS);
        }
        next
    }

    /// After every event: the guards follow what is open, the notice's age, the stash.
    pub(super) fn sync_guards(&mut self) {
        let key = self.approvals.first().filter(|_| self.driving()).map(|r| {
            let question = self.approvals.picked.len();
            format!("{}#{question}", r.call.call_id)
        });
        match (&key, &self.guards.prompt) {
            (None, _) => self.guards.prompt = None,
            (Some(k), Some((open, _))) if k == open => {}
            // A new request, or the next question of one: it waits to be seen in turn.
            (Some(k), _) => self.guards.prompt = Some((k.clone(), None)),
        }
        let open = self.picker.is_some() || self.rewind_picker.is_some();
        if !open {
            self.guards.picker = None;
        }
        self.guards.picker_open = open;
        // The composer's own text comes back once the reason or answer it held is sent.
        if !self.approvals.denying && !self.approvals.other {
            if let Some(stash) = self.guards.stash.take() {
                let typed = self.composer.take();
                let text = if typed.trim().is_empty() { stash } else { format!("{stash}{typed}") };
                self.composer.set(text);
            }
        }
        // A notice lives NOTICE_MS from when it was set (or changed).
        match (&self.notice, &self.guards.notice) {
            (None, _) => self.guards.notice = None,
            (Some(n), Some((_, seen))) if n == seen => {}
            (Some(n), _) => self.guards.notice = Some((self.now, n.clone())),
        }
        if let Some((set, _)) = &self.guards.notice {
            if self.now >= set + NOTICE_MS {
                self.notice = None;
                self.guards.notice = None;
            }
        }
        if self.guards.quit_at.is_some_and(|q| self.now >= q + QUIT_MS) {
            self.guards.quit_at = None;
        }
    }

    /// The composer's text moves aside while it holds a reason or another answer.
    pub(super) fn stash_composer(&mut self) {
        let text = self.composer.take();
        if !text.is_empty() {
            self.guards.stash = Some(text);
        }
    }
}
