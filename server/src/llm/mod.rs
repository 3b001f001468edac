//! LLM providers: the Anthropic Messages API, OpenAI-compatible Chat Completions and the OpenAI
//! Responses API, all streaming with tool calls, behind one provider-neutral conversation model.
//!
//! CONTRACT (used by `agent`): [`Provider::new`] and [`Provider::complete`], the conversation
//! types below, [`LlmError`]. The API key lives only in [`LlmConfig::api_key`] (a
//! [`Secret`]) and is read only where the HTTP header is built.
//!
//! Layout: [`sse`] parses the event stream both vendors use; `anthropic`, `openai` and
//! `responses` each own their request body and stream decoder; `retry` decides what is retried and how long to wait;
//! this file drives one HTTP attempt (status, idle timeout, decoding) and the retry loop.
//!
//! The request side is built for a harness that calls the model once per step with a growing
//! conversation: [`ModelRequest`] borrows the conversation rather than owning a copy, and each
//! dialect serialises its body straight to bytes through borrowing `Serialize` types (no
//! `serde_json::Value` tree in between), once per call; retries resend the same bytes.
//!
//! Why the provider is one struct over a `reqwest::Client` rather than a trait object: the
//! dialects share everything but the body and the decoder, and the harness needs no other seam
//! (tests speak real HTTP to the mock LLM server in `outboard-tests`).
//!
//! The key is protected three ways: its header value is marked sensitive (redacted from any
//! `Debug` of the request), redirects are not followed (reqwest would carry `x-api-key` to
//! another host), and every error message is scrubbed of it in case a provider echoes it back.

pub mod context;
pub mod sse;

mod anthropic;
mod openai;
mod responses;
mod retry;

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use outboard_shared::{Reasoning, Usage};
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;

use outboard_base::Secret;

/// Which wire protocol the provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// Anthropic Messages API (`POST {base}/v1/messages`).
    Anthropic,
    /// OpenAI-compatible Chat Completions (`POST {base}/chat/completions`; base includes `/v1`).
    OpenAi,
    /// The OpenAI Responses API (`POST {base}/responses`; base includes `/v1`), stateless.
    Responses,
}

impl ProviderKind {
    /// `anthropic`, `openai` or `responses`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAi => "openai",
            ProviderKind::Responses => "responses",
        }
    }

    /// The kind named `name` (as [`ProviderKind::as_str`] writes it).
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim() {
            "anthropic" => Some(ProviderKind::Anthropic),
            "openai" => Some(ProviderKind::OpenAi),
            "responses" => Some(ProviderKind::Responses),
            _ => None,
        }
    }

    /// The vendor's hosted API, following its SDK's base URL convention.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::OpenAi | ProviderKind::Responses => "https://api.openai.com/v1",
        }
    }

    /// The environment variable the vendor's SDKs read the key from.
    pub fn key_var(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
            ProviderKind::OpenAi | ProviderKind::Responses => "OPENAI_API_KEY",
        }
    }
}

/// How to reach the model.
#[derive(Debug, Clone)]
pub struct LlmConfig {
    /// Wire protocol.
    pub kind: ProviderKind,
    /// Base URL following each vendor SDK's convention (see `ProviderKind`).
    pub base_url: String,
    /// Model name sent in each request.
    pub model: String,
    /// The API key, from the server's environment only. Local servers may need none.
    pub api_key: Option<Secret>,
    /// `max_tokens` of each call.
    pub max_tokens: u32,
    /// Retry policy for 429/5xx/overloaded/cut streams.
    pub retry: RetryPolicy,
    /// Anthropic extended thinking: on with this budget of tokens (inside `max_tokens`), off
    /// when `None`.
    pub thinking_budget: Option<u32>,
    /// The Responses API's `reasoning.effort` (`minimal`, `low`, `medium`, `high`…); `None`
    /// leaves it to the model's default and sends no `reasoning` object (a model that does not
    /// reason refuses one). Ignored by the other dialects.
    pub reasoning_effort: Option<String>,
}

