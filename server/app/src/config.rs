//! Server configuration: what `outboard-server serve` and the CLI's embedded mode pass to
//! [`crate::launch`]. Every field has a flag and an environment variable in `main.rs`; the LLM key
//! comes only from the environment and is held as a [`Secret`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use outboard_base::Secret;
use outboard_llm::LlmConfig;
use outboard_sandbox::SandboxConfig;

/// Everything the server needs to run.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Directory holding `outboard.db` and the session workspaces not kept in place.
    pub data_dir: PathBuf,
    /// The models sessions may use; new sessions get the first unless they name one.
    pub models: outboard_llm::models::ModelCatalog,
    /// How Bash commands are sandboxed.
    pub sandbox: SandboxConfig,
    /// The harness's limits.
    pub limits: Limits,
    /// The network edge: timeouts, connection caps, TLS.
    pub net: NetConfig,
    /// Whether `session/create` may name a host directory to work in (`workspace`). Only the
    /// embedded server sets it: its one client runs on this host as the user who owns the files.
    /// A `serve` server's clients are remote, and one must not get to open any path of the
    /// server's host (the server may run as root), so it refuses the field.
    pub allow_client_workspaces: bool,
    /// Whether new sessions are placed on the registered sandbox hosts (`serve --sandbox
    /// remote`, see [`outboard_remote::registry`]) rather than given a workspace and sandbox here.
    /// Sessions placed before keep their host either way.
    pub place_on_hosts: bool,
    /// Where the store lives; `None`: the SQLite file in the data dir ([`Self::db_path`]).
    pub store: Option<outboard_store::StoreSpec>,
    /// Where sessions' workspaces live; `None`: `workspaces/` in the data dir. Nodes of one
    /// store share one directory (an NFS mount, say), so any node can take a session over.
    pub workspaces: Option<PathBuf>,
}

/// Limits of the network edge (see `gateway.rs`). Every bound has a flag of `serve`.
#[derive(Debug, Clone)]
pub struct NetConfig {
    /// From accept to the WebSocket upgrade (TLS handshake and HTTP request head), and again
    /// from the upgrade to `hello`: a peer that is slower is cut. Default 10 s.
    pub handshake_timeout: Duration,
    /// A connection that sends no frame at all (request or WebSocket ping) for this long is
    /// closed with `idle_timeout`. Clients ping every 30 s. Default 300 s.
    pub idle_timeout: Duration,
    /// A WebSocket message whose first bytes arrived must be finished within this long (a
    /// fragmented message that never ends is cut, see `gateway::bounds`). Default 60 s.
    pub message_timeout: Duration,
    /// Open connections (any state) at most; beyond it a new one is answered HTTP 503 and closed.
    /// Default 4096.
    pub max_connections: usize,
    /// Open connections from one source address at most; beyond it HTTP 429. Default 64.
    pub max_connections_per_ip: usize,
    /// Serve TLS (wss://) with this certificate chain and key.
    pub tls: Option<TlsFiles>,
    /// Where clients and other nodes reach this node; `None`: from the listen address
    /// ([`NetConfig::node_url_for`]).
    pub node_url: Option<String>,
    /// The git hosts an admin allowed beyond the destination rules of repository URLs
    /// (`--git-allow-host`, `--git-allow-http`; see [`crate::repo_hosts`]).
    pub git_hosts: crate::repo_hosts::GitHosts,
    /// A CA (PEM) that relays to other nodes trust besides the webpki roots (`--node-ca`): the
    /// nodes' own PKI, for `wss://` between them.
    pub node_ca: Option<PathBuf>,
}

impl NetConfig {
    /// The URL this node registers for other nodes to relay to: `node_url` when given, else
    /// `ws://ADDR` (`wss://` with TLS), this host's name in place of an unspecified address.
    pub fn node_url_for(&self, addr: std::net::SocketAddr, host_name: &str) -> String {
        if let Some(url) = &self.node_url {
            return url.clone();
        }
        let scheme = if self.tls.is_some() { "wss" } else { "ws" };
        if addr.ip().is_unspecified() {
            format!("{scheme}://{host_name}:{}", addr.port())
        } else {
            format!("{scheme}://{addr}")
        }
    }
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            message_timeout: Duration::from_secs(60),
            max_connections: 4096,
            max_connections_per_ip: 64,
            tls: None,
            node_url: None,
            git_hosts: crate::repo_hosts::GitHosts::default(),
            node_ca: None,
        }
    }
}

