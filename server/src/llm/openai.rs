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

use outboard_shared::Usage;
use serde_json::{json, Map, Value};

use super::sse::SseEvent;
use super::{
    error_status_for_type, tool_input_from_raw, ContentBlock, LlmError, ModelRequest,
    ModelResponse, ModelStop, Progress, Role, StreamDelta,
};

/// The JSON body of a streaming `POST {base}/chat/completions`.
pub(crate) fn request_body(model: &str, max_tokens: u32, request: &ModelRequest) -> Value {
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(json!({ "role": "system", "content": request.system }));
    }
    for message in &request.messages {
        let text: String = message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        match message.role {
            Role::User => {
                for block in &message.content {
                    if let ContentBlock::ToolResult { tool_use_id, content, is_error } = block {
                        let content =
                            if *is_error { format!("Error: {content}") } else { content.clone() };
                        messages.push(json!({
                            "role": "tool",
                            "tool_call_id": tool_use_id,
                            "content": content,
                        }));
                    }
                }
                if !text.is_empty() {
                    messages.push(json!({ "role": "user", "content": text }));
                }
            }
            Role::Assistant => {
                let calls: Vec<Value> = message
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::ToolUse { id, name, input } => {
                            // Servers such as llama.cpp parse the arguments of past calls to
                            // render their chat template, so invalid JSON the model once sent
                            // must not be replayed.
                            let arguments =
                                if input.is_object() { input.to_string() } else { "{}".into() };
                            Some(json!({
                                "id": id,
                                "type": "function",
                                "function": { "name": name, "arguments": arguments },
                            }))
                        }
                        _ => None,
                    })
                    .collect();
                let mut m = Map::new();
                m.insert("role".into(), json!("assistant"));
                let content =
                    if text.is_empty() && !calls.is_empty() { Value::Null } else { json!(text) };
                m.insert("content".into(), content);
                if !calls.is_empty() {
                    m.insert("tool_calls".into(), Value::Array(calls));
                }
                messages.push(Value::Object(m));
            }
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("max_tokens".into(), json!(max_tokens));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    Value::Object(body)
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
            self.usage =
                Usage { input_tokens: n("prompt_tokens"), output_tokens: n("completion_tokens") };
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
