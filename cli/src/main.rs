//! The `outboard` binary: parses the command line, reads the prompt, starts the runtime and hands
//! over to the library. Exit statuses are those of [`outboard_cli::exit`].

use std::process::ExitCode;

use anyhow::Context as _;
use outboard_cli::args::{Cli, Command, ConfigCommand, SessionsCommand};
use outboard_cli::config::{Config, ConfigError};
use outboard_cli::output::{Mode, Printer};
use outboard_cli::run::{read_prompt, INTERRUPT_CHANNEL_CAPACITY};
use outboard_cli::tui_main::{self as tui, TuiArgs};
use outboard_cli::{changes, exit, files, run, sessions};
use outboard_shared::SessionId;
use tokio::sync::mpsc;

fn main() -> ExitCode {
    // The embedded server's sandboxes run this binary as their PID 1; a client-only build starts
    // no sandbox.
    #[cfg(feature = "embedded")]
    if let Some(code) = outboard_server::sandbox::init::main_if_agent() {
        return code;
    }
    let (matches, config) = match outboard_cli::config::parse(std::env::args_os().collect()) {
        Ok(parsed) => parsed,
        Err(ConfigError::Usage(e)) => e.exit(),
        Err(e) => {
            eprintln!("outboard: {e}");
            return ExitCode::from(exit::USAGE as u8);
        }
    };
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if token_on_command_line(&matches) {
        eprintln!(
            "outboard: warning: --token on the command line is visible to other users of this \
             machine (ps, /proc); set OUTBOARD_TOKEN or use --token-file FILE instead"
        );
    }
    init_tracing();
    let code = match dispatch(cli, &config) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("outboard: {err:#}");
            exit::FAILED
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn dispatch(cli: Cli, config: &Config) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("while starting the async runtime")?;
    // Claude Code's headless flags: the stream-json front end instead of the TUI (what the
    // Claude Agent SDKs run as `cli_path`).
    if cli.command.is_none() && cli.stream.any() {
        let args = outboard_cli::args::RunArgs {
            connect: cli.connect,
            json: false,
            session: None,
            images: Vec::new(),
            reconnect_for: std::time::Duration::from_secs(120),
            source: cli.source,
            upload: cli.upload,
            approve: outboard_cli::args::ApproveMode::Deny,
            plan: cli.plan,
            stream: cli.stream,
            prompt: None,
        };
        return Ok(stream_json(runtime, &args));
    }
    let Some(command) = cli.command else {
        let args = TuiArgs {
            connect: cli.connect,
            drive: cli.session.is_some(),
            attach: cli.session.map(SessionId),
            source: cli.source.repo_spec(),
            network: cli.source.network,
            context_window: cli.source.context_window,
            upload: cli.upload,
            plan: cli.plan,
            theme: cli.theme,
            notify: cli.notify,
        };
        return Ok(runtime.block_on(tui::run(args)));
    };
    match command {
        Command::Run(args) if args.stream.any() => Ok(stream_json(runtime, &args)),
        Command::Run(args) => {
            let prompt =
                match read_prompt(args.prompt.as_deref().unwrap_or(""), std::io::stdin().lock()) {
                    Ok(prompt) => prompt,
                    Err(err) => {
                        eprintln!("outboard: {err}");
                        return Ok(err.exit_code());
                    }
                };
            let mode = if args.json { Mode::Json } else { Mode::Plain };
            let mut printer = Printer::new(mode, std::io::stdout(), std::io::stderr());
            Ok(runtime.block_on(async {
                let mut interrupts = forward_ctrl_c();
                run::run(&args, prompt, &mut interrupts, &mut printer).await
            }))
        }
        Command::Sessions(args) => match &args.command {
            Some(SessionsCommand::Rm(rm)) => {
                Ok(runtime.block_on(changes::remove(rm, &mut std::io::stdout())))
            }
            Some(SessionsCommand::Restore(one)) => {
                Ok(runtime.block_on(changes::restore(one, &mut std::io::stdout())))
            }
            None => Ok(runtime.block_on(sessions::sessions(&args, &mut std::io::stdout()))),
        },
        Command::Models(args) => {
            Ok(runtime.block_on(outboard_cli::models::models(&args, &mut std::io::stdout())))
        }
        Command::Config(ConfigCommand::Show) => {
            config.show(&mut std::io::stdout()).context("while printing the settings")?;
            Ok(exit::OK)
        }
        Command::Completions { shell } => {
            let cmd = <Cli as clap::CommandFactory>::command();
            outboard_cmdline::manual::completions(cmd, shell, &mut std::io::stdout());
            Ok(exit::OK)
        }
        Command::Man { dir } => {
            let cmd = <Cli as clap::CommandFactory>::command();
            outboard_cmdline::manual::man(cmd, dir.as_deref(), &mut std::io::stdout())?;
            Ok(exit::OK)
        }
        Command::Approve(args) => {
            Ok(runtime.block_on(outboard_cli::approve::approve(&args, &mut std::io::stdout())))
        }
        Command::Deny(args) => {
            Ok(runtime.block_on(outboard_cli::approve::deny(&args, &mut std::io::stdout())))
        }
        Command::Answer(args) => Ok(runtime
            .block_on(outboard_cli::approve::answer_questions(&args, &mut std::io::stdout()))),
        Command::Plans(command) => Ok(runtime.block_on(outboard_cli::files::plans::plans(
            &command,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        ))),
        Command::Checkpoints(args) => {
            Ok(runtime.block_on(outboard_cli::rewind::checkpoints(&args, &mut std::io::stdout())))
        }
        Command::Rewind(args) => {
            Ok(runtime.block_on(outboard_cli::rewind::rewind(&args, &mut std::io::stdout())))
        }
        Command::Fork(args) => {
            Ok(runtime.block_on(outboard_cli::rewind::fork(&args, &mut std::io::stdout())))
        }
        Command::Compact(args) => {
            Ok(runtime.block_on(outboard_cli::compact::compact(&args, &mut std::io::stdout())))
        }
        Command::Usage(args) => {
            Ok(runtime.block_on(outboard_cli::usage::usage(&args, &mut std::io::stdout())))
        }
        Command::Diff(args) => Ok(runtime.block_on(changes::diff(&args, &mut std::io::stdout()))),
        Command::Apply(args) => Ok(runtime.block_on(changes::apply(&args, &mut std::io::stderr()))),
        Command::Push(args) => Ok(runtime.block_on(changes::push(&args, &mut std::io::stdout()))),
        Command::Memory(command) => Ok(runtime.block_on(files::memory(
            &command,
            std::io::stdin().lock(),
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        ))),
        Command::Skills(command) => Ok(runtime.block_on(files::skills(
            &command,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        ))),
        Command::Agents(command) => Ok(runtime.block_on(files::agents::agents(
            &command,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        ))),
        Command::Attach(args) => {
            let args = TuiArgs {
                connect: args.connect,
                attach: Some(SessionId(args.session_id)),
                drive: args.drive,
                source: None,
                network: outboard_shared::SessionNetwork::Org,
                context_window: None,
                upload: None,
                plan: false,
                theme: cli.theme,
                notify: cli.notify,
            };
            Ok(runtime.block_on(tui::run(args)))
        }
    }
}

