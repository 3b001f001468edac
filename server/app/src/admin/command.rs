//! `outboard-server admin …`: the commands and their flags.

use crate::args::*;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub(crate) enum AdminCommand {
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
    /// The org's web search (`WebSearch`): off until set.
    Search {
        #[command(subcommand)]
        command: SearchCommand,
    },
    /// The org's hooks: webhooks the server calls on an event of every session of the org
    /// (Claude Code's hooks contract), signed with the org secret for the URL's host; they fail
    /// closed and a repository cannot turn them off.
    Hook {
        #[command(subcommand)]
        command: HookCommand,
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
pub(crate) enum HostsCommand {
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
    /// Pin the certificate a host presents now, after its key changed (its data directory was
    /// lost or rebuilt): shows the pinned and the new fingerprints; pins only with --yes. The
    /// host must still prove the join token. Sessions placed on it stay placed.
    Repin {
        /// The host's name.
        name: String,
        /// Pin the new key (without it, only show the change).
        #[arg(long)]
        yes: bool,
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
pub(crate) enum PolicyCommand {
    /// Set the decision for a tool PATTERN: a tool name with `*` wildcards (`mcp__github__*`,
    /// `Bash`, `*`), optionally with an argument pattern (`Write(/skills/**)`,
    /// `Edit(/memory/MEMORY.md)`, `Bash(git push*)`, `WebFetch(https://*.example.com/*)`).
    /// The most specific matching rule applies; calls no rule matches run.
    ///
    /// A `Bash(…)` pattern is matched against each simple command of the parsed line (in lists,
    /// pipelines, subshells, `$(…)`, `bash -c '…'`, `eval '…'`, behind `env`, `sudo`,
    /// `timeout`, `nice`, `xargs`…), its words unquoted and its name without its directory, and
    /// against the whole line; the strictest answer wins. So `Bash(git push*)` catches
    /// ` git push`, `true; git push`, `/usr/bin/git push` and `c\url` for `Bash(curl*)`. A
    /// command only known when it runs (`$cmd push`, `eval "$x"`, `git $sub`) asks a person when
    /// a stricter rule could match it; a headless run refuses it. A rule does not see inside
    /// scripts or programs a command runs (`bash x.sh`, `make`, `python -c …`): for those, deny
    /// or ask for the interpreter itself. An allow for the session covers the rules that asked,
    /// for that tool, never the whole tool (unless the rule is the tool's name).
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
pub(crate) enum McpCommand {
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
pub(crate) enum SecretCommand {
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
pub(crate) enum NetworkCommand {
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
pub(crate) enum CaCommand {
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
pub(crate) enum QuotaCommand {
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
pub(crate) enum TokenCommand {
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
pub(crate) enum UserCommand {
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

#[derive(Subcommand)]
pub(crate) enum SearchCommand {
    /// Turn web search on for an org: BACKEND is `anthropic` (the Anthropic API's own
    /// web_search tool, in sessions on that API), `openai` (the Responses API's own, in sessions
    /// on that API), `searxng:URL` (a SearXNG instance's JSON API, for any provider; loopback
    /// and private addresses allowed) or `brave` / `brave:URL` (the Brave Search API; its key is
    /// the org secret for the API's host: `admin secret set --org ORG --host
    /// api.search.brave.com brave`). Results are held to the org's network policy and WebFetch rules.
    Set {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// anthropic | openai | searxng:URL | brave | brave:URL
        backend: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// Print an org's web search backend.
    Show {
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// Turn web search off for an org (WebSearch is no longer offered).
    Clear {
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
}

#[derive(Subcommand)]
pub(crate) enum HookCommand {
    /// Add a webhook: the server POSTs the hook's JSON input to URL, signed in
    /// `X-Outboard-Signature: sha256=<HMAC-SHA256 of the body>` under the org secret for URL's
    /// host (`admin secret set --org ORG --host HOST NAME`); the answer is read as a command
    /// hook's stdout. No answer within the timeout, an error or no secret: the hook blocks.
    Add {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// PreToolUse, PostToolUse, PostToolUseFailure, UserPromptSubmit, Stop or SessionStart.
        #[arg(long)]
        event: String,
        /// The tool names it is called for: `Bash`, `Edit|Write`, `mcp__*`; empty or `*`: all.
        #[arg(long, default_value = "")]
        matcher: String,
        /// Seconds to wait for the answer (1 to 60; default 10).
        #[arg(long)]
        timeout: Option<u64>,
        /// http:// or https:// URL (no credentials in it).
        url: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// List an org's hooks.
    List {
        /// Organisation name.
        #[arg(long)]
        org: String,
        #[command(flatten)]
        data: DataArg,
    },
    /// Remove a hook by its id.
    Remove {
        /// Organisation name.
        #[arg(long)]
        org: String,
        /// The hook's id (`admin hook list`).
        id: String,
        #[command(flatten)]
        data: DataArg,
    },
}
