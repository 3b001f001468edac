//! Sessions made from a repository or an upload, and their changes going out: `session/create`
//! with a `source`, `session/push`, `session/delete`, and the `GET /v1/sessions/{id}/diff`
//! endpoint. The git work itself is [`crate::sources`]; this module checks who may do what,
//! looks the org's credential up, and turns failures into protocol errors.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use outboard_shared::{
    ErrorBody, ErrorCode, ProgressFrame, RequestId, SessionId, SessionPushParams,
    SessionPushResponse, SessionSource, SessionStatus, SourceSpec,
};

use crate::git::{GitError, Progress, ProgressSink, Remote, RepoUrl};
use crate::http_common::{authenticate, ApiError};
use crate::hub::Hub;
use crate::net::ConnInfo;
use crate::sources::SourceError;
use outboard_org::secrets::SecretValue;
use outboard_snapshot::SnapshotError;
use outboard_store::{SessionRow, UserRow};

/// Progress frames of one request at most this often per phase (git reports every percent), so
/// a fast clone does not flood a slow client; a phase's first and last report always go.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// The protocol error for a failure to prepare or use a workspace.
pub fn error(e: SourceError) -> ErrorBody {
    let code = match &e {
        SourceError::Git(g) => match g {
            GitError::BadUrl(_) | GitError::NotGit { .. } | GitError::Unreachable { .. } => {
                ErrorCode::BadRequest
            }
            GitError::CredentialMissing { .. }
            | GitError::CredentialRefused { .. }
            | GitError::InternalHost { .. }
            | GitError::CleartextCredential { .. } => ErrorCode::Forbidden,
            GitError::NotFound { .. } | GitError::MissingRef(_) => ErrorCode::NotFound,
            GitError::PushRefused(_) => ErrorCode::Conflict,
            GitError::DiskFull(_) => ErrorCode::QuotaExceeded,
            GitError::Spawn(_) | GitError::Failed { .. } => ErrorCode::Internal,
        },
        SourceError::Invalid(_) | SourceError::Snapshot(SnapshotError::TooMany) => {
            ErrorCode::BadRequest
        }
        SourceError::TooLarge(_) => ErrorCode::TooLarge,
        SourceError::Copy(outboard_snapshot::CopyError::OverLimit { .. }) => {
            ErrorCode::QuotaExceeded
        }
        SourceError::Snapshot(_) | SourceError::Restore(_) | SourceError::Copy(_) => {
            ErrorCode::Internal
        }
        SourceError::Refused(body) => return body.clone(),
        SourceError::Io { .. } => ErrorCode::Internal,
    };
    ErrorBody::new(code, e.to_string())
}

/// Turns git's progress into [`ProgressFrame`]s for request `id`, handed to `send` (which must
/// not wait: progress is dropped rather than hold a clone up).
pub struct FrameSink<F: Fn(ProgressFrame) + Send + Sync> {
    id: RequestId,
    send: F,
    last: std::sync::Mutex<Option<(String, Instant, u64)>>,
}

impl<F: Fn(ProgressFrame) + Send + Sync> FrameSink<F> {
    /// Progress of request `id`, to `send`.
    pub fn new(id: RequestId, send: F) -> Self {
        FrameSink { id, send, last: std::sync::Mutex::new(None) }
    }
}

impl<F: Fn(ProgressFrame) + Send + Sync> ProgressSink for FrameSink<F> {
    fn report(&self, p: Progress) {
        let now = Instant::now();
        {
            let mut last = match self.last.lock() {
                Ok(l) => l,
                Err(poisoned) => poisoned.into_inner(),
            };
            let finished = p.total.is_some_and(|t| p.done >= t);
            if let Some((phase, at, _)) = last.as_ref() {
                if *phase == p.phase && now.duration_since(*at) < PROGRESS_INTERVAL && !finished {
                    return;
                }
            }
            *last = Some((p.phase.clone(), now, p.done));
        }
        (self.send)(ProgressFrame {
            request_id: self.id,
            phase: p.phase,
            done: p.done,
            total: p.total,
            message: p.line,
        });
    }
}

/// The org's credential for `host`.
async fn credential(
    hub: &Hub,
    user: &UserRow,
    host: &str,
) -> Result<Option<SecretValue>, ErrorBody> {
    let Some(secrets) = hub.secrets() else {
        return Ok(None);
    };
    secrets.for_host(&user.org_id, host).await.map_err(|e| {
        tracing::warn!(org = %user.org, %host, "cannot read the org's credential: {e}");
        ErrorBody::new(ErrorCode::Internal, e.to_string())
    })
}

