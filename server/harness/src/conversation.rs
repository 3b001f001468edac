//! The conversation the model sees, as the harness holds it between steps: the messages, the
//! `seq` of the log event each message starts at, and each message's estimated size.
//!
//! The seqs are what make compaction durable: a `compaction` event names the first event it
//! keeps verbatim (`kept_from_seq`), and both the live loop and a replay of the log apply it
//! with [`Conversation::apply_compaction`], so a restarted server rebuilds exactly the
//! conversation the turn had. The sizes are kept per message so that deciding whether the next
//! request fits its window costs a sum, not a serialisation of the whole conversation.
//!
//! Tool results enter the conversation cut to [`Conversation::result_chars`] (see
//! [`cut_middle`]); the log keeps them whole, and a replay cuts them the same way.

use outboard_shared::{Attachment, EventKind, SessionEvent};

use outboard_llm::context;
use outboard_llm::{ContentBlock, Message, Role};

/// The default cap, in characters, of a tool result as the model sees it (Claude Code's 30,000).
pub const DEFAULT_RESULT_CHARS: usize = 30_000;

/// The conversation and where each message came from.
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    messages: Vec<Message>,
    /// The seq of the first event each message was built from (the compaction's own seq for a
    /// summary).
    starts: Vec<u64>,
    /// [`context::message_bytes`] of each message.
    bytes: Vec<usize>,
    /// Where the history this conversation stands for begins: 1, or the seq of the last
    /// compaction (whose summary stands for everything before).
    from_seq: u64,
    /// How many characters of a tool result the model sees.
    result_chars: usize,
}

impl Conversation {
    /// An empty conversation whose tool results are cut at `result_chars` characters.
    pub fn new(result_chars: usize) -> Self {
        Conversation { from_seq: 1, result_chars: result_chars.max(1), ..Conversation::default() }
    }

    /// Rebuilds the model's conversation from a session's durable log: user messages, assistant
    /// messages with their tool calls, tool results grouped into one user message per step, and
    /// each compaction applied where it was recorded.
    /// A subagent's events (see [`SessionEvent::parent`]) are not part of it, nor are those a
    /// rewind took the conversation back from ([`crate::rewind::history`]).
    pub fn from_log(events: &[SessionEvent], result_chars: usize) -> Self {
        let top: Vec<&SessionEvent> = events.iter().filter(|e| e.parent.is_none()).collect();
        Self::from_events(crate::rewind::history(&top).into_iter(), result_chars)
    }

