//! `outboard-server`: flags and environment in, [`outboard_server::launch`] out.
//!
//! ```text
//! outboard-server serve [--listen 127.0.0.1:7700] [--data DIR]
//!                       [--provider anthropic|openai|responses] [--base-url URL] [--model NAME]
//!                       [--sandbox bwrap|unsafe-host|remote]
//!                       [--tls-cert PEM --tls-key PEM] [--insecure]
//!                       [--handshake-timeout SECS] [--idle-timeout SECS]
//!                       [--max-connections N] [--max-connections-per-ip N]
//!                       [--metrics-listen 127.0.0.1:9464]
//! outboard-server sandbox-host --listen ADDR --data DIR [--join-token TOKEN] [--capacity N]
//!                       [--sandbox bwrap|unsafe-host]   # serves workspaces and sandboxes
//! outboard-server admin hosts add NAME --url ws://HOST:PORT   # prints the host's join token once
//! outboard-server admin hosts ls [--json]            # capacity, sessions, live sandboxes, up/down
//! outboard-server admin hosts rm NAME
//! outboard-server admin user add NAME --org ORG      # prints the new user's token
//! outboard-server admin token ls [--org ORG]         # ids (not the tokens), users, labels
//! outboard-server admin token revoke ID              # the next hello with it is refused
//! outboard-server admin quota set --org ORG KEY VALUE # VALUE: a number, or `default`
//! outboard-server admin quota show --org ORG
//! outboard-server admin network set --org ORG MODE [HOST…]   # none, registries[+], allow, full
//! outboard-server admin network show --org ORG
//! outboard-server admin network log --org ORG [--json] [--limit N]
//! outboard-server admin network ca show|rm --org ORG  # the org's sandbox CA (certificate only)
//! outboard-server admin secret set --org ORG --host HOST[:PORT] NAME  # the value from stdin only
//!                  [--inject-header 'NAME: VALUE-WITH-{}'] [--placeholder VAR…] [--upstream-ca PEM]
//! outboard-server admin secret ls --org ORG          # hosts, names, when set (never values)
//! outboard-server admin secret rm --org ORG --host HOST[:PORT] NAME
//! outboard-server admin policy set --org ORG PATTERN allow|ask|deny  # mcp__github__*, Write(/skills/**)
//! outboard-server admin policy ls|rm --org ORG [PATTERN]
//! ```
//! `admin secret` exits 1 when it refuses what it was asked (an unknown org, a missing secret, a
//! bad host, name or value, a key that does not open the stored secrets), 2 when the data dir or
//! the key cannot be used at all, like every other failure.
//! The process runs with umask 077: everything it creates in the data dir is private to its user.
//! `serve` prints `outboard-server listening on ws://ADDR` as its first line on stdout (tests
//! that listen on port 0 read the address from it), then, with `--metrics-listen`,
//! `outboard-server metrics on http://ADDR/metrics`; logs go to stderr.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use outboard_server::config::{default_data_dir, default_listen, llm_config};
use outboard_server::models::ModelCatalog;
use outboard_server::netproxy::NetLimits;
use outboard_server::sandbox::{Backend, SandboxConfig};
use outboard_server::store::{Durability, Store};
use outboard_server::{Limits, NetConfig, ServerConfig, TlsFiles};

#[derive(Parser)]
#[command(name = "outboard-server", version, about = "The Outboard agent server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve(Box<ServeArgs>),
    /// Serve this machine's workspaces and sandboxes to harness nodes (a sandbox host).
    SandboxHost(SandboxHostArgs),
    /// Administer users and orgs.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Print shell completions (`outboard-server completions bash > /etc/bash_completion.d/…`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: outboard_server::manual::Shell,
    },
    /// Print the man page, or write every page (one per subcommand) into DIR.
    Man {
        /// Where to write `outboard-server.1` and the subcommands' pages.
        dir: Option<PathBuf>,
    },
}

#[derive(Args)]
struct SandboxHostArgs {
    /// Address to listen on (TLS with the host's own certificate, made in --data).
    #[arg(long, env = "OUTBOARD_HOST_LISTEN")]
    listen: SocketAddr,
    /// Where the host keeps its key, certificate, token hash and workspaces.
    #[arg(long, env = "OUTBOARD_HOST_DATA")]
    data: PathBuf,
    /// The token `admin hosts add` printed; only its hash is stored, so later starts may omit
    /// it. Prefer the environment variable: a command line is visible to other users.
    #[arg(long, env = "OUTBOARD_JOIN_TOKEN", hide_env_values = true)]
    join_token: Option<String>,
    /// Where commands run: `bwrap` or `unsafe-host` (see `serve --sandbox`).
    #[arg(long, env = "OUTBOARD_SANDBOX", default_value = "bwrap", value_parser = parse_backend)]
    sandbox: Backend,
    /// Seconds of idle before a workspace's sandbox is frozen.
    #[arg(long, default_value_t = SandboxConfig::Bwrap.idle_freeze.as_secs())]
    sandbox_freeze_after: u64,
    /// Seconds of idle before a workspace's sandbox is stopped (its workspace stays).
    #[arg(long, default_value_t = SandboxConfig::Bwrap.idle_stop.as_secs())]
    sandbox_stop_after: u64,
    /// How many workspaces this host offers to take (harnesses place new sessions on the host
    /// with the most free capacity); four per core by default.
    #[arg(long, env = "OUTBOARD_HOST_CAPACITY")]
    capacity: Option<u32>,
}

#[derive(Args, Clone)]
struct DataArg {
    /// Data directory (SQLite file and workspaces).
    #[arg(long = "data", env = "OUTBOARD_DATA_DIR")]
    data: Option<PathBuf>,
    /// Where the store lives: a PostgreSQL URL (`postgres://user@host:5432/db`, for several
    /// server nodes on one database) or a SQLite file; default: `outboard.db` in the data dir.
    #[arg(long = "store", env = "OUTBOARD_STORE", value_name = "URL|FILE")]
    store: Option<String>,
    /// Connections this process keeps to PostgreSQL.
    #[arg(long = "store-pool", env = "OUTBOARD_STORE_POOL", default_value_t = outboard_server::store::DEFAULT_PG_POOL)]
    store_pool: usize,
}

