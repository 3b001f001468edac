//! LLM providers: the Anthropic Messages API, OpenAI-compatible Chat Completions and the OpenAI
//! Responses API, all streaming with tool calls, behind one provider-neutral conversation model.
//!
//! CONTRACT (used by `agent`): [`Provider::new`] and [`Provider::complete`], the conversation
//! types below, [`LlmError`]. The API key lives only in [`LlmConfig::api_key`] (a
//! [`Secret`]) and is read only where the HTTP header is built.
//!
//! Layout: [`sse`] parses the event stream both vendors use; `anthropic`, `openai` and
//! `responses` each own their request body and stream decoder; `retry` decides what is retried and how long to wait;
//! `client` drives one HTTP attempt (status, idle timeout, decoding) and the retry loop.
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

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;
use tracing::Instrument as _;

use outboard_base::Secret;

use crate::config::{LlmConfig, ProviderKind};
use crate::error::LlmError;
use crate::observe::{self, CallMetrics, CallOutcome};
use crate::types::{ModelRequest, ModelResponse, Progress, StreamDelta};
use crate::{anthropic, openai, responses, retry, sse};

/// How long a stream may stay silent before it counts as cut. Anthropic pings every few seconds
/// and OpenAI-compatible servers send a chunk per token, so two minutes of silence means a dead
/// connection, not a slow model.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// Connecting must not take longer than this; there is no overall request timeout because a long
/// answer legitimately streams for minutes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Error bodies are read up to this size; the message is at the start.
const MAX_ERROR_BODY: usize = 64 * 1024;

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
    metrics: Option<std::sync::Arc<dyn CallMetrics>>,
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
    pub fn with_metrics(mut self, metrics: std::sync::Arc<dyn CallMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// A failed call of this provider in one line for a person, and its class
    /// ([`crate::explain`]).
    pub fn explain(&self, error: &LlmError) -> crate::explain::Explained {
        crate::explain::explain(&self.config, error)
    }

    /// The configured `max_tokens` of a call.
    pub fn max_tokens(&self) -> u32 {
        self.config.max_tokens
    }

    /// The wire protocol it speaks.
    pub fn kind(&self) -> ProviderKind {
        self.config.kind
    }

    /// `provider/model`, for session listings.
    pub fn label(&self) -> String {
        format!("{}/{}", self.config.kind.as_str(), self.config.model)
    }

    /// Calls the model with streaming, retrying per the policy; `on_delta` sees text as it
    /// arrives and each retry. Counted in the provider's metrics, if it has them, and traced in
    /// a `model_call` span when a subscriber wants it (`serve --otlp-endpoint`); with neither,
    /// the call is made as it is, with no watch and no clock.
    pub async fn complete(
        &self,
        request: &ModelRequest<'_>,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ModelResponse, LlmError> {
        let (kind, model) = (self.config.kind.as_str(), self.config.model.as_str());
        let span = observe::call_span(kind, model);
        if span.is_disabled() && self.metrics.is_none() {
            return self.complete_unobserved(request, on_delta).await;
        }
        let mut call = self.metrics.as_ref().map(|m| m.start(kind, model));
        let started = std::time::Instant::now();
        let mut first_text = None;
        let mut observed = |d: StreamDelta| {
            let text = matches!(d, StreamDelta::Text(_));
            if text && first_text.is_none() {
                first_text = Some(started.elapsed());
            }
            if let Some(call) = call.as_mut() {
                call.delta(text, matches!(d, StreamDelta::Retry { .. }));
            }
            on_delta(d)
        };
        let result =
            self.complete_unobserved(request, &mut observed).instrument(span.clone()).await;
        let ended = result.as_ref().map(|r| &r.usage).map_err(CallOutcome::from);
        observe::record_call(&span, ended, first_text);
        if let Some(call) = call {
            call.finish(ended);
        }
        result
    }

    async fn complete_unobserved(
        &self,
        request: &ModelRequest<'_>,
        on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ModelResponse, LlmError> {
        let model = &self.config.model;
        let max_tokens = request.max_tokens.unwrap_or(self.config.max_tokens).max(1);
        let stripped = if self.config.takes_images() {
            None
        } else {
            crate::types::without_images(request.messages)
        };
        let stripped_request;
        let request = match &stripped {
            Some(messages) => {
                stripped_request = ModelRequest { messages, ..*request };
                &stripped_request
            }
            None => request,
        };
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
            if attempt >= policy.max_attempts || !retry::is_retryable(&error, &self.config.base_url)
            {
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
            let reason = crate::explain::retry_reason(&self.config, &error);
            on_delta(StreamDelta::Retry { attempt, delay, reason });
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
            Ok(Err(e)) => {
                let kind = crate::error::Unreachable::of(&e, e.is_timeout());
                return Err(LlmError::Transport { kind, detail: error_chain(&e) });
            }
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
            LlmError::Transport { kind, detail } => {
                LlmError::Transport { kind, detail: clean(detail) }
            }
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

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use crate::config::RetryPolicy;
    use crate::types::tool_input_from_raw;

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
            vision: None,
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
