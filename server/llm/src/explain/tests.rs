use outboard_base::Secret;
use outboard_shared::FailureClass;

use super::*;
use crate::config::{is_loopback, ProviderKind, RetryPolicy};

fn config(kind: ProviderKind, base: &str, key: Option<&str>) -> LlmConfig {
    LlmConfig {
        kind,
        base_url: base.into(),
        model: "team-coder".into(),
        api_key: key.map(Secret::new),
        max_tokens: 1024,
        retry: RetryPolicy::default(),
        thinking_budget: None,
        reasoning_effort: None,
        vision: None,
    }
}

fn status(status: u16, message: &str) -> LlmError {
    LlmError::Status { status, message: message.into(), retry_after: None }
}

#[test]
fn each_class_has_its_line() {
    let local = config(ProviderKind::OpenAi, "http://127.0.0.1:8080", None);
    let refused = LlmError::Transport {
        kind: Unreachable::Refused,
        detail: "error sending request for url (http://127.0.0.1:8080/chat/completions): client \
                 error (Connect): tcp connect error: Connection refused (os error 111)"
            .into(),
    };
    let e = explain(&local, &refused);
    assert_eq!(e.class, FailureClass::ProviderUnreachable);
    assert_eq!(
        e.line,
        "nothing listens at http://127.0.0.1:8080 — start the model server or fix --base-url"
    );

    let hosted = config(ProviderKind::Anthropic, "https://api.anthropic.com", Some("sk-ant-x"));
    let e = explain(&hosted, &status(401, "invalid x-api-key"));
    assert_eq!(e.class, FailureClass::ProviderAuth);
    assert_eq!(
        e.line,
        "ANTHROPIC_API_KEY is rejected by https://api.anthropic.com (401): check the key — \
         invalid x-api-key"
    );
    let keyless = config(ProviderKind::Anthropic, "https://api.anthropic.com", None);
    assert!(explain(&keyless, &status(401, ""))
        .line
        .contains("none is set: set ANTHROPIC_API_KEY"));

    let e = explain(&local, &status(404, "model 'team-coder' not found"));
    assert_eq!(e.class, FailureClass::ModelNotFound);
    assert!(e.line.contains("does not serve model \"team-coder\" (404)"), "{}", e.line);
    let e = explain(&local, &status(404, "Not Found"));
    assert_eq!(e.class, FailureClass::ModelNotFound);
    assert!(e.line.contains("has no such API (404): check --base-url"), "{}", e.line);

    let e = explain(&local, &status(429, "slow down"));
    assert_eq!(e.class, FailureClass::ProviderUnavailable);
    assert!(e.line.contains("rate-limiting") && e.line.ends_with("— slow down"), "{}", e.line);
    let e =
        explain(&local, &status(503, "<html><body><h1>503 Service Unavailable</h1></body></html>"));
    assert_eq!(e.class, FailureClass::ProviderUnavailable);
    assert!(!e.line.contains('<'), "HTML is never shown: {}", e.line);
    assert!(e.line.contains("is failing (503)"), "{}", e.line);
    let e = explain(&local, &LlmError::Cut("the connection broke: error decoding: reset".into()));
    assert_eq!(e.class, FailureClass::ProviderUnavailable);
    assert_eq!(
        e.line,
        "the model's answer was cut midway (reset) and the retries did not help: try again"
    );
    let e = explain(&local, &status(400, "max_tokens: 999999 > 64000\nmore detail"));
    assert_eq!(e.class, FailureClass::ProviderRejected);
    assert_eq!(e.line, "the model provider refused the request (400) — max_tokens: 999999 > 64000");

    let dns = LlmError::Transport { kind: Unreachable::Dns, detail: "dns error".into() };
    assert!(explain(&local, &dns).line.contains("does not resolve"));
    let tls = LlmError::Transport {
        kind: Unreachable::Tls,
        detail: "client error (Connect): invalid peer certificate: UnknownIssuer".into(),
    };
    let line = explain(&local, &tls).line;
    assert!(line.contains("TLS with") && line.contains("UnknownIssuer"), "{line}");
}

#[test]
fn messages_are_one_short_line() {
    let long = "x".repeat(500);
    let shown = short_message(&long).unwrap();
    assert_eq!(shown.chars().count(), MESSAGE_CHARS + 1);
    assert_eq!(short_message("\n\n  first\nsecond"), Some("first".into()));
    assert_eq!(short_message("<!DOCTYPE html><html>…"), None);
    assert_eq!(short_message("   "), None);
}

#[test]
fn loopback_hosts() {
    for url in [
        "http://127.0.0.1:8080",
        "http://localhost:11434/v1",
        "http://[::1]:8000/v1",
        "http://127.0.0.2",
    ] {
        assert!(is_loopback(url), "{url}");
    }
    for url in ["https://api.openai.com/v1", "http://10.0.0.5:8080", "http://localhost.example.com"]
    {
        assert!(!is_loopback(url), "{url}");
    }
}
