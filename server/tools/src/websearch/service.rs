//! The org's search service over HTTP: a SearXNG instance's JSON API (`GET
//! URL/search?q=…&format=json`, `results[].{url, title, content}`) or the Brave Search API (`GET
//! URL/res/v1/web/search?q=…` with `X-Subscription-Token`, `web.results[].{url, title,
//! description}`).
//!
//! The service is reached at the address the admin gave, loopback and private networks
//! included (that is where a SearXNG usually runs), with no proxy, no redirects (a service
//! that moves is a configuration to fix, not a hop to follow with a key), a deadline for the
//! whole exchange ([`SEARCH_TIMEOUT`]) and a cap on the body ([`MAX_BODY_BYTES`]). Every way it
//! can fail — refused, hanging, an error status, HTML where JSON was asked for, JSON of another
//! shape — is one [`ServiceError`] whose message says what to check. The Brave key goes only into
//! its header (marked sensitive); no message here carries it, nor the service's error body.

use std::time::Duration;

use reqwest::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use serde_json::Value;

use outboard_base::secret::SecretValue;
use outboard_org::search::Backend;

use super::results::Hit;

/// How long one search may take, connection and body included: a service that has not
/// answered by then is down for this turn, which waits for it.
pub const SEARCH_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes of an answer read at most: a SearXNG page of results is tens of KiB, Brave's a few
/// hundred; past 2 MiB the answer is refused rather than parsed.
pub const MAX_BODY_BYTES: usize = 2 << 20;

/// Results read from one answer at most (before filtering).
pub const MAX_HITS: usize = 50;

const USER_AGENT: &str = concat!("Outboard-WebSearch/", env!("CARGO_PKG_VERSION"));

