//! `outboard-server`: flags and environment in, [`outboard_server::launch`] out.
//!
//! ```text
//! outboard-server serve [--config FILE] [--listen 127.0.0.1:7700] [--data DIR]
//!                       [--provider anthropic|openai|responses] [--base-url URL] [--model NAME]
//!                       [--sandbox bwrap|unsafe-host|remote]
//!                       [--tls-cert PEM --tls-key PEM] [--insecure]
//!                       [--handshake-timeout SECS] [--idle-timeout SECS]
//!                       [--max-connections N] [--max-connections-per-ip N]
//!                       [--metrics-listen 127.0.0.1:9464]
//!                       [--otlp-endpoint http://127.0.0.1:4318 [--otlp-content]]
//! outboard-server config show [--config FILE]   # each serve setting, its value and source
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

mod admin;
mod args;
mod configfile;
mod serve;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use admin::*;
use args::*;
use outboard_server::telemetry::Telemetry;
use serve::{sandbox_host, serve};

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
    /// The configuration file of `serve` (`config show --config FILE`).
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
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

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print every setting of `serve` with the value in effect and where it comes from: the
    /// environment, the file (with its line), or the default. Secrets show as set or unset.
    Show {
        /// The configuration file, as `serve --config` takes it.
        #[arg(long, env = "OUTBOARD_SERVER_CONFIG", value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    if let Some(code) = outboard_server::sandbox::init::main_if_agent() {
        return code;
    }
    // Everything this process creates (database, workspaces, org projections) is private to its
    // user; the data dir is also checked and tightened at start (config::secure_data_dir).
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let (cli, file) = match configfile::parse(Cli::command(), std::env::args_os().collect()) {
        Ok((matches, file)) => match Cli::from_arg_matches(&matches) {
            Ok(cli) => (cli, file),
            Err(e) => e.exit(),
        },
        Err(e) => {
            eprintln!("outboard-server: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("outboard-server: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let telemetry = match telemetry(&cli, &runtime) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("outboard-server: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(telemetry.as_ref());
    if telemetry.as_ref().is_some_and(Telemetry::cleartext) {
        tracing::warn!("--insecure: exporting traces over clear-text http:// off loopback");
    }
    let code = match runtime.block_on(run(cli, file)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("outboard-server: {e:#}");
            ExitCode::from(2)
        }
    };
    // After `serve` returned (a signal, or an error), with the runtime still up for the export.
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    code
}

/// The OTLP exporter of `serve`, when an endpoint is configured (see
/// [`outboard_server::telemetry`]); nothing of OpenTelemetry is built otherwise.
fn telemetry(
    cli: &Cli,
    runtime: &tokio::runtime::Runtime,
) -> Result<Option<Telemetry>, outboard_server::telemetry::TelemetryError> {
    let Command::Serve(args) = &cli.command else { return Ok(None) };
    let endpoint = args.otlp_endpoint.as_deref();
    if !outboard_server::telemetry::wanted(endpoint) {
        return Ok(None);
    }
    Telemetry::start(endpoint, args.net.insecure, runtime.handle().clone()).map(Some)
}

/// Logs to stderr under `OUTBOARD_LOG`; with `telemetry`, the exporter's layer beside it, each
/// with its own filter (the log's keeps the spans' target off, the exporter's wants only it).
/// Without, the subscriber is the log alone, as it was before there was an exporter.
fn init_logging(telemetry: Option<&Telemetry>) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let filter =
        outboard_server::config::log_filter(std::env::var("OUTBOARD_LOG").ok().as_deref(), "info");
    match telemetry {
        None => {
            tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init()
        }
        Some(telemetry) => tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(filter))
            .with(telemetry.layer())
            .init(),
    }
}

async fn run(cli: Cli, file: Option<outboard_flagfile::FlagFile>) -> anyhow::Result<ExitCode> {
    let done = ExitCode::SUCCESS;
    match cli.command {
        Command::Serve(args) => serve(*args, file.as_ref()).await.map(|()| done),
        Command::Config { command: ConfigCommand::Show { config } } => {
            configfile::show(&Cli::command(), config.as_deref(), &mut std::io::stdout())?;
            Ok(done)
        }
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
        Command::Admin { command: AdminCommand::Search { command } } => admin_search(command).await,
        Command::Admin { command: AdminCommand::Hook { command } } => admin_hook(command).await,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every boolean flag with an environment variable takes the usual spellings from it
    /// (`OUTBOARD_INSECURE=1` was refused with "possible values: true, false").
    #[test]
    fn every_boolean_variable_takes_the_usual_spellings() {
        let checked = boolean_env_args(&<Cli as clap::CommandFactory>::command());
        assert!(checked.contains(&"OUTBOARD_INSECURE".to_owned()), "{checked:?}");
    }

    /// Walks `cmd` and its subcommands; checks each flag with an environment variable parses
    /// every boolean spelling and refuses a non-boolean; returns the variables checked.
    fn boolean_env_args(cmd: &clap::Command) -> Vec<String> {
        let mut checked = Vec::new();
        for arg in cmd.get_arguments() {
            let (Some(env), clap::ArgAction::SetTrue) = (arg.get_env(), arg.get_action()) else {
                continue;
            };
            // The variable's value goes through the flag's value parser: parse it as a value.
            let id = arg.get_id().to_string();
            let valued = arg.clone().action(clap::ArgAction::Set).long("value").env(None);
            let parse = |word: &str| {
                let matches = clap::Command::new("t")
                    .arg(valued.clone())
                    .try_get_matches_from(["t", "--value", word])?;
                Ok::<_, clap::Error>(matches.get_one::<bool>(&id).copied())
            };
            for (word, want) in [("1", true), ("0", false), ("true", true), ("FALSE", false)]
                .into_iter()
                .chain([("yes", true), ("No", false), ("on", true), ("OFF", false)])
            {
                let parsed = parse(word);
                assert!(
                    matches!(parsed, Ok(Some(got)) if got == want),
                    "{env:?}={word}: {parsed:?}"
                );
            }
            assert!(parse("maybe").is_err(), "{env:?}=maybe");
            checked.push(env.to_string_lossy().into_owned());
        }
        for sub in cmd.get_subcommands() {
            checked.extend(boolean_env_args(sub));
        }
        checked
    }

    #[test]
    fn a_password_in_the_store_url_is_seen() {
        for url in [
            "postgres://u:secret@db:5432/outboard",
            "postgresql://u:s%40cret@db/x?sslmode=require",
            "host=db user=u password=secret",
            "postgres://u@db/x?password=secret",
        ] {
            assert!(store_holds_password(url), "{url}");
        }
        for url in ["postgres://u@db:5432/outboard", "postgres://db/x", "/var/lib/outboard.db"] {
            assert!(!store_holds_password(url), "{url}");
        }
    }
}
