//! The runtime around the state machine ([`crate::app::App`]) and the view
//! ([`crate::render::draw`]): one channel merges terminal input and connection events
//! ([`crate::net`]); effects go to the connection task; the screen is redrawn only when something
//! changed, at most once per [`FRAME`] (bursts of deltas are coalesced into one frame), inside a
//! synchronized update so no terminal shows a half-drawn frame. ratatui diffs each frame against
//! the last, so streaming never clears the screen. The only timer is the app's own
//! ([`App::wake_at`]: a prompt arming, the spinner while a turn runs, a notice expiring); an idle
//! TUI sleeps in `recv`. Every event reaches the app with its time on one clock (a key's is when
//! it was read, so a key typed before a prompt was drawn is known as such, however late it is
//! handled), and each frame tells the app when it was drawn ([`App::drawn`]). The terminal is
//! restored on every exit path, including a panic (ratatui's hook, extended to mouse capture,
//! bracketed paste and focus reporting).

use std::time::{Duration, Instant};

use crossterm::event::{
    DisableBracketedPaste, DisableFocusChange, DisableMouseCapture, EnableBracketedPaste,
    EnableFocusChange, EnableMouseCapture, Event, EventStream, MouseEventKind,
};
use crossterm::terminal::{BeginSynchronizedUpdate, EndSynchronizedUpdate};
use futures_util::StreamExt;
use outboard_client::ConnectOptions;
use std::io::Write as _;
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
    /// How a long turn that ends while the terminal is unfocused is announced.
    pub notify: Notify,
}

/// How a long turn that ends while the terminal is unfocused is announced (`--notify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Notify {
    /// The terminal's bell (BEL): every terminal has one.
    #[default]
    Bell,
    /// A desktop notification by OSC 9 (iTerm2, WezTerm, kitty, Windows Terminal, ghostty),
    /// with the bell for the terminals that ignore it.
    Osc9,
    /// Nothing.
    Off,
}

/// How the TUI ended: the session it was attached to, for the line that says how to come back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ended {
    /// The session attached at the end, if any.
    pub session: Option<outboard_shared::SessionId>,
}

/// The shortest time between two frames (~60 fps): deltas arriving faster are drawn together.
pub const FRAME: Duration = Duration::from_millis(16);

/// Events queued for the app. Input and the connection task wait when it is full, which only
/// happens if drawing stalls; 1024 covers seconds of streaming.
pub const APP_QUEUE: usize = 1024;

/// Effects queued for the connection task: a person types a few per second.
pub const EFFECT_QUEUE: usize = 64;

fn restore() {
    let _ = crossterm::execute!(
        std::io::stdout(),
        DisableMouseCapture,
        DisableBracketedPaste,
        DisableFocusChange
    );
    ratatui::restore();
}

/// Takes the terminal, runs the TUI until the user quits, and gives the terminal back.
pub async fn run(config: Config) -> std::io::Result<Ended> {
    let mut terminal = ratatui::try_init()?;
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore();
        hook(info);
    }));
    let _ = crossterm::execute!(
        std::io::stdout(),
        EnableMouseCapture,
        EnableBracketedPaste,
        EnableFocusChange
    );
    let result = event_loop(&mut terminal, config).await;
    restore();
    result
}

