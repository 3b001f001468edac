//! What the mock LLM answers with: a scripted step ([`MockStep`]: text, tool calls, reasoning
//! items, faults), the OpenAI dialect knobs ([`MockOpenAiDialect`]) and a whole script
//! ([`MockScript`], the `mock-llm --script FILE` format described in `mock_llm`'s header).
//! Below both the server (`mock_llm`) and its Responses dialect (`mock_responses`), which stream
//! these steps in their wire formats; it knows neither.

use anyhow::Context;
use outboard_shared::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The OpenAI-compatible dialect knobs, to imitate the servers that differ from OpenAI.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockOpenAiDialect {
    /// Send no usage chunk (servers that ignore `stream_options`).
    pub omit_usage: bool,
    /// End the stream without `data: [DONE]`.
    pub omit_done: bool,
    /// Send each tool call whole (id, name and all arguments) in one chunk.
    pub args_in_one_chunk: bool,
    /// Leave `index` out of tool-call pieces.
    pub omit_tool_index: bool,
    /// Add chunks whose `content` is `null` or `""`.
    pub empty_deltas: bool,
    /// Stream this text as `reasoning_content` before the answer.
    pub reasoning: Option<String>,
    /// Send this `finish_reason` instead of the one mapped from the step's stop.
    pub finish_reason: Option<String>,
}

impl MockOpenAiDialect {
    /// This step's flags OR-ed with the global ones.
    pub(crate) fn merged(&self, global: &MockOpenAiDialect) -> MockOpenAiDialect {
        MockOpenAiDialect {
            omit_usage: self.omit_usage || global.omit_usage,
            omit_done: self.omit_done || global.omit_done,
            args_in_one_chunk: self.args_in_one_chunk || global.args_in_one_chunk,
            omit_tool_index: self.omit_tool_index || global.omit_tool_index,
            empty_deltas: self.empty_deltas || global.empty_deltas,
            reasoning: self.reasoning.clone().or_else(|| global.reasoning.clone()),
            finish_reason: self.finish_reason.clone().or_else(|| global.finish_reason.clone()),
        }
    }
}

/// One tool call of a scripted reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockToolCall {
    /// The call id; generated (`toolu_mock_N` / `call_mock_N`) when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// The tool name.
    pub name: String,
    /// The arguments as JSON.
    #[serde(default)]
    pub input: Value,
    /// The arguments as raw text instead of `input`, e.g. invalid JSON.
    #[serde(default)]
    pub raw_input: Option<String>,
}

impl MockToolCall {
    /// A call of `name` with JSON arguments.
    pub fn new(name: &str, input: Value) -> Self {
        MockToolCall { id: None, name: name.to_owned(), input, raw_input: None }
    }

    /// A call of `name` whose arguments text is `raw` verbatim (may be invalid JSON).
    pub fn raw(name: &str, raw: &str) -> Self {
        MockToolCall {
            id: None,
            name: name.to_owned(),
            input: Value::Null,
            raw_input: Some(raw.into()),
        }
    }

    /// Sets the call id.
    pub fn with_id(mut self, id: &str) -> Self {
        self.id = Some(id.to_owned());
        self
    }

    pub(crate) fn arguments(&self) -> String {
        match (&self.raw_input, &self.input) {
            (Some(raw), _) => raw.clone(),
            (None, Value::Null) => "{}".to_owned(),
            (None, input) => input.to_string(),
        }
    }
}

