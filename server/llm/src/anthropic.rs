//! The Anthropic Messages API dialect: the request body and the streaming-event decoder.
//!
//! The decoder keeps each content block by its `index` and assembles tool inputs from their
//! `input_json_delta` pieces only at the end, because a partial JSON prefix is not parseable.
//! The answer is complete only at `message_stop`; a stream that ends before is cut (see
//! [`super::LlmError::Cut`]). The API's own web search (`server_tool_use` and its
//! `web_search_tool_result`) is kept as one [`ContentBlock::ProviderSearch`] and sent back
//! verbatim (see [`crate::search`]); other block types this harness does not use are skipped, so
//! a model that emits them still works.

use std::collections::BTreeMap;

use outboard_shared::{Attachment, AttachmentKind, Reasoning, Usage};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::Value;

use crate::context;
use crate::error::{error_status_for_type, LlmError};
use crate::search;
use crate::sse::SseEvent;
use crate::types::{
    attached, is_tool_media, tool_input_from_raw, ContentBlock, Message, ModelRequest,
    ModelResponse, ModelStop, Progress, Role, StreamDelta, ToolSpec,
};

/// The smallest extended-thinking budget Anthropic accepts.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// The `anthropic-version` header value this client speaks.
pub(crate) const API_VERSION: &str = "2023-06-01";

/// The JSON body of a streaming `POST /v1/messages`, serialised straight from the borrowed
/// request (no intermediate `Value` tree: the conversation is written once per call, not copied),
/// with the prompt-cache breakpoints of [`Breakpoints::place`].
///
/// Extended thinking (`thinking_budget`) is on for a call whose `max_tokens` leaves room for the
/// budget (the API counts it inside `max_tokens`, and refuses a budget below
/// [`MIN_THINKING_BUDGET`]): a short summary call is made without it. With thinking on, the
/// assistant messages carry their thinking blocks back verbatim, signatures included, as the API
/// requires across the tool steps of a turn (it drops those of earlier turns itself, so sending
/// every one keeps the cached prefix stable). With thinking off they are left out: the API
/// refuses thinking blocks in a request without thinking.
pub fn request_body(
    model: &str,
    max_tokens: u32,
    thinking_budget: Option<u32>,
    request: &ModelRequest<'_>,
) -> serde_json::Result<Vec<u8>> {
    let thinking = thinking_budget
        .filter(|b| *b >= MIN_THINKING_BUDGET && *b < max_tokens)
        .map(|budget_tokens| Thinking { kind: "enabled", budget_tokens });
    let marks = Breakpoints::place(model, request);
    serde_json::to_vec(&Body {
        model,
        max_tokens,
        system: System { text: request.system, cached: marks.system },
        messages: Messages {
            messages: request.messages,
            marked: &marks.messages,
            thinking: thinking.is_some(),
        },
        tools: Tools { tools: request.tools, cached: marks.tools },
        tool_choice: (request.forbid_tools && !request.tools.is_empty())
            .then_some(ToolChoice { kind: "none" }),
        thinking,
        stream: true,
    })
}

