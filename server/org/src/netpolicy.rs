//! Where an org's sandboxes may connect: the per-org network policy, a session's narrowing of
//! it, and the log of every connection the proxy made or refused.
//!
//! An admin sets the policy (`outboard-server admin network set --org ORG MODE [HOST…]`):
//!
//! | mode | reaches |
//! |---|---|
//! | `none` | nothing |
//! | `registries` (the default) | the package registries of [`REGISTRIES`] |
//! | `allow HOST…` | the hosts named, and nothing else |
//! | `registries+ HOST…` | the registries and the hosts named |
//! | `full` | any public address |
//!
//! A HOST is a name (`git.example.com`), a `*.suffix` pattern (any name ending in `.suffix`, not
//! `suffix` itself), or either with `:PORT`; without a port a name matches ports 80 and 443 only.
//! An IP literal with its port (`127.0.0.1:8443`, `[fd00::1]:443`) is the one way to reach an
//! address in a forbidden range (loopback, private, link-local, metadata…): the proxy refuses
//! those after resolution whatever the mode, unless an entry names that exact address and port.
//! A session may narrow the policy (`outboard run --network none`), never widen it.
//!
//! The policy is read from the store when a session's sandbox starts and again every
//! [`REFRESH`] while it runs, so an admin's change reaches running sessions within that time.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use outboard_shared::OrgId;
use outboard_store::db::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use outboard_base::util::now_rfc3339;
use outboard_store::{org_id_by_name, Store, StoreError};

/// How often a running session re-reads its org's policy.
pub const REFRESH: Duration = Duration::from_secs(5);

/// The hosts of the `registries` preset: what `cargo`, `pip`, `npm`, `apt` (Debian, Ubuntu),
/// `go` and `git` (GitHub) fetch from.
pub const REGISTRIES: &[&str] = &[
    "crates.io",
    "index.crates.io",
    "static.crates.io",
    "static.rust-lang.org",
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "deb.debian.org",
    "security.debian.org",
    "archive.ubuntu.com",
    "security.ubuntu.com",
    "proxy.golang.org",
    "sum.golang.org",
    "storage.googleapis.com",
    "github.com",
    "api.github.com",
    "codeload.github.com",
    "objects.githubusercontent.com",
    "raw.githubusercontent.com",
    "release-assets.githubusercontent.com",
];

/// The most HOST entries one org's policy holds.
pub const MAX_HOSTS: usize = 512;

/// A policy problem, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The org does not exist.
    #[error("no org named {0:?}: create it with `outboard-server admin user add NAME --org ORG`")]
    NoOrg(String),
    /// The mode or a host entry is not understood.
    #[error("{0}")]
    Invalid(String),
    /// The store said no.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The mode of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// No network.
    None,
    /// The registries preset (and `hosts`, when `+`).
    Registries,
    /// Only `hosts`.
    Allow,
    /// Any public address.
    Full,
}

/// A HOST entry of a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEntry {
    /// The name (lowercase), `*.suffix`, or an IP literal.
    pub host: String,
    /// The port, when named.
    pub port: Option<u16>,
}

