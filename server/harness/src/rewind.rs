//! Checkpoints and rewinds as the log records them: which prompt each checkpoint belongs to,
//! and the history a conversation is rebuilt from once rewinds went back in it.
//!
//! Prompt N is the Nth top-level `user_message` of the log; its checkpoint is the last
//! `checkpoint` event before it (written just before the prompt's `turn_started`). A `rewound`
//! event with `conversation` says: from here on, the conversation is what it was right after
//! event `to_seq`. Each event of the loop thus continues one history, and a rewind makes an
//! earlier history current again; [`history`] follows those links, so a replay of the log after
//! a crash rebuilds exactly the conversation the session had, however many rewinds (into
//! abandoned branches too) the log holds.

use outboard_shared::{CheckpointInfo, EventKind, SessionEvent};

/// The kinds of event the checkpoints are read from ([`checkpoints`]).
pub const KINDS: &[&str] = &["turn_started", "user_message", "checkpoint", "rewound"];

/// One prompt's checkpoint, with what a rewind to it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// What clients are shown.
    pub info: CheckpointInfo,
    /// The workspace's snapshot (a git tree id), if one was made.
    pub tree: Option<String>,
    /// The log position the conversation goes back to.
    pub to_seq: u64,
}

/// The checkpoints of a log (of at least the [`KINDS`] events), oldest first.
pub fn checkpoints(log: &[SessionEvent]) -> Vec<Checkpoint> {
    let top: Vec<&SessionEvent> = log.iter().filter(|e| e.parent.is_none()).collect();
    let current: std::collections::HashSet<u64> = history(&top).iter().map(|e| e.seq).collect();
    let mut out = Vec::new();
    let mut snapshot: Option<(&Option<String>, u64)> = None;
    let mut started: Option<(&str, u64)> = None;
    for event in top {
        match &event.kind {
            EventKind::Checkpoint { tree, at_seq } => snapshot = Some((tree, *at_seq)),
            EventKind::TurnStarted { by, .. } => started = Some((by, event.seq)),
            EventKind::UserMessage { text, .. } => {
                let (by, turn_seq) = started.take().unwrap_or(("", event.seq));
                // Without a checkpoint (a log older than checkpoints), the position before
                // the prompt's turn: the conversation is known, the files are not.
                let (tree, to_seq) = match snapshot.take() {
                    Some((tree, at_seq)) => (tree.clone(), at_seq),
                    None => (None, turn_seq.saturating_sub(1)),
                };
                out.push(Checkpoint {
                    info: CheckpointInfo {
                        n: u32::try_from(out.len() + 1).unwrap_or(u32::MAX),
                        prompt: text.clone(),
                        by: by.to_owned(),
                        ts: event.ts.clone(),
                        seq: event.seq,
                        code: tree.is_some(),
                        current: current.contains(&event.seq),
                        dropped: false,
                    },
                    tree,
                    to_seq,
                });
            }
            _ => {}
        }
    }
    out
}

/// The events of the current history of `events` (one loop's, in log order), oldest first:
/// all of them when no rewind took the conversation back, else the branch the last rewind made
/// current, continued by the events after it.
pub fn history<'a>(events: &[&'a SessionEvent]) -> Vec<&'a SessionEvent> {
    if !events.iter().any(|e| is_conversation_rewind(&e.kind)) {
        return events.to_vec();
    }
    // The event before each one in its history, and the head of the history after each event.
    let mut previous: Vec<Option<usize>> = Vec::with_capacity(events.len());
    let mut head_after: Vec<Option<usize>> = Vec::with_capacity(events.len());
    let mut head = None;
    for (i, event) in events.iter().enumerate() {
        match &event.kind {
            EventKind::Rewound { to_seq, conversation: true, .. } => {
                // The history as it stood right after event `to_seq`.
                let upto = events[..i].partition_point(|e| e.seq <= *to_seq);
                head = upto.checked_sub(1).and_then(|j| head_after[j]);
                previous.push(None);
            }
            _ => {
                previous.push(head);
                head = Some(i);
            }
        }
        head_after.push(head);
    }
    let mut out = Vec::new();
    let mut at = head;
    while let Some(i) = at {
        out.push(events[i]);
        at = previous[i];
    }
    out.reverse();
    out
}

