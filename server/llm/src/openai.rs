//! The OpenAI-compatible Chat Completions dialect: the request body and the chunk decoder.
//!
//! "Compatible" servers (OpenAI, vLLM, llama.cpp, Ollama, LM Studio…) differ in the details, so
//! the decoder is liberal: tool-call pieces are assembled by `index`, or — when a server sends no
//! index — by `id`, else appended to the last call; arguments may come whole or in pieces; `id`
//! and `name` may come only in the first piece (a missing id is generated); empty or `null`
//! deltas and unknown fields (`reasoning_content`) are ignored; `[DONE]` may be missing when a
//! `finish_reason` was seen; and `finish_reason: "stop"` with assembled tool calls means the
//! tool calls are wanted.
//!
//! The conversation maps as: system prompt first, assistant text + `tool_calls` (arguments as a
//! JSON string), and each tool result as its own `role: "tool"` message placed before any user
//! text of the same turn (the API wants results right after the assistant's calls). The API has no
//! error flag on tool results, so a failed tool's content is prefixed with `Error: `.

use std::collections::BTreeMap;

use outboard_shared::{Attachment, AttachmentKind, Usage};
use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::{error_status_for_type, LlmError};
use crate::sse::SseEvent;
use crate::types::{
    attached, is_tool_media, tool_input_from_raw, ContentBlock, Message, ModelRequest,
    ModelResponse, ModelStop, Progress, Role, StreamDelta, ToolSpec,
};

/// The JSON body of a streaming `POST {base}/chat/completions`, serialised straight from the
/// borrowed request (no intermediate `Value` tree: the conversation is written once per call, not
/// copied).
pub fn request_body(
    model: &str,
    max_tokens: u32,
    request: &ModelRequest<'_>,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Body {
        model,
        tools: Tools(request.tools),
        messages: Messages { system: request.system, messages: request.messages },
        max_tokens,
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        tool_choice: (request.forbid_tools && !request.tools.is_empty()).then_some("none"),
    })
}

/// The request body; empty `tools` are left out. The fields that do not change between steps
/// come first and the conversation, which only grows, after them, so each body is a byte prefix
/// of the next up to the end of its conversation: servers with automatic prefix caching (OpenAI,
/// llama.cpp, vLLM) reuse the longest prefix they have seen, and those that hash the body's
/// bytes rather than the rendered prompt see the same (the mock LLM measures this).
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Tools::is_empty")]
    tools: Tools<'a>,
    messages: Messages<'a>,
    max_tokens: u32,
    stream: bool,
    stream_options: StreamOptions,
    /// `"none"` when the request forbids tool calls; last, so the byte prefix above stays.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// The system prompt (when there is one) and the conversation, mapped as the module header says.
struct Messages<'a> {
    system: &'a str,
    messages: &'a [Message],
}

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        if !self.system.is_empty() {
            seq.serialize_element(&WireMessage::System { role: "system", content: self.system })?;
        }
        for message in self.messages {
            let text = Text(&message.content);
            match message.role {
                Role::User => {
                    let blocks = &message.content[..];
                    for (at, block) in blocks.iter().enumerate() {
                        if let ContentBlock::ToolResult { tool_use_id, content, is_error } = block {
                            seq.serialize_element(&WireMessage::Tool {
                                role: "tool",
                                tool_call_id: tool_use_id,
                                content: ToolContent { content, is_error: *is_error, blocks, at },
                            })?;
                        }
                    }
                    if needs_parts(blocks) {
                        seq.serialize_element(&WireMessage::UserParts {
                            role: "user",
                            content: Parts(blocks),
                        })?;
                    } else if !text.is_empty() {
                        seq.serialize_element(&WireMessage::User { role: "user", content: text })?;
                    }
                }
                Role::Assistant => {
                    let calls = Calls(&message.content);
                    let has_calls = !calls.is_empty();
                    let content = if text.is_empty() && has_calls { None } else { Some(text) };
                    seq.serialize_element(&WireMessage::Assistant {
                        role: "assistant",
                        content,
                        tool_calls: has_calls.then_some(calls),
                    })?;
                }
            }
        }
        seq.end()
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireMessage<'a> {
    System {
        role: &'static str,
        content: &'a str,
    },
    Tool {
        role: &'static str,
        tool_call_id: &'a str,
        content: ToolContent<'a>,
    },
    User {
        role: &'static str,
        content: Text<'a>,
    },
    UserParts {
        role: &'static str,
        content: Parts<'a>,
    },
    Assistant {
        role: &'static str,
        /// `null` when the message is only tool calls.
        content: Option<Text<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        tool_calls: Option<Calls<'a>>,
    },
}