/// `tool_choice: {"type": "none"}`: the tools stay on offer, the model may not call one.
#[derive(Serialize)]
struct ToolChoice {
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `thinking: {"type": "enabled", "budget_tokens": N}`.
#[derive(Serialize)]
struct Thinking {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

/// The most `cache_control` breakpoints one request may carry (the API refuses a fifth).
pub(crate) const MAX_BREAKPOINTS: usize = 4;

/// Where a request's `cache_control: {type: "ephemeral"}` breakpoints go. The API caches the
/// prefix up to each breakpoint, in the order tools → system → messages, and a later request
/// reads the longest cached prefix it shares. So, at most [`MAX_BREAKPOINTS`]:
/// - after the last tool: the tools rarely change, even when the system prompt does;
/// - after the system prompt: stable for a whole turn (see `agent::turn_system_prompt`);
/// - on the last block of the newest message: written now, read by the next step;
/// - on the last block of the user message before the last assistant message, where the
///   previous step put its newest-message breakpoint: that prefix was written by the previous
///   step, so this step reads it exactly, however many blocks the step added (the API looks back
///   only about 20 blocks from a breakpoint for a shorter hit).
///
/// A breakpoint whose prefix is shorter than [`context::anthropic_min_cacheable`] (estimated
/// with [`context::estimate_tokens`]) is left out: the API would not cache it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Breakpoints {
    tools: bool,
    system: bool,
    /// Indices of the messages whose last block carries a breakpoint, ascending.
    messages: Vec<usize>,
}

impl Breakpoints {
    pub(crate) fn place(model: &str, request: &ModelRequest<'_>) -> Breakpoints {
        let min = context::anthropic_min_cacheable(model);
        let mut marks = Breakpoints::default();
        let mut bytes: usize = request
            .tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
            .sum();
        marks.tools = !request.tools.is_empty() && context::estimate_tokens(bytes) >= min;
        bytes += request.system.len();
        marks.system = !request.system.is_empty() && context::estimate_tokens(bytes) >= min;
        let messages = request.messages;
        let Some(last) = messages.len().checked_sub(1) else {
            return marks;
        };
        let previous = messages[..last]
            .iter()
            .rposition(|m| m.role == Role::Assistant)
            .and_then(|a| a.checked_sub(1))
            .filter(|&i| messages[i].role == Role::User);
        let mut prefix = vec![0usize; messages.len()];
        for (i, m) in messages.iter().enumerate() {
            bytes += m.content.iter().map(block_bytes).sum::<usize>();
            prefix[i] = bytes;
        }
        for i in previous.into_iter().chain([last]) {
            if has_blocks(&messages[i]) && context::estimate_tokens(prefix[i]) >= min {
                marks.messages.push(i);
            }
        }
        // Four at most: the message breakpoints matter more than the tools' (the system's
        // covers the tools' prefix too).
        while marks.count() > MAX_BREAKPOINTS {
            if marks.tools {
                marks.tools = false;
            } else {
                marks.system = false;
            }
        }
        marks
    }

    fn count(&self) -> usize {
        usize::from(self.tools) + usize::from(self.system) + self.messages.len()
    }
}

/// The bytes a block adds to the prompt, for the estimate.
fn block_bytes(block: &ContentBlock) -> usize {
    match block {
        ContentBlock::Text(t) => t.len(),
        ContentBlock::ToolUse { id, name, input } => {
            id.len() + name.len() + input.to_string().len()
        }
        ContentBlock::ToolResult { tool_use_id, content, .. } => tool_use_id.len() + content.len(),
        ContentBlock::Reasoning(r) => reasoning_bytes(r),
        // Counted as the tokens the API bills (4 bytes a token), not the base64.
        ContentBlock::Media(m) => context::media_bytes(m),
        ContentBlock::ProviderSearch(s) if s.provider == search::ANTHROPIC => {
            search::search_bytes(s)
        }
        ContentBlock::ProviderSearch(_) => 0,
    }
}

/// The bytes of a reasoning block as this dialect sends it (none for another provider's kind).
fn reasoning_bytes(reasoning: &Reasoning) -> usize {
    match reasoning {
        Reasoning::Thinking { thinking, signature } => thinking.len() + signature.len(),
        Reasoning::RedactedThinking { data } => data.len(),
        Reasoning::OpenaiReasoning { .. } => 0,
    }
}

/// Whether a block goes on the wire: the API rejects empty text blocks (they carry nothing
/// anyway), another provider's reasoning means nothing to it, and thinking blocks go only in a
/// request with thinking on.
fn is_sent(block: &ContentBlock, thinking: bool) -> bool {
    match block {
        ContentBlock::Text(t) => !t.is_empty(),
        ContentBlock::Reasoning(r) => thinking && !matches!(r, Reasoning::OpenaiReasoning { .. }),
        ContentBlock::ToolUse { .. } | ContentBlock::ToolResult { .. } => true,
        ContentBlock::Media(_) => true,
        ContentBlock::ProviderSearch(s) => s.provider == search::ANTHROPIC,
    }
}

/// Whether the block at `i` goes on the wire as a block of its own: a tool result's media go
/// inside its `tool_result` block instead.
fn is_sent_at(blocks: &[ContentBlock], i: usize, thinking: bool) -> bool {
    is_sent(&blocks[i], thinking)
        && !(matches!(blocks[i], ContentBlock::Media(_)) && is_tool_media(blocks, i))
}

/// Whether a message has a block that is sent (empty text is not), to carry a breakpoint.
fn has_blocks(message: &Message) -> bool {
    message.content.iter().any(|b| is_sent(b, false))
}

/// The request body; empty `system` and `tools` are left out.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "System::is_empty")]
    system: System<'a>,
    messages: Messages<'a>,
    #[serde(skip_serializing_if = "Tools::is_empty")]
    tools: Tools<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<ToolChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<Thinking>,
    stream: bool,
}