    /// [`Conversation::from_log`] of the given events, all of one loop (the session's or a
    /// subagent's).
    pub fn from_events<'a>(
        events: impl Iterator<Item = &'a SessionEvent>,
        result_chars: usize,
    ) -> Self {
        let mut out = Conversation::new(result_chars);
        for event in events {
            match &event.kind {
                EventKind::UserMessage { text, attachments } => {
                    out.push_prompt(event.seq, text.clone(), attachments.clone());
                }
                EventKind::SystemReminder { text } => {
                    out.push_user(event.seq, ContentBlock::Text(text.clone()));
                }
                EventKind::AssistantMessage { text, tool_calls, reasoning, searches, .. } => {
                    let mut content: Vec<ContentBlock> =
                        reasoning.iter().cloned().map(ContentBlock::Reasoning).collect();
                    // The provider's searches before the text that cites them.
                    content.extend(searches.iter().cloned().map(ContentBlock::ProviderSearch));
                    if !text.is_empty() {
                        content.push(ContentBlock::Text(text.clone()));
                    }
                    for c in tool_calls {
                        content.push(ContentBlock::ToolUse {
                            id: c.call_id.clone(),
                            name: c.name.clone(),
                            input: c.input.clone(),
                        });
                    }
                    out.push_assistant(event.seq, content);
                }
                EventKind::ToolResult { call_id, output, is_error, attachments, .. } => {
                    out.push_result(event.seq, call_id, output, *is_error, attachments);
                }
                EventKind::Compaction { summary, kept_from_seq, .. } => {
                    out.apply_compaction(event.seq, summary, *kept_from_seq);
                }
                EventKind::TurnCompleted { .. } => out.turn_ended(event.seq, &event.kind),
                _ => {}
            }
        }
        out
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// How many messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether there is no message.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The seq the history it stands for begins at (see the field).
    pub fn from_seq(&self) -> u64 {
        self.from_seq
    }

    /// The seq of the event message `i` starts at.
    pub fn start_of(&self, i: usize) -> Option<u64> {
        self.starts.get(i).copied()
    }

    /// The estimated size in bytes of the messages from `i` on, as a request body carries them.
    pub fn bytes_from(&self, i: usize) -> usize {
        self.bytes.get(i..).map_or(0, |b| b.iter().sum())
    }

    /// The cap of a tool result, in characters.
    pub fn result_chars(&self) -> usize {
        self.result_chars
    }

    /// Appends a user block from the event `seq`, merging it into the last message when that is
    /// a user message already (tool results followed by the next prompt): both APIs want one
    /// user message per turn there.
    pub fn push_user(&mut self, seq: u64, block: ContentBlock) {
        let added = context::block_bytes(&block);
        match self.messages.last_mut() {
            Some(last) if last.role == Role::User => {
                last.content.push(block);
                if let Some(b) = self.bytes.last_mut() {
                    *b += added;
                }
            }
            _ => {
                self.messages.push(Message { role: Role::User, content: vec![block] });
                self.starts.push(seq);
                self.bytes.push(context::MESSAGE_OVERHEAD_BYTES + added);
            }
        }
    }

    /// Appends the person's message from the event `seq`: its text, then its images.
    pub fn push_prompt(&mut self, seq: u64, text: String, attachments: Vec<Attachment>) {
        self.push_user(seq, ContentBlock::Text(text));
        for a in attachments {
            self.push_user(seq, ContentBlock::Media(a));
        }
    }

    /// Appends a tool's result from the event `seq`, cut as the module header says, and the
    /// media it shows the model right after it.
    pub fn push_result(
        &mut self,
        seq: u64,
        call_id: &str,
        output: &str,
        is_error: bool,
        attachments: &[Attachment],
    ) {
        let content = cut_middle(output, self.result_chars).into_owned();
        self.push_user(
            seq,
            ContentBlock::ToolResult { tool_use_id: call_id.to_owned(), content, is_error },
        );
        for a in attachments {
            self.push_user(seq, ContentBlock::Media(a.clone()));
        }
    }

    /// Appends the model's message from the event `seq`.
    pub fn push_assistant(&mut self, seq: u64, content: Vec<ContentBlock>) {
        let message = Message { role: Role::Assistant, content };
        self.bytes.push(context::message_bytes(&message));
        self.messages.push(message);
        self.starts.push(seq);
    }

    /// The index the verbatim tail starts at if the conversation is compacted keeping at most
    /// `keep_bytes` of its most recent messages: always an assistant message, so a tool call
    /// and its result stay together and the tail follows the summary (a user message)
    /// correctly. The newest step is kept even when it alone is over the budget: it is what the
    /// model acts on next. `None` when nothing before the tail has a model message in it, so a
    /// summary would replace nothing but the user's words.
    pub fn tail_start(&self, keep_bytes: usize) -> Option<usize> {
        let assistants: Vec<usize> = (0..self.messages.len())
            .filter(|&i| self.messages[i].role == Role::Assistant)
            .collect();
        let newest = *assistants.last()?;
        let mut start = newest;
        for &i in assistants.iter().rev().skip(1) {
            if self.bytes_from(i) > keep_bytes {
                break;
            }
            start = i;
        }
        // Something worth summarising must lie before the tail.
        let first_assistant = assistants[0];
        if start <= first_assistant {
            start = *assistants.get(1)?;
            if start > newest {
                return None;
            }
        }
        Some(start)
    }

    /// Replaces everything before the message starting at `kept_from_seq` with `summary` (as a
    /// user message), as the `compaction` event `seq` records. A seq no message starts at (a
    /// log edited by hand) keeps the messages that start after it.
    pub fn apply_compaction(&mut self, seq: u64, summary: &str, kept_from_seq: u64) {
        let cut = self.starts.iter().position(|&s| s >= kept_from_seq).unwrap_or(self.starts.len());
        self.messages.drain(..cut);
        self.starts.drain(..cut);
        self.bytes.drain(..cut);
        let message = Message {
            role: Role::User,
            content: vec![ContentBlock::Text(summary_message(summary))],
        };
        self.bytes.insert(0, context::message_bytes(&message));
        self.messages.insert(0, message);
        self.starts.insert(0, seq);
        // A tail that starts with the user's words merges into the summary's message: both APIs
        // want user and assistant messages to alternate.
        if self.messages.get(1).is_some_and(|m| m.role == Role::User) {
            let next = self.messages.remove(1);
            self.starts.remove(1);
            let next_bytes = self.bytes.remove(1);
            self.messages[0].content.extend(next.content);
            self.bytes[0] += next_bytes - context::MESSAGE_OVERHEAD_BYTES.min(next_bytes);
        }
        self.from_seq = seq;
    }
}

