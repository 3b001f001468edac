//! The TUI's connection task: owns the [`Client`], turns [`Effect`]s into requests and server
//! frames into [`AppEvent`]s, and reconnects. When the connection drops it retries with
//! [`Backoff`], reporting each attempt (the status line shows it instead of freezing), and on
//! success re-attaches the session with the last durable `seq` it delivered, so the transcript
//! resumes with no gap and no duplicate. A `lagged` notice from the server (this client fell
//! behind) is handled the same way without reconnecting.
//!
//! Requests whose answer only becomes a message (send, interrupt, list, drive) run as their own
//! tasks; attach and create are awaited inside the loop's `select!` next to the event stream,
//! never blocking it (see `client.rs` on why a full event queue must keep being drained).

use std::future::Future;
use std::pin::Pin;

use outboard_shared::{
    AgentsListResponse, ErrorCode, EventKind, FilesListParams, FilesListResponse, FilesReadParams,
    FilesReadResponse, Method, Role, SessionAttachResponse, SessionId, SessionInfo,
    SkillsListResponse,
};
use tokio::sync::mpsc;

use super::app::{AppEvent, ConnState, Effect, Me};
use crate::client::{Backoff, Client, ClientError, TAKEOVER_NOTICE, TAKEOVER_WAIT};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What to open first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Initial {
    /// Create a new session and drive it.
    New,
    /// Embedded mode: create a new session working in place in this host directory, and drive
    /// it; `/new` sessions work there too.
    NewIn(String),
    /// Attach to this session, asking to drive when `drive`.
    Attach(SessionId, bool),
    /// Create a new session from this source (a repository the server clones), and drive it;
    /// `/new` sessions are made from it too.
    NewFrom(outboard_shared::SourceSpec),
    /// Create a new session from this upload (`outboard --upload`) and drive it; an upload is
    /// used once, so `/new` sessions start empty.
    FromUpload(String),
}

/// The most of a diff `/diff` shows in the transcript; `outboard diff` prints any size.
pub const DIFF_SHOWN_BYTES: usize = 256 * 1024;

enum Step {
    Created(Result<SessionInfo, ClientError>),
    Attached { result: Result<SessionAttachResponse, ClientError>, resumed: bool, role: Role },
}

type Pending = Pin<Box<dyn Future<Output = Step> + Send>>;

struct State {
    /// Our connection's id (from `welcome`): presence names connections, not users.
    connection_id: u64,
    /// The attached session (or the one being attached) and our role in it.
    current: Option<(SessionId, Role)>,
    last_seq: u64,
    /// Ask for the wheel once attached (`outboard attach --drive` by a non-owner).
    want_drive: bool,
    /// The host directory new sessions work in (embedded mode), if any.
    workspace: Option<String>,
    /// What new sessions are made from, if not a directory.
    source: Option<outboard_shared::SourceSpec>,
    /// How new sessions are made (`--network`, `--context-window`).
    new_sessions: NewSessions,
    /// The server's HTTP endpoints.
    http: crate::http::Endpoint,
    /// The upload the first new session is made from (taken by that `session/create`).
    upload: Option<String>,
}

/// Runs until `effects` closes (the app quit). Every state change goes to `app`.
pub async fn run(
    url: String,
    token: String,
    initial: Initial,
    effects: mpsc::Receiver<Effect>,
    app: mpsc::Sender<AppEvent>,
) {
    let options = crate::client::ConnectOptions::default();
    run_with(url, token, options, initial, NewSessions::default(), effects, app).await
}

/// How the TUI makes new sessions, from its flags.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewSessions {
    /// What their sandboxes may reach (`--network`).
    pub network: outboard_shared::SessionNetwork,
    /// Their context window in tokens, when not the model's (`--context-window`).
    pub context_window: Option<u64>,
    /// Their model by name, when not the server's default (`--model`).
    pub model: Option<String>,
    /// They start in plan mode (`outboard --plan`).
    pub plan: bool,
}

