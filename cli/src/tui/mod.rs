//! The terminal client: `outboard` with no subcommand, and `outboard attach ID [--drive]`.
//!
//! Elm-style: [`app::App`] is the state, [`app::App::handle`] the update,
//! [`render::draw`] a pure view. This module is the runtime around them: one channel merges
//! terminal input and connection events ([`net`]); effects go to the connection task; the screen
//! is redrawn only when something changed, at most once per [`FRAME`] (bursts of deltas are
//! coalesced into one frame), inside a synchronized update so no terminal shows a half-drawn
//! frame. ratatui diffs each frame against the last, so streaming never clears the screen. There
//! is no timer: an idle TUI sleeps in `recv`. The terminal is restored on every exit path,
//! including a panic (ratatui's hook, extended to mouse capture and bracketed paste).

pub mod app;
pub mod approvals;
pub mod composer;
pub mod diff;
pub mod format;
pub mod highlight;
pub mod markdown;
pub mod net;
pub mod render;
pub mod rewind;
pub mod state;
pub mod subagents;
pub mod table;
pub mod tasks;
pub mod theme;
pub mod wrap;

#[cfg(test)]
mod subagents_tests;
#[cfg(test)]
mod tasks_tests;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture, Event,
    EventStream, MouseEventKind,
};
use crossterm::terminal::{BeginSynchronizedUpdate, EndSynchronizedUpdate};
use futures_util::StreamExt;
use outboard_shared::SessionId;
use tokio::sync::mpsc;

use crate::args::ConnectArgs;
use crate::embedded::EmbeddedServer;
use crate::exit;
use app::{App, AppEvent, Effect};

/// The shortest time between two frames (~60 fps): deltas arriving faster are drawn together.
pub const FRAME: Duration = Duration::from_millis(16);

/// Events queued for the app. Input and the connection task wait when it is full, which only
/// happens if drawing stalls; 1024 covers seconds of streaming.
pub const APP_QUEUE: usize = 1024;

/// Effects queued for the connection task: a person types a few per second.
pub const EFFECT_QUEUE: usize = 64;

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
    pub theme: crate::args::ThemeChoice,
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
    let options = crate::client::ConnectOptions::from_args(&args.connect);
    let (url, token, embedded) = match &args.connect.server {
        Some(url) => match crate::client::token_from_args(&args.connect) {
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
    let code = match ui(url, token, options, initial, new_sessions, args.theme).await {
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

fn restore() {
    let _ = crossterm::execute!(std::io::stdout(), DisableMouseCapture, DisableBracketedPaste);
    ratatui::restore();
}

async fn ui(
    url: String,
    token: String,
    options: crate::client::ConnectOptions,
    initial: net::Initial,
    new_sessions: net::NewSessions,
    theme: crate::args::ThemeChoice,
) -> anyhow::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        hook(info);
    }));
    let _ = crossterm::execute!(std::io::stdout(), EnableMouseCapture, EnableBracketedPaste);
    let result = event_loop(&mut terminal, url, token, options, initial, new_sessions, theme).await;
    restore();
    result
}

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    url: String,
    token: String,
    options: crate::client::ConnectOptions,
    initial: net::Initial,
    new_sessions: net::NewSessions,
    theme: crate::args::ThemeChoice,
) -> anyhow::Result<()> {
    let size = terminal.size()?;
    let mut app = App::new(theme::Theme::new(theme), size.width, size.height);
    let (tx, mut rx) = mpsc::channel::<AppEvent>(APP_QUEUE);
    let (effects_tx, effects_rx) = mpsc::channel::<Effect>(EFFECT_QUEUE);
    let net = tokio::spawn(net::run_with(
        url,
        token,
        options,
        initial,
        new_sessions,
        effects_rx,
        tx.clone(),
    ));
    let input = tokio::spawn(read_input(tx));

    let mut last_frame = Instant::now() - FRAME;
    let mut dirty = true;
    let result = loop {
        if dirty && last_frame.elapsed() >= FRAME {
            if let Err(e) = draw(terminal, &app) {
                break Err(e);
            }
            last_frame = Instant::now();
            dirty = false;
        }
        let deadline = tokio::time::Instant::from_std(last_frame + FRAME);
        let event = tokio::select! {
            event = rx.recv() => event,
            _ = tokio::time::sleep_until(deadline), if dirty => continue,
        };
        let Some(event) = event else { break Ok(()) };
        let mut quit = false;
        for effect in app.handle(event) {
            // Quit, or the connection task is gone (it only ends when we do).
            quit |= effect == Effect::Quit || effects_tx.send(effect).await.is_err();
        }
        if quit {
            break Ok(());
        }
        dirty = true;
    };
    input.abort();
    drop(effects_tx);
    let _ = tokio::time::timeout(Duration::from_secs(2), net).await;
    result
}

/// One frame inside a synchronized update: the terminal shows it whole or not at all.
fn draw(terminal: &mut ratatui::DefaultTerminal, app: &App) -> anyhow::Result<()> {
    crossterm::queue!(terminal.backend_mut(), BeginSynchronizedUpdate)?;
    terminal.draw(|frame| render::draw(app, frame))?;
    crossterm::execute!(terminal.backend_mut(), EndSynchronizedUpdate)?;
    Ok(())
}

async fn read_input(tx: mpsc::Sender<AppEvent>) {
    let mut stream = EventStream::new();
    while let Some(Ok(event)) = stream.next().await {
        let event = match event {
            Event::Key(key) => AppEvent::Key(key),
            Event::Paste(text) => AppEvent::Paste(text),
            Event::Resize(w, h) => AppEvent::Resize(w, h),
            Event::Mouse(m) => match m.kind {
                MouseEventKind::ScrollUp => AppEvent::Scroll(app::WHEEL_LINES as i32),
                MouseEventKind::ScrollDown => AppEvent::Scroll(-(app::WHEEL_LINES as i32)),
                _ => continue,
            },
            _ => continue,
        };
        if tx.send(event).await.is_err() {
            return;
        }
    }
}
