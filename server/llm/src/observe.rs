//! How a model call is counted without the provider knowing who counts: the server's metrics
//! implement [`CallMetrics`] and hand it to [`crate::Provider::with_metrics`].

use outboard_shared::Usage;

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

impl From<&LlmError> for CallOutcome {
    fn from(e: &LlmError) -> Self {
        match e {
            LlmError::Status { status: 429, .. } => CallOutcome::RateLimited,
            LlmError::Status { status, .. } if *status >= 500 => CallOutcome::ServerError,
            LlmError::Status { .. } => CallOutcome::ClientError,
            LlmError::Cut(_) => CallOutcome::Cut,
            LlmError::Transport(_) => CallOutcome::Transport,
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