/// The kinds of event [`replay_start`] decides from.
pub const REPLAY_KINDS: &[&str] = &["compaction", "rewound"];

/// The first seq a replay of the log must read for [`Conversation::from_log`] to build the
/// same conversation as from the whole log, given the log's `compaction` and `rewound` events
/// ([`REPLAY_KINDS`]): the first event the last compaction kept verbatim, so that a long
/// session is loaded from its last compaction on. 1 (the whole log) when that would not be the
/// same conversation: no compaction, a rewind of the conversation at or after that event (the
/// history it made may reach back before it), or another compaction between that event and
/// the last one (its summary would still be in the kept part).
pub fn replay_start(marks: &[SessionEvent]) -> u64 {
    let top: Vec<&SessionEvent> = marks.iter().filter(|e| e.parent.is_none()).collect();
    let Some((at, last)) = top.iter().enumerate().rev().find_map(|(i, e)| match &e.kind {
        EventKind::Compaction { kept_from_seq, .. } => Some((i, (e.seq, *kept_from_seq))),
        _ => None,
    }) else {
        return 1;
    };
    let (seq, kept_from) = last;
    let crossing = top.iter().enumerate().any(|(i, e)| match &e.kind {
        EventKind::Rewound { conversation: true, .. } => e.seq >= kept_from,
        EventKind::Compaction { .. } => i != at && e.seq >= kept_from && e.seq < seq,
        _ => false,
    });
    if crossing || kept_from == 0 {
        1
    } else {
        kept_from.min(seq)
    }
}

/// How the summary stands in the conversation: a user message saying what it is.
pub fn summary_message(summary: &str) -> String {
    format!(
        "This session continues from an earlier part of the conversation that no longer fits \
         the context window; it was summarised as follows. The messages after this one are \
         the most recent ones, verbatim.\n\n<summary>\n{}\n</summary>",
        summary.trim()
    )
}