/// `{"type": "ephemeral"}`, the only cache type the API has.
#[derive(Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

/// The system prompt: a plain string, or one text block when it carries a breakpoint.
struct System<'a> {
    text: &'a str,
    cached: bool,
}

impl System<'_> {
    fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

impl Serialize for System<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if !self.cached {
            return serializer.serialize_str(self.text);
        }
        #[derive(Serialize)]
        struct Block<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            text: &'a str,
            cache_control: CacheControl,
        }
        serializer.collect_seq([Block { kind: "text", text: self.text, cache_control: EPHEMERAL }])
    }
}

struct Messages<'a> {
    messages: &'a [Message],
    /// Indices of the messages whose last block carries a breakpoint.
    marked: &'a [usize],
    /// Whether thinking is on (thinking blocks are sent).
    thinking: bool,
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.messages.iter().enumerate().map(|(i, m)| WireMessage {
            role: match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            },
            content: Blocks {
                blocks: &m.content,
                mark_last: self.marked.contains(&i),
                thinking: self.thinking,
            },
        }))
    }
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Blocks<'a>,
}

struct Blocks<'a> {
    blocks: &'a [ContentBlock],
    /// The last block sent carries a breakpoint (never a thinking block: the API refuses one
    /// there).
    mark_last: bool,
    thinking: bool,
}

impl Serialize for Blocks<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let thinking = self.thinking;
        let blocks = self.blocks;
        let last = (0..blocks.len()).rposition(|i| is_sent_at(blocks, i, false));
        serializer.collect_seq((0..blocks.len()).flat_map(|i| {
            let b = &blocks[i];
            // A provider's search goes back as its blocks, verbatim (never with a breakpoint).
            let raw = match b {
                ContentBlock::ProviderSearch(s) if is_sent(b, thinking) => s.blocks.as_slice(),
                _ => &[],
            };
            let typed = WireBlock::from_block(blocks, i, thinking).map(|block| Marked {
                block,
                cache_control: (self.mark_last && Some(i) == last).then_some(EPHEMERAL),
            });
            raw.iter().map(Wire::Raw).chain(typed.map(Wire::Typed))
        }))
    }
}