/// The remote of `url` as the server's git may use it: its destination vetted and pinned, and
/// the org's credential, unless it would go over plain `http://` to a host no admin marked
/// ([`crate::repo_hosts`]). Refused before git runs.
async fn remote(hub: &Hub, user: &UserRow, url: &RepoUrl) -> Result<Remote, ErrorBody> {
    let config = hub.config();
    let hosts = &config.net.git_hosts;
    let pin = hosts
        .admit(url, &config.sandbox.server_ports, config.allow_client_workspaces)
        .await
        .map_err(|e| error(e.into()))?;
    let credential = credential(hub, user, &url.host).await?;
    hosts.check_credential(url, credential.is_some()).map_err(|e| error(e.into()))?;
    Ok(Remote { url: url.url.clone(), host: url.host.clone(), credential, pin })
}

/// `session/create` with a `source`: prepares the workspace, then writes the session row. A
/// failure at any step leaves neither.
pub async fn create(
    hub: &Hub,
    user: &UserRow,
    title: &str,
    spec: SourceSpec,
    network: outboard_shared::SessionNetwork,
    choice: crate::hub::ModelChoice<'_>,
    sink: &dyn ProgressSink,
) -> Result<SessionRow, ErrorBody> {
    if hub.config().place_on_hosts {
        return Err(ErrorBody::new(
            ErrorCode::BadRequest,
            "this server places sessions on sandbox hosts, where sessions from a repository or an \
             upload cannot go yet: start a plain session, or use a server without --sandbox remote",
        ));
    }
    let mut row = hub.new_session_row(user, title, choice).await?;
    row.network = network;
    let sources = hub.sources();
    let prepared = match spec {
        SourceSpec::Repo { url, git_ref } => {
            let url = RepoUrl::parse(&url, hub.config().allow_client_workspaces)
                .map_err(|e| error(e.into()))?;
            let git_ref = git_ref.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
            if let Some(r) = &git_ref {
                if r.starts_with('-') || r.chars().any(|c| c.is_control() || c == ' ') {
                    return Err(ErrorBody::new(
                        ErrorCode::BadRequest,
                        format!("{r:?} is not a branch, tag or commit"),
                    ));
                }
            }
            let remote = remote(hub, user, &url).await?;
            sources
                .clone_repo(&row.id, &url, git_ref.as_deref(), &remote, sink)
                .await
                .map_err(error)?
                .source
        }
        SourceSpec::Upload { upload_id } => {
            let store = hub.store().clone();
            let data_dir = hub.config().data_dir.clone();
            let report = |phase: &str, done: u64, total: Option<u64>| {
                let line = match (phase, total) {
                    ("unpacking", Some(t)) if t > 0 => {
                        format!("Unpacking the upload: {}% ({done}/{t} bytes)", done * 100 / t)
                    }
                    ("restoring_history", _) => "Restoring the branch's history".to_owned(),
                    _ => format!("{phase}: {done}"),
                };
                sink.report(Progress { phase: phase.to_owned(), done, total, line });
            };
            let (_, got) = sources
                .from_upload(&row.id, |ws| async move {
                    let got = crate::uploads::materialize(
                        &store, &data_dir, user, &upload_id, &ws, &report,
                    )
                    .await
                    .map_err(|e| {
                        if let Some(bound) = e.bound() {
                            hub.metrics().upload_refused(bound.label());
                        }
                        SourceError::Refused(e.body())
                    })?;
                    Ok((got.head.clone(), got))
                })
                .await
                .map_err(error)?;
            hub.metrics().upload_unpacked(got.lookups);
            SessionSource::Upload { bytes: got.bytes, branch: got.branch }
        }
    };
    row.source = Some(prepared);
    match outboard_org::quota::create_session_row(hub.store(), user, row.clone()).await {
        Ok(row) => Ok(row),
        Err(e) => {
            if let Err(cleanup) = sources.delete(&row.id, false) {
                tracing::warn!(session = %row.id, "cannot remove a refused session's files: {cleanup}");
            }
            Err(e)
        }
    }
}

/// `session/delete`: the owner deletes a session that is not running.
pub async fn delete(hub: &Hub, user: &UserRow, id: &SessionId) -> Result<(), ErrorBody> {
    let row = hub.visible_session(user, id).await?;
    if row.owner_id != user.id {
        return Err(ErrorBody::new(
            ErrorCode::Forbidden,
            format!("only the session's owner ({}) can delete it", row.owner),
        ));
    }
    if row.status == SessionStatus::Running {
        return Err(ErrorBody::new(
            ErrorCode::Conflict,
            "a turn is running in this session: interrupt it first",
        ));
    }
    hub.close_actor(id).await?;
    hub.store()
        .delete_session(id)
        .await
        .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
    hub.sources().delete(id, row.workspace.is_some()).map_err(error)?;
    tracing::info!(session = %id, user = %user.name, "session deleted");
    Ok(())
}