impl HostEntry {
    /// Parses `name`, `*.suffix`, `name:port`, `1.2.3.4:port`, `[v6]:port`.
    pub fn parse(text: &str) -> Result<HostEntry, PolicyError> {
        let bad = |why: &str| PolicyError::Invalid(format!("host entry {text:?}: {why}"));
        let text = text.trim();
        if text.contains("://") || text.contains('/') {
            return Err(bad("give a host, not a URL (e.g. git.example.com or 10.0.0.5:8443)"));
        }
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(HostEntry { host: addr.ip().to_string(), port: Some(addr.port()) });
        }
        if let Ok(ip) = text.trim_matches(['[', ']']).parse::<IpAddr>() {
            return Ok(HostEntry { host: ip.to_string(), port: None });
        }
        let (host, port) = match text.rsplit_once(':') {
            Some((h, p)) => {
                (h, Some(p.parse::<u16>().map_err(|_| bad("the port is not a number"))?))
            }
            None => (text, None),
        };
        let host = host.to_ascii_lowercase();
        let name = host.strip_prefix("*.").unwrap_or(&host);
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
        };
        if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(bad("not a host name (letters, digits, '-' and '.'; `*.` only in front)"));
        }
        if port == Some(0) {
            return Err(bad("port 0"));
        }
        Ok(HostEntry { host, port })
    }

    /// Whether this entry lets `host:port` through (`host` lowercase, as the client named it).
    fn matches(&self, host: &str, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => port == 80 || port == 443,
        };
        let host_ok = match self.host.strip_prefix("*.") {
            Some(suffix) => {
                host.len() > suffix.len() + 1
                    && host.ends_with(suffix)
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
            None => self.host == host,
        };
        port_ok && host_ok
    }

    /// Whether it names exactly this address and port (what lifts the forbidden ranges).
    fn is_literal(&self, ip: IpAddr, port: u16) -> bool {
        self.port == Some(port) && self.host.parse::<IpAddr>().is_ok_and(|h| h == ip)
    }
}

impl std::fmt::Display for HostEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v6 = self.host.contains(':');
        match (self.port, v6) {
            (Some(p), true) => write!(f, "[{}]:{p}", self.host),
            (Some(p), false) => write!(f, "{}:{p}", self.host),
            (None, _) => f.write_str(&self.host),
        }
    }
}

/// An org's policy, or a session's narrowing of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// The mode.
    pub mode: Mode,
    /// The hosts named (with `registries`: added to the preset).
    pub hosts: Vec<HostEntry>,
}

impl Default for Policy {
    /// A new org's policy: the registries.
    fn default() -> Policy {
        Policy { mode: Mode::Registries, hosts: Vec::new() }
    }
}

/// What the policy says of one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead.
    Allow,
    /// Refused: by which policy, why, and the admin command that would allow it.
    Refuse {
        /// `none`, `registries`, `allow`, `session none`, …
        policy: String,
        /// Why, for the 403's body and the audit log.
        reason: String,
        /// What an admin runs to allow it.
        hint: String,
    },
}

impl Policy {
    /// Parses `admin network set`'s `MODE [HOST…]`.
    pub fn parse(mode: &str, hosts: &[String]) -> Result<Policy, PolicyError> {
        let entries = hosts.iter().map(|h| HostEntry::parse(h)).collect::<Result<Vec<_>, _>>()?;
        if entries.len() > MAX_HOSTS {
            return Err(PolicyError::Invalid(format!(
                "{} host entries; a policy holds at most {MAX_HOSTS}",
                entries.len()
            )));
        }
        let needs_none = |m: Mode| {
            if entries.is_empty() {
                Ok(Policy { mode: m, hosts: Vec::new() })
            } else {
                Err(PolicyError::Invalid(format!(
                    "mode {mode} takes no hosts; use `allow HOST…` or `registries+ HOST…`"
                )))
            }
        };
        match mode {
            "none" => needs_none(Mode::None),
            "full" => needs_none(Mode::Full),
            "registries" => needs_none(Mode::Registries),
            "registries+" => Ok(Policy { mode: Mode::Registries, hosts: entries }),
            "allow" if entries.is_empty() => {
                Err(PolicyError::Invalid("`allow` needs at least one HOST (or use `none`)".into()))
            }
            "allow" => Ok(Policy { mode: Mode::Allow, hosts: entries }),
            other => Err(PolicyError::Invalid(format!(
                "no network mode {other:?}: use none, registries, registries+ HOST…, allow HOST… \
                 or full"
            ))),
        }
    }

