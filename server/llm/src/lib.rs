//! LLM providers (floor 2): the Anthropic Messages API, OpenAI-compatible Chat Completions and the
//! OpenAI Responses API, all streaming with tool calls, behind one provider-neutral conversation
//! model ([`types`]); the model catalog a server offers ([`models`]); context-window estimates
//! ([`context`]).
//!
//! CONTRACT (used by the harness): [`Provider::new`] and [`Provider::complete`], the conversation
//! types, [`LlmError`]. The API key lives only in [`LlmConfig::api_key`] (a `Secret`) and is read
//! only where the HTTP header is built. Calls are counted through [`CallMetrics`], which the
//! server's metrics implement.
//!
//! It must not know the store, the tools, the sandbox or the session: what it needs of them comes
//! in the request.

pub mod anthropic;
pub mod client;
pub mod config;
pub mod context;
pub mod error;
pub mod explain;
pub mod models;
pub mod observe;
pub mod openai;
pub mod responses;
pub mod retry;
pub mod search;
pub mod sse;
pub mod types;
pub mod window;

#[cfg(test)]
mod dialect_tests;
#[cfg(test)]
mod search_tests;

pub use client::{Provider, DEFAULT_IDLE_TIMEOUT};
pub use config::{LlmConfig, ProviderKind, RetryPolicy, UnknownProvider};
pub use error::LlmError;
pub use observe::{CallMetrics, CallOutcome, CallWatch};
pub use types::{
    ContentBlock, Message, ModelRequest, ModelResponse, ModelStop, Progress, Role, StreamDelta,
    ToolSpec,
};
