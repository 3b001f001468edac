//! `outboard run`: one turn, headless. Connects (to `--server`, or to an embedded server it starts),
//! creates or continues a session, sends the prompt and streams that turn's events until it ends,
//! then exits with the turn's status. Every failure ends in one line on stderr saying what to do,
//! and, once `run_started` is out, in a `run_finished` line for `--json` readers.
//!
//! Ctrl-C arrives as a message on a channel (main forwards the signal) so the flow is testable:
//! the first sends `turn/interrupt` and keeps streaming until the turn ends, the second exits 130.
//!
//! A turn outlives the server (it resumes after a restart), so with `--server` a connection that
//! ends mid-turn is not the end of the run: the session's follow (`outboard_client::follow`,
//! consumed in [`turn`]) reconnects with backoff for at most `--reconnect-for`, re-attaches after
//! the last durable `seq` it delivered (the snapshot fills the gap and nothing prints twice) and
//! goes on until the turn ends, however it ended meanwhile. A Ctrl-C while disconnected is
//! remembered and its `turn/interrupt` sent once connected again; a second one still exits 130.
//! A server that comes back but refuses the token or the session ends the run (exit 3), and so
//! does one that is not back in time. The embedded server dies with the connection, so there it
//! exits 3 as before.

use std::io::{Read, Write};

use outboard_shared::headless::{
    RunFinished, RunFinishedTag, RunStarted, RunStartedTag, SCHEMA_VERSION,
};
use outboard_shared::{methods, ImageUpload, Role, SessionAttachResponse, SessionId};
use tokio::sync::mpsc;

