//! When and how long to wait before retrying a model call.
//!
//! Retryable: 408, 409, 429, 5xx and 529 answers (and in-stream errors mapped to those codes,
//! such as Anthropic's `overloaded_error`), cut streams, and connections that failed in a way
//! time can mend (refused by a remote host that may be restarting, timed out, broken). Other 4xx
//! answers mean the request itself is wrong, and a refused connection to this machine, a host
//! name that does not resolve or a failed TLS handshake mean the configuration is, so repeating
//! them cannot help: they are reported at once. The delay is exponential backoff
//! with *full jitter* (uniform in `[0, min(max_delay, initial · 2^n)]`, which spreads a herd of
//! sessions hitting the same rate limit), unless the provider said how long to wait with
//! `retry-after-ms` or `retry-after` (seconds or an HTTP date); every delay is capped by
//! `max_delay` so a provider cannot park a session for an hour.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;

use crate::config::RetryPolicy;
use crate::error::{LlmError, Unreachable};

/// Whether `error` of a call to `base_url` is worth another attempt.
pub(crate) fn is_retryable(error: &LlmError, base_url: &str) -> bool {
    match error {
        LlmError::Status { status, .. } => is_retryable_status(*status),
        LlmError::Cut(_) => true,
        LlmError::Transport { kind: Unreachable::Refused, .. } => {
            !crate::config::is_loopback(base_url)
        }
        LlmError::Transport { kind: Unreachable::Dns | Unreachable::Tls, .. } => false,
        LlmError::Transport { kind: Unreachable::Timeout | Unreachable::Other, .. } => true,
        LlmError::Decode(_) | LlmError::Config(_) => false,
    }
}

/// Whether an HTTP status is transient.
pub(crate) fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500..=599)
}

/// The delay before attempt `failed_attempt + 1`, given the error of attempt `failed_attempt`
/// (1-based).
pub(crate) fn delay_for(policy: &RetryPolicy, failed_attempt: u32, error: &LlmError) -> Duration {
    let delay = match error {
        LlmError::Status { retry_after: Some(after), .. } => *after,
        _ => {
            let exp = failed_attempt.saturating_sub(1).min(30);
            let ceiling = policy.initial_delay.saturating_mul(1u32 << exp).min(policy.max_delay);
            ceiling.mul_f64(random_unit())
        }
    };
    delay.min(policy.max_delay)
}

/// A uniform sample from `[0, 1)`; jitter needs no cryptographic quality, but `getrandom` is
/// already a dependency and avoids a hand-rolled seeded generator shared between tasks.
fn random_unit() -> f64 {
    let mut buf = [0u8; 8];
    if getrandom::getrandom(&mut buf).is_err() {
        // Without randomness, the nanoseconds of the clock still spread concurrent callers.
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        return f64::from(nanos) / 1e9;
    }
    (u64::from_le_bytes(buf) >> 11) as f64 / (1u64 << 53) as f64
}

/// The wait the provider asked for, from `retry-after-ms` or `retry-after`.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO))
}

/// Parses an HTTP date: the IMF-fixdate servers send (`Sun, 06 Nov 1994 08:49:37 GMT`) and the
/// two obsolete forms RFC 9110 §5.6.7 asks recipients to accept, with `httpdate` (hyper's).
fn parse_http_date(value: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(value).ok()
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use reqwest::header::HeaderValue;

    use super::*;

    fn status(code: u16) -> LlmError {
        LlmError::Status { status: code, message: String::new(), retry_after: None }
    }

    #[test]
    fn retryable_classes() {
        let remote = "https://models.example/v1";
        for code in [408, 409, 429, 500, 502, 503, 504, 529] {
            assert!(is_retryable(&status(code), remote), "{code}");
        }
        for code in [400, 401, 403, 404, 413, 422] {
            assert!(!is_retryable(&status(code), remote), "{code}");
        }
        assert!(is_retryable(&LlmError::Cut("x".into()), remote));
        let net = |kind| LlmError::Transport { kind, detail: "x".into() };
        assert!(is_retryable(&net(Unreachable::Refused), remote), "a remote host may restart");
        assert!(!is_retryable(&net(Unreachable::Refused), "http://127.0.0.1:8080"));
        assert!(!is_retryable(&net(Unreachable::Refused), "http://localhost:11434/v1"));
        assert!(!is_retryable(&net(Unreachable::Dns), remote));
        assert!(!is_retryable(&net(Unreachable::Tls), remote));
        assert!(is_retryable(&net(Unreachable::Timeout), remote));
        assert!(is_retryable(&net(Unreachable::Other), remote));
        assert!(!is_retryable(&LlmError::Decode("x".into()), remote));
    }

    #[test]
    fn backoff_is_jittered_exponential_and_capped() {
        let policy = RetryPolicy {
            max_attempts: 10,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
        };
        let cut = LlmError::Cut("x".into());
        for _ in 0..200 {
            assert!(delay_for(&policy, 1, &cut) <= Duration::from_millis(100));
            assert!(delay_for(&policy, 3, &cut) <= Duration::from_millis(400));
            assert!(delay_for(&policy, 40, &cut) <= Duration::from_millis(1000));
        }
        let asked = LlmError::Status {
            status: 429,
            message: String::new(),
            retry_after: Some(Duration::from_secs(3600)),
        };
        assert_eq!(delay_for(&policy, 1, &asked), Duration::from_millis(1000));
        let asked = LlmError::Status {
            status: 429,
            message: String::new(),
            retry_after: Some(Duration::from_millis(300)),
        };
        assert_eq!(delay_for(&policy, 1, &asked), Duration::from_millis(300));
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("Sun, 06 Nov 1994 08:49:37 GMT"));
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn http_dates() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH + Duration::ZERO)
        );
        // The obsolete forms too (RFC 850 and asctime), as the RFC asks of recipients.
        let nov_1994 = Some(UNIX_EPOCH + Duration::from_secs(784_111_777));
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), nov_1994);
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), nov_1994);
        assert_eq!(parse_http_date("06 Nov 1994"), None);
    }
}