/// The text blocks of a message joined by newlines, as one string.
#[derive(Clone, Copy)]
struct Text<'a>(&'a [ContentBlock]);

impl Text<'_> {
    fn pieces(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.as_str()),
            _ => None,
        })
    }

    /// Whether the joined text is empty: no text block, or a single empty one.
    fn is_empty(&self) -> bool {
        let mut pieces = self.pieces();
        match (pieces.next(), pieces.next()) {
            (None, _) => true,
            (Some(first), None) => first.is_empty(),
            (Some(_), Some(_)) => false,
        }
    }
}

impl std::fmt::Display for Text<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, piece) in self.pieces().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            f.write_str(piece)?;
        }
        Ok(())
    }
}

impl Serialize for Text<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match (self.pieces().next(), self.pieces().nth(1)) {
            (Some(only), None) => serializer.serialize_str(only),
            _ => serializer.collect_str(self),
        }
    }
}

/// A tool result's content. The API has no error flag on tool results, so a failed tool's
/// content is prefixed with `Error: `. Its media: a PDF's text follows the content (the API takes
/// no documents); an image is named, and follows in a user message (tool messages carry text
/// only).
struct ToolContent<'a> {
    content: &'a str,
    is_error: bool,
    blocks: &'a [ContentBlock],
    at: usize,
}

impl Serialize for ToolContent<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let prefix = if self.is_error { "Error: " } else { "" };
        if attached(self.blocks, self.at).next().is_none() {
            return if self.is_error {
                serializer.collect_str(&format_args!("{prefix}{}", self.content))
            } else {
                serializer.serialize_str(self.content)
            };
        }
        let mut text = format!("{prefix}{}", self.content);
        for m in attached(self.blocks, self.at) {
            match m.kind {
                AttachmentKind::Image => text.push_str(&format!(
                    "\n[The image {} follows in the next user message.]",
                    m.name
                )),
                AttachmentKind::Document => {
                    text.push_str("\n\n");
                    text.push_str(m.text.as_deref().unwrap_or(""));
                }
            }
        }
        serializer.serialize_str(&text)
    }
}

/// Whether a user message goes as content parts: it carries an image (a tool result's or the
/// person's) or a document of the person's.
fn needs_parts(blocks: &[ContentBlock]) -> bool {
    blocks.iter().enumerate().any(|(i, b)| match b {
        ContentBlock::Media(m) => m.kind == AttachmentKind::Image || !is_tool_media(blocks, i),
        _ => false,
    })
}

/// A user message as content parts: its text, the person's media, and the images of its tool
/// results (each introduced by a line naming the call), as `text` and `image_url` data-URL parts.
struct Parts<'a>(&'a [ContentBlock]);

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: std::borrow::Cow<'a, str> },
    ImageUrl { image_url: DataUrl },
}

#[derive(Serialize)]
struct DataUrl {
    url: String,
}

fn data_url(m: &Attachment) -> DataUrl {
    DataUrl { url: format!("data:{};base64,{}", m.media_type, m.data) }
}

impl Serialize for Parts<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let blocks = self.0;
        let mut parts = Vec::new();
        let mut call: Option<&str> = None;
        for (i, b) in blocks.iter().enumerate() {
            match b {
                ContentBlock::ToolResult { tool_use_id, .. } => call = Some(tool_use_id),
                ContentBlock::Text(t) if !t.is_empty() => {
                    call = None;
                    parts.push(Part::Text { text: t.as_str().into() });
                }
                ContentBlock::Media(m)
                    if is_tool_media(blocks, i) && m.kind == AttachmentKind::Image =>
                {
                    let from = call.unwrap_or("a tool call");
                    let line = format!("The image {} from the result of {from}:", m.name);
                    parts.push(Part::Text { text: line.into() });
                    parts.push(Part::ImageUrl { image_url: data_url(m) });
                }
                ContentBlock::Media(_) if is_tool_media(blocks, i) => {}
                ContentBlock::Media(m) => {
                    call = None;
                    match m.kind {
                        AttachmentKind::Image => {
                            parts.push(Part::ImageUrl { image_url: data_url(m) })
                        }
                        AttachmentKind::Document => {
                            parts.push(Part::Text { text: m.text.as_deref().unwrap_or("").into() })
                        }
                    }
                }
                _ => {}
            }
        }
        serializer.collect_seq(parts)
    }
}