impl DataArg {
    /// The store it names, in data dir `dir`.
    fn spec(&self, dir: &std::path::Path) -> outboard_server::store::StoreSpec {
        use outboard_server::store::StoreSpec;
        match self.store.as_deref().map(StoreSpec::parse) {
            Some(StoreSpec::Postgres { url, .. }) => {
                StoreSpec::Postgres { url, pool: self.store_pool.clamp(1, 256) }
            }
            Some(spec) => spec,
            None => StoreSpec::Sqlite(dir.join("outboard.db")),
        }
    }
}

/// The data dir and the store of an `admin` command (the data dir made private first).
fn open_data(data: DataArg) -> anyhow::Result<(PathBuf, Store)> {
    let spec = data.spec(&data_dir(data.clone())?);
    let dir = data_dir(data)?;
    outboard_server::config::secure_data_dir(&dir)?;
    let store = Store::open_spec(&spec, Durability::Normal, None)
        .with_context(|| format!("cannot open the store {}", spec.describe()))?;
    Ok((dir, store))
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "OUTBOARD_LISTEN", default_value_t = default_listen())]
    listen: SocketAddr,
    /// How long this node's session leases last without renewal: on PostgreSQL, how long a
    /// killed node's sessions wait for another node (and a restart for its own dead heartbeat).
    #[arg(long, env = "OUTBOARD_LEASE_SECS", default_value_t = 10)]
    lease_secs: u64,
    /// Where sessions' workspaces live (default: `workspaces/` in the data dir). Several nodes
    /// of one PostgreSQL store must share one directory (an NFS mount), so that a node taking a
    /// session over finds its files.
    #[arg(long, env = "OUTBOARD_WORKSPACES")]
    workspaces: Option<PathBuf>,
    #[command(flatten)]
    data: DataArg,
    /// Model provider: anthropic, openai (Chat Completions, OpenAI-compatible servers too) or
    /// responses (the OpenAI Responses API).
    #[arg(long, env = "OUTBOARD_PROVIDER", conflicts_with = "models")]
    provider: Option<String>,
    /// Provider base URL (openai, responses: including /v1; anthropic: without).
    #[arg(long, env = "OUTBOARD_BASE_URL", conflicts_with = "models")]
    base_url: Option<String>,
    /// Model name: the provider's model id; with --models, the name of the default model.
    #[arg(long, env = "OUTBOARD_MODEL")]
    model: Option<String>,
    /// A TOML file of the models sessions may pick (name, provider, model id, base URL, key
    /// variable, context window, thinking budget, reasoning effort, prices); see
    /// docs/ARCHITECTURE.md, "Models".
    #[arg(long, env = "OUTBOARD_MODELS", value_name = "FILE")]
    models: Option<PathBuf>,
    /// Anthropic extended thinking for models that set no budget of their own: this many tokens
    /// (at least 1024, below the model's max_tokens).
    #[arg(long, env = "OUTBOARD_THINKING_BUDGET", value_name = "TOKENS")]
    thinking_budget: Option<u32>,
    /// Where Bash commands run: `bwrap` (bubblewrap; fails at start if unavailable),
    /// `unsafe-host` (on the host, unisolated; only where namespaces are unavailable), or
    /// `remote` (new sessions are placed on the sandbox hosts of `admin hosts add`, each on the
    /// one with the most free capacity; their files and commands live there).
    #[arg(long, env = "OUTBOARD_SANDBOX", default_value = "bwrap", value_parser = parse_serve_sandbox)]
    sandbox: ServeSandbox,
    /// Seconds of idle before a session's sandbox is frozen.
    #[arg(long, env = "OUTBOARD_SANDBOX_FREEZE_AFTER", default_value_t = SandboxConfig::Bwrap.idle_freeze.as_secs())]
    sandbox_freeze_after: u64,
    /// Seconds of idle before a session's sandbox is stopped (its workspace stays).
    #[arg(long, env = "OUTBOARD_SANDBOX_STOP_AFTER", default_value_t = SandboxConfig::Bwrap.idle_stop.as_secs())]
    sandbox_stop_after: u64,
    /// Model calls per turn before it stops.
    #[arg(long, default_value_t = Limits::default().max_steps)]
    max_steps: u32,
    /// Model calls of one subagent (a `Task` call) before it stops.
    #[arg(long, default_value_t = Limits::default().task_max_steps)]
    task_max_steps: u32,
    /// The largest upload (`outboard run --upload`) taken, in bytes of its archive; a larger one
    /// is refused with 413 naming its size and this cap.
    #[arg(long, env = "OUTBOARD_MAX_UPLOAD_BYTES", default_value_t = Limits::default().max_upload_bytes)]
    max_upload_bytes: u64,
    /// Connections one sandbox may have open through the network proxy at once; beyond, 503.
    #[arg(long, env = "OUTBOARD_NET_MAX_CONNECTIONS", default_value_t = NetLimits::DEFAULT.max_connections)]
    net_max_connections: usize,
    /// Seconds a sandbox's connection may move no byte before the proxy closes it.
    #[arg(long, env = "OUTBOARD_NET_IDLE_TIMEOUT", default_value_t = NetLimits::DEFAULT.idle_timeout.as_secs())]
    net_idle_timeout: u64,
    /// Bytes (both ways) a session's sandbox may move through the proxy; then its connections
    /// are cut and new ones refused.
    #[arg(long, env = "OUTBOARD_NET_SESSION_BYTES", default_value_t = NetLimits::DEFAULT.session_bytes)]
    net_session_bytes: u64,
    /// The model's context window in tokens, overriding the table of known model families
    /// (needed for a local server whose n_ctx is smaller); `session/create` may override it.
    #[arg(long, env = "OUTBOARD_CONTEXT_WINDOW", value_name = "TOKENS",
          value_parser = clap::value_parser!(u64).range(1..))]
    context_window: Option<u64>,
    /// Compact a session's conversation when a request would pass this percentage of its
    /// context window (0: only when the provider refuses a request as too long, or on
    /// `/compact`).
    #[arg(long, env = "OUTBOARD_COMPACT_AT", value_name = "PERCENT",
          default_value_t = Limits::default().compact_percent,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    compact_at: u8,
    /// Characters of a tool result the model sees; a longer one is cut in the middle with a
    /// note (the session's log keeps all of it).
    #[arg(long, env = "OUTBOARD_TOOL_RESULT_CHARS", value_name = "CHARS",
          default_value_t = Limits::default().result_chars as u64,
          value_parser = clap::value_parser!(u64).range(1000..))]
    tool_result_chars: u64,
    /// Serve Prometheus metrics at `http://ADDR/metrics` on this address of its own (never on
    /// --listen; keep it on loopback or a private network: it has no authentication).
    #[arg(long, env = "OUTBOARD_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    net: NetArgs,
}

