//! What a session hands its proxy, and what the sandbox is told: the policy ([`Decide`]) and the
//! audit sink ([`Audit`]) as traits the org's code implements, the credentials to inject, the
//! limits, and where the proxy is reached from inside the sandbox ([`PROXY_PORT`],
//! [`SANDBOX_SOCKET`], [`proxy_env`]).

use std::sync::Arc;
use std::time::Duration;

use outboard_shared::{OrgId, SessionId};

use crate::ca::OrgCa;

/// The port the agent listens on inside the sandbox (the sandbox's own loopback).
pub const PROXY_PORT: u16 = 3128;

/// Where the server's socket appears inside the sandbox.
pub const SANDBOX_SOCKET: &str = "/run/outboard/proxy.sock";

/// The proxy URL commands are given.
pub const PROXY_URL: &str = "http://127.0.0.1:3128";

/// What commands may reach without the proxy: only the sandbox's own loopback.
pub const NO_PROXY: &str = "localhost,127.0.0.1";

/// The largest request head (request line and headers) the proxy reads: real requests are a
/// few hundred bytes, package managers' a few KiB; 16 KiB leaves room for long URLs and
/// cookies while a client cannot make the proxy buffer more. Beyond it: `431`. (hyper's read
/// buffer limit, which is what bounds the head; it cannot go below 8 KiB.)
pub const MAX_HEAD: usize = 16 * 1024;

/// What the proxy asks the session's network policy.
pub trait Decide: Send + Sync {
    /// Whether `host:port` may be reached (`host` as the client named it: a name or an IP literal),
    /// before resolution. The proxy still applies the forbidden ranges after resolving.
    fn decide(&self, host: &str, port: u16) -> Verdict;
    /// Whether an admin named exactly this IP literal and port (lifts the forbidden ranges for it).
    fn allows_literal(&self, ip: std::net::IpAddr, port: u16) -> bool;
    /// The org secrets bound to outbound HTTP for `host:port` (`admin secret set
    /// --inject-header`); empty for every other host, whose connections are tunnelled untouched.
    fn injections(&self, host: &str, port: u16) -> Vec<Arc<Injection>>;
}

/// One org secret bound to a host's outbound HTTP: the proxy terminates the sandbox's TLS to
/// that host (with a certificate of the org's [`ca::OrgCa`]), sets the header, replaces the
/// placeholders, re-originates TLS to the real host, and scrubs the value from the responses.
#[derive(Clone, PartialEq, Eq)]
pub struct Injection {
    /// The secret's name: responses carry `[secret NAME]` where the value was.
    pub name: String,
    /// The header to add or replace (e.g. `authorization`).
    pub header: String,
    /// Its whole value, the secret in place of the template's `{}`.
    pub header_value: String,
    /// The secret's value itself, scrubbed from responses and put in place of placeholders.
    pub value: String,
    /// Strings the sandbox holds instead of the value (its `--placeholder` variables' values):
    /// wherever one appears in a request header to this host, the value replaces it.
    pub placeholders: Vec<String>,
    /// Further roots (PEM) to verify this host's certificate with, besides the system's
    /// (`--upstream-ca`: tests and private mirrors).
    pub upstream_ca: Option<String>,
}

impl std::fmt::Debug for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injection")
            .field("name", &self.name)
            .field("header", &self.header)
            .field("placeholders", &self.placeholders.len())
            .field("upstream_ca", &self.upstream_ca.is_some())
            .finish_non_exhaustive()
    }
}

/// A policy's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Go ahead (the forbidden ranges still apply).
    Allow,
    /// No: `policy` names what refused (e.g. `org acme: registries`), `reason` says why, and
    /// `hint` is the admin command that would allow it. All three reach the sandbox's client.
    Refuse { policy: String, reason: String, hint: String },
}

