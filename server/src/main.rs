//! `outboard-server`: flags and environment in, [`outboard_server::launch`] out.
//!
//! ```text
//! outboard-server serve [--listen 127.0.0.1:7700] [--data DIR]
//!                       [--provider anthropic|openai] [--base-url URL] [--model NAME]
//!                       [--sandbox bwrap|unsafe-host]
//! outboard-server admin user add NAME --org ORG      # prints the new user's token
//! outboard-server admin quota set --org ORG KEY VALUE # VALUE: a number, or `default`
//! outboard-server admin quota show --org ORG
//! ```
//! `serve` prints `outboard-server listening on ws://ADDR` as its first line on stdout (tests
//! that listen on port 0 read the address from it); logs go to stderr.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use outboard_server::config::{default_data_dir, default_listen, llm_config};
use outboard_server::sandbox::{Backend, SandboxConfig};
use outboard_server::store::{Durability, Store};
use outboard_server::{Limits, ServerConfig};

#[derive(Parser)]
#[command(name = "outboard-server", version, about = "The Outboard agent server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server.
    Serve(ServeArgs),
    /// Administer users and orgs.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
}

#[derive(Args)]
struct DataArg {
    /// Data directory (SQLite file and workspaces).
    #[arg(long = "data", env = "OUTBOARD_DATA_DIR")]
    data: Option<PathBuf>,
}

#[derive(Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "OUTBOARD_LISTEN", default_value_t = default_listen())]
    listen: SocketAddr,
    #[command(flatten)]
    data: DataArg,
    /// Model provider: anthropic or openai (OpenAI-compatible servers too).
    #[arg(long, env = "OUTBOARD_PROVIDER")]
    provider: Option<String>,
    /// Provider base URL (openai: including /v1; anthropic: without).
    #[arg(long, env = "OUTBOARD_BASE_URL")]
    base_url: Option<String>,
    /// Model name.
    #[arg(long, env = "OUTBOARD_MODEL")]
    model: Option<String>,
    /// Where Bash commands run: `bwrap` (bubblewrap; fails at start if unavailable) or
    /// `unsafe-host` (on the host, unisolated; only where namespaces are unavailable).
    #[arg(long, env = "OUTBOARD_SANDBOX", default_value = "bwrap", value_parser = parse_backend)]
    sandbox: Backend,
    /// Seconds of idle before a session's sandbox is frozen.
    #[arg(long, env = "OUTBOARD_SANDBOX_FREEZE_AFTER", default_value_t = SandboxConfig::Bwrap.idle_freeze.as_secs())]
    sandbox_freeze_after: u64,
    /// Seconds of idle before a session's sandbox is stopped (its workspace stays).
    #[arg(long, env = "OUTBOARD_SANDBOX_STOP_AFTER", default_value_t = SandboxConfig::Bwrap.idle_stop.as_secs())]
    sandbox_stop_after: u64,
    /// Model calls per turn before it stops.
    #[arg(long, default_value_t = Limits::default().max_steps)]
    max_steps: u32,
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
    if let Some(code) = outboard_server::sandbox::agent::main_if_agent() {
        return code;
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OUTBOARD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
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
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("outboard-server: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn parse_backend(s: &str) -> Result<Backend, String> {
    s.parse()
}

fn data_dir(arg: DataArg) -> anyhow::Result<PathBuf> {
    match arg.data {
        Some(dir) => Ok(dir),
        None => Ok(default_data_dir()?),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Admin {
            command: AdminCommand::User { command: UserCommand::Add { name, org, data } },
        } => {
            let dir = data_dir(data)?;
            let store = Store::open(&dir.join("outboard.db"), Durability::Normal)?;
            let (_, token) = store.add_user(&org, &name).await?;
            println!("{token}");
            Ok(())
        }
        Command::Admin { command: AdminCommand::Quota { command } } => admin_quota(command).await,
    }
}

/// `admin quota set|show`: works on the data dir directly, like `admin user add`; a running
/// server reads quotas at each check, so a change applies at once.
async fn admin_quota(command: QuotaCommand) -> anyhow::Result<()> {
    use outboard_server::quota;
    let table = match command {
        QuotaCommand::Set { org, key, value, data } => {
            let store = Store::open(&data_dir(data)?.join("outboard.db"), Durability::Normal)?;
            quota::set(&store, &org, &key, &value).await?
        }
        QuotaCommand::Show { org, data } => {
            let store = Store::open(&data_dir(data)?.join("outboard.db"), Durability::Normal)?;
            quota::show(&store, &org).await?
        }
    };
    print!("{table}");
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let llm =
        llm_config(args.provider.as_deref(), args.base_url.as_deref(), args.model.as_deref())?;
    let config = ServerConfig {
        data_dir: data_dir(args.data)?,
        llm,
        sandbox: SandboxConfig {
            backend: args.sandbox,
            idle_freeze: std::time::Duration::from_secs(args.sandbox_freeze_after),
            idle_stop: std::time::Duration::from_secs(args.sandbox_stop_after),
            ..SandboxConfig::Bwrap
        },
        limits: Limits { max_steps: args.max_steps, ..Limits::default() },
    };
    tracing::info!(
        provider = config.llm.kind.as_str(),
        base_url = %config.llm.base_url,
        model = %config.llm.model,
        key = if config.llm.api_key.is_some() { "set" } else { "none" },
        data = %config.data_dir.display(),
        "starting"
    );
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let handle = outboard_server::launch(listener, config).await?;
    println!("outboard-server listening on {}", handle.url());
    shutdown_signal().await;
    tracing::info!("shutting down");
    handle.shutdown().await;
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