/// Exponential backoff with jitter, honouring `retry-after`.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts in all (1 = no retry).
    pub max_attempts: u32,
    /// Delay before the first retry.
    pub initial_delay: Duration,
    /// Upper bound of any delay, `retry-after` included.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

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

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The provider answered with an error status.
    #[error("the model provider answered {status}: {message}")]
    Status { status: u16, message: String, retry_after: Option<Duration> },
    /// The stream ended before the response was complete.
    #[error("the model stream was cut: {0}")]
    Cut(String),
    /// The connection failed.
    #[error("cannot reach the model provider: {0}")]
    Transport(String),
    /// The provider sent something this client cannot decode.
    #[error("the model provider sent an unreadable response: {0}")]
    Decode(String),
    /// The configuration is unusable (bad base URL, missing key for a hosted provider).
    #[error("model configuration: {0}")]
    Config(String),
}

impl LlmError {
    /// Whether the provider refused the request as too long for the model's context window:
    /// Anthropic's `prompt is too long`, OpenAI's `context_length_exceeded` (the Responses API's
    /// `exceeds the context window`), llama.cpp's `exceed_context_size_error`, vLLM's and Ollama's
    /// wordings. The harness then compacts and
    /// retries once.
    pub fn is_context_overflow(&self) -> bool {
        let LlmError::Status { status, message, .. } = self else { return false };
        if !matches!(status, 400 | 413 | 422) {
            return false;
        }
        let m = message.to_lowercase();
        [
            "prompt is too long",
            "context_length_exceeded",
            "maximum context length",
            "context length",
            "context window",
            "exceed_context_size",
            "exceeds the available context size",
            "too many tokens",
            "input is too long",
            "reduce the length",
        ]
        .iter()
        .any(|needle| m.contains(needle))
    }
}

/// The `outcome` label of a failed call (`outboard_model_requests_total`).
impl From<&LlmError> for crate::metrics::ModelOutcome {
    fn from(e: &LlmError) -> Self {
        use crate::metrics::ModelOutcome;
        match e {
            LlmError::Status { status: 429, .. } => ModelOutcome::rate_limited,
            LlmError::Status { status, .. } if *status >= 500 => ModelOutcome::server_error,
            LlmError::Status { .. } => ModelOutcome::client_error,
            LlmError::Cut(_) => ModelOutcome::cut,
            LlmError::Transport(_) => ModelOutcome::transport,
            LlmError::Decode(_) => ModelOutcome::decode,
            LlmError::Config(_) => ModelOutcome::config,
        }
    }
}

/// How long a stream may stay silent before it counts as cut. Anthropic pings every few seconds
/// and OpenAI-compatible servers send a chunk per token, so two minutes of silence means a dead
/// connection, not a slow model.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Connecting must not take longer than this; there is no overall request timeout because a long
/// answer legitimately streams for minutes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Error bodies are read up to this size; the message is at the start.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// What a decoder says after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Keep reading.
    More,
    /// The answer is complete.
    Done,
}

/// The decoder of the configured dialect.
#[derive(Debug)]
enum Decoder {
    Anthropic(anthropic::Decoder),
    OpenAi(openai::Decoder),
    Responses(responses::Decoder),
}

impl Decoder {
    fn new(kind: ProviderKind) -> Self {
        match kind {
            ProviderKind::Anthropic => Decoder::Anthropic(anthropic::Decoder::default()),
            ProviderKind::OpenAi => Decoder::OpenAi(openai::Decoder::default()),
            ProviderKind::Responses => Decoder::Responses(responses::Decoder::default()),
        }
    }