/// [`run`] with the transport options of the connection flags (`--ca-cert`, `--insecure`).
pub async fn run_with(
    url: String,
    token: String,
    options: crate::client::ConnectOptions,
    initial: Initial,
    new_sessions: NewSessions,
    mut effects: mpsc::Receiver<Effect>,
    app: mpsc::Sender<AppEvent>,
) {
    let mut backoff = Backoff::new();
    let workspace = match &initial {
        Initial::NewIn(dir) => Some(dir.clone()),
        Initial::New | Initial::Attach(..) | Initial::NewFrom(_) | Initial::FromUpload(_) => None,
    };
    let source = match &initial {
        Initial::NewFrom(spec) => Some(spec.clone()),
        _ => None,
    };
    let upload = match &initial {
        Initial::FromUpload(id) => Some(id.clone()),
        _ => None,
    };
    let http = crate::http::Endpoint::new(&url, &token, options.ca_cert.clone());
    let mut state = State {
        connection_id: 0,
        current: None,
        last_seq: 0,
        want_drive: false,
        workspace,
        source,
        new_sessions,
        upload,
        http,
    };
    let mut initial = Some(initial);
    let mut reason: Option<String> = None;
    loop {
        let conn_state = match &reason {
            None => ConnState::Connecting,
            Some(r) => ConnState::Reconnecting { attempt: backoff.attempt(), reason: r.clone() },
        };
        let _ = app.send(AppEvent::Connection(conn_state, None)).await;
        let mut client = match Client::connect_with(&url, &token, true, &options).await {
            Ok(client) => client,
            Err(
                e @ (ClientError::Unauthorized { .. }
                | ClientError::ProtocolVersion { .. }
                | ClientError::InvalidUrl { .. }
                | ClientError::Insecure { .. }
                | ClientError::CaCert { .. }
                | ClientError::Certificate { .. }),
            ) => {
                let _ = app.send(AppEvent::Connection(ConnState::Gone(e.to_string()), None)).await;
                // Nothing more to do; wait for the app to quit.
                while effects.recv().await.is_some() {}
                return;
            }
            Err(e) => {
                reason = Some(short(&e));
                let delay = backoff.next_delay();
                tokio::select! {
                    _ = tokio::time::sleep(delay) => continue,
                    closed = drain_while_down(&mut effects, &app) => if closed { return } else { continue },
                }
            }
        };
        backoff.reset();
        let welcome = client.welcome();
        state.connection_id = welcome.connection_id;
        let me = Me { user: welcome.user.name.clone(), connection_id: welcome.connection_id };
        let _ = app.send(AppEvent::Connection(ConnState::Connected, Some(me))).await;

        let mut pending: Option<Pending> = match (initial.take(), &state.current) {
            (_, Some((id, role))) => {
                Some(attach(&client, id.clone(), *role, Some(state.last_seq), true, &app))
            }
            (
                Some(
                    Initial::New | Initial::NewIn(_) | Initial::NewFrom(_) | Initial::FromUpload(_),
                ),
                None,
            ) => Some(create(&client, &mut state, &app)),
            (Some(Initial::Attach(id, drive)), None) => {
                state.want_drive = drive;
                let role = if drive { Role::Driver } else { Role::Watcher };
                state.current = Some((id.clone(), role));
                Some(attach(&client, id, role, None, false, &app))
            }
            (None, None) => None,
        };

        let lost = loop {
            tokio::select! {
                event = client.next_event() => match event {
                    Ok(event) => {
                        let ours = state.current.as_ref().is_some_and(|(id, _)| *id == event.session_id);
                        if !ours {
                            continue;
                        }
                        if event.kind.is_durable() {
                            if event.seq <= state.last_seq {
                                continue;
                            }
                            state.last_seq = event.seq;
                        }
                        if let EventKind::Presence { attached } = &event.kind {
                            let driving = attached.iter().any(|p| p.role == Role::Driver && p.connection_id == state.connection_id);
                            if let Some((_, role)) = &mut state.current {
                                *role = if driving { Role::Driver } else { Role::Watcher };
                            }
                        }
                        let _ = app.send(AppEvent::Server(Box::new(event))).await;
                    }
                    Err(err) if err.code() == Some(ErrorCode::Lagged) && !err.is_fatal() => {
                        if let Some((id, role)) = &state.current {
                            pending = Some(attach(&client, id.clone(), *role, Some(state.last_seq), true, &app));
                        }
                    }
                    Err(err) if !err.is_fatal() => {
                        let _ = app.send(AppEvent::Notice(short(&err))).await;
                    }
                    Err(err) => break short(&err),
                },
                step = next_step(&mut pending) => {
                    pending = on_step(step, &client, &mut state, &app).await;
                }
                effect = effects.recv() => {
                    let Some(effect) = effect else { return };
                    if let Some(p) = on_effect(effect, &client, &mut state, &app) {
                        pending = Some(p);
                    }
                }
            }
        };
        reason = Some(lost);
        // The first retry comes at once: a dropped connection is often a restarted server.
    }
}