/// One scripted answer: a reply (text, tool calls) or a fault. See the module docs for the JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockStep {
    /// Reply text, streamed split by word.
    pub text: String,
    /// The exact text deltas, overriding the split of `text`.
    pub deltas: Option<Vec<String>>,
    /// Tool calls after the text.
    pub tool_calls: Vec<MockToolCall>,
    /// Anthropic `stop_reason`; default `tool_use` with tool calls, else `end_turn`.
    pub stop: Option<String>,
    /// Reported usage: the output tokens (default 5) and the prompt's size (default: estimated
    /// from the body); the cache's share is computed (see the module header).
    pub usage: Option<Usage>,
    /// Answer this HTTP status instead of a reply.
    pub status: Option<u16>,
    /// `retry-after` seconds of the status answer.
    pub retry_after: Option<u64>,
    /// `retry-after-ms` of the status answer.
    pub retry_after_ms: Option<u64>,
    /// Body of the status answer; default the dialect's error JSON.
    pub body: Option<String>,
    /// Send an in-stream error of this type (Anthropic `error` event, OpenAI `{"error":…}`).
    pub error_event: Option<String>,
    /// Drop the connection after this many SSE events.
    pub cut_after: Option<usize>,
    /// Milliseconds before the response starts.
    pub latency_ms: u64,
    /// Milliseconds between SSE events.
    pub chunk_delay_ms: u64,
    /// OpenAI dialect knobs for this step.
    pub openai: MockOpenAiDialect,
    /// Responses API reasoning items, sent before the text and the calls.
    pub openai_reasoning: Vec<MockReasoning>,
    /// Anthropic: a thinking block before the answer, with this text (streamed in pieces) and a
    /// signature the mock checks when the block comes back (`mock_llm::mock_signature`).
    pub thinking: Option<String>,
    /// Anthropic: a `redacted_thinking` block with this data after the thinking block.
    pub redacted_thinking: Option<String>,
    /// Anthropic: content blocks of the API's own tools (`server_tool_use`, whose input is
    /// streamed as `input_json_delta` as the API does, and `web_search_tool_result`, sent
    /// whole), after the thinking and before the text.
    pub server_blocks: Vec<Value>,
}

/// One scripted reasoning item of a Responses answer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockReasoning {
    /// The item id; generated (`rs_mock_N_I`) when absent.
    pub id: Option<String>,
    /// The summary parts, streamed by word.
    pub summary: Vec<String>,
    /// The encrypted reasoning, opaque.
    pub encrypted_content: Option<String>,
}

impl MockStep {
    /// Adds a reasoning item with these summary parts and encrypted content (Responses API only;
    /// the other dialects ignore it).
    pub fn with_openai_reasoning(mut self, id: &str, summary: &[&str], encrypted: &str) -> Self {
        self.openai_reasoning.push(MockReasoning {
            id: Some(id.to_owned()),
            summary: summary.iter().map(|s| (*s).to_owned()).collect(),
            encrypted_content: Some(encrypted.to_owned()),
        });
        self
    }

    /// A text reply that ends the turn.
    pub fn text(text: &str) -> Self {
        MockStep { text: text.to_owned(), ..MockStep::default() }
    }

    /// A reply with one tool call of `name` with JSON `input`.
    pub fn tool_call(name: &str, input: Value) -> Self {
        MockStep::tool_calls(vec![MockToolCall::new(name, input)])
    }

    /// A reply with these tool calls.
    pub fn tool_calls(calls: Vec<MockToolCall>) -> Self {
        MockStep { tool_calls: calls, ..MockStep::default() }
    }

    /// An HTTP error answer with this status.
    pub fn status(status: u16) -> Self {
        MockStep { status: Some(status), ..MockStep::default() }
    }

    /// A text reply whose connection drops after `events` SSE events.
    pub fn cut_after(events: usize) -> Self {
        MockStep {
            text: "This answer is cut off before it completes.".into(),
            cut_after: Some(events),
            ..MockStep::default()
        }
    }

    /// A 200 stream that fails with an in-stream error of this type (`overloaded_error`…).
    pub fn error_event(kind: &str) -> Self {
        MockStep { error_event: Some(kind.to_owned()), ..MockStep::default() }
    }

    /// Sets the reply text (e.g. text before tool calls).
    pub fn with_text(mut self, text: &str) -> Self {
        self.text = text.to_owned();
        self
    }

