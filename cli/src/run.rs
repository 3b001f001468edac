//! `outboard run`: one turn, headless. Connects (to `--server`, or to an embedded server it starts),
//! creates or continues a session, sends the prompt and streams that turn's events until it ends,
//! then exits with the turn's status. Every failure ends in one line on stderr saying what to do,
//! and, once `run_started` is out, in a `run_finished` line for `--json` readers.
//!
//! Ctrl-C arrives as a message on a channel (main forwards the signal) so the flow is testable:
//! the first sends `turn/interrupt` and keeps streaming until the turn ends, the second exits 130.
//!
//! A turn outlives the server (it resumes after a restart), so with `--server` a connection that
//! ends mid-turn is not the end of the run: it reconnects with [`Backoff`] for at most
//! `--reconnect-for`, re-attaches after the last durable `seq` it printed (the snapshot fills the
//! gap; `seq`s at or below it are skipped, so nothing prints twice) and goes on until the turn
//! ends, however it ended meanwhile. A Ctrl-C while disconnected is remembered and its
//! `turn/interrupt` sent once connected again; a second one still exits 130. A server that comes
//! back but refuses the token or the session ends the run (exit 3), and so does one that is not
//! back in time. The embedded server dies with the connection, so there it exits 3 as before.

use std::future::Future;
use std::io::{Read, Write};
use std::pin::Pin;

use outboard_shared::headless::{
    Reconnected, ReconnectedTag, RunFinished, RunFinishedTag, RunStarted, RunStartedTag,
    SCHEMA_VERSION,
};
use outboard_shared::{
    methods, ApprovalAnswerParams, ApprovalDecision, ApprovalKind, ApprovalScope, Empty, ErrorCode,
    EventKind, ImageUpload, Role, SessionAttachResponse, SessionEvent, SessionId, SessionInfo,
    StopReason, TurnId, TurnInterruptResponse,
};
use tokio::sync::mpsc;

use crate::args::{ApproveMode, ConnectArgs, RunArgs};
use crate::client::{Backoff, Client, ClientError, ConnectOptions, TAKEOVER_NOTICE, TAKEOVER_WAIT};
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
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The connection ended before the turn did.
    #[error("the connection ended before the turn did ({0}) — the turn may still be running; see `outboard sessions`")]
    Lost(ClientError),
    /// The connection ended mid-turn and the server was not back within `--reconnect-for`.
    #[error("the connection ended before the turn did and reconnecting failed for {budget} ({attempts} attempts; last: {last}) — the turn may still be running; see `outboard sessions`, or raise --reconnect-for")]
    GaveUp {
        /// `--reconnect-for`, as given.
        budget: String,
        /// Connection attempts made.
        attempts: u32,
        /// The last attempt's error.
        last: ClientError,
    },
    /// The server came back but refused the token or the session.
    #[error("reconnected, but the server refused to go on: {0}")]
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
            let Some(token) = crate::client::token_from_args(args)? else {
                return Err(RunError::MissingToken(url.clone()));
            };
            let options = crate::client::ConnectOptions::from_args(args);
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
async fn open_session<O: Write, E: Write>(
    client: &Client,
    args: &RunArgs,
    workspace: Option<String>,
    prompt: &str,
    printer: &mut Printer<O, E>,
) -> Result<(SessionInfo, bool), RunError> {
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
        (&args.connect.server, crate::client::token_from_args(&args.connect)?)
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
    let options = ConnectOptions::from_args(&args.connect);
    let sent = crate::upload::send(&packed, server, &token, &options, mode).await?;
    Ok(outboard_shared::SourceSpec::Upload { upload_id: sent.upload_id })
}

