//! The OpenAI Responses API dialect (`POST {base}/responses`): the request body and the
//! streaming-event decoder.
//!
//! Stateless by design: every request carries the whole conversation as `input` items with
//! `store: false`, and asks for `include: ["reasoning.encrypted_content"]`. A reasoning model's
//! reasoning items must be sent back with the function calls that followed them (the API refuses a
//! `function_call` whose reasoning is missing, and reasons worse without it); with no state on the
//! server, the encrypted content returned in each item is what carries that reasoning across
//! steps. So reasoning items go back exactly as they came (id, summary, encrypted content) and
//! never to another dialect.
//!
//! The conversation maps as: the system prompt is `instructions`; a user message's text is one
//! `{"role": "user", "content": [{"type": "input_text", …}]}` item, after its tool results, each a
//! `function_call_output` item (the API has no error flag on them, so a failed tool's output is
//! prefixed with `Error: `, as in Chat Completions); an assistant message is its reasoning items,
//! then a `message` item per text block (`output_text`), then a `function_call` item per tool call
//! (arguments as a JSON string). Another provider's reasoning is left out.
//!
//! The decoder keeps each output item by its `output_index`. Text streams from
//! `response.output_text.delta` (a refusal's text from `response.refusal.delta`); each item is then
//! taken whole from `response.output_item.done`, the authoritative copy (reasoning with its
//! encrypted content, a call's final arguments, a message's text). The answer is complete at
//! `response.completed` or `response.incomplete` (whose `response.output` fills any item whose
//! `done` event was missed); `response.failed` and `error` events become [`LlmError::Status`] with
//! the HTTP status their code stands for, so the retry rules treat them as they would that answer.
//! The stream has no `[DONE]` marker; one sent by a compatible server is ignored.

use std::collections::{BTreeMap, BTreeSet};

use outboard_shared::{Attachment, AttachmentKind, Reasoning, Usage};
use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::Value;

use crate::error::{error_status_for_type, LlmError};
use crate::search;
use crate::sse::SseEvent;
use crate::types::{
    attached, is_tool_media, tool_input_from_raw, ContentBlock, Message, ModelRequest,
    ModelResponse, ModelStop, Progress, Role, StreamDelta, ToolSpec,
};

/// The smallest `max_output_tokens` the API accepts (it refuses a request asking for fewer); a
/// call near the end of its window that may ask for less is raised to it.
const MIN_OUTPUT_TOKENS: u32 = 16;

/// What each answer must also return: the encrypted reasoning, so it can be sent back (see the
/// module header).
const INCLUDE: &[&str] = &["reasoning.encrypted_content"];

/// [`INCLUDE`] when the API's own web search is on offer: its sources too, to show a person.
const INCLUDE_SEARCH: &[&str] = &["reasoning.encrypted_content", "web_search_call.action.sources"];

/// The JSON body of a streaming `POST {base}/responses`, serialised straight from the borrowed
/// request (no intermediate `Value` tree). `effort` is `reasoning.effort`, with summaries asked for
/// (`summary: "auto"`) so a person can read what the model thought; `None` sends no `reasoning`.
pub fn request_body(
    model: &str,
    max_tokens: u32,
    effort: Option<&str>,
    request: &ModelRequest<'_>,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&Body {
        model,
        instructions: request.system,
        tools: Tools(request.tools),
        reasoning: effort.map(|effort| ReasoningParam { effort, summary: "auto" }),
        input: Input(request.messages),
        max_output_tokens: max_tokens.max(MIN_OUTPUT_TOKENS),
        include: if Tools(request.tools).searches() { INCLUDE_SEARCH } else { INCLUDE },
        store: false,
        stream: true,
        tool_choice: (request.forbid_tools && !request.tools.is_empty()).then_some("none"),
    })
}

/// The request body; empty `instructions` and `tools` are left out. What does not change between
/// steps comes first and the conversation, which only grows, right after it, so each body is a
/// byte prefix of the next up to the end of its conversation, for the API's automatic prefix
/// cache (as in Chat Completions).
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "is_empty")]
    instructions: &'a str,
    #[serde(skip_serializing_if = "Tools::is_empty")]
    tools: Tools<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<ReasoningParam<'a>>,
    input: Input<'a>,
    max_output_tokens: u32,
    include: &'static [&'static str],
    store: bool,
    stream: bool,
    /// `"none"` when the request forbids tool calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
}

