//! Compaction: when the next request would pass a threshold of the model's context window (or
//! the provider refused one as too long, or a person asked), the model is asked for a summary of
//! the conversation so far, and the conversation goes on from the summary and the most recent
//! steps, kept verbatim.
//!
//! The sizes come from [`outboard_llm::context`]: what every request carries (system prompt,
//! tools) is fixed for a turn; the *room* is the threshold minus that. The verbatim tail gets at
//! most [`KEEP_PERCENT`] of the room (only the newest step on request) (a tool call and its result are never split, see
//! [`Conversation::tail_start`]) and the summary at most [`SUMMARY_PERCENT`], so a compacted
//! conversation sits at about half the room and the next compaction is many steps away.
//!
//! The summary request is the whole conversation with the same system prompt and tools (so it is
//! the previous step's request plus the newest result, read from a provider's prompt cache, and
//! the tool calls in it stay valid), ending with [`instruction`], which says how many of the last
//! messages stay verbatim. When that does not fit the window, only the part being replaced is
//! sent; if even that does not fit, long tool results in it are cut and then the oldest steps
//! left out, and the model is told. A model that answers with a tool call instead (or nothing) is
//! asked once more with tool calls forbidden (`tool_choice` none; the tools stay, so the cached
//! prefix holds); if that answer is empty too, the summary is a [`digest`] of the replaced part
//! made here, so a compaction that is due always happens.
//!
//! Durability: nothing is written until the summary is complete; then one `compaction` event
//! records it with the seq range it replaces, and the conversation is cut exactly as a replay of
//! the log cuts it ([`Conversation::apply_compaction`]). A crash during the summary call leaves
//! the log as it was: the resumed turn finds the conversation over the threshold again and
//! compacts again.

use outboard_shared::{CompactionTrigger, EventKind, SessionId, TurnId, Usage};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::conversation::{cut_middle, Conversation};
use crate::sink::{EmitError, Emitter};
use crate::spans;
use outboard_llm::{
    context, ContentBlock, LlmError, Message, ModelRequest, Provider, Role, ToolSpec,
};

/// The default threshold: compact when a request would pass 80 % of the window, leaving the
/// rest for the answer (Claude Code compacts at about the same fill).
pub const DEFAULT_COMPACT_PERCENT: u8 = 80;

/// The share of the room kept verbatim after a compaction.
pub const KEEP_PERCENT: u64 = 30;

/// The share of the room the summary may take (and never more than the configured `max_tokens`).
pub const SUMMARY_PERCENT: u64 = 20;

/// The shortest summary budget asked for, even from a tiny window.
pub const MIN_SUMMARY_TOKENS: u64 = 256;

/// The fewest tokens an answer is left when a request near the end of its window gets a smaller
/// `max_tokens`: below it, the request is sent with this and the provider decides.
pub const MIN_ANSWER_TOKENS: u64 = 1_024;

/// Characters of each tool result in a summary request that does not fit the window whole.
pub const SUMMARY_RESULT_CHARS: usize = 2_000;

/// How the instruction that asks for the summary starts; a test double recognises a summary
/// request by it.
pub const INSTRUCTION_MARK: &str = "<compaction-request>";

/// A session's context window and when to compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The model's window in tokens.
    pub tokens: u64,
    /// Compact when a request would pass this percentage of it; 0 turns automatic compaction
    /// off (a provider's overflow error and `/compact` still compact).
    pub compact_percent: u8,
}

impl Window {
    /// The tokens a request may reach before it is compacted.
    pub fn threshold(&self) -> u64 {
        let percent = if self.compact_percent == 0 { 100 } else { self.compact_percent.min(100) };
        self.tokens * u64::from(percent) / 100
    }

    /// Whether a request of `tokens` should be compacted first.
    pub fn over(&self, tokens: u64) -> bool {
        self.compact_percent > 0 && tokens > self.threshold()
    }

    /// The cap of a tool result in the conversation: the server's `result_chars`, but never more
    /// than an eighth of the window (a 16k-token local model would otherwise fill half its
    /// window with one result).
    pub fn result_chars(&self, configured: usize) -> usize {
        let eighth = self.tokens.saturating_mul(context::BYTES_PER_TOKEN as u64) / 8;
        configured.min(usize::try_from(eighth).unwrap_or(usize::MAX)).max(1_000)
    }

    /// What a provider's "too long" for a request of `refused` estimated tokens teaches: the
    /// real window is smaller than that (a local server whose `n_ctx` is not the configured
    /// window). `None` when it says nothing new.
    pub fn learned_from(&self, refused: u64) -> Option<Window> {
        let smaller = refused * 9 / 10;
        (smaller < self.tokens && smaller > 0).then_some(Window { tokens: smaller, ..*self })
    }

