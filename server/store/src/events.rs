//! The session event log: appends (one transaction each, `seq` checked to follow the last one, the
//! session's title, status and usage updated with it) and reads back.

use outboard_shared::{EventKind, SessionEvent, SessionId, Usage};

use crate::db::{self, params, Db, OptionalExtension as _};
use crate::error::StoreError;
use crate::lease;
use crate::rows::todo_progress;

pub fn to_i64(seq: u64) -> i64 {
    seq.min(i64::MAX as u64) as i64
}

pub type EventRow = (i64, String, String, Option<String>);

pub fn event_row(r: &db::Row<'_>) -> db::Result<EventRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
}

pub fn decode_events(
    sid: &SessionId,
    rows: impl Iterator<Item = crate::db::Result<EventRow>>,
) -> Result<Vec<SessionEvent>, StoreError> {
    let mut out = Vec::new();
    for row in rows {
        let (seq, payload, ts, parent) = row?;
        let kind: EventKind = serde_json::from_str(&payload)
            .map_err(|e| StoreError::Corrupt(format!("session {} seq {seq}: {e}", sid.0)))?;
        out.push(SessionEvent { session_id: sid.clone(), seq: seq as u64, ts, kind, parent });
    }
    Ok(out)
}

/// The append itself, in its own transaction.
pub fn append_event(
    c: &mut Db,
    event: &SessionEvent,
    title: Option<&str>,
) -> Result<(), StoreError> {
    appending(c, None, |c| insert_event(c, event, title))
}

/// Appends `events` in order in one transaction, with the same checks as [`append_event`]: a
/// step's events that commit together, and how tests and benchmarks build logs of a hundred
/// thousand events in a second instead of paying one commit per event.
pub fn append_events(c: &mut Db, events: &[SessionEvent]) -> Result<(), StoreError> {
    appending(c, None, |c| events.iter().try_for_each(|event| insert_event(c, event, None)))
}

/// Runs `insert` in a transaction of its own. The event log's hot path (three appends a tool
/// call), so it runs on cached statements only: `BEGIN`, the checks, the insert, the
/// session's update and `COMMIT` are parsed once per connection, not once per event.
/// With `fence` (this node, the session), the append is refused unless the node still holds
/// the session's lease ([`lease::check`]), in the same transaction.
pub fn appending(
    c: &mut Db,
    fence: Option<(&lease::Node, &str)>,
    insert: impl FnOnce(&Db) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    // Nothing of a refused append stays: a failed insert or commit rolls the transaction back,
    // leaving the log as it was.
    let tx = c.transaction()?;
    if let Some((node, session)) = fence {
        lease::check(&tx, node, session)?;
    }
    insert(&tx)?;
    tx.commit()
}

/// Whether `event` is in the log already, with this very payload: how an append run again after
/// its commit's outcome was lost (the connection broke under `COMMIT`) finds out that the first
/// run committed. An event of another payload at its seq is not this one (the append then
/// fails on the seq check as it should).
pub fn already_appended(c: &Db, event: &SessionEvent) -> Result<bool, StoreError> {
    let payload =
        serde_json::to_string(&event.kind).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let stored: Option<String> = c
        .prepare_cached("SELECT payload FROM events WHERE session_id = ?1 AND seq = ?2")?
        .query_row(params![event.session_id.0, to_i64(event.seq)], |r| r.get(0))
        .optional()?;
    Ok(stored.as_deref() == Some(payload.as_str()))
}

