//! `WebSearch` (`query`, `allowed_domains`, `blocked_domains`; Claude Code's name and
//! parameters): off until the org sets a backend ([`outboard_org::search`]), and then offered in
//! one of two shapes ([`offer`]):
//! - the provider's own search (`anthropic`, `openai` backends, when the session's provider is
//!   that API): the tool list carries the API's server tool instead, the provider runs the
//!   searches, and the org's network policy goes to it as its domain filter;
//! - a service the org runs or pays for (`searxng:URL`, `brave`), any provider: this tool, run
//!   in the server ([`run`]): the query goes to the service at the address the admin gave
//!   ([`service`]), and its results are held to the session's network policy and the org's
//!   `WebFetch` rules, filtered by the call's domain lists, and bounded ([`results`]).
//!
//! Like `WebFetch` it never runs in (or wakes) the sandbox, and the org's tool policy governs
//! each call (`WebSearch(QUERY)` patterns). The harness scrubs org secrets from the result as it
//! does from every tool result.

pub mod results;
pub mod service;

use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use outboard_base::secret::SecretValue;
use outboard_egress::{Egress, Verdict};
use outboard_llm::search::{provider_search_spec, SearchOptions};
use outboard_llm::{ProviderKind, ToolSpec};
use outboard_org::search::{self as org_search, Backend, LinkRules, ProviderDomains};
use outboard_org::toolpolicy::Decision;

use crate::org::OrgCtx;
use crate::outcome::ToolOutcome;

/// The longest query (characters): search engines cut far shorter ones (Brave at 400), and a
/// longer "query" is a document pasted by mistake.
pub const MAX_QUERY_CHARS: usize = 1000;

/// The shortest query (Claude Code's `minLength`).
pub const MIN_QUERY_CHARS: usize = 2;

/// Domains one call may list in `allowed_domains` or `blocked_domains`.
pub const MAX_DOMAINS: usize = 64;

/// Searches one model call may make with the provider's own tool (Anthropic's `max_uses`).
pub const PROVIDER_MAX_USES: u32 = 5;

pub const PARAMS: &str = "{\"query\": string (required, 2 to 1000 characters), \
    \"allowed_domains\": [string] (optional), \"blocked_domains\": [string] (optional; not with \
    allowed_domains)}";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSearchParams {
    query: String,
    #[serde(default)]
    allowed_domains: Option<Vec<String>>,
    #[serde(default)]
    blocked_domains: Option<Vec<String>>,
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: "WebSearch".into(),
        description: format!(
            "- Allows you to search the web and use the results to inform responses\n\
- Provides up-to-date information for current events and recent data\n\
- Returns search results: title, URL and a snippet of each, numbered\n\
- Use this tool for accessing information beyond your knowledge cutoff\n\n\
Usage notes:\n\
- Domain filtering is supported to include or block specific websites (allowed_domains or \
blocked_domains, not both; a domain covers its subdomains)\n\
- The search is made by the harness's server through your org's search service; results \
linking to hosts your org's network policy does not allow are left out (the result says how \
many)\n\
- The query is {MIN_QUERY_CHARS} to {MAX_QUERY_CHARS} characters; at most {} results, each \
snippet cut at {} characters\n\
- Fetch a result's page with WebFetch when the snippet is not enough\n\
- After answering from the results, list the URLs you used as markdown links under \
\"Sources:\"",
            results::MAX_RESULTS,
            results::MAX_SNIPPET_CHARS
        ),
        input_schema: json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": MIN_QUERY_CHARS,
                          "description": "The search query to use"},
                "allowed_domains": {"type": "array", "items": {"type": "string"},
                                    "description": "Only include search results from these domains"},
                "blocked_domains": {"type": "array", "items": {"type": "string"},
                                    "description": "Never include search results from these domains"}
            },
            "required": ["query"],
            "additionalProperties": false
        }),
    }
}

