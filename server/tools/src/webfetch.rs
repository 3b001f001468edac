//! `WebFetch` (`url`, `prompt`; Claude Code's name and parameters): the server fetches a page
//! for the model and returns it as Markdown. It runs in the server process, never in the
//! sandbox (a fetch does not start or thaw one), and goes through the session's own network:
//! the same policy, the same forbidden ranges and the same audit as the sandbox's proxy
//! ([`outboard_egress::admit_destination`], the session's [`Audit`] sink), so a page the
//! sandbox may not reach, the model may not fetch either, and every fetch is a row of
//! `admin network log` (a refusal also a `network` event of the session).
//!
//! What it owns: the request (GET only, http and https, no credentials of any kind: never the
//! org's injected headers, which are for the sandbox's clients), the redirects, followed by hand
//! with every hop checked and audited ([`MAX_REDIRECTS`]), the connection to the vetted
//! address only (no second resolution: no DNS rebinding), the limits ([`FETCH_TIMEOUT`],
//! [`MAX_BODY_BYTES`], [`MAX_MARKDOWN_BYTES`]) and the result's header. What the body becomes
//! is [`page`]'s.
//!
//! Design choice: Claude Code runs a small model over the page with the `prompt`; Outboard
//! makes no second model call. The result is the page under a short header (final URL, status,
//! content type) ending with "Answer from this page: PROMPT", so the session's own model
//! applies the prompt to it.

mod page;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, CONTENT_TYPE, LOCATION};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::outcome::ToolOutcome;
use outboard_egress::{admit_destination, Admission, AuditEntry, Egress, RefusedBy};
use outboard_llm::ToolSpec;

/// Redirects followed at most (Claude Code's own fetch and browsers' "too many redirects" are
/// of this order): enough for `http` → `https` → a canonical host → a login-free mirror, few
/// enough that a loop is reported quickly.
pub const MAX_REDIRECTS: usize = 5;

/// How long one `WebFetch` may take, all hops together: a page that has not arrived in this
/// time will not help the turn, which waits for it.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// How long connecting to a vetted address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of a body read at most: large documentation pages are a few hundred KiB of HTML;
/// beyond 5 MiB reading stops, the page is converted from what came, and the result says so.
pub const MAX_BODY_BYTES: usize = 5 << 20;

/// Bytes of Markdown returned at most (before the session's usual tool-result cap, which may
/// be smaller): keeps the durable `tool_result` event of one fetch bounded whatever the page.
pub const MAX_MARKDOWN_BYTES: usize = 100 * 1024;

/// The longest URL accepted (Claude Code's limit).
pub const MAX_URL_LEN: usize = 2000;

/// How long the result waits for the fetch's audit records to be written (and a refusal's
/// event sent) so they precede it; the store is milliseconds away, a stuck one must not hold
/// the turn.
const AUDIT_FLUSH_WAIT: Duration = Duration::from_secs(2);

const USER_AGENT: &str = concat!("Outboard-WebFetch/", env!("CARGO_PKG_VERSION"));

pub const PARAMS: &str =
    "{\"url\": string (required, http:// or https://), \"prompt\": string (required)}";

#[derive(Debug, Deserialize)]
pub struct WebFetchParams {
    url: String,
    prompt: String,
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: "WebFetch".into(),
        description: "- Fetches content from a specified URL and returns it for the prompt\n\
- Takes a URL and a prompt as input\n\
- Fetches the URL content, converts HTML to markdown\n\
- Returns the page's markdown under a short header (final URL, status, content type) that ends \
with your prompt as \"Answer from this page: …\": answer it from the page yourself\n\
- Use this tool when you need to retrieve and analyze web content\n\n\
Usage notes:\n\
- The fetch is made by the harness's server, not in your sandbox, under your org's network \
policy: hosts the policy does not allow are refused, and the refusal says which policy and \
what an admin would run to allow it. Every fetch is logged.\n\
- The URL must be a fully-formed valid URL (http:// or https://), without user:password.\n\
- Only GET; no cookies or credentials are ever sent.\n\
- Redirects are followed (at most 5), each one checked against the policy.\n\
- Text, Markdown and JSON are returned as they are; other binary types (images, PDFs, \
archives) are refused.\n\
- Large pages are cut (the body at 5 MiB, the markdown at 100 KiB) and the result says so.\n\
- This tool is read-only and does not modify any files."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "format": "uri", "description": "The URL to fetch content from"},
                "prompt": {"type": "string", "description": "The prompt to run on the fetched content"}
            },
            "required": ["url", "prompt"],
            "additionalProperties": false
        }),
    }
}