fn is_empty(text: &&str) -> bool {
    text.is_empty()
}

#[derive(Serialize)]
struct ReasoningParam<'a> {
    effort: &'a str,
    summary: &'static str,
}

/// The conversation as `input` items, mapped as the module header says.
struct Input<'a>(&'a [Message]);

impl Serialize for Input<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        for message in self.0 {
            match message.role {
                Role::User => {
                    let blocks = &message.content[..];
                    for (at, block) in blocks.iter().enumerate() {
                        if let ContentBlock::ToolResult { tool_use_id, content, is_error } = block {
                            seq.serialize_element(&Item::FunctionCallOutput {
                                kind: "function_call_output",
                                call_id: tool_use_id,
                                output: ToolOutput { content, is_error: *is_error, blocks, at },
                            })?;
                        }
                    }
                    let text = UserText(&message.content);
                    if !text.is_empty() {
                        seq.serialize_element(&Item::User { role: "user", content: text })?;
                    }
                }
                Role::Assistant => {
                    for block in &message.content {
                        if let Some(item) = Item::from_assistant(block) {
                            seq.serialize_element(&item)?;
                        }
                        // The API's own search goes back as its `web_search_call` item, verbatim.
                        if let ContentBlock::ProviderSearch(s) = block {
                            if s.provider == search::RESPONSES {
                                for raw in &s.blocks {
                                    seq.serialize_element(raw)?;
                                }
                            }
                        }
                    }
                }
            }
        }
        seq.end()
    }
}

/// One `input` item. A user message goes in the API's short form (no `type`), every other item
/// with its `type`.
#[derive(Serialize)]
#[serde(untagged)]
enum Item<'a> {
    User {
        role: &'static str,
        content: UserText<'a>,
    },
    Reasoning {
        #[serde(rename = "type")]
        kind: &'static str,
        id: &'a str,
        summary: Summary<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<&'a str>,
    },
    Message {
        #[serde(rename = "type")]
        kind: &'static str,
        role: &'static str,
        content: [OutputText<'a>; 1],
    },
    FunctionCall {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: &'a str,
        name: &'a str,
        arguments: Arguments<'a>,
    },
    FunctionCallOutput {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: &'a str,
        output: ToolOutput<'a>,
    },
}

impl<'a> Item<'a> {
    /// The item an assistant block is sent as; `None` for a block that is not sent (empty text,
    /// another provider's reasoning).
    fn from_assistant(block: &'a ContentBlock) -> Option<Self> {
        Some(match block {
            ContentBlock::Reasoning(Reasoning::OpenaiReasoning {
                id,
                summary,
                encrypted_content,
            }) => Item::Reasoning {
                kind: "reasoning",
                id,
                summary: Summary(summary),
                encrypted_content: encrypted_content.as_deref(),
            },
            ContentBlock::Text(text) if !text.is_empty() => Item::Message {
                kind: "message",
                role: "assistant",
                content: [OutputText { kind: "output_text", text }],
            },
            ContentBlock::ToolUse { id, name, input } => Item::FunctionCall {
                kind: "function_call",
                call_id: id,
                name,
                arguments: Arguments(input),
            },
            _ => return None,
        })
    }
}

/// A user message's non-empty text blocks, one `input_text` part each, and the person's own
/// media (not a tool result's) as `input_image` / `input_file` parts.
struct UserText<'a>(&'a [ContentBlock]);

impl<'a> UserText<'a> {
    fn parts(&self) -> impl Iterator<Item = InputPart<'a>> + '_ {
        let blocks = self.0;
        blocks.iter().enumerate().filter_map(move |(i, b)| match b {
            ContentBlock::Text(t) if !t.is_empty() => Some(InputPart::Text { text: t }),
            ContentBlock::Media(m) if !is_tool_media(blocks, i) => Some(input_media(m)),
            _ => None,
        })
    }