/// `serve`'s network edge: TLS and the limits on connections (see `gateway.rs`, `net.rs`).
#[derive(Args)]
struct NetArgs {
    /// TLS certificate chain (PEM, leaf first): serve wss:// instead of ws://.
    #[arg(long, env = "OUTBOARD_TLS_CERT", value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of --tls-cert.
    #[arg(long, env = "OUTBOARD_TLS_KEY", value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Allow listening on a non-loopback address without TLS (tokens would cross the network in
    /// clear text; only behind a TLS-terminating proxy on the same host or a trusted network).
    #[arg(long, env = "OUTBOARD_INSECURE")]
    insecure: bool,
    /// Seconds a new connection has to finish its upgrade (TLS and HTTP), and then to send hello.
    #[arg(long, env = "OUTBOARD_HANDSHAKE_TIMEOUT", value_name = "SECS", value_parser = parse_secs,
          default_value = "10")]
    handshake_timeout: Duration,
    /// Seconds without any frame from a client (clients ping every 30 s) before it is closed.
    #[arg(long, env = "OUTBOARD_IDLE_TIMEOUT", value_name = "SECS", value_parser = parse_secs,
          default_value = "300")]
    idle_timeout: Duration,
    /// Open connections at most; more are answered HTTP 503.
    #[arg(long, env = "OUTBOARD_MAX_CONNECTIONS", value_name = "N",
          default_value_t = NetConfig::default().max_connections)]
    max_connections: usize,
    /// Open connections from one source address at most; more are answered HTTP 429.
    #[arg(long, env = "OUTBOARD_MAX_CONNECTIONS_PER_IP", value_name = "N",
          default_value_t = NetConfig::default().max_connections_per_ip)]
    max_connections_per_ip: usize,
    /// Where clients and the other nodes of the store reach this node (`ws://HOST:PORT` or
    /// `wss://…`): other nodes relay requests for the sessions this node runs there. Default:
    /// the listen address (this host's name for 0.0.0.0 or ::), wss:// with TLS.
    #[arg(long, env = "OUTBOARD_NODE_URL", value_name = "URL", value_parser = parse_node_url)]
    node_url: Option<String>,
}

/// `ws://HOST:PORT` or `wss://HOST:PORT`, with nothing after the authority.
fn parse_node_url(text: &str) -> Result<String, String> {
    let text = text.trim().trim_end_matches('/');
    let rest = text.strip_prefix("ws://").or_else(|| text.strip_prefix("wss://"));
    match rest {
        Some(authority)
            if !authority.is_empty() && !authority.contains(['/', '?', '#', '@', ' ']) =>
        {
            Ok(text.to_owned())
        }
        _ => Err(format!(
            "{text:?} is not a node URL: give ws://HOST:PORT or wss://HOST:PORT, the address other \
             nodes and clients reach this node at"
        )),
    }
}

/// `1`, `0.5`: seconds, more than zero.
fn parse_secs(text: &str) -> Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("{text:?} is not a number of seconds above zero (e.g. 10 or 0.5)")),
    }
}

impl NetArgs {
    /// The edge's configuration; refuses a clear-text listener off loopback unless `--insecure`.
    fn config(self, listen: SocketAddr) -> anyhow::Result<NetConfig> {
        let tls = match (self.tls_cert, self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            _ => None,
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
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
            tls,
            node_url: self.node_url,
        })
    }
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Manage users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Show or change an org's quotas.
    Quota {
        #[command(subcommand)]
        command: QuotaCommand,
    },
    /// Where an org's sandboxes may connect, and the log of their connections.
    Network {
        #[command(subcommand)]
        command: NetworkCommand,
    },
    /// List and revoke bearer tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Org credentials for git hosts, sealed with the server's key (the value never in argv).
    Secret {
        #[command(subcommand)]
        command: SecretCommand,
    },
    /// The org's MCP servers: their tools are offered to every session of the org, run by the
    /// server with the org's secrets (never in a sandbox).
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Which tool calls run, wait for a person's approval, or are refused, per org.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// The sandbox hosts this server places sessions on (`serve --sandbox remote`).
    Hosts {
        #[command(subcommand)]
        command: HostsCommand,
    },
    /// The server nodes on this store: state, last heartbeat, session leases held.
    Nodes {
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Also nodes whose last heartbeat is older than this many seconds (default: ten
        /// minutes).
        #[arg(long, default_value_t = 600)]
        within: u64,
        #[command(flatten)]
        data: DataArg,
    },
}