/// `text` cut in the middle to at most `max_chars` characters (plus a note), keeping its start
/// and its end, where a command's most useful output usually is. The note says how much was
/// left out and how to see it.
pub fn cut_middle(text: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    // Cheap when the bytes already fit: characters are never more than bytes.
    if text.len() <= max_chars {
        return std::borrow::Cow::Borrowed(text);
    }
    let chars = text.chars().count();
    if chars <= max_chars {
        return std::borrow::Cow::Borrowed(text);
    }
    let head = max_chars / 2;
    let tail = max_chars - head;
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text.char_indices().nth(chars - tail).map_or(text.len(), |(i, _)| i);
    let left_out = chars - head - tail;
    let lines = text[head_end..tail_start].matches('\n').count();
    std::borrow::Cow::Owned(format!(
        "{}\n\n[… {left_out} characters ({lines} lines) cut from the middle of this result to fit \
         the context window; the session's log keeps all of it. To see the cut part, narrow the \
         command (grep, head, tail, sed -n 'A,Bp'), or send its output to a file and Read it \
         with offset and limit.]\n\n{}",
        &text[..head_end],
        &text[tail_start..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboard_shared::{SessionId, ToolCall};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn event(seq: u64, kind: EventKind) -> SessionEvent {
        SessionEvent {
            session_id: SessionId("s".into()),
            seq,
            ts: String::new(),
            kind,
            parent: None,
        }
    }

    fn step(seq: u64, id: &str, output: &str) -> Vec<SessionEvent> {
        vec![
            event(
                seq,
                EventKind::AssistantMessage {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        call_id: id.into(),
                        name: "Bash".into(),
                        input: json!({"command": "ls"}),
                    }],
                    usage: None,
                    reasoning: Vec::new(),
                    model: None,
                    searches: Vec::new(),
                },
            ),
            event(
                seq + 1,
                EventKind::ToolResult {
                    call_id: id.into(),
                    name: "Bash".into(),
                    output: output.into(),
                    is_error: false,
                    duration_ms: 1,
                    attachments: Vec::new(),
                },
            ),
        ]
    }

    fn roles(c: &Conversation) -> String {
        c.messages()
            .iter()
            .map(|m| match m.role {
                Role::User => 'U',
                Role::Assistant => 'A',
            })
            .collect()
    }

    #[test]
    fn a_long_result_is_cut_in_the_middle_with_a_note() {
        let text: String = (0..1000).map(|i| format!("line {i:04}\n")).collect();
        let cut = cut_middle(&text, 100);
        assert!(cut.starts_with("line 0000\nline 0001\n"), "{cut}");
        assert!(cut.ends_with("line 0999\n"), "{cut}");
        assert!(cut.contains("[… 9900 characters (990 lines) cut from the middle"), "{cut}");
        assert!(cut.contains("Read it with offset and limit"), "{cut}");
        // Characters, not bytes: 30 three-byte characters fit a cap of 30.
        let euros = "€".repeat(30);
        assert_eq!(cut_middle(&euros, 30), euros);
        let long = "€".repeat(31);
        let cut = cut_middle(&long, 30);
        assert!(cut.starts_with(&"€".repeat(15)) && cut.ends_with(&"€".repeat(15)), "{cut}");
    }

    #[test]
    fn a_replay_applies_the_compaction_where_it_was_recorded() {
        let mut log = vec![event(
            1,
            EventKind::UserMessage { text: "fix the build".into(), attachments: Vec::new() },
        )];
        log.extend(step(2, "c1", "one"));
        log.extend(step(4, "c2", "two"));
        log.extend(step(6, "c3", "three"));
        let before = Conversation::from_log(&log, 1000);
        assert_eq!(roles(&before), "UAUAUAU");
        // Keep the last two steps: the tail starts at the assistant message of seq 4.
        let start = before.tail_start(before.bytes_from(3)).unwrap();
        assert_eq!((start, before.start_of(start)), (3, Some(4)));
        log.push(event(
            8,
            EventKind::Compaction {
                summary: "The user wants the build fixed; `ls` showed one.".into(),
                from_seq: 1,
                kept_from_seq: 4,
                tokens_before: 0,
                tokens_after: 0,
                trigger: outboard_shared::CompactionTrigger::Auto,
                focus: None,
                usage: None,
            },
        ));
        log.extend(step(9, "c4", "four"));
        let after = Conversation::from_log(&log, 1000);
        assert_eq!(roles(&after), "UAUAUAU");
        assert_eq!(after.from_seq(), 8);
        let ContentBlock::Text(summary) = &after.messages()[0].content[0] else { panic!() };
        assert!(summary.contains("<summary>\nThe user wants the build fixed"), "{summary}");
        let ids: Vec<&str> = after
            .messages()
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["c2", "c3", "c4"]);
        // The live loop's sizes agree with the replay's.
        let mut live = before.clone();
        live.apply_compaction(8, "The user wants the build fixed; `ls` showed one.", 4);
        for e in step(9, "c4", "four") {
            match e.kind {
                EventKind::AssistantMessage { .. } => {
                    let c = Conversation::from_log(std::slice::from_ref(&e), 1000);
                    live.push_assistant(9, c.messages()[0].content.clone());
                }
                EventKind::ToolResult { call_id, output, is_error, .. } => {
                    live.push_result(10, &call_id, &output, is_error, &[])
                }
                _ => {}
            }
        }
        assert_eq!(live.messages(), after.messages());
        assert_eq!(live.bytes_from(0), after.bytes_from(0));
    }

    #[test]
    fn the_tail_keeps_the_newest_step_and_never_everything() {
        let mut log =
            vec![event(1, EventKind::UserMessage { text: "go".into(), attachments: Vec::new() })];
        log.extend(step(2, "c1", &"x".repeat(5000)));
        let one = Conversation::from_log(&log, 100_000);
        assert_eq!(one.tail_start(0), None, "a single step leaves nothing to summarise");
        log.extend(step(4, "c2", &"y".repeat(5000)));
        let two = Conversation::from_log(&log, 100_000);
        // Over budget, the newest step is still kept; the older one is summarised.
        assert_eq!(two.tail_start(10), Some(3));
        // A budget holding everything still summarises the first step.
        assert_eq!(two.tail_start(usize::MAX), Some(3));
    }

    #[test]
    fn results_are_cut_for_the_model_and_sized_as_sent() {
        let mut log =
            vec![event(1, EventKind::UserMessage { text: "go".into(), attachments: Vec::new() })];
        log.extend(step(2, "c1", &"z".repeat(50_000)));
        let c = Conversation::from_log(&log, DEFAULT_RESULT_CHARS);
        let ContentBlock::ToolResult { content, .. } = &c.messages()[2].content[0] else {
            panic!()
        };
        assert!(content.len() < DEFAULT_RESULT_CHARS + 500, "{}", content.len());
        assert!(content.contains("20000 characters"), "{content}");
    }

    /// Logs of turns, compactions (keeping a tail chosen as the live loop chooses it) and
    /// rewinds, in a pseudo-random order: at every length, the conversation replayed from
    /// [`replay_start`] is the one replayed from the whole log.
    #[test]
    fn a_replay_from_the_last_compaction_is_the_whole_logs() {
        let mut checked_suffixes = 0;
        for seed in 1..=40u64 {
            let mut rng = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let mut next = |n: u64| {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (rng >> 33) % n
            };
            let mut log: Vec<SessionEvent> = Vec::new();
            let mut prompts: Vec<u64> = Vec::new();
            for round in 0..30 {
                let seq = log.len() as u64 + 1;
                match next(10) {
                    0 | 1 => {
                        // A compaction of the conversation as it stands.
                        let live = Conversation::from_log(&log, 100_000);
                        let Some(i) = live.tail_start(next(3) as usize * 3000) else { continue };
                        let kept_from_seq = live.start_of(i).unwrap();
                        log.push(event(
                            seq,
                            EventKind::Compaction {
                                summary: format!("summary {round}"),
                                from_seq: live.from_seq(),
                                kept_from_seq,
                                tokens_before: 1,
                                tokens_after: 1,
                                trigger: outboard_shared::CompactionTrigger::Auto,
                                focus: None,
                                usage: None,
                            },
                        ));
                    }
                    2 if !prompts.is_empty() => {
                        let to = prompts[next(prompts.len() as u64) as usize];
                        log.push(event(
                            seq,
                            EventKind::Rewound {
                                checkpoint: 1,
                                to_seq: to - 1,
                                code: false,
                                conversation: true,
                                from_tree: None,
                                by: "alice".into(),
                            },
                        ));
                    }
                    _ => {
                        prompts.push(seq);
                        log.push(event(
                            seq,
                            EventKind::UserMessage {
                                text: format!("go {round}"),
                                attachments: Vec::new(),
                            },
                        ));
                        for k in 0..=next(3) {
                            let id = format!("c{round}_{k}");
                            let out = "o".repeat(500 + next(3000) as usize);
                            log.extend(step(log.len() as u64 + 1, &id, &out));
                        }
                    }
                }
                let len = log.len();
                let prefix = &log[..len];
                let marks: Vec<SessionEvent> = prefix
                    .iter()
                    .filter(|e| REPLAY_KINDS.contains(&e.kind.type_name()))
                    .cloned()
                    .collect();
                let start = replay_start(&marks);
                let whole = Conversation::from_log(prefix, 100_000);
                let tail: Vec<SessionEvent> =
                    prefix.iter().filter(|e| e.seq >= start).cloned().collect();
                let replayed = Conversation::from_log(&tail, 100_000);
                assert_eq!(whole.messages(), replayed.messages(), "seed {seed} at {len}");
                assert_eq!(whole.from_seq(), replayed.from_seq(), "seed {seed} at {len}");
                assert_eq!(whole.bytes_from(0), replayed.bytes_from(0));
                if start > 1 {
                    checked_suffixes += 1;
                }
            }
        }
        assert!(checked_suffixes > 100, "only {checked_suffixes} replays started after seq 1");
    }
}
