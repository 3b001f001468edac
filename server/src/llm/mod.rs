//! LLM providers: the Anthropic Messages API and OpenAI-compatible Chat Completions, both
//! streaming with tool calls, behind one provider-neutral conversation model.
//!
//! CONTRACT (used by `agent`): [`Provider::new`] and [`Provider::complete`], the conversation
//! types below, [`LlmError`]. The API key lives only in [`LlmConfig::api_key`] (a
//! [`Secret`]) and is read only where the HTTP header is built.

use std::time::Duration;

use outboard_shared::Usage;
use serde_json::Value;

use crate::config::Secret;

/// Which wire protocol the provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// Anthropic Messages API (`POST {base}/v1/messages`).
    Anthropic,
    /// OpenAI-compatible Chat Completions (`POST {base}/chat/completions`; base includes `/v1`).
    OpenAi,
}

impl ProviderKind {
    /// `anthropic` or `openai`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAi => "openai",
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

/// One model call.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The system prompt.
    pub system: String,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools on offer.
    pub tools: Vec<ToolSpec>,
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
    Retry { attempt: u32, delay: Duration, reason: String },
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

/// The provider client.
#[derive(Debug, Clone)]
pub struct Provider {
    config: LlmConfig,
}

impl Provider {
    /// Builds a client for `config`.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        Ok(Provider { config })
    }

    /// `provider/model`, for session listings.
    pub fn label(&self) -> String {
        format!("{}/{}", self.config.kind.as_str(), self.config.model)
    }

    /// Calls the model with streaming, retrying per the policy; `on_delta` sees text as it
    /// arrives and each retry.
    pub async fn complete(
        &self,
        _request: &ModelRequest,
        _on_delta: &mut (dyn FnMut(StreamDelta) + Send),
    ) -> Result<ModelResponse, LlmError> {
        Err(LlmError::Config("providers are not built yet".into()))
    }
}