/// Runs one `WebFetch`. `egress` is the session's network; `None` refuses every fetch.
pub async fn run(
    params: WebFetchParams,
    egress: Option<&Egress>,
    cancel: &CancellationToken,
) -> ToolOutcome {
    let Some(egress) = egress else {
        return ToolOutcome::error(
            "WebFetch is not available in this session: it has no network policy to fetch under \
             (the server runs commands with --sandbox unsafe-host, or the session was made \
             without a network). Ask an admin to run the server with bubblewrap sandboxes.",
        );
    };
    let url = match start_url(&params.url) {
        Ok(url) => url,
        Err(why) => return ToolOutcome::error(why),
    };
    let outcome = tokio::select! {
        outcome = fetch(egress, url, &params.prompt, FETCH_TIMEOUT) => outcome,
        () = cancel.cancelled() => ToolOutcome::error("Interrupted by the user"),
    };
    let _ = tokio::time::timeout(AUDIT_FLUSH_WAIT, egress.net.audit.flush()).await;
    outcome
}

/// The URL the model gave, checked: absolute, http or https, no credentials, not too long.
fn start_url(text: &str) -> Result<Url, String> {
    let text = text.trim();
    if text.len() > MAX_URL_LEN {
        return Err(format!(
            "The URL is {} characters long; WebFetch takes at most {MAX_URL_LEN}.",
            text.len()
        ));
    }
    let url = Url::parse(text).map_err(|e| {
        format!(
            "Invalid URL {text:?}: {e}. Give a fully-formed URL such as https://example.com/page"
        )
    })?;
    checked(url)
}

/// Whether WebFetch may request `url` at all (before any policy): http(s) with a host and no
/// credentials.
fn checked(url: Url) -> Result<Url, String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "WebFetch fetches http:// and https:// URLs only, not {}: (in {url})",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("The URL {url} names no host."));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(
            "WebFetch never sends credentials: give the URL without user:password@.".to_owned()
        );
    }
    Ok(url)
}

/// Where a redirect from `base` with `Location: location` leads, checked like the first URL.
fn redirect_target(base: &Url, location: &str) -> Result<Url, String> {
    let next = base
        .join(location.trim())
        .map_err(|e| format!("the redirect's Location {location:?} is not a valid URL: {e}"))?;
    checked(next)
}

/// The host (as named, lower case, IPv6 without brackets) and port a URL connects to.
fn destination(url: &Url) -> (String, u16) {
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']).to_ascii_lowercase();
    (host, url.port_or_known_default().unwrap_or(80))
}

/// Whether `status` sends the client on with a `Location`.
fn is_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// Who refused, in words, from the refusal's `policy` (see [`outboard_org::netpolicy`] and
/// [`outboard_egress`]).
fn refuser(policy: &str) -> &'static str {
    if policy.starts_with("session") {
        "this session's narrowing of the network"
    } else if policy.starts_with("no way back in") {
        "the forbidden address ranges (loopback, private, link-local, metadata, the server's own \
         ports)"
    } else if policy.starts_with("unreadable") {
        "the server, which could not read the org's network policy"
    } else {
        "the org's network policy"
    }
}

/// One hop's response, read (within the caps).
struct Fetched {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
    /// The body went on past [`MAX_BODY_BYTES`].
    cut: bool,
}