    fn is_empty(&self) -> bool {
        self.parts().next().is_none()
    }
}

impl Serialize for UserText<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.parts())
    }
}

/// A part of a user message or of a tool's output.
#[derive(Serialize)]
#[serde(tag = "type")]
enum InputPart<'a> {
    #[serde(rename = "input_text")]
    Text { text: &'a str },
    #[serde(rename = "input_image")]
    Image { image_url: String },
    #[serde(rename = "input_file")]
    File { filename: &'a str, file_data: String },
}

/// An attachment as an input part: an image or a PDF as a data URL, a PDF too large to send
/// whole as its text.
fn input_media(m: &Attachment) -> InputPart<'_> {
    let url = || format!("data:{};base64,{}", m.media_type, m.data);
    match m.kind {
        AttachmentKind::Image => InputPart::Image { image_url: url() },
        AttachmentKind::Document if !m.data.is_empty() => {
            let filename = m.name.rsplit('/').next().unwrap_or(&m.name);
            InputPart::File { filename, file_data: url() }
        }
        AttachmentKind::Document => InputPart::Text { text: m.text.as_deref().unwrap_or("") },
    }
}

#[derive(Serialize)]
struct OutputText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

/// A reasoning item's summary parts, as `summary_text` parts.
struct Summary<'a>(&'a [String]);

impl Serialize for Summary<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|text| SummaryText { kind: "summary_text", text }))
    }
}

#[derive(Serialize)]
struct SummaryText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

/// A tool's output; a failed tool's is prefixed with `Error: ` (the API has no error flag). With
/// media (a `Read` of a picture or a PDF) it is a list of parts: the text, then the media.
struct ToolOutput<'a> {
    content: &'a str,
    is_error: bool,
    blocks: &'a [ContentBlock],
    at: usize,
}

impl Serialize for ToolOutput<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if attached(self.blocks, self.at).next().is_some() {
            let text = if self.is_error {
                std::borrow::Cow::Owned(format!("Error: {}", self.content))
            } else {
                std::borrow::Cow::Borrowed(self.content)
            };
            let first = InputPart::Text { text: &text };
            return serializer.collect_seq(
                std::iter::once(first).chain(attached(self.blocks, self.at).map(input_media)),
            );
        }
        if self.is_error {
            serializer.collect_str(&format_args!("Error: {}", self.content))
        } else {
            serializer.serialize_str(self.content)
        }
    }
}

/// A past call's arguments as a JSON string. Invalid JSON the model once sent (kept as a
/// non-object input) is sent as `{}`, as the other dialects do: compatible servers may parse past
/// arguments, and the tool result already told the model what was wrong.
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

/// The tools, as function tools with `strict: false`: the API's default is strict validation,
/// which demands every property be required and `additionalProperties: false`, and the harness's
/// schemas have optional properties.
struct Tools<'a>(&'a [ToolSpec]);

impl Tools<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the API's own web search is on offer.
    fn searches(&self) -> bool {
        self.0.iter().any(search::is_provider_search)
    }
}

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|t| {
            if search::is_provider_search(t) {
                return AnyTool::Hosted(search::responses_tool(t));
            }
            AnyTool::Function(WireTool {
                kind: "function",
                name: &t.name,
                description: &t.description,
                parameters: &t.input_schema,
                strict: false,
            })
        }))
    }
}

/// A tool as listed: a function the harness runs, or one the API hosts (its web search).
#[derive(Serialize)]
#[serde(untagged)]
enum AnyTool<'a> {
    Function(WireTool<'a>),
    Hosted(Value),
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
    strict: bool,
}

/// An output item as streamed so far (from `response.output_item.added` and the deltas), or
/// whole (from `response.output_item.done`).
#[derive(Debug)]
enum OutputItem {
    Reasoning {
        id: String,
        summary: Vec<String>,
        encrypted_content: Option<String>,
    },
    Text(String),
    Call {
        call_id: String,
        name: String,
        arguments: String,
    },
    /// The API's own web search (`web_search_call`), whole.
    Search(Value),
    /// An item this harness does not use (another hosted tool's call…).
    Other,
}

