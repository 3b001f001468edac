//! A failed model call told to a person in one line that says what happened and what to do, and
//! sorted into the [`FailureClass`] a script decides by (`outboard run`'s exit status).
//!
//! [`LlmError`] keeps the raw facts (the status, the provider's message, the cause chain) for the
//! log and the retry policy; [`explain`] turns them into what the turn's `turn_failed` and
//! `model_retry` events say: the provider's own message cut to its first line and
//! [`MESSAGE_CHARS`] characters, an HTML page (a proxy's error page) never shown, the URL the
//! server tried, and the fix (`nothing listens at http://127.0.0.1:8080 — start the model server
//! or fix --base-url`).

use outboard_shared::FailureClass;

use crate::config::LlmConfig;
use crate::error::{LlmError, Unreachable};

/// The most characters of a provider's own message shown.
pub const MESSAGE_CHARS: usize = 160;

/// A failure, explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    /// What kind of failure.
    pub class: FailureClass,
    /// One line for a person.
    pub line: String,
}

/// The class of `error` alone (no configuration needed).
pub fn class_of(error: &LlmError) -> FailureClass {
    match error {
        LlmError::Transport { .. } => FailureClass::ProviderUnreachable,
        LlmError::Status { status: 401 | 403, .. } => FailureClass::ProviderAuth,
        LlmError::Status { status: 404, .. } => FailureClass::ModelNotFound,
        LlmError::Status { status, .. } if crate::retry::is_retryable_status(*status) => {
            FailureClass::ProviderUnavailable
        }
        LlmError::Status { .. } | LlmError::Decode(_) | LlmError::Config(_) => {
            FailureClass::ProviderRejected
        }
        LlmError::Cut(_) => FailureClass::ProviderUnavailable,
    }
}

/// The provider's message as shown: its first non-empty line, at most [`MESSAGE_CHARS`]
/// characters; nothing for an HTML page.
pub fn short_message(message: &str) -> Option<String> {
    let lower = message.trim_start().to_ascii_lowercase();
    if lower.starts_with('<') || lower.contains("<html") || lower.contains("<body") {
        return None;
    }
    let line = message.lines().map(str::trim).find(|l| !l.is_empty())?;
    let mut out: String = line.chars().take(MESSAGE_CHARS).collect();
    if line.chars().count() > MESSAGE_CHARS {
        out.push('…');
    }
    Some(out)
}

/// ` — the provider's message`, or nothing.
fn said(message: &str) -> String {
    short_message(message).map(|m| format!(" — {m}")).unwrap_or_default()
}

/// `error` of a call to the model of `config`, explained.
pub fn explain(config: &LlmConfig, error: &LlmError) -> Explained {
    let base = config.base_url.as_str();
    let key = config.kind.key_var();
    let line = match error {
        LlmError::Transport { kind, detail } => match kind {
            Unreachable::Refused => {
                format!("nothing listens at {base} — start the model server or fix --base-url")
            }
            Unreachable::Dns => format!(
                "the host of {base} does not resolve — fix --base-url, or the DNS of the \
                 machine the server runs on"
            ),
            Unreachable::Tls => format!(
                "TLS with {base} failed ({}) — check http:// against https:// and the server's \
                 certificate",
                last_cause(detail)
            ),
            Unreachable::Timeout => format!(
                "{base} did not accept a connection in time — check that the model server is \
                 up and reachable from the Outboard server"
            ),
            Unreachable::Other => format!("cannot reach {base}: {}", last_cause(detail)),
        },
        LlmError::Status { status: status @ (401 | 403), message, .. } => match &config.api_key {
            Some(_) => {
                format!("{key} is rejected by {base} ({status}): check the key{}", said(message))
            }
            None => format!(
                "{base} asks for an API key ({status}) and none is set: set {key} where the \
                     server runs{}",
                said(message)
            ),
        },
        LlmError::Status { status: 404, message, .. } => {
            if message.to_ascii_lowercase().contains("model") {
                format!(
                    "{base} does not serve model {:?} (404): fix --model or the model file's \
                     `model`{}",
                    config.model,
                    said(message)
                )
            } else {
                format!(
                    "{base} has no such API (404): check --base-url (OpenAI-style URLs end in \
                     /v1, Anthropic-style ones do not){}",
                    said(message)
                )
            }
        }
        LlmError::Status { status: 429, message, .. } => format!(
            "{base} is rate-limiting this server (429) and still was after the retries: wait and \
             try again{}",
            said(message)
        ),
        LlmError::Status { status, message, .. } if crate::retry::is_retryable_status(*status) => {
            format!(
                "the model provider at {base} is failing ({status}) and still was after the \
                 retries: try again later{}",
                said(message)
            )
        }
        LlmError::Status { status, message, .. } => {
            format!("the model provider refused the request ({status}){}", said(message))
        }
        LlmError::Cut(reason) => format!(
            "the model's answer was cut midway ({}) and the retries did not help: try again",
            last_cause(reason)
        ),
        LlmError::Decode(_) | LlmError::Config(_) => error.to_string(),
    };
    Explained { class: class_of(error), line }
}

/// What a `model_retry` event says failed: the same facts as [`explain`] without the advice a
/// final failure gives.
pub fn retry_reason(config: &LlmConfig, error: &LlmError) -> String {
    let base = config.base_url.as_str();
    match error {
        LlmError::Status { status, message, .. } => {
            format!("{base} answered {status}{}", said(message))
        }
        LlmError::Cut(reason) => format!("the answer was cut midway ({})", last_cause(reason)),
        LlmError::Transport { .. } | LlmError::Decode(_) | LlmError::Config(_) => {
            explain(config, error).line
        }
    }
}

/// The innermost cause of a `a: b: c` chain (what actually happened), cut to a line.
fn last_cause(chain: &str) -> String {
    let last = chain.rsplit(": ").find(|p| !p.trim().is_empty()).unwrap_or(chain);
    short_message(last).unwrap_or_else(|| "no detail".into())
}

#[cfg(test)]
mod tests;