/// `session/restore`: moves a session from its sandbox host to another one (the owner only,
/// never while a turn runs). The workspace is made again, empty, on the new host; the model is
/// told with a durable `system_reminder` in the same transaction as the move.
pub async fn restore(
    hub: &Hub,
    user: &UserRow,
    id: &SessionId,
) -> Result<outboard_shared::SessionRestoreResponse, ErrorBody> {
    let row = hub.visible_session(user, id).await?;
    if row.owner_id != user.id {
        return Err(ErrorBody::new(
            ErrorCode::Forbidden,
            format!("only the session's owner ({}) can restore it", row.owner),
        ));
    }
    let Some(from) = row.host.clone() else {
        return Err(ErrorBody::new(
            ErrorCode::BadRequest,
            format!(
                "session {id} works on this server, not on a sandbox host: there is nothing to \
                 restore"
            ),
        ));
    };
    if row.status == SessionStatus::Running {
        return Err(ErrorBody::new(
            ErrorCode::Conflict,
            "a turn is running in this session: interrupt it first",
        ));
    }
    let Some(hosts) = hub.hosts() else {
        return Err(ErrorBody::new(
            ErrorCode::Internal,
            "this server has no secret key to join sandbox hosts with",
        ));
    };
    let to = hosts
        .place(Some(&from))
        .await
        .map_err(|e| ErrorBody::new(ErrorCode::Unavailable, e.to_string()))?;
    hub.close_actor(id).await?;
    let text = format!(
        "<system-reminder>This session's workspace moved from sandbox host {from} to {to} (a \
         restore). It was made again there, empty: files written or read before are not there, \
         and no process from before runs. Check with Glob or Bash before relying on earlier \
         work.</system-reminder>"
    );
    let (session, host) = (id.clone(), to.clone());
    hub.store()
        .call(move |c| {
            let last: i64 =
                c.query_row("SELECT last_seq FROM sessions WHERE id = ?1", [&session.0], |r| {
                    r.get(0)
                })?;
            let event = outboard_shared::SessionEvent {
                session_id: session.clone(),
                seq: last as u64 + 1,
                ts: outboard_base::util::now_rfc3339(),
                kind: outboard_shared::EventKind::SystemReminder { text: text.clone() },
                parent: None,
            };
            outboard_store::move_session_host(c, &session, &host, &event)
        })
        .await
        .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
    tracing::info!(session = %id, user = %user.name, %from, %to, "session restored on another host");
    Ok(outboard_shared::SessionRestoreResponse { from_host: from, host: to })
}

/// `Name <email>` as git wants it, from the client's or the user's name.
fn author(user: &UserRow, given: Option<&str>) -> Result<(String, String), ErrorBody> {
    let bad = |m: String| ErrorBody::new(ErrorCode::BadRequest, m);
    match given.map(str::trim).filter(|a| !a.is_empty()) {
        Some(text) => {
            let (name, rest) = text
                .split_once('<')
                .ok_or_else(|| bad(format!("author {text:?} is not `Name <email>`")))?;
            let email = rest
                .strip_suffix('>')
                .ok_or_else(|| bad(format!("author {text:?} is not `Name <email>`")))?;
            let (name, email) = (name.trim(), email.trim());
            let invalid = |s: &str| s.chars().any(|c| c.is_control() || "<>\n".contains(c));
            if name.is_empty() || email.is_empty() || invalid(name) || invalid(email) {
                return Err(bad(format!("author {text:?} is not `Name <email>`")));
            }
            Ok((name.to_owned(), email.to_owned()))
        }
        None => Ok((user.name.clone(), format!("{}@{}.outboard.invalid", user.name, user.org))),
    }
}

