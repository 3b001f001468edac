//! The provider's configuration, owned here: which dialect, where, which model, the key (a
//! [`Secret`]), and the retry policy. The application fills it in from flags and the model file.

use std::time::Duration;

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
    /// Whether the model takes images; `None`: as the model table says
    /// ([`crate::context::takes_images`]). A model file's `vision` key sets it.
    pub vision: Option<bool>,
}

impl LlmConfig {
    /// Whether images are sent to this model (else each is replaced by a note).
    pub fn takes_images(&self) -> bool {
        self.vision.unwrap_or_else(|| crate::context::takes_images(self.kind, &self.model))
    }
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

/// Whether `base_url`'s host is this machine (`localhost`, `127.x`, `::1`): a refused connection
/// there means no server runs, which waiting does not change.
pub fn is_loopback(base_url: &str) -> bool {
    let rest = base_url.split("://").nth(1).unwrap_or(base_url);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A provider name none of the dialects answers to.
#[derive(Debug, thiserror::Error)]
#[error("unknown provider {0:?}: use --provider anthropic, openai or responses")]
pub struct UnknownProvider(pub String);