/// How the turn ended.
#[derive(Debug, PartialEq)]
enum Ending {
    /// `turn_completed`; `interrupted` when its stop reason is an interrupt (exit 130).
    Completed { interrupted: bool },
    /// `turn_failed`, with its error and its class (the exit status).
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

/// What a run tells the model when it asks questions that nobody is there to answer.
pub const HEADLESS_NO_ANSWER: &str = "no one can answer: this is a headless `outboard run`     (`--approve deny|allow`), with nobody at a terminal to ask; the user can run again with     `--approve wait` and answer with `outboard answer`";

/// What the first Ctrl-C prints.
const INTERRUPTING: &str = "interrupting… (press Ctrl-C again to quit now)";

type AttachCall = Pin<Box<dyn Future<Output = Result<SessionAttachResponse, ClientError>> + Send>>;

type InterruptCall =
    Pin<Box<dyn Future<Output = Result<TurnInterruptResponse, ClientError>> + Send>>;

/// An `approval/answer` a run sends by itself (`--approve allow|deny`), with its call id.
type AnswerCall = Pin<Box<dyn Future<Output = (String, Result<Empty, ClientError>)> + Send>>;

/// What a run tells the model of a call it denies because nobody is there to approve it.
pub const HEADLESS_DENIAL: &str = "this is a headless `outboard run` with `--approve deny` (the \
    default), so nobody is there to approve it; the user can run again with `--approve allow` or \
    `--approve wait`, or ask an admin to change the org's tool policy";

/// The reason a headless run with `--approve allow` gives when it refuses a call the org's
/// rules could not judge before it runs: allowing it would lift a rule unseen.
pub const HEADLESS_UNJUDGED: &str = "this is a headless `outboard run`, and the org's tool \
    policy could not judge part of this call before it runs, so a person must look at it: write \
    the command without what is only known when it runs, or the user can run again with \
    `--approve wait`";

/// Where a run stands in its turn; it survives reconnects.
struct Follow {
    session_id: SessionId,
    turn_id: TurnId,
    /// The last durable `seq` printed: a durable event at or below it is a duplicate (after a
    /// re-attach) and is skipped.
    last_seq: u64,
    /// Ctrl-C was pressed once.
    interrupting: bool,
    /// That Ctrl-C's `turn/interrupt` is not answered yet: sent (again) once connected.
    interrupt_owed: bool,
    /// How approval requests are answered.
    approve: ApproveMode,
}

impl Follow {
    /// A Ctrl-C: the first is owed to the server as `turn/interrupt` (and `note` is printed); the
    /// second means quit now, and returns true.
    fn ctrl_c<O: Write, E: Write>(
        &mut self,
        printer: &mut Printer<O, E>,
        note: &str,
    ) -> Result<bool, RunError> {
        if self.interrupting {
            return Ok(true);
        }
        self.interrupting = true;
        self.interrupt_owed = true;
        printer.note(note)?;
        Ok(false)
    }
}

/// How one connection's stretch of the turn ended.
enum Followed {
    /// The turn ended, or the run was abandoned.
    Ended(Ending),
    /// The connection ended first.
    Lost(ClientError),
}

/// Sends the turn and prints its events until it ends, reconnecting (with `--server`) when the
/// connection ends first. `last_seq` is the last durable `seq` before the turn.
async fn stream_turn<O: Write, E: Write>(
    conn: &mut Connection,
    args: &RunArgs,
    session_id: &SessionId,
    last_seq: u64,
    (prompt, images): (String, Vec<ImageUpload>),
    interrupts: &mut mpsc::Receiver<()>,
    printer: &mut Printer<O, E>,
) -> Result<Ending, RunError> {
    // A Ctrl-C while `turn/send` is in flight is remembered and acted on once the turn exists.
    let mut interrupting = false;
    let send = conn.client.send_turn(session_id.clone(), prompt, images);
    tokio::pin!(send);
    let sent = loop {
        tokio::select! {
            sent = &mut send => break sent?,
            Some(()) = interrupts.recv() => {
                if interrupting {
                    return Ok(Ending::Abandoned);
                }
                interrupting = true;
                printer.note(INTERRUPTING)?;
            }
        }
    };
    let mut follow = Follow {
        session_id: session_id.clone(),
        turn_id: sent.turn_id,
        last_seq,
        interrupting,
        interrupt_owed: interrupting,
        approve: args.approve,
    };
    loop {
        let lost = match follow_events(&mut conn.client, &mut follow, interrupts, printer).await? {
            Followed::Ended(ending) => return Ok(ending),
            Followed::Lost(err) => err,
        };
        let Some(redial) = conn.redial.clone().filter(|_| !args.reconnect_for.is_zero()) else {
            return Err(RunError::Lost(lost));
        };
        match reconnect(&redial, args.reconnect_for, &mut follow, lost, interrupts, printer).await?
        {
            Rejoined::Ended(ending) => return Ok(ending),
            Rejoined::Client(client) => conn.client = *client,
        }
    }
}

/// Prints the turn's events from one connection until the turn ends or the connection does.
async fn follow_events<O: Write, E: Write>(
    client: &mut Client,
    follow: &mut Follow,
    interrupts: &mut mpsc::Receiver<()>,
    printer: &mut Printer<O, E>,
) -> Result<Followed, RunError> {
    let session_id = follow.session_id.clone();
    let mut interrupt_call: Option<InterruptCall> = follow
        .interrupt_owed
        .then(|| Box::pin(client.interrupt(session_id.clone())) as InterruptCall);
    let mut reattach: Option<AttachCall> = None;
    // One per call the run answers by itself; a message makes at most a few calls, and a call
    // is asked about once.
    let mut answers = futures_util::stream::FuturesUnordered::<AnswerCall>::new();
    loop {
        tokio::select! {
            event = client.next_event() => {
                match event {
                    Ok(event) => {
                        if let Some(ending) = on_event(&event, follow, printer)? {
                            return Ok(Followed::Ended(ending));
                        }
                        if let Some(call) = auto_answer(client, follow, &event) {
                            answers.push(call);
                        }
                    }
                    Err(err) if err.code() == Some(ErrorCode::Lagged) && !err.is_fatal() => {
                        // The server dropped events for us: fetch the durable ones we missed.
                        tracing::debug!(last_seq = follow.last_seq, "lagged; re-attaching");
                        // The relay to the node that ran it may be gone with that node.
                        reattach = Some(Box::pin(client.attach_through_takeover(
                            session_id.clone(),
                            Role::Driver,
                            Some(follow.last_seq),
                            TAKEOVER_WAIT,
                            || {},
                        )));
                    }
                    Err(err) if !err.is_fatal() => {
                        printer.note(&format!("outboard: warning: {err}"))?;
                    }
                    Err(err) => return Ok(Followed::Lost(err)),
                }
            }
            Some(()) = interrupts.recv() => {
                if follow.ctrl_c(printer, INTERRUPTING)? {
                    return Ok(Followed::Ended(Ending::Abandoned));
                }
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
                    Ok(TurnInterruptResponse { interrupted }) => {
                        follow.interrupt_owed = false;
                        if !interrupted {
                            tracing::debug!("interrupt: no turn in flight (it is ending)");
                        }
                    }
                    // The connection is gone: the interrupt is sent again after the reconnect.
                    Err(err) if err.is_fatal() => {}
                    Err(err) => {
                        follow.interrupt_owed = false;
                        printer.note(&format!("outboard: cannot interrupt: {err}"))?;
                    }
                }
            }
            snapshot = async {
                match reattach.as_mut() {
                    Some(call) => call.await,
                    None => std::future::pending().await,
                }
            } => {
                reattach = None;
                let snapshot = match snapshot {
                    Ok(snapshot) => snapshot,
                    Err(err) if err.is_fatal() => return Ok(Followed::Lost(err)),
                    Err(err) => return Err(RunError::Lost(err)),
                };
                for event in snapshot.events {
                    if let Some(ending) = on_event(&event, follow, printer)? {
                        return Ok(Followed::Ended(ending));
                    }
                    if let Some(call) = auto_answer(client, follow, &event) {
                        answers.push(call);
                    }
                }
            }
            Some((call_id, answered)) = futures_util::StreamExt::next(&mut answers) => {
                match answered {
                    Ok(_) => {}
                    // Gone with the connection: the request is in the log and is seen (and
                    // answered) again after the reconnect.
                    Err(err) if err.is_fatal() => {}
                    Err(err) => printer.note(&format!("outboard: cannot answer {call_id}: {err}"))?,
                }
            }
        }
    }
}

