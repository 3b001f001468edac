//! What a model call can fail with, and which failures are worth retrying.

use std::time::Duration;

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The provider answered with an error status.
    #[error("the model provider answered {status}: {message}")]
    Status { status: u16, message: String, retry_after: Option<Duration> },
    /// The stream ended before the response was complete.
    #[error("the model stream was cut: {0}")]
    Cut(String),
    /// The connection failed before an answer came.
    #[error("cannot reach the model provider: {detail}")]
    Transport {
        /// How it failed, as far as the cause tells.
        kind: Unreachable,
        /// The cause's chain, on one line.
        detail: String,
    },
    /// The provider sent something this client cannot decode.
    #[error("the model provider sent an unreadable response: {0}")]
    Decode(String),
    /// The configuration is unusable (bad base URL, missing key for a hosted provider).
    #[error("model configuration: {0}")]
    Config(String),
}

/// How a connection to the provider failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    /// Nothing listens at the address (connection refused).
    Refused,
    /// The host name does not resolve.
    Dns,
    /// The TLS handshake failed (a certificate, or TLS spoken to a plain HTTP port).
    Tls,
    /// Connecting took too long.
    Timeout,
    /// Something else broke the connection.
    Other,
}

impl Unreachable {
    /// What a connection error's cause chain says happened: an `io::Error` of kind
    /// `ConnectionRefused`, hyper's `dns error`, a rustls error, a timeout.
    pub fn of(error: &(dyn std::error::Error + 'static), timed_out: bool) -> Unreachable {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
        let mut text = String::new();
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::ConnectionRefused {
                    return Unreachable::Refused;
                }
            }
            if e.downcast_ref::<rustls::Error>().is_some() {
                return Unreachable::Tls;
            }
            text.push_str(&e.to_string().to_lowercase());
            text.push(' ');
            cause = e.source();
        }
        if text.contains("dns error") || text.contains("failed to lookup address") {
            Unreachable::Dns
        } else if ["certificate", "tls", "handshake", "corrupt message"]
            .iter()
            .any(|w| text.contains(w))
        {
            Unreachable::Tls
        } else if timed_out || text.contains("timed out") {
            Unreachable::Timeout
        } else {
            Unreachable::Other
        }
    }
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

/// The HTTP status an error `type` named inside a stream stands for, so in-stream errors are
/// retried like their HTTP equivalents (Anthropic `overloaded_error` is 529). Unknown types count
/// as 500: an error after a 200 is most likely the server's own trouble.
pub fn error_status_for_type(kind: &str) -> u16 {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a cause, as hyper and reqwest chain them.
    #[derive(Debug)]
    struct Wrapped(&'static str, Box<dyn std::error::Error + Send + Sync>);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(self.1.as_ref())
        }
    }

    #[test]
    fn the_cause_chain_tells_how_a_connection_failed() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = Wrapped("client error (Connect)", Box::new(refused));
        assert_eq!(Unreachable::of(&e, false), Unreachable::Refused);
        let dns = std::io::Error::other(
            "failed to lookup address information: Name or service not known",
        );
        let e = Wrapped("client error (Connect)", Box::new(Wrapped("dns error", Box::new(dns))));
        assert_eq!(Unreachable::of(&e, false), Unreachable::Dns);
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let e = Wrapped("client error (Connect)", Box::new(tls));
        assert_eq!(Unreachable::of(&e, false), Unreachable::Tls);
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let e = Wrapped("client error (SendRequest)", Box::new(reset));
        assert_eq!(Unreachable::of(&e, true), Unreachable::Timeout);
        assert_eq!(Unreachable::of(&e, false), Unreachable::Other);
    }
}