impl OutputItem {
    /// The item an `item` object describes.
    fn from_json(item: &Value) -> OutputItem {
        let text = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        match item.get("type").and_then(Value::as_str).unwrap_or_default() {
            "reasoning" => OutputItem::Reasoning {
                id: text("id"),
                summary: item
                    .get("summary")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .map(str::to_owned)
                    .collect(),
                encrypted_content: item
                    .get("encrypted_content")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            },
            "message" => OutputItem::Text(
                item.get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|part| {
                        match part.get("type").and_then(Value::as_str).unwrap_or_default() {
                            "output_text" => part.get("text").and_then(Value::as_str),
                            "refusal" => part.get("refusal").and_then(Value::as_str),
                            _ => None,
                        }
                    })
                    .collect(),
            ),
            "function_call" => {
                let call_id =
                    Some(text("call_id")).filter(|id| !id.is_empty()).unwrap_or_else(|| text("id"));
                let arguments = match item.get("arguments") {
                    Some(Value::String(args)) => args.clone(),
                    // A few compatible servers send the arguments as an object.
                    Some(args @ Value::Object(_)) => args.to_string(),
                    _ => String::new(),
                };
                OutputItem::Call { call_id, name: text("name"), arguments }
            }
            "web_search_call" => OutputItem::Search(item.clone()),
            _ => OutputItem::Other,
        }
    }
}

/// Decodes the events of one streamed answer.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    items: BTreeMap<u64, OutputItem>,
    /// The indices whose `response.output_item.done` was seen.
    done: BTreeSet<u64>,
    usage: Usage,
    /// Set by the terminal event: the answer is complete.
    stop: Option<ModelStop>,
}

