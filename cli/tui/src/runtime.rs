//! The runtime around the state machine ([`crate::app::App`]) and the view
//! ([`crate::render::draw`]): one channel merges terminal input and connection events
//! ([`crate::net`]); effects go to the connection task; the screen is redrawn only when something
//! changed, at most once per [`FRAME`] (bursts of deltas are coalesced into one frame), inside a
//! synchronized update so no terminal shows a half-drawn frame. ratatui diffs each frame against
//! the last, so streaming never clears the screen. There is no timer: an idle TUI sleeps in
//! `recv`. The terminal is restored on every exit path, including a panic (ratatui's hook,
//! extended to mouse capture and bracketed paste).

use std::time::{Duration, Instant};

use crossterm::event::{
    DisableBracketedPaste, DisableMouseCapture, EnableBracketedPaste, EnableMouseCapture, Event,
    EventStream, MouseEventKind,
};
use crossterm::terminal::{BeginSynchronizedUpdate, EndSynchronizedUpdate};
use futures_util::StreamExt;
use outboard_client::ConnectOptions;
use tokio::sync::mpsc;

use crate::app::{self, App, AppEvent, Effect};
use crate::theme::{Theme, ThemeChoice};
use crate::{net, render};

/// What the TUI needs from the binary (no `Debug`: it holds the token): where the server is (the binary has started the embedded
/// one, or read the flags and the token), what to open first, and how to draw.
#[derive(Clone)]
pub struct Config {
    /// The server's `ws(s)://` URL.
    pub url: String,
    /// The bearer token.
    pub token: String,
    /// The transport options (`--ca-cert`, `--insecure`).
    pub options: ConnectOptions,
    /// What to open first.
    pub initial: net::Initial,
    /// How new sessions are made.
    pub new_sessions: net::NewSessions,
    /// Colours or none.
    pub theme: ThemeChoice,
    /// What the binary adds after a connection error's message (its flags), when the server
    /// refuses for good.
    pub hint: net::Hint,
}

/// The shortest time between two frames (~60 fps): deltas arriving faster are drawn together.
pub const FRAME: Duration = Duration::from_millis(16);

/// Events queued for the app. Input and the connection task wait when it is full, which only
/// happens if drawing stalls; 1024 covers seconds of streaming.
pub const APP_QUEUE: usize = 1024;

/// Effects queued for the connection task: a person types a few per second.
pub const EFFECT_QUEUE: usize = 64;

fn restore() {
    let _ = crossterm::execute!(std::io::stdout(), DisableMouseCapture, DisableBracketedPaste);
    ratatui::restore();
}

/// Takes the terminal, runs the TUI until the user quits, and gives the terminal back.
pub async fn run(config: Config) -> std::io::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        hook(info);
    }));
    let _ = crossterm::execute!(std::io::stdout(), EnableMouseCapture, EnableBracketedPaste);
    let result = event_loop(&mut terminal, config).await;
    restore();
    result
}

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    config: Config,
) -> std::io::Result<()> {
    let Config { url, token, options, initial, new_sessions, theme, hint } = config;
    let size = terminal.size()?;
    let mut app = App::new(Theme::new(theme), size.width, size.height);
    let (tx, mut rx) = mpsc::channel::<AppEvent>(APP_QUEUE);
    let (effects_tx, effects_rx) = mpsc::channel::<Effect>(EFFECT_QUEUE);
    let link = net::Link { url, token, options, hint };
    let net = tokio::spawn(net::run_with(link, initial, new_sessions, effects_rx, tx.clone()));
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
fn draw(terminal: &mut ratatui::DefaultTerminal, app: &App) -> std::io::Result<()> {
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