/// While disconnected, answer effects with a notice; true when the app has quit.
async fn drain_while_down(
    effects: &mut mpsc::Receiver<Effect>,
    app: &mpsc::Sender<AppEvent>,
) -> bool {
    loop {
        match effects.recv().await {
            None => return true,
            Some(_) => {
                let _ =
                    app.send(AppEvent::Notice("not connected; try again in a moment".into())).await;
            }
        }
    }
}

fn short(e: &ClientError) -> String {
    match e {
        ClientError::Connect { reason, .. } => reason.clone(),
        ClientError::Closed { reason } => {
            reason.clone().unwrap_or_else(|| "connection closed".into())
        }
        ClientError::Connection { error, .. } | ClientError::Server { error, .. } => {
            error.message.clone()
        }
        other => other.to_string(),
    }
}

fn create(client: &Client, state: &mut State, app: &mpsc::Sender<AppEvent>) -> Pending {
    // An upload is used once (the first session); a repository is cloned for each new session.
    let source = state
        .upload
        .take()
        .map(|upload_id| outboard_shared::SourceSpec::Upload { upload_id })
        .or_else(|| state.source.clone());
    let Some(source) = source else {
        let call = client.create_session_with(outboard_shared::SessionCreateParams {
            title: None,
            workspace: state.workspace.clone(),
            source: None,
            network: state.new_sessions.network,
            context_window: state.new_sessions.context_window,
            model: state.new_sessions.model.clone(),
        });
        return Box::pin(async move { Step::Created(call.await) });
    };
    let params = outboard_shared::SessionCreateParams {
        title: None,
        workspace: None,
        source: Some(source),
        network: state.new_sessions.network,
        context_window: state.new_sessions.context_window,
        model: state.new_sessions.model.clone(),
    };
    let (call, mut progress) =
        client.call_with_progress::<outboard_shared::methods::SessionCreate>(params);
    let app = app.clone();
    Box::pin(async move {
        tokio::pin!(call);
        let created = loop {
            tokio::select! {
                created = &mut call => break created,
                Some(frame) = progress.recv() => {
                    let _ = app.send(AppEvent::Notice(frame.message)).await;
                }
            }
        };
        let _ = app.send(AppEvent::Notice(String::new())).await;
        Step::Created(created.map(|r| r.session))
    })
}

/// Attaches to `id`; while the node running it cannot be reached, waits for another node to
/// take it over, saying so in the notice line.
fn attach(
    client: &Client,
    id: SessionId,
    role: Role,
    after_seq: Option<u64>,
    resumed: bool,
    app: &mpsc::Sender<AppEvent>,
) -> Pending {
    let waited = Arc::new(AtomicBool::new(false));
    let (notices, shown) = (app.clone(), waited.clone());
    let waiting = move || {
        shown.store(true, Ordering::Relaxed);
        let _ = notices.try_send(AppEvent::Notice(TAKEOVER_NOTICE.into()));
    };
    let call = client.attach_through_takeover(id, role, after_seq, TAKEOVER_WAIT, waiting);
    let app = app.clone();
    Box::pin(async move {
        let result = call.await;
        if result.is_ok() && waited.load(Ordering::Relaxed) {
            let _ = app.send(AppEvent::Notice(String::new())).await;
        }
        Step::Attached { result, resumed, role }
    })
}

