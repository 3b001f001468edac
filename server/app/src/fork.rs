//! `session/fork`: a new session of the caller's that starts from a checkpoint of another
//! session of their org (or from its state now): its own workspace with the checkpoint's files
//! ([`crate::sources::Sources::fork`]) and a log that holds the conversation up to there, the
//! events renumbered from 1. Both sessions go on side by side, each visible to the team; the
//! original is not touched.

use outboard_shared::{
    ErrorBody, ErrorCode, EventKind, SessionEvent, SessionForkParams, SessionForkResponse,
    SessionId, SessionStatus,
};
use outboard_store::{SessionRow, UserRow};

use crate::hub::Hub;

/// Forks the session `params` names for `user`.
pub async fn fork(
    hub: &Hub,
    user: &UserRow,
    params: SessionForkParams,
) -> Result<SessionForkResponse, ErrorBody> {
    let from = hub.visible_session(user, &params.session_id).await?;
    refusal(&from)?;
    let log = hub.store().events_after(&from.id, 0).await.map_err(internal)?;
    let from_ws = hub.workspace_dir(&from);
    let (tree, to_seq, prompt) = match params.checkpoint {
        Some(n) => {
            let all = outboard_harness::rewind::checkpoints(&log);
            let Some(c) = n.checked_sub(1).and_then(|i| all.get(i as usize)) else {
                return Err(ErrorBody::new(
                    ErrorCode::NotFound,
                    format!("this session has no checkpoint {n}: it has {}", all.len()),
                ));
            };
            let Some(tree) = c.tree.clone() else {
                return Err(ErrorBody::new(
                    ErrorCode::BadRequest,
                    format!("checkpoint {n} has no snapshot of the files to fork from"),
                ));
            };
            if hub.sources().dropped(&from.id).contains(&tree) {
                return Err(ErrorBody::new(
                    ErrorCode::BadRequest,
                    format!(
                        "checkpoint {n}'s files were dropped when the session's checkpoints \
                         reached the org's checkpoint_bytes quota: fork a newer checkpoint"
                    ),
                ));
            }
            (tree, c.to_seq, Some(c.info.prompt.clone()))
        }
        None => {
            let tree = hub.sources().checkpoint(&from.id, &from_ws).await.map_err(|e| {
                ErrorBody::new(ErrorCode::Internal, format!("cannot snapshot the files: {e}"))
            })?;
            (tree, log.last().map_or(0, |e| e.seq), None)
        }
    };
    // The fork's files and its copy of `.git` are held to the org's workspace quota before
    // the copy is made (a sparse file counts as the blocks it has: it is copied sparse).
    let limit = outboard_org::quota::Quotas::for_org(hub.store(), &from.org_id)
        .await
        .map_err(internal)?
        .workspace_bytes;
    let row = new_row(hub, user, &from).await?;
    if let Err(e) = hub.sources().fork(&from.id, &from_ws, &row.id, &tree, limit).await {
        let _ = hub.store().delete_session(&row.id).await;
        let mut body = crate::workspace_api::error(e);
        body.message = format!("cannot copy the files: {}", body.message);
        return Err(body);
    }
    let events = copied(&log, to_seq, &row.id);
    if let Err(e) = hub.store().append_events(events).await {
        let _ = hub.sources().delete(&row.id, false);
        let _ = hub.store().delete_session(&row.id).await;
        return Err(internal(e));
    }
    let row = hub.store().session(&row.id).await.map_err(internal)?.unwrap_or(row);
    tracing::info!(session = %row.id, from = %from.id, checkpoint = ?params.checkpoint, "forked");
    Ok(SessionForkResponse { session: hub.session_info(&row), prompt })
}

/// Why `from` cannot be forked now, if it cannot.
fn refusal(from: &SessionRow) -> Result<(), ErrorBody> {
    if let Some(host) = &from.host {
        return Err(ErrorBody::new(
            ErrorCode::BadRequest,
            format!("forking a session on a sandbox host ({host}) is not supported yet"),
        ));
    }
    if from.status == SessionStatus::Running {
        return Err(ErrorBody::new(
            ErrorCode::Conflict,
            "a turn is running in this session: fork it when the turn has ended",
        ));
    }
    Ok(())
}