use crate::args::{ConnectArgs, RunArgs};
use crate::client::{Client, ClientError, ConnectOptions, TAKEOVER_NOTICE, TAKEOVER_WAIT};
use crate::connect::ExitCode as _;
use crate::embedded::{EmbeddedError, EmbeddedServer, WorkspaceError};
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
    #[error("--server {0} needs a token: set OUTBOARD_TOKEN or pass --token-file FILE (create one with: outboard-server admin user add NAME --org ORG)")]
    MissingToken(String),
    /// The prompt is empty.
    #[error("the prompt is empty — pass it as an argument, or `-` to read it from stdin")]
    EmptyPrompt,
    /// Stdin could not be read.
    #[error("cannot read the prompt from stdin: {0}")]
    Stdin(String),
    /// An `--image` cannot be sent.
    #[error(transparent)]
    Image(#[from] crate::images::ImageError),
    /// The embedded server did not start.
    #[error(transparent)]
    Embedded(#[from] EmbeddedError),
    /// The directory to work in is refused.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// Talking to the server failed.
    #[error("{}", crate::connect::Hinted(.0))]
    Client(#[from] ClientError),
    /// The connection ended before the turn did.
    #[error("the connection ended before the turn did ({}) — the turn may still be running; see `outboard sessions`", crate::connect::Hinted(.0))]
    Lost(ClientError),
    /// The connection ended mid-turn and the server was not back within `--reconnect-for`.
    #[error("the connection ended before the turn did and reconnecting failed for {budget} ({attempts} attempts; last: {}) — the turn may still be running; see `outboard sessions`, or raise --reconnect-for", crate::connect::Hinted(.last))]
    GaveUp {
        /// `--reconnect-for`, as given.
        budget: String,
        /// Connection attempts made.
        attempts: u32,
        /// The last attempt's error.
        last: ClientError,
    },
    /// The server came back but refused the token or the session.
    #[error("reconnected, but the server refused to go on: {}", crate::connect::Hinted(.0))]
    Refused(ClientError),
    /// `--upload` without `--server`.
    #[error("--upload sends a tree to a remote server (--server URL); embedded mode works in place: use --workspace DIR")]
    UploadNeedsServer,
    /// The upload failed or was refused.
    #[error(transparent)]
    Upload(#[from] crate::upload::UploadError),
    /// Stdout or stderr could not be written (a closed pipe).
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl RunError {
    /// The process exit status (see [`crate::exit`]).
    pub fn exit_code(&self) -> i32 {
        match self {
            RunError::MissingToken(_)
            | RunError::EmptyPrompt
            | RunError::Stdin(_)
            | RunError::Image(_)
            | RunError::UploadNeedsServer => exit::USAGE,
            RunError::Upload(e) => e.exit_code(),
            RunError::Embedded(e) => e.exit_code(),
            RunError::Workspace(e) => e.exit_code(),
            RunError::Client(e) | RunError::Lost(e) => e.exit_code(),
            RunError::GaveUp { .. } | RunError::Refused(_) => exit::CONNECT,
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
    /// How to connect again (with `--server` only).
    pub redial: Option<Redial>,
}

/// What a reconnect needs: where, with which token, over which transport.
#[derive(Clone)]
pub struct Redial {
    url: String,
    token: String,
    options: ConnectOptions,
}

impl Redial {
    /// How the session's follow dials again.
    pub(crate) fn dial(&self) -> outboard_client::Dial {
        outboard_client::Dial {
            url: self.url.clone(),
            token: self.token.clone(),
            options: self.options.clone(),
            room: false,
        }
    }
}

impl std::fmt::Debug for Redial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: never in a log line.
        f.debug_struct("Redial").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects as the flags say: to `--server` with `--token`, or to a new embedded server.
    pub async fn open(args: &ConnectArgs) -> Result<Connection, RunError> {
        Self::open_for(args, true).await
    }

    /// Like [`Connection::open`]; with `needs_model` false (listing sessions, org files) an
    /// embedded server starts even without an API key, since no model is called.
    pub async fn open_for(args: &ConnectArgs, needs_model: bool) -> Result<Connection, RunError> {
        if let Some(url) = &args.server {
            let Some(token) = crate::connect::token_from_args(args)? else {
                return Err(RunError::MissingToken(url.clone()));
            };
            let options = crate::connect::options(args);
            let client = Client::connect_with(url, &token, false, &options).await?;
            let redial = Redial { url: url.clone(), token, options };
            return Ok(Connection { client, embedded: None, redial: Some(redial) });
        }
        let server = EmbeddedServer::start(args, needs_model).await?;
        match Client::connect(&server.url(), server.token()).await {
            Ok(client) => Ok(Connection { client, embedded: Some(server), redial: None }),
            Err(e) => {
                server.shutdown().await;
                Err(e.into())
            }
        }
    }

    /// Where the server's HTTP endpoints are, with the same token and trust as the WebSocket.
    pub fn http(&self) -> crate::http::Endpoint {
        match (&self.redial, &self.embedded) {
            (Some(r), _) => crate::http::Endpoint::new(&r.url, &r.token, r.options.ca_cert.clone()),
            (None, Some(server)) => crate::http::Endpoint::new(&server.url(), server.token(), None),
            (None, None) => crate::http::Endpoint::new(self.client.url(), "", None),
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
    // Checked before anything starts: a bad image or a refused directory is a usage error.
    let images = match crate::images::load(&args.images) {
        Ok(images) => images,
        Err(err) => {
            let _ = printer.note(&format!("outboard: {err}"));
            return exit::USAGE;
        }
    };
    let workspace = match (&args.session, &args.upload, &args.source.repo) {
        (Some(_), _, _) => Ok(None),
        (None, Some(_), _) if args.connect.server.is_none() => {
            let err = RunError::UploadNeedsServer;
            let _ = printer.note(&format!("outboard: {err}"));
            return err.exit_code();
        }
        (None, Some(_), _) | (None, None, Some(_)) => Ok(None),
        (None, None, None) => crate::embedded::session_workspace(&args.connect),
    };
    let workspace = match workspace {
        Ok(workspace) => workspace,
        Err(err) => {
            let _ = printer.note(&format!("outboard: {err}"));
            return err.exit_code();
        }
    };
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
    let prompt = (prompt, images);
    let code = drive(&mut conn, args, workspace, prompt, interrupts, printer).await;
    if code == exit::INTERRUPTED {
        // A second Ctrl-C: leave at once; the server resumes the session from its log. The
        // embedded token is revoked first (one quick delete): it must not outlive the process.
        if let Some(server) = &conn.embedded {
            server.revoke_token().await;
        }
        return code;
    }
    conn.close().await;
    code
}

/// Session, turn and stream, on an open connection.
async fn drive<O: Write, E: Write>(
    conn: &mut Connection,
    args: &RunArgs,
    workspace: Option<String>,
    (prompt, images): (String, Vec<ImageUpload>),
    interrupts: &mut mpsc::Receiver<()>,
    printer: &mut Printer<O, E>,
) -> i32 {
    let client = &conn.client;
    let setup = tokio::select! {
        setup = open_session(client, args, workspace, &prompt, printer) => setup,
        Some(()) = interrupts.recv() => return exit::INTERRUPTED,
    };
    let (session, created) = match setup {
        Ok(opened) => opened,
        Err(err) => {
            let _ = printer.note(&format!("outboard: {err}"));
            return err.exit_code();
        }
    };
    let (session_id, last_seq) = (session.id.clone(), session.last_seq);
    let started = RunStarted {
        kind: RunStartedTag::RunStarted,
        schema_version: SCHEMA_VERSION,
        session_id: session_id.clone(),
        server: client.url().to_owned(),
        embedded: conn.embedded.is_some(),
        context_window: session.context_window,
        context_window_source: session.context_window_source,
        context_window_from: session.context_window_from.clone(),
    };
    // A guessed window is stated once, when the session that runs with it is made.
    if created && !args.json && session.context_window_source.is_some_and(|s| s.is_guess()) {
        let from = session.context_window_from.as_deref().unwrap_or("a guess");
        let tokens = session.context_window.unwrap_or_default();
        let _ = printer.note(&format!("outboard: context window {tokens} tokens — {from}"));
    }
    let result = match printer.run_started(&started) {
        Ok(()) => match plan_mode(&conn.client, args, &session_id).await {
            Ok(()) => {
                let prompt = (prompt, images);
                stream_turn(conn, args, &session_id, last_seq, prompt, interrupts, printer).await
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(RunError::Output(e)),
    };
    let (code, error) = match result {
        Ok(Ending::Completed { interrupted: true }) => (exit::INTERRUPTED, None),
        Ok(Ending::Completed { interrupted: false }) => (exit::OK, None),
        Ok(Ending::PlanProposed) => (exit::OK, None),
        Ok(Ending::Failed(error, class)) => (exit::of_failure(class), Some(error)),
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
/// that only events after this point arrive. Returns the session as attached (its `last_seq`
/// the last durable one) and whether this run created it.
pub(crate) async fn open_session<O: Write, E: Write>(
    client: &Client,
    args: &RunArgs,
    workspace: Option<String>,
    prompt: &str,
    printer: &mut Printer<O, E>,
) -> Result<(outboard_shared::SessionInfo, bool), RunError> {
    let Some(id) = &args.session else {
        let title = Some(session_title(prompt));
        let source = match &args.upload {
            Some(dir) => Some(upload(args, dir, printer_mode(args)).await?),
            None => args.source.repo_spec(),
        };
        let session = match source {
            Some(source) => {
                let params = outboard_shared::SessionCreateParams {
                    title,
                    workspace: None,
                    source: Some(source),
                    network: args.source.network,
                    context_window: args.source.context_window,
                    model: args.connect.model.clone(),
                };
                create_reporting(client, params, printer).await?
            }
            None => {
                client
                    .create_session_with(outboard_shared::SessionCreateParams {
                        title,
                        workspace,
                        source: None,
                        network: args.source.network,
                        context_window: args.source.context_window,
                        model: args.connect.model.clone(),
                    })
                    .await?
            }
        };
        let attached =
            client.attach(session.id.clone(), Role::Driver, Some(session.last_seq)).await?;
        return Ok((attached.session, true));
    };
    let id = SessionId(id.clone());
    // Attach after the session's last seq, so the snapshot carries nothing old. A session beyond
    // the list's first page is attached from the start instead; its snapshot is ignored either way.
    let sessions = client.list_sessions(None).await?;
    let after_seq = sessions.iter().find(|s| s.id == id).map(|s| s.last_seq);
    let attached = attach_noting(client, id, after_seq, printer).await?;
    let session = attached.session;
    // `--model` on an existing session: its turns from this one on use that model.
    if let Some(model) = &args.connect.model {
        if session.model_name.as_deref() != Some(model.as_str()) {
            let params = outboard_shared::SessionSetModelParams {
                session_id: session.id.clone(),
                model: model.clone(),
            };
            client.call::<outboard_shared::methods::SessionSetModel>(params).await?;
        }
    }
    Ok((session, false))
}

/// Attaches to `id` as its driver, waiting while the node that runs it cannot be reached for
/// another to take it over ([`Client::attach_through_takeover`]); says so when the wait starts.
async fn attach_noting<O: Write, E: Write>(
    client: &Client,
    id: SessionId,
    after_seq: Option<u64>,
    printer: &mut Printer<O, E>,
) -> Result<SessionAttachResponse, RunError> {
    let (started, waiting) = tokio::sync::oneshot::channel();
    let call = client.attach_through_takeover(id, Role::Driver, after_seq, TAKEOVER_WAIT, || {
        let _ = started.send(());
    });
    tokio::pin!(call);
    tokio::select! {
        attached = &mut call => return Ok(attached?),
        Ok(()) = waiting => printer.note(&format!("outboard: {TAKEOVER_NOTICE}"))?,
    }
    Ok(call.await?)
}

/// `session/create` of a session the server prepares (a clone), printing its progress.
pub async fn create_reporting<O: Write, E: Write>(
    client: &Client,
    params: outboard_shared::SessionCreateParams,
    printer: &mut Printer<O, E>,
) -> Result<outboard_shared::SessionInfo, RunError> {
    let (call, mut progress) =
        client.call_with_progress::<outboard_shared::methods::SessionCreate>(params);
    tokio::pin!(call);
    loop {
        tokio::select! {
            created = &mut call => {
                // Frames come before the answer on the connection: some may still wait here.
                while let Ok(frame) = progress.try_recv() {
                    printer.progress(&crate::output::progress_line(frame))?;
                }
                return Ok(created?.session);
            }
            Some(frame) = progress.recv() => {
                printer.progress(&crate::output::progress_line(frame))?;
            }
        }
    }
}

/// How `--upload`'s progress shows: nothing in `--json` mode, a redrawn line on a terminal.
fn printer_mode(args: &RunArgs) -> crate::upload::ProgressMode {
    use std::io::IsTerminal as _;
    if args.json {
        crate::upload::ProgressMode::Quiet
    } else if std::io::stderr().is_terminal() {
        crate::upload::ProgressMode::Redraw
    } else {
        crate::upload::ProgressMode::Lines
    }
}

/// Packs and sends `dir` for a new session; the session's `source`.
async fn upload(
    args: &RunArgs,
    dir: &std::path::Path,
    mode: crate::upload::ProgressMode,
) -> Result<outboard_shared::SourceSpec, RunError> {
    let (Some(server), Some(token)) =
        (&args.connect.server, crate::connect::token_from_args(&args.connect)?)
    else {
        return Err(RunError::UploadNeedsServer);
    };
    let dir = dir.to_path_buf();
    let packed = tokio::task::spawn_blocking(move || crate::upload::pack(&dir))
        .await
        .map_err(|e| RunError::Output(std::io::Error::other(e.to_string())))??;
    if mode != crate::upload::ProgressMode::Quiet {
        let what = if packed.selection.git { "the git work tree" } else { "the directory" };
        let history = if packed.history { ", with its history" } else { "" };
        eprintln!(
            "outboard: uploading {what} {} ({} files{history})",
            packed.selection.root.display(),
            packed.selection.paths.len()
        );
    }
    let options = crate::connect::options(&args.connect);
    let sent = crate::upload::send(&packed, server, &token, &options, mode).await?;
    Ok(outboard_shared::SourceSpec::Upload { upload_id: sent.upload_id })
}

/// How the turn ended.
#[derive(Debug, PartialEq)]
enum Ending {
    /// `turn_completed`; `interrupted` when its stop reason is an interrupt (exit 130).
    Completed { interrupted: bool },
    /// `turn_failed`, with its error.
    Failed(String, Option<outboard_shared::FailureClass>),
    /// A second Ctrl-C: leave without waiting.
    Abandoned,
    /// `--plan --approve deny`: the plan was proposed and printed; it waits in the session
    /// for `outboard approve|deny`.
    PlanProposed,
}

/// `run --plan`: the session goes into plan mode before the prompt is sent.
async fn plan_mode(
    client: &Client,
    args: &RunArgs,
    session_id: &SessionId,
) -> Result<(), RunError> {
    if args.plan {
        let params = outboard_shared::SessionSetModeParams {
            session_id: session_id.clone(),
            mode: outboard_shared::SessionMode::Plan,
        };
        client.call::<methods::SessionSetMode>(params).await?;
    }
    Ok(())
}

mod turn;

use turn::stream_turn;
pub use turn::{HEADLESS_DENIAL, HEADLESS_NO_ANSWER, HEADLESS_UNJUDGED};

#[cfg(test)]
mod tests;
