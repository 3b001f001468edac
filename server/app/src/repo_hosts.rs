//! Where the server's own git may go: the destination rules of the sandbox's proxy applied to
//! repository URLs (`session/create` with a `repo` source, `session/push`), and when a stored
//! credential may travel over plain `http://`.
//!
//! Without them, any org member could make the server's git request the server's own port, its
//! metrics port or any listener on its host or private networks, and tell open ports from closed
//! ones by git's distinct errors: a blind port scan. So, before git runs:
//! - the URL's host is resolved here, and every address is vetted as the proxy vets a sandbox's
//!   ([`outboard_egress::forbidden_range`]: loopback, private, link-local, CGNAT, metadata…, and
//!   this server's own ports on its local addresses); one refusal, [`GitError::InternalHost`],
//!   whose text depends on the URL only, never on what listens there;
//! - git is pinned to the vetted addresses (`http.curloptResolve`), so a name that answers
//!   differently the second time (DNS rebinding) gains nothing; redirects are never followed
//!   ([`crate::git`]);
//! - an admin names each internal git host explicitly, as `HOST:PORT`
//!   (`serve --git-allow-host`): the URL's host as written, or one of the addresses it resolves
//!   to;
//! - the org's stored credential for a host goes over plain `http://` only to a host an admin
//!   marked (`serve --git-allow-http HOST:PORT`); otherwise the request is refused before git
//!   runs ([`GitError::CleartextCredential`]).
//!
//! The embedded server (the CLI's own, whose one user owns the machine and may clone a local
//! path anyway) skips the destination rules; the credential rule holds everywhere.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::git::{GitError, RepoUrl};

/// How long resolving a repository's host may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The git hosts an admin allowed beyond the rules (`serve --git-allow-host`,
/// `--git-allow-http`), each `host:port` as [`parse_host_port`] spells it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitHosts {
    /// Hosts that may be on a loopback, private or otherwise internal address.
    pub internal: Vec<String>,
    /// Hosts the org's stored credential may reach over plain `http://`.
    pub cleartext: Vec<String>,
}

/// `HOST:PORT` (`[v6]:PORT` for IPv6) as the allow-lists hold it: lowercase, the port in its
/// plain form. The error is a sentence for the flag's user.
pub fn parse_host_port(text: &str) -> Result<String, String> {
    let text = text.trim().to_ascii_lowercase();
    let bad = || {
        format!(
            "{text:?} is not HOST:PORT (e.g. git.internal:443, 10.0.0.5:80 or [fd00::5]:443): \
             name the git host and its port exactly"
        )
    };
    let (host, port) = split_host_port(&text).ok_or_else(bad)?;
    let port = port.ok_or_else(bad)?;
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/') {
        return Err(bad());
    }
    Ok(show(&host, port))
}

/// `(host without brackets, port)` of `host[:port]`; `None` when the port is malformed.
fn split_host_port(text: &str) -> Option<(String, Option<u16>)> {
    let (host, rest) = match text.strip_prefix('[') {
        Some(inner) => {
            let (host, rest) = inner.split_once(']')?;
            (host, rest)
        }
        None => match text.rsplit_once(':') {
            Some((host, _)) => (host, &text[host.len()..]),
            None => (text, ""),
        },
    };
    let port = match rest.strip_prefix(':') {
        None if rest.is_empty() => None,
        None => return None,
        Some(digits) => {
            let plain = !digits.is_empty()
                && digits.len() <= 5
                && digits.bytes().all(|b| b.is_ascii_digit())
                && !digits.starts_with('0');
            Some(digits.parse::<u16>().ok().filter(|_| plain)?)
        }
    };
    Some((host.to_owned(), port))
}

/// `host:port`, brackets around an IPv6 address.
fn show(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The URL's host (no brackets) and port (the scheme's default when it names none).
fn target(url: &RepoUrl) -> Result<(String, u16), GitError> {
    let default = if url.scheme == "https" { 443 } else { 80 };
    match split_host_port(&url.host) {
        Some((host, port)) if !host.is_empty() => Ok((host, port.unwrap_or(default))),
        _ => Err(GitError::BadUrl(format!(
            "{}: the port must be a number from 1 to 65535 in its plain form",
            url.url
        ))),
    }
}

impl GitHosts {
    /// Where git may connect for `url`: `Ok(None)` for a URL git may use as it is (an IP
    /// literal, or no network: a local path), `Ok(Some(pin))` with the `http.curloptResolve`
    /// entry that pins git to the vetted addresses, or the refusal. `any_address`: the embedded
    /// server, which skips the ranges (its user owns the machine).
    pub async fn admit(
        &self,
        url: &RepoUrl,
        server_ports: &[u16],
        any_address: bool,
    ) -> Result<Option<String>, GitError> {
        if url.scheme == "file" {
            return Ok(None);
        }
        let (host, port) = target(url)?;
        let named = self.internal.contains(&show(&host, port));
        let addrs = resolve(&host, port).await?;
        for addr in &addrs {
            let allowed = named
                || any_address
                || self.internal.contains(&show(&addr.ip().to_string(), port))
                || !leads_back_in(*addr, server_ports);
            if !allowed {
                tracing::info!(host = %show(&host, port), "refused a repository URL on an internal address");
                return Err(GitError::InternalHost { host: url.host.clone() });
            }
        }
        if host.parse::<IpAddr>().is_ok() {
            return Ok(None);
        }
        let list: Vec<String> = addrs
            .iter()
            .map(|a| match a.ip() {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            })
            .collect();
        Ok(Some(format!("{host}:{port}:{}", list.join(","))))
    }