async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    config: Config,
) -> std::io::Result<Ended> {
    let Config { url, token, options, initial, new_sessions, theme, hint, notify } = config;
    let size = terminal.size()?;
    let mut app = App::new(Theme::new(theme), size.width, size.height);
    app.notify = notify != Notify::Off;
    let (tx, mut rx) = mpsc::channel::<AppEvent>(APP_QUEUE);
    let (input_tx, mut input_rx) = mpsc::channel::<(u64, AppEvent)>(APP_QUEUE);
    let (effects_tx, effects_rx) = mpsc::channel::<Effect>(EFFECT_QUEUE);
    let link = net::Link { url, token, options, hint };
    let net = tokio::spawn(net::run_with(link, initial, new_sessions, effects_rx, tx));
    // One clock for every event, frame and wake-up: ms since the TUI started.
    let epoch = Instant::now();
    let clock = move || epoch.elapsed().as_millis() as u64;
    let input = tokio::spawn(read_input(input_tx, epoch));

    let mut last_frame = Instant::now() - FRAME;
    let mut dirty = true;
    let result = loop {
        if dirty && last_frame.elapsed() >= FRAME {
            if let Err(e) = draw(terminal, &app) {
                break Err(e);
            }
            app.drawn(clock());
            last_frame = Instant::now();
            dirty = false;
        }
        let deadline = tokio::time::Instant::from_std(last_frame + FRAME);
        let wake = app.wake_at().map(|at| epoch + Duration::from_millis(at));
        let wake = tokio::time::Instant::from_std(wake.unwrap_or(epoch));
        let (at, event) = tokio::select! {
            event = rx.recv() => match event {
                Some(event) => (clock(), event),
                None => break Ok(()),
            },
            event = input_rx.recv() => match event {
                Some(stamped) => stamped,
                None => break Ok(()),
            },
            _ = tokio::time::sleep_until(deadline), if dirty => continue,
            _ = tokio::time::sleep_until(wake), if app.wake_at().is_some() && !dirty => {
                (clock(), AppEvent::Tick)
            }
        };
        let mut quit = false;
        for effect in app.handle_at(at, event) {
            match effect {
                Effect::Quit => quit = true,
                Effect::Notify(text) => ring(notify, &text),
                // The connection task is gone (it only ends when we do).
                effect => quit |= effects_tx.send(effect).await.is_err(),
            }
        }
        if quit {
            break Ok(());
        }
        dirty = true;
    };
    input.abort();
    drop(effects_tx);
    let _ = tokio::time::timeout(Duration::from_secs(2), net).await;
    result.map(|()| Ended { session: app.session.as_ref().map(|s| s.id.clone()) })
}

/// Rings the terminal for a long turn that ended while it was unfocused.
fn ring(notify: Notify, text: &str) {
    let mut out = std::io::stdout();
    // A notification's text is the session's title: no control characters reach the terminal.
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    let _ = match notify {
        Notify::Off => return,
        Notify::Bell => out.write_all(b"\x07"),
        Notify::Osc9 => out.write_all(format!("\x1b]9;{text}\x07\x07").as_bytes()),
    };
    let _ = out.flush();
}

/// One frame inside a synchronized update: the terminal shows it whole or not at all.
fn draw(terminal: &mut ratatui::DefaultTerminal, app: &App) -> std::io::Result<()> {
    crossterm::queue!(terminal.backend_mut(), BeginSynchronizedUpdate)?;
    terminal.draw(|frame| render::draw(app, frame))?;
    crossterm::execute!(terminal.backend_mut(), EndSynchronizedUpdate)?;
    Ok(())
}

async fn read_input(tx: mpsc::Sender<(u64, AppEvent)>, epoch: Instant) {
    let mut stream = EventStream::new();
    while let Some(Ok(event)) = stream.next().await {
        // Stamped as read: the app knows a key typed before a prompt was drawn for what it is.
        let at = epoch.elapsed().as_millis() as u64;
        let event = match event {
            Event::FocusGained => AppEvent::Focus(true),
            Event::FocusLost => AppEvent::Focus(false),
            Event::Key(key) => AppEvent::Key(key),
            Event::Paste(text) => AppEvent::Paste(text),
            Event::Resize(w, h) => AppEvent::Resize(w, h),
            Event::Mouse(m) => match m.kind {
                MouseEventKind::ScrollUp => AppEvent::Scroll(app::WHEEL_LINES as i32),
                MouseEventKind::ScrollDown => AppEvent::Scroll(-(app::WHEEL_LINES as i32)),
                _ => continue,
            },
        };
        if tx.send((at, event)).await.is_err() {
            return;
        }
    }
}
