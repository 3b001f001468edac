//! The commands a `SessionHandle` sends its actor, and the seams through which the harness
//! (`ActorSink`, an `EventSink`) and the network policy (`ActorRefusals`) reach the actor.

use std::sync::Arc;

use outboard_harness as agent;
use outboard_harness::{EmitError, Emitter, TurnEnd};
use outboard_shared::{
    ErrorBody, EventKind, SessionCompactResponse, SessionInfo, TurnSendResponse,
};
use tokio::{sync::mpsc, sync::oneshot};

use super::prompt::Prompt;
use super::Attached;

/// The actor's side of [`outboard_harness::EventSink`]: a turn's events arrive on the actor's one
/// command channel, in order with attaches, so a snapshot and its subscription stay atomic.
pub(super) struct ActorSink {
    tx: mpsc::Sender<Command>,
}

impl outboard_harness::EventSink for ActorSink {
    fn emit(
        &self,
        kind: EventKind,
        durable: bool,
        parent: Option<Arc<str>>,
    ) -> outboard_harness::EmitFuture<'_> {
        Box::pin(async move {
            if !durable {
                let emit = Command::Emit { kind, parent, ack: None };
                self.tx.send(emit).await.map_err(|_| EmitError::Closed)?;
                return Ok(0);
            }
            let (ack, rx) = oneshot::channel();
            let emit = Command::Emit { kind, parent, ack: Some(ack) };
            self.tx.send(emit).await.map_err(|_| EmitError::Closed)?;
            rx.await.map_err(|_| EmitError::Closed)?
        })
    }

    fn emit_all(
        &self,
        kinds: Vec<EventKind>,
        parent: Option<Arc<str>>,
    ) -> outboard_harness::EmitAllFuture<'_> {
        Box::pin(async move {
            let (ack, rx) = oneshot::channel();
            let emit = Command::EmitAll { kinds, parent, ack };
            self.tx.send(emit).await.map_err(|_| EmitError::Closed)?;
            rx.await.map_err(|_| EmitError::Closed)?
        })
    }
}

/// An [`Emitter`] that emits through the actor behind `tx`.
pub(super) fn emitter(tx: mpsc::Sender<Command>) -> Emitter {
    Emitter::new(Arc::new(ActorSink { tx }))
}

/// The network proxy's refusals, as durable `network` events of this session. Weak, so a
/// sandbox's proxy never keeps its actor alive.
pub(super) struct ActorRefusals(pub(super) mpsc::WeakSender<Command>);

impl crate::netsession::RefusalEvents for ActorRefusals {
    fn refused(&self, event: EventKind) -> futures_util::future::BoxFuture<'static, bool> {
        let tx = self.0.clone();
        Box::pin(async move {
            let Some(tx) = tx.upgrade() else { return false };
            emitter(tx).durable(event).await.is_ok()
        })
    }
}

pub(super) enum Command {
    Emit {
        kind: EventKind,
        /// The `Task` call of the subagent that emits it.
        parent: Option<Arc<str>>,
        ack: Option<oneshot::Sender<Result<u64, EmitError>>>,
    },
    /// Durable events committed together ([`outboard_harness::EventSink::emit_all`]).
    EmitAll {
        kinds: Vec<EventKind>,
        parent: Option<Arc<str>>,
        ack: oneshot::Sender<Result<Vec<u64>, EmitError>>,
    },
    Attach {
        after_seq: Option<u64>,
        reply: oneshot::Sender<Result<Attached, ErrorBody>>,
    },
    Send {
        prompt: Prompt,
        by: String,
        reply: oneshot::Sender<Result<TurnSendResponse, ErrorBody>>,
    },
    Interrupt {
        reply: oneshot::Sender<bool>,
    },
    /// Answered once no turn is running (at once when idle).
    WaitIdle {
        reply: oneshot::Sender<()>,
    },
    /// Boxed: the turn hands back its whole tool environment, and every other command is small.
    TurnEnded(Option<Box<TurnEnd>>),
    /// Compact the conversation now (`session/compact`); answered when it is done.
    Compact {
        focus: Option<String>,
        reply: oneshot::Sender<Result<SessionCompactResponse, ErrorBody>>,
    },
    /// A compaction asked for by `Compact` ended (`None`: its task panicked).
    CompactEnded(Option<Box<(TurnEnd, Result<agent::Compacted, agent::CompactError>)>>),
    /// Stop for good (the session is being deleted): refused while a turn runs; otherwise the
    /// actor leaves the hub's map, stops its sandbox and ends.
    Close {
        reply: oneshot::Sender<Result<(), ErrorBody>>,
    },
    /// Kill a background command (`session/kill_task`).
    KillTask {
        shell_id: String,
        reply: oneshot::Sender<Result<(), ErrorBody>>,
    },
    /// Answer a call waiting for approval (`approval/answer`).
    Answer {
        call_id: String,
        answer: outboard_harness::approvals::Answer,
        reply: oneshot::Sender<Result<(), ErrorBody>>,
    },
    /// Switch the session's mode (`session/set_mode`).
    SetMode {
        mode: outboard_shared::SessionMode,
        by: String,
        reply: oneshot::Sender<Result<outboard_shared::SessionSetModeResponse, ErrorBody>>,
    },
    /// The session's checkpoints (`session/checkpoints`).
    Checkpoints {
        reply: oneshot::Sender<Result<Vec<outboard_shared::CheckpointInfo>, ErrorBody>>,
    },
    /// Go back to a checkpoint (`session/rewind`).
    Rewind {
        params: outboard_shared::SessionRewindParams,
        by: String,
        reply: oneshot::Sender<Result<outboard_shared::SessionRewindResponse, ErrorBody>>,
    },
    /// Use another model from the next turn on (`session/set_model`).
    SetModel {
        model: String,
        by: String,
        reply: oneshot::Sender<Result<SessionInfo, ErrorBody>>,
    },
}