    /// Refuses to send the org's credential for `url` over plain `http://` unless an admin
    /// marked the host (`--git-allow-http`).
    pub fn check_credential(&self, url: &RepoUrl, has_credential: bool) -> Result<(), GitError> {
        if url.scheme != "http" || !has_credential {
            return Ok(());
        }
        let (host, port) = target(url)?;
        if self.cleartext.contains(&show(&host, port)) {
            return Ok(());
        }
        Err(GitError::CleartextCredential { host: url.host.clone() })
    }
}

/// Whether `addr` leads back into the server's host or its networks: a forbidden range, or
/// one of the server's own ports on a local address.
fn leads_back_in(addr: SocketAddr, server_ports: &[u16]) -> bool {
    outboard_egress::forbidden_range(addr.ip()).is_some()
        || (server_ports.contains(&addr.port())
            && std::net::UdpSocket::bind(SocketAddr::new(addr.ip(), 0)).is_ok())
}

async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, GitError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let unreachable = |detail: String| GitError::Unreachable { host: show(host, port), detail };
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(addrs)) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                return Err(unreachable(format!("{host} has no address")));
            }
            Ok(addrs)
        }
        Ok(Err(e)) => Err(unreachable(format!("could not resolve {host}: {e}"))),
        Err(_) => Err(unreachable(format!(
            "resolving {host} took more than {} s",
            RESOLVE_TIMEOUT.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use pretty_assertions::assert_eq;

    fn url(text: &str) -> RepoUrl {
        RepoUrl::parse(text, false).unwrap()
    }

    #[test]
    fn allowed_hosts_are_host_and_port_exactly() {
        assert_eq!(parse_host_port("Git.Internal:443").unwrap(), "git.internal:443");
        assert_eq!(parse_host_port("[FD00::5]:80").unwrap(), "[fd00::5]:80");
        for bad in ["git.internal", "git.internal:", "h:0443", "h:+80", "h:65536", ":80", "[::1]"] {
            assert!(parse_host_port(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn internal_addresses_are_refused_alike_unless_an_admin_named_them() {
        let strict = GitHosts::default();
        let refused = [
            "http://127.0.0.1:9/x.git",
            "http://localhost:9/x.git",
            "https://10.1.2.3/x.git",
            "http://[::1]:8080/x.git",
            "http://169.254.169.254/latest",
            "http://[::ffff:127.0.0.1]:80/x",
            "http://0.0.0.0:80/x",
        ];
        for text in refused {
            let err = strict.admit(&url(text), &[], false).await.unwrap_err();
            assert!(matches!(err, GitError::InternalHost { .. }), "{text}: {err}");
            assert!(err.to_string().contains("--git-allow-host"), "{err}");
        }
        let named = GitHosts { internal: vec!["127.0.0.1:9".into()], ..GitHosts::default() };
        assert_eq!(named.admit(&url("http://127.0.0.1:9/x.git"), &[], false).await.unwrap(), None);
        // By name: resolved, each address named, and git pinned to what was vetted.
        let by_ip = GitHosts {
            internal: vec!["127.0.0.1:9".into(), "[::1]:9".into()],
            ..GitHosts::default()
        };
        let pin = by_ip.admit(&url("http://localhost:9/x.git"), &[], false).await.unwrap();
        let pin = pin.unwrap();
        assert!(pin.starts_with("localhost:9:") && pin.contains("127.0.0.1"), "{pin}");
        // Another port of a named host is not named.
        assert!(named.admit(&url("http://127.0.0.1:10/x.git"), &[], false).await.is_err());
        // The embedded server reaches any address.
        assert_eq!(strict.admit(&url("http://127.0.0.1:9/x"), &[], true).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_public_address_passes() {
        let strict = GitHosts::default();
        let public = url("https://192.0.43.8/x.git");
        assert_eq!(strict.admit(&public, &[], false).await.unwrap(), None);
    }

    #[test]
    fn a_credential_goes_over_plain_http_only_to_a_marked_host() {
        let strict = GitHosts::default();
        let http = url("http://git.example:8080/x.git");
        assert!(matches!(
            strict.check_credential(&http, true),
            Err(GitError::CleartextCredential { .. })
        ));
        assert!(strict.check_credential(&http, false).is_ok());
        assert!(strict.check_credential(&url("https://git.example/x.git"), true).is_ok());
        let marked = GitHosts { cleartext: vec!["git.example:8080".into()], ..GitHosts::default() };
        assert!(marked.check_credential(&http, true).is_ok());
        let default_port = url("http://git.example/x.git");
        let marked80 = GitHosts { cleartext: vec!["git.example:80".into()], ..GitHosts::default() };
        assert!(marked80.check_credential(&default_port, true).is_ok());
    }
}
