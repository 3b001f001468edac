//! The flags of `serve`, `sandbox-host` and what the admin commands share (`--data`, `--store`).

use anyhow::Context as _;
use clap::Args;
use outboard_server::config::{default_data_dir, default_listen};
use outboard_server::netproxy::NetLimits;
use outboard_server::sandbox::{Backend, SandboxConfig};
use outboard_server::store::{Durability, Store};
use outboard_server::{Limits, NetConfig, TlsFiles};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub(crate) struct SandboxHostArgs {
    /// Address to listen on (TLS with the host's own certificate, made in --data).
    #[arg(long, env = "OUTBOARD_HOST_LISTEN")]
    pub(crate) listen: SocketAddr,
    /// Where the host keeps its key, certificate, token hash and workspaces.
    #[arg(long, env = "OUTBOARD_HOST_DATA")]
    pub(crate) data: PathBuf,
    /// The token `admin hosts add` printed; only its hash is stored, so later starts may omit
    /// it. Prefer the environment variable: a command line is visible to other users.
    #[arg(long, env = "OUTBOARD_JOIN_TOKEN", hide_env_values = true)]
    pub(crate) join_token: Option<String>,
    /// Where commands run: `bwrap` or `unsafe-host` (see `serve --sandbox`).
    #[arg(long, env = "OUTBOARD_SANDBOX", default_value = "bwrap", value_parser = parse_backend)]
    pub(crate) sandbox: Backend,
    /// Seconds of idle before a workspace's sandbox is frozen.
    #[arg(long, default_value_t = SandboxConfig::Bwrap.idle_freeze.as_secs())]
    pub(crate) sandbox_freeze_after: u64,
    /// Seconds of idle before a workspace's sandbox is stopped (its workspace stays).
    #[arg(long, default_value_t = SandboxConfig::Bwrap.idle_stop.as_secs())]
    pub(crate) sandbox_stop_after: u64,
    /// How many workspaces this host offers to take (harnesses place new sessions on the host
    /// with the most free capacity); four per core by default.
    #[arg(long, env = "OUTBOARD_HOST_CAPACITY")]
    pub(crate) capacity: Option<u32>,
}

#[derive(Args, Clone)]
pub(crate) struct DataArg {
    /// Data directory (SQLite file and workspaces).
    #[arg(long = "data", env = "OUTBOARD_DATA_DIR")]
    pub(crate) data: Option<PathBuf>,
    /// Where the store lives: a PostgreSQL URL (`postgres://user@host:5432/db`, for several
    /// server nodes on one database) or a SQLite file; default: `outboard.db` in the data dir.
    /// Keep the password off the command line, which other users can read (`ps`): give the URL
    /// in OUTBOARD_STORE, or the password in PGPASSWORD.
    #[arg(long = "store", env = "OUTBOARD_STORE", value_name = "URL|FILE", hide_env_values = true)]
    pub(crate) store: Option<String>,
    /// Connections this process keeps to PostgreSQL.
    #[arg(long = "store-pool", env = "OUTBOARD_STORE_POOL", default_value_t = outboard_server::store::DEFAULT_PG_POOL)]
    pub(crate) store_pool: usize,
}

impl DataArg {
    /// The store it names, in data dir `dir`.
    pub(crate) fn spec(&self, dir: &std::path::Path) -> outboard_server::store::StoreSpec {
        use outboard_server::store::StoreSpec;
        if self.password_on_command_line() {
            eprintln!(
                "outboard-server: warning: the --store URL holds a password, which other users of \
                 this machine can read in the command line (`ps`); give the URL in OUTBOARD_STORE \
                 or the password in PGPASSWORD instead"
            );
        }
        match self.store.as_deref().map(StoreSpec::parse) {
            Some(StoreSpec::Postgres { url, .. }) => {
                StoreSpec::Postgres { url, pool: self.store_pool.clamp(1, 256) }
            }
            Some(spec) => spec,
            None => StoreSpec::Sqlite(dir.join("outboard.db")),
        }
    }
}

impl DataArg {
    /// Whether `--store` came from the command line (not from OUTBOARD_STORE or a
    /// configuration file) with a password.
    fn password_on_command_line(&self) -> bool {
        let Some(store) = self.store.as_deref() else {
            return false;
        };
        std::env::args().any(|arg| arg.contains(store)) && store_holds_password(store)
    }
}