async fn on_step(
    step: Step,
    client: &Client,
    state: &mut State,
    app: &mpsc::Sender<AppEvent>,
) -> Option<Pending> {
    match step {
        Step::Created(Ok(session)) => {
            state.current = Some((session.id.clone(), Role::Driver));
            state.last_seq = 0;
            Some(attach(client, session.id, Role::Driver, None, false, app))
        }
        Step::Created(Err(e)) => {
            let _ =
                app.send(AppEvent::Notice(format!("cannot create a session: {}", short(&e)))).await;
            None
        }
        Step::Attached { result: Ok(snapshot), resumed, .. } => {
            if let Some(last) = snapshot.events.last() {
                state.last_seq = state.last_seq.max(last.seq);
            }
            state.current = Some((snapshot.session.id.clone(), snapshot.role));
            let ask = state.want_drive && snapshot.role == Role::Watcher;
            state.want_drive = false;
            let id = snapshot.session.id.clone();
            // `outboard --plan`: a session we just made plans before its first message.
            if state.new_sessions.plan
                && snapshot.role == Role::Driver
                && snapshot.session.last_seq == 0
            {
                let params = outboard_shared::SessionSetModeParams {
                    session_id: id.clone(),
                    mode: outboard_shared::SessionMode::Plan,
                };
                let call = client.call::<outboard_shared::methods::SessionSetMode>(params);
                spawn_request(async move { call.await.map(|_| ()) }, app, "");
            }
            let _ = app.send(AppEvent::Attached(Box::new(snapshot), resumed)).await;
            if ask {
                spawn_request(client.drive_request(id), app, "asked the driver for the wheel");
            }
            None
        }
        Step::Attached { result: Err(e), role: Role::Driver, resumed }
            if e.code() == Some(ErrorCode::Forbidden) =>
        {
            // Not the owner: watch instead, and ask for the wheel if that was the point.
            let (id, _) = state.current.clone()?;
            state.current = Some((id.clone(), Role::Watcher));
            let after = resumed.then_some(state.last_seq);
            Some(attach(client, id, Role::Watcher, after, resumed, app))
        }
        Step::Attached { result: Err(e), .. } => {
            // A lost connection keeps the session: the reconnect re-attaches it.
            if !e.is_fatal() {
                state.current = None;
            }
            let _ = app.send(AppEvent::Notice(format!("cannot attach: {}", short(&e)))).await;
            None
        }
    }
}

/// The pending attach/create, or never.
async fn next_step(pending: &mut Option<Pending>) -> Step {
    match pending {
        Some(p) => {
            let step = p.as_mut().await;
            *pending = None;
            step
        }
        None => std::future::pending().await,
    }
}

