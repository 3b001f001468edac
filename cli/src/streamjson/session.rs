//! The stream-json session loop: one task that owns the connection (through its [`Follow`]),
//! stdout, the prompts waiting, the turn in flight and the `can_use_tool` requests the program
//! has not answered. It waits on three things at once: stdin's next message (read by
//! [`input::pump`]), the session's next event, and the server's answers to the calls it made
//! (a prompt sent, an interrupt, an approval answer), so an `interrupt` or a permission answer
//! is acted on while the turn streams.
//!
//! The session is made when the first prompt comes (its title is derived from it), or attached
//! at once with `--resume`; it is an ordinary Outboard session, listed by `outboard sessions`
//! and open to a teammate's `outboard attach`. Prompts are sent one turn at a time: one that
//! comes while a turn runs waits (at most [`MAX_QUEUED_PROMPTS`]) and is sent as a message of
//! its own when the turn ends, interrupted or not. When stdin ends, the turn in flight and the
//! prompts waiting are finished, then the process exits 0.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io::Write;
use std::pin::Pin;

use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt as _;
use outboard_client::{Dial, Follow, FollowError, Retry, Update};
use outboard_shared::{
    methods, ApprovalAnswerParams, ApprovalKind, ApprovalScope, EventKind, ImageUpload, Question,
    Role, SessionEvent, SessionId, SessionMode, SessionSetModeParams, SessionSetModelParams,
};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::input::{self, INBOUND_CHANNEL_CAPACITY};
use super::options::{self, Options, Output, PermissionMode, Prompts};
use super::permissions::{self, Rules, Verdict, ASK_DEADLINE};
use super::translate::{Context, Cut, Turn};
use super::wire::{self, Control, Inbound};
use crate::args::RunArgs;
use crate::client::{Client, ClientError};
use crate::exit;
use crate::output::{Mode, Printer};
use crate::run::{Connection, RunError};

/// Prompts waiting while a turn runs. A program sends the next prompt after the `result`; a
/// few ahead are kept, and past this many a prompt is refused with an `input_error`.
pub const MAX_QUEUED_PROMPTS: usize = 32;

/// A call to the server in flight, and what its answer is for.
enum Done {
    /// `turn/send` of the prompt.
    Sent(Result<(), ClientError>),
    /// A control request of the program that the server answers (`interrupt`,
    /// `set_permission_mode`, `set_model`): its response.
    Control(String, Result<(), ClientError>),
    /// `approval/answer` of a call.
    Answered(String, Result<(), ClientError>),
    /// `turn/interrupt` made by this front end (`--max-turns`, a deny with `interrupt`).
    Interrupted(Result<(), ClientError>),
    /// A `can_use_tool` request's deadline passed.
    Expired(String),
}

type Call = Pin<Box<dyn Future<Output = Done> + Send>>;

/// A `can_use_tool` request the program has not answered.
struct Ask {
    call_id: String,
    name: String,
    input: Value,
    kind: ApprovalKind,
    questions: Option<Vec<Question>>,
}

/// Why the loop stopped early.
#[derive(Debug, thiserror::Error)]
enum Stop {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
    #[error("{0}")]
    Follow(String, i32),
}

impl Stop {
    fn exit_code(&self) -> i32 {
        match self {
            Stop::Run(e) => e.exit_code(),
            Stop::Output(_) => exit::FAILED,
            Stop::Follow(_, code) => *code,
        }
    }
}

