//! The sandbox hosts a harness knows (`outboard-server admin hosts add`), a client per host
//! shared by every session of the process, and where a new session's workspace goes.
//!
//! Rows live in `sandbox_hosts` (schema 16): the URL, the join token sealed with the server's
//! secret key (bound to the host's name), the certificate pin taken at the first join, and the
//! capacity the host told at its last join. `sessions.host` names the host of each session.
//!
//! Placement ([`Hosts::place`]): the host with the most free capacity (its capacity less the
//! sessions placed on it) that answers a join now; hosts that do not answer are skipped, so a
//! host that is down only costs the new session one connection attempt.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outboard_store::db::{params, OptionalExtension as _};

use crate::client::{HostClient, HostEndpoint, Liveness, RemoteError, DEFAULT_RECONNECT_WINDOW};
use outboard_org::secrets::{SecretError, SecretValue, Secrets};
use outboard_store::{Store, StoreError};

/// Capacity assumed of a host that never told one (added, never joined).
pub const UNKNOWN_CAPACITY: u32 = 16;

/// How long placement waits for one host to answer a join before trying the next.
pub const PLACEMENT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Longest host name.
pub const MAX_HOST_NAME: usize = 64;

/// A registered host as `admin hosts ls` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HostRow {
    /// Its name on this harness.
    pub name: String,
    /// Where it listens.
    pub url: String,
    /// The certificate pin (hex SHA-256), once joined.
    pub pin: Option<String>,
    /// What it told at its last join.
    pub capacity: Option<u32>,
    /// Sessions placed on it.
    pub sessions: u64,
    /// When it was added, RFC 3339.
    pub added_at: String,
    /// When this harness last joined it, RFC 3339.
    pub joined_at: Option<String>,
}

impl HostRow {
    /// Free capacity: its capacity (or [`UNKNOWN_CAPACITY`]) less its sessions; may be negative.
    pub fn free(&self) -> i64 {
        i64::from(self.capacity.unwrap_or(UNKNOWN_CAPACITY)) - self.sessions as i64
    }
}

/// Why a host operation failed. Messages name the host and never carry the token.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// Not a usable host name.
    #[error("{0:?} is not a host name: use 1 to {MAX_HOST_NAME} letters, digits, `.`, `-` or `_`")]
    BadName(String),
    /// Not a usable URL.
    #[error("{url:?} is not a sandbox host URL: {why}; give ws://HOST:PORT or wss://HOST:PORT")]
    BadUrl { url: String, why: String },
    /// Added already.
    #[error(
        "a sandbox host {0} is registered already; `outboard-server admin hosts rm {0}` first, \
         or pick another name"
    )]
    Exists(String),
    /// Not registered.
    #[error("no sandbox host {0}; `outboard-server admin hosts ls` lists them")]
    NotFound(String),
    /// Sessions still live there.
    #[error(
        "sandbox host {name} still holds {sessions} session(s); delete them or move them with \
         `outboard sessions restore ID` first"
    )]
    InUse { name: String, sessions: u64 },
    /// The pin changed between the probe and the repin (or the host is gone).
    #[error(
        "the pin of sandbox host {0} changed meanwhile (or the host was removed); run \
         `outboard-server admin hosts repin {0}` again"
    )]
    PinChanged(String),
    /// No host is registered.
    #[error(
        "no sandbox host is registered: add one with `outboard-server admin hosts add NAME --url \
         ws://HOST:PORT` and start it with `outboard-server sandbox-host --join-token TOKEN`"
    )]
    NoHosts,
    /// Every host was tried and none answered.
    #[error("no sandbox host can take the session now: {0}")]
    NoneAvailable(String),
    /// The sealed token does not open.
    #[error(
        "the join token of sandbox host {0} does not open with this server's secret key (was the \
         key changed?); add the host again with a new token"
    )]
    Sealed(String),
    /// Sealing or the key.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The client.
    #[error(transparent)]
    Remote(#[from] RemoteError),
}