/// Why a search failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// No connection, or it broke.
    #[error("{service} at {url} cannot be reached ({reason}); is it running? An admin checks `outboard-server admin search show`")]
    Unreachable { service: &'static str, url: String, reason: String },
    /// The deadline passed.
    #[error("{service} at {url} did not answer within {} s", SEARCH_TIMEOUT.as_secs())]
    Timeout { service: &'static str, url: String },
    /// An error status.
    #[error("{service} at {url} answered HTTP {status}{hint}")]
    Status { service: &'static str, url: String, status: u16, hint: &'static str },
    /// Not JSON (an HTML page, a proxy's error page).
    #[error("{service} at {url} answered {what}, not JSON{hint}")]
    NotJson { service: &'static str, url: String, what: String, hint: &'static str },
    /// JSON, but not the service's shape.
    #[error("{service} at {url} answered JSON without {field}: is this the right service?")]
    Shape { service: &'static str, url: String, field: &'static str },
    /// The answer went past [`MAX_BODY_BYTES`].
    #[error("{service} at {url} answered more than {MAX_BODY_BYTES} bytes")]
    TooLarge { service: &'static str, url: String },
}

/// The service's name, for messages and the result's header.
pub fn name(backend: &Backend) -> &'static str {
    match backend {
        Backend::Searxng(_) => "SearXNG",
        Backend::Brave(_) => "Brave Search",
        Backend::Anthropic | Backend::OpenAi => "the provider",
    }
}

/// Searches `query` on `backend` (`key`: Brave's), within `timeout`.
pub async fn search(
    backend: &Backend,
    key: Option<&SecretValue>,
    query: &str,
    timeout: Duration,
) -> Result<Vec<Hit>, ServiceError> {
    let service = name(backend);
    let (url, base) = match backend {
        Backend::Searxng(base) => (format!("{base}/search"), base),
        Backend::Brave(base) => (format!("{base}/res/v1/web/search"), base),
        Backend::Anthropic | Backend::OpenAi => {
            return Err(ServiceError::Shape { service, url: String::new(), field: "a service" })
        }
    };
    let shown = base.clone();
    let unreachable =
        |reason: String| ServiceError::Unreachable { service, url: shown.clone(), reason };
    let client = reqwest::Client::builder()
        // The server's own proxy variables are not the admin's address: connect directly.
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT.min(timeout))
        .timeout(timeout)
        .user_agent(USER_AGENT)
        .build()
        .map_err(|e| unreachable(format!("cannot make the HTTP client: {e}")))?;
    let mut request = client.get(&url).header(ACCEPT, "application/json");
    request = match backend {
        Backend::Brave(_) => {
            let mut token =
                HeaderValue::from_str(key.map_or("", |k| k.expose())).map_err(|_| {
                    unreachable("the org's Brave key is not a valid header value".into())
                })?;
            token.set_sensitive(true);
            request.query(&[("q", query), ("count", "20")]).header("X-Subscription-Token", token)
        }
        _ => request.query(&[("q", query), ("format", "json")]),
    };
    let failed = |e: reqwest::Error| {
        if e.is_timeout() {
            ServiceError::Timeout { service, url: shown.clone() }
        } else {
            unreachable(describe(&e))
        }
    };
    let work = async {
        let mut response = request.send().await.map_err(failed)?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|c| c.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(ServiceError::TooLarge { service, url: shown.clone() });
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, content_type, body))
    };
    // reqwest's own timeout covers the exchange; this one also bounds a body that trickles.
    let (status, content_type, body) = match tokio::time::timeout(timeout, work).await {
        Ok(done) => done?,
        Err(_) => return Err(ServiceError::Timeout { service, url: shown.clone() }),
    };
    if !status.is_success() {
        let hint = match (backend, status.as_u16()) {
            (Backend::Brave(_), 401 | 403) => {
                ": the org's Brave key was refused; an admin replaces it with `admin secret set`"
            }
            (Backend::Brave(_), 429) => ": the Brave plan's rate or quota is used up",
            (Backend::Searxng(_), 403) => {
                ": SearXNG refuses the JSON format unless `json` is in its settings' \
                 search.formats"
            }
            (_, 429) => ": the service limits how often it is asked; try again later",
            _ => "",
        };
        return Err(ServiceError::Status { service, url: shown, status: status.as_u16(), hint });
    }
    let value: Value = match serde_json::from_slice(&body) {
        Ok(value) => value,
        Err(_) => {
            let html = content_type.contains("html")
                || body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'<');
            let what = if html {
                "an HTML page".to_owned()
            } else if content_type.is_empty() {
                "a body that does not parse".to_owned()
            } else {
                format!("{content_type} that does not parse")
            };
            let hint = match backend {
                Backend::Searxng(_) => {
                    ": is the URL the instance's base address, and is `json` in its settings' \
                     search.formats?"
                }
                _ => "",
            };
            return Err(ServiceError::NotJson { service, url: shown, what, hint });
        }
    };
    let (items, field, snippet) = match backend {
        Backend::Brave(_) => (value.pointer("/web/results"), "web.results", "description"),
        _ => (value.get("results"), "results", "content"),
    };
    let items = match items {
        Some(Value::Array(items)) => items,
        // Brave leaves `web` out when nothing was found.
        None if matches!(backend, Backend::Brave(_)) && value.get("type").is_some() => {
            return Ok(Vec::new())
        }
        _ => return Err(ServiceError::Shape { service, url: shown, field }),
    };
    Ok(items.iter().take(MAX_HITS).filter_map(|item| hit(item, snippet)).collect())
}

/// One result item: `{url, title, <snippet field>}`; `None` without a URL.
fn hit(item: &Value, snippet: &str) -> Option<Hit> {
    let text = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    let url = text("url");
    if url.is_empty() {
        return None;
    }
    Some(Hit { title: text("title"), url, snippet: text(snippet) })
}

/// A reqwest error in words, with its causes (reqwest's own message is often just "error
/// sending request"). reqwest prints the URL, which carries the query and never the key.
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.without_url_ref().to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// `without_url` on a borrowed error: the message without the URL (the query is the model's
/// own, but it need not be repeated in every error).
trait WithoutUrl {
    fn without_url_ref(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    fn without_url_ref(&self) -> String {
        let text = self.to_string();
        match self.url() {
            Some(url) => {
                text.replace(&format!(" ({url})"), "").replace(url.as_str(), "the service")
            }
            None => text,
        }
    }
}