/// The answer a run gives by itself to an approval request of its session (`--approve allow`
/// or `deny`); `None` with `--approve wait` or for any other event.
fn auto_answer(client: &Client, follow: &Follow, event: &SessionEvent) -> Option<AnswerCall> {
    let EventKind::ApprovalRequested { call_id, unjudged, kind, .. } = &event.kind else {
        return None;
    };
    if event.session_id != follow.session_id {
        return None;
    }
    let (decision, reason) = match (follow.approve, unjudged) {
        (ApproveMode::Wait, _) => return None,
        // `--approve deny` ends the run at the plan, which waits for a person's answer.
        _ if *kind == ApprovalKind::Plan && follow.approve == ApproveMode::Deny => return None,
        _ if *kind == ApprovalKind::Question => {
            (ApprovalDecision::Deny, Some(HEADLESS_NO_ANSWER.to_owned()))
        }
        // Nobody looks at what the rules could not judge: `--approve allow` does not cover it.
        (ApproveMode::Allow, Some(why)) => {
            (ApprovalDecision::Deny, Some(format!("{HEADLESS_UNJUDGED} ({why})")))
        }
        (ApproveMode::Allow, None) => (ApprovalDecision::Allow, None),
        (ApproveMode::Deny, _) => (ApprovalDecision::Deny, Some(HEADLESS_DENIAL.to_owned())),
    };
    let params = ApprovalAnswerParams {
        session_id: follow.session_id.clone(),
        call_id: call_id.clone(),
        decision,
        scope: ApprovalScope::Once,
        reason,
        answers: None,
    };
    let call = client.call::<methods::ApprovalAnswer>(params);
    let call_id = call_id.clone();
    Some(Box::pin(async move { (call_id, call.await) }))
}