/// The fork's row: the caller's, on the original's model, network and source, titled after it;
/// held to the org's session quotas like any new session.
async fn new_row(hub: &Hub, user: &UserRow, from: &SessionRow) -> Result<SessionRow, ErrorBody> {
    let choice = crate::hub::ModelChoice {
        context_window: from.context_window,
        model: from.model_name.as_deref(),
    };
    let title = format!("{} (fork)", from.title);
    let mut row = hub.new_session_row(user, &title, choice).await?;
    row.network = from.network;
    row.source = from.source.clone();
    outboard_org::quota::create_session_row(hub.store(), user, row).await
}

/// The events of `log`'s current history up to `to_seq` (the session's own, not its subagents'),
/// as `session`'s, numbered from 1; the positions events name (a compaction's first kept event,
/// a checkpoint's) follow the renumbering.
fn copied(log: &[SessionEvent], to_seq: u64, session: &SessionId) -> Vec<SessionEvent> {
    let top: Vec<&SessionEvent> =
        log.iter().filter(|e| e.parent.is_none() && e.seq <= to_seq).collect();
    let kept = outboard_harness::rewind::history(&top);
    let old: Vec<u64> = kept.iter().map(|e| e.seq).collect();
    // How many kept events lie at or before `seq`: the new position after event `seq`.
    let after = |seq: u64| old.partition_point(|&s| s <= seq) as u64;
    kept.into_iter()
        .enumerate()
        .map(|(i, e)| {
            let mut kind = e.kind.clone();
            match &mut kind {
                EventKind::Compaction { from_seq, kept_from_seq, .. } => {
                    *from_seq = after(from_seq.saturating_sub(1)) + 1;
                    *kept_from_seq = after(kept_from_seq.saturating_sub(1)) + 1;
                }
                EventKind::Checkpoint { at_seq, .. } => *at_seq = after(*at_seq),
                EventKind::Rewound { to_seq, .. } => *to_seq = after(*to_seq),
                _ => {}
            }
            SessionEvent {
                session_id: session.clone(),
                seq: i as u64 + 1,
                ts: e.ts.clone(),
                kind,
                parent: None,
            }
        })
        .collect()
}

fn internal(e: outboard_store::StoreError) -> ErrorBody {
    ErrorBody::new(ErrorCode::Internal, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboard_shared::TurnId;

    fn event(seq: u64, kind: EventKind) -> SessionEvent {
        SessionEvent {
            session_id: SessionId("s_from".into()),
            seq,
            ts: String::new(),
            kind,
            parent: None,
        }
    }

    #[test]
    fn a_fork_copies_the_current_history_renumbered() {
        let user = |t: &str| EventKind::UserMessage { text: t.into(), attachments: Vec::new() };
        let turn = || EventKind::TurnStarted { turn_id: TurnId("t".into()), by: "a".into() };
        let rewound = EventKind::Rewound {
            checkpoint: 2,
            to_seq: 2,
            code: false,
            conversation: true,
            from_tree: None,
            by: "a".into(),
        };
        let log = vec![
            event(1, turn()),
            event(2, user("one")),
            event(3, turn()),
            event(4, user("two")),
            event(5, rewound),
            event(6, EventKind::Checkpoint { tree: None, at_seq: 5 }),
            event(7, turn()),
            event(8, user("three")),
            event(
                9,
                EventKind::Compaction {
                    summary: "s".into(),
                    from_seq: 1,
                    kept_from_seq: 8,
                    tokens_before: 0,
                    tokens_after: 0,
                    trigger: outboard_shared::CompactionTrigger::Manual,
                    focus: None,
                    usage: None,
                },
            ),
        ];
        let fork = copied(&log, 9, &SessionId("s_new".into()));
        let seqs: Vec<u64> = fork.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
        assert!(fork.iter().all(|e| e.session_id.0 == "s_new"));
        assert_eq!(fork[2].kind, EventKind::Checkpoint { tree: None, at_seq: 2 });
        assert_eq!(fork[4].kind, user("three"));
        match &fork[5].kind {
            EventKind::Compaction { from_seq, kept_from_seq, .. } => {
                assert_eq!((*from_seq, *kept_from_seq), (1, 5));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(copied(&log, 2, &SessionId("s_new".into())).len(), 2);
    }
}