/// The fetch and its redirects, each hop admitted and audited, all within `budget`.
async fn fetch(egress: &Egress, first: Url, prompt: &str, budget: Duration) -> ToolOutcome {
    let deadline = Instant::now() + budget;
    let mut chain: Vec<Url> = Vec::new();
    let mut url = first;
    loop {
        let hop = chain.len();
        let (host, port) = destination(&url);
        let where_ = || match chain.last() {
            None => format!("WebFetch could not fetch {url}"),
            Some(from) => format!(
                "WebFetch could not follow redirect {hop} of {} (from {from} to {url})",
                chain[0]
            ),
        };
        let record = Hop::start(&host, port);
        let net = &egress.net;
        let admitted =
            admit_destination(&*net.decide, &net.org_name, &egress.server_ports, &host, port).await;
        let addrs = match admitted {
            Ok(addrs) => addrs,
            Err(Admission::Refused(by)) => {
                audit_refusal(egress, record, &by);
                return ToolOutcome::error(format!(
                    "{}: Outboard's network policy refused {}.\nrefused by: {}\npolicy: {}\n\
                     reason: {}\nto allow it: {}",
                    where_(),
                    shown(&host, port),
                    refuser(&by.policy),
                    by.policy,
                    by.reason,
                    by.hint
                ));
            }
            Err(Admission::Unreachable(why)) => {
                record.record(egress, false, format!("WebFetch: {why}"), 0);
                return ToolOutcome::error(format!("{}: {why}", where_()));
            }
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let fetched = match get(&url, &host, &addrs, remaining, budget).await {
            Ok(fetched) => fetched,
            Err(why) => {
                record.record(egress, false, format!("WebFetch: {why}"), 0);
                return ToolOutcome::error(format!("{}: {why}", where_()));
            }
        };
        let ended = format!("WebFetch: HTTP {}", fetched.status.as_u16());
        record.record(egress, true, ended, fetched.body.len() as u64);
        let location = fetched.headers.get(LOCATION).and_then(|l| l.to_str().ok());
        match (is_redirect(fetched.status), location) {
            (true, Some(location)) => {
                if hop >= MAX_REDIRECTS {
                    return ToolOutcome::error(format!(
                        "{}: more than {MAX_REDIRECTS} redirects (the last to {location}); \
                         fetch the final URL directly if you know it",
                        where_()
                    ));
                }
                let next = match redirect_target(&url, location) {
                    Ok(next) => next,
                    Err(why) => return ToolOutcome::error(format!("{}: {why}", where_())),
                };
                chain.push(std::mem::replace(&mut url, next));
            }
            _ => {
                chain.push(url);
                return answer(chain, fetched, prompt).await;
            }
        }
    }
}

fn shown(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// One GET to `url`, connecting only to `addrs` (already vetted); the body read up to
/// [`MAX_BODY_BYTES`].
async fn get(
    url: &Url,
    host: &str,
    addrs: &[SocketAddr],
    timeout: Duration,
    budget: Duration,
) -> Result<Fetched, String> {
    let too_long = || format!("the fetch took more than {} s", budget.as_secs_f64());
    if timeout.is_zero() {
        return Err(too_long());
    }
    let mut builder = reqwest::Client::builder()
        // The server's own proxy variables are not the session's policy: connect directly.
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(timeout)
        .user_agent(USER_AGENT);
    if host.parse::<IpAddr>().is_err() {
        // The name goes to the addresses vetted, and nowhere else.
        builder = builder.resolve_to_addrs(host, addrs);
    }
    let client = builder.build().map_err(|e| format!("cannot make the HTTP client: {e}"))?;
    let request = client
        .get(url.clone())
        .header(
            reqwest::header::ACCEPT,
            "text/markdown, text/html;q=0.9, text/plain;q=0.8, application/json;q=0.8, */*;q=0.5",
        )
        .header(reqwest::header::ACCEPT_ENCODING, "identity");
    let failed = |e: reqwest::Error, what: &str| {
        if e.is_timeout() {
            too_long()
        } else {
            describe(&e, what)
        }
    };
    let mut response = request.send().await.map_err(|e| failed(e, "request"))?;
    let status = response.status();
    let headers = response.headers().clone();
    let mut body = Vec::new();
    let mut cut = false;
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(e, "body"))? {
        let room = MAX_BODY_BYTES - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            cut = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Fetched { status, headers, body, cut })
}

/// A reqwest error in words, with its causes (reqwest's own message is often just "error
/// sending request").
fn describe(error: &reqwest::Error, what: &str) -> String {
    let mut text = format!("the {what} failed: {error}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

/// The model's result: the header and the page as Markdown or text.
async fn answer(chain: Vec<Url>, fetched: Fetched, prompt: &str) -> ToolOutcome {
    let content_type = fetched.headers.get(CONTENT_TYPE).and_then(|c| c.to_str().ok());
    let content_type = content_type.map(str::to_owned);
    let kind = page::classify(content_type.as_deref(), &fetched.body);
    let final_url = chain.last().map(Url::to_string).unwrap_or_default();
    if let page::Kind::Binary(media) = &kind {
        return ToolOutcome::error(format!(
            "WebFetch fetched {final_url} (HTTP {}) but its content is {media}, which is not \
             text: WebFetch returns HTML (as Markdown), text, Markdown and JSON only.",
            fetched.status
        ));
    }
    let (text, charset_note) = page::decode(content_type.as_deref(), &fetched.body);
    let converted = match kind {
        page::Kind::Html => {
            // The parse and the walk are CPU work on up to MAX_BODY_BYTES: off the runtime.
            match tokio::task::spawn_blocking(move || page::html_to_markdown(&text)).await {
                Ok(converted) => converted,
                Err(e) => {
                    return ToolOutcome::error(format!(
                        "WebFetch fetched {final_url} but could not convert its HTML: {e}"
                    ))
                }
            }
        }
        _ => page::Converted { title: None, markdown: text, pruned: 0, cut_at: None },
    };
    let (markdown, md_cut) = page::bounded(converted.markdown, MAX_MARKDOWN_BYTES);
    let mut head = format!("URL: {final_url}\nStatus: {}\n", fetched.status);
    head.push_str(&format!("Content-Type: {}\n", content_type.as_deref().unwrap_or("(none)")));
    if chain.len() > 1 {
        let hops: Vec<String> = chain.iter().map(Url::to_string).collect();
        head.push_str(&format!("Redirects: {}\n", hops.join(" -> ")));
    }
    if let Some(title) = &converted.title {
        head.push_str(&format!("Title: {title}\n"));
    }
    if fetched.cut {
        head.push_str(&format!(
            "Note: the page was cut: only its first {MAX_BODY_BYTES} bytes were read (WebFetch's \
             body cap); what follows is its beginning.\n"
        ));
    }
    if md_cut {
        head.push_str(&format!(
            "Note: the page's text was cut at {MAX_MARKDOWN_BYTES} bytes (WebFetch's cap); what \
             follows is its beginning.\n"
        ));
    }
    if let Some(at) = converted.cut_at {
        head.push_str(&format!(
            "Note: the page nests deeper than {} elements at byte {at}; what follows is only \
             what comes before.\n",
            page::MAX_DEPTH
        ));
    }
    if converted.pruned > 0 {
        head.push_str(&format!(
            "Note: {} parts of the page were left out (nested deeper than {} levels, or past \
             {} children of one element).\n",
            converted.pruned,
            page::MAX_DEPTH,
            page::MAX_CHILDREN
        ));
    }
    if let Some(note) = charset_note {
        head.push_str(&format!("Note: {note}.\n"));
    }
    head.push_str(&format!("Answer from this page: {prompt}\n\n---\n\n{markdown}"));
    ToolOutcome { output: head, is_error: fetched.status.as_u16() >= 400, attachments: Vec::new() }
}

/// Records a refusal as the proxy does: a log row and, through the sink, a `network` event.
fn audit_refusal(egress: &Egress, hop: Hop<'_>, by: &RefusedBy) {
    egress.net.audit.record(AuditEntry {
        host: hop.host.to_owned(),
        port: hop.port,
        allowed: false,
        reason: Some(format!("WebFetch: {}: {}", by.policy, by.reason)),
        bytes_up: 0,
        bytes_down: 0,
        duration: hop.started.elapsed(),
        intercepted: false,
        at: hop.at,
        refused_by: Some(by.clone()),
    });
}

/// One hop, for its audit record.
struct Hop<'a> {
    host: &'a str,
    port: u16,
    started: Instant,
    /// When it started (RFC 3339).
    at: String,
}

impl<'a> Hop<'a> {
    fn start(host: &'a str, port: u16) -> Hop<'a> {
        Hop { host, port, started: Instant::now(), at: outboard_base::util::now_rfc3339() }
    }

    /// Records the hop: `allowed` when it was connected to, with how it ended and the bytes
    /// read; otherwise why it could not be (a refusal goes through [`audit_refusal`]).
    fn record(self, egress: &Egress, allowed: bool, reason: String, bytes_down: u64) {
        egress.net.audit.record(AuditEntry {
            host: self.host.to_owned(),
            port: self.port,
            allowed,
            reason: Some(reason),
            bytes_up: 0,
            bytes_down,
            duration: self.started.elapsed(),
            intercepted: false,
            at: self.at,
            refused_by: None,
        });
    }
}

#[cfg(test)]
mod tests;