/// Where connection records go; must not block (the integrator's impl uses a bounded channel).
pub trait Audit: Send + Sync {
    fn record(&self, entry: AuditEntry);
    /// Resolves once the records made so far have gone where they go (their log rows written,
    /// their events sent): a command's refusals then reach the session before its result does.
    fn flush(&self) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// One connection (or refusal), recorded when it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// As the client named it (empty when the request could not be read).
    pub host: String,
    pub port: u16,
    /// Whether the proxy connected upstream.
    pub allowed: bool,
    /// Why it was refused, or why an allowed connection was cut (idle, byte budget).
    pub reason: Option<String>,
    /// Sandbox → upstream.
    pub bytes_up: u64,
    /// Upstream → sandbox.
    pub bytes_down: u64,
    pub duration: std::time::Duration,
    /// Whether the proxy terminated the sandbox's TLS to inject an org secret (an allowed
    /// connection to a host with `--inject-header` secrets); `false` for tunnels and refusals.
    pub intercepted: bool,
    /// When it started (RFC 3339).
    pub at: String, /* RFC 3339 */
    /// For a refusal the proxy explained to the client (`403`, `503`): what refused it, why,
    /// and what would allow it, as the client was told.
    pub refused_by: Option<RefusedBy>,
}

/// What the client of a refused connection was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedBy {
    /// The policy (`org acme: registries`, `limits`, `no way back in …`).
    pub policy: String,
    /// Why.
    pub reason: String,
    /// The command or step that would allow it.
    pub hint: String,
}

/// The proxy's limits for one session's sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetLimits {
    /// Open connections at once; beyond, `503`.
    pub max_connections: usize,
    /// A connection that moves no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// Bytes both ways of all the session's connections together; at the budget the open
    /// connections are cut and new ones refused.
    pub session_bytes: u64,
}

impl NetLimits {
    /// 64 connections (a parallel `cargo fetch` or `npm install` opens a few dozen), 300 s idle
    /// (the server's own WebSocket idle timeout), 10 GiB per session (a few large toolchains and
    /// dependency trees; a session moving more is more likely exfiltrating than building).
    pub const DEFAULT: NetLimits = NetLimits {
        max_connections: 64,
        idle_timeout: Duration::from_secs(300),
        session_bytes: 10 << 30,
    };
}

impl Default for NetLimits {
    fn default() -> Self {
        NetLimits::DEFAULT
    }
}

/// Per-session context: who, and the policy and audit sink.
#[derive(Clone)]
pub struct SessionNet {
    pub org: OrgId,
    /// The org's name, as the admin commands in refusals' hints take it.
    pub org_name: String,
    pub session: SessionId,
    pub user: String,
    pub decide: Arc<dyn Decide>,
    pub audit: Arc<dyn Audit>,
    pub limits: NetLimits,
    /// The org's CA, which signs the certificates the proxy presents for injected hosts; its
    /// certificate (never its key) is what the sandbox's CA bundle adds. `None`: no host is
    /// intercepted (injections are then refused rather than sent without TLS checks).
    pub ca: Option<Arc<OrgCa>>,
    /// Variables commands get with the network: the placeholders of the org's injected
    /// secrets (`GH_TOKEN=outboard-placeholder-GH_TOKEN`), never a value.
    pub env: Vec<(String, String)>,
}

impl std::fmt::Debug for SessionNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionNet")
            .field("org", &self.org)
            .field("session", &self.session)
            .field("user", &self.user)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Same session, same limits, and the very same policy and audit sink.
impl PartialEq for SessionNet {
    fn eq(&self, other: &Self) -> bool {
        self.org == other.org
            && self.org_name == other.org_name
            && self.session == other.session
            && self.user == other.user
            && self.limits == other.limits
            && self.env == other.env
            && Arc::ptr_eq(&self.decide, &other.decide)
            && Arc::ptr_eq(&self.audit, &other.audit)
            && match (&self.ca, &other.ca) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl Eq for SessionNet {}

/// A session's network for requests the server makes itself on the model's behalf
/// (`WebFetch`): the session's [`SessionNet`] (its policy and audit sink; never its injections,
/// which are for the sandbox's own clients) and the server's ports, which
/// [`admit_destination`] refuses on local addresses.
#[derive(Debug, Clone)]
pub struct Egress {
    pub net: SessionNet,
    pub server_ports: Vec<u16>,
}

/// The environment that points a command's tools at the proxy.
pub fn proxy_env() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"]
            .iter()
            .map(|k| ((*k).to_string(), PROXY_URL.to_string()))
            .collect();
    env.push(("NO_PROXY".into(), NO_PROXY.into()));
    env.push(("no_proxy".into(), NO_PROXY.into()));
    env
}