/// The stream-json front end on this process's stdin and stdout. The runtime is shut down
/// without waiting: a stdin read still blocked in its thread must not keep the process alive.
fn stream_json(runtime: tokio::runtime::Runtime, args: &outboard_cli::args::RunArgs) -> i32 {
    let code = runtime.block_on(async {
        let stdin = tokio::io::BufReader::new(tokio::io::stdin());
        outboard_cli::streamjson::run(args, stdin, std::io::stdout().lock()).await
    });
    runtime.shutdown_background();
    code
}

/// Whether `--token` was given on the command line (not through `OUTBOARD_TOKEN`), at any level
/// of subcommand.
fn token_on_command_line(matches: &clap::ArgMatches) -> bool {
    let here = matches.ids().any(|id| id.as_str() == "token")
        && matches.value_source("token") == Some(clap::parser::ValueSource::CommandLine);
    here || matches.subcommand().is_some_and(|(_, sub)| token_on_command_line(sub))
}

/// One message per Ctrl-C. Installing the handler replaces the default "die on SIGINT", so the
/// run decides: the first interrupts the turn, the second exits 130.
fn forward_ctrl_c() -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel(INTERRUPT_CHANNEL_CAPACITY);
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.try_send(()).is_err() && tx.is_closed() {
                break;
            }
        }
    });
    rx
}

/// Logs go to stderr, off unless `RUST_LOG` asks for them: stdout belongs to the run's output.
fn init_tracing() {
    // Capped for the WebSocket library: it would log the hello, token included, at trace.
    let filter = outboard_cmdline::log_filter(std::env::var("RUST_LOG").ok().as_deref(), "off");
    let _ =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
