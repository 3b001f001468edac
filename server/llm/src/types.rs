//! The provider-neutral conversation: messages and their blocks, tool specs, a request borrowing
//! the conversation, the answer, the deltas streamed meanwhile, and what a dialect's decoder says
//! after each event.

use std::time::Duration;

use outboard_shared::{Attachment, ProviderSearch, Reasoning, Usage};
use serde_json::Value;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The user, and tool results.
    User,
    /// The model.
    Assistant,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// Its blocks, in order.
    pub content: Vec<ContentBlock>,
}

/// A block of a message.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentBlock {
    /// Text.
    Text(String),
    /// A tool call by the assistant. `input` is the parsed JSON arguments, or a JSON string holding
    /// the raw text when the model sent invalid JSON.
    ToolUse { id: String, name: String, input: Value },
    /// A tool's result, in a user message.
    ToolResult { tool_use_id: String, content: String, is_error: bool },
    /// The model's reasoning, in an assistant message, before its text and tool calls. Each
    /// dialect sends back only the kinds its provider made (see [`Reasoning`]).
    Reasoning(Reasoning),
    /// A web search the provider ran on its own servers while it answered, in an assistant
    /// message: sent back verbatim to the provider that ran it, left out for any other (see
    /// the `search` module).
    ProviderSearch(ProviderSearch),
    /// An image or a document, in a user message: right after a [`ContentBlock::ToolResult`]
    /// (with other media between) it belongs to that result (a `Read` of a picture or a PDF);
    /// elsewhere it is the person's own (`outboard run --image`). Each dialect sends it in its
    /// API's shape (see [`attached`]).
    Media(Attachment),
}

/// The media that belong to the block at `i` of `blocks`: the [`ContentBlock::Media`] blocks
/// right after it.
pub fn attached(blocks: &[ContentBlock], i: usize) -> impl Iterator<Item = &Attachment> {
    blocks[i + 1..].iter().map_while(|b| match b {
        ContentBlock::Media(m) => Some(m),
        _ => None,
    })
}

/// Whether the media block at `i` belongs to a tool result before it (else it is the person's).
pub fn is_tool_media(blocks: &[ContentBlock], i: usize) -> bool {
    blocks[..i]
        .iter()
        .rev()
        .find(|b| !matches!(b, ContentBlock::Media(_)))
        .is_some_and(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

/// `messages` with every image replaced by a note, for a model that takes no images (the model
/// table's, or a model file's `vision = false`): the API would refuse the request, and the note
/// tells the model what it was not shown. `None` when there is no image to replace (the usual
/// case: nothing is copied).
pub fn without_images(messages: &[Message]) -> Option<Vec<Message>> {
    let is_image = |b: &ContentBlock| matches!(b, ContentBlock::Media(m) if m.kind == outboard_shared::AttachmentKind::Image);
    if !messages.iter().any(|m| m.content.iter().any(is_image)) {
        return None;
    }
    Some(
        messages
            .iter()
            .map(|m| Message {
                role: m.role,
                content: m
                    .content
                    .iter()
                    .map(|b| match b {
                        ContentBlock::Media(a) if is_image(b) => ContentBlock::Text(format!(
                            "[The image {} is not shown: this model takes no images. Describe \
                             what you need from it in words, or ask for a model with vision.]",
                            a.name
                        )),
                        other => other.clone(),
                    })
                    .collect(),
            })
            .collect(),
    )
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Name (`Read`, `Bash`, …).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its input object.
    pub input_schema: Value,
}

/// One model call. It borrows the conversation (and the prompt and tools) from whoever owns
/// them: a step of the harness builds one per model call, and the conversation grows with the
/// turn, so copying it per step would make a turn quadratic in its length.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The system prompt.
    pub system: &'a str,
    /// The conversation so far.
    pub messages: &'a [Message],
    /// The tools on offer.
    pub tools: &'a [ToolSpec],
    /// `max_tokens` of this call when not the configured one (a summary is kept short; a
    /// request near the end of its window may not ask for more than is left).
    pub max_tokens: Option<u32>,
    /// Forbid tool calls (`tool_choice` none in every dialect): the tools stay in the request,
    /// so its prefix is the one the provider cached, but the model must answer in text (a
    /// compaction's summary).
    pub forbid_tools: bool,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelStop {
    /// The model finished.
    EndTurn,
    /// The model wants its tool calls run.
    ToolUse,
    /// Output token limit.
    MaxTokens,
    /// Anything else the provider said.
    Other(String),
}

/// A complete model answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    /// Text and tool-use blocks, in order.
    pub content: Vec<ContentBlock>,
    /// Why it stopped.
    pub stop: ModelStop,
    /// Tokens used.
    pub usage: Usage,
}

/// Progress of a model call, reported as it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamDelta {
    /// A chunk of assistant text.
    Text(String),
    /// The attempt failed and another follows after `delay`; text streamed by the failed attempt
    /// is void.
    Retry {
        /// The number of the attempt that follows (2 for the first retry).
        attempt: u32,
        /// How long the provider waits before it.
        delay: Duration,
        /// Why the previous attempt failed, for a person.
        reason: String,
    },
}

/// What a decoder says after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Keep reading.
    More,
    /// The answer is complete.
    Done,
}

/// Tool input from the raw text the model streamed: the parsed JSON; `{}` for no text (a tool
/// without parameters); the raw text as a JSON string when it is not valid JSON, so the harness
/// can tell the model what it sent.
pub fn tool_input_from_raw(raw: String) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(&raw).unwrap_or(Value::String(raw))
}