/// The search entry of a session's tool list for its org and provider now: `WebSearch`, the
/// provider's own tool, or nothing (web search off, or a provider backend this session's
/// provider does not have, or nothing the policy would let it return).
/// `egress` is the session's network: a provider's own search is offered only for the domains
/// it lets the session reach (none under `--network none`), as `WebFetch` is.
pub async fn offer(
    org: Option<&OrgCtx>,
    provider: ProviderKind,
    egress: Option<&Egress>,
) -> Option<ToolSpec> {
    let org = org?;
    let store = org.fs.store();
    let backend = match org_search::load(store, &org.org_id).await {
        Ok(backend) => backend?,
        Err(e) => {
            tracing::warn!(org = %org.org_id, "cannot read the web search backend: {e}");
            return None;
        }
    };
    match (backend, provider) {
        (Backend::Searxng(_) | Backend::Brave(_), _) => Some(spec()),
        (Backend::Anthropic, ProviderKind::Anthropic)
        | (Backend::OpenAi, ProviderKind::Responses) => provider_tool(org, egress?).await,
        _ => None,
    }
}

/// The provider's own search for `org`: `None` when its tool policy does not simply allow
/// `WebSearch` (a search the provider runs cannot wait for a person's answer) or its network
/// policy allows no domain.
async fn provider_tool(org: &OrgCtx, egress: &Egress) -> Option<ToolSpec> {
    let store = org.fs.store();
    let rules = outboard_org::toolpolicy::load(store, &org.org_id).await.ok()?;
    let judged = rules.judge("WebSearch", &json!({"query": ""}), &|_| false);
    if judged.decision() != Decision::Allow {
        return None;
    }
    let domains = match org_search::provider_domains(store, &org.org_id).await {
        Ok(domains) => domains,
        Err(e) => {
            tracing::warn!(org = %org.org_id, "cannot read the network policy: {e}");
            return None;
        }
    };
    // The session's own policy narrows the org's (`--network none` refuses every host).
    let reachable = |host: &str| matches!(egress.net.decide.decide(host, 443), Verdict::Allow);
    let allowed_domains = match domains {
        ProviderDomains::Any if reachable(SESSION_PROBE_HOST) => Vec::new(),
        ProviderDomains::Any => return None,
        ProviderDomains::Only(names) => {
            let names: Vec<String> = names.into_iter().filter(|n| reachable(n)).collect();
            if names.is_empty() {
                return None;
            }
            names
        }
        ProviderDomains::Nothing => return None,
    };
    let options =
        SearchOptions { max_uses: PROVIDER_MAX_USES, allowed_domains, blocked_domains: Vec::new() };
    Some(provider_search_spec(&options))
}

/// A host no org names, asked of a session whose org allows every domain: refused only when
/// the session itself allows none (`--network none`).
const SESSION_PROBE_HOST: &str = "search-probe.invalid";

