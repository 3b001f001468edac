//! The TUI's connection task: turns [`Effect`]s into requests and the session's [`Update`]s into
//! [`AppEvent`]s. Following the session (reconnecting with backoff, re-attaching after the last
//! `seq` delivered so the transcript resumes with no gap and no duplicate, re-attaching after a
//! `lagged` notice, waiting out a takeover) is the client library's [`Follow`]; this task reports
//! each step of it to the app (the status line shows a reconnect instead of freezing).
//!
//! Requests whose answer only becomes a message (send, interrupt, list, drive) run as their own
//! tasks; a session's creation is awaited inside the loop's `select!` next to the follow, never
//! blocking it (see `outboard_client::conn` on why a full event queue must keep being drained).

use std::future::Future;
use std::pin::Pin;

use outboard_client::{Client, ClientError, Dial, Follow, Retry, Update, TAKEOVER_NOTICE};
use outboard_shared::{
    AgentsListResponse, FilesListParams, FilesListResponse, FilesReadParams, FilesReadResponse,
    Method, Role, SessionId, SessionInfo, SkillsListResponse,
};
use tokio::sync::mpsc;

use crate::app::{AppEvent, ConnState, Effect, Me};

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

/// A session being created.
type Pending = Pin<Box<dyn Future<Output = Result<SessionInfo, ClientError>> + Send>>;

/// What the task keeps beside the follow.
struct State {
    /// What to open once connected the first time.
    initial: Option<Initial>,
    /// Ask for the wheel once attached (`outboard attach --drive` by a non-owner).
    want_drive: bool,
    /// The host directory new sessions work in (embedded mode), if any.
    workspace: Option<String>,
    /// What new sessions are made from, if not a directory.
    source: Option<outboard_shared::SourceSpec>,
    /// How new sessions are made (`--network`, `--context-window`).
    new_sessions: NewSessions,
    /// The server's HTTP endpoints.
    http: outboard_client::http::Endpoint,
    /// The upload the first new session is made from (taken by that `session/create`).
    upload: Option<String>,
    /// The takeover notice is on screen (cleared once the attach lands).
    takeover_shown: bool,
}

/// Runs until `effects` closes (the app quit). Every state change goes to `app`.
pub async fn run(
    url: String,
    token: String,
    initial: Initial,
    effects: mpsc::Receiver<Effect>,
    app: mpsc::Sender<AppEvent>,
) {
    let options = outboard_client::ConnectOptions::default();
    let link = Link { url, token, options, hint: |_| None };
    run_with(link, initial, NewSessions::default(), effects, app).await
}

/// What the binary adds after a connection error's message: hints that name its flags.
pub type Hint = fn(&ClientError) -> Option<&'static str>;

/// Where the server is and how to reach it.
#[derive(Clone)]
pub struct Link {
    /// The server's `ws(s)://` URL.
    pub url: String,
    /// The bearer token.
    pub token: String,
    /// The transport options of the connection flags (`--ca-cert`, `--insecure`).
    pub options: outboard_client::ConnectOptions,
    /// The binary's hints after an error that ends the connection for good.
    pub hint: Hint,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: never in a log line.
        f.debug_struct("Link").field("url", &self.url).finish_non_exhaustive()
    }
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