    /// `max_tokens` for a request of `input` tokens when the configured `max_tokens` would pass
    /// the window's end; `None` when it fits.
    pub fn answer_room(&self, input: u64, max_tokens: u32) -> Option<u32> {
        let left = self.tokens.saturating_sub(input);
        if u64::from(max_tokens) <= left {
            return None;
        }
        Some(u32::try_from(left.max(MIN_ANSWER_TOKENS)).unwrap_or(max_tokens).min(max_tokens))
    }
}

/// What a compaction needs besides the conversation.
pub struct Compactor<'a> {
    /// The model.
    pub provider: &'a Provider,
    /// The turn's system prompt.
    pub system: &'a str,
    /// The tools on offer (the conversation's tool calls need them to be valid).
    pub tools: &'a [ToolSpec],
    /// [`context::fixed_bytes`] of the system prompt and tools.
    pub fixed_bytes: usize,
    /// The window.
    pub window: Window,
    /// Where the events go.
    pub emitter: &'a Emitter,
    /// An interrupt: the summary is abandoned and nothing is written.
    pub cancel: &'a CancellationToken,
    /// A shutdown: the same.
    pub shutdown: &'a CancellationToken,
    /// The session and turn its span names.
    pub ids: (&'a SessionId, &'a TurnId),
}

/// A compaction that happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compacted {
    /// The seq of its event.
    pub seq: u64,
    /// Estimated tokens of a request before.
    pub tokens_before: u64,
    /// And after.
    pub tokens_after: u64,
    /// The summary call's tokens.
    pub usage: Usage,
}