/// Runs one `WebSearch` against the org's service. `egress` is the session's network (its
/// policy judges the results); `None` refuses, as `WebFetch` does.
pub async fn run(
    params: WebSearchParams,
    org: Option<&OrgCtx>,
    egress: Option<&Egress>,
    cancel: &CancellationToken,
) -> ToolOutcome {
    let filters = match checked(&params) {
        Ok(filters) => filters,
        Err(why) => return ToolOutcome::error(why),
    };
    let Some(org) = org else {
        return ToolOutcome::error("WebSearch is not available in this session (it has no org).");
    };
    let store = org.fs.store();
    let backend = match org_search::load(store, &org.org_id).await {
        Ok(Some(backend)) => backend,
        Ok(None) => {
            return ToolOutcome::error(
                "WebSearch is off for this org: an admin turns it on with `outboard-server admin \
                 search set --org ORG searxng:URL` (or brave, anthropic, openai).",
            )
        }
        Err(e) => return ToolOutcome::error(format!("WebSearch cannot read its settings: {e}")),
    };
    let Some(egress) = egress else {
        return ToolOutcome::error(
            "WebSearch is not available in this session: it has no network policy to judge the \
             results by (the server runs commands with --sandbox unsafe-host, or the session was \
             made without a network).",
        );
    };
    let key = match &backend {
        Backend::Searxng(_) => None,
        Backend::Brave(_) => match brave_key(org, &backend).await {
            Ok(key) => Some(key),
            Err(why) => return ToolOutcome::error(why),
        },
        Backend::Anthropic | Backend::OpenAi => {
            return ToolOutcome::error(format!(
                "This org's web search is the provider's own ({backend}), which this session's \
                 model provider does not run; there is no WebSearch here."
            ))
        }
    };
    let links = match outboard_org::toolpolicy::load(store, &org.org_id).await {
        Ok(rules) => LinkRules { rules },
        Err(e) => return ToolOutcome::error(format!("WebSearch cannot read the tool policy: {e}")),
    };
    let query = params.query.trim();
    let found = tokio::select! {
        found = service::search(&backend, key.as_ref(), query, service::SEARCH_TIMEOUT) => found,
        () = cancel.cancelled() => return ToolOutcome::error("Interrupted by the user"),
    };
    match found {
        Ok(hits) => {
            let judge = |host: &str, port: u16| {
                matches!(egress.net.decide.decide(host, port), outboard_egress::Verdict::Allow)
            };
            let kept = results::filter(hits, &filters, &judge, &|url| links.denies(url));
            ToolOutcome::ok(results::render(query, service::name(&backend), &kept))
        }
        Err(e) => ToolOutcome::error(format!("WebSearch could not search: {e}")),
    }
}

/// The call's domain lists, checked; the error tells the model what to change.
fn checked(params: &WebSearchParams) -> Result<results::Filters, String> {
    let query = params.query.trim();
    let chars = query.chars().count();
    if chars < MIN_QUERY_CHARS {
        return Err(format!(
            "The query is {chars} characters long; WebSearch needs at least {MIN_QUERY_CHARS}."
        ));
    }
    if chars > MAX_QUERY_CHARS {
        return Err(format!(
            "The query is {chars} characters long; WebSearch takes at most {MAX_QUERY_CHARS}. \
             Search for a few key words (an error message's distinctive part, a library and \
             function name) instead."
        ));
    }
    let allowed = params.allowed_domains.clone().unwrap_or_default();
    let blocked = params.blocked_domains.clone().unwrap_or_default();
    if !allowed.is_empty() && !blocked.is_empty() {
        return Err("Give allowed_domains or blocked_domains, not both.".to_owned());
    }
    if allowed.len().max(blocked.len()) > MAX_DOMAINS {
        return Err(format!(
            "At most {MAX_DOMAINS} domains in allowed_domains or blocked_domains."
        ));
    }
    let normal = |list: Vec<String>| -> Result<Vec<String>, String> {
        list.into_iter().map(|d| results::domain(&d)).collect()
    };
    Ok(results::Filters { allowed: normal(allowed)?, blocked: normal(blocked)? })
}

/// The Brave key: the org secret for the API's host.
async fn brave_key(org: &OrgCtx, backend: &Backend) -> Result<SecretValue, String> {
    let host = backend.key_host().unwrap_or_default();
    let Some(secrets) = &org.secrets else {
        return Err("WebSearch (Brave) needs the org's Brave key, and this server has no secret \
                    key to open org secrets with."
            .to_owned());
    };
    match secrets.for_host(&org.org_id, &host).await {
        Ok(Some(value)) => Ok(value),
        Ok(None) => Err(format!(
            "WebSearch (Brave) has no key: an admin stores it with `outboard-server admin secret \
             set --org ORG --host {host} brave` (the value is read from standard input)."
        )),
        Err(e) => Err(format!("WebSearch (Brave) cannot open its key: {e}")),
    }
}

#[cfg(test)]
mod tests;
