//! `outboard run`: one turn, headless. Connects (to `--server`, or to an embedded server it starts),
//! creates or continues a session, sends the prompt and streams that turn's events until it ends,
//! then exits with the turn's status. Every failure ends in one line on stderr saying what to do,
//! and, once `run_started` is out, in a `run_finished` line for `--json` readers.
//!
//! Ctrl-C arrives as a message on a channel (main forwards the signal) so the flow is testable:
//! the first sends `turn/interrupt` and keeps streaming until the turn ends, the second exits 130.

use std::future::Future;
use std::io::{Read, Write};
use std::pin::Pin;

use outboard_shared::headless::{
    RunFinished, RunFinishedTag, RunStarted, RunStartedTag, SCHEMA_VERSION,
};
use outboard_shared::{
    EventKind, Role, SessionEvent, SessionId, StopReason, TurnId, TurnInterruptResponse,
};
use tokio::sync::mpsc;

use crate::args::{ConnectArgs, RunArgs};
use crate::client::{Client, ClientError};
use crate::embedded::{EmbeddedError, EmbeddedServer};
use crate::exit;
use crate::output::{truncate, Printer};

/// How many characters of the prompt's first line become a new session's title.
pub const TITLE_CHARS: usize = 60;

/// Capacity of the Ctrl-C channel: a person presses it once or twice; more are dropped, which is
/// harmless because the second one already exits.
pub const INTERRUPT_CHANNEL_CAPACITY: usize = 4;

/// Why a run could not do its job. The messages are one line and say what to do.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `--server` without a token.
    #[error("--server {0} needs a token: pass --token or set OUTBOARD_TOKEN (create one with: outboard-server admin user add NAME --org ORG)")]
    MissingToken(String),
    /// The prompt is empty.
    #[error("the prompt is empty — pass it as an argument, or `-` to read it from stdin")]
    EmptyPrompt,
    /// Stdin could not be read.
    #[error("cannot read the prompt from stdin: {0}")]
    Stdin(String),
    /// The embedded server did not start.
    #[error(transparent)]
    Embedded(#[from] EmbeddedError),
    /// Talking to the server failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The connection ended before the turn did.
    #[error("the connection ended before the turn did ({0}) — the turn may still be running; see `outboard sessions`")]
    Lost(ClientError),
    /// Stdout or stderr could not be written (a closed pipe).
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl RunError {
    /// The process exit status (see [`crate::exit`]).
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::MissingToken(_) | RunError::EmptyPrompt | RunError::Stdin(_) => exit::USAGE,
            RunError::Embedded(e) => e.exit_code(),
            RunError::Client(e) | RunError::Lost(e) => e.exit_code(),
            RunError::Output(_) => exit::FAILED,
        }
    }
}

/// The prompt: the argument itself, or all of `stdin` when it is `-`. Never empty.
pub fn read_prompt(arg: &str, stdin: impl Read) -> Result<String, RunError> {
    let prompt = if arg == "-" {
        let mut text = String::new();
        let mut stdin = stdin;
        stdin.read_to_string(&mut text).map_err(|e| RunError::Stdin(e.to_string()))?;
        text
    } else {
        arg.to_owned()
    };
    if prompt.trim().is_empty() {
        return Err(RunError::EmptyPrompt);
    }
    Ok(prompt)
}

/// A new session's title: the prompt's first non-empty line, truncated.
pub fn session_title(prompt: &str) -> String {
    let first = prompt.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    truncate(first, TITLE_CHARS)
}

/// A connected client and, in embedded mode, the server it talks to.
pub struct Connection {
    /// The client.
    pub client: Client,
    /// The in-process server, when there is no `--server`.
    pub embedded: Option<EmbeddedServer>,
}

impl Connection {
    /// Connects as the flags say: to `--server` with `--token`, or to a new embedded server.
    pub async fn open(args: &ConnectArgs) -> Result<Connection, RunError> {
        if let Some(url) = &args.server {
            let Some(token) = args.token.as_deref().filter(|t| !t.trim().is_empty()) else {
                return Err(RunError::MissingToken(url.clone()));
            };
            let client = Client::connect(url, token).await?;
            return Ok(Connection { client, embedded: None });
        }
        let server = EmbeddedServer::start(args).await?;
        match Client::connect(&server.url(), server.token()).await {
            Ok(client) => Ok(Connection { client, embedded: Some(server) }),
            Err(e) => {
                server.shutdown().await;
                Err(e.into())
            }
        }
    }

    /// Closes the connection and stops the embedded server, if any.
    pub async fn close(self) {
        drop(self.client);
        if let Some(server) = self.embedded {
            server.shutdown().await;
        }
    }
}

/// Runs `outboard run` with an already read `prompt`; returns the exit status. `interrupts`
/// yields one `()` per Ctrl-C.
pub async fn run<O: Write, E: Write>(
    args: &RunArgs,
    prompt: String,
    interrupts: &mut mpsc::Receiver<()>,
    printer: &mut Printer<O, E>,
) -> i32 {
    let opened = tokio::select! {
        opened = Connection::open(&args.connect) => opened,
        Some(()) = interrupts.recv() => return exit::INTERRUPTED,
    };
    let mut conn = match opened {
        Ok(conn) => conn,
        Err(err) => {
            let _ = printer.note(&format!("outboard: {err}"));
            return err.exit_code();
        }
    };
    let code = drive(&mut conn, args, prompt, interrupts, printer).await;
    if code == exit::INTERRUPTED {
        // A second Ctrl-C: leave at once; the server resumes the session from its log.
        return code;
    }
    conn.close().await;
    code
}