/// Why a compaction did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// Nothing before the newest step to summarise.
    #[error("there is nothing to compact yet: the conversation is a single step")]
    Nothing,
    /// What every request carries already fills the threshold.
    #[error(
        "the system prompt and the tools alone take {fixed} of the {window} tokens of the context \
         window: raise the window (`--context-window`) or shorten the org's memory and skills"
    )]
    NoRoom {
        /// Their estimated tokens.
        fixed: u64,
        /// The window.
        window: u64,
    },
    /// The summary call failed.
    #[error("the model could not summarise the conversation: {0}")]
    Model(#[from] LlmError),
    /// The model answered without text.
    #[error("the model's summary was empty")]
    Empty,
    /// Interrupted or shut down during the summary call.
    #[error("the compaction was stopped before it finished")]
    Stopped,
    /// The event could not be recorded.
    #[error(transparent)]
    Emit(#[from] EmitError),
}

impl Compactor<'_> {
    /// Estimated tokens of a request carrying `conversation`.
    pub fn tokens(&self, conversation: &Conversation) -> u64 {
        context::estimate_tokens(self.fixed_bytes + conversation.bytes_from(0))
    }

    /// Summarises the older part of `conversation` and cuts it as the module header says, in a
    /// `compaction` span.
    pub async fn compact(
        &self,
        conversation: &mut Conversation,
        trigger: CompactionTrigger,
        focus: Option<&str>,
    ) -> Result<Compacted, CompactError> {
        let span = spans::compaction(self.ids.0, self.ids.1, trigger);
        let result =
            self.compact_untraced(conversation, trigger, focus).instrument(span.clone()).await;
        let (tokens, outcome) = match &result {
            Ok(done) => (Some((done.tokens_before, done.tokens_after)), "ok"),
            Err(CompactError::Nothing) => (None, "nothing"),
            Err(CompactError::Stopped) => (None, "stopped"),
            Err(_) => (None, "failed"),
        };
        spans::record_compaction(&span, tokens, outcome);
        result
    }

    async fn compact_untraced(
        &self,
        conversation: &mut Conversation,
        trigger: CompactionTrigger,
        focus: Option<&str>,
    ) -> Result<Compacted, CompactError> {
        let fixed = context::estimate_tokens(self.fixed_bytes);
        let threshold = self.window.threshold();
        if fixed >= threshold {
            return Err(CompactError::NoRoom { fixed, window: self.window.tokens });
        }
        let room = threshold - fixed;
        // Asked for, it replaces all but the newest step (as Claude Code's `/compact` does):
        // whoever asks wants the room now.
        let keep_bytes = match trigger {
            CompactionTrigger::Manual => 0,
            _ => usize::try_from(room * KEEP_PERCENT / 100)
                .unwrap_or(usize::MAX)
                .saturating_mul(context::BYTES_PER_TOKEN),
        };
        let tail = conversation.tail_start(keep_bytes).ok_or(CompactError::Nothing)?;
        let kept_from_seq = conversation.start_of(tail).ok_or(CompactError::Nothing)?;
        let summary_tokens = (room * SUMMARY_PERCENT / 100)
            .max(MIN_SUMMARY_TOKENS)
            .min(u64::from(self.provider.max_tokens()));
        let tokens_before = self.tokens(conversation);

        let budget = self.window.tokens.saturating_sub(summary_tokens);
        let messages =
            summary_request(conversation.messages(), tail, focus, self.fixed_bytes, budget);
        self.emitter.transient(EventKind::CompactionStarted { trigger }).await?;
        let mut request = ModelRequest {
            system: self.system,
            messages: &messages,
            tools: self.tools,
            max_tokens: u32::try_from(summary_tokens).ok(),
            forbid_tools: false,
        };
        // Asked in words not to call a tool, a model sometimes does anyway: then it is asked
        // again with tool calls forbidden (`tool_choice` none; the tools stay, so the cached
        // prefix still holds), and if that answer is empty too, the summary is a digest of the
        // replaced part made here. A compaction that was due always happens.
        let mut usage = Usage::default();
        let mut summary = String::new();
        for forbid_tools in [false, true] {
            request.forbid_tools = forbid_tools;
            let response = self.summary_call(&request).await?;
            usage.add(response.usage);
            summary = text_of(&response.content);
            if !summary.is_empty() {
                break;
            }
            let called = response.content.iter().any(|b| matches!(b, ContentBlock::ToolUse { .. }));
            tracing::warn!(
                forbid_tools,
                called_a_tool = called,
                "the model's summary was empty{}",
                if forbid_tools {
                    "; using a digest of the replaced part"
                } else {
                    "; asking again with tool calls forbidden"
                }
            );
        }
        if summary.is_empty() {
            let bytes = usize::try_from(summary_tokens)
                .unwrap_or(usize::MAX)
                .saturating_mul(context::BYTES_PER_TOKEN);
            summary = digest(&conversation.messages()[..tail], bytes);
        }
        let summary = summary.as_str();
        // What the cut leaves: the summary's message and the tail (which starts with the
        // model's message, so nothing merges into the summary).
        let summary_bytes = context::message_bytes(&Message {
            role: Role::User,
            content: vec![ContentBlock::Text(crate::conversation::summary_message(summary))],
        });
        let tokens_after = context::estimate_tokens(
            self.fixed_bytes + summary_bytes + conversation.bytes_from(tail),
        );
        let seq = self
            .emitter
            .durable(EventKind::Compaction {
                summary: summary.to_owned(),
                from_seq: conversation.from_seq(),
                kept_from_seq,
                tokens_before,
                tokens_after,
                trigger,
                focus: focus.map(str::to_owned),
                usage: Some(usage),
            })
            .await?;
        conversation.apply_compaction(seq, summary, kept_from_seq);
        tracing::info!(
            trigger = trigger.as_str(),
            tokens_before,
            tokens_after,
            kept_from_seq,
            "compacted the conversation"
        );
        Ok(Compacted { seq, tokens_before, tokens_after, usage })
    }

    /// One summary call; not streamed to clients (it is not an answer to anyone).
    async fn summary_call(
        &self,
        request: &ModelRequest<'_>,
    ) -> Result<outboard_llm::ModelResponse, CompactError> {
        let mut ignore = |_| {};
        tokio::select! {
            r = self.provider.complete(request, &mut ignore) => Ok(r?),
            _ = self.cancel.cancelled() => Err(CompactError::Stopped),
            _ = self.shutdown.cancelled() => Err(CompactError::Stopped),
        }
    }
}

/// The text blocks of an answer, joined and trimmed.
fn text_of(content: &[ContentBlock]) -> String {
    let text: Vec<&str> = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    text.join("\n").trim().to_owned()
}

/// Characters of one message's text, one call's input or one result in a [`digest`].
const DIGEST_PART_CHARS: usize = 300;