/// What a reconnect led to.
enum Rejoined {
    /// The turn ended while we were away (its end was in the snapshot), or a second Ctrl-C.
    Ended(Ending),
    /// Attached again: go on with this client.
    Client(Box<Client>),
}

/// What the first Ctrl-C prints while disconnected.
const INTERRUPTING_OFFLINE: &str =
    "interrupting once reconnected… (press Ctrl-C again to quit now)";

/// Whether a failed attempt to connect or re-attach is worth another try: the server is not
/// (fully) back yet. A refused token or session, another protocol version or a TLS failure will
/// not heal by waiting.
fn worth_retrying(err: &ClientError) -> bool {
    match err {
        ClientError::Connect { .. }
        | ClientError::Handshake { .. }
        | ClientError::Closed { .. } => true,
        ClientError::Connection { fatal, .. } => *fatal,
        ClientError::Server { error, .. } => {
            // `unavailable`: the session is moving between server nodes (a drain, a takeover).
            matches!(
                error.code,
                ErrorCode::ShuttingDown | ErrorCode::Internal | ErrorCode::Unavailable
            )
        }
        _ => false,
    }
}

/// Connects again within `budget`, with backoff, and re-attaches after `follow.last_seq`: as the
/// driver, or as a watcher when driving was taken away meanwhile. Prints the `reconnected` line
/// and the snapshot's events.
async fn reconnect<O: Write, E: Write>(
    redial: &Redial,
    budget: std::time::Duration,
    follow: &mut Follow,
    lost: ClientError,
    interrupts: &mut mpsc::Receiver<()>,
    printer: &mut Printer<O, E>,
) -> Result<Rejoined, RunError> {
    tracing::debug!(error = %lost, "connection lost mid-turn; reconnecting");
    let deadline = tokio::time::Instant::now() + budget;
    let mut backoff = Backoff::new();
    let mut attempts = 0u32;
    let mut last = lost.clone();
    loop {
        let now = tokio::time::Instant::now();
        let give_up =
            |attempts, last| RunError::GaveUp { budget: humantime(budget), attempts, last };
        if now >= deadline {
            return Err(give_up(attempts, last));
        }
        let pause = tokio::time::sleep(backoff.next_delay().min(deadline - now));
        tokio::pin!(pause);
        loop {
            tokio::select! {
                () = &mut pause => break,
                Some(()) = interrupts.recv() => {
                    if follow.ctrl_c(printer, INTERRUPTING_OFFLINE)? {
                        return Ok(Rejoined::Ended(Ending::Abandoned));
                    }
                }
            }
        }
        attempts += 1;
        let rejoining = rejoin(redial, follow.session_id.clone(), follow.last_seq);
        let attempt = tokio::time::timeout_at(deadline, rejoining);
        tokio::pin!(attempt);
        let result = loop {
            tokio::select! {
                result = &mut attempt => break result,
                Some(()) = interrupts.recv() => {
                    if follow.ctrl_c(printer, INTERRUPTING_OFFLINE)? {
                        return Ok(Rejoined::Ended(Ending::Abandoned));
                    }
                }
            }
        };
        let (client, snapshot) = match result {
            Err(_elapsed) => return Err(give_up(attempts, last)),
            Ok(Ok(joined)) => joined,
            Ok(Err(err)) if worth_retrying(&err) => {
                tracing::debug!(attempt = attempts, error = %err, "reconnect failed; retrying");
                last = err;
                continue;
            }
            Ok(Err(err)) => return Err(RunError::Refused(err)),
        };
        let line = Reconnected {
            kind: ReconnectedTag::Reconnected,
            session_id: follow.session_id.clone(),
            attempts,
            after_seq: follow.last_seq,
            role: snapshot.role,
            reason: lost.to_string(),
        };
        printer.reconnected(&line)?;
        for event in &snapshot.events {
            if let Some(ending) = on_event(event, follow, printer)? {
                return Ok(Rejoined::Ended(ending));
            }
        }
        return Ok(Rejoined::Client(Box::new(client)));
    }
}