/// Whether a store URL or connection string carries a password: `scheme://user:PASSWORD@…`,
/// or a `password=` key (in a query or a `key=value` connection string).
pub(crate) fn store_holds_password(store: &str) -> bool {
    let lower = store.to_ascii_lowercase();
    if lower.contains("password=") {
        return true;
    }
    let Some((_, rest)) = store.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    authority.rsplit_once('@').is_some_and(|(userinfo, _)| userinfo.contains(':'))
}

/// The data dir and the store of an `admin` command (the data dir made private first).
pub(crate) fn open_data(data: DataArg) -> anyhow::Result<(PathBuf, Store)> {
    let spec = data.spec(&data_dir(data.clone())?);
    let dir = data_dir(data)?;
    outboard_server::config::secure_data_dir(&dir)?;
    let store = Store::open_spec(&spec, Durability::Normal, None)
        .with_context(|| format!("cannot open the store {}", spec.describe()))?;
    Ok((dir, store))
}

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// A TOML file of these flags (`/etc/outboard/server.toml`): each key a flag's long name
    /// with `_` for `-` (`listen = "0.0.0.0:7700"`), under the command line and the environment;
    /// the model catalog of --models may be its `[[models]]` tables. `outboard-server config
    /// show --config FILE` prints what is in effect.
    #[arg(long, env = "OUTBOARD_SERVER_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "OUTBOARD_LISTEN", default_value_t = default_listen())]
    pub(crate) listen: SocketAddr,
    /// How long this node's session leases last without renewal: on PostgreSQL, how long a
    /// killed node's sessions wait for another node (and a restart for its own dead heartbeat).
    #[arg(long, env = "OUTBOARD_LEASE_SECS", default_value_t = 10)]
    pub(crate) lease_secs: u64,
    /// With `--sandbox remote`: how often the link to each sandbox host sends a ping.
    #[arg(long, env = "OUTBOARD_HOST_PING_SECS", default_value_t = 15)]
    pub(crate) host_ping_secs: u64,
    /// With `--sandbox remote`: a host that answers nothing (not even a ping) for this long is
    /// marked down, and the calls waiting on it fail.
    #[arg(long, env = "OUTBOARD_HOST_PING_TIMEOUT_SECS", default_value_t = 45)]
    pub(crate) host_ping_timeout_secs: u64,
    /// With `--sandbox remote`: a call to a host fails when its command's timeout (120 s for a
    /// call that is not a command) plus this grace has passed without an answer.
    #[arg(long, env = "OUTBOARD_HOST_CALL_GRACE_SECS", default_value_t = 30)]
    pub(crate) host_call_grace_secs: u64,
    /// With `--sandbox remote`: how long an interrupted call waits for the host to confirm the
    /// stop before the turn ends anyway.
    #[arg(long, env = "OUTBOARD_HOST_CANCEL_WAIT_SECS", default_value_t = 10)]
    pub(crate) host_cancel_wait_secs: u64,
    /// Where sessions' workspaces live (default: `workspaces/` in the data dir). Several nodes
    /// of one PostgreSQL store must share one directory (an NFS mount), so that a node taking a
    /// session over finds its files.
    #[arg(long, env = "OUTBOARD_WORKSPACES")]
    pub(crate) workspaces: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) data: DataArg,
    /// Model provider: anthropic, openai (Chat Completions, OpenAI-compatible servers too) or
    /// responses (the OpenAI Responses API).
    #[arg(long, env = "OUTBOARD_PROVIDER", conflicts_with = "models")]
    pub(crate) provider: Option<String>,
    /// Provider base URL (openai, responses: including /v1; anthropic: without).
    #[arg(long, env = "OUTBOARD_BASE_URL", conflicts_with = "models")]
    pub(crate) base_url: Option<String>,
    /// Model name: the provider's model id; with --models, the name of the default model.
    #[arg(long, env = "OUTBOARD_MODEL")]
    pub(crate) model: Option<String>,
    /// A TOML file of the models sessions may pick (name, provider, model id, base URL, key
    /// variable, context window, thinking budget, reasoning effort, prices); see
    /// docs/ARCHITECTURE.md, "Models".
    #[arg(long, env = "OUTBOARD_MODELS", value_name = "FILE")]
    pub(crate) models: Option<PathBuf>,
    /// Anthropic extended thinking for models that set no budget of their own: this many tokens
    /// (at least 1024, below the model's max_tokens).
    #[arg(long, env = "OUTBOARD_THINKING_BUDGET", value_name = "TOKENS")]
    pub(crate) thinking_budget: Option<u32>,
    /// Where Bash commands run: `bwrap` (bubblewrap; fails at start if unavailable),
    /// `unsafe-host` (on the host, unisolated; only where namespaces are unavailable), or
    /// `remote` (new sessions are placed on the sandbox hosts of `admin hosts add`, each on the
    /// one with the most free capacity; their files and commands live there).
    #[arg(long, env = "OUTBOARD_SANDBOX", default_value = "bwrap", value_parser = parse_serve_sandbox)]
    pub(crate) sandbox: ServeSandbox,
    /// Seconds of idle before a session's sandbox is frozen.
    #[arg(long, env = "OUTBOARD_SANDBOX_FREEZE_AFTER", default_value_t = SandboxConfig::Bwrap.idle_freeze.as_secs())]
    pub(crate) sandbox_freeze_after: u64,
    /// Seconds of idle before a session's sandbox is stopped (its workspace stays).
    #[arg(long, env = "OUTBOARD_SANDBOX_STOP_AFTER", default_value_t = SandboxConfig::Bwrap.idle_stop.as_secs())]
    pub(crate) sandbox_stop_after: u64,
    /// Model calls per turn before it stops.
    #[arg(long, default_value_t = Limits::default().max_steps)]
    pub(crate) max_steps: u32,
    /// Model calls of one subagent (a `Task` call) before it stops.
    #[arg(long, default_value_t = Limits::default().task_max_steps)]
    pub(crate) task_max_steps: u32,
    /// The largest upload (`outboard run --upload`) taken, in bytes of its archive; a larger one
    /// is refused with 413 naming its size and this cap.
    #[arg(long, env = "OUTBOARD_MAX_UPLOAD_BYTES", default_value_t = Limits::default().max_upload_bytes)]
    pub(crate) max_upload_bytes: u64,
    /// Seconds one upload's body may take in all (besides 60 s at most between two chunks);
    /// a slower one is cut and nothing is stored.
    #[arg(long, env = "OUTBOARD_UPLOAD_DEADLINE_SECS", default_value_t = Limits::default().upload_deadline.as_secs())]
    pub(crate) upload_deadline_secs: u64,
    /// Connections one sandbox may have open through the network proxy at once; beyond, 503.
    #[arg(long, env = "OUTBOARD_NET_MAX_CONNECTIONS", default_value_t = NetLimits::DEFAULT.max_connections)]
    pub(crate) net_max_connections: usize,
    /// Seconds a sandbox's connection may move no byte before the proxy closes it.
    #[arg(long, env = "OUTBOARD_NET_IDLE_TIMEOUT", default_value_t = NetLimits::DEFAULT.idle_timeout.as_secs())]
    pub(crate) net_idle_timeout: u64,
    /// Bytes (both ways) a session's sandbox may move through the proxy; then its connections
    /// are cut and new ones refused.
    #[arg(long, env = "OUTBOARD_NET_SESSION_BYTES", default_value_t = NetLimits::DEFAULT.session_bytes)]
    pub(crate) net_session_bytes: u64,
    /// The model's context window in tokens, overriding the table of known model families
    /// (needed for a local server whose n_ctx is smaller); `session/create` may override it.
    #[arg(long, env = "OUTBOARD_CONTEXT_WINDOW", value_name = "TOKENS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) context_window: Option<u64>,
    /// Compact a session's conversation when a request would pass this percentage of its
    /// context window (0: only when the provider refuses a request as too long, or on
    /// `/compact`).
    #[arg(long, env = "OUTBOARD_COMPACT_AT", value_name = "PERCENT",
          default_value_t = Limits::default().compact_percent,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub(crate) compact_at: u8,
    /// Characters of a tool result the model sees; a longer one is cut in the middle with a
    /// note (the session's log keeps all of it).
    #[arg(long, env = "OUTBOARD_TOOL_RESULT_CHARS", value_name = "CHARS",
          default_value_t = Limits::default().result_chars as u64,
          value_parser = clap::value_parser!(u64).range(1000..))]
    pub(crate) tool_result_chars: u64,
    /// Serve Prometheus metrics at `http://ADDR/metrics` on this address of its own (never on
    /// --listen; keep it on loopback or a private network: it has no authentication).
    #[arg(long, env = "OUTBOARD_METRICS_LISTEN", value_name = "ADDR")]
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// Export traces over OTLP/HTTP (protobuf) to this collector: its base URL
    /// (`http://HOST:4318`), to which `/v1/traces` is added. Without it, the standard
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT turns the export on.
    /// A span per turn, model call, tool call, approval wait and compaction; no prompt text.
    #[arg(long, env = "OUTBOARD_OTLP_ENDPOINT", value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// Put each turn's prompt and each tool call's input in the exported spans (they hold what
    /// people and the model wrote; by default spans carry names, ids and figures only).
    /// OUTBOARD_OTLP_CONTENT takes 1/0, true/false, yes/no, on/off.
    #[arg(long, env = "OUTBOARD_OTLP_CONTENT", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) otlp_content: bool,
    #[command(flatten)]
    pub(crate) net: NetArgs,
}