    /// Sets the exact text deltas.
    pub fn with_deltas(mut self, deltas: &[&str]) -> Self {
        self.deltas = Some(deltas.iter().map(|d| (*d).to_owned()).collect());
        self
    }

    /// Drops the connection after `events` SSE events.
    pub fn cut(mut self, events: usize) -> Self {
        self.cut_after = Some(events);
        self
    }

    /// Sets the Anthropic stop reason (`end_turn`, `tool_use`, `max_tokens`…).
    pub fn stop(mut self, stop: &str) -> Self {
        self.stop = Some(stop.to_owned());
        self
    }

    /// Sets the reported usage.
    pub fn usage(mut self, input_tokens: u64, output_tokens: u64) -> Self {
        self.usage = Some(Usage { input_tokens, output_tokens, ..Usage::default() });
        self
    }

    /// Adds `retry-after: secs` to a status answer.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// Adds `retry-after-ms: ms` to a status answer.
    pub fn retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }

    /// Adds Anthropic server-tool blocks (see [`MockStep::server_blocks`]).
    pub fn with_server_blocks(mut self, blocks: Vec<Value>) -> Self {
        self.server_blocks = blocks;
        self
    }

    /// Sets the body of a status answer.
    pub fn body(mut self, body: &str) -> Self {
        self.body = Some(body.to_owned());
        self
    }

    /// Waits `ms` milliseconds before answering.
    pub fn latency(mut self, ms: u64) -> Self {
        self.latency_ms = ms;
        self
    }

    /// Waits `ms` milliseconds between SSE events.
    pub fn chunk_delay(mut self, ms: u64) -> Self {
        self.chunk_delay_ms = ms;
        self
    }

    /// Starts the answer with an Anthropic thinking block of `text`.
    pub fn with_thinking(mut self, text: &str) -> Self {
        self.thinking = Some(text.to_owned());
        self
    }

    /// Sets the OpenAI dialect knobs of this step.
    pub fn openai(mut self, dialect: MockOpenAiDialect) -> Self {
        self.openai = dialect;
        self
    }

    pub(crate) fn text_deltas(&self) -> Vec<String> {
        if let Some(deltas) = &self.deltas {
            return deltas.clone();
        }
        split_words(&self.text)
    }

    pub(crate) fn stop_reason(&self) -> String {
        match &self.stop {
            Some(stop) => stop.clone(),
            None if self.tool_calls.is_empty() => "end_turn".into(),
            None => "tool_use".into(),
        }
    }
}

/// A whole script: steps plus dialect knobs for every OpenAI answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MockScript {
    /// The steps, consumed in request order.
    pub steps: Vec<MockStep>,
    /// Knobs OR-ed into every step's.
    pub openai: MockOpenAiDialect,
}

impl MockScript {
    /// Parses a script file's text: an array of steps or a [`MockScript`] object.
    pub fn from_json(text: &str) -> anyhow::Result<MockScript> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum File {
            Steps(Vec<MockStep>),
            Script(MockScript),
        }
        // Parse as a value first so a typo is reported against the form the file is in.
        let value: Value = serde_json::from_str(text).context("the script is not JSON")?;
        let file = if value.is_array() {
            File::Steps(serde_json::from_value(value).context("invalid step in the script")?)
        } else {
            File::Script(serde_json::from_value(value).context("invalid script object")?)
        };
        Ok(match file {
            File::Steps(steps) => MockScript { steps, openai: MockOpenAiDialect::default() },
            File::Script(script) => script,
        })
    }
}

/// Splits text into word deltas ("Hello, ", "world!") whose concatenation is the text.
pub(crate) fn split_words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut in_space = false;
    for c in text.chars() {
        if in_space && !c.is_whitespace() {
            out.push(std::mem::take(&mut current));
        }
        in_space = c.is_whitespace();
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Splits a string into about three pieces on character boundaries.
pub(crate) fn split_pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() < 3 {
        return vec![text.to_owned()];
    }
    let size = chars.len().div_ceil(3);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}