/// Whether `name` may name a host.
pub fn valid_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_HOST_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// `url` checked: `ws://` or `wss://`, a host and a port, nothing after.
pub fn check_url(url: &str) -> Result<String, HostsError> {
    let bad = |why: &str| HostsError::BadUrl { url: url.to_owned(), why: why.to_owned() };
    let rest = url
        .strip_prefix("wss://")
        .or_else(|| url.strip_prefix("ws://"))
        .ok_or_else(|| bad("it must start with ws:// or wss://"))?;
    let rest = rest.trim_end_matches('/');
    if rest.contains('/') || rest.contains('?') || rest.contains('@') {
        return Err(bad("only HOST:PORT may follow the scheme"));
    }
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("it has no :PORT"))?;
    if host.is_empty() {
        return Err(bad("it has no host"));
    }
    port.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| bad("the port is not 1-65535"))?;
    Ok(url.trim_end_matches('/').to_owned())
}

/// Registers host `name` at `url` with a new join token, which it returns (to print once).
pub async fn add(
    store: &Store,
    secrets: &Secrets,
    name: &str,
    url: &str,
) -> Result<SecretValue, HostsError> {
    if !valid_host_name(name) {
        return Err(HostsError::BadName(name.to_owned()));
    }
    let url = check_url(url)?;
    let token = SecretValue::new(crate::trust::new_join_token().map_err(RemoteError::from)?);
    let (nonce, sealed) = secrets.seal_host_token(name, &token)?;
    let owned = name.to_owned();
    let added = store
        .call(move |c| {
            let n = c.execute(
                "INSERT INTO sandbox_hosts (name, url, token_nonce, token_sealed, added_at)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (name) DO NOTHING",
                params![owned, url, nonce, sealed, outboard_base::util::now_rfc3339()],
            )?;
            Ok(n == 1)
        })
        .await?;
    match added {
        true => Ok(token),
        false => Err(HostsError::Exists(name.to_owned())),
    }
}

/// Every registered host with its sessions, by name.
pub async fn list(store: &Store) -> Result<Vec<HostRow>, HostsError> {
    Ok(store
        .call(|c| {
            let mut stmt = c.prepare(
                "SELECT h.name, h.url, h.pin, h.capacity, h.added_at, h.joined_at,
                        (SELECT COUNT(*) FROM sessions s WHERE s.host = h.name)
                 FROM sandbox_hosts h ORDER BY h.name",
            )?;
            let rows = stmt.query_map((), |r| {
                Ok(HostRow {
                    name: r.get(0)?,
                    url: r.get(1)?,
                    pin: r.get(2)?,
                    capacity: r
                        .get::<_, Option<i64>>(3)?
                        .map(|c| c.clamp(0, u32::MAX as i64) as u32),
                    added_at: r.get(4)?,
                    joined_at: r.get(5)?,
                    sessions: r.get::<_, i64>(6)?.max(0) as u64,
                })
            })?;
            rows.collect::<Result<Vec<_>, _>>()
        })
        .await?)
}

/// Forgets host `name`; refused while sessions are placed on it.
pub async fn remove(store: &Store, name: &str) -> Result<(), HostsError> {
    let owned = name.to_owned();
    let outcome = store
        .call(move |c| {
            let tx = c.transaction()?;
            let sessions: i64 =
                tx.query_row("SELECT COUNT(*) FROM sessions WHERE host = ?1", [&owned], |r| {
                    r.get(0)
                })?;
            if sessions > 0 {
                return Ok(Err(sessions as u64));
            }
            let n = tx.execute("DELETE FROM sandbox_hosts WHERE name = ?1", [&owned])?;
            tx.commit()?;
            Ok(Ok(n == 1))
        })
        .await?;
    match outcome {
        Ok(true) => Ok(()),
        Ok(false) => Err(HostsError::NotFound(name.to_owned())),
        Err(sessions) => Err(HostsError::InUse { name: name.to_owned(), sessions }),
    }
}

struct Entry {
    client: Arc<HostClient>,
    /// The pin and capacity of the join are in the row.
    recorded: AtomicBool,
}

