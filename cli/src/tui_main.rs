//! `outboard` with no subcommand, and `outboard attach ID [--drive]`: reads what the flags say,
//! connects to `--server` with its token or starts the embedded server, sends an `--upload`, and
//! hands the rest to the TUI (`outboard-tui`), which knows none of this.

use outboard_shared::SessionId;
use outboard_tui::{net, theme, Config};

use crate::args::{ConnectArgs, ThemeChoice};
use crate::connect::ExitCode as _;
use crate::embedded::EmbeddedServer;
use crate::exit;

/// What the TUI opens.
#[derive(Debug, Clone, PartialEq)]
pub struct TuiArgs {
    /// Where the server is.
    pub connect: ConnectArgs,
    /// Attach to this session instead of creating one.
    pub attach: Option<SessionId>,
    /// Ask to drive it.
    pub drive: bool,
    /// New sessions are made from this (`--repo`).
    pub source: Option<outboard_shared::SourceSpec>,
    /// What new sessions' sandboxes may reach (`--network`).
    pub network: outboard_shared::SessionNetwork,
    /// New sessions' context window in tokens, when not the server's (`--context-window`).
    pub context_window: Option<u64>,
    /// Send this directory first and work on the copy (`outboard --upload [DIR]`, with
    /// `--server` only).
    pub upload: Option<std::path::PathBuf>,
    /// Put the session in plan mode before the first message (`outboard --plan`).
    pub plan: bool,
    /// Colours or none (`--theme`).
    pub theme: ThemeChoice,
}

/// Runs the TUI until the user quits; returns the exit status.
pub async fn run(args: TuiArgs) -> i32 {
    // Checked before anything starts: a refused directory is a usage error.
    if args.upload.is_some() && args.connect.server.is_none() {
        eprintln!(
            "outboard: --upload sends a tree to a remote server (--server URL); embedded mode \
             works in place: use --workspace DIR"
        );
        return exit::USAGE;
    }
    let initial = match args.attach {
        Some(id) => net::Initial::Attach(id, args.drive),
        None if args.source.is_some() => match args.source.clone() {
            Some(spec) => net::Initial::NewFrom(spec),
            None => net::Initial::New,
        },
        None => match crate::embedded::session_workspace(&args.connect) {
            Ok(Some(dir)) => net::Initial::NewIn(dir),
            Ok(None) => net::Initial::New,
            Err(e) => {
                eprintln!("outboard: {e}");
                return e.exit_code();
            }
        },
    };
    let options = crate::connect::options(&args.connect);
    let (url, token, embedded) = match &args.connect.server {
        Some(url) => match crate::connect::token_from_args(&args.connect) {
            Ok(Some(token)) => (url.clone(), token, None),
            Ok(None) => {
                eprintln!("outboard: --server {url} needs a token: set OUTBOARD_TOKEN or pass --token-file FILE");
                return exit::USAGE;
            }
            Err(e) => {
                eprintln!("outboard: {e}");
                return e.exit_code();
            }
        },
        None => match EmbeddedServer::start(&args.connect, true).await {
            Ok(server) => (server.url(), server.token().to_owned(), Some(server)),
            Err(e) => {
                eprintln!("outboard: {e}");
                return e.exit_code();
            }
        },
    };

    let initial = match (&args.upload, initial) {
        (Some(dir), net::Initial::New) => {
            // Before the screen is taken: the progress line goes to the terminal as it is.
            let dir = dir.clone();
            let packed = match tokio::task::spawn_blocking(move || crate::upload::pack(&dir)).await
            {
                Ok(Ok(packed)) => packed,
                Ok(Err(e)) => {
                    eprintln!("outboard: {e}");
                    return e.exit_code();
                }
                Err(e) => {
                    eprintln!("outboard: cannot pack the upload: {e}");
                    return exit::FAILED;
                }
            };
            let mode = crate::upload::ProgressMode::Redraw;
            match crate::upload::send(&packed, &url, &token, &options, mode).await {
                Ok(sent) => net::Initial::FromUpload(sent.upload_id),
                Err(e) => {
                    eprintln!("outboard: {e}");
                    return e.exit_code();
                }
            }
        }
        (_, initial) => initial,
    };
    let new_sessions = net::NewSessions {
        network: args.network,
        context_window: args.context_window,
        model: args.connect.model.clone(),
        plan: args.plan,
    };
    let theme = match args.theme {
        ThemeChoice::Auto => theme::ThemeChoice::Auto,
        ThemeChoice::Color => theme::ThemeChoice::Color,
        ThemeChoice::Mono => theme::ThemeChoice::Mono,
    };
    let hint = crate::connect::hint;
    let config = Config { url, token, options, initial, new_sessions, theme, hint };
    let code = match outboard_tui::run(config).await {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("outboard: {e:#}");
            exit::FAILED
        }
    };
    if let Some(server) = embedded {
        server.shutdown().await;
    }
    code
}