/// `serve`'s network edge: TLS and the limits on connections (see `gateway.rs`, `net.rs`).
#[derive(Args)]
pub(crate) struct NetArgs {
    /// TLS certificate chain (PEM, leaf first): serve wss:// instead of ws://.
    #[arg(long, env = "OUTBOARD_TLS_CERT", value_name = "PEM", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of --tls-cert.
    #[arg(long, env = "OUTBOARD_TLS_KEY", value_name = "PEM", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Allow listening on a non-loopback address without TLS (tokens would cross the network in
    /// clear text; only behind a TLS-terminating proxy on the same host or a trusted network),
    /// and exporting traces to a clear-text http:// collector off loopback.
    /// OUTBOARD_INSECURE takes 1/0, true/false, yes/no, on/off.
    #[arg(long, env = "OUTBOARD_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    pub(crate) insecure: bool,
    /// Seconds a new connection has to finish its upgrade (TLS and HTTP), and then to send hello.
    #[arg(long, env = "OUTBOARD_HANDSHAKE_TIMEOUT", value_name = "SECS", value_parser = parse_secs,
          default_value = "10")]
    pub(crate) handshake_timeout: Duration,
    /// Seconds without any frame from a client (clients ping every 30 s) before it is closed.
    #[arg(long, env = "OUTBOARD_IDLE_TIMEOUT", value_name = "SECS", value_parser = parse_secs,
          default_value = "300")]
    pub(crate) idle_timeout: Duration,
    /// Seconds a WebSocket message may take from its first bytes to its last before the
    /// connection is cut (a fragmented message that never ends).
    #[arg(long, env = "OUTBOARD_MESSAGE_TIMEOUT", value_name = "SECS", value_parser = parse_secs,
          default_value = "60")]
    pub(crate) message_timeout: Duration,
    /// Open connections at most; more are answered HTTP 503.
    #[arg(long, env = "OUTBOARD_MAX_CONNECTIONS", value_name = "N",
          default_value_t = NetConfig::default().max_connections)]
    pub(crate) max_connections: usize,
    /// Open connections from one source address at most; more are answered HTTP 429.
    #[arg(long, env = "OUTBOARD_MAX_CONNECTIONS_PER_IP", value_name = "N",
          default_value_t = NetConfig::default().max_connections_per_ip)]
    pub(crate) max_connections_per_ip: usize,
    /// Where clients and the other nodes of the store reach this node (`ws://HOST:PORT` or
    /// `wss://…`): other nodes relay requests for the sessions this node runs there. Default:
    /// the listen address (this host's name for 0.0.0.0 or ::), wss:// with TLS.
    #[arg(long, env = "OUTBOARD_NODE_URL", value_name = "URL", value_parser = parse_node_url)]
    pub(crate) node_url: Option<String>,
    /// A git host on a loopback, private or otherwise internal address that repository URLs
    /// (`--repo`) may name, as HOST:PORT (the URL's host as written, or an address it resolves
    /// to). Repeat the flag, or separate hosts with commas. Without it such URLs are refused.
    #[arg(long = "git-allow-host", env = "OUTBOARD_GIT_ALLOW_HOSTS", value_name = "HOST:PORT",
          value_delimiter = ',', value_parser = outboard_server::repo_hosts::parse_host_port)]
    pub(crate) git_allow_hosts: Vec<String>,
    /// A git host (HOST:PORT) to which the org's stored credential may be sent over plain
    /// http://; every other host gets it over https:// only. Repeatable, or comma-separated.
    #[arg(long = "git-allow-http", env = "OUTBOARD_GIT_ALLOW_HTTP", value_name = "HOST:PORT",
          value_delimiter = ',', value_parser = outboard_server::repo_hosts::parse_host_port)]
    pub(crate) git_allow_http: Vec<String>,
    /// A CA certificate (PEM) that this node trusts, besides the webpki roots, when it relays
    /// clients to other nodes over wss:// (the nodes' own PKI).
    #[arg(long, env = "OUTBOARD_NODE_CA", value_name = "FILE")]
    pub(crate) node_ca: Option<PathBuf>,
}