/// A host's certificate as [`Hosts::probe_key`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChange {
    /// Where the host was reached.
    pub url: String,
    /// The pin on record (none before the first join).
    pub old: Option<String>,
    /// The fingerprint of the certificate it presents now.
    pub new: String,
}

/// Pins `new` as host `name`'s certificate, replacing `old` (`admin hosts repin`, after the
/// admin confirmed: a host whose key changed, e.g. its data directory was lost, cannot be
/// joined, and it cannot be removed and added again while sessions are placed on it). Refused
/// when the pin on record is no longer `old` (someone else changed it meanwhile).
pub async fn repin(
    store: &Store,
    name: &str,
    old: Option<&str>,
    new: &str,
) -> Result<(), HostsError> {
    let (owned, old, new) = (name.to_owned(), old.map(str::to_owned), new.to_owned());
    let changed = store
        .call(move |c| {
            c.execute(
                "UPDATE sandbox_hosts SET pin = ?2
                 WHERE name = ?1 AND COALESCE(pin, '') = COALESCE(?3, '')",
                params![owned, new, old],
            )
        })
        .await?;
    if changed == 0 {
        return Err(HostsError::PinChanged(name.to_owned()));
    }
    Ok(())
}

/// The hosts of a harness process: one client per host, shared by its sessions.
pub struct Hosts {
    store: Store,
    secrets: Secrets,
    reconnect_window: Duration,
    liveness: Liveness,
    clients: tokio::sync::Mutex<HashMap<String, Arc<Entry>>>,
}

impl Hosts {
    /// The hosts registered in `store`, their tokens opened with `secrets`' key.
    pub fn new(store: Store, secrets: Secrets) -> Arc<Hosts> {
        Hosts::with_window(store, secrets, DEFAULT_RECONNECT_WINDOW)
    }

    /// [`Hosts::new`] with how long a call waits for a host that is down.
    pub fn with_window(store: Store, secrets: Secrets, reconnect_window: Duration) -> Arc<Hosts> {
        let liveness = Liveness::default();
        Arc::new(Hosts { store, secrets, reconnect_window, liveness, clients: Default::default() })
    }

    /// [`Hosts::new`] whose links ping and give up on a silent host as `liveness` says.
    pub fn with_liveness(store: Store, secrets: Secrets, liveness: Liveness) -> Arc<Hosts> {
        let reconnect_window = DEFAULT_RECONNECT_WINDOW;
        Arc::new(Hosts { store, secrets, reconnect_window, liveness, clients: Default::default() })
    }

    /// The client of host `name` (made on first use; nothing connects until a call).
    pub async fn client(&self, name: &str) -> Result<Arc<HostClient>, HostsError> {
        Ok(self.entry(name).await?.client.clone())
    }

    async fn entry(&self, name: &str) -> Result<Arc<Entry>, HostsError> {
        let mut clients = self.clients.lock().await;
        if let Some(entry) = clients.get(name) {
            return Ok(entry.clone());
        }
        let endpoint = self.endpoint(name).await?;
        let recorded = AtomicBool::new(endpoint.pin.is_some());
        let client = Arc::new(
            HostClient::new(endpoint, self.reconnect_window)?.with_liveness(self.liveness),
        );
        let entry = Arc::new(Entry { client, recorded });
        clients.insert(name.to_owned(), entry.clone());
        Ok(entry)
    }

    /// Drops the client of host `name`, so the next use reads its row again: after the host
    /// failed to show its pinned certificate, in case an admin re-pinned it meanwhile
    /// ([`repin`]).
    pub async fn forget(&self, name: &str) {
        self.clients.lock().await.remove(name);
    }

