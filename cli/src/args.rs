//! The command line of `outboard`: clap definitions only, no behaviour. Scripts and tests depend on
//! these flags and their environment variables, so changing one is a breaking change.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// `outboard`: talk to an Outboard agent from a terminal or a script.
#[derive(Debug, Clone, PartialEq, Parser)]
#[command(name = "outboard", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do; with none, the TUI opens on a new session.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Connection flags of the TUI (when no subcommand is given).
    #[command(flatten)]
    pub connect: ConnectArgs,
}

/// The subcommands.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum Command {
    /// Run one turn headlessly: send PROMPT, stream the answer, exit with the turn's status
    /// (0 completed, 1 failed, 2 usage or configuration, 3 cannot connect or not authorised).
    Run(RunArgs),
    /// List the sessions of your org.
    Sessions(SessionsArgs),
    /// Open the TUI on an existing session (yours or a teammate's) as a watcher, or as the
    /// driver with --drive (the owner drives at once; anyone else asks the driver).
    Attach(AttachArgs),
}

/// `outboard attach`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct AttachArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Ask to drive the session.
    #[arg(long)]
    pub drive: bool,
    /// The session's id (see `outboard sessions`).
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
}

/// Where the server is and how to reach it; with no `--server`, one is started in-process.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct ConnectArgs {
    /// The server's WebSocket URL (ws://HOST:PORT). Without it, an embedded server is started.
    #[arg(long, env = "OUTBOARD_SERVER", value_name = "URL")]
    pub server: Option<String>,
    /// Your bearer token (required with --server).
    #[arg(long, env = "OUTBOARD_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Embedded mode: the model provider.
    #[arg(long, env = "OUTBOARD_PROVIDER", value_parser = ["anthropic", "openai"])]
    pub provider: Option<String>,
    /// Embedded mode: the provider's base URL (a local or mock server).
    #[arg(long, env = "OUTBOARD_BASE_URL", value_name = "URL")]
    pub base_url: Option<String>,
    /// Embedded mode: the model name.
    #[arg(long, env = "OUTBOARD_MODEL", value_name = "NAME")]
    pub model: Option<String>,
    /// Embedded mode: the data directory (default: $XDG_DATA_HOME/outboard).
    #[arg(long = "data", env = "OUTBOARD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// `outboard run`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct RunArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print one JSON object per line (the headless schema) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Continue this session instead of creating one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// The message to send; `-` reads it from stdin.
    #[arg(value_name = "PROMPT")]
    pub prompt: String,
}

/// `outboard sessions`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct SessionsArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;
    use pretty_assertions::assert_eq;

    fn run_args(argv: &[&str]) -> RunArgs {
        match Cli::try_parse_from(argv).unwrap().command {
            Some(Command::Run(args)) => args,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn run_with_every_flag() {
        let args = run_args(&[
            "outboard",
            "run",
            "--server",
            "ws://127.0.0.1:7700",
            "--token",
            "tok",
            "--json",
            "--session",
            "s_1",
            "--provider",
            "openai",
            "--base-url",
            "http://127.0.0.1:9000/v1",
            "--model",
            "m",
            "--data",
            "/tmp/ob",
            "list the files",
        ]);
        assert_eq!(
            args,
            RunArgs {
                connect: ConnectArgs {
                    server: Some("ws://127.0.0.1:7700".into()),
                    token: Some("tok".into()),
                    provider: Some("openai".into()),
                    base_url: Some("http://127.0.0.1:9000/v1".into()),
                    model: Some("m".into()),
                    data_dir: Some("/tmp/ob".into()),
                },
                json: true,
                session: Some("s_1".into()),
                prompt: "list the files".into(),
            }
        );
    }

    #[test]
    fn run_defaults_and_stdin_prompt() {
        // Assumes no OUTBOARD_* variable is set in the test environment.
        let args = run_args(&["outboard", "run", "-"]);
        assert_eq!(
            args,
            RunArgs {
                connect: ConnectArgs::default(),
                json: false,
                session: None,
                prompt: "-".into()
            }
        );
    }

    #[test]
    fn no_subcommand_is_allowed() {
        assert_eq!(
            Cli::try_parse_from(["outboard"]).unwrap(),
            Cli { command: None, connect: ConnectArgs::default() }
        );
        let cli =
            Cli::try_parse_from(["outboard", "--server", "ws://h:1", "--token", "t"]).unwrap();
        assert_eq!(cli.connect.server.as_deref(), Some("ws://h:1"));
        assert_eq!(cli.connect.token.as_deref(), Some("t"));
    }

    #[test]
    fn attach_flags() {
        let cli =
            Cli::try_parse_from(["outboard", "attach", "s_1", "--drive", "--token", "t"]).unwrap();
        let Some(Command::Attach(args)) = cli.command else { panic!() };
        assert_eq!(args.session_id, "s_1");
        assert!(args.drive);
        assert_eq!(args.connect.token.as_deref(), Some("t"));
    }

    #[test]
    fn usage_errors() {
        let missing = Cli::try_parse_from(["outboard", "run"]).unwrap_err();
        assert_eq!(missing.kind(), ErrorKind::MissingRequiredArgument);
        assert_eq!(missing.exit_code(), 2);
        let provider =
            Cli::try_parse_from(["outboard", "run", "--provider", "llama", "hi"]).unwrap_err();
        assert_eq!(provider.kind(), ErrorKind::InvalidValue);
        assert_eq!(provider.exit_code(), 2);
    }

    #[test]
    fn sessions_flags() {
        let cli = Cli::try_parse_from(["outboard", "sessions", "--json", "--token", "t"]).unwrap();
        let Some(Command::Sessions(args)) = cli.command else { panic!() };
        assert!(args.json);
        assert_eq!(args.connect.token.as_deref(), Some("t"));
    }
}