/// [`run`] with the transport options of the connection flags (`--ca-cert`, `--insecure`) and
/// the binary's hints.
pub async fn run_with(
    link: Link,
    initial: Initial,
    new_sessions: NewSessions,
    mut effects: mpsc::Receiver<Effect>,
    app: mpsc::Sender<AppEvent>,
) {
    let workspace = match &initial {
        Initial::NewIn(dir) => Some(dir.clone()),
        Initial::New | Initial::Attach(..) | Initial::NewFrom(_) | Initial::FromUpload(_) => None,
    };
    let source = match &initial {
        Initial::NewFrom(spec) => Some(spec.clone()),
        Initial::New | Initial::NewIn(_) | Initial::Attach(..) | Initial::FromUpload(_) => None,
    };
    let upload = match &initial {
        Initial::FromUpload(id) => Some(id.clone()),
        Initial::New | Initial::NewIn(_) | Initial::Attach(..) | Initial::NewFrom(_) => None,
    };
    let Link { url, token, options, hint } = link;
    let http = outboard_client::http::Endpoint::new(&url, &token, options.ca_cert.clone());
    let mut state = State {
        initial: Some(initial),
        want_drive: false,
        workspace,
        source,
        new_sessions,
        upload,
        http,
        takeover_shown: false,
    };
    let dial = Dial { url, token, options, room: true };
    let mut follow = Follow::connect(dial, Retry::Forever);
    let mut pending: Option<Pending> = None;
    loop {
        tokio::select! {
            update = follow.next() => match update {
                Ok(update) => {
                    if let Some(p) = on_update(update, &mut follow, &mut state, &app).await {
                        pending = Some(p);
                    }
                }
                Err(err) => {
                    // Refused for good (the token, the protocol version, TLS).
                    let why = match &err {
                        outboard_client::FollowError::Refused(e) => hint(e).unwrap_or_default(),
                        _ => "",
                    };
                    let gone = ConnState::Gone(format!("{err}{why}"));
                    let _ = app.send(AppEvent::Connection(gone, None)).await;
                    // Nothing more to do; wait for the app to quit.
                    while effects.recv().await.is_some() {}
                    return;
                }
            },
            created = next_created(&mut pending) => match created {
                Ok(session) => follow.attach(session.id, Role::Driver),
                Err(e) => {
                    let text = format!("cannot create a session: {}", short(&e));
                    let _ = app.send(AppEvent::Notice(text)).await;
                }
            },
            effect = effects.recv() => {
                let Some(effect) = effect else { return };
                if !follow.is_connected() {
                    let text = "not connected; try again in a moment".to_owned();
                    let _ = app.send(AppEvent::Notice(text)).await;
                    continue;
                }
                if let Some(p) = on_effect(effect, &mut follow, &mut state, &app) {
                    pending = Some(p);
                }
            }
        }
    }
}

/// One step of the follow, for the app; a session to create once first connected.
async fn on_update(
    update: Update,
    follow: &mut Follow,
    state: &mut State,
    app: &mpsc::Sender<AppEvent>,
) -> Option<Pending> {
    match update {
        Update::Connecting { attempt, reason } => {
            let conn_state = match reason {
                None => ConnState::Connecting,
                Some(r) => ConnState::Reconnecting { attempt, reason: short(&r) },
            };
            let _ = app.send(AppEvent::Connection(conn_state, None)).await;
            None
        }
        Update::Connected { welcome, .. } => {
            let me = Me { user: welcome.user.name.clone(), connection_id: welcome.connection_id };
            let _ = app.send(AppEvent::Connection(ConnState::Connected, Some(me))).await;
            match state.initial.take()? {
                Initial::New | Initial::NewIn(_) | Initial::NewFrom(_) | Initial::FromUpload(_) => {
                    Some(create(follow.client(), state, app))
                }
                Initial::Attach(id, drive) => {
                    state.want_drive = drive;
                    follow.attach(id, if drive { Role::Driver } else { Role::Watcher });
                    None
                }
            }
        }
        Update::Takeover => {
            state.takeover_shown = true;
            let _ = app.send(AppEvent::Notice(TAKEOVER_NOTICE.into())).await;
            None
        }
        Update::Attached { snapshot, resumed, .. } => {
            if std::mem::take(&mut state.takeover_shown) {
                let _ = app.send(AppEvent::Notice(String::new())).await;
            }
            let ask = state.want_drive && snapshot.role == Role::Watcher;
            state.want_drive = false;
            let id = snapshot.session.id.clone();
            let client = follow.client();
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
            let _ = app.send(AppEvent::Attached(snapshot, resumed)).await;
            if ask {
                spawn_request(client.drive_request(id), app, "asked the driver for the wheel");
            }
            None
        }
        Update::AttachFailed { error, .. } => {
            let text = format!("cannot attach: {}", short(&error));
            let _ = app.send(AppEvent::Notice(text)).await;
            None
        }
        Update::Event(event) => {
            let _ = app.send(AppEvent::Server(event)).await;
            None
        }
        Update::Warning(err) => {
            let _ = app.send(AppEvent::Notice(short(&err))).await;
            None
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
        return Box::pin(call);
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
        created.map(|r| r.session)
    })
}

/// The session being created, or never.
async fn next_created(pending: &mut Option<Pending>) -> Result<SessionInfo, ClientError> {
    match pending {
        Some(p) => {
            let created = p.as_mut().await;
            *pending = None;
            created
        }
        None => std::future::pending().await,
    }
}

/// The session an effect needs; says so when there is none.
fn need_session(current: &Option<SessionId>, app: &mpsc::Sender<AppEvent>) -> Option<SessionId> {
    if current.is_none() {
        let app = app.clone();
        tokio::spawn(async move {
            let _ = app.send(AppEvent::Notice("not attached to a session".into())).await;
        });
    }
    current.clone()
}

