//! A turn's hooks ([`Hooks`]) and the notes they leave for the session log.

use std::sync::{Arc, Mutex};

use outboard_hooks::{HookEvent, HookSpec};

/// The most notes kept for the next reminder; more are counted.
pub const MAX_NOTES: usize = 32;

/// A turn's hooks and the notes waiting to be logged.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    pub(crate) specs: Arc<Vec<HookSpec>>,
    pub(crate) notes: Arc<Mutex<Notes>>,
}

#[derive(Debug, Default)]
pub(crate) struct Notes {
    lines: Vec<String>,
    more: usize,
}

impl Hooks {
    /// A set of these hooks (tests, benches).
    pub fn of(specs: Vec<HookSpec>) -> Hooks {
        Hooks { specs: Arc::new(specs), notes: Arc::default() }
    }

    /// Whether any hook is set on `event` for `subject`.
    pub fn any(&self, event: HookEvent, subject: Option<&str>) -> bool {
        self.specs.iter().any(|s| s.applies(event, subject))
    }

    /// Keeps `line` for the session log (and warns in the server's).
    pub fn note(&self, line: String) {
        tracing::warn!("hook: {line}");
        let Ok(mut notes) = self.notes.lock() else { return };
        if notes.lines.len() < MAX_NOTES {
            notes.lines.push(line);
        } else {
            notes.more += 1;
        }
    }

    /// The notes kept since the last call, as a reminder's text; `None`: nothing to say.
    pub fn take_notes(&self) -> Option<String> {
        let mut notes = self.notes.lock().ok()?;
        if notes.lines.is_empty() {
            return None;
        }
        let mut text = String::from("<system-reminder>\nHooks:\n");
        for line in notes.lines.drain(..) {
            text.push_str("- ");
            text.push_str(&line);
            text.push('\n');
        }
        if notes.more > 0 {
            text.push_str(&format!("- and {} more\n", notes.more));
            notes.more = 0;
        }
        text.push_str("</system-reminder>");
        Some(text)
    }
}