/// PEM files of the server's TLS certificate chain and private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first (PEM).
    pub cert: PathBuf,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Limits of the harness loop.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Model calls per turn before the turn stops with `step_limit`.
    pub max_steps: u32,
    /// Model calls of one subagent (`Task`) before it stops and reports so (`serve
    /// --task-max-steps`): its own budget, not taken from its parent turn's.
    pub task_max_steps: u32,
    /// Default timeout of a Bash command when the model gives none.
    pub bash_timeout: Duration,
    /// Whether the exported spans carry prompts and tool inputs (`serve --otlp-content`; the
    /// exporter itself is the process's, set up by `main`).
    pub span_content: bool,
    /// How long a session actor with nothing to do (no turn, nobody attached, no live sandbox)
    /// waits before it stops and frees its memory ([`SESSION_IDLE`] by default).
    pub session_idle: Duration,
    /// How long a node's session leases last without renewal (`serve --lease-secs`): the bound
    /// on how long a dead node's sessions wait for another node.
    pub lease: Duration,
    /// The largest working tree `POST /v1/uploads` takes, in archive bytes
    /// ([`DEFAULT_MAX_UPLOAD_BYTES`] by default; `serve --max-upload-bytes`). It is here, not in
    /// [`ServerConfig`] itself, so that every place building a configuration gets the default.
    pub max_upload_bytes: u64,
    /// How long one upload's body may take in all ([`DEFAULT_UPLOAD_DEADLINE`] by default;
    /// `serve --upload-deadline-secs`); each chunk must also come within
    /// the uploads endpoint's 60 s per chunk.
    pub upload_deadline: Duration,
    /// The sandbox network proxy's limits per session: connections at once, idle timeout,
    /// bytes both ways (`serve --net-max-connections`, `--net-idle-timeout`,
    /// `--net-session-bytes`).
    pub network: outboard_egress::NetLimits,
    /// The model's context window in tokens when the server is told (`serve --context-window`,
    /// for a local model whose `n_ctx` is not its family's); `None`: the window table of
    /// [`outboard_llm::context::context_window`]. A session may override it at creation.
    pub context_window: Option<u64>,
    /// Compact the conversation when a request would pass this percentage of the window
    /// (`serve --compact-at`; 0: only on the provider's overflow error and on request).
    pub compact_percent: u8,
    /// How many characters of a tool result the model sees, cut in the middle beyond
    /// (`serve --tool-result-chars`; never more than an eighth of the window, see
    /// [`outboard_harness::Window::result_chars`]). The log keeps the whole result.
    pub result_chars: usize,
    /// How this node's links to sandbox hosts check the host is alive and how long a call
    /// waits for a silent one (`serve --host-ping-secs`, `--host-ping-timeout-secs`,
    /// `--host-call-grace-secs`, `--host-cancel-wait-secs`).
    pub host_link: outboard_remote::client::Liveness,
}

/// The default [`Limits::max_upload_bytes`]: 200 MiB holds the source of all but the largest
/// repositories (their build outputs and dependencies are what `.gitignore` leaves out), and
/// refuses a tree that is mostly data before it fills the server's disk.
pub const DEFAULT_MAX_UPLOAD_BYTES: u64 = 200 * 1024 * 1024;

/// The default [`Limits::upload_deadline`]: 30 minutes sends the 200 MiB cap at 120 KB/s, slower
/// than any link a working tree is uploaded over, while a body trickled a byte a minute no
/// longer holds a connection and a partial file for ever.
pub const DEFAULT_UPLOAD_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// The default [`Limits::session_idle`]. Respawning an actor re-reads its log (milliseconds for
/// a long session), so a minute keeps the actors of sessions in active use, a person reading an
/// answer or a script between two `outboard run`s, while the idle ones stop soon.
pub const SESSION_IDLE: Duration = Duration::from_secs(60);

impl Limits {
    /// What a turn takes of them: the harness's own limits.
    pub fn turn(&self) -> outboard_harness::TurnLimits {
        outboard_harness::TurnLimits {
            max_steps: self.max_steps,
            task_max_steps: self.task_max_steps,
            bash_timeout: self.bash_timeout,
            span_content: self.span_content,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            lease: outboard_store::lease::DEFAULT_LEASE,
            max_steps: 50,
            task_max_steps: 50,
            bash_timeout: Duration::from_secs(120),
            span_content: false,
            session_idle: SESSION_IDLE,
            max_upload_bytes: DEFAULT_MAX_UPLOAD_BYTES,
            upload_deadline: DEFAULT_UPLOAD_DEADLINE,
            network: outboard_egress::NetLimits::DEFAULT,
            context_window: None,
            compact_percent: outboard_harness::compact::DEFAULT_COMPACT_PERCENT,
            result_chars: outboard_harness::conversation::DEFAULT_RESULT_CHARS,
            host_link: outboard_remote::client::Liveness::default(),
        }
    }
}