/// A summary made without the model, when it gave none: what the user asked, what the model
/// said and did and what came back, each cut short, the newest kept when it does not all fit
/// `bytes`; headed so the model knows what it is reading.
pub fn digest(replaced: &[Message], bytes: usize) -> String {
    let cut = |text: &str| {
        let text = text.trim();
        match text.char_indices().nth(DIGEST_PART_CHARS) {
            Some((end, _)) => format!("{} …", &text[..end]),
            None => text.to_owned(),
        }
    };
    let mut lines = Vec::new();
    for message in replaced {
        for block in &message.content {
            let line = match (message.role, block) {
                (Role::User, ContentBlock::Text(t)) => format!("- The user: {}", cut(t)),
                (Role::Assistant, ContentBlock::Text(t)) => format!("- You: {}", cut(t)),
                (_, ContentBlock::ToolUse { name, input, .. }) => {
                    format!("- You called {name}: {}", cut(&input.to_string()))
                }
                (_, ContentBlock::ToolResult { content, is_error, .. }) => {
                    let what = if *is_error { "failed" } else { "returned" };
                    format!("  It {what}: {}", cut(content))
                }
                _ => continue,
            };
            lines.push(line.replace('\n', " "));
        }
    }
    let head = "(The model gave no summary when the conversation was compacted: this is a digest \
                of the replaced part, each entry cut short, made by Outboard.)";
    let mut kept: Vec<String> = Vec::new();
    let mut size = head.len() + 64;
    for line in lines.iter().rev() {
        if size + line.len() + 1 > bytes {
            break;
        }
        size += line.len() + 1;
        kept.push(line.clone());
    }
    kept.reverse();
    let left_out = lines.len() - kept.len();
    let mut text = head.to_owned();
    if left_out > 0 {
        text.push_str(&format!("\n- … {left_out} earlier entries left out"));
    }
    for line in kept {
        text.push('\n');
        text.push_str(&line);
    }
    text
}

/// The messages of a summary request replacing `conversation[..tail]`, made to fit `budget`
/// tokens with the request's `fixed_bytes`: the whole conversation when it fits, so the request
/// is the previous step's plus the newest result, read from the provider's cache, and the model
/// sees what the kept steps build on; else only the replaced part, its tool results cut and then
/// its oldest steps left out as needed.
fn summary_request(
    conversation: &[Message],
    tail: usize,
    focus: Option<&str>,
    fixed_bytes: usize,
    budget: u64,
) -> Vec<Message> {
    let budget =
        usize::try_from(budget).unwrap_or(usize::MAX).saturating_mul(context::BYTES_PER_TOKEN);
    let size = |messages: &[Message]| {
        fixed_bytes
            + messages.iter().map(context::message_bytes).sum::<usize>()
            + context::BLOCK_OVERHEAD_BYTES
            + INSTRUCTION_BYTES
            + focus.map_or(0, str::len)
    };
    let (mut messages, kept) = if size(conversation) <= budget {
        (conversation.to_vec(), conversation.len() - tail)
    } else {
        (conversation[..tail].to_vec(), 0)
    };
    if size(&messages) > budget {
        for block in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
            if let ContentBlock::ToolResult { content, .. } = block {
                if let std::borrow::Cow::Owned(cut) = cut_middle(content, SUMMARY_RESULT_CHARS) {
                    *content = cut;
                }
            }
        }
    }
    // Then whole steps from the oldest on (an assistant message and the user message of its
    // results), keeping the first message: the previous summary or the user's first words.
    let mut left_out = 0;
    while size(&messages) > budget && messages.len() > 3 {
        messages.drain(1..3);
        left_out += 2;
    }
    let text = instruction(focus, left_out, kept);
    match messages.last_mut() {
        Some(last) if last.role == Role::User => last.content.push(ContentBlock::Text(text)),
        _ => messages.push(Message { role: Role::User, content: vec![ContentBlock::Text(text)] }),
    }
    messages
}

/// An upper bound of [`instruction`]'s length without the focus.
const INSTRUCTION_BYTES: usize = 2_048;