impl Decoder {
    /// Handles one SSE event.
    pub(crate) fn on_event(
        &mut self,
        event: &SseEvent,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<Progress, LlmError> {
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(if self.stop.is_some() { Progress::Done } else { Progress::More });
        }
        let data: Value = serde_json::from_str(data).map_err(|e| {
            LlmError::Decode(format!("a Responses API stream event is not JSON ({e}): {data}"))
        })?;
        let kind =
            data.get("type").and_then(Value::as_str).or(event.event.as_deref()).unwrap_or_default();
        let index = data.get("output_index").and_then(Value::as_u64).unwrap_or(0);
        let delta = || data.get("delta").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "response.output_item.added" => {
                let item = OutputItem::from_json(data.get("item").unwrap_or(&Value::Null));
                self.items.entry(index).or_insert(item);
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let piece = delta();
                if !piece.is_empty() {
                    if let OutputItem::Text(text) =
                        self.items.entry(index).or_insert_with(|| OutputItem::Text(String::new()))
                    {
                        text.push_str(piece);
                    }
                    on_delta(StreamDelta::Text(piece.to_owned()));
                }
            }
            "response.function_call_arguments.delta" => {
                if let Some(OutputItem::Call { arguments, .. }) = self.items.get_mut(&index) {
                    arguments.push_str(delta());
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(OutputItem::Call { arguments, .. }), Some(done)) =
                    (self.items.get_mut(&index), data.get("arguments").and_then(Value::as_str))
                {
                    done.clone_into(arguments);
                }
            }
            "response.reasoning_summary_text.delta" => {
                let part = data.get("summary_index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if let Some(OutputItem::Reasoning { summary, .. }) = self.items.get_mut(&index) {
                    if summary.len() <= part {
                        summary.resize(part + 1, String::new());
                    }
                    summary[part].push_str(delta());
                }
            }
            "response.output_item.done" => {
                let item = OutputItem::from_json(data.get("item").unwrap_or(&Value::Null));
                self.items.insert(index, item);
                self.done.insert(index);
            }
            "response.completed" | "response.incomplete" => {
                let response = data.get("response").unwrap_or(&Value::Null);
                self.finish_with(response);
                return Ok(Progress::Done);
            }
            "response.failed" => {
                let error = data.pointer("/response/error").unwrap_or(&Value::Null);
                return Err(failure(error, "the model provider failed the response"));
            }
            "error" => {
                let error = data.get("error").filter(|e| e.is_object()).unwrap_or(&data);
                return Err(failure(error, "the model provider sent an error event"));
            }
            _ => {}
        }
        Ok(Progress::More)
    }

    /// Takes the usage and stop of a terminal `response` object, and any item of its `output`
    /// whose `done` event was not seen.
    fn finish_with(&mut self, response: &Value) {
        if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
            let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
            // `input_tokens` counts the cached ones too, as `Usage::input_tokens` does.
            self.usage = Usage {
                input_tokens: n("input_tokens"),
                output_tokens: n("output_tokens"),
                cache_read_tokens: usage
                    .pointer("/input_tokens_details/cached_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                cache_write_tokens: 0,
            };
        }
        let output = response.get("output").and_then(Value::as_array).into_iter().flatten();
        for (i, item) in output.enumerate() {
            if !self.done.contains(&(i as u64)) {
                self.items.insert(i as u64, OutputItem::from_json(item));
            }
        }
        let status = response.get("status").and_then(Value::as_str).unwrap_or("completed");
        let has_calls = self.items.values().any(|i| matches!(i, OutputItem::Call { .. }));
        self.stop = Some(if status == "incomplete" {
            match response.pointer("/incomplete_details/reason").and_then(Value::as_str) {
                Some("max_output_tokens") | None => ModelStop::MaxTokens,
                Some(other) => ModelStop::Other(other.to_owned()),
            }
        } else if has_calls {
            ModelStop::ToolUse
        } else {
            ModelStop::EndTurn
        });
    }

    /// The answer, when the stream completed; `None` when it was cut. Reasoning comes first, as
    /// the conversation keeps it (see `ContentBlock::Reasoning`), then text and calls in output
    /// order.
    pub(crate) fn finish(self) -> Option<ModelResponse> {
        let stop = self.stop?;
        let mut reasoning = Vec::new();
        let mut content = Vec::new();
        for (n, item) in self.items.into_values().enumerate() {
            match item {
                OutputItem::Reasoning { id, summary, encrypted_content } => {
                    reasoning.push(ContentBlock::Reasoning(Reasoning::OpenaiReasoning {
                        id,
                        summary,
                        encrypted_content,
                    }))
                }
                OutputItem::Text(text) if !text.is_empty() => {
                    content.push(ContentBlock::Text(text))
                }
                OutputItem::Call { call_id, name, arguments } => {
                    let id = if call_id.is_empty() { format!("call_{n}") } else { call_id };
                    content.push(ContentBlock::ToolUse {
                        id,
                        name,
                        input: tool_input_from_raw(arguments),
                    });
                }
                OutputItem::Search(item) => content.push(search::from_responses(item)),
                OutputItem::Text(_) | OutputItem::Other => {}
            }
        }
        reasoning.append(&mut content);
        Some(ModelResponse { content: reasoning, stop, usage: self.usage })
    }
}

/// The status an error `code` of a failed response (or an `error` event) stands for; the
/// Responses API's own codes first, then the error types the other dialects know.
fn status_for_code(code: &str) -> u16 {
    match code {
        "server_error" => 500,
        "rate_limit_exceeded" | "insufficient_quota" => 429,
        "invalid_prompt" | "context_length_exceeded" => 400,
        other => error_status_for_type(other),
    }
}

/// An error object (`{code, message}`) as [`LlmError::Status`]. The code is kept in the message
/// when the message does not say it, for a person and for `LlmError::is_context_overflow`
/// (`context_length_exceeded`).
fn failure(error: &Value, fallback: &str) -> LlmError {
    let code = error
        .get("code")
        .and_then(Value::as_str)
        .or_else(|| error.get("type").and_then(Value::as_str).filter(|t| *t != "error"))
        .unwrap_or_default();
    let message = error.get("message").and_then(Value::as_str).unwrap_or(fallback);
    let message = if code.is_empty() || message.contains(code) {
        message.to_owned()
    } else {
        format!("{message} ({code})")
    };
    LlmError::Status { status: status_for_code(code), message, retry_after: None }
}

#[cfg(test)]
mod tests;
