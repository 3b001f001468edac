//! Where a turn's events go, seen from the loop: a small trait the session actor implements, so
//! `agent` never imports `session` (the arrows point down: session → agent → tools/llm) and the
//! loop can be driven by a test sink alone.
//!
//! The future is boxed so the sink can sit behind an `Arc<dyn …>` in [`Emitter`]: one small
//! allocation per event, against a store commit (durable) or a channel hop (transient).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use outboard_shared::EventKind;

/// Why an event could not be emitted.
#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// The session that keeps the events is gone.
    #[error("the session actor stopped")]
    Closed,
    /// The store refused the append.
    #[error("{0}")]
    Store(String),
}

/// What [`EventSink::emit`] returns: the `seq` a durable event was committed at.
pub type EmitFuture<'a> = Pin<Box<dyn Future<Output = Result<u64, EmitError>> + Send + 'a>>;

/// What [`EventSink::emit_all`] returns: the seqs the events were committed at, in order.
pub type EmitAllFuture<'a> = Pin<Box<dyn Future<Output = Result<Vec<u64>, EmitError>> + Send + 'a>>;

/// Receives a turn's events. `durable` events resolve only once committed to the session's log,
/// with their `seq`; transient ones once handed over (their `seq` is meaningless).
pub trait EventSink: Send + Sync {
    /// Emits one event; `parent` is the `Task` call whose subagent produced it (see
    /// [`outboard_shared::SessionEvent::parent`]), `None` for the session's own.
    fn emit(&self, kind: EventKind, durable: bool, parent: Option<Arc<str>>) -> EmitFuture<'_>;

    /// Emits durable events in one commit, in order, at consecutive seqs: all are in the log
    /// or none is. How a step's model message and the start of its first tool call cost one
    /// commit instead of two.
    fn emit_all(&self, kinds: Vec<EventKind>, parent: Option<Arc<str>>) -> EmitAllFuture<'_>;
}

/// A turn's cheap, cloneable handle to its sink.
#[derive(Clone)]
pub struct Emitter {
    sink: Arc<dyn EventSink>,
    /// Set on a subagent's emitter: every event it emits names this `Task` call.
    parent: Option<Arc<str>>,
}

impl Emitter {
    /// Wraps a sink.
    pub fn new(sink: Arc<dyn EventSink>) -> Self {
        Emitter { sink, parent: None }
    }

    /// The emitter of the subagent that the `Task` call `call_id` runs: the same sink, each
    /// event marked with its parent call.
    pub fn child(&self, call_id: &str) -> Self {
        Emitter { sink: self.sink.clone(), parent: Some(Arc::from(call_id)) }
    }

    /// The `Task` call this emitter's events belong to, if it is a subagent's.
    pub fn parent(&self) -> Option<&str> {
        self.parent.as_deref()
    }

    /// Emits a durable event and returns its `seq` once it is committed to the log.
    pub async fn durable(&self, kind: EventKind) -> Result<u64, EmitError> {
        self.sink.emit(kind, true, self.parent.clone()).await
    }

    /// Emits durable events in one commit ([`EventSink::emit_all`]); their seqs, in order.
    pub async fn durable_all(&self, kinds: Vec<EventKind>) -> Result<Vec<u64>, EmitError> {
        self.sink.emit_all(kinds, self.parent.clone()).await
    }

    /// Emits a transient event (broadcast only).
    pub async fn transient(&self, kind: EventKind) -> Result<(), EmitError> {
        self.sink.emit(kind, false, self.parent.clone()).await.map(|_| ())
    }
}

/// `TodoWrite` records its list through the turn's emitter.
impl outboard_tools::ToolEvents for Emitter {
    fn durable(&self, kind: EventKind) -> futures_util::future::BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            Emitter::durable(self, kind).await.map(|_| ()).map_err(|e| e.to_string())
        })
    }
}