fn on_effect(
    effect: Effect,
    client: &Client,
    state: &mut State,
    app: &mpsc::Sender<AppEvent>,
) -> Option<Pending> {
    let current = state.current.as_ref().map(|(id, _)| id.clone());
    let need_session = || {
        let app = app.clone();
        tokio::spawn(async move {
            let _ = app.send(AppEvent::Notice("not attached to a session".into())).await;
        });
    };
    match effect {
        Effect::Quit => None,
        Effect::NewSession => {
            if let Some(id) = current {
                spawn_request(client.detach(id), app, "");
            }
            state.current = None;
            Some(create(client, state, app))
        }
        Effect::Attach(id) => {
            if let Some(old) = current {
                spawn_request(client.detach(old), app, "");
            }
            state.current = Some((id.clone(), Role::Driver));
            state.last_seq = 0;
            // As driver when we own it; the server refuses otherwise and we fall back to watching.
            Some(attach(client, id, Role::Driver, None, false, app))
        }
        Effect::LoadOlder(id, before) => {
            let call = client.history(id.clone(), before);
            let app = app.clone();
            tokio::spawn(async move {
                let page = call.await.map(Box::new).map_err(|e| short(&e));
                let _ = app.send(AppEvent::Older(id, page)).await;
            });
            None
        }
        Effect::ListSessions => {
            let call = client.list_sessions(Some(50));
            let app = app.clone();
            tokio::spawn(async move {
                let event = match call.await {
                    Ok(list) => AppEvent::Sessions(list),
                    Err(e) => AppEvent::Notice(format!("cannot list sessions: {}", short(&e))),
                };
                let _ = app.send(event).await;
            });
            None
        }
        Effect::Plans => {
            let app = app.clone();
            let call = org_files_notice(client, Some("/plans/".into()));
            tokio::spawn(async move {
                let _ = app.send(AppEvent::Notice(call.await)).await;
            });
            None
        }
        Effect::Memory(path) => {
            let app = app.clone();
            let call = org_files_notice(client, path);
            tokio::spawn(async move {
                let _ = app.send(AppEvent::Notice(call.await)).await;
            });
            None
        }
        Effect::Diff(stat) => {
            let app = app.clone();
            let id = current?;
            let http = state.http.clone();
            tokio::spawn(async move {
                let _ = app.send(AppEvent::Notice(diff_text(&http, &id, stat).await)).await;
            });
            None
        }
        Effect::Agents => {
            let app = app.clone();
            let call = client.request(Method::AgentsList(outboard_shared::Empty {}));
            tokio::spawn(async move {
                let text = match call.await.map(serde_json::from_value::<AgentsListResponse>) {
                    Ok(Ok(list)) => agents_text(&list),
                    Ok(Err(e)) => format!("cannot read the agent types: {e}"),
                    Err(e) => format!("cannot list the agent types: {}", short(&e)),
                };
                let _ = app.send(AppEvent::Notice(text)).await;
            });
            None
        }
        Effect::Skills => {
            let app = app.clone();
            let call = client.request(Method::SkillsList(outboard_shared::Empty {}));
            tokio::spawn(async move {
                let text = match call.await.map(serde_json::from_value::<SkillsListResponse>) {
                    Ok(Ok(list)) if list.skills.is_empty() => {
                        "no skills yet: `outboard skills import DIR` adds some".to_owned()
                    }
                    Ok(Ok(list)) => {
                        let mut lines = vec![format!("{} skills:", list.skills.len())];
                        for s in list.skills {
                            let problem = s.problem.map(|p| format!(" ({p})")).unwrap_or_default();
                            lines.push(format!("  {}: {}{problem}", s.name, s.description));
                        }
                        lines.join("\n")
                    }
                    Ok(Err(e)) => format!("cannot read the skills: {e}"),
                    Err(e) => format!("cannot list the skills: {}", short(&e)),
                };
                let _ = app.send(AppEvent::Notice(text)).await;
            });
            None
        }
        Effect::Models(current) => {
            let app = app.clone();
            let call =
                client.call::<outboard_shared::methods::ModelsList>(outboard_shared::Empty {});
            tokio::spawn(async move {
                let text = match call.await {
                    Ok(list) => models_text(&list.models, current.as_deref()),
                    Err(e) => format!("cannot list the models: {}", short(&e)),
                };
                let _ = app.send(AppEvent::Notice(text)).await;
            });
            None
        }
        other => {
            let Some(id) = current else {
                need_session();
                return None;
            };
            match other {
                Effect::SetMode(mode) => {
                    let params = outboard_shared::SessionSetModeParams { session_id: id, mode };
                    let call = client.call::<outboard_shared::methods::SessionSetMode>(params);
                    // Success shows as the `mode_changed` event, to every attached client.
                    spawn_request(async move { call.await.map(|_| ()) }, app, "")
                }
                Effect::SetModel(model) => {
                    let params = outboard_shared::SessionSetModelParams { session_id: id, model };
                    let call = client.call::<outboard_shared::methods::SessionSetModel>(params);
                    // Success shows as the `model_changed` event, to every attached client.
                    spawn_request(async move { call.await.map(|_| ()) }, app, "")
                }
                Effect::Send(text) => {
                    let call = client.send_turn(id, text, Vec::new());
                    let app = app.clone();
                    tokio::spawn(async move {
                        if let Err(e) = call.await {
                            let _ = app
                                .send(AppEvent::Notice(format!("not sent: {}", short(&e))))
                                .await;
                        }
                    });
                }
                Effect::Interrupt => spawn_request(
                    {
                        let call = client.interrupt(id);
                        async move { call.await.map(|_| ()) }
                    },
                    app,
                    "",
                ),
                Effect::Compact(focus) => {
                    let call = client.call::<outboard_shared::methods::SessionCompact>(
                        outboard_shared::SessionCompactParams { session_id: id, focus },
                    );
                    let app = app.clone();
                    tokio::spawn(async move {
                        // Success shows as the `compaction` event, to every attached client.
                        if let Err(e) = call.await {
                            let text = format!("not compacted: {}", short(&e));
                            let _ = app.send(AppEvent::Notice(text)).await;
                        }
                    });
                }
                Effect::DriveRequest => spawn_request(client.drive_request(id), app, ""),
                Effect::KillTask(shell_id) => spawn_request(
                    client.kill_task(id, shell_id.clone()),
                    app,
                    &format!("killed {shell_id}"),
                ),
                Effect::Answer(answer) => {
                    let params = outboard_shared::ApprovalAnswerParams {
                        session_id: id,
                        call_id: answer.call_id.clone(),
                        decision: answer.decision,
                        scope: answer.scope,
                        reason: answer.reason.clone(),
                        answers: answer.answers.clone(),
                    };
                    let call = client.call::<outboard_shared::methods::ApprovalAnswer>(params);
                    spawn_request(async move { call.await.map(|_| ()) }, app, "")
                }
                Effect::Checkpoints => {
                    let call = client.call::<outboard_shared::methods::SessionCheckpoints>(
                        outboard_shared::SessionRef { session_id: id },
                    );
                    let app = app.clone();
                    tokio::spawn(async move {
                        let listed = call.await.map(|l| l.checkpoints).map_err(|e| short(&e));
                        let _ = app.send(AppEvent::Checkpoints(listed)).await;
                    });
                }
                Effect::Rewind { n, code, conversation } => {
                    let params = outboard_shared::SessionRewindParams {
                        session_id: id,
                        checkpoint: n,
                        code,
                        conversation,
                    };
                    let call = client.call::<outboard_shared::methods::SessionRewind>(params);
                    let app = app.clone();
                    tokio::spawn(async move {
                        // The `rewound` event tells every attached client; the prompt is ours.
                        let event = match call.await {
                            Ok(done) => AppEvent::Rewound(done.prompt),
                            Err(e) => AppEvent::Notice(format!("not rewound: {}", short(&e))),
                        };
                        let _ = app.send(event).await;
                    });
                }
                Effect::Fork(checkpoint) => {
                    let params = outboard_shared::SessionForkParams { session_id: id, checkpoint };
                    let call = client.call::<outboard_shared::methods::SessionFork>(params);
                    let app = app.clone();
                    tokio::spawn(async move {
                        let event = match call.await {
                            Ok(done) => AppEvent::Forked(done.session.id, done.prompt),
                            Err(e) => AppEvent::Notice(format!("not forked: {}", short(&e))),
                        };
                        let _ = app.send(event).await;
                    });
                }
                Effect::DriveTake => spawn_request(client.drive_take(id), app, ""),
                Effect::DriveGrant(user) => spawn_request(
                    client.drive_grant(id, user.clone()),
                    app,
                    &format!("handed the wheel to {user}"),
                ),
                _ => {}
            }
            None
        }
    }
}

