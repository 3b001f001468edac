//! How a model call is counted without the provider knowing who counts: the server's metrics
//! implement [`CallMetrics`] and hand it to [`crate::Provider::with_metrics`]. And the call's
//! span ([`call_span`]), which the OTLP exporter sends when the server has one: the same figures
//! (tokens, cache reads, time to first token, outcome), never the request's or the answer's text.

use std::time::Duration;

use outboard_base::spans::TARGET;
use outboard_shared::Usage;
use tracing::field::Empty;

use crate::error::LlmError;

/// Why a call failed, as counted (`outboard_model_requests_total{outcome}`): after the provider's
/// own retries, so a call that succeeded on its second attempt is not a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallOutcome {
    /// HTTP 429 after the retries.
    RateLimited,
    /// 5xx (or Anthropic's 529 overloaded) after the retries.
    ServerError,
    /// Another 4xx: the request was refused (too long, bad key, bad model).
    ClientError,
    /// The stream was cut or went silent.
    Cut,
    /// The provider could not be reached.
    Transport,
    /// The answer could not be decoded, or the request encoded.
    Decode,
    /// The provider's configuration is unusable.
    Config,
}

impl CallOutcome {
    /// The outcome as a span records it (`rate_limited`, `server_error`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::RateLimited => "rate_limited",
            CallOutcome::ServerError => "server_error",
            CallOutcome::ClientError => "client_error",
            CallOutcome::Cut => "cut",
            CallOutcome::Transport => "transport",
            CallOutcome::Decode => "decode",
            CallOutcome::Config => "config",
        }
    }
}

impl From<&LlmError> for CallOutcome {
    fn from(e: &LlmError) -> Self {
        match e {
            LlmError::Status { status: 429, .. } => CallOutcome::RateLimited,
            LlmError::Status { status, .. } if *status >= 500 => CallOutcome::ServerError,
            LlmError::Status { .. } => CallOutcome::ClientError,
            LlmError::Cut(_) => CallOutcome::Cut,
            LlmError::Transport { .. } => CallOutcome::Transport,
            LlmError::Decode(_) => CallOutcome::Decode,
            LlmError::Config(_) => CallOutcome::Config,
        }
    }
}

/// Where model calls are counted.
pub trait CallMetrics: Send + Sync + std::fmt::Debug {
    /// A call to `model` of `provider` starts; the watch is told of its deltas and its end.
    fn start<'a>(&'a self, provider: &str, model: &str) -> Box<dyn CallWatch + Send + 'a>;
}

/// One model call being watched.
pub trait CallWatch {
    /// A delta arrived (`text`: answer text; `retry`: the provider retries).
    fn delta(&mut self, text: bool, retry: bool);
    /// The call ended: its usage, or why it failed.
    fn finish(self: Box<Self>, result: Result<&Usage, CallOutcome>);
}

/// The span of one model call (`model_call`), a child of whatever span the caller is in (the
/// turn, a compaction, a subagent's `Task` call). Its figures are recorded at the end by
/// [`record_call`]; the attribute names follow OpenTelemetry's `gen_ai` conventions where they
/// have one.
pub(crate) fn call_span(provider: &str, model: &str) -> tracing::Span {
    tracing::info_span!(
        target: TARGET,
        "model_call",
        otel.kind = "client",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        time_to_first_token_ms = Empty,
        outcome = Empty,
        otel.status_code = Empty,
    )
}

/// Records how a call ended on its span: the usage, or why it failed (the span's status is then
/// an error); `first_text`: how long the first answer text took, if any came.
pub(crate) fn record_call(
    span: &tracing::Span,
    result: Result<&Usage, CallOutcome>,
    first_text: Option<Duration>,
) {
    if let Some(first) = first_text {
        span.record("time_to_first_token_ms", first.as_secs_f64() * 1000.0);
    }
    match result {
        Ok(usage) => {
            span.record("gen_ai.usage.input_tokens", usage.input_tokens);
            span.record("gen_ai.usage.output_tokens", usage.output_tokens);
            span.record("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens);
            span.record("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens);
            span.record("outcome", "ok");
        }
        Err(outcome) => {
            span.record("outcome", outcome.as_str());
            span.record("otel.status_code", "ERROR");
        }
    }
}
