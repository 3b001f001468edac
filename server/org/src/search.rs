//! The org's web search backend: off until an admin sets one (`outboard-server admin search
//! set --org ORG BACKEND`, `show`, `clear`; embedded mode's `web_search` setting writes the local
//! org's), and what `WebSearch` results may link to.
//!
//! | backend | what searches |
//! |---|---|
//! | `anthropic` | the Anthropic API's own server tool, in sessions whose provider is that API |
//! | `openai` | the Responses API's built-in `web_search`, in sessions whose provider is that API |
//! | `searxng:URL` | a SearXNG instance's JSON API (`GET URL/search?q=…&format=json`), any provider |
//! | `brave[:URL]` | the Brave Search API (default [`BRAVE_URL`]), any provider; its key is the org secret for URL's host |
//!
//! Design choices:
//! - The service's address is the admin's choice, so it is reached where it is (a SearXNG on
//!   loopback or the private network is the usual setup), outside the session's network policy;
//!   the *results* are held to that policy ([`LinkRules`]), as `WebFetch` is.
//! - The Brave key is no new kind of credential: it is the org secret stored for the API's host
//!   (`admin secret set --org ORG --host api.search.brave.com brave`), sealed like the others, opened
//!   only when a search is made, and scrubbed from everything a session shows.

use std::fmt;

use outboard_shared::OrgId;
use outboard_store::db::{params, OptionalExtension};
use serde_json::json;

use outboard_base::util::now_rfc3339;
use outboard_store::{org_id_by_name, Store, StoreError};

use crate::netpolicy::{self, Mode, REGISTRIES};
use crate::toolpolicy::{Decision, Rules};

/// The Brave Search API's base URL.
pub const BRAVE_URL: &str = "https://api.search.brave.com";

/// The longest backend text (a URL with its scheme).
pub const MAX_BACKEND_BYTES: usize = 2048;

/// A problem with a backend setting, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The org does not exist.
    #[error("no org named {0:?}: create it with `outboard-server admin user add NAME --org ORG`")]
    NoOrg(String),
    /// The backend is not understood.
    #[error("{0}")]
    Invalid(String),
    /// The store said no.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where an org's searches go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The Anthropic API's server tool.
    Anthropic,
    /// The Responses API's built-in tool.
    OpenAi,
    /// A SearXNG instance, by its base URL (no trailing `/`).
    Searxng(String),
    /// The Brave Search API, by its base URL (no trailing `/`).
    Brave(String),
}

impl Backend {
    /// Parses `anthropic`, `openai`, `searxng:URL`, `brave` or `brave:URL`.
    pub fn parse(text: &str) -> Result<Backend, SearchError> {
        let text = text.trim();
        if text.len() > MAX_BACKEND_BYTES {
            return Err(SearchError::Invalid(format!(
                "the backend is longer than {MAX_BACKEND_BYTES} bytes"
            )));
        }
        match text {
            "anthropic" => return Ok(Backend::Anthropic),
            "openai" | "responses" => return Ok(Backend::OpenAi),
            "brave" => return Ok(Backend::Brave(BRAVE_URL.into())),
            _ => {}
        }
        let (kind, url) = text.split_once(':').unwrap_or((text, ""));
        let url = match kind {
            "searxng" | "brave" => base_url(url)?,
            _ => {
                return Err(SearchError::Invalid(format!(
                    "{text:?} is not a search backend: give anthropic, openai, searxng:URL \
                     (e.g. searxng:http://127.0.0.1:8888) or brave"
                )))
            }
        };
        Ok(if kind == "searxng" { Backend::Searxng(url) } else { Backend::Brave(url) })
    }

    /// The backend as [`Backend::parse`] reads it.
    pub fn text(&self) -> String {
        match self {
            Backend::Anthropic => "anthropic".into(),
            Backend::OpenAi => "openai".into(),
            Backend::Searxng(url) => format!("searxng:{url}"),
            Backend::Brave(url) if url == BRAVE_URL => "brave".into(),
            Backend::Brave(url) => format!("brave:{url}"),
        }
    }