/// Runs a request in its own task; reports its error, or `ok` when not empty.
fn spawn_request(
    call: impl Future<Output = Result<(), ClientError>> + Send + 'static,
    app: &mpsc::Sender<AppEvent>,
    ok: &str,
) {
    let app = app.clone();
    let ok = ok.to_owned();
    tokio::spawn(async move {
        let event = match call.await {
            Ok(()) if ok.is_empty() => return,
            Ok(()) => AppEvent::Notice(ok),
            Err(e) => AppEvent::Notice(short(&e)),
        };
        let _ = app.send(event).await;
    });
}

/// `/memory`: the org's memory files, or one file's content, as a notice.
fn org_files_notice(
    client: &Client,
    path: Option<String>,
) -> impl std::future::Future<Output = String> + Send + 'static {
    // A directory named with its `/` (`/plans/`) is listed too.
    let list = path.as_ref().is_none_or(|p| p.ends_with('/'));
    let path = match path {
        None => "/memory".to_owned(),
        Some(p) if p.ends_with('/') => p.trim_end_matches('/').to_owned(),
        Some(p) if p.starts_with('/') => p,
        Some(p) => format!("/memory/{p}"),
    };
    let method = if list {
        Method::FilesList(FilesListParams { path: path.clone(), include_deleted: false })
    } else {
        Method::FilesRead(FilesReadParams { path: path.clone(), version: None })
    };
    let call = client.request(method);
    async move {
        let value = match call.await {
            Ok(value) => value,
            Err(e) => return format!("{path}: {}", short(&e)),
        };
        if list {
            match serde_json::from_value::<FilesListResponse>(value) {
                Ok(r) if r.files.is_empty() => format!("nothing in {path} yet"),
                Ok(r) => {
                    let mut lines = vec![format!("{} files in {path}:", r.files.len())];
                    for f in r.files {
                        lines.push(format!(
                            "  {}  v{}  {} B  {}",
                            f.path, f.version, f.size, f.author
                        ));
                    }
                    lines.join("\n")
                }
                Err(e) => format!("unexpected answer: {e}"),
            }
        } else {
            match serde_json::from_value::<FilesReadResponse>(value) {
                Ok(r) => format!(
                    "{} v{} by {}:\n{}",
                    r.file.path,
                    r.file.version,
                    r.file.author,
                    r.content.trim_end()
                ),
                Err(e) => format!("unexpected answer: {e}"),
            }
        }
    }
}

