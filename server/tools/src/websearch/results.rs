//! What `WebSearch` returns: the service's hits held to the session's network policy and the
//! org's `WebFetch` rules (a page the model could not fetch is not offered to it), filtered by
//! the call's `allowed_domains`/`blocked_domains`, de-duplicated, and bounded: at most
//! [`MAX_RESULTS`] results, titles and snippets cut ([`MAX_TITLE_CHARS`],
//! [`MAX_SNIPPET_CHARS`]), the whole text under [`MAX_OUTPUT_BYTES`].

use reqwest::Url;

/// Results returned at most.
pub const MAX_RESULTS: usize = 10;

/// A title's characters at most.
pub const MAX_TITLE_CHARS: usize = 200;

/// A snippet's characters at most.
pub const MAX_SNIPPET_CHARS: usize = 500;

/// A URL's characters at most (a longer one is dropped: WebFetch refuses it anyway).
pub const MAX_URL_CHARS: usize = 2000;

/// The result's bytes at most: ten results at their caps fit with room to spare; the bound
/// holds whatever a service sends.
pub const MAX_OUTPUT_BYTES: usize = 16 * 1024;

/// One hit as the service gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

/// The call's domain lists, normalised (lowercase, no scheme, no trailing dot).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    pub allowed: Vec<String>,
    pub blocked: Vec<String>,
}

/// The hits kept, and how many were dropped by what.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Kept {
    pub hits: Vec<Hit>,
    /// Not an http(s) URL with a host, or too long.
    pub invalid: usize,
    /// Refused by the session's network policy or the org's `WebFetch` rules.
    pub by_policy: usize,
    /// Outside `allowed_domains` or inside `blocked_domains`.
    pub by_filters: usize,
    /// Past [`MAX_RESULTS`] (or a duplicate).
    pub beyond: usize,
}

/// A domain as the model wrote it (`example.com`, `https://docs.example.com/`, `*.example.com`),
/// normalised; an error for one that names no host.
pub fn domain(text: &str) -> Result<String, String> {
    let raw = text.trim();
    let without_scheme = raw.split_once("://").map_or(raw, |(_, rest)| rest);
    let host = without_scheme.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.strip_prefix("*.").unwrap_or(host).trim_end_matches('.').to_ascii_lowercase();
    let ok = !host.is_empty()
        && host.len() <= 253
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'));
    if ok {
        Ok(host)
    } else {
        Err(format!("{text:?} is not a domain: give a host name such as docs.rs or example.com"))
    }
}

/// Whether `host` is `domain` or one of its subdomains.
fn within(host: &str, domain: &str) -> bool {
    host == domain
        || (host.len() > domain.len()
            && host.ends_with(domain)
            && host.as_bytes()[host.len() - domain.len() - 1] == b'.')
}

/// The hits the model may see. `reachable(host, port)` is the session's network policy;
/// `denied(url)` the org's `WebFetch` rules.
pub fn filter(
    hits: Vec<Hit>,
    filters: &Filters,
    reachable: &dyn Fn(&str, u16) -> bool,
    denied: &dyn Fn(&str) -> bool,
) -> Kept {
    let mut kept = Kept::default();
    for hit in hits {
        let url = match Url::parse(hit.url.trim()) {
            Ok(url)
                if matches!(url.scheme(), "http" | "https")
                    && url.host_str().is_some_and(|h| !h.is_empty())
                    && hit.url.len() <= MAX_URL_CHARS =>
            {
                url
            }
            _ => {
                kept.invalid += 1;
                continue;
            }
        };
        let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']).to_ascii_lowercase();
        let port = url.port_or_known_default().unwrap_or(443);
        let outside =
            !filters.allowed.is_empty() && !filters.allowed.iter().any(|d| within(&host, d));
        if outside || filters.blocked.iter().any(|d| within(&host, d)) {
            kept.by_filters += 1;
            continue;
        }
        if !reachable(&host, port) || denied(url.as_str()) {
            kept.by_policy += 1;
            continue;
        }
        if kept.hits.len() >= MAX_RESULTS || kept.hits.iter().any(|h| h.url == url.as_str()) {
            kept.beyond += 1;
            continue;
        }
        kept.hits.push(Hit {
            title: cut(&one_line(&hit.title), MAX_TITLE_CHARS),
            url: url.to_string(),
            snippet: cut(&one_line(&hit.snippet), MAX_SNIPPET_CHARS),
        });
    }
    kept
}

/// Whitespace runs (newlines included) as one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` cut at `max` characters, with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The model's result.
pub fn render(query: &str, service: &str, kept: &Kept) -> String {
    let mut out = format!("Web search results for query: {query:?} (from {service})\n");
    let mut notes = Vec::new();
    if kept.by_policy > 0 {
        notes.push(format!(
            "{} left out: their hosts are not allowed by the org's network policy or WebFetch rules",
            kept.by_policy
        ));
    }
    if kept.by_filters > 0 {
        notes.push(format!("{} left out by allowed_domains/blocked_domains", kept.by_filters));
    }
    if kept.invalid > 0 {
        notes.push(format!("{} without a usable http(s) URL left out", kept.invalid));
    }
    if kept.beyond > 0 {
        notes.push(format!("{} more past the first {MAX_RESULTS} (or repeated)", kept.beyond));
    }
    if !notes.is_empty() {
        out.push_str(&format!("Note: {}.\n", notes.join("; ")));
    }
    if kept.hits.is_empty() {
        out.push_str("\nNo results. Try other words, or fewer domain filters.\n");
        return out;
    }
    out.push('\n');
    for (i, hit) in kept.hits.iter().enumerate() {
        let title = if hit.title.is_empty() { "(no title)" } else { hit.title.as_str() };
        let mut entry = format!("{}. {title}\n   {}\n", i + 1, hit.url);
        if !hit.snippet.is_empty() {
            entry.push_str(&format!("   {}\n", hit.snippet));
        }
        if out.len() + entry.len() > MAX_OUTPUT_BYTES - 200 {
            out.push_str(&format!(
                "(the rest left out: the result is kept under {MAX_OUTPUT_BYTES} bytes)\n"
            ));
            break;
        }
        out.push_str(&entry);
    }
    out.push_str(
        "\nCite the pages you use as markdown links under \"Sources:\"; fetch one with WebFetch \
         when its snippet is not enough.\n",
    );
    out
}
