//! An interrupted turn, as the model reads it afterwards (issue 51, item 3). A turn stopped by
//! the person (`turn/interrupt`: Esc or Ctrl-C in the TUI) leaves the conversation as it was
//! when it stopped, often ending with the prompt the model never answered. Without a mark the
//! next prompt would read as the rest of that one; with Claude Code's mark between them the
//! model sees that the first request was cut short and the second is a request of its own.
//!
//! The mark is not an event of its own: the durable `turn_completed` with `stop_reason:
//! interrupted` is the record, and both the live session (right after committing it) and a
//! replay of the log ([`Conversation::from_events`]) add the same block at its `seq`, so a
//! restarted server rebuilds the same conversation.

use outboard_llm::ContentBlock;
use outboard_shared::{EventKind, StopReason};

use crate::conversation::Conversation;

/// What the model reads where a turn was interrupted (Claude Code's words).
pub const INTERRUPTED: &str = "[Request interrupted by user]";

impl Conversation {
    /// The turn ended with the event `kind`, committed at `seq`: an interrupted one leaves
    /// [`INTERRUPTED`] as a user block (joined to the last user message when the conversation
    /// ends with one, as both APIs want).
    pub fn turn_ended(&mut self, seq: u64, kind: &EventKind) {
        if let EventKind::TurnCompleted { stop_reason: StopReason::Interrupted, .. } = kind {
            self.push_user(seq, ContentBlock::Text(INTERRUPTED.to_owned()));
        }
    }
}

/// [`Conversation::turn_ended`] on the session's conversation (when it has one loaded), once the
/// end of the turn is `committed` (its `seq`); the commit's error is handed back.
pub fn noted<E>(
    conversation: Option<&mut Conversation>,
    committed: Result<u64, E>,
    kind: &EventKind,
) -> Result<(), E> {
    let seq = committed?;
    if let Some(conversation) = conversation {
        conversation.turn_ended(seq, kind);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboard_llm::Role;
    use outboard_shared::{SessionEvent, SessionId, TurnId, Usage};

    fn ev(seq: u64, kind: EventKind) -> SessionEvent {
        SessionEvent {
            session_id: SessionId("s".into()),
            seq,
            ts: String::new(),
            kind,
            parent: None,
        }
    }

    fn ended(stop_reason: StopReason) -> EventKind {
        EventKind::TurnCompleted {
            turn_id: TurnId("t".into()),
            stop_reason,
            usage: Usage::default(),
        }
    }

    fn prompt(text: &str) -> EventKind {
        EventKind::UserMessage { text: text.into(), attachments: Vec::new() }
    }

    #[test]
    fn an_interrupted_prompt_and_the_next_are_two_requests_with_the_mark_between() {
        let log = vec![
            ev(1, prompt("rename every file")),
            ev(2, ended(StopReason::Interrupted)),
            ev(3, prompt("no, only the tests")),
        ];
        let c = Conversation::from_log(&log, 1000);
        let texts: Vec<&str> = c.messages()[0]
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["rename every file", INTERRUPTED, "no, only the tests"]);
        assert_eq!(c.messages()[0].role, Role::User);
        // The live session adds the same block at the same place.
        let mut live = Conversation::from_log(&log[..1], 1000);
        noted::<()>(Some(&mut live), Ok(2), &log[1].kind).unwrap();
        live.push_prompt(3, "no, only the tests".into(), Vec::new());
        assert_eq!(live.messages(), c.messages());
    }

    #[test]
    fn a_turn_that_ends_otherwise_leaves_no_mark() {
        let log = vec![ev(1, prompt("hi")), ev(2, ended(StopReason::EndTurn))];
        let c = Conversation::from_log(&log, 1000);
        assert_eq!(c.messages()[0].content.len(), 1);
    }
}
