//! The requests a connection answers on this node, one arm per method (`session/*`, `turn/*`,
//! drive hand-over, usage); what no arm takes goes to the file APIs.

use outboard_shared::{
    Empty, ErrorBody, ErrorCode, EventKind, Method, Request, Response, Role, ServerFrame,
    SessionAttachResponse, SessionCreateResponse, SessionListResponse, TurnInterruptResponse,
    MAX_APPROVAL_REASON_BYTES, MAX_QUESTION_ANSWER_BYTES,
};

use crate::hub::Member;
use crate::paging;
use crate::paging::Keep;

use super::forward::{broadcast_presence, forward, CatchUp};
use super::frames::internal;
use super::{Attachment, Connection, MAX_FOCUS_CHARS};

impl Connection {
    pub(super) async fn handle_here(
        &mut self,
        request: Request,
    ) -> Result<Option<Response>, ErrorBody> {
        let Some(user) = self.user.clone() else {
            return Err(ErrorBody::new(ErrorCode::HandshakeRequired, "send hello first"));
        };
        let hub = &self.state.hub;
        let id = request.id;
        match request.method {
            Method::Ping(_) => Ok(Some(Response::ok(id, &Empty {}))),
            Method::SessionCreate(outboard_shared::SessionCreateParams {
                title,
                workspace,
                source: Some(spec),
                network,
                context_window,
                model,
            }) => {
                if workspace.is_some() {
                    return Err(ErrorBody::new(
                        ErrorCode::BadRequest,
                        "give a session either a workspace or a source, not both",
                    ));
                }
                let title = title.unwrap_or_default().trim().to_owned();
                self.spawn_long(id, move |hub, sink| async move {
                    let row = crate::workspace_api::create(
                        &hub,
                        &user,
                        &title,
                        spec,
                        network,
                        crate::hub::ModelChoice { context_window, model: model.as_deref() },
                        &sink,
                    )
                            .await?;
                    tracing::info!(session = %row.id, user = %user.name, "session created from a source");
                    Ok(Response::ok(id, &SessionCreateResponse { session: hub.session_info(&row) }))
                })?;
                Ok(None)
            }
            Method::SessionPush(p) => {
                self.spawn_long(id, move |hub, sink| async move {
                    let pushed = crate::workspace_api::push(&hub, &user, p, &sink).await?;
                    Ok(Response::ok(id, &pushed))
                })?;
                Ok(None)
            }
            Method::SessionRestore(p) => {
                let restored = crate::workspace_api::restore(hub, &user, &p.session_id).await?;
                Ok(Some(Response::ok(id, &restored)))
            }
            Method::SessionDelete(p) => {
                crate::workspace_api::delete(hub, &user, &p.session_id).await?;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::SessionCreate(p) => {
                let title = p.title.unwrap_or_default();
                let choice = crate::hub::ModelChoice {
                    context_window: p.context_window,
                    model: p.model.as_deref(),
                };
                let mut row = hub.new_session_row(&user, title.trim(), choice).await?;
                row.network = p.network;
                if let Some(requested) = &p.workspace {
                    row.workspace = Some(hub.client_workspace(requested).await?);
                } else {
                    row.host = hub.place().await?;
                }
                // Title length and sessions per hour are the org's quotas.
                let row = outboard_org::quota::create_session_row(hub.store(), &user, row).await?;
                tracing::info!(session = %row.id, user = %user.name, "session created");
                Ok(Some(Response::ok(
                    id,
                    &SessionCreateResponse { session: hub.session_info(&row) },
                )))
            }
            Method::SessionList(p) => {
                let limit = p.limit.unwrap_or(100).clamp(1, 1000);
                let rows =
                    hub.store().list_sessions(&user.org_id, limit).await.map_err(internal)?;
                let sessions = rows
                    .iter()
                    .map(|r| outboard_shared::SessionInfo {
                        attached: hub.presence(&r.id),
                        ..r.info(outboard_llm::context::context_window)
                    })
                    .collect();
                Ok(Some(Response::ok(id, &SessionListResponse { sessions })))
            }
            Method::UsageReport(p) => {
                if let Some(session) = &p.session_id {
                    hub.visible_session(&user, session).await?;
                }
                let since = p.since.as_deref().map(usage_since).transpose()?;
                let rows = hub
                    .store()
                    .usage_report(&user.org_id, p.by, p.session_id, since)
                    .await
                    .map_err(internal)?;
                Ok(Some(Response::ok(id, &outboard_shared::UsageReportResponse { rows })))
            }
            Method::SessionAttach(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                let current = hub.role(&p.session_id, self.id);
                if p.role == Role::Driver && current != Some(Role::Driver) {
                    if row.owner_id == user.id {
                        // The owner takes the wheel back: a grant to someone else ends.
                        hub.remember_grant(&row.id, None).await?;
                    } else if hub.granted_to(&row.id).await? != Some(user.id.clone()) {
                        return Err(ErrorBody::new(
                            ErrorCode::Forbidden,
                            format!(
                                "only the session's owner ({}) can drive it, or whoever they \
                                 hand it to; attach as a watcher and ask with /drive",
                                row.owner
                            ),
                        ));
                    }
                }
                let old_handle = self.attached.remove(&p.session_id).map(|old| {
                    old.forwarder.abort();
                    old.handle
                });
                // A re-attach (after a lag or a reconnect) keeps the role this connection has.
                let role = match (p.role, current) {
                    (Role::Watcher, Some(Role::Driver)) => Role::Driver,
                    (asked, _) => asked,
                };
                let (handle, attached) = match hub.attach(&row, p.after_seq).await {
                    Ok(attached) => attached,
                    Err(e) => {
                        // Not attached here any more (the session may run on another node now,
                        // and this connection follow it there).
                        if let Some(presence) = hub.leave(&p.session_id, self.id) {
                            if let Some(h) = &old_handle {
                                broadcast_presence(h, presence).await;
                            }
                        }
                        return Err(e);
                    }
                };
                // Everything up to the session's last seq is in the snapshot (or before `after_seq`).
                let last_seq = attached.session.last_seq;
                let mut snapshot = SessionAttachResponse {
                    session: hub.session_info(&attached.session),
                    role,
                    events: Vec::new(),
                    in_flight: attached.in_flight,
                    has_more: true,
                    cursor: Some(last_seq),
                    // Counted in the frame's size now, cut to those older than the page below.
                    standing: attached.standing,
                };
                let keep = if p.after_seq.is_some() { Keep::Oldest } else { Keep::Newest };
                snapshot.events =
                    paging::fit(paging::response_len(id, &snapshot), attached.events, keep);
                // Without `after_seq` older history is paged with `session/history`; with it
                // the rest up to `last_seq` is streamed by the forwarder before live events.
                let sent_to =
                    snapshot.events.last().map_or(p.after_seq.unwrap_or(last_seq), |e| e.seq);
                snapshot.cursor = snapshot.events.first().map(|e| e.seq);
                let oldest = snapshot.cursor.unwrap_or(u64::MAX);
                snapshot.standing.retain(|e| e.seq < oldest);
                snapshot.has_more = p.after_seq.is_none() && snapshot.cursor.is_some_and(|c| c > 1);
                // Attached before the answer leaves: a request the client makes once it has the
                // answer (on any connection: a grant to this user) finds it in the room.
                let member = Member {
                    conn: self.id,
                    user_id: user.id.clone(),
                    user: user.name.clone(),
                    client: self.client.clone(),
                };
                let presence = hub.join(&p.session_id, member, role);
                // The snapshot goes into the queue before the forwarder starts, so it precedes
                // every live event; events broadcast meanwhile wait in `live`.
                self.send(ServerFrame::Response(Response::ok(id, &snapshot))).await;
                let catch_up = (sent_to < last_seq).then(|| CatchUp {
                    store: hub.store().clone(),
                    from: sent_to,
                    until: last_seq,
                });
                let forwarder = tokio::spawn(forward(
                    p.session_id.clone(),
                    attached.live,
                    self.out.clone(),
                    last_seq,
                    catch_up,
                ));
                broadcast_presence(&handle, presence).await;
                self.attached.insert(p.session_id, Attachment { handle, forwarder });
                Ok(None)
            }
            Method::SessionHistory(p) => {
                hub.visible_session(&user, &p.session_id).await?;
                let page =
                    paging::history(hub.store(), id, &p.session_id, p.before, p.limit).await?;
                Ok(Some(page))
            }
            Method::SessionDetach(p) => {
                if let Some(old) = self.attached.remove(&p.session_id) {
                    old.forwarder.abort();
                    self.left(&p.session_id, &old.handle).await;
                }
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::TurnSend(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                paging::message_fits(&p.text)?;
                let sent = hub.send(&row, p.text, p.images, &user.name).await?;
                Ok(Some(Response::ok(id, &sent)))
            }
            Method::SessionCompact(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                let focus = p.focus.map(|f| f.trim().to_owned()).filter(|f| !f.is_empty());
                if let Some(f) = focus.as_ref().filter(|f| f.chars().count() > MAX_FOCUS_CHARS) {
                    return Err(ErrorBody::new(
                        ErrorCode::BadRequest,
                        format!(
                            "the focus of a compaction is {} characters; say it in at most \
                             {MAX_FOCUS_CHARS}",
                            f.chars().count()
                        ),
                    ));
                }
                // A summary takes as long as a model call: the connection keeps serving (an
                // interrupt, a detach) meanwhile.
                self.spawn_long(id, move |hub, _| async move {
                    let compacted = hub.compact(&row, focus).await?;
                    Ok(Response::ok(id, &compacted))
                })?;
                Ok(None)
            }
            Method::TurnInterrupt(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                let interrupted = hub.interrupt(&row).await?;
                Ok(Some(Response::ok(id, &TurnInterruptResponse { interrupted })))
            }
            Method::SessionKillTask(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                hub.kill_task(&row, p.shell_id).await?;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::ApprovalAnswer(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                // Who answers is a right of the user (the owner, the driver), whichever of
                // their connections asks: never any org member's connection.
                hub.may_answer(&row, &user).await?;
                let reason = p.reason.map(|r| r.trim().to_owned()).filter(|r| !r.is_empty());
                if reason.as_ref().is_some_and(|r| r.len() > MAX_APPROVAL_REASON_BYTES) {
                    return Err(ErrorBody::new(
                        ErrorCode::BadRequest,
                        format!("say the reason in at most {MAX_APPROVAL_REASON_BYTES} bytes"),
                    ));
                }
                let answer = outboard_harness::approvals::Answer {
                    decision: p.decision,
                    scope: p.scope,
                    by: user.name.clone(),
                    reason,
                    answers: question_answers(p.answers)?,
                };
                hub.answer(&row, p.call_id, answer).await?;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::ModelsList(_) => {
                let models = hub.models().list();
                Ok(Some(Response::ok(id, &outboard_shared::ModelsListResponse { models })))
            }
            Method::SessionSetModel(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                let session = hub.set_model(&row, p.model, &user.name).await?;
                Ok(Some(Response::ok(id, &outboard_shared::SessionSetModelResponse { session })))
            }
            Method::SessionSetMode(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                let set = hub.set_mode(&row, p.mode, &user.name).await?;
                Ok(Some(Response::ok(id, &set)))
            }
            Method::SessionCheckpoints(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                let checkpoints = hub.checkpoints(&row).await?;
                let answer = outboard_shared::SessionCheckpointsResponse { checkpoints };
                Ok(Some(Response::ok(id, &answer)))
            }
            Method::SessionFork(p) => {
                let forked = crate::fork::fork(hub, &user, p).await?;
                Ok(Some(Response::ok(id, &forked)))
            }
            Method::SessionRewind(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                hub.may_drive(&row, &user, self.id)?;
                let rewound = hub.rewind(&row, p, &user.name).await?;
                Ok(Some(Response::ok(id, &rewound)))
            }
            Method::SessionDriveRequest(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                match hub.role(&p.session_id, self.id) {
                    None => {
                        return Err(ErrorBody::new(
                            ErrorCode::BadRequest,
                            "attach to the session before asking to drive it",
                        ))
                    }
                    Some(Role::Driver) => {
                        return Err(ErrorBody::new(ErrorCode::Conflict, "you already drive it"))
                    }
                    Some(Role::Watcher) => {}
                }
                hub.transient(&row, EventKind::DriveRequested { user: user.name }).await?;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::SessionDriveGrant(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                let (presence, to) = hub.grant(&p.session_id, self.id, &p.user)?;
                // Remembered for the grantee's user, so that its next connection drives too.
                hub.remember_grant(&row.id, (to != row.owner_id).then_some(to)).await?;
                broadcast_presence(&hub.handle(&row), presence).await;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            Method::SessionDriveTake(p) => {
                let row = hub.visible_session(&user, &p.session_id).await?;
                let presence = hub.take(&row, &user, self.id)?;
                hub.remember_grant(&row.id, None).await?;
                broadcast_presence(&hub.handle(&row), presence).await;
                Ok(Some(Response::ok(id, &Empty {})))
            }
            other => crate::files_api::handle(hub, &user, id, other).await.map(Some),
        }
    }
}

/// `usage/report`'s `since` as the RFC 3339 prefix model calls are compared with: a day
/// (`YYYY-MM-DD`, from its UTC midnight) or a full UTC time (`…Z`), which compare in order as
/// strings with the stored times.
pub(super) fn usage_since(since: &str) -> Result<String, ErrorBody> {
    let since = since.trim();
    let b = since.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let is_day = b.len() >= 10
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10);
    if is_day && (b.len() == 10 || (b[10] == b'T' && since.ends_with('Z'))) {
        return Ok(since.to_owned());
    }
    Err(ErrorBody::new(
        ErrorCode::BadRequest,
        format!("since {since:?} is not a date: give YYYY-MM-DD or an RFC 3339 UTC time (…Z)"),
    ))
}

/// The answers of an `approval/answer` to questions (`AskUserQuestion`), trimmed and checked
/// against their bounds: at most four, each at most [`MAX_QUESTION_ANSWER_BYTES`].
pub(super) fn question_answers(
    answers: Option<Vec<String>>,
) -> Result<Option<Vec<String>>, ErrorBody> {
    let Some(answers) = answers else { return Ok(None) };
    if answers.len() > *outboard_tools::plan::QUESTIONS.end() {
        return Err(ErrorBody::new(
            ErrorCode::BadRequest,
            format!(
                "{} answers: a call asks at most {} questions",
                answers.len(),
                outboard_tools::plan::QUESTIONS.end()
            ),
        ));
    }
    let answers: Vec<String> = answers.into_iter().map(|a| a.trim().to_owned()).collect();
    if answers.iter().any(|a| a.is_empty() || a.len() > MAX_QUESTION_ANSWER_BYTES) {
        return Err(ErrorBody::new(
            ErrorCode::BadRequest,
            format!("each answer must be 1 to {MAX_QUESTION_ANSWER_BYTES} bytes"),
        ));
    }
    Ok(Some(answers))
}