    fn on_event(
        &mut self,
        event: &sse::SseEvent,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<Progress, LlmError> {
        match self {
            Decoder::Anthropic(d) => d.on_event(event, on_delta),
            Decoder::OpenAi(d) => d.on_event(event, on_delta),
            Decoder::Responses(d) => d.on_event(event, on_delta),
        }
    }

    fn finish(self) -> Option<ModelResponse> {
        match self {
            Decoder::Anthropic(d) => d.finish(),
            Decoder::OpenAi(d) => d.finish(),
            Decoder::Responses(d) => d.finish(),
        }
    }
}

/// The provider client: one connection pool, reused by every call of a session.
#[derive(Debug, Clone)]
pub struct Provider {
    config: LlmConfig,
    client: reqwest::Client,
    url: String,
    idle_timeout: Duration,
    /// Where each call's outcome, latency and tokens are counted; `None`: nowhere.
    metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

impl Provider {
    /// Builds a client for `config`.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        let base = config.base_url.trim_end_matches('/');
        let parsed = reqwest::Url::parse(base).map_err(|e| {
            LlmError::Config(format!(
                "the base URL {base:?} is not a URL ({e}); set it like https://api.anthropic.com"
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(LlmError::Config(format!(
                "the base URL {base:?} must start with http:// or https://"
            )));
        }
        let (hosted, var) = match config.kind {
            ProviderKind::Anthropic => ("api.anthropic.com", "ANTHROPIC_API_KEY"),
            ProviderKind::OpenAi | ProviderKind::Responses => ("api.openai.com", "OPENAI_API_KEY"),
        };
        if config.api_key.is_none() && parsed.host_str() == Some(hosted) {
            return Err(LlmError::Config(format!(
                "{hosted} needs an API key: set {var} in the server's environment"
            )));
        }
        if let Some(key) = &config.api_key {
            if HeaderValue::from_str(key.expose()).is_err() {
                return Err(LlmError::Config(format!(
                    "the API key holds characters an HTTP header cannot carry; check {var}"
                )));
            }
        }
        let url = match config.kind {
            ProviderKind::Anthropic => format!("{base}/v1/messages"),
            ProviderKind::OpenAi => format!("{base}/chat/completions"),
            ProviderKind::Responses => format!("{base}/responses"),
        };
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Provider { config, client, url, idle_timeout: DEFAULT_IDLE_TIMEOUT, metrics: None })
    }

    /// Sets how long a stream may stay silent before it counts as cut (default
    /// [`DEFAULT_IDLE_TIMEOUT`]).
    pub fn with_idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// Counts every call in `metrics` (`outboard_model_*`).
    pub fn with_metrics(mut self, metrics: std::sync::Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The configured `max_tokens` of a call.
    pub fn max_tokens(&self) -> u32 {
        self.config.max_tokens
    }

    /// `provider/model`, for session listings.
    pub fn label(&self) -> String {
        format!("{}/{}", self.config.kind.as_str(), self.config.model)
    }

    /// Calls the model with streaming, retrying per the policy; `on_delta` sees text as it
    /// arrives and each retry. Counted in the provider's metrics, if it has them.
    pub async fn complete(
        &self,
        request: &ModelRequest<'_>,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ModelResponse, LlmError> {
        let Some(metrics) = &self.metrics else {
            return self.complete_unobserved(request, on_delta).await;
        };
        let mut call = metrics.model_call(self.config.kind.as_str(), &self.config.model);
        let mut observed = |d: StreamDelta| {
            call.delta(matches!(d, StreamDelta::Text(_)), matches!(d, StreamDelta::Retry { .. }));
            on_delta(d)
        };
        let result = self.complete_unobserved(request, &mut observed).await;
        call.finish(result.as_ref().map(|r| &r.usage).map_err(crate::metrics::ModelOutcome::from));
        result
    }

    async fn complete_unobserved(
        &self,
        request: &ModelRequest<'_>,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ModelResponse, LlmError> {
        let model = &self.config.model;
        let max_tokens = request.max_tokens.unwrap_or(self.config.max_tokens).max(1);
        let body = match self.config.kind {
            ProviderKind::Anthropic => {
                anthropic::request_body(model, max_tokens, self.config.thinking_budget, request)
            }
            ProviderKind::OpenAi => openai::request_body(model, max_tokens, request),
            ProviderKind::Responses => responses::request_body(
                model,
                max_tokens,
                self.config.reasoning_effort.as_deref(),
                request,
            ),
        }
        .map_err(|e| LlmError::Decode(format!("cannot encode the request: {e}")))?;
        let body = Bytes::from(body);
        let policy = &self.config.retry;
        let mut attempt = 1;
        loop {
            let error = match self.attempt(body.clone(), on_delta).await {
                Ok(response) => return Ok(response),
                Err(error) => self.scrub(error),
            };
            if attempt >= policy.max_attempts || !retry::is_retryable(&error) {
                return Err(error);
            }
            let delay = retry::delay_for(policy, attempt, &error);
            attempt += 1;
            tracing::warn!(
                provider = %self.label(),
                attempt,
                delay_ms = delay.as_millis() as u64,
                "model call failed, retrying: {error}"
            );
            on_delta(StreamDelta::Retry { attempt, delay, reason: error.to_string() });
            tokio::time::sleep(delay).await;
        }
    }

    /// One HTTP request and its stream.
    async fn attempt(
        &self,
        body: Bytes,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ModelResponse, LlmError> {
        let mut req = self
            .client
            .post(&self.url)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream")
            .body(body);
        match self.config.kind {
            ProviderKind::Anthropic => {
                req = req.header("anthropic-version", anthropic::API_VERSION);
                if let Some(key) = &self.config.api_key {
                    req = req.header("x-api-key", sensitive(key, "")?);
                }
            }
            ProviderKind::OpenAi | ProviderKind::Responses => {
                if let Some(key) = &self.config.api_key {
                    req = req.header(AUTHORIZATION, sensitive(key, "Bearer ")?);
                }
            }
        }
        let idle = self.idle_timeout;
        let response = match tokio::time::timeout(idle, req.send()).await {
            Err(_) => return Err(LlmError::Cut(format!("no response in {} s", idle.as_secs()))),
            Ok(Err(e)) => return Err(LlmError::Transport(error_chain(&e))),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry::retry_after(response.headers());
            let text = read_error_body(response, idle).await;
            let message = error_message(&text).unwrap_or_else(|| {
                status.canonical_reason().unwrap_or("no reason given").to_owned()
            });
            return Err(LlmError::Status { status: status.as_u16(), message, retry_after });
        }
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if is_json {
            let text = read_error_body(response, idle).await;
            let detail = error_message(&text).unwrap_or(text);
            return Err(LlmError::Decode(format!(
                "expected an event stream but got a JSON body ({detail}); check that the base URL \
                 points at the provider's API"
            )));
        }

        let mut decoder = Decoder::new(self.config.kind);
        let mut parser = sse::SseParser::new();
        let mut stream = response.bytes_stream();
        let cut_reason = loop {
            let chunk = match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => break format!("no data for {} s", idle.as_secs()),
                Ok(None) => {
                    if let Some(event) = parser.finish() {
                        if decoder.on_event(&event, on_delta)? == Progress::Done {
                            break String::new();
                        }
                    }
                    break "the stream ended before the answer was complete".to_owned();
                }
                Ok(Some(Err(e))) => break format!("the connection broke: {}", error_chain(&e)),
                Ok(Some(Ok(chunk))) => chunk,
            };
            let mut done = false;
            for event in parser.feed(&chunk) {
                if decoder.on_event(&event, on_delta)? == Progress::Done {
                    done = true;
                    break;
                }
            }
            if done {
                break String::new();
            }
        };
        // A stream that reached its end marker is complete; one that stopped early may still be
        // (an OpenAI-compatible server that sent `finish_reason` but no `[DONE]`).
        decoder.finish().ok_or(LlmError::Cut(cut_reason))
    }

    /// Removes the API key from an error's text, in case a provider echoed it.
    fn scrub(&self, error: LlmError) -> LlmError {
        let Some(key) = self.config.api_key.as_ref().map(Secret::expose) else {
            return error;
        };
        if key.is_empty() {
            return error;
        }
        let clean = |s: String| s.replace(key, "<redacted>");
        match error {
            LlmError::Status { status, message, retry_after } => {
                LlmError::Status { status, message: clean(message), retry_after }
            }
            LlmError::Cut(s) => LlmError::Cut(clean(s)),
            LlmError::Transport(s) => LlmError::Transport(clean(s)),
            LlmError::Decode(s) => LlmError::Decode(clean(s)),
            LlmError::Config(s) => LlmError::Config(clean(s)),
        }
    }
}

/// The header value `prefix + key`, marked sensitive so no `Debug` output shows it.
fn sensitive(key: &Secret, prefix: &str) -> Result<HeaderValue, LlmError> {
    let mut value = HeaderValue::from_str(&format!("{prefix}{}", key.expose())).map_err(|_| {
        LlmError::Config("the API key holds characters an HTTP header cannot carry".into())
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// An error and its causes on one line (reqwest's top-level message hides the cause).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Reads up to [`MAX_ERROR_BODY`] bytes of an error answer, giving up after `idle` of silence.
async fn read_error_body(response: reqwest::Response, idle: Duration) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while body.len() < MAX_ERROR_BODY {
        match tokio::time::timeout(idle, stream.next()).await {
            Ok(Some(Ok(chunk))) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(MAX_ERROR_BODY);
    String::from_utf8_lossy(&body).into_owned()
}

/// The provider's own message from an error body: `error.message` (both vendors), `message`, or
/// `error` as a string; a short non-JSON body is taken as is.
fn error_message(body: &str) -> Option<String> {
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    if let Ok(json) = serde_json::from_str::<Value>(body) {
        let found = json
            .pointer("/error/message")
            .or_else(|| json.get("message"))
            .or_else(|| json.get("error"))
            .or_else(|| json.get("detail"))
            .and_then(Value::as_str);
        if let Some(message) = found {
            return Some(message.to_owned());
        }
    }
    const MAX_CHARS: usize = 500;
    let mut text: String = body.chars().take(MAX_CHARS).collect();
    if text.len() < body.len() {
        text.push('…');
    }
    Some(text)
}

/// The HTTP status an error `type` named inside a stream stands for, so in-stream errors are
/// retried like their HTTP equivalents (Anthropic `overloaded_error` is 529). Unknown types count
/// as 500: an error after a 200 is most likely the server's own trouble.
pub(crate) fn error_status_for_type(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" | "invalid_request" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" | "rate_limit_exceeded" | "tokens" | "requests" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// Tool input from the raw text the model streamed: the parsed JSON; `{}` for no text (a tool
/// without parameters); the raw text as a JSON string when it is not valid JSON, so the harness
/// can tell the model what it sent.
pub(crate) fn tool_input_from_raw(raw: String) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(&raw).unwrap_or(Value::String(raw))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    #[test]
    fn tool_input_parsing() {
        assert_eq!(tool_input_from_raw(String::new()), json!({}));
        assert_eq!(tool_input_from_raw(" ".into()), json!({}));
        assert_eq!(tool_input_from_raw(r#"{"a":1}"#.into()), json!({"a": 1}));
        assert_eq!(tool_input_from_raw(r#"{"a":"#.into()), json!(r#"{"a":"#));
    }

    #[test]
    fn error_messages_from_bodies() {
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too big"}}"#;
        assert_eq!(error_message(anthropic).as_deref(), Some("max_tokens: too big"));
        assert_eq!(
            error_message(r#"{"error":"model not found"}"#).as_deref(),
            Some("model not found")
        );
        assert_eq!(error_message("Bad Gateway").as_deref(), Some("Bad Gateway"));
        assert_eq!(error_message("  "), None);
    }

    #[test]
    fn config_errors() {
        let config = |kind, base: &str, key: Option<&str>| LlmConfig {
            kind,
            base_url: base.into(),
            model: "m".into(),
            api_key: key.map(Secret::new),
            max_tokens: 10,
            retry: RetryPolicy::default(),
            thinking_budget: None,
            reasoning_effort: None,
        };
        assert!(Provider::new(config(ProviderKind::Anthropic, "not a url", None)).is_err());
        assert!(Provider::new(config(ProviderKind::OpenAi, "ftp://x/v1", None)).is_err());
        let err = Provider::new(config(ProviderKind::Anthropic, "https://api.anthropic.com", None))
            .unwrap_err();
        assert!(err.to_string().contains("ANTHROPIC_API_KEY"), "{err}");
        let err = Provider::new(config(ProviderKind::OpenAi, "http://h/v1", Some("bad\nkey")))
            .unwrap_err();
        assert!(!err.to_string().contains("bad\nkey"));
        let ok = Provider::new(config(ProviderKind::OpenAi, "http://h:1/v1/", Some("sk-secret")))
            .unwrap();
        assert_eq!(ok.url, "http://h:1/v1/chat/completions");
        assert!(!format!("{ok:?}").contains("sk-secret"));
        let responses =
            Provider::new(config(ProviderKind::Responses, "http://h:1/v1/", None)).unwrap();
        assert_eq!(responses.url, "http://h:1/v1/responses");
        let err = Provider::new(config(ProviderKind::Responses, "https://api.openai.com/v1", None))
            .unwrap_err();
        assert!(err.to_string().contains("OPENAI_API_KEY"), "{err}");
    }
}