    /// `admin network set`'s words for this policy (`registries+ a b`).
    pub fn words(&self) -> String {
        let hosts: Vec<String> = self.hosts.iter().map(ToString::to_string).collect();
        match (self.mode, hosts.is_empty()) {
            (Mode::None, _) => "none".into(),
            (Mode::Full, _) => "full".into(),
            (Mode::Registries, true) => "registries".into(),
            (Mode::Registries, false) => format!("registries+ {}", hosts.join(" ")),
            (Mode::Allow, _) => format!("allow {}", hosts.join(" ")),
        }
    }

    fn allows_by_name(&self, host: &str, port: u16) -> bool {
        let preset = self.mode == Mode::Registries
            && (port == 443 || port == 80)
            && REGISTRIES.contains(&host);
        match self.mode {
            Mode::None => false,
            Mode::Full => true,
            Mode::Registries | Mode::Allow => {
                preset || self.hosts.iter().any(|e| e.matches(host, port))
            }
        }
    }

    /// Whether `host:port` may be reached, `org` naming the org in the hint.
    pub fn decide(&self, org: &str, host: &str, port: u16) -> Decision {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        if self.allows_by_name(&host, port) {
            return Decision::Allow;
        }
        let entry = if port == 80 || port == 443 { host.clone() } else { format!("{host}:{port}") };
        let hint = match self.mode {
            Mode::None => format!("outboard-server admin network set --org {org} allow {entry}"),
            Mode::Registries => {
                let mut words = self.words();
                if words == "registries" {
                    words.push('+');
                }
                format!("outboard-server admin network set --org {org} {words} {entry}")
            }
            Mode::Allow | Mode::Full => {
                format!("outboard-server admin network set --org {org} {} {entry}", self.words())
            }
        };
        Decision::Refuse {
            policy: format!("org {org}: {}", self.mode_name()),
            reason: format!(
                "{host}:{port} is not allowed by the org's network policy ({})",
                self.words()
            ),
            hint,
        }
    }

    /// Whether an entry names exactly `ip` and `port`.
    pub fn allows_literal(&self, ip: IpAddr, port: u16) -> bool {
        self.mode != Mode::None && self.hosts.iter().any(|e| e.is_literal(ip, port))
    }

    fn mode_name(&self) -> String {
        match self.mode {
            Mode::None => "none".into(),
            Mode::Registries if self.hosts.is_empty() => "registries".into(),
            Mode::Registries => "registries+".into(),
            Mode::Allow => "allow".into(),
            Mode::Full => "full".into(),
        }
    }
}

/// What a session asks of the network (`session/create {network}`): the org's policy as is, or
/// none at all. A session can only narrow.
pub type Narrowing = outboard_shared::SessionNetwork;

/// The policy one session's sandbox runs under: its org's, re-read every [`REFRESH`], narrowed.
#[derive(Debug)]
pub struct SessionPolicy {
    org_name: String,
    narrowing: Narrowing,
    current: RwLock<Policy>,
}

impl SessionPolicy {
    /// `org`'s policy now, narrowed by `narrowing`, refreshed by a task until the returned
    /// value is dropped by everyone.
    pub async fn load(
        store: &Store,
        org: &OrgId,
        narrowing: Narrowing,
    ) -> Result<Arc<SessionPolicy>, PolicyError> {
        let (policy, org_name) = read(store, org).await?;
        let this = Arc::new(SessionPolicy { org_name, narrowing, current: RwLock::new(policy) });
        let weak = Arc::downgrade(&this);
        let (store, org) = (store.clone(), org.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(REFRESH).await;
                let Some(this) = weak.upgrade() else { return };
                match read(&store, &org).await {
                    Ok((policy, _)) => match this.current.write() {
                        Ok(mut current) => *current = policy,
                        Err(poisoned) => *poisoned.into_inner() = policy,
                    },
                    Err(e) => tracing::warn!(%org, "cannot re-read the network policy: {e}"),
                }
            }
        });
        Ok(this)
    }

    fn policy(&self) -> Policy {
        match self.current.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The decision for `host:port`.
    pub fn decide(&self, host: &str, port: u16) -> Decision {
        if self.narrowing == Narrowing::None {
            return Decision::Refuse {
                policy: "session none".into(),
                reason: "this session was started without network (--network none)".into(),
                hint: "start a session without --network none".into(),
            };
        }
        self.policy().decide(&self.org_name, host, port)
    }

    /// Whether an admin named `ip:port` exactly.
    pub fn allows_literal(&self, ip: IpAddr, port: u16) -> bool {
        self.narrowing != Narrowing::None && self.policy().allows_literal(ip, port)
    }
}

