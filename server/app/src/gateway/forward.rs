//! Moving a session's events to an attached connection: the catch-up from the store after a
//! snapshot that did not fit one frame, then live events, and the `lagged` stop (see the
//! gateway's header); and presence broadcasts.

use outboard_shared::{ErrorCode, EventFrame, EventKind, PresenceEntry, ServerFrame, SessionId};
use tokio::sync::broadcast;

use crate::paging;
use crate::session::SessionHandle;

use super::bounds::Out;
use super::frames::connection_error;

/// The durable events an attach still owes after its snapshot frame: `(from, until]`.
pub(super) struct CatchUp {
    pub(super) store: outboard_store::Store,
    pub(super) from: u64,
    pub(super) until: u64,
}

/// Tells everyone attached to a session who is attached now.
pub(super) async fn broadcast_presence(handle: &SessionHandle, attached: Vec<PresenceEntry>) {
    if let Err(e) = handle.transient(EventKind::Presence { attached }).await {
        tracing::debug!("cannot broadcast presence: {e}");
    }
}

/// Moves a session's live events into a connection's queue. When the connection falls so far
/// behind that the broadcast drops events for it, it stops with a `lagged` error naming the last
/// durable `seq` delivered (see the module header): the client re-attaches for a fresh snapshot.
///
/// With a `catch_up` (an attach after `after_seq` whose snapshot did not fit one frame) it first
/// sends the snapshot's remaining durable events from the store, in order, as `event` frames;
/// live events wait in `live` meanwhile, so the stream has no gap either way.
pub(super) async fn forward(
    session_id: SessionId,
    mut live: broadcast::Receiver<std::sync::Arc<outboard_shared::SessionEvent>>,
    out: Out,
    mut last_durable: u64,
    catch_up: Option<CatchUp>,
) {
    if let Some(c) = catch_up {
        let sent = paging::catch_up(&c.store, &session_id, c.from, c.until, |event| {
            let out = out.clone();
            async move { out.send(ServerFrame::Event(EventFrame { event }), None).await }
        })
        .await;
        match sent {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                let message = format!(
                    "session {session_id}: cannot read its log to catch up ({e}); attach again"
                );
                let _ =
                    out.send(connection_error(ErrorCode::Internal, &message, false), None).await;
                return;
            }
        }
    }
    loop {
        match live.recv().await {
            Ok(event) => {
                let event = std::sync::Arc::unwrap_or_clone(event);
                if event.kind.is_durable() {
                    if event.seq <= last_durable {
                        continue;
                    }
                    last_durable = event.seq;
                }
                if !out.send(ServerFrame::Event(EventFrame { event }), None).await {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(session = %session_id, skipped = n, "a client lagged; detaching it");
                let message = format!(
                    "session {session_id}: this connection fell more than {} events behind and \
                     was detached; attach again with after_seq {last_durable}",
                    crate::session::BROADCAST_CAPACITY
                );
                let _ = out.send(connection_error(ErrorCode::Lagged, &message, false), None).await;
                return;
            }
            Err(broadcast::error::RecvError::Closed) => {
                // The session's actor stopped while this connection was attached: this node
                // lost its lease (another node runs the session now) or stops. Attaching again
                // finds where it runs.
                let message = format!(
                    "session {session_id}: it stopped running on this server node; attach again \
                     with after_seq {last_durable}"
                );
                let _ = out.send(connection_error(ErrorCode::Lagged, &message, false), None).await;
                return;
            }
        }
    }
}