/// The tool calls of an assistant message.
struct Calls<'a>(&'a [ContentBlock]);

impl Calls<'_> {
    fn is_empty(&self) -> bool {
        !self.0.iter().any(|b| matches!(b, ContentBlock::ToolUse { .. }))
    }
}

impl Serialize for Calls<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => Some(WireCall {
                id,
                kind: "function",
                function: WireFunction { name, arguments: Arguments(input) },
            }),
            _ => None,
        }))
    }
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    arguments: Arguments<'a>,
}

/// A past call's arguments as a JSON string. Servers such as llama.cpp parse the arguments of
/// past calls to render their chat template, so invalid JSON the model once sent (a non-object
/// input) is not replayed: it is sent as `{}`.
struct Arguments<'a>(&'a Value);

impl Serialize for Arguments<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0.is_object() {
            serializer.collect_str(self.0)
        } else {
            serializer.serialize_str("{}")
        }
    }
}

struct Tools<'a>(&'a [ToolSpec]);

impl Tools<'_> {
    /// Whether no tool is listed (Chat Completions has no web search of its own: a provider's
    /// search entry is left out).
    fn is_empty(&self) -> bool {
        self.0.iter().all(crate::search::is_provider_search)
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let listed = self.0.iter().filter(|t| !crate::search::is_provider_search(t));
        serializer.collect_seq(listed.map(|t| WireTool {
            kind: "function",
            function: WireToolFunction {
                name: &t.name,
                description: &t.description,
                parameters: &t.input_schema,
            },
        }))
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// A tool call being streamed.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Decodes the chunks of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    usage: Usage,
    finish_reason: Option<String>,
    done: bool,
}

impl Decoder {
    /// Handles one SSE event.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEvent,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<Progress, LlmError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Progress::Done);
        }
        if data.is_empty() {
            return Ok(Progress::More);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            LlmError::Decode(format!("a chat completion chunk is not JSON ({e}): {data}"))
        })?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(error));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
            // `prompt_tokens` counts the cached ones too, as `Usage::input_tokens` does. OpenAI
            // names them `prompt_tokens_details.cached_tokens`; llama.cpp's server and some
            // others send a top-level `cache_n`/`cached_tokens`.
            let cached = usage
                .pointer("/prompt_tokens_details/cached_tokens")
                .or_else(|| usage.get("cached_tokens"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            self.usage = Usage {
                input_tokens: n("prompt_tokens"),
                output_tokens: n("completion_tokens"),
                cache_read_tokens: cached,
                cache_write_tokens: 0,
            };
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Ok(Progress::More);
        };
        if let Some(delta) = choice.get("delta").filter(|d| d.is_object()) {
            if let Some(piece) = delta.get("content").and_then(Value::as_str) {
                if !piece.is_empty() {
                    self.text.push_str(piece);
                    on_delta(StreamDelta::Text(piece.to_owned()));
                }
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (position, call) in calls.iter().enumerate() {
                    self.add_call_piece(position as u64, call);
                }
            }
            // The pre-tools `function_call` form, still sent by some older servers.
            if let Some(call) = delta.get("function_call").filter(|c| c.is_object()) {
                let piece = json!({ "index": 0, "function": call });
                self.add_call_piece(0, &piece);
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(Progress::More)
    }

    fn add_call_piece(&mut self, position: u64, piece: &Value) {
        let id = piece.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
        let index = match piece.get("index").and_then(Value::as_u64) {
            Some(index) => index,
            // No index: a known id continues its call, a new id starts one, no id continues the
            // last call (or the call at this position when there is none yet).
            None => match id {
                Some(id) => self
                    .calls
                    .iter()
                    .find(|(_, c)| c.id == id)
                    .map(|(i, _)| *i)
                    .unwrap_or_else(|| self.next_index()),
                None => self.calls.keys().next_back().copied().unwrap_or(position),
            },
        };
        let call = self.calls.entry(index).or_default();
        if let Some(id) = id {
            if call.id.is_empty() {
                call.id = id.to_owned();
            }
        }
        let function = piece.get("function").unwrap_or(&Value::Null);
        if let Some(name) = function.get("name").and_then(Value::as_str) {
            if call.name.is_empty() {
                call.name = name.to_owned();
            }
        }
        match function.get("arguments") {
            Some(Value::String(args)) => call.arguments.push_str(args),
            // A few servers send the arguments as an object rather than a JSON string.
            Some(args @ Value::Object(_)) => call.arguments.push_str(&args.to_string()),
            _ => {}
        }
    }

    fn next_index(&self) -> u64 {
        self.calls.keys().next_back().map_or(0, |i| i + 1)
    }

    /// The answer, when the stream completed; `None` when it was cut.
    pub(crate) fn finish(self) -> Option<ModelResponse> {
        if !self.done && self.finish_reason.is_none() {
            return None;
        }
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(ContentBlock::Text(self.text));
        }
        for (n, call) in self.calls.into_values().enumerate() {
            let id = if call.id.is_empty() { format!("call_{n}") } else { call.id };
            let input = tool_input_from_raw(call.arguments);
            content.push(ContentBlock::ToolUse { id, name: call.name, input });
        }
        let has_tools = content.iter().any(|b| matches!(b, ContentBlock::ToolUse { .. }));
        let stop = match self.finish_reason.as_deref() {
            Some("tool_calls") | Some("function_call") => ModelStop::ToolUse,
            Some("stop") | None if has_tools => ModelStop::ToolUse,
            Some("stop") | None => ModelStop::EndTurn,
            Some("length") => ModelStop::MaxTokens,
            Some(other) => ModelStop::Other(other.to_owned()),
        };
        Some(ModelResponse { content, stop, usage: self.usage })
    }
}

