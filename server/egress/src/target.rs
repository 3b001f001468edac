//! What a proxy request asks for (a `CONNECT host:port` tunnel or an absolute-form plain HTTP
//! request), the header rewriting of forwarded requests and responses, and the text of the
//! answers the proxy gives itself (refusals, limits, upstream failures).

use hyper::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::{Method, StatusCode, Uri};

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// As the client named it, lower-cased, without IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// `Some(path and query)` for plain HTTP (origin form for the upstream); `None` for a tunnel.
    pub path: Option<String>,
}

/// Reads the target of a proxy request; the error is a sentence for the `400` answer.
pub(crate) fn parse_target(method: &Method, uri: &Uri) -> Result<Target, String> {
    let authority = uri.authority().ok_or_else(|| {
        if method == Method::CONNECT {
            "CONNECT needs host:port".to_string()
        } else {
            format!(
                "this is a forward proxy: the request line must name the whole URL \
                 (`{method} http://host/path HTTP/1.1`), not only the path {uri}"
            )
        }
    })?;
    let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    if host.is_empty() {
        return Err("the request names no host".into());
    }
    if method == Method::CONNECT {
        if uri.scheme().is_some() || uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err("CONNECT takes host:port only".into());
        }
        let port = port_of(authority)?.ok_or("CONNECT needs a port (host:port)")?;
        return Ok(Target { host, port, path: None });
    }
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err("https:// URLs go through CONNECT (set HTTPS_PROXY); plain requests \
                        must be http://"
                .into())
        }
        Some(other) => return Err(format!("the proxy speaks http only, not {other}://")),
        None => return Err(format!("no scheme in {uri}: send http://host/path")),
    }
    let port = port_of(authority)?.unwrap_or(80);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let path = if path.is_empty() { "/" } else { path };
    Ok(Target { host, port, path: Some(path.to_string()) })
}

/// The port an authority names, `None` when it names none. Only the canonical spelling is
/// taken: 1 to 5 digits, no sign, no leading zero, 1 to 65535. The `http` crate's own
/// `port_u16` reads `+443` and `0443` as 443 and silently drops an out-of-range `:111793` (so a
/// plain request went to port 80): a port the proxy would read otherwise than the client or
/// another parser might is refused (`400`), never guessed.
pub(crate) fn port_of(authority: &hyper::http::uri::Authority) -> Result<Option<u16>, String> {
    let text = authority.as_str();
    let after_host = match text.rfind(']') {
        Some(end) => &text[end + 1..],
        None => text.rsplit_once('@').map_or(text, |(_, rest)| rest),
    };
    let Some((_, digits)) = after_host.rsplit_once(':') else { return Ok(None) };
    let bad =
        || format!("{digits:?} is not a port: give a number from 1 to 65535 in its plain form");
    let canonical = !digits.is_empty()
        && digits.len() <= 5
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !digits.starts_with('0');
    if !canonical {
        return Err(bad());
    }
    digits.parse::<u16>().map(Some).map_err(|_| bad())
}

/// Headers that describe one hop and must not be passed on (RFC 9110 §7.6.1), plus every
/// `Proxy-*` header (they are for this proxy, never for the upstream). `Transfer-Encoding` goes
/// too: hyper frames the body again for the next hop.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut drop: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    drop.extend(headers.keys().filter(|k| k.as_str().starts_with("proxy-")).cloned());
    for name in ["connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"] {
        drop.push(HeaderName::from_static(name));
    }
    for name in drop {
        headers.remove(name);
    }
}

/// Who refused, why, and what would change it: the three parts of every refusal body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub policy: String,
    pub reason: String,
    pub hint: String,
}

/// The body the sandbox's client gets: names the host, the policy and the admin command.
pub(crate) fn refusal_body(host: &str, port: u16, r: &Refusal) -> String {
    let shown =
        if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    format!(
        "Outboard's network proxy refused {shown}.\n\
         policy: {}\n\
         reason: {}\n\
         to allow it: {}\n",
        r.policy, r.reason, r.hint
    )
}

/// The headers of every answer the proxy makes itself: plain text, and the connection closes.
pub(crate) fn own_answer_headers(headers: &mut HeaderMap) {
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    headers.insert(HeaderName::from_static("proxy-connection"), HeaderValue::from_static("close"));
}