/// Runs the stream-json front end with `args` on `stdin` and `stdout`; notes go to stderr.
/// Returns the exit status: 0 once stdin has ended and every prompt has its `result`.
pub async fn run<R, W>(args: &RunArgs, stdin: R, stdout: W) -> i32
where
    R: tokio::io::AsyncBufRead + Unpin + Send + 'static,
    W: Write,
{
    let opts = match options::check(args) {
        Ok(opts) => opts,
        Err(err) => {
            eprintln!("outboard: {err}");
            return exit::USAGE;
        }
    };
    for flag in &opts.ignored {
        eprintln!("outboard: ignoring {flag}");
    }
    let mut stdin = stdin;
    let once = match &opts.prompts {
        Prompts::Once(p) if p == "-" => {
            let mut text = String::new();
            if let Err(e) = tokio::io::AsyncReadExt::read_to_string(&mut stdin, &mut text).await {
                eprintln!("outboard: cannot read the prompt from stdin: {e}");
                return exit::USAGE;
            }
            Some(text)
        }
        Prompts::Once(p) => Some(p.clone()),
        Prompts::Stdin => None,
    };
    let images = match crate::images::load(&args.images) {
        Ok(images) => images,
        Err(err) => {
            eprintln!("outboard: {err}");
            return exit::USAGE;
        }
    };
    let conn = match Connection::open(&args.connect).await {
        Ok(conn) => conn,
        Err(err) => {
            eprintln!("outboard: {err}");
            return err.exit_code();
        }
    };
    let (tx, inbound) = mpsc::channel(INBOUND_CHANNEL_CAPACITY);
    match &once {
        // One prompt: stdin is not read after it.
        Some(_) => drop(tx),
        None => {
            tokio::spawn(input::pump(stdin, tx));
        }
    }
    let mode = opts.mode;
    let mut session = Loop {
        out: stdout,
        args: args.clone(),
        opts,
        mode,
        conn: Some(conn),
        ctx: None,
        follow: None,
        queue: VecDeque::new(),
        turn: None,
        sending: false,
        asks: HashMap::new(),
        next_ask: 0,
        calls: FuturesUnordered::new(),
        pending_model: None,
        stdin_done: false,
    };
    if let Some(prompt) = once {
        if prompt.trim().is_empty() {
            eprintln!("outboard: {}", RunError::EmptyPrompt);
            session.close().await;
            return exit::USAGE;
        }
        session.queue.push_back((prompt, images));
    } else if !images.is_empty() {
        eprintln!("outboard: --image goes with a PROMPT");
        session.close().await;
        return exit::USAGE;
    }
    let ended = session.drive(inbound).await;
    let code = match &ended {
        Ok(code) => *code,
        Err(err) => {
            eprintln!("outboard: {err}");
            err.exit_code()
        }
    };
    session.close().await;
    code
}

struct Loop<W> {
    out: W,
    args: RunArgs,
    opts: Options,
    mode: PermissionMode,
    /// The connection while no session is followed (its client moves into `follow`).
    conn: Option<Connection>,
    ctx: Option<Context>,
    follow: Option<Follow>,
    queue: VecDeque<(String, Vec<ImageUpload>)>,
    turn: Option<Turn>,
    sending: bool,
    asks: HashMap<String, Ask>,
    next_ask: u64,
    calls: FuturesUnordered<Call>,
    /// A `set_model` that came before the session was made.
    pending_model: Option<String>,
    stdin_done: bool,
}

/// One thing that happened.
enum Happened {
    Inbound(Option<(u64, Inbound)>),
    Update(Result<Update, FollowError>),
    Done(Done),
}

async fn next_update(follow: Option<&mut Follow>) -> Result<Update, FollowError> {
    match follow {
        Some(follow) => follow.next().await,
        None => std::future::pending().await,
    }
}

impl<W: Write> Loop<W> {
    async fn drive(&mut self, mut inbound: mpsc::Receiver<(u64, Inbound)>) -> Result<i32, Stop> {
        let mut failed = false;
        loop {
            if self.turn.is_none() && !self.sending {
                if let Some(prompt) = self.queue.pop_front() {
                    failed |= !self.start_turn(prompt).await?;
                }
            }
            if self.stdin_done && self.turn.is_none() && !self.sending && self.queue.is_empty() {
                break;
            }
            let happened = tokio::select! {
                m = inbound.recv(), if !self.stdin_done => Happened::Inbound(m),
                u = next_update(self.follow.as_mut()) => Happened::Update(u),
                Some(d) = self.calls.next(), if !self.calls.is_empty() => Happened::Done(d),
            };
            match happened {
                Happened::Inbound(None) => self.stdin_ended()?,
                Happened::Inbound(Some((n, message))) => self.on_inbound(n, message).await?,
                Happened::Update(update) => self.on_update(update)?,
                Happened::Done(done) => self.on_done(done)?,
            }
        }
        // `--output-format json` with one prompt: its status is the run's, as `claude -p`'s.
        Ok(if failed && self.opts.prompts != Prompts::Stdin { exit::FAILED } else { exit::OK })
    }