#[derive(Subcommand)]
enum HostsCommand {
    /// Register a sandbox host and print its join token, once: start the host with
    /// `outboard-server sandbox-host --join-token TOKEN` (or OUTBOARD_JOIN_TOKEN). Its
    /// certificate is pinned at the first join.
    Add {
        /// The host's name on this server.
        name: String,
        /// Where it listens: ws://HOST:PORT (the link is TLS either way).
        #[arg(long)]
        url: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// The hosts, their capacity, sessions and (asked now) live sandboxes.
    Ls {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataArg,
    },
    /// Forget a host (refused while sessions are placed on it).
    Rm {
        /// The host's name.
        name: String,
        #[command(flatten)]
        data: DataArg,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Set the decision for a tool PATTERN: a tool name with `*` wildcards (`mcp__github__*`,
    /// `Bash`, `*`), optionally with an argument pattern (`Write(/skills/**)`,
    /// `Edit(/memory/MEMORY.md)`, `Bash(git push*)`, `WebFetch(https://*.example.com/*)`).
    /// The most specific matching rule applies; calls no rule matches run.
    Set {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// The tool pattern.
        pattern: String,
        /// allow, ask (the call waits for the driver's or an org member's answer) or deny.
        decision: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// List an org's tool rules.
    Ls {
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// Remove the rule of one pattern.
    Rm {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// The pattern, as `ls` prints it.
        pattern: String,
        #[command(flatten)]
        data: DataArg,
    },
}

#[derive(Subcommand)]
enum McpCommand {
    /// Add an MCP server (or replace the one of that NAME): Streamable HTTP with --url, or a
    /// stdio server with --command. `{secret:NAME}` in a header or environment value is the org
    /// secret NAME (`admin secret set`), resolved when the server connects. Sessions pick it up
    /// at their next turn.
    Add {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// The server's name: 1 to 32 of a-z 0-9 _ - (its tools are `mcp__NAME__TOOL`).
        name: String,
        /// A Streamable HTTP server's URL.
        #[arg(long, conflicts_with = "command", required_unless_present = "command")]
        url: Option<String>,
        /// A header sent with every request, e.g. 'Authorization: Bearer {secret:NAME}'
        /// (repeatable; with --url).
        #[arg(long, value_name = "'NAME: VALUE'", requires = "url")]
        header: Vec<String>,
        /// A stdio server's program and arguments; it runs as the server's user, outside any
        /// sandbox, with only PATH and the --env variables (arguments starting with `-` go after
        /// `--`).
        #[arg(long, num_args = 1.., value_name = "CMD [ARGS]")]
        command: Option<Vec<String>>,
        /// A variable of the stdio server's environment, e.g. API_TOKEN={secret:NAME}
        /// (repeatable; with --command).
        #[arg(long, value_name = "KEY=VALUE", requires = "command")]
        env: Vec<String>,
        /// More arguments of --command (after `--`).
        #[arg(last = true)]
        rest: Vec<String>,
        #[command(flatten)]
        data: DataArg,
    },
    /// List the org's MCP servers: name, transport, URL or command, and the headers or
    /// environment as written (templates, never values).
    Ls {
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// Remove an MCP server.
    Rm {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// Its name.
        name: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// Connect to an MCP server and list its tools (exit 1 when it cannot be reached).
    Test {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// Its name.
        name: String,
        #[command(flatten)]
        data: DataArg,
    },
}

#[derive(Subcommand)]
enum SecretCommand {
    /// Store a credential for HOST, read from stdin (one line; on a terminal, typed without
    /// echo): a token (sent as the password of user `x-access-token`) or `user:password`.
    /// Replaces the value of an existing NAME.
    Set {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// The git host as in the repository's URL: `github.com`, `git.example.com:8443`.
        #[arg(long)]
        host: String,
        /// A label for the credential (1 to 64 of A-Z a-z 0-9 _ . -), e.g. `ci-token`.
        name: String,
        /// Also inject it into the sandbox's HTTPS requests to HOST: the proxy sets this header,
        /// `{}` standing for the value (e.g. 'Authorization: Bearer {}'); the sandbox never
        /// holds the value.
        #[arg(long, value_name = "'NAME: VALUE-WITH-{}'")]
        inject_header: Option<String>,
        /// Give the sandbox this variable with a placeholder value; the proxy replaces the
        /// placeholder by the secret wherever it appears in a request header to HOST (repeatable;
        /// with --inject-header).
        #[arg(long, value_name = "VAR")]
        placeholder: Vec<String>,
        /// Roots (PEM) that verify HOST's certificate besides the system's: a private mirror's
        /// CA (with --inject-header).
        #[arg(long, value_name = "FILE")]
        upstream_ca: Option<PathBuf>,
        #[command(flatten)]
        data: DataArg,
    },
    /// List an org's credentials: host, name and when each was set; never values.
    Ls {
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// Remove one credential.
    Rm {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// The host it was set for.
        #[arg(long)]
        host: String,
        /// Its name.
        name: String,
        #[command(flatten)]
        data: DataArg,
    },
}

#[derive(Subcommand)]
enum NetworkCommand {
    /// Set an org's network policy: MODE none | registries | registries+ HOST… | allow HOST… |
    /// full. A HOST is `name`, `*.suffix`, either with `:PORT`, or `IP:PORT` (the only way to
    /// reach a loopback or private address).
    Set {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// none, registries, registries+, allow or full.
        mode: String,
        /// The hosts of `allow` and `registries+`.
        hosts: Vec<String>,
        #[command(flatten)]
        data: DataArg,
    },
    /// Print an org's network policy.
    Show {
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// The org's sandbox CA, which signs what the proxy presents for hosts it injects
    /// credentials into: `show` prints its certificate, `rm` forgets it (a new one is made).
    Ca {
        #[command(subcommand)]
        command: CaCommand,
    },
    /// The last connections the org's sandboxes made or were refused, oldest first.
    Log {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        /// At most this many rows.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        #[command(flatten)]
        data: DataArg,
    },
}

#[derive(Subcommand)]
enum CaCommand {
    /// Print the CA's certificate (PEM), made now if the org has none yet.
    Show {
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// Forget the CA; the next sandbox of the org gets a new one (running ones keep theirs).
    Rm {
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
}

#[derive(Subcommand)]
enum QuotaCommand {
    /// Set one quota of an org (`default` goes back to the default); prints the org's quotas.
    Set {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// workspace_bytes, org_file_versions, org_file_bytes, sessions_per_hour, title_bytes
        /// or live_sandboxes.
        key: String,
        /// A whole number (sizes may end in KiB, MiB, GiB), or `default`.
        value: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// Print an org's quotas, which are set and which are defaults, and current usage.
    Show {
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// List tokens: ID (the first 8 hex characters of the token's SHA-256, not a secret), user,
    /// org, label (`admin`, `embedded pid=N`) and creation time.
    Ls {
        /// Only this org's tokens.
        #[arg(long)]
        org: Option<String>,
        #[command(flatten)]
        data: DataArg,
    },
    /// Revoke a token by its ID from `ls`: the next hello with it is refused.
    Revoke {
        /// The token's ID (or a longer prefix of its hash).
        id: String,
        #[command(flatten)]
        data: DataArg,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Add a user (and its org if new); prints the user's token on stdout.
    Add {
        /// User name, unique within the org.
        name: String,
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
}

fn main() -> ExitCode {
    if let Some(code) = outboard_server::sandbox::init::main_if_agent() {
        return code;
    }
    // Everything this process creates (database, workspaces, org projections) is private to its
    // user; the data dir is also checked and tightened at start (config::secure_data_dir).
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(outboard_server::config::log_filter(
            std::env::var("OUTBOARD_LOG").ok().as_deref(),
            "info",
        ))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("outboard-server: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("outboard-server: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    s.parse()
}

/// `serve --sandbox`: a local backend, or the sandbox hosts.
#[derive(Debug, Clone, Copy)]
enum ServeSandbox {
    Local(Backend),
    Remote,
}

fn parse_serve_sandbox(s: &str) -> Result<ServeSandbox, String> {
    match s {
        "remote" => Ok(ServeSandbox::Remote),
        other => other.parse().map(ServeSandbox::Local).map_err(|e: String| {
            format!("{e}, or `remote` to place sessions on the sandbox hosts")
        }),
    }
}

fn data_dir(arg: DataArg) -> anyhow::Result<PathBuf> {
    match arg.data {
        Some(dir) => Ok(dir),
        None => Ok(default_data_dir()?),
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let done = ExitCode::SUCCESS;
    match cli.command {
        Command::Serve(args) => serve(*args).await.map(|()| done),
        Command::SandboxHost(args) => sandbox_host(args).await.map(|()| done),
        Command::Completions { shell } => {
            let cmd = <Cli as clap::CommandFactory>::command();
            outboard_server::manual::completions(cmd, shell, &mut std::io::stdout());
            Ok(done)
        }
        Command::Man { dir } => {
            let cmd = <Cli as clap::CommandFactory>::command();
            outboard_server::manual::man(cmd, dir.as_deref(), &mut std::io::stdout())?;
            Ok(done)
        }
        Command::Admin {
            command: AdminCommand::User { command: UserCommand::Add { name, org, data } },
        } => {
            let (_, store) = open_data(data)?;
            let (_, token) = store.add_user(&org, &name).await?;
            println!("{token}");
            Ok(done)
        }
        Command::Admin { command: AdminCommand::Token { command } } => {
            admin_token(command).await.map(|()| done)
        }
        Command::Admin { command: AdminCommand::Quota { command } } => {
            admin_quota(command).await.map(|()| done)
        }
        Command::Admin { command: AdminCommand::Secret { command } } => admin_secret(command).await,
        Command::Admin { command: AdminCommand::Policy { command } } => admin_policy(command).await,
        Command::Admin { command: AdminCommand::Hosts { command } } => admin_hosts(command).await,
        Command::Admin { command: AdminCommand::Nodes { json, within, data } } => {
            let (_, store) = open_data(data)?;
            let nodes = store.nodes(Duration::from_secs(within)).await?;
            if json {
                for node in &nodes {
                    println!("{}", serde_json::to_string(node)?);
                }
            } else {
                print!("{}", outboard_server::store::lease::nodes_table(&nodes));
            }
            Ok(done)
        }
        Command::Admin { command: AdminCommand::Mcp { command } } => admin_mcp(command).await,
        Command::Admin { command: AdminCommand::Network { command } } => {
            admin_network(command).await.map(|()| done)
        }
    }
}

/// `admin network set|show|log`: on the data dir directly; a running server reads the policy
/// again within `netpolicy::REFRESH`.
async fn admin_network(command: NetworkCommand) -> anyhow::Result<()> {
    use outboard_server::netpolicy;
    match command {
        NetworkCommand::Set { org, mode, hosts, data } => {
            let policy = netpolicy::Policy::parse(&mode, &hosts)?;
            let store = open_data(data)?.1;
            print!("{}", netpolicy::set(&store, &org, policy).await?);
        }
        NetworkCommand::Show { org, data } => {
            let store = open_data(data)?.1;
            print!("{}", netpolicy::show(&store, &org).await?);
        }
        NetworkCommand::Log { org, json, limit, data } => {
            let store = open_data(data)?.1;
            let rows = netpolicy::log(&store, &org, limit).await?;
            if json {
                for row in rows {
                    println!("{}", serde_json::to_string(&row)?);
                }
            } else {
                print!("{}", netpolicy::log_table(&rows));
            }
        }
        NetworkCommand::Ca { command } => {
            let (org, data) = match &command {
                CaCommand::Show { org, data } | CaCommand::Rm { org, data } => (org, data),
            };
            let secrets = open_secrets(data.clone())?;
            let org_id = secrets.org_by_name(org).await?;
            match command {
                CaCommand::Show { .. } => print!("{}", secrets.org_ca(&org_id).await?.cert_pem()),
                CaCommand::Rm { .. } => {
                    if secrets.remove_ca(&org_id).await? {
                        println!(
                            "removed the sandbox CA of org {org}; new sandboxes get a new one"
                        );
                    } else {
                        println!("org {org} has no sandbox CA yet");
                    }
                }
            }
        }
    }
    Ok(())
}

/// `admin policy set|ls|rm`: on the data dir directly; a running server applies the rules from
/// each session's next turn. Exits 1 when it refuses what it was asked (an unknown org, a bad
/// pattern or decision, a missing rule, too many rules).
async fn admin_policy(command: PolicyCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::toolpolicy::{self, Decision, PolicyError};
    let open = |data: DataArg| -> anyhow::Result<Store> { Ok(open_data(data)?.1) };
    let outcome = match command {
        PolicyCommand::Set { org, pattern, decision, data } => {
            let store = open(data)?;
            match Decision::parse(&decision) {
                Ok(decision) => toolpolicy::set(&store, &org, &pattern, decision)
                    .await
                    .map(|()| format!("org {org}: {} {decision}\n", pattern.trim())),
                Err(e) => Err(e),
            }
        }
        PolicyCommand::Ls { org, data } => toolpolicy::show(&open(data)?, &org).await,
        PolicyCommand::Rm { org, pattern, data } => {
            match toolpolicy::remove(&open(data)?, &org, &pattern).await {
                Ok(true) => Ok(format!("org {org}: removed the rule for {}\n", pattern.trim())),
                Ok(false) => Err(PolicyError::Invalid(format!(
                    "org {org} has no rule for {:?} (see `admin policy ls --org {org}`)",
                    pattern.trim()
                ))),
                Err(e) => Err(e),
            }
        }
    };
    match outcome {
        Ok(text) => {
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(PolicyError::Store(e)) => Err(e.into()),
        Err(e) => {
            eprintln!("outboard-server: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

/// The org secrets of a data dir, for the admin commands.
fn open_secrets(data: DataArg) -> anyhow::Result<outboard_server::secrets::Secrets> {
    use outboard_server::secrets::{SecretKey, Secrets};
    let (dir, store) = open_data(data)?;
    Ok(Secrets::new(store, SecretKey::load(&dir)?))
}

/// `admin secret set|ls|rm`: works on the data dir directly, like `admin quota`; the server
/// reads a credential when it talks to the host, so a change applies at the next clone or push.
async fn admin_secret(command: SecretCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::secrets::SecretError;
    match admin_secret_inner(command).await {
        Ok(code) => Ok(code),
        Err(e) => match e.downcast_ref::<SecretError>() {
            // Refusals of what the admin asked (org, host, name, value): exit 1.
            Some(
                SecretError::NoOrg(_)
                | SecretError::BadHost { .. }
                | SecretError::HostWithCredential
                | SecretError::BadName { .. }
                | SecretError::NameIsToken
                | SecretError::BadValue(_)
                | SecretError::BadBinding(_)
                | SecretError::KeyMismatch { .. },
            ) => {
                eprintln!("outboard-server: {e:#}");
                Ok(ExitCode::from(1))
            }
            _ => Err(e),
        },
    }
}

async fn admin_secret_inner(command: SecretCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::secrets::{self, Binding, HeaderTemplate};
    let open = open_secrets;
    match command {
        SecretCommand::Set { org, host, name, inject_header, placeholder, upstream_ca, data } => {
            // Everything named on the command line is checked before the value is asked for.
            let host = secrets::validate_host(&host)?;
            secrets::validate_name(&name)?;
            let upstream_ca = match upstream_ca {
                Some(path) => Some(read_roots(&path)?),
                None => None,
            };
            let binding = Binding {
                inject_header: inject_header.as_deref().map(HeaderTemplate::parse).transpose()?,
                placeholders: placeholder,
                upstream_ca,
            };
            let secrets = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            let value = read_secret_value(&host, &name)?;
            secrets.set_with(&org_id, &host, &name, value, &binding).await?;
            match &binding.inject_header {
                Some(header) => println!(
                    "set {host}/{name} for org {org}; the sandbox's HTTPS requests to {host}                      carry `{}: …`",
                    header.name()
                ),
                None => println!("set {host}/{name} for org {org}"),
            }
            for var in &binding.placeholders {
                println!("  the sandbox's {var} holds {}", secrets::placeholder(var));
            }
            Ok(ExitCode::SUCCESS)
        }
        SecretCommand::Ls { org, data } => {
            let secrets = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            let list = secrets.list(&org_id).await?;
            println!("{:<32}  {:<24}  {:<24}  OUTBOUND", "HOST", "NAME", "SET AT");
            for s in list {
                println!(
                    "{:<32}  {:<24}  {:<24}  {}",
                    s.host,
                    s.name,
                    s.created_at,
                    s.binding.describe()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SecretCommand::Rm { org, host, name, data } => {
            let host = secrets::validate_host(&host)?;
            secrets::validate_name(&name)?;
            let secrets = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            if secrets.remove(&org_id, &host, &name).await? {
                println!("removed {host}/{name} from org {org}");
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!(
                    "outboard-server: org {org} has no secret {name} for {host}: \
                     `outboard-server admin secret ls --org {org}` lists them"
                );
                Ok(ExitCode::from(1))
            }
        }
    }
}

/// `admin mcp add|ls|rm|test`: on the data dir directly, like `admin secret`; a running server
/// reads the definitions at each turn's start, so a change applies at the next turn.
async fn admin_hosts(command: HostsCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::remote::registry::{self, Hosts, HostsError};
    use outboard_server::secrets::{SecretKey, Secrets};
    let open = |data: DataArg| -> anyhow::Result<(Store, Secrets)> {
        let dir = data_dir(data.clone())?;
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
        let (dir, store) = open_data(data)?;
        let secrets = Secrets::new(store.clone(), SecretKey::load(&dir)?);
        Ok((store, secrets))
    };
    let refused = |e: HostsError| -> anyhow::Result<ExitCode> {
        match e {
            HostsError::Store(_) => Err(e.into()),
            e => {
                eprintln!("outboard-server: {e}");
                Ok(ExitCode::from(1))
            }
        }
    };
    match command {
        HostsCommand::Add { name, url, data } => {
            let (store, secrets) = open(data)?;
            match registry::add(&store, &secrets, &name, &url).await {
                Ok(token) => {
                    eprintln!(
                        "added sandbox host {name} at {url}; start it with \
                         `OUTBOARD_JOIN_TOKEN=<the token> outboard-server sandbox-host --listen \
                         ADDR --data DIR` (the token is shown once):"
                    );
                    println!("{}", token.expose());
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => refused(e),
            }
        }
        HostsCommand::Ls { json, data } => {
            let (store, secrets) = open(data)?;
            let rows = match registry::list(&store).await {
                Ok(rows) => rows,
                Err(e) => return refused(e),
            };
            let hosts = Hosts::with_window(store, secrets, Duration::from_secs(2));
            let probes = rows.iter().map(|row| {
                let hosts = hosts.clone();
                let name = row.name.clone();
                async move {
                    hosts.join(&name, Duration::from_secs(2)).await?;
                    Ok::<_, HostsError>(hosts.client(&name).await?.status().await?)
                }
            });
            let statuses = futures_util::future::join_all(probes).await;
            if !json {
                println!(
                    "{:<16} {:<28} {:>8} {:>8} {:>6} {:<6} PIN",
                    "NAME", "URL", "CAPACITY", "SESSIONS", "LIVE", "STATE"
                );
            }
            for (row, status) in rows.iter().zip(statuses) {
                let (state, live, capacity, reason) = match &status {
                    Ok(s) => ("up", Some(s.live_sandboxes), Some(s.capacity), None),
                    Err(e) => ("down", None, row.capacity, Some(e.to_string())),
                };
                if json {
                    let line = serde_json::json!({
                        "name": row.name, "url": row.url, "capacity": capacity,
                        "sessions": row.sessions, "live_sandboxes": live, "state": state,
                        "error": reason, "pin": row.pin, "added_at": row.added_at,
                        "joined_at": row.joined_at,
                    });
                    println!("{line}");
                } else {
                    let dash = || "-".to_owned();
                    println!(
                        "{:<16} {:<28} {:>8} {:>8} {:>6} {:<6} {}",
                        row.name,
                        row.url,
                        capacity.map_or_else(dash, |c| c.to_string()),
                        row.sessions,
                        live.map_or_else(dash, |l| l.to_string()),
                        state,
                        row.pin.as_deref().map_or_else(dash, |p| p.chars().take(16).collect()),
                    );
                    if let Some(reason) = reason {
                        println!("  {reason}");
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        HostsCommand::Rm { name, data } => {
            let (store, _) = open(data)?;
            match registry::remove(&store, &name).await {
                Ok(()) => {
                    println!("removed sandbox host {name}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => refused(e),
            }
        }
    }
}

async fn admin_mcp(command: McpCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::mcp::McpError;
    use outboard_server::secrets::SecretError;
    match admin_mcp_inner(command).await {
        Ok(code) => Ok(code),
        Err(e) => {
            let refused = match e.downcast_ref::<McpError>() {
                Some(McpError::Store(_)) => false,
                Some(_) => true,
                None => matches!(e.downcast_ref::<SecretError>(), Some(SecretError::NoOrg(_))),
            };
            if refused {
                eprintln!("outboard-server: {e:#}");
                Ok(ExitCode::from(1))
            } else {
                Err(e)
            }
        }
    }
}

async fn admin_mcp_inner(command: McpCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::mcp::config::{self, ServerDef, Transport};
    use outboard_server::mcp::McpHub;
    use outboard_server::secrets::{SecretKey, Secrets};
    let open = |data: DataArg| -> anyhow::Result<(Store, Secrets, McpHub)> {
        let (dir, store) = open_data(data)?;
        let secrets = Secrets::new(store.clone(), SecretKey::load(&dir)?);
        let hub = McpHub::new(store.clone(), Some(secrets.clone()));
        Ok((store, secrets, hub))
    };
    match command {
        McpCommand::Add { org, name, url, header, command, env, rest, data } => {
            let transport = match (url, command) {
                (Some(url), _) => Transport::Http {
                    url,
                    headers: header
                        .iter()
                        .map(|h| config::parse_header(h))
                        .collect::<Result<_, _>>()?,
                },
                (None, Some(mut command)) => {
                    command.extend(rest);
                    let program = command.remove(0);
                    Transport::Stdio {
                        command: program,
                        args: command,
                        env: env.iter().map(|e| config::parse_env(e)).collect::<Result<_, _>>()?,
                    }
                }
                (None, None) => anyhow::bail!(outboard_server::mcp::McpError::BadDefinition(
                    "give --url URL or --command CMD".into()
                )),
            };
            let def = ServerDef { name, transport };
            def.validate()?;
            let (store, secrets, hub) = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            hub.check_secrets(&org_id, &def).await?;
            let replaced = config::put(&store, &org_id, &def).await?;
            println!(
                "{} MCP server {} ({} {}) for org {org}; `outboard-server admin mcp test --org                  {org} {}` connects to it",
                if replaced { "replaced" } else { "added" },
                def.name,
                def.kind(),
                def.target(),
                def.name
            );
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Ls { org, data } => {
            let (store, secrets, _) = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            println!("{:<32}  {:<9}  URL / COMMAND", "NAME", "TRANSPORT");
            for def in config::list(&store, &org_id).await? {
                println!("{:<32}  {:<9}  {}", def.name, def.kind(), def.target());
                for setting in def.settings() {
                    println!("{:<32}  {:<9}    {setting}", "", "");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Rm { org, name, data } => {
            let (store, secrets, _) = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            if config::remove(&store, &org_id, &name).await? {
                println!("removed MCP server {name} from org {org}");
                Ok(ExitCode::SUCCESS)
            } else {
                anyhow::bail!(outboard_server::mcp::McpError::NoServer(name))
            }
        }
        McpCommand::Test { org, name, data } => {
            let (_, secrets, hub) = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            let tools = hub.test(&org_id, &name).await?;
            println!("MCP server {name} of org {org}: connected, {} tools", tools.len());
            for tool in tools {
                let line = tool.description.lines().next().unwrap_or_default().to_owned();
                println!("  {:<40}  {line}", tool.shown);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Reads an `--upstream-ca` file, bounded.
fn read_roots(path: &std::path::Path) -> anyhow::Result<String> {
    use outboard_server::secrets::{SecretError, MAX_UPSTREAM_CA_BYTES};
    use std::io::Read as _;
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot read the --upstream-ca file {}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_UPSTREAM_CA_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("the --upstream-ca file {} is not PEM text", path.display()))?;
    if text.len() > MAX_UPSTREAM_CA_BYTES {
        return Err(SecretError::BadBinding(format!(
            "--upstream-ca: {} is larger than {} KiB; give the roots only",
            path.display(),
            MAX_UPSTREAM_CA_BYTES / 1024
        ))
        .into());
    }
    Ok(text)
}

/// Reads a secret's value from stdin: all of it when piped (one trailing newline dropped later),
/// one line typed without echo on a terminal. Bounded, so a mistaken `< big-file` is refused
/// without reading it whole.
fn read_secret_value(
    host: &str,
    name: &str,
) -> anyhow::Result<outboard_server::secrets::SecretValue> {
    use outboard_server::secrets::{validate_value, SecretValue, MAX_VALUE_BYTES};
    use std::io::{IsTerminal as _, Read as _};
    let stdin = std::io::stdin();
    let mut raw = Vec::new();
    if stdin.is_terminal() {
        // The terminal's line discipline bounds a line (4 KiB on Linux).
        eprint!("value for {host}/{name} (not shown; Enter ends it): ");
        let line = read_line_without_echo(&stdin);
        eprintln!();
        raw = line?.into_bytes();
    } else {
        // A newline and a carriage return beyond the cap, and one byte to notice it is exceeded.
        let limit = MAX_VALUE_BYTES as u64 + 3;
        stdin.lock().take(limit).read_to_end(&mut raw)?;
    }
    let text = match String::from_utf8(raw) {
        Ok(text) => text,
        Err(e) => {
            let mut bytes = e.into_bytes();
            bytes.fill(0);
            std::hint::black_box(&mut bytes);
            anyhow::bail!(outboard_server::secrets::SecretError::BadValue("it is not UTF-8 text"));
        }
    };
    Ok(validate_value(SecretValue::new(text))?)
}

/// One line from the terminal on stdin with echo off, restored on every path.
fn read_line_without_echo(stdin: &std::io::Stdin) -> anyhow::Result<String> {
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions};
    struct Restore<'a>(&'a std::io::Stdin, rustix::termios::Termios);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            let _ = tcsetattr(self.0, OptionalActions::Now, &self.1);
        }
    }
    let saved = tcgetattr(stdin)?;
    let mut quiet = saved.clone();
    quiet.local_modes.remove(LocalModes::ECHO);
    tcsetattr(stdin, OptionalActions::Now, &quiet)?;
    let _restore = Restore(stdin, saved);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdin.lock(), &mut line)?;
    Ok(line)
}

/// `admin quota set|show`: works on the data dir directly, like `admin user add`; a running
/// server reads quotas at each check, so a change applies at once.
async fn admin_quota(command: QuotaCommand) -> anyhow::Result<()> {
    use outboard_server::quota;
    let table = match command {
        QuotaCommand::Set { org, key, value, data } => {
            let store = open_data(data)?.1;
            quota::set(&store, &org, &key, &value).await?
        }
        QuotaCommand::Show { org, data } => {
            let store = open_data(data)?.1;
            quota::show(&store, &org).await?
        }
    };
    print!("{table}");
    Ok(())
}

async fn admin_token(command: TokenCommand) -> anyhow::Result<()> {
    use outboard_server::auth;
    let open = |data: DataArg| -> anyhow::Result<Store> { Ok(open_data(data)?.1) };
    match command {
        TokenCommand::Ls { org, data } => {
            let tokens = auth::list_tokens(&open(data)?, org.as_deref()).await?;
            println!("{:<8}  {:<16}  {:<16}  {:<20}  CREATED", "ID", "USER", "ORG", "LABEL");
            for t in tokens {
                println!(
                    "{:<8}  {:<16}  {:<16}  {:<20}  {}",
                    t.id, t.user, t.org, t.label, t.created_at
                );
            }
            Ok(())
        }
        TokenCommand::Revoke { id, data } => {
            let t = auth::revoke_by_id(&open(data)?, &id).await?;
            println!("revoked {} ({} in {}, {})", t.id, t.user, t.org, t.label);
            Ok(())
        }
    }
}

/// Raises the soft limit of open files to the hard limit (the connection caps are meaningless
/// if `accept` fails first), and warns when it is still below the caps.
fn raise_nofile_limit(max_connections: usize) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
    let effective = match setrlimit(Resource::Nofile, raised) {
        Ok(()) => limit.maximum,
        Err(_) => limit.current,
    };
    // Descriptors besides client connections: the database, sandboxes' pipes, model calls.
    const RESERVED: u64 = 256;
    if let Some(n) = effective {
        if n < max_connections as u64 + RESERVED {
            tracing::warn!(
                open_files = n,
                max_connections,
                "the open-file limit is below --max-connections plus {RESERVED}; accept may fail \
                 before the cap answers 503: raise `ulimit -n` or lower --max-connections"
            );
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let models = match &args.models {
        Some(file) => ModelCatalog::from_file(file, args.model.as_deref())?,
        None => {
            llm_config(args.provider.as_deref(), args.base_url.as_deref(), args.model.as_deref())?
                .into()
        }
    };
    let models = models.with_thinking(args.thinking_budget).map_err(anyhow::Error::msg)?;
    let store = args.data.spec(&data_dir(args.data.clone())?);
    let lease = Duration::from_secs(args.lease_secs.max(1));
    let config = ServerConfig {
        data_dir: data_dir(args.data)?,
        store: Some(store),
        workspaces: args.workspaces.clone(),
        models,
        sandbox: SandboxConfig {
            backend: match args.sandbox {
                ServeSandbox::Local(backend) => backend,
                ServeSandbox::Remote => Backend::Bwrap,
            },
            idle_freeze: std::time::Duration::from_secs(args.sandbox_freeze_after),
            idle_stop: std::time::Duration::from_secs(args.sandbox_stop_after),
            ..SandboxConfig::Bwrap
        },
        limits: Limits {
            max_steps: args.max_steps,
            task_max_steps: args.task_max_steps.max(1),
            max_upload_bytes: args.max_upload_bytes,
            network: NetLimits {
                max_connections: args.net_max_connections.max(1),
                idle_timeout: Duration::from_secs(args.net_idle_timeout.max(1)),
                session_bytes: args.net_session_bytes,
            },
            context_window: args.context_window,
            compact_percent: args.compact_at,
            result_chars: usize::try_from(args.tool_result_chars).unwrap_or(usize::MAX),
            lease,
            ..Limits::default()
        },
        net: args.net.config(args.listen)?,
        // Remote clients: none may name a directory of this host.
        allow_client_workspaces: false,
        place_on_hosts: matches!(args.sandbox, ServeSandbox::Remote),
    };
    raise_nofile_limit(config.net.max_connections);
    // Loaded before the listener so a key that cannot be used (a key file others may read, a bad
    // OUTBOARD_SECRET_KEY) stops the start with its fix instead of failing the first clone.
    outboard_server::config::secure_data_dir(&config.data_dir)?;
    let secret_key = outboard_server::secrets::SecretKey::load(&config.data_dir)?;
    tracing::info!(key = %secret_key.source(), "org secrets are sealed with this key");
    for (i, entry) in config.models.entries().iter().enumerate() {
        tracing::info!(
            name = %entry.name,
            provider = entry.llm.kind.as_str(),
            base_url = %entry.llm.base_url,
            model = %entry.llm.model,
            key = if entry.llm.api_key.is_some() { "set" } else { "none" },
            default = i == 0,
            "model"
        );
    }
    tracing::info!(data = %config.data_dir.display(), "starting");
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    // Bound before the start, so a taken address stops it before it resumes any turn.
    let metrics = match args.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--metrics-listen)"))?,
        ),
        None => None,
    };
    let handle = outboard_server::launch(listener, config).await?;
    println!("outboard-server listening on {}", handle.url());
    if let Some(listener) = metrics {
        let addr = handle.serve_metrics(listener)?;
        println!("outboard-server metrics on http://{addr}/metrics");
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}

async fn sandbox_host(args: SandboxHostArgs) -> anyhow::Result<()> {
    use outboard_server::remote::host::{Host, HostOptions};
    let sandbox = SandboxConfig {
        backend: args.sandbox,
        idle_freeze: Duration::from_secs(args.sandbox_freeze_after),
        idle_stop: Duration::from_secs(args.sandbox_stop_after),
        scratch_dir: Some(args.data.clone()),
        ..SandboxConfig::Bwrap
    };
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("cannot create the data directory {}", args.data.display()))?;
    outboard_server::config::secure_data_dir(&args.data)?;
    let mut options = HostOptions::new(args.data.clone(), sandbox.clone());
    if let Some(capacity) = args.capacity {
        options.capacity = capacity;
    }
    let host = Host::new(options, args.join_token.as_deref())?;
    outboard_server::sandbox::Sandbox::check(&sandbox).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = listener.local_addr()?;
    tracing::info!(listen = %local, fingerprint = host.fingerprint(), "sandbox host ready");
    println!("sandbox host listening on {local} (certificate {})", host.fingerprint());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        stop.cancel();
    });
    host.serve(listener, shutdown).await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