/// A block as sent: one of ours, or a provider's own block verbatim.
#[derive(Serialize)]
#[serde(untagged)]
enum Wire<'a> {
    Typed(Marked<'a>),
    Raw(&'a Value),
}

/// A block and its breakpoint, if it has one.
#[derive(Serialize)]
struct Marked<'a> {
    #[serde(flatten)]
    block: WireBlock<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text { text: &'a str },
    ToolUse { id: &'a str, name: &'a str, input: ObjectInput<'a> },
    ToolResult { tool_use_id: &'a str, content: ResultContent<'a>, is_error: bool },
    Thinking { thinking: &'a str, signature: &'a str },
    RedactedThinking { data: &'a str },
    Image { source: Base64Source<'a> },
    Document { source: Base64Source<'a>, title: &'a str },
}

/// `{"type": "base64", "media_type": …, "data": …}`.
#[derive(Serialize)]
struct Base64Source<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: &'a str,
    data: &'a str,
}

/// An attachment as its own block: an image, a PDF as a document, or the text of a PDF too
/// large to send whole.
fn media_block(m: &Attachment) -> WireBlock<'_> {
    let source = Base64Source { kind: "base64", media_type: &m.media_type, data: &m.data };
    match m.kind {
        AttachmentKind::Image => WireBlock::Image { source },
        AttachmentKind::Document if !m.data.is_empty() => {
            WireBlock::Document { source, title: &m.name }
        }
        AttachmentKind::Document => WireBlock::Text { text: m.text.as_deref().unwrap_or("") },
    }
}

/// A `tool_result`'s content: its text, or with media (a `Read` of a picture or a PDF) the text
/// block then the media blocks.
struct ResultContent<'a> {
    text: &'a str,
    blocks: &'a [ContentBlock],
    at: usize,
}

impl Serialize for ResultContent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if attached(self.blocks, self.at).next().is_none() {
            return serializer.serialize_str(self.text);
        }
        let text = (!self.text.is_empty()).then_some(WireBlock::Text { text: self.text });
        serializer
            .collect_seq(text.into_iter().chain(attached(self.blocks, self.at).map(media_block)))
    }
}

impl<'a> WireBlock<'a> {
    /// The block at `i` as sent, `None` for one that is not (see [`is_sent_at`]).
    fn from_block(blocks: &'a [ContentBlock], i: usize, thinking: bool) -> Option<Self> {
        if !is_sent_at(blocks, i, thinking) {
            return None;
        }
        let block = &blocks[i];
        Some(match block {
            ContentBlock::Text(text) => WireBlock::Text { text },
            ContentBlock::ToolUse { id, name, input } => {
                WireBlock::ToolUse { id, name, input: ObjectInput(input) }
            }
            ContentBlock::ToolResult { tool_use_id, content, is_error } => WireBlock::ToolResult {
                tool_use_id,
                content: ResultContent { text: content, blocks, at: i },
                is_error: *is_error,
            },
            ContentBlock::Media(m) => media_block(m),
            ContentBlock::Reasoning(Reasoning::Thinking { thinking, signature }) => {
                WireBlock::Thinking { thinking, signature }
            }
            ContentBlock::Reasoning(Reasoning::RedactedThinking { data }) => {
                WireBlock::RedactedThinking { data }
            }
            ContentBlock::Reasoning(Reasoning::OpenaiReasoning { .. })
            | ContentBlock::ProviderSearch(_) => return None,
        })
    }
}

/// A tool call's input. The API demands an object; a non-object input is the model's own invalid
/// JSON, which the tool result already explained to it, and is sent as `{}`.
struct ObjectInput<'a>(&'a Value);

impl Serialize for ObjectInput<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.is_object() {
            self.0.serialize(serializer)
        } else {
            serializer.serialize_map(Some(0))?.end()
        }
    }
}

struct Tools<'a> {
    tools: &'a [ToolSpec],
    /// The last tool carries a breakpoint.
    cached: bool,
}

impl Tools<'_> {
    fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let last = self.tools.len().saturating_sub(1);
        serializer.collect_seq(self.tools.iter().enumerate().map(|(i, t)| {
            let cache_control = (self.cached && i == last).then_some(EPHEMERAL);
            if search::is_provider_search(t) {
                return AnyTool::Server(ServerTool {
                    tool: search::anthropic_tool(t),
                    cache_control,
                });
            }
            AnyTool::Client(WireTool {
                name: &t.name,
                description: &t.description,
                input_schema: &t.input_schema,
                cache_control,
            })
        }))
    }
}