/// The org's stored policy (the default when none is stored) and its name.
pub(crate) async fn read(store: &Store, org: &OrgId) -> Result<(Policy, String), PolicyError> {
    let org = org.clone();
    let (json, name) = store
        .call(move |c| {
            let json: Option<String> = c
                .query_row("SELECT policy FROM org_network WHERE org_id = ?1", [&org.0], |r| {
                    r.get(0)
                })
                .optional()?;
            Ok((json, outboard_store::org_name(c, &org)))
        })
        .await?;
    let policy = match json {
        Some(j) => serde_json::from_str(&j)
            .map_err(|e| PolicyError::Invalid(format!("the stored network policy: {e}")))?,
        None => Policy::default(),
    };
    Ok((policy, name))
}

/// `admin network set --org ORG MODE [HOST…]`: stores the policy; returns `show`'s text.
pub async fn set(store: &Store, org: &str, policy: Policy) -> Result<String, PolicyError> {
    let json = serde_json::to_string(&policy)
        .map_err(|e| PolicyError::Invalid(format!("the network policy: {e}")))?;
    let name = org.to_owned();
    let id = store
        .call(move |c| {
            let Some(id) = org_id_by_name(c, &name)? else { return Ok(None) };
            c.execute(
                "INSERT INTO org_network (org_id, policy, set_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (org_id) DO UPDATE SET policy = ?2, set_at = ?3",
                params![id.0, json, now_rfc3339()],
            )?;
            Ok(Some(id))
        })
        .await?
        .ok_or_else(|| PolicyError::NoOrg(org.to_owned()))?;
    show_id(store, org, &id).await
}

/// `admin network show --org ORG`.
pub async fn show(store: &Store, org: &str) -> Result<String, PolicyError> {
    let name = org.to_owned();
    let id = store
        .call(move |c| org_id_by_name(c, &name))
        .await?
        .ok_or_else(|| PolicyError::NoOrg(org.to_owned()))?;
    show_id(store, org, &id).await
}

async fn show_id(store: &Store, org: &str, id: &OrgId) -> Result<String, PolicyError> {
    let (policy, _) = read(store, id).await?;
    let mut text = format!("org {org}: network {}\n", policy.words());
    match policy.mode {
        Mode::None => text.push_str("  sandboxes reach nothing\n"),
        Mode::Full => text.push_str("  sandboxes reach any public address\n"),
        Mode::Registries => {
            text.push_str(&format!("  the registries preset: {}\n", REGISTRIES.join(", ")));
        }
        Mode::Allow => {}
    }
    for entry in &policy.hosts {
        text.push_str(&format!("  allowed: {entry}\n"));
    }
    text.push_str(
        "  never, whatever the mode: loopback, private, link-local, CGNAT, multicast and metadata \
         addresses, and this server's ports, unless an entry names the IP literal and port\n",
    );
    Ok(text)
}

/// One row of the network log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRow {
    /// When the connection ended, RFC 3339.
    pub at: String,
    /// The session whose sandbox made it.
    pub session_id: String,
    /// The session's user.
    pub user: String,
    /// The destination as the client named it.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Whether it was let through.
    pub allowed: bool,
    /// Why it was refused, or how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Bytes from the sandbox.
    pub bytes_up: u64,
    /// Bytes to the sandbox.
    pub bytes_down: u64,
    /// How long it lasted, ms.
    pub duration_ms: u64,
    /// Whether the proxy terminated its TLS to inject an org secret (`admin secret set
    /// --inject-header`); tunnels and refusals: `false`.
    #[serde(default)]
    pub intercepted: bool,
}