/// One reconnect attempt: connect, then attach after the last `seq` printed. When the server
/// is one node of several and another node runs the session now, the attempt follows the node
/// its answer names, once.
async fn rejoin(
    redial: &Redial,
    id: SessionId,
    last_seq: u64,
) -> Result<(Client, SessionAttachResponse), ClientError> {
    match rejoin_at(&redial.url, redial, id.clone(), last_seq).await {
        Err(ClientError::Server { error, .. })
            if error.code == ErrorCode::Unavailable
                && error.node_url.as_ref().is_some_and(|u| *u != redial.url) =>
        {
            let owner = error.node_url.unwrap_or_default();
            tracing::debug!(node = %owner, "the session runs on another node; following it");
            rejoin_at(&owner, redial, id, last_seq).await
        }
        other => other,
    }
}

async fn rejoin_at(
    url: &str,
    redial: &Redial,
    id: SessionId,
    last_seq: u64,
) -> Result<(Client, SessionAttachResponse), ClientError> {
    let client = Client::connect_with(url, &redial.token, false, &redial.options).await?;
    let after = Some(last_seq);
    let snapshot = match client.attach(id.clone(), Role::Driver, after).await {
        // Driving was taken back while we were away: watch the turn to its end.
        Err(err) if err.code() == Some(ErrorCode::Forbidden) => {
            client.attach(id, Role::Watcher, after).await?
        }
        other => other?,
    };
    Ok((client, snapshot))
}

/// `2m`, `90s`, `1.5s`: a duration as a person wrote it.
fn humantime(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_millis() != 0 || secs == 0 {
        format!("{:.1}s", d.as_secs_f64())
    } else if secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs.is_multiple_of(60) {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

/// Prints one event; returns how the turn ended when this event ends our turn.
fn on_event<O: Write, E: Write>(
    event: &SessionEvent,
    follow: &mut Follow,
    printer: &mut Printer<O, E>,
) -> Result<Option<Ending>, RunError> {
    if event.session_id != follow.session_id {
        return Ok(None);
    }
    if event.kind.is_durable() {
        if event.seq <= follow.last_seq {
            return Ok(None);
        }
        follow.last_seq = event.seq;
    }
    let turn_id = &follow.turn_id;
    printer.event(event)?;
    if event.parent.is_some() {
        // A subagent's event never ends the session's turn.
        return Ok(None);
    }
    Ok(match &event.kind {
        EventKind::ApprovalRequested {
            call_id,
            kind: ApprovalKind::Plan,
            path: Some(path),
            plan: Some(plan),
            ..
        } => {
            printer.plan(&outboard_shared::headless::PlanProposed {
                kind: Default::default(),
                session_id: follow.session_id.clone(),
                call_id: call_id.clone(),
                path: path.clone(),
                plan: plan.clone(),
            })?;
            (follow.approve == ApproveMode::Deny).then_some(Ending::PlanProposed)
        }
        EventKind::TurnCompleted { turn_id: id, stop_reason, .. } if id == turn_id => {
            Some(Ending::Completed { interrupted: *stop_reason == StopReason::Interrupted })
        }
        EventKind::TurnFailed { turn_id: id, error, class } if id == turn_id => {
            Some(Ending::Failed(error.clone(), *class))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests;