/// A tool as listed: one the harness runs, or the API's own (its web search).
#[derive(Serialize)]
#[serde(untagged)]
enum AnyTool<'a> {
    Client(WireTool<'a>),
    Server(ServerTool),
}

#[derive(Serialize)]
struct ServerTool {
    #[serde(flatten)]
    tool: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

/// A content block being streamed.
#[derive(Debug)]
enum Partial {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
        start_input: Option<Value>,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted(String),
    /// A `server_tool_use` block (the API's own web search) and its input's pieces.
    Server {
        block: Value,
        json: String,
    },
    /// A `web_search_tool_result` block, whole.
    ServerResult(Value),
}

/// Decodes the events of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    blocks: BTreeMap<u64, Partial>,
    usage: Usage,
    /// The API's `input_tokens` (without the cache's), `cache_read_input_tokens`,
    /// `cache_creation_input_tokens`, as last reported.
    uncached: u64,
    cache_read: u64,
    cache_write: u64,
    stop_reason: Option<String>,
    stopped: bool,
}

impl Decoder {
    /// Handles one SSE event.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEvent,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<Progress, LlmError> {
        let data: Value = serde_json::from_str(&event.data).map_err(|e| {
            LlmError::Decode(format!("an Anthropic stream event is not JSON ({e}): {}", event.data))
        })?;
        let kind =
            data.get("type").and_then(Value::as_str).or(event.event.as_deref()).unwrap_or_default();
        let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(usage) = data.pointer("/message/usage") {
                    self.read_usage(usage);
                }
            }
            "content_block_start" => {
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let text = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or_default();
                match text("type") {
                    "text" => {
                        let initial = text("text").to_owned();
                        if !initial.is_empty() {
                            on_delta(StreamDelta::Text(initial.clone()));
                        }
                        self.blocks.insert(index, Partial::Text(initial));
                    }
                    "tool_use" => {
                        let start_input = block
                            .get("input")
                            .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()))
                            .cloned();
                        self.blocks.insert(
                            index,
                            Partial::Tool {
                                id: text("id").to_owned(),
                                name: text("name").to_owned(),
                                json: String::new(),
                                start_input,
                            },
                        );
                    }
                    "thinking" => {
                        let thinking = text("thinking").to_owned();
                        let signature = text("signature").to_owned();
                        self.blocks.insert(index, Partial::Thinking { thinking, signature });
                    }
                    "redacted_thinking" => {
                        self.blocks.insert(index, Partial::Redacted(text("data").to_owned()));
                    }
                    "server_tool_use" => {
                        let block = block.clone();
                        self.blocks.insert(index, Partial::Server { block, json: String::new() });
                    }
                    "web_search_tool_result" => {
                        self.blocks.insert(index, Partial::ServerResult(block.clone()));
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let field = |k: &str| delta.get(k).and_then(Value::as_str).unwrap_or_default();
                match (self.blocks.get_mut(&index), field("type")) {
                    (Some(Partial::Text(buf)), "text_delta") => {
                        let piece = field("text");
                        if !piece.is_empty() {
                            buf.push_str(piece);
                            on_delta(StreamDelta::Text(piece.to_owned()));
                        }
                    }
                    (
                        Some(Partial::Tool { json, .. } | Partial::Server { json, .. }),
                        "input_json_delta",
                    ) => {
                        json.push_str(field("partial_json"));
                    }
                    (Some(Partial::Thinking { thinking, .. }), "thinking_delta") => {
                        thinking.push_str(field("thinking"));
                    }
                    // The signature comes whole, once, just before the block stops.
                    (Some(Partial::Thinking { signature, .. }), "signature_delta") => {
                        *signature = field("signature").to_owned();
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = data.get("usage") {
                    self.read_usage(usage);
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Progress::Done);
            }
            "error" => {
                let error = data.get("error").unwrap_or(&Value::Null);
                let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
                let message = error.get("message").and_then(Value::as_str).unwrap_or_default();
                return Err(LlmError::Status {
                    status: error_status_for_type(kind),
                    message: format!("{kind}: {message}"),
                    retry_after: None,
                });
            }
            // ping, content_block_stop and event types added after this client was written.
            _ => {}
        }
        Ok(Progress::More)
    }

    /// Reads a `usage` object. `message_start` carries the input side and `message_delta` the
    /// final output (and, on some API versions, the input side again), so a field present
    /// replaces what an earlier event said and an absent one keeps it.
    fn read_usage(&mut self, usage: &Value) {
        let n = |k: &str| usage.get(k).and_then(Value::as_u64);
        if let Some(read) = n("cache_read_input_tokens") {
            self.cache_read = read;
        }
        if let Some(write) = n("cache_creation_input_tokens") {
            self.cache_write = write;
        }
        if let Some(input) = n("input_tokens") {
            self.uncached = input;
        }
        // Usage counts every prompt token in `input_tokens`: the API's `input_tokens` excludes
        // cache reads and writes, which are billed input too.
        self.usage.input_tokens = self.uncached + self.cache_read + self.cache_write;
        self.usage.cache_read_tokens = self.cache_read;
        self.usage.cache_write_tokens = self.cache_write;
        if let Some(output) = n("output_tokens") {
            self.usage.output_tokens = output;
        }
    }

    /// The answer, when the stream completed; `None` when it was cut.
    pub(crate) fn finish(self) -> Option<ModelResponse> {
        if !self.stopped {
            return None;
        }
        let (results, blocks): (Vec<Partial>, Vec<Partial>) =
            self.blocks.into_values().partition(|b| matches!(b, Partial::ServerResult(_)));
        let mut results: Vec<Value> = results
            .into_iter()
            .filter_map(|b| match b {
                Partial::ServerResult(v) => Some(v),
                _ => None,
            })
            .collect();
        let content: Vec<ContentBlock> = blocks
            .into_iter()
            .filter_map(|b| match b {
                Partial::Text(t) if t.is_empty() => None,
                Partial::Text(t) => Some(ContentBlock::Text(t)),
                Partial::Tool { id, name, json, start_input } => {
                    let input = match start_input {
                        Some(v) if json.trim().is_empty() => v,
                        _ => tool_input_from_raw(json),
                    };
                    Some(ContentBlock::ToolUse { id, name, input })
                }
                Partial::Thinking { thinking, signature } => {
                    Some(ContentBlock::Reasoning(Reasoning::Thinking { thinking, signature }))
                }
                Partial::Redacted(data) => {
                    Some(ContentBlock::Reasoning(Reasoning::RedactedThinking { data }))
                }
                Partial::Server { mut block, json } => {
                    if !json.trim().is_empty() {
                        block["input"] = tool_input_from_raw(json);
                    }
                    let id = block.get("id").cloned().unwrap_or(Value::Null);
                    let answer = results.iter().position(|r| r.get("tool_use_id") == Some(&id));
                    Some(search::from_anthropic(block, answer.map(|i| results.remove(i))))
                }
                Partial::ServerResult(_) => None,
            })
            .collect();
        let has_tools = content.iter().any(|b| matches!(b, ContentBlock::ToolUse { .. }));
        let stop = match self.stop_reason.as_deref() {
            Some("end_turn") | Some("stop_sequence") => ModelStop::EndTurn,
            Some("tool_use") => ModelStop::ToolUse,
            Some("max_tokens") => ModelStop::MaxTokens,
            Some(other) => ModelStop::Other(other.to_owned()),
            None if has_tools => ModelStop::ToolUse,
            None => ModelStop::EndTurn,
        };
        Some(ModelResponse { content, stop, usage: self.usage })
    }
}

#[cfg(test)]
mod tests;