    fn emit(&mut self, message: &Value) -> Result<(), Stop> {
        if self.opts.output == Output::Json && message["type"] != "result" {
            return Ok(());
        }
        serde_json::to_writer(&mut self.out, message).map_err(std::io::Error::from)?;
        self.out.write_all(b"\n")?;
        self.out.flush()?;
        Ok(())
    }

    fn client(&self) -> Option<&Client> {
        match (&self.follow, &self.conn) {
            (Some(f), _) => Some(f.client()),
            (None, Some(c)) => Some(&c.client),
            (None, None) => None,
        }
    }

    fn session_id(&self) -> Option<SessionId> {
        self.ctx.as_ref().map(|c| SessionId(c.session_id.clone()))
    }

    fn input_error(&mut self, line: u64, why: &str) -> Result<(), Stop> {
        eprintln!("outboard: stdin line {line}: {why}");
        let sid = self.ctx.as_ref().map(|c| c.session_id.clone());
        self.emit(&wire::input_error(line, why, sid.as_deref()))
    }

    /// Makes (or with `--resume` attaches) the session and starts following it.
    async fn open(&mut self, title_from: &str) -> Result<(), Stop> {
        let Some(mut conn) = self.conn.take() else { return Ok(()) };
        let mut args = self.args.clone();
        args.session = self.opts.resume.clone();
        let workspace =
            if args.session.is_some() || args.upload.is_some() || args.source.repo.is_some() {
                None
            } else {
                match crate::embedded::session_workspace(&args.connect) {
                    Ok(w) => w,
                    Err(e) => {
                        self.conn = Some(conn);
                        return Err(Stop::Run(e.into()));
                    }
                }
            };
        let mut notes = Printer::new(Mode::Plain, std::io::sink(), std::io::stderr());
        let opened =
            crate::run::open_session(&conn.client, &args, workspace, title_from, &mut notes).await;
        let (info, _) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                self.conn = Some(conn);
                return Err(e.into());
            }
        };
        let sid = info.id.clone();
        if self.mode == PermissionMode::Plan {
            let params = SessionSetModeParams { session_id: sid.clone(), mode: SessionMode::Plan };
            conn.client.call::<methods::SessionSetMode>(params).await.map_err(RunError::from)?;
        }
        let mut model = info.model.clone();
        if let Some(name) = self.pending_model.take() {
            let params = SessionSetModelParams { session_id: sid.clone(), model: name.clone() };
            conn.client.call::<methods::SessionSetModel>(params).await.map_err(RunError::from)?;
            model = name;
        }
        let cwd = info.workspace.clone().unwrap_or_else(|| "/workspace".to_owned());
        self.ctx = Some(Context {
            session_id: sid.0.clone(),
            model,
            cwd,
            permission_mode: self.mode.as_str(),
        });
        let (dial, retry) = match conn.redial.clone().filter(|_| !args.reconnect_for.is_zero()) {
            Some(r) => (r.dial(), Retry::Within(args.reconnect_for)),
            None => {
                let url = conn.client.url().to_owned();
                (
                    Dial { url, token: String::new(), options: Default::default(), room: false },
                    Retry::Never,
                )
            }
        };
        let placeholder = Client::disconnected(&dial.url, ClientError::Closed { reason: None });
        let client = std::mem::replace(&mut conn.client, placeholder);
        self.follow = Some(Follow::attached(client, dial, retry, sid, Role::Driver, info.last_seq));
        self.conn = Some(conn);
        Ok(())
    }

    /// Sends the next prompt; false when it could not be sent (its `result` says why).
    async fn start_turn(
        &mut self,
        (text, images): (String, Vec<ImageUpload>),
    ) -> Result<bool, Stop> {
        if self.ctx.is_none() {
            if let Err(err) = self.open(&text).await {
                if matches!(err, Stop::Output(_)) {
                    return Err(err);
                }
                eprintln!("outboard: {err}");
                let error = err.to_string();
                self.emit(&json!({
                    "type": "result", "subtype": "error_during_execution", "is_error": true,
                    "duration_ms": 0, "duration_api_ms": 0, "num_turns": 0, "result": error,
                    "session_id": "", "total_cost_usd": 0.0, "usage": wire::usage(&Default::default()),
                    "errors": [error], "uuid": wire::uuid(),
                }))?;
                if self.opts.prompts != Prompts::Stdin
                    || matches!(err, Stop::Run(RunError::Client(ref e)) if e.is_fatal())
                {
                    return Err(err);
                }
                return Ok(false);
            }
        }
        let (Some(ctx), Some(client)) = (self.ctx.clone(), self.client()) else { return Ok(false) };
        let send = client.send_turn(SessionId(ctx.session_id.clone()), text, images);
        self.calls.push(Box::pin(async move { Done::Sent(send.await.map(|_| ())) }));
        self.sending = true;
        self.turn = Some(Turn::new(&ctx));
        Ok(true)
    }

    fn stdin_ended(&mut self) -> Result<(), Stop> {
        self.stdin_done = true;
        // Nobody is left to answer: what waits for the program is denied.
        let waiting: Vec<String> = self.asks.keys().cloned().collect();
        for request_id in waiting {
            self.resolve(&request_id, Err("the program closed stdin before answering".into()))?;
        }
        Ok(())
    }

    async fn on_inbound(&mut self, line: u64, message: Inbound) -> Result<(), Stop> {
        match message {
            Inbound::User { text, images } => {
                if self.queue.len() >= MAX_QUEUED_PROMPTS {
                    let why = format!(
                        "{MAX_QUEUED_PROMPTS} prompts are already waiting for the turn to end; \
                         this one was dropped: send the next prompt after a `result`"
                    );
                    return self.input_error(line, &why);
                }
                self.queue.push_back((text, images));
            }
            Inbound::Control { request_id, request } => self.on_control(request_id, request)?,
            Inbound::Answer { request_id, outcome } => {
                if !self.asks.contains_key(&request_id) {
                    let why = format!("a control_response to {request_id:?}, which is no request waiting for an answer");
                    return self.input_error(line, &why);
                }
                self.resolve(&request_id, outcome)?;
            }
            Inbound::Cancel | Inbound::KeepAlive => {}
            Inbound::Bad(why) => self.input_error(line, &why)?,
        }
        Ok(())
    }

    fn on_control(&mut self, request_id: String, request: Control) -> Result<(), Stop> {
        let sid = self.session_id();
        match request {
            Control::Initialize => {
                self.emit(&wire::control_success(&request_id, wire::initialize_response()))
            }
            Control::Interrupt => match (sid, self.turn.is_some(), self.client()) {
                (Some(sid), true, Some(client)) => {
                    let call = client.interrupt(sid);
                    self.calls.push(Box::pin(async move {
                        Done::Control(request_id, call.await.map(|_| ()))
                    }));
                    Ok(())
                }
                // Nothing runs: nothing to stop.
                _ => self.emit(&wire::control_success(&request_id, json!({}))),
            },
            Control::SetPermissionMode(name) => {
                let mode = match PermissionMode::parse(&name) {
                    Ok(mode) => mode,
                    Err(why) => return self.emit(&wire::control_error(&request_id, &why)),
                };
                let plan_changes =
                    (mode == PermissionMode::Plan) != (self.mode == PermissionMode::Plan);
                self.mode = mode;
                if let Some(ctx) = &mut self.ctx {
                    ctx.permission_mode = mode.as_str();
                }
                match (sid, self.client()) {
                    (Some(session_id), Some(client)) if plan_changes => {
                        let outboard_mode = if mode == PermissionMode::Plan {
                            SessionMode::Plan
                        } else {
                            SessionMode::Default
                        };
                        let params = SessionSetModeParams { session_id, mode: outboard_mode };
                        let call = client.call::<methods::SessionSetMode>(params);
                        self.calls.push(Box::pin(async move {
                            Done::Control(request_id, call.await.map(|_| ()))
                        }));
                        Ok(())
                    }
                    _ => self.emit(&wire::control_success(&request_id, json!({}))),
                }
            }
            Control::SetModel(None) => self.emit(&wire::control_error(
                &request_id,
                "set_model needs a model's name (`outboard models` lists them); Outboard cannot \
                 go back to an unnamed default",
            )),
            Control::SetModel(Some(model)) => match (sid, self.client()) {
                (Some(session_id), Some(client)) => {
                    let params = SessionSetModelParams { session_id, model };
                    let call = client.call::<methods::SessionSetModel>(params);
                    self.calls.push(Box::pin(async move {
                        Done::Control(request_id, call.await.map(|_| ()))
                    }));
                    Ok(())
                }
                _ => {
                    self.pending_model = Some(model);
                    self.emit(&wire::control_success(&request_id, json!({})))
                }
            },
            Control::Other(subtype) => self.emit(&wire::control_error(
                &request_id,
                &format!(
                    "unsupported control request {subtype:?}: Outboard takes initialize, \
                     interrupt, set_permission_mode and set_model"
                ),
            )),
        }
    }

    fn on_update(&mut self, update: Result<Update, FollowError>) -> Result<(), Stop> {
        match update {
            Ok(Update::Event(event)) => self.on_event(&event),
            Ok(Update::Attached { snapshot, .. }) => {
                for event in &snapshot.events {
                    self.on_event(event)?;
                }
                Ok(())
            }
            Ok(Update::Warning(err)) => {
                eprintln!("outboard: warning: {err}");
                Ok(())
            }
            Ok(Update::AttachFailed { error, .. }) if !error.is_fatal() => {
                Err(Stop::Follow(format!("the server refused the session: {error}"), exit::CONNECT))
            }
            Ok(_) => Ok(()),
            Err(FollowError::Lost(e) | FollowError::Refused(e)) => Err(Stop::Follow(
                format!(
                    "{} — the session may still be running; see `outboard sessions`",
                    crate::connect::Hinted(&e)
                ),
                exit::CONNECT,
            )),
            Err(FollowError::GaveUp { attempts, last, .. }) => Err(Stop::Follow(
                format!("reconnecting failed ({attempts} attempts; last: {last})"),
                exit::CONNECT,
            )),
        }
    }

    fn on_event(&mut self, event: &SessionEvent) -> Result<(), Stop> {
        let Some(ctx) = self.ctx.clone() else { return Ok(()) };
        if event.session_id.0 != ctx.session_id {
            return Ok(());
        }
        if let EventKind::ModelChanged { label, .. } = &event.kind {
            if let Some(c) = &mut self.ctx {
                c.model = label.clone();
            }
        }
        if let EventKind::ApprovalRequested {
            call_id,
            name,
            input,
            unjudged,
            kind,
            plan,
            questions,
            ..
        } = &event.kind
        {
            let input = match kind {
                ApprovalKind::Plan => json!({"plan": plan}),
                ApprovalKind::Question => json!({"questions": questions}),
                ApprovalKind::Tool => input.clone(),
            };
            let ask = Ask {
                call_id: call_id.clone(),
                name: name.clone(),
                input,
                kind: *kind,
                questions: questions.clone(),
            };
            self.on_approval(ask, unjudged.is_some())?;
        }
        let Some(turn) = self.turn.as_mut() else { return Ok(()) };
        let mut out = Vec::new();
        let ended = turn.on_event(&ctx, event, self.opts.partial, &mut out);
        let cut = match (&event.kind, self.opts.max_turns) {
            (EventKind::AssistantMessage { tool_calls, .. }, Some(max))
                if event.parent.is_none()
                    && !tool_calls.is_empty()
                    && turn.answers >= max
                    && turn.cut == Cut::No =>
            {
                turn.cut = Cut::MaxTurns;
                true
            }
            _ => false,
        };
        for message in &out {
            self.emit(message)?;
        }
        if cut {
            self.interrupt_turn();
        }
        if ended {
            self.turn = None;
        }
        Ok(())
    }

    fn interrupt_turn(&mut self) {
        if let (Some(sid), Some(client)) = (self.session_id(), self.client()) {
            let call = client.interrupt(sid);
            self.calls.push(Box::pin(async move { Done::Interrupted(call.await.map(|_| ())) }));
        }
    }

    fn on_approval(&mut self, ask: Ask, unjudged: bool) -> Result<(), Stop> {
        let rules = Rules {
            mode: self.mode,
            ask_stdio: self.opts.ask_stdio && !self.stdin_done,
            allowed: &self.opts.allowed_tools,
        };
        match permissions::judge(rules, &ask.name, ask.kind, unjudged) {
            Verdict::Allow => {
                let answer = permissions::Answer {
                    decision: outboard_shared::ApprovalDecision::Allow,
                    reason: None,
                    answers: None,
                    interrupt: false,
                    note: None,
                };
                self.send_answer(&ask, answer);
            }
            Verdict::Deny(reason) => {
                let answer = permissions::Answer {
                    decision: outboard_shared::ApprovalDecision::Deny,
                    reason: Some(reason),
                    answers: None,
                    interrupt: false,
                    note: None,
                };
                self.send_answer(&ask, answer);
            }
            Verdict::Ask => {
                self.next_ask += 1;
                let request_id = format!("outboard_{}", self.next_ask);
                let tool = match ask.kind {
                    ApprovalKind::Plan => "ExitPlanMode",
                    ApprovalKind::Question => "AskUserQuestion",
                    ApprovalKind::Tool => ask.name.as_str(),
                };
                let request =
                    permissions::can_use_tool(&request_id, tool, &ask.input, &ask.call_id);
                self.emit(&request)?;
                let expired = request_id.clone();
                self.calls.push(Box::pin(async move {
                    tokio::time::sleep(ASK_DEADLINE).await;
                    Done::Expired(expired)
                }));
                self.asks.insert(request_id, ask);
            }
        }
        Ok(())
    }

    /// The program's answer (or its absence) to request `request_id`.
    fn resolve(&mut self, request_id: &str, outcome: Result<Value, String>) -> Result<(), Stop> {
        let Some(ask) = self.asks.remove(request_id) else { return Ok(()) };
        let answer = permissions::answer(outcome, ask.kind, &ask.input, ask.questions.as_deref());
        if let Some(note) = &answer.note {
            eprintln!("{note}");
        }
        let interrupt = answer.interrupt;
        self.send_answer(&ask, answer);
        if interrupt {
            self.interrupt_turn();
        }
        Ok(())
    }

    fn send_answer(&mut self, ask: &Ask, answer: permissions::Answer) {
        if answer.decision == outboard_shared::ApprovalDecision::Deny {
            if let Some(turn) = self.turn.as_mut() {
                turn.denials.push(json!({
                    "tool_name": ask.name, "tool_use_id": ask.call_id, "tool_input": ask.input,
                }));
            }
        }
        let (Some(session_id), Some(client)) = (self.session_id(), self.client()) else { return };
        let params = ApprovalAnswerParams {
            session_id,
            call_id: ask.call_id.clone(),
            decision: answer.decision,
            scope: ApprovalScope::Once,
            reason: answer.reason,
            answers: answer.answers,
        };
        let call = client.call::<methods::ApprovalAnswer>(params);
        let call_id = ask.call_id.clone();
        self.calls.push(Box::pin(async move { Done::Answered(call_id, call.await.map(|_| ())) }));
    }

    fn on_done(&mut self, done: Done) -> Result<(), Stop> {
        match done {
            Done::Sent(Ok(())) => self.sending = false,
            Done::Sent(Err(err)) => {
                self.sending = false;
                let error = format!("cannot send the prompt: {}", crate::connect::Hinted(&err));
                eprintln!("outboard: {error}");
                if let (Some(turn), Some(ctx)) = (self.turn.take(), self.ctx.clone()) {
                    let result =
                        turn.result(&ctx, "error_during_execution", true, &error, Some(&error));
                    self.emit(&result)?;
                }
            }
            Done::Control(request_id, Ok(())) => {
                self.emit(&wire::control_success(&request_id, json!({})))?
            }
            Done::Control(request_id, Err(err)) => {
                let error = crate::connect::Hinted(&err).to_string();
                self.emit(&wire::control_error(&request_id, &error))?
            }
            Done::Answered(_, Ok(())) | Done::Interrupted(Ok(())) => {}
            Done::Answered(call_id, Err(err)) => {
                eprintln!("outboard: cannot answer {call_id}: {err}")
            }
            Done::Interrupted(Err(err)) => eprintln!("outboard: cannot interrupt: {err}"),
            Done::Expired(request_id) => {
                if self.asks.contains_key(&request_id) {
                    self.emit(
                        &json!({"type": "control_cancel_request", "request_id": request_id}),
                    )?;
                    let why = format!(
                        "the program did not answer can_use_tool within {} s",
                        ASK_DEADLINE.as_secs()
                    );
                    self.resolve(&request_id, Err(why))?;
                }
            }
        }
        Ok(())
    }

    /// Gives the client back to the connection and closes it (stopping an embedded server).
    async fn close(&mut self) {
        let follow = self.follow.take();
        if let Some(mut conn) = self.conn.take() {
            if let Some(follow) = follow {
                conn.client = follow.into_client();
            }
            conn.close().await;
        }
    }
}