/// `wss://HOST:PORT`, or `ws://` to a loopback host (other nodes send users' tokens there:
/// the client's rule), with nothing after the authority.
pub(crate) fn parse_node_url(text: &str) -> Result<String, String> {
    let text = text.trim().trim_end_matches('/');
    let rest = text.strip_prefix("ws://").or_else(|| text.strip_prefix("wss://"));
    match rest {
        Some(authority)
            if !authority.is_empty() && !authority.contains(['/', '?', '#', '@', ' ']) =>
        {
            outboard_server::gateway::check_node_url(text)?;
            Ok(text.to_owned())
        }
        _ => Err(format!(
            "{text:?} is not a node URL: give ws://HOST:PORT or wss://HOST:PORT, the address other \
             nodes and clients reach this node at"
        )),
    }
}

/// `1`, `0.5`: seconds, more than zero.
pub(crate) fn parse_secs(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{text:?} is not a number of seconds above zero (e.g. 10 or 0.5)")),
    }
}

impl NetArgs {
    /// The edge's configuration; refuses a clear-text listener off loopback unless `--insecure`.
    pub(crate) fn config(self, listen: SocketAddr) -> anyhow::Result<NetConfig> {
        let tls = match (self.tls_cert, self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            // Clap's `requires` sees the command line only, not a configuration file.
            _ => anyhow::bail!("--tls-cert and --tls-key (tls_cert, tls_key) go together"),
        };
        if tls.is_none() && !listen.ip().is_loopback() {
            if !self.insecure {
                anyhow::bail!(
                    "refusing to listen on {listen} without TLS: bearer tokens would cross the \
                     network in clear text. Give --tls-cert PEM --tls-key PEM, or listen on \
                     127.0.0.1, or pass --insecure if a TLS proxy on this host fronts the server"
                );
            }
            tracing::warn!(%listen, "--insecure: serving clear-text ws:// off loopback; tokens are readable on the network");
        }
        if self.max_connections == 0 || self.max_connections_per_ip == 0 {
            anyhow::bail!("--max-connections and --max-connections-per-ip must be at least 1");
        }
        Ok(NetConfig {
            handshake_timeout: self.handshake_timeout,
            idle_timeout: self.idle_timeout,
            message_timeout: self.message_timeout,
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
            tls,
            node_url: self.node_url,
            git_hosts: outboard_server::repo_hosts::GitHosts {
                internal: self.git_allow_hosts,
                cleartext: self.git_allow_http,
            },
            node_ca: self.node_ca,
        })
    }
}

pub(crate) fn parse_backend(s: &str) -> Result<Backend, String> {
    s.parse()
}

/// `serve --sandbox`: a local backend, or the sandbox hosts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ServeSandbox {
    Local(Backend),
    Remote,
}

pub(crate) fn parse_serve_sandbox(s: &str) -> Result<ServeSandbox, String> {
    match s {
        "remote" => Ok(ServeSandbox::Remote),
        other => other.parse().map(ServeSandbox::Local).map_err(|e: String| {
            format!("{e}, or `remote` to place sessions on the sandbox hosts")
        }),
    }
}

pub(crate) fn data_dir(arg: DataArg) -> anyhow::Result<PathBuf> {
    match arg.data {
        Some(dir) => Ok(dir),
        None => Ok(default_data_dir()?),
    }
}