impl ServerConfig {
    /// Where the SQLite file lives.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join(DB_FILE)
    }

    /// The store to open: [`Self::store`], or the SQLite file.
    pub fn store_spec(&self) -> outboard_store::StoreSpec {
        self.store.clone().unwrap_or_else(|| outboard_store::StoreSpec::Sqlite(self.db_path()))
    }

    /// The root under which each session gets `workspaces/<session_id>`.
    pub fn workspaces_dir(&self) -> PathBuf {
        match &self.workspaces {
            Some(dir) => dir.clone(),
            None => self.data_dir.join("workspaces"),
        }
    }

    /// Where uploaded working trees wait for their session (the uploads module's).
    pub fn uploads_dir(&self) -> PathBuf {
        uploads_dir(&self.data_dir)
    }
}

/// Why the data directory or database file cannot be made private.
#[derive(Debug, thiserror::Error)]
#[error("cannot secure {path}: {source} — check that this user owns it, or set --data/OUTBOARD_DATA_DIR to a directory of your own")]
pub struct DataDirError {
    /// The directory or file.
    pub path: PathBuf,
    /// The OS error.
    pub source: std::io::Error,
}

/// Creates the data directory (mode 0700) if missing, or tightens an existing one that group or
/// others can read (with a warning), and does the same for the database file and its `-wal` and
/// `-shm` companions (mode 0600; SQLite creates those with the database file's mode). Works
/// without touching the process umask, so the embedded mode can call it from the user's CLI.
pub fn secure_data_dir(dir: &std::path::Path) -> Result<(), DataDirError> {
    use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
    let err = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| DataDirError { path, source }
    };
    if !dir.exists() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(err(dir))?;
    }
    tighten(dir, 0o700).map_err(err(dir))?;
    let db = dir.join(DB_FILE);
    if !db.exists() {
        // Created empty with 0600 before SQLite opens it, so it never exists with a looser mode.
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&db)
            .map_err(err(&db))?;
    }
    tighten(&db, 0o600).map_err(err(&db))?;
    // SQLite's side files come and go with its connections (another process closing the
    // database removes its WAL): one gone between the look and the chmod needs no securing, and
    // SQLite makes new ones with the database's own mode.
    for name in ["outboard.db-wal", "outboard.db-shm", "outboard.db-journal"] {
        let path = dir.join(name);
        match tighten(&path, 0o600) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(&path)(e)),
        }
    }
    Ok(())
}

/// Sets `path`'s permission bits to `mode` when it grants more than `mode` does, with a warning.
fn tighten(path: &std::path::Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let current = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if current & !mode != 0 {
        tracing::warn!(
            path = %path.display(),
            was = format!("{current:o}"),
            now = format!("{mode:o}"),
            "tightening permissions: the data directory holds credentials and conversations"
        );
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

pub use outboard_cmdline::log_filter;

/// The database file's name in the data directory.
pub const DB_FILE: &str = "outboard.db";

/// The address `serve` listens on by default.
pub fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7700))
}

/// Why the configuration cannot be used. Each message says what to set.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An unknown provider name.
    #[error(transparent)]
    UnknownProvider(#[from] outboard_llm::UnknownProvider),
    /// No data directory could be found.
    #[error("no data directory: set --data or OUTBOARD_DATA_DIR (HOME is not set either)")]
    NoDataDir,
}

/// The provider settings shared by `outboard-server serve` and the CLI's embedded mode: flags (or
/// their `OUTBOARD_*` variables) plus the key from `ANTHROPIC_API_KEY` / `OPENAI_API_KEY`.
///
/// With no `--provider`, Anthropic is used unless only `OPENAI_API_KEY` is set.
pub fn llm_config(
    provider: Option<&str>,
    base_url: Option<&str>,
    model: Option<&str>,
) -> Result<LlmConfig, ConfigError> {
    use outboard_llm::{ProviderKind, RetryPolicy};
    let env_key = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let kind = match provider {
        Some(name) => ProviderKind::parse(name)
            .ok_or_else(|| outboard_llm::UnknownProvider(name.trim().to_owned()))?,
        None if env_key("ANTHROPIC_API_KEY").is_none() && env_key("OPENAI_API_KEY").is_some() => {
            ProviderKind::OpenAi
        }
        None => ProviderKind::Anthropic,
    };
    let default_model = match kind {
        ProviderKind::Anthropic => "claude-sonnet-4-5",
        ProviderKind::OpenAi => "gpt-4.1",
        ProviderKind::Responses => "gpt-5",
    };
    Ok(LlmConfig {
        kind,
        base_url: base_url.unwrap_or(kind.default_base_url()).trim_end_matches('/').to_owned(),
        model: model.unwrap_or(default_model).to_owned(),
        api_key: env_key(kind.key_var()).map(Secret::new),
        max_tokens: outboard_llm::models::DEFAULT_MAX_TOKENS,
        retry: RetryPolicy::default(),
        thinking_budget: None,
        reasoning_effort: None,
        vision: None,
    })
}