/// An `{"error": {...}}` object sent inside the stream.
fn stream_error(error: &Value) -> LlmError {
    let message = match error {
        Value::String(s) => s.clone(),
        _ => error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string()),
    };
    let status = match error.get("code") {
        Some(Value::Number(n)) => n.as_u64().and_then(|c| u16::try_from(c).ok()),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    }
    .filter(|c| (400..600).contains(c))
    .unwrap_or_else(|| {
        error_status_for_type(error.get("type").and_then(Value::as_str).unwrap_or_default())
    });
    LlmError::Status { status, message, retry_after: None }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn body(system: &str, messages: &[Message], tools: &[ToolSpec]) -> Value {
        let request =
            ModelRequest { system, messages, tools, max_tokens: None, forbid_tools: false };
        serde_json::from_slice(&request_body("m", 7, &request).unwrap()).unwrap()
    }

    #[test]
    fn message_shapes() {
        let text = |t: &str| ContentBlock::Text(t.into());
        let messages = [
            Message { role: Role::User, content: vec![text("two"), text("lines \"quoted\"")] },
            Message { role: Role::Assistant, content: vec![text("a"), text("b")] },
            Message { role: Role::Assistant, content: vec![] },
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "Bash".into(),
                    input: json!({"command": "echo \"hi\"\n"}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "c1".into(),
                        content: "bad \"thing\"\n".into(),
                        is_error: true,
                    },
                    text("and then"),
                ],
            },
            Message { role: Role::User, content: vec![text(""), text("")] },
            Message { role: Role::User, content: vec![text("")] },
        ];
        assert_eq!(
            body("", &messages, &[]),
            json!({
                "model": "m",
                "messages": [
                    {"role": "user", "content": "two\nlines \"quoted\""},
                    {"role": "assistant", "content": "a\nb"},
                    {"role": "assistant", "content": ""},
                    {"role": "assistant", "content": null, "tool_calls": [{
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "Bash", "arguments": "{\"command\":\"echo \\\"hi\\\"\\n\"}"},
                    }]},
                    {"role": "tool", "tool_call_id": "c1", "content": "Error: bad \"thing\"\n"},
                    {"role": "user", "content": "and then"},
                    {"role": "user", "content": "\n"},
                ],
                "max_tokens": 7,
                "stream": true,
                "stream_options": {"include_usage": true},
            })
        );
    }
}