/// What the model is asked, at the end of the conversation it summarises; the last `kept`
/// messages stay verbatim after the summary.
pub fn instruction(focus: Option<&str>, left_out: usize, kept: usize) -> String {
    let mut text = format!(
        "{INSTRUCTION_MARK}\nThe conversation is about to be compacted to fit the context \
         window: everything above will be replaced by your summary, and the work goes on from \
         it. Write that summary now. Do not call any tool; answer with the summary only.\n\
         \n\
         Keep what is needed to continue without asking again:\n\
         1. The user's requests and intent, their most recent request word for word.\n\
         2. Key technical facts and decisions.\n\
         3. Files read, created or changed (paths), with what changed and why.\n\
         4. Errors met and how they were fixed; what did not work.\n\
         5. What remains to be done.\n\
         6. What you were doing right now, and the next step.\n\
         Be concise but specific: paths, names, commands, numbers."
    );
    if kept > 0 {
        text.push_str(&format!(
            "\n\nThe last {kept} messages above stay verbatim after your summary: summarise \
             what comes before them, and of them only what is needed to follow on."
        ));
    }
    if left_out > 0 {
        text.push_str(&format!(
            "\n\n({left_out} older messages were left out of this request to fit the window: \
             the first message above and the recent ones are what remain.)"
        ));
    }
    if let Some(focus) = focus.map(str::trim).filter(|f| !f.is_empty()) {
        text.push_str("\n\nThe user asks the summary to focus on: ");
        text.push_str(focus);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_threshold_and_the_answer_room() {
        let w = Window { tokens: 16_000, compact_percent: 80 };
        assert_eq!(w.threshold(), 12_800);
        assert!(!w.over(12_800) && w.over(12_801));
        assert!(!Window { compact_percent: 0, ..w }.over(20_000), "0 turns it off");
        assert_eq!(w.answer_room(4_000, 8_192), None);
        assert_eq!(w.answer_room(12_000, 8_192), Some(4_000));
        assert_eq!(w.answer_room(15_900, 8_192), Some(1_024));
        assert_eq!(w.answer_room(15_900, 512), Some(512));
        assert_eq!(w.learned_from(20_000), None, "a bigger refusal teaches nothing");
        assert_eq!(w.learned_from(10_000), Some(Window { tokens: 9_000, compact_percent: 80 }));
    }

    fn conversation(steps: usize, result: usize) -> Vec<Message> {
        let mut out =
            vec![Message { role: Role::User, content: vec![ContentBlock::Text("go".into())] }];
        for i in 0..steps {
            let id = format!("c{i}");
            out.push(Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: id.clone(),
                    name: "Read".into(),
                    input: serde_json::json!({"file_path": "a"}),
                }],
            });
            out.push(Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: id,
                    content: "r".repeat(result),
                    is_error: false,
                }],
            });
        }
        out
    }

    fn bytes(messages: &[Message]) -> usize {
        messages.iter().map(context::message_bytes).sum()
    }

    #[test]
    fn a_summary_request_is_the_whole_conversation_when_it_fits() {
        let all = conversation(10, 1_000);
        let got = summary_request(&all, 15, None, 0, 1_000_000);
        assert_eq!(got.len(), all.len(), "the whole conversation, the instruction in its last");
        assert_eq!(got[..20], all[..20]);
        let ContentBlock::Text(text) = got[20].content.last().unwrap() else { panic!() };
        assert!(
            text.starts_with(INSTRUCTION_MARK) && text.contains("The last 6 messages"),
            "{text}"
        );
    }

    #[test]
    fn a_summary_request_shrinks_to_fit_its_budget() {
        let all = conversation(10, 10_000);
        // Too big whole: only the replaced part (steps 0..7), results cut.
        let budget = 40_000 / 4;
        let got = summary_request(&all, 15, None, 0, budget as u64);
        assert_eq!(got.len(), 15);
        assert!(bytes(&got) <= budget * 4);
        let ContentBlock::ToolResult { content, .. } = &got[2].content[0] else { panic!() };
        assert!(content.len() < 3_000 && content.contains("cut from the middle"), "{content}");
        // Tighter still: the oldest steps go, the first message stays, the model is told.
        let got = summary_request(&all, 15, Some("the build"), 0, 3_000);
        assert!(bytes(&got) <= 3_000 * 4, "{}", bytes(&got));
        assert_eq!(got[0], all[0]);
        assert_eq!(got[1].role, Role::Assistant);
        let ContentBlock::Text(text) = got.last().unwrap().content.last().unwrap() else {
            panic!()
        };
        assert!(text.contains("older messages were left out"), "{text}");
        assert!(text.ends_with("focus on: the build"), "{text}");
    }

    #[test]
    fn results_are_capped_by_the_window_too() {
        assert_eq!(Window { tokens: 200_000, compact_percent: 80 }.result_chars(30_000), 30_000);
        assert_eq!(Window { tokens: 16_000, compact_percent: 80 }.result_chars(30_000), 8_000);
        assert_eq!(Window { tokens: 100, compact_percent: 80 }.result_chars(30_000), 1_000);
    }

    #[test]
    fn the_instruction_fits_its_bound_and_carries_the_focus() {
        let text = instruction(None, 40, 120);
        assert!(text.len() <= INSTRUCTION_BYTES, "{}", text.len());
        assert!(text.starts_with(INSTRUCTION_MARK));
        assert!(instruction(Some(" the flaky test "), 0, 0).ends_with("focus on: the flaky test"));
    }
}