pub fn insert_event(tx: &Db, event: &SessionEvent, title: Option<&str>) -> Result<(), StoreError> {
    let payload =
        serde_json::to_string(&event.kind).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let turn_id = match &event.kind {
        EventKind::TurnStarted { turn_id, .. }
        | EventKind::TurnCompleted { turn_id, .. }
        | EventKind::TurnFailed { turn_id, .. } => Some(turn_id.0.clone()),
        _ => None,
    };
    let last: i64 = tx
        .prepare_cached("SELECT last_seq FROM sessions WHERE id = ?1")?
        .query_row([&event.session_id.0], |r| r.get(0))?;
    if event.seq != last as u64 + 1 {
        return Err(StoreError::SeqGap { last: last as u64, got: event.seq });
    }
    cached(
        tx,
        "INSERT INTO events (session_id, seq, kind, turn_id, payload, ts, parent)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            event.session_id.0,
            event.seq as i64,
            event.kind.type_name(),
            turn_id,
            payload,
            event.ts,
            event.parent
        ],
    )?;
    match &event.kind {
        EventKind::TurnStarted { turn_id, .. } => cached(
            tx,
            "UPDATE sessions SET last_seq = ?2, updated_at = ?3, open_turn = ?4,
                                 status = 'running' WHERE id = ?1",
            params![event.session_id.0, event.seq as i64, event.ts, turn_id.0],
        )?,
        EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => cached(
            tx,
            "UPDATE sessions SET last_seq = ?2, updated_at = ?3, open_turn = NULL,
                 status = CASE WHEN status = 'failed' THEN 'failed' ELSE 'idle' END WHERE id = ?1",
            params![event.session_id.0, event.seq as i64, event.ts],
        )?,
        _ => cached(
            tx,
            "UPDATE sessions SET last_seq = ?2, updated_at = ?3 WHERE id = ?1",
            params![event.session_id.0, event.seq as i64, event.ts],
        )?,
    };
    if let EventKind::AssistantMessage { usage: Some(u), .. }
    | EventKind::Compaction { usage: Some(u), .. } = &event.kind
    {
        record_usage(tx, event, u)?;
    }
    if let EventKind::ModelChanged { model, label, context_window, .. } = &event.kind {
        cached(
            tx,
            "UPDATE sessions SET model_name = ?2, model = ?3, context_window = ?4 WHERE id = ?1",
            params![
                event.session_id.0,
                model,
                label,
                (*context_window).min(i64::MAX as u64) as i64
            ],
        )?;
    }
    if let EventKind::Todos { todos } = &event.kind {
        let progress = todo_progress(todos);
        cached(
            tx,
            "UPDATE sessions SET todos_done = ?2, todos_total = ?3 WHERE id = ?1",
            params![event.session_id.0, progress.done, progress.total],
        )?;
    }
    if let Some(title) = title.filter(|t| !t.is_empty()) {
        cached(
            tx,
            "UPDATE sessions SET title = ?2 WHERE id = ?1 AND title = ''",
            params![event.session_id.0, title],
        )?;
    }
    Ok(())
}

/// Runs `sql` on a statement parsed once per connection (the event log's hot path).
pub fn cached(c: &Db, sql: &str, params: impl db::Params) -> Result<usize, StoreError> {
    c.prepare_cached(sql)?.execute(params)
}

/// Records one model call's usage (inside the transaction appending the `assistant_message` that
/// carries it): a `model_usage` row for reports, and the session's running totals. The turn is
/// the session's open one, the user its owner, the model the one that answered (the session's
/// label for a compaction, and in logs written before the model was recorded per message).
pub fn record_usage(tx: &Db, event: &SessionEvent, u: &Usage) -> Result<(), StoreError> {
    let n = |v: u64| v.min(i64::MAX as u64) as i64;
    cached(
        tx,
        "INSERT INTO model_usage (session_id, seq, turn_id, org_id, user_id, model, input_tokens,
                                  output_tokens, cache_read_tokens, cache_write_tokens, at)
         SELECT id, ?2, open_turn, org_id, owner_id, COALESCE(?8, model), ?3, ?4, ?5, ?6, ?7
         FROM sessions WHERE id = ?1",
        params![
            event.session_id.0,
            event.seq as i64,
            n(u.input_tokens),
            n(u.output_tokens),
            n(u.cache_read_tokens),
            n(u.cache_write_tokens),
            event.ts,
            match &event.kind {
                EventKind::AssistantMessage { model, .. } => model.as_deref(),
                _ => None,
            }
        ],
    )?;
    cached(
        tx,
        "UPDATE sessions SET usage_input = usage_input + ?2, usage_output = usage_output + ?3,
             usage_cache_read = usage_cache_read + ?4, usage_cache_write = usage_cache_write + ?5
         WHERE id = ?1",
        params![
            event.session_id.0,
            n(u.input_tokens),
            n(u.output_tokens),
            n(u.cache_read_tokens),
            n(u.cache_write_tokens)
        ],
    )?;
    Ok(())
}