fn is_conversation_rewind(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Rewound { conversation: true, .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboard_shared::{SessionId, TurnId};

    fn event(seq: u64, kind: EventKind) -> SessionEvent {
        SessionEvent {
            session_id: SessionId("s".into()),
            seq,
            ts: String::new(),
            kind,
            parent: None,
        }
    }

    /// A prompt as the session logs it: checkpoint, turn_started, user_message, an answer.
    fn prompt(log: &mut Vec<SessionEvent>, text: &str) {
        let at = log.last().map_or(0, |e| e.seq);
        let tree = Some(format!("tree-{text}"));
        log.push(event(at + 1, EventKind::Checkpoint { tree, at_seq: at }));
        let turn = EventKind::TurnStarted { turn_id: TurnId("t".into()), by: "alice".into() };
        log.push(event(at + 2, turn));
        log.push(event(
            at + 3,
            EventKind::UserMessage { text: text.into(), attachments: Vec::new() },
        ));
        log.push(event(at + 4, EventKind::SystemReminder { text: format!("answer {text}") }));
    }

    fn rewind(log: &mut Vec<SessionEvent>, checkpoint: u32, conversation: bool) {
        let to_seq = checkpoints(log)[checkpoint as usize - 1].to_seq;
        let seq = log.last().unwrap().seq + 1;
        log.push(event(
            seq,
            EventKind::Rewound {
                checkpoint,
                to_seq,
                code: true,
                conversation,
                from_tree: None,
                by: "alice".into(),
            },
        ));
    }

    fn said(log: &[SessionEvent]) -> Vec<String> {
        let all: Vec<&SessionEvent> = log.iter().collect();
        history(&all)
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::UserMessage { text, .. } => Some(text.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_rewind_goes_back_to_just_before_the_prompt_and_the_numbers_stay() {
        let mut log = Vec::new();
        for p in ["one", "two", "three"] {
            prompt(&mut log, p);
        }
        rewind(&mut log, 2, true);
        assert_eq!(said(&log), ["one"]);
        prompt(&mut log, "four");
        assert_eq!(said(&log), ["one", "four"]);
        let cps = checkpoints(&log);
        let listed: Vec<(u32, &str, bool)> =
            cps.iter().map(|c| (c.info.n, c.info.prompt.as_str(), c.info.current)).collect();
        assert_eq!(
            listed,
            [(1, "one", true), (2, "two", false), (3, "three", false), (4, "four", true)]
        );
        assert_eq!(cps[1].tree.as_deref(), Some("tree-two"));
        assert_eq!(cps[1].to_seq, 4, "just after the first prompt's answer");
    }

    #[test]
    fn a_rewind_into_an_abandoned_branch_brings_that_branch_back() {
        let mut log = Vec::new();
        for p in ["one", "two", "three"] {
            prompt(&mut log, p);
        }
        rewind(&mut log, 2, true);
        prompt(&mut log, "four");
        // Checkpoint 3 lies in the branch the first rewind left: "one", "two" were current then.
        rewind(&mut log, 3, true);
        assert_eq!(said(&log), ["one", "two"]);
        prompt(&mut log, "five");
        assert_eq!(said(&log), ["one", "two", "five"]);
    }

    #[test]
    fn a_code_only_rewind_leaves_the_conversation() {
        let mut log = Vec::new();
        for p in ["one", "two"] {
            prompt(&mut log, p);
        }
        rewind(&mut log, 1, false);
        assert_eq!(said(&log), ["one", "two"]);
        rewind(&mut log, 1, true);
        assert_eq!(said(&log), Vec::<String>::new());
    }

    #[test]
    fn a_prompt_without_a_checkpoint_has_no_code_but_a_position() {
        let turn = EventKind::TurnStarted { turn_id: TurnId("t".into()), by: "bob".into() };
        let log = vec![
            event(1, turn),
            event(2, EventKind::UserMessage { text: "old".into(), attachments: Vec::new() }),
        ];
        let cps = checkpoints(&log);
        assert_eq!(cps.len(), 1);
        assert!(!cps[0].info.code && cps[0].tree.is_none());
        assert_eq!((cps[0].to_seq, cps[0].info.by.as_str()), (0, "bob"));
    }
}