/// The platform data directory: `$XDG_DATA_HOME/outboard`, else `~/.local/share/outboard`.
pub fn default_data_dir() -> Result<PathBuf, ConfigError> {
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(xdg).join("outboard"));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).ok_or(ConfigError::NoDataDir)?;
    Ok(PathBuf::from(home).join(".local/share/outboard"))
}

/// The directory of uploaded archives under a data dir.
pub fn uploads_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("uploads")
}

#[cfg(test)]
mod log_filter_tests {
    use super::log_filter;

    /// The exported spans' target stays out of the log whatever the directives, even named: a
    /// span of it under the log's filter alone is a disabled callsite (no fields recorded, no
    /// prefix on log lines), while the other spans of the same level are not.
    #[test]
    fn the_exported_spans_never_reach_the_log() {
        use tracing_subscriber::layer::SubscriberExt as _;
        // The directives, and whether they enable the harness's own info spans.
        for (directives, others) in [
            ("trace", true),
            ("info", true),
            ("outboard_spans=info", false),
            ("info,outboard_spans=trace", true),
        ] {
            let filter = log_filter(Some(directives), "off");
            let subscriber = tracing_subscriber::registry().with(filter);
            tracing::subscriber::with_default(subscriber, || {
                let exported = tracing::info_span!(target: outboard_base::spans::TARGET, "turn");
                assert!(exported.is_disabled(), "{directives}");
                let other = tracing::info_span!(target: "outboard_harness", "turn");
                assert_eq!(!other.is_disabled(), others, "{directives}");
            });
        }
    }
}

#[cfg(test)]
mod data_dir_tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &std::path::Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_database_and_the_side_files_present_are_made_private_and_absent_ones_are_fine() {
        let dir = tempfile::tempdir().unwrap();
        let open = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(dir.path(), open.clone()).unwrap();
        let db = dir.path().join(DB_FILE);
        let wal = dir.path().join("outboard.db-wal");
        std::fs::write(&db, b"").unwrap();
        std::fs::write(&wal, b"").unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o644)).unwrap();
        secure_data_dir(dir.path()).unwrap();
        assert_eq!((mode(dir.path()), mode(&db), mode(&wal)), (0o700, 0o600, 0o600));
        // A side file that is gone (SQLite removed it) needs nothing.
        std::fs::remove_file(&wal).unwrap();
        std::os::unix::fs::symlink(dir.path().join("gone"), dir.path().join("outboard.db-shm"))
            .unwrap();
        secure_data_dir(dir.path()).unwrap();
    }
}

#[cfg(test)]
mod node_url_tests {
    use super::*;

    #[test]
    fn a_node_is_reached_at_its_listen_address_its_host_name_or_what_it_is_told() {
        let net = NetConfig::default();
        assert_eq!(
            net.node_url_for("127.0.0.1:7700".parse().unwrap(), "h1"),
            "ws://127.0.0.1:7700"
        );
        assert_eq!(net.node_url_for("0.0.0.0:7700".parse().unwrap(), "h1"), "ws://h1:7700");
        assert_eq!(net.node_url_for("[::]:7700".parse().unwrap(), "h1"), "ws://h1:7700");
        let tls = NetConfig {
            tls: Some(TlsFiles { cert: "c".into(), key: "k".into() }),
            ..NetConfig::default()
        };
        assert_eq!(tls.node_url_for("0.0.0.0:443".parse().unwrap(), "h1"), "wss://h1:443");
        let told = NetConfig { node_url: Some("wss://n1.internal:7700".into()), ..tls };
        assert_eq!(
            told.node_url_for("0.0.0.0:443".parse().unwrap(), "h1"),
            "wss://n1.internal:7700"
        );
    }
}
