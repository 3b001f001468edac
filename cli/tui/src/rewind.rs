//! The rewind picker: `/rewind` (or Esc Esc on an empty composer) lists the session's
//! checkpoints, the newest selected; ↑↓ moves, Enter picks one and asks what to restore — code and
//! conversation, the conversation only, or the code only (↑↓ or 1–3, Enter) — and the rewind is
//! made. Esc goes back a step, then closes. A checkpoint without a snapshot of the files (a
//! session on a sandbox host) offers the conversation only.

use crossterm::event::KeyCode;
use outboard_shared::CheckpointInfo;

/// What can be restored, in the order the menu offers it: (label, code, conversation).
const MODES: [(&str, bool, bool); 3] = [
    ("code and conversation", true, true),
    ("conversation only", false, true),
    ("code only", true, false),
];

/// The open picker.
#[derive(Debug, Clone, PartialEq)]
pub struct RewindPicker {
    /// The session's checkpoints, oldest first.
    pub checkpoints: Vec<CheckpointInfo>,
    /// The highlighted checkpoint.
    pub selected: usize,
    /// Once a checkpoint is picked: the highlighted row of the restore menu.
    pub restore: Option<usize>,
}

/// What a key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Picked {
    /// Still open.
    Open,
    /// Closed without a rewind.
    Closed,
    /// Rewind to checkpoint `n`, restoring what the flags say.
    Rewind { n: u32, code: bool, conversation: bool },
}

impl RewindPicker {
    /// The picker on `checkpoints` (not empty), the newest highlighted: the usual way back is
    /// one prompt.
    pub fn new(checkpoints: Vec<CheckpointInfo>) -> Self {
        let selected = checkpoints.len().saturating_sub(1);
        RewindPicker { checkpoints, selected, restore: None }
    }

    /// The restore menu's rows for the highlighted checkpoint: (label, code, conversation).
    pub fn modes(&self) -> Vec<(&'static str, bool, bool)> {
        let code = self.checkpoints.get(self.selected).is_some_and(|c| c.code);
        MODES.into_iter().filter(|(_, needs_code, _)| code || !needs_code).collect()
    }

    /// Applies `key`.
    pub fn key(&mut self, key: KeyCode) -> Picked {
        match self.restore {
            None => self.pick_checkpoint(key),
            Some(row) => self.pick_mode(row, key),
        }
    }

    fn pick_checkpoint(&mut self, key: KeyCode) -> Picked {
        let last = self.checkpoints.len().saturating_sub(1);
        match key {
            KeyCode::Esc => return Picked::Closed,
            KeyCode::Up => self.selected = self.selected.saturating_sub(1),
            KeyCode::Down => self.selected = (self.selected + 1).min(last),
            KeyCode::Home => self.selected = 0,
            KeyCode::End => self.selected = last,
            KeyCode::Enter if !self.checkpoints.is_empty() => self.restore = Some(0),
            _ => {}
        }
        Picked::Open
    }

    fn pick_mode(&mut self, row: usize, key: KeyCode) -> Picked {
        let modes = self.modes();
        let chosen = match key {
            KeyCode::Esc => {
                self.restore = None;
                return Picked::Open;
            }
            KeyCode::Up => {
                self.restore = Some(row.saturating_sub(1));
                return Picked::Open;
            }
            KeyCode::Down => {
                self.restore = Some((row + 1).min(modes.len().saturating_sub(1)));
                return Picked::Open;
            }
            KeyCode::Enter => modes.get(row),
            KeyCode::Char(c) => {
                c.to_digit(10).and_then(|d| modes.get((d as usize).checked_sub(1)?))
            }
            _ => None,
        };
        match (chosen, self.checkpoints.get(self.selected)) {
            (Some(&(_, code, conversation)), Some(checkpoint)) => {
                Picked::Rewind { n: checkpoint.n, code, conversation }
            }
            _ => Picked::Open,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(n: u32, code: bool) -> CheckpointInfo {
        CheckpointInfo {
            n,
            prompt: format!("prompt {n}"),
            by: "alice".into(),
            ts: "2026-12-04T20:00:00Z".into(),
            seq: u64::from(n) * 10,
            code,
            current: true,
            dropped: false,
        }
    }

    #[test]
    fn enter_twice_rewinds_the_newest_checkpoint_whole() {
        let mut p = RewindPicker::new(vec![checkpoint(1, true), checkpoint(2, true)]);
        assert_eq!(p.key(KeyCode::Enter), Picked::Open);
        assert_eq!(p.key(KeyCode::Enter), Picked::Rewind { n: 2, code: true, conversation: true });
    }

    #[test]
    fn arrows_and_digits_pick_the_checkpoint_and_what_to_restore() {
        let mut p = RewindPicker::new(vec![checkpoint(1, true), checkpoint(2, true)]);
        p.key(KeyCode::Up);
        p.key(KeyCode::Up);
        p.key(KeyCode::Enter);
        assert_eq!(
            p.key(KeyCode::Char('3')),
            Picked::Rewind { n: 1, code: true, conversation: false }
        );
        p.key(KeyCode::Down);
        assert_eq!(p.restore, Some(1));
        assert_eq!(p.key(KeyCode::Enter), Picked::Rewind { n: 1, code: false, conversation: true });
        assert_eq!(p.key(KeyCode::Char('9')), Picked::Open, "no fourth row");
    }

    #[test]
    fn esc_steps_back_then_closes() {
        let mut p = RewindPicker::new(vec![checkpoint(1, true)]);
        p.key(KeyCode::Enter);
        assert_eq!(p.key(KeyCode::Esc), Picked::Open);
        assert_eq!(p.restore, None);
        assert_eq!(p.key(KeyCode::Esc), Picked::Closed);
    }

    /// A checkpoint with no snapshot of the files offers only the conversation.
    #[test]
    fn a_checkpoint_without_files_offers_the_conversation_only() {
        let mut p = RewindPicker::new(vec![checkpoint(1, false)]);
        assert_eq!(p.modes(), vec![("conversation only", false, true)]);
        p.key(KeyCode::Enter);
        assert_eq!(p.key(KeyCode::Char('2')), Picked::Open);
        assert_eq!(
            p.key(KeyCode::Char('1')),
            Picked::Rewind { n: 1, code: false, conversation: true }
        );
    }
}
