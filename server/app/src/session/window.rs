//! A session's context window as clients see it (its size and where it came from), and the
//! failure a panicked turn records.

use outboard_llm::models::Models;
use outboard_store::SessionRow;

/// `row`'s [`outboard_shared::SessionInfo`] with its context window's source: the model's (the
/// model file, `serve --context-window`, the table, its server, or its API's usual window — a
/// guess the clients state once), or the session's own.
pub(crate) fn session_info(models: &Models, row: &SessionRow) -> outboard_shared::SessionInfo {
    let info = row.info(outboard_llm::context::context_window);
    let tokens = info.context_window.unwrap_or_default();
    let window = models.session_window(row.model_name.as_deref(), &row.model, tokens);
    outboard_shared::SessionInfo {
        context_window_source: Some(window.source),
        context_window_from: Some(window.from),
        ..info
    }
}

/// The `turn_failed` of a turn whose task panicked (its conversation is rebuilt from the log).
pub(crate) fn panicked(turn_id: outboard_shared::TurnId) -> outboard_shared::EventKind {
    outboard_shared::EventKind::TurnFailed {
        turn_id,
        error: "internal error in the harness; the turn stopped".into(),
        class: Some(outboard_shared::FailureClass::Other),
    }
}
