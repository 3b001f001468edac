//! `outboard` with no subcommand, and `outboard attach ID [--drive]`: reads what the flags say,
//! connects to `--server` with its token or starts the embedded server, sends an `--upload`, and
//! hands the rest to the TUI (`outboard-tui`), which knows none of this.

use outboard_shared::SessionId;
use outboard_tui::{net, theme, Config};

use std::io::IsTerminal as _;

use crate::args::{ConnectArgs, NotifyChoice, ThemeChoice};
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
    /// How a long turn's end is announced (`--notify`).
    pub notify: NotifyChoice,
}

/// Why the TUI cannot start on this process's standard streams, if it cannot: it reads keys
/// from a terminal and draws on one.
pub fn no_terminal(stdin: bool, stdout: bool) -> Option<String> {
    let which = match (stdin, stdout) {
        (true, true) => return None,
        (false, true) => "its input is not a terminal",
        (true, false) => "its output is not a terminal",
        (false, false) => "neither its input nor its output is a terminal",
    };
    Some(format!(
        "the TUI needs a terminal, and {which}. From a script or a pipe, use \
         `outboard run \"PROMPT\"` (or `outboard run -` to read the prompt from stdin)"
    ))
}

/// The line printed after the TUI gives the terminal back: how to come back to the session.
pub fn resume_hint(session: &SessionId, server: Option<&str>) -> String {
    match server {
        Some(url) => {
            format!("to come back to this session: outboard --server {url} --session {session}")
        }
        None => format!("to come back to this session: outboard --session {session}"),
    }
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
    // After the flags' own usage errors (the user fixes those first), before anything starts:
    // a client-only build with no server named says so first, as every command of it does.
    if let (None, Some(e)) = (&args.connect.server, crate::embedded::unavailable()) {
        eprintln!("outboard: {e}");
        return e.exit_code();
    }
    if let Some(why) = no_terminal(std::io::stdin().is_terminal(), std::io::stdout().is_terminal())
    {
        eprintln!("outboard: {why}");
        return exit::USAGE;
    }
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
    let notify = match args.notify {
        NotifyChoice::Bell => outboard_tui::Notify::Bell,
        NotifyChoice::Osc9 => outboard_tui::Notify::Osc9,
        NotifyChoice::Off => outboard_tui::Notify::Off,
    };
    let config = Config { url, token, options, initial, new_sessions, theme, hint, notify };
    let code = match outboard_tui::run(config).await {
        Ok(ended) => {
            if let Some(id) = &ended.session {
                println!("{}", resume_hint(id, args.connect.server.as_deref()));
            }
            exit::OK
        }
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