/// The session's diff as the transcript shows it: cut at [`DIFF_SHOWN_BYTES`], or what went
/// wrong.
async fn diff_text(http: &crate::http::Endpoint, id: &SessionId, stat: bool) -> String {
    use futures_util::StreamExt as _;
    let response = match http.diff(id, stat).await {
        Ok(r) => r,
        Err(e) => return format!("cannot get the diff:\n{}", short(&e)),
    };
    let mut body = response.bytes_stream();
    let mut text: Vec<u8> = Vec::new();
    let mut cut = false;
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) if text.len() + chunk.len() > DIFF_SHOWN_BYTES => {
                text.extend_from_slice(&chunk[..DIFF_SHOWN_BYTES - text.len()]);
                cut = true;
                break;
            }
            Ok(chunk) => text.extend_from_slice(&chunk),
            Err(e) => return format!("the diff was cut:\n{e}"),
        }
    }
    let mut text = String::from_utf8_lossy(&text).into_owned();
    if text.trim().is_empty() {
        return "no changes against the session's base\n".to_owned();
    }
    if cut {
        text.push_str(&format!(
            "\n… cut at {} KiB: `outboard diff {id}` prints all of it\n",
            DIFF_SHOWN_BYTES / 1024
        ));
    }
    if !text.contains('\n') {
        text.push('\n');
    }
    text
}

/// `/agents`: the built-in `general-purpose` type, then the org's, each with its tools, and what
/// is wrong with the unusable ones.
/// `/model`'s listing: the models, the session's marked `▸`, the default `*`.
pub(crate) fn models_text(models: &[outboard_shared::ModelInfo], current: Option<&str>) -> String {
    let mut lines = vec!["models (/model NAME uses one from the next turn):".to_owned()];
    for m in models {
        let mark = if Some(m.name.as_str()) == current { "▸" } else { " " };
        let default = if m.default { " *default" } else { "" };
        let thinking = m.thinking_budget.map(|b| format!(", thinking {b}")).unwrap_or_default();
        lines.push(format!(
            "{mark} {}: {} ({} tokens{thinking}){default}",
            m.name, m.label, m.context_window
        ));
    }
    lines.join(
        "
",
    )
}

pub(crate) fn agents_text(list: &AgentsListResponse) -> String {
    let mut lines = vec![
        "agent types for the Task tool:".to_owned(),
        "  general-purpose: built in (tools: all)".to_owned(),
    ];
    for a in &list.agents {
        let tools = a.tools.as_ref().map_or_else(|| "all".to_owned(), |t| t.join(", "));
        let model = a.model.as_ref().map(|m| format!(", model {m}")).unwrap_or_default();
        let mut line =
            format!("  {}: {} (tools: {tools}{model}; v{})", a.name, a.description, a.version);
        if let Some(problem) = &a.problem {
            line.push_str(&format!(" — unusable: {problem}"));
        }
        for w in &a.warnings {
            line.push_str(&format!(" — {w}"));
        }
        lines.push(line);
    }
    if list.omitted > 0 {
        lines.push(format!("  … and {} more files under /agents, past what is read", list.omitted));
    }
    if list.agents.is_empty() {
        lines.push(
            "  (the org has none: `outboard agents import DIR` adds /agents/NAME.md files)"
                .to_owned(),
        );
    }
    lines.join("\n")
}