/// `session/push`: commits a repository session's workspace and pushes it as a new branch (or
/// fast-forwards the branch an earlier push of the same session created).
pub async fn push(
    hub: &Hub,
    user: &UserRow,
    params: SessionPushParams,
    sink: &dyn ProgressSink,
) -> Result<SessionPushResponse, ErrorBody> {
    let row = hub.visible_session(user, &params.session_id).await?;
    if row.owner_id != user.id {
        return Err(ErrorBody::new(
            ErrorCode::Forbidden,
            format!("only the session's owner ({}) can push its changes", row.owner),
        ));
    }
    let Some(SessionSource::Repo { url, commit: base, .. }) = &row.source else {
        return Err(ErrorBody::new(
            ErrorCode::BadRequest,
            "only a session made from a repository (--repo) can push; take this one's changes \
             with `outboard diff` or `outboard apply`",
        ));
    };
    let sources = hub.sources();
    let short = row.id.as_str().trim_start_matches("s_").chars().take(8).collect::<String>();
    let branch = params
        .branch
        .map(|b| b.trim().trim_start_matches("refs/heads/").to_owned())
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| format!("outboard/{short}"));
    sources.check_branch(&branch).await.map_err(error)?;
    let (name, email) = author(user, params.author.as_deref())?;
    let parsed =
        RepoUrl::parse(url, hub.config().allow_client_workspaces).map_err(|e| error(e.into()))?;
    let remote = remote(hub, user, &parsed).await?;
    let internal =
        |e: outboard_store::StoreError| ErrorBody::new(ErrorCode::Internal, e.to_string());
    let record = hub.store().push_record(&remote.url, &branch).await.map_err(internal)?;
    let on_remote = sources.remote_branch(&remote, &branch).await.map_err(error)?;
    let parent = match (&record, &on_remote) {
        (Some((owner, _)), _) if *owner != row.id => {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                format!("{branch} was created by another session ({owner}): choose another with --branch NAME"),
            ));
        }
        (Some((_, ours)), Some(theirs)) if ours != theirs => {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                format!(
                    "{branch} changed on {} since this session pushed it: Outboard never \
                     force-pushes; push to a new branch with --branch NAME",
                    remote.url
                ),
            ));
        }
        (Some((_, ours)), _) => ours.clone(),
        (None, Some(_)) => {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                format!(
                    "{branch} already exists on {} and was not created by this session: \
                     Outboard only creates branches; choose another with --branch NAME",
                    remote.url
                ),
            ));
        }
        (None, None) => base.clone(),
    };
    let title = if row.title.trim().is_empty() {
        "Changes from an Outboard session"
    } else {
        row.title.trim()
    };
    let message = format!("{title}\n\nOutboard-Session: {}\n", row.id);
    let ws = hub.workspace_dir(&row);
    let pushed = sources
        .push(&row.id, &ws, &parent, &branch, (&name, &email), &message, &remote, sink)
        .await
        .map_err(error)?;
    let Some(commit) = pushed else {
        return Err(ErrorBody::new(
            ErrorCode::Conflict,
            if record.is_some() {
                format!("nothing new to push: {branch} already has the workspace as it is")
            } else {
                "nothing to push: the workspace has no changes".to_owned()
            },
        ));
    };
    hub.store().record_push(&remote.url, &branch, &row.id, &commit).await.map_err(internal)?;
    tracing::info!(session = %row.id, %branch, %commit, "pushed");
    Ok(SessionPushResponse { branch, commit, url: remote.url, created: record.is_none() })
}

/// `?stat=1` of the diff endpoint.
#[derive(Debug, serde::Deserialize)]
pub struct DiffQuery {
    /// A `--stat` summary instead of the patch.
    #[serde(default)]
    stat: Option<String>,
}

/// `GET /v1/sessions/{id}/diff`: the workspace's changes against its base, streamed from git.
pub(crate) async fn diff_endpoint(
    State(hub): State<Arc<Hub>>,
    Extension(info): Extension<ConnInfo>,
    Path((id, what)): Path<(String, String)>,
    Query(query): Query<DiffQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let user = authenticate(&hub, &headers, &info).await?;
    if what != "diff" {
        return Err(ApiError::new(ErrorCode::NotFound, format!("no endpoint {what} of a session")));
    }
    let id = SessionId(id);
    let row = hub.visible_session(&user, &id).await?;
    let stat = query.stat.as_deref().is_some_and(|s| s != "0" && s != "false");
    let ws = hub.workspace_dir(&row);
    if !ws.is_dir() && row.workspace.is_none() && row.source.is_none() {
        // A session that never ran a tool has no directory yet: nothing changed.
        return Ok(diff_response(Body::empty(), &row, stat));
    }
    let (mut child, skipped) = match &row.workspace {
        Some(_) => hub.sources().diff_in_place(&ws, stat).await,
        None => hub.sources().diff(&row.id, &ws, stat).await,
    }
    .map_err(|e| ApiError(error(e)))?;
    let Some(stdout) = child.stdout.take() else {
        return Err(ApiError::new(ErrorCode::Internal, "git gave no output"));
    };
    // The child is reaped when its stream ends (or the client goes away).
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    // Files left out as too large come first, as comment lines `git apply` skips.
    let notice = crate::sources::large::notice(&skipped);
    let head = futures_util::stream::iter(
        (!notice.is_empty()).then(|| Ok::<_, std::io::Error>(bytes::Bytes::from(notice))),
    );
    let stream = futures_util::StreamExt::chain(head, tokio_util::io::ReaderStream::new(stdout));
    Ok(diff_response(Body::from_stream(stream), &row, stat))
}

fn diff_response(body: Body, row: &SessionRow, stat: bool) -> Response {
    let mut response = body.into_response();
    let kind = if stat { "text/plain; charset=utf-8" } else { "text/x-diff; charset=utf-8" };
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    if let Some(source) = &row.source {
        if let Ok(v) = HeaderValue::from_str(&source.label()) {
            response.headers_mut().insert("x-outboard-source", v);
        }
    }
    crate::http_common::close(&mut response);
    response
}