    /// Joins host `name` ignoring its pin, one attempt within `timeout`, and returns the pin on
    /// record and the certificate's fingerprint the host presents now. The host must still
    /// prove it holds the join token (the proof covers the certificate), so a peer without the
    /// token is refused; nothing is recorded.
    pub async fn probe_key(&self, name: &str, timeout: Duration) -> Result<KeyChange, HostsError> {
        let mut endpoint = self.endpoint(name).await?;
        let (url, old) = (endpoint.url.clone(), endpoint.pin.take());
        let client = HostClient::new(endpoint, self.reconnect_window)?;
        client.connect_within(timeout).await?;
        let new = client.pinned().ok_or_else(|| HostsError::NotFound(name.to_owned()))?;
        Ok(KeyChange { url, old, new })
    }

    /// Host `name`'s endpoint from its row, the token opened.
    async fn endpoint(&self, name: &str) -> Result<HostEndpoint, HostsError> {
        let owned = name.to_owned();
        let row = self
            .store
            .call(move |c| {
                c.query_row(
                    "SELECT url, token_nonce, token_sealed, pin FROM sandbox_hosts WHERE name = ?1",
                    [&owned],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, Vec<u8>>(1)?,
                            r.get::<_, Vec<u8>>(2)?,
                            r.get::<_, Option<String>>(3)?,
                        ))
                    },
                )
                .optional()
            })
            .await?
            .ok_or_else(|| HostsError::NotFound(name.to_owned()))?;
        let (url, nonce, sealed, pin) = row;
        let token = self
            .secrets
            .open_host_token(name, &nonce, sealed)
            .ok_or_else(|| HostsError::Sealed(name.to_owned()))?;
        Ok(HostEndpoint { name: name.to_owned(), url, token: token.expose().to_owned(), pin })
    }

    /// Records the pin and capacity of host `name`'s join in its row, once per process (the
    /// first join of a host pins its certificate: trust on first use, by the admin who added it).
    pub async fn note_joined(&self, name: &str) {
        let Ok(entry) = self.entry(name).await else { return };
        if entry.recorded.load(Ordering::Acquire) {
            return;
        }
        let Some(pin) = entry.client.pinned() else { return };
        let capacity = entry.client.capacity().map(i64::from);
        let owned = name.to_owned();
        let saved = self
            .store
            .call(move |c| {
                c.execute(
                    "UPDATE sandbox_hosts SET pin = COALESCE(pin, ?2), capacity = ?3,
                            joined_at = ?4 WHERE name = ?1",
                    params![owned, pin, capacity, outboard_base::util::now_rfc3339()],
                )?;
                Ok(())
            })
            .await;
        match saved {
            Ok(()) => entry.recorded.store(true, Ordering::Release),
            Err(e) => tracing::warn!(host = %name, "cannot record the host's join: {e}"),
        }
    }

    /// Joins host `name` now, within `timeout` (one attempt), and records the join.
    pub async fn join(&self, name: &str, timeout: Duration) -> Result<(), HostsError> {
        let client = self.client(name).await?;
        if let Err(e) = client.connect_within(timeout).await {
            if matches!(e, RemoteError::NotTheHost { .. }) {
                self.forget(name).await;
            }
            return Err(e.into());
        }
        self.note_joined(name).await;
        Ok(())
    }

    /// The host a new session goes on: the most free capacity among those that answer a join
    /// now, ties to the first by name; `except` is never picked (a restore's old host).
    pub async fn place(&self, except: Option<&str>) -> Result<String, HostsError> {
        let mut hosts = list(&self.store).await?;
        hosts.retain(|h| Some(h.name.as_str()) != except);
        if hosts.is_empty() {
            return Err(HostsError::NoHosts);
        }
        // Stable: equal free capacity keeps the order by name.
        hosts.sort_by_key(|h| std::cmp::Reverse(h.free()));
        let mut refusals = Vec::new();
        for host in hosts {
            match self.join(&host.name, PLACEMENT_CONNECT_TIMEOUT).await {
                Ok(()) => return Ok(host.name),
                Err(e) => {
                    tracing::warn!(host = %host.name, "placement skips the host: {e}");
                    refusals.push(e.to_string());
                }
            }
        }
        Err(HostsError::NoneAvailable(refusals.join("; ")))
    }
}