/// Rows of the network log an org keeps; older ones are dropped as new ones come.
pub const LOG_ROWS_PER_ORG: i64 = 100_000;

/// Appends rows to `org`'s network log (one transaction), trimming it to [`LOG_ROWS_PER_ORG`].
pub async fn append(store: &Store, org: &OrgId, rows: Vec<LogRow>) -> Result<(), StoreError> {
    let org = org.clone();
    store
        .call(move |c| {
            let tx = c.transaction()?;
            for r in &rows {
                tx.execute(
                    "INSERT INTO network_log (org_id, session_id, \"user\", host, port, allowed,
                         reason, bytes_up, bytes_down, duration_ms, at, intercepted)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                    params![
                        org.0,
                        r.session_id,
                        r.user,
                        r.host,
                        r.port,
                        r.allowed,
                        r.reason,
                        r.bytes_up as i64,
                        r.bytes_down as i64,
                        r.duration_ms as i64,
                        r.at,
                        r.intercepted
                    ],
                )?;
            }
            tx.execute(
                "DELETE FROM network_log WHERE org_id = ?1 AND id <= (
                     SELECT id FROM network_log WHERE org_id = ?1
                     ORDER BY id DESC LIMIT 1 OFFSET ?2)",
                params![org.0, LOG_ROWS_PER_ORG],
            )?;
            tx.commit()?;
            Ok(())
        })
        .await
}

/// `admin network log --org ORG`: the last `limit` rows, oldest first.
pub async fn log(store: &Store, org: &str, limit: u32) -> Result<Vec<LogRow>, PolicyError> {
    let name = org.to_owned();
    let rows = store
        .call(move |c| {
            let Some(id) = org_id_by_name(c, &name)? else { return Ok(None) };
            let mut stmt = c.prepare(
                "SELECT at, session_id, \"user\", host, port, allowed, reason, bytes_up, bytes_down,
                        duration_ms, intercepted
                 FROM network_log WHERE org_id = ?1 ORDER BY id DESC LIMIT ?2",
            )?;
            let mut rows = stmt
                .query_map(params![id.0, limit], |r| {
                    Ok(LogRow {
                        at: r.get(0)?,
                        session_id: r.get(1)?,
                        user: r.get(2)?,
                        host: r.get(3)?,
                        port: r.get(4)?,
                        allowed: r.get(5)?,
                        reason: r.get(6)?,
                        bytes_up: r.get::<_, i64>(7)? as u64,
                        bytes_down: r.get::<_, i64>(8)? as u64,
                        duration_ms: r.get::<_, i64>(9)? as u64,
                        intercepted: r.get(10)?,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            rows.reverse();
            Ok(Some(rows))
        })
        .await?;
    rows.ok_or_else(|| PolicyError::NoOrg(org.to_owned()))
}

/// The log as a table.
pub fn log_table(rows: &[LogRow]) -> String {
    if rows.is_empty() {
        return "no connections yet\n".to_owned();
    }
    let mut text = String::from(
        "AT                        SESSION  USER  DESTINATION  VERDICT  UP  DOWN  MS\n",
    );
    for r in rows {
        let verdict = if r.allowed && r.intercepted {
            "allowed, credential injected".to_owned()
        } else if r.allowed {
            "allowed".to_owned()
        } else {
            format!("refused ({})", r.reason.as_deref().unwrap_or("?"))
        };
        text.push_str(&format!(
            "{}  {}  {}  {}:{}  {verdict}  {}  {}  {}\n",
            r.at, r.session_id, r.user, r.host, r.port, r.bytes_up, r.bytes_down, r.duration_ms
        ));
    }
    text
}

#[cfg(test)]
mod tests;