/// Runs one effect on the live connection; a session to create, for `/new`. Every effect is
/// named: a new one cannot be forgotten here.
fn on_effect(
    effect: Effect,
    follow: &mut Follow,
    state: &mut State,
    app: &mpsc::Sender<AppEvent>,
) -> Option<Pending> {
    let current = follow.session().map(|(id, _)| id.clone());
    let client = follow.client();
    match effect {
        // The runtime's own: it quits, or rings the terminal.
        Effect::Quit | Effect::Notify(_) => None,
        Effect::NewSession => {
            if let Some(id) = current {
                spawn_request(client.detach(id), app, "");
            }
            follow.forget();
            Some(create(follow.client(), state, app))
        }
        Effect::Attach(id) => {
            if let Some(old) = current {
                spawn_request(client.detach(old), app, "");
            }
            // As driver when we own it; the server refuses otherwise and the follow watches.
            follow.attach(id, Role::Driver);
            None
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
            let id = need_session(&current, &app)?;
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
        Effect::SetMode(mode) => {
            let id = need_session(&current, app)?;
            let params = outboard_shared::SessionSetModeParams { session_id: id, mode };
            let call = client.call::<outboard_shared::methods::SessionSetMode>(params);
            // Success shows as the `mode_changed` event, to every attached client.
            spawn_request(async move { call.await.map(|_| ()) }, app, "");
            None
        }
        Effect::SetModel(model) => {
            let id = need_session(&current, app)?;
            let params = outboard_shared::SessionSetModelParams { session_id: id, model };
            let call = client.call::<outboard_shared::methods::SessionSetModel>(params);
            // Success shows as the `model_changed` event, to every attached client.
            spawn_request(async move { call.await.map(|_| ()) }, app, "");
            None
        }
        Effect::Send(text) => {
            let id = need_session(&current, app)?;
            let call = client.send_turn(id, text, Vec::new());
            let app = app.clone();
            tokio::spawn(async move {
                if let Err(e) = call.await {
                    let _ = app.send(AppEvent::Notice(format!("not sent: {}", short(&e)))).await;
                }
            });
            None
        }
        Effect::Interrupt => {
            let id = need_session(&current, app)?;
            spawn_request(
                {
                    let call = client.interrupt(id);
                    async move { call.await.map(|_| ()) }
                },
                app,
                "",
            );
            None
        }
        Effect::Compact(focus) => {
            let id = need_session(&current, app)?;
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
            None
        }
        Effect::DriveRequest => {
            let id = need_session(&current, app)?;
            spawn_request(client.drive_request(id), app, "");
            None
        }
        Effect::KillTask(shell_id) => {
            let id = need_session(&current, app)?;
            spawn_request(
                client.kill_task(id, shell_id.clone()),
                app,
                &format!("killed {shell_id}"),
            );
            None
        }
        Effect::Answer(answer) => {
            let id = need_session(&current, app)?;
            let params = outboard_shared::ApprovalAnswerParams {
                session_id: id,
                call_id: answer.call_id.clone(),
                decision: answer.decision,
                scope: answer.scope,
                reason: answer.reason.clone(),
                answers: answer.answers.clone(),
            };
            let call = client.call::<outboard_shared::methods::ApprovalAnswer>(params);
            spawn_request(async move { call.await.map(|_| ()) }, app, "");
            None
        }
        Effect::Checkpoints => {
            let id = need_session(&current, app)?;
            let call = client.call::<outboard_shared::methods::SessionCheckpoints>(
                outboard_shared::SessionRef { session_id: id },
            );
            let app = app.clone();
            tokio::spawn(async move {
                let listed = call.await.map(|l| l.checkpoints).map_err(|e| short(&e));
                let _ = app.send(AppEvent::Checkpoints(listed)).await;
            });
            None
        }
        Effect::Rewind { n, code, conversation } => {
            let id = need_session(&current, app)?;
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
            None
        }
        Effect::Fork(checkpoint) => {
            let id = need_session(&current, app)?;
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
            None
        }
        Effect::DriveTake => {
            let id = need_session(&current, app)?;
            spawn_request(client.drive_take(id), app, "");
            None
        }
        Effect::DriveGrant(user) => {
            let id = need_session(&current, app)?;
            spawn_request(
                client.drive_grant(id, user.clone()),
                app,
                &format!("handed the wheel to {user}"),
            );
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
async fn diff_text(http: &outboard_client::http::Endpoint, id: &SessionId, stat: bool) -> String {
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
        let from = m.context_window_source.map(|w| format!(", {}", w.label())).unwrap_or_default();
        lines.push(format!(
            "{mark} {}: {} ({} tokens{from}{thinking}){default}",
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