    /// The `host[:port]` whose org secret is the Brave key (as `admin secret set` stores it).
    pub fn key_host(&self) -> Option<String> {
        let Backend::Brave(url) = self else { return None };
        let url = reqwest::Url::parse(url).ok()?;
        let host = url.host_str()?;
        Some(crate::secrets::host_key(url.scheme(), host, url.port()))
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

/// A service's base URL, checked: http or https, a host, no credentials, no query.
fn base_url(text: &str) -> Result<String, SearchError> {
    let bad = |why: &str| SearchError::Invalid(format!("the search service URL {text:?}: {why}"));
    let url = reqwest::Url::parse(text).map_err(|e| bad(&format!("{e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("give an http:// or https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it names no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "it carries credentials; a Brave key is an org secret (admin secret set), and a \
             SearXNG instance needs none",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("give the base URL, without ?query or #fragment"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// The org's backend; `None`: web search is off.
pub async fn load(store: &Store, org: &OrgId) -> Result<Option<Backend>, StoreError> {
    let org = org.clone();
    let text: Option<String> = store
        .call(move |c| {
            c.query_row("SELECT backend FROM org_search WHERE org_id = ?1", [&org.0], |r| r.get(0))
                .optional()
        })
        .await?;
    Ok(text.and_then(|t| match Backend::parse(&t) {
        Ok(backend) => Some(backend),
        Err(e) => {
            tracing::warn!("ignoring the stored web search backend: {e}");
            None
        }
    }))
}

async fn org_id(store: &Store, org: &str) -> Result<OrgId, SearchError> {
    let name = org.to_owned();
    store
        .call(move |c| org_id_by_name(c, &name))
        .await?
        .ok_or_else(|| SearchError::NoOrg(org.to_owned()))
}

/// `admin search set --org ORG BACKEND`: stores it; returns `show`'s text.
pub async fn set(store: &Store, org: &str, backend: &Backend) -> Result<String, SearchError> {
    let id = org_id(store, org).await?;
    let text = backend.text();
    store
        .call(move |c| {
            c.execute(
                "INSERT INTO org_search (org_id, backend, set_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (org_id) DO UPDATE SET backend = excluded.backend,
                                                    set_at = excluded.set_at",
                params![id.0, text, now_rfc3339()],
            )?;
            Ok(())
        })
        .await?;
    show(store, org).await
}

/// `admin search clear --org ORG`: turns web search off; whether it was on.
pub async fn clear(store: &Store, org: &str) -> Result<bool, SearchError> {
    let id = org_id(store, org).await?;
    let n =
        store.call(move |c| c.execute("DELETE FROM org_search WHERE org_id = ?1", [&id.0])).await?;
    Ok(n > 0)
}

/// `admin search show --org ORG`: the backend and what it means.
pub async fn show(store: &Store, org: &str) -> Result<String, SearchError> {
    let id = org_id(store, org).await?;
    Ok(match load(store, &id).await? {
        None => format!(
            "web search: off (WebSearch is not offered to org {org}'s sessions)\nto turn it on: \
             outboard-server admin search set --org {org} searxng:URL | brave | anthropic | \
             openai\n"
        ),
        Some(backend) => {
            let mut out = format!("web search: {backend}\n");
            out.push_str(match &backend {
                Backend::Anthropic => {
                    "  the Anthropic API's own web_search tool, in sessions on that API (others \
                     get no WebSearch)\n"
                }
                Backend::OpenAi => {
                    "  the Responses API's own web_search tool, in sessions on that API (others \
                     get no WebSearch)\n"
                }
                Backend::Searxng(_) => "  WebSearch asks this SearXNG instance's JSON API\n",
                Backend::Brave(_) => "  WebSearch asks the Brave Search API\n",
            });
            if let Some(host) = backend.key_host() {
                out.push_str(&format!(
                    "  its key: the org secret for {host} (outboard-server admin secret set \
                     --org {org} --host {host} brave)\n"
                ));
            }
            out.push_str(
                "  results are held to the org's network policy (admin network show) and its \
                 WebFetch rules (admin policy ls)\n",
            );
            out
        }
    })
}

/// Which pages an org's search results may link to: those its network policy lets `WebFetch`
/// reach and its tool policy does not deny to `WebFetch`.
#[derive(Debug, Clone, Default)]
pub struct LinkRules {
    /// The org's tool rules (`WebFetch(URL)` denials drop a result).
    pub rules: Rules,
}

impl LinkRules {
    /// Whether the tool policy denies `WebFetch` of `url` (such a result is dropped).
    pub fn denies(&self, url: &str) -> bool {
        self.rules.judge("WebFetch", &json!({ "url": url }), &|_| false).decision()
            == Decision::Deny
    }
}

/// The domains a provider's own search may return, from the org's network policy (the
/// provider runs the search, so the policy is handed to it as its domain filter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderDomains {
    /// Any (`full`).
    Any,
    /// Only these (`registries`, `allow`): host names, `*.` patterns as their suffix (the
    /// APIs include subdomains), IP literals left out.
    Only(Vec<String>),
    /// None at all (`none`, or an allow list of IP literals only): the search is not offered.
    Nothing,
}

/// [`ProviderDomains`] of `org`'s network policy now.
pub async fn provider_domains(
    store: &Store,
    org: &OrgId,
) -> Result<ProviderDomains, netpolicy::PolicyError> {
    let (policy, _) = netpolicy::read(store, org).await?;
    let mut names: Vec<String> = match policy.mode {
        Mode::Full => return Ok(ProviderDomains::Any),
        Mode::None => return Ok(ProviderDomains::Nothing),
        Mode::Registries => REGISTRIES.iter().map(|h| (*h).to_owned()).collect(),
        Mode::Allow => Vec::new(),
    };
    for entry in &policy.hosts {
        let name = entry.host.strip_prefix("*.").unwrap_or(&entry.host);
        let port_ok = entry.port.is_none_or(|p| p == 80 || p == 443);
        if port_ok && name.parse::<std::net::IpAddr>().is_err() && !names.iter().any(|n| n == name)
        {
            names.push(name.to_owned());
        }
    }
    Ok(if names.is_empty() { ProviderDomains::Nothing } else { ProviderDomains::Only(names) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse_and_print_back() {
        for (text, backend) in [
            ("anthropic", Backend::Anthropic),
            ("openai", Backend::OpenAi),
            ("brave", Backend::Brave(BRAVE_URL.into())),
            ("searxng:http://127.0.0.1:8888/", Backend::Searxng("http://127.0.0.1:8888".into())),
            ("brave:http://127.0.0.1:9/x", Backend::Brave("http://127.0.0.1:9/x".into())),
        ] {
            let parsed = Backend::parse(text).unwrap();
            assert_eq!(parsed, backend, "{text}");
            assert_eq!(Backend::parse(&parsed.text()).unwrap(), backend);
        }
        for bad in [
            "google",
            "searxng:",
            "searxng:ftp://x",
            "searxng:http://u:p@h",
            "searxng:http://h/?q=1",
            "",
        ] {
            assert!(Backend::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Backend::parse("brave").unwrap().key_host().as_deref(),
            Some("api.search.brave.com")
        );
        assert_eq!(
            Backend::parse("brave:http://127.0.0.1:4000").unwrap().key_host().as_deref(),
            Some("127.0.0.1:4000")
        );
        assert_eq!(Backend::Anthropic.key_host(), None);
    }

    #[test]
    fn a_webfetch_denial_drops_a_link() {
        let rules = Rules::from_rows(vec![("WebFetch(*evil.example*)".into(), "deny".into())]);
        let links = LinkRules { rules };
        assert!(links.denies("https://evil.example/a"));
        assert!(!links.denies("https://good.example/a"));
    }
}
