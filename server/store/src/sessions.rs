//! Session rows written inside bigger transactions: a new session, a move to another sandbox host.

use outboard_shared::{SessionEvent, SessionId};

use crate::db::{params, Db};
use crate::error::StoreError;
use crate::events::{appending, insert_event};
use crate::rows::{source_json, status_str, SessionRow};

/// Inserts a new session row, usable inside a bigger transaction.
pub fn insert_session(c: &Db, r: &SessionRow) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO sessions (id, org_id, owner_id, title, status, model, last_seq,
                               created_at, updated_at, workspace_path, source, context_window,
                               network, model_name, host)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        params![
            r.id.0,
            r.org_id.0,
            r.owner_id.0,
            r.title,
            status_str(r.status),
            r.model,
            r.created_at,
            r.updated_at,
            r.workspace,
            source_json(r.source.as_ref())?,
            r.context_window.map(|w| w.min(i64::MAX as u64) as i64),
            (!r.network.is_org()).then(|| r.network.as_str()),
            r.model_name,
            r.host,
        ],
    )?;
    Ok(())
}

/// Moves session `id` to sandbox host `host` and appends `event` (the note that tells the model)
/// in one transaction: a restore either happens with its note or not at all.
pub fn move_session_host(
    c: &mut Db,
    id: &SessionId,
    host: &str,
    event: &SessionEvent,
) -> Result<(), StoreError> {
    appending(c, None, |c| {
        c.execute("UPDATE sessions SET host = ?2 WHERE id = ?1", params![id.0, host])?;
        insert_event(c, event, None)
    })
}
