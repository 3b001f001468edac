//! The Anthropic Messages API dialect: the request body and the streaming-event decoder.
//!
//! The decoder keeps each content block by its `index` and assembles tool inputs from their
//! `input_json_delta` pieces only at the end, because a partial JSON prefix is not parseable.
//! The answer is complete only at `message_stop`; a stream that ends before is cut (see
//! [`super::LlmError::Cut`]). Block types this harness does not use (thinking, server tools) are
//! skipped, so a model that emits them still works.

use std::collections::BTreeMap;

use outboard_shared::Usage;
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::Value;

use super::sse::SseEvent;
use super::{
    error_status_for_type, tool_input_from_raw, ContentBlock, LlmError, Message, ModelRequest,
    ModelResponse, ModelStop, Progress, Role, StreamDelta, ToolSpec,
};

/// The `anthropic-version` header value this client speaks.
pub(crate) const API_VERSION: &str = "2023-06-01";

/// The JSON body of a streaming `POST /v1/messages`, serialised straight from the borrowed
/// request (no intermediate `Value` tree: the conversation is written once per call, not copied).
pub(crate) fn request_body(
    model: &str,
    max_tokens: u32,
    request: &ModelRequest<'_>,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Body {
        model,
        max_tokens,
        system: request.system,
        messages: Messages(request.messages),
        tools: Tools(request.tools),
        stream: true,
    })
}

/// The request body; empty `system` and `tools` are left out.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "str::is_empty")]
    system: &'a str,
    messages: Messages<'a>,
    #[serde(skip_serializing_if = "Tools::is_empty")]
    tools: Tools<'a>,
    stream: bool,
}

struct Messages<'a>(&'a [Message]);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|m| WireMessage {
            role: match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            },
            content: Blocks(&m.content),
        }))
    }
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Blocks<'a>,
}

struct Blocks<'a>(&'a [ContentBlock]);

impl Serialize for Blocks<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // The API rejects empty text blocks; they carry nothing anyway.
        serializer.collect_seq(
            self.0
                .iter()
                .filter(|b| !matches!(b, ContentBlock::Text(t) if t.is_empty()))
                .map(WireBlock::from),
        )
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text { text: &'a str },
    ToolUse { id: &'a str, name: &'a str, input: ObjectInput<'a> },
    ToolResult { tool_use_id: &'a str, content: &'a str, is_error: bool },
}

impl<'a> From<&'a ContentBlock> for WireBlock<'a> {
    fn from(block: &'a ContentBlock) -> Self {
        match block {
            ContentBlock::Text(text) => WireBlock::Text { text },
            ContentBlock::ToolUse { id, name, input } => {
                WireBlock::ToolUse { id, name, input: ObjectInput(input) }
            }
            ContentBlock::ToolResult { tool_use_id, content, is_error } => {
                WireBlock::ToolResult { tool_use_id, content, is_error: *is_error }
            }
        }
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

struct Tools<'a>(&'a [ToolSpec]);

impl Tools<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|t| WireTool {
            name: &t.name,
            description: &t.description,
            input_schema: &t.input_schema,
        }))
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

/// A content block being streamed.
#[derive(Debug)]
enum Partial {
    Text(String),
    Tool { id: String, name: String, json: String, start_input: Option<Value> },
}

/// Decodes the events of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    blocks: BTreeMap<u64, Partial>,
    usage: Usage,
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
                    (Some(Partial::Tool { json, .. }), "input_json_delta") => {
                        json.push_str(field("partial_json"));
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

    fn read_usage(&mut self, usage: &Value) {
        let n = |k: &str| usage.get(k).and_then(Value::as_u64);
        // "Prompt tokens (including cached)": cache reads and writes are billed input too.
        let input =
            [n("input_tokens"), n("cache_creation_input_tokens"), n("cache_read_input_tokens")];
        if input.iter().any(Option::is_some) {
            self.usage.input_tokens = input.iter().flatten().sum();
        }
        if let Some(output) = n("output_tokens") {
            self.usage.output_tokens = output;
        }
    }

    /// The answer, when the stream completed; `None` when it was cut.
    pub(crate) fn finish(self) -> Option<ModelResponse> {
        if !self.stopped {
            return None;
        }
        let content: Vec<ContentBlock> = self
            .blocks
            .into_values()
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
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    #[test]
    fn empty_text_system_and_tools_are_left_out() {
        let messages = [
            Message {
                role: Role::User,
                content: vec![ContentBlock::Text(String::new()), ContentBlock::Text("hi".into())],
            },
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "t".into(),
                    name: "Glob".into(),
                    input: json!(["not", "an", "object"]),
                }],
            },
        ];
        let request = ModelRequest { system: "", messages: &messages, tools: &[] };
        let body: Value = serde_json::from_slice(&request_body("m", 7, &request).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "m",
                "max_tokens": 7,
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "t", "name": "Glob", "input": {}},
                    ]},
                ],
                "stream": true,
            })
        );
    }
}