/// Session, turn and stream, on an open connection.
async fn drive<O: Write, E: Write>(
    conn: &mut Connection,
    args: &RunArgs,
    prompt: String,
    interrupts: &mut mpsc::Receiver<()>,
    printer: &mut Printer<O, E>,
) -> i32 {
    let client = &mut conn.client;
    let setup = tokio::select! {
        setup = open_session(client, args, &prompt) => setup,
        Some(()) = interrupts.recv() => return exit::INTERRUPTED,
    };
    let session_id = match setup {
        Ok(id) => id,
        Err(err) => {
            let _ = printer.note(&format!("outboard: {err}"));
            return err.exit_code();
        }
    };
    let started = RunStarted {
        kind: RunStartedTag::RunStarted,
        schema_version: SCHEMA_VERSION,
        session_id: session_id.clone(),
        server: client.url().to_owned(),
        embedded: conn.embedded.is_some(),
    };
    let result = match printer.run_started(&started) {
        Ok(()) => stream_turn(client, &session_id, prompt, interrupts, printer).await,
        Err(e) => Err(RunError::Output(e)),
    };
    let (code, error) = match result {
        Ok(Ending::Completed { interrupted: true }) => (exit::INTERRUPTED, None),
        Ok(Ending::Completed { interrupted: false }) => (exit::OK, None),
        Ok(Ending::Failed(error)) => (exit::FAILED, Some(error)),
        Ok(Ending::Abandoned) => (exit::INTERRUPTED, Some("interrupted".to_owned())),
        Err(err) => {
            let _ = printer.note(&format!("outboard: {err}"));
            (err.exit_code(), Some(err.to_string()))
        }
    };
    let finished =
        RunFinished { kind: RunFinishedTag::RunFinished, session_id, exit_code: code, error };
    if printer.run_finished(&finished).is_err() && code == exit::OK {
        return exit::FAILED;
    }
    code
}

/// Creates the session, or finds the one given with `--session`, and attaches as its driver so
/// that only events after this point arrive.
async fn open_session(
    client: &Client,
    args: &RunArgs,
    prompt: &str,
) -> Result<SessionId, RunError> {
    let Some(id) = &args.session else {
        let session = client.create_session(Some(session_title(prompt))).await?;
        client.attach(session.id.clone(), Role::Driver, Some(session.last_seq)).await?;
        return Ok(session.id);
    };
    let id = SessionId(id.clone());
    // Attach after the session's last seq, so the snapshot carries nothing old. A session beyond
    // the list's first page is attached from the start instead; its snapshot is ignored either way.
    let sessions = client.list_sessions(None).await?;
    let after_seq = sessions.iter().find(|s| s.id == id).map(|s| s.last_seq);
    let attached = client.attach(id, Role::Driver, after_seq).await?;
    Ok(attached.session.id)
}

/// How the turn ended.
#[derive(Debug, PartialEq)]
enum Ending {
    /// `turn_completed`; `interrupted` when its stop reason is an interrupt (exit 130).
    Completed { interrupted: bool },
    /// `turn_failed`, with its error.
    Failed(String),
    /// A second Ctrl-C: leave without waiting.
    Abandoned,
}

type InterruptCall =
    Pin<Box<dyn Future<Output = Result<TurnInterruptResponse, ClientError>> + Send>>;

async fn stream_turn<O: Write, E: Write>(
    client: &mut Client,
    session_id: &SessionId,
    prompt: String,
    interrupts: &mut mpsc::Receiver<()>,
    printer: &mut Printer<O, E>,
) -> Result<Ending, RunError> {
    let sent = tokio::select! {
        sent = client.send_turn(session_id.clone(), prompt) => sent?,
        Some(()) = interrupts.recv() => return Ok(Ending::Abandoned),
    };
    let turn_id = sent.turn_id;
    let mut interrupting = false;
    let mut interrupt_call: Option<InterruptCall> = None;
    loop {
        tokio::select! {
            event = client.next_event() => {
                match event {
                    Ok(event) => {
                        if let Some(ending) = on_event(&event, session_id, &turn_id, printer)? {
                            return Ok(ending);
                        }
                    }
                    Err(err) if !err.is_fatal() => {
                        printer.note(&format!("outboard: warning: {err}"))?;
                    }
                    Err(err) => return Err(RunError::Lost(err)),
                }
            }
            Some(()) = interrupts.recv() => {
                if interrupting {
                    return Ok(Ending::Abandoned);
                }
                interrupting = true;
                printer.note("interrupting… (press Ctrl-C again to quit now)")?;
                interrupt_call = Some(Box::pin(client.interrupt(session_id.clone())));
            }
            answer = async {
                match interrupt_call.as_mut() {
                    Some(call) => call.await,
                    None => std::future::pending().await,
                }
            } => {
                interrupt_call = None;
                match answer {
                    Ok(TurnInterruptResponse { interrupted: true }) => {}
                    Ok(TurnInterruptResponse { interrupted: false }) => {
                        tracing::debug!("interrupt: no turn in flight (it is ending)");
                    }
                    Err(err) => printer.note(&format!("outboard: cannot interrupt: {err}"))?,
                }
            }
        }
    }
}

/// Prints one event; returns how the turn ended when this event ends our turn.
fn on_event<O: Write, E: Write>(
    event: &SessionEvent,
    session_id: &SessionId,
    turn_id: &TurnId,
    printer: &mut Printer<O, E>,
) -> Result<Option<Ending>, RunError> {
    if &event.session_id != session_id {
        return Ok(None);
    }
    printer.event(event)?;
    Ok(match &event.kind {
        EventKind::TurnCompleted { turn_id: id, stop_reason, .. } if id == turn_id => {
            Some(Ending::Completed { interrupted: *stop_reason == StopReason::Interrupted })
        }
        EventKind::TurnFailed { turn_id: id, error } if id == turn_id => {
            Some(Ending::Failed(error.clone()))
        }
        _ => None,
    })
}
