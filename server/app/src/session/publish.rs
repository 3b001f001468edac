//! Publishing events: appended to the store, scrubbed of secrets, broadcast to the attached
//! connections, tracked in flight (the partial text a late attacher gets), and the snapshot of
//! an attach.

use std::sync::Arc;

use outboard_base::util::now_rfc3339;
use outboard_harness::EmitError;
use outboard_shared::{ErrorBody, EventKind, SessionEvent, HISTORY_PAGE_EVENTS};
use outboard_store::StoreError;

use super::in_flight::track_in_flight;
use super::{internal, Actor, Attached};

/// The org's secret values as they appear in text and in an event's JSON.
pub(super) struct Scrubbers {
    pub(super) text: Arc<outboard_base::scrub::Scrubber>,
    pub(super) json: outboard_base::scrub::Scrubber,
}

impl Scrubbers {
    pub(super) fn new(values: Vec<(String, String)>) -> Scrubbers {
        // A value with a quote or a backslash is escaped in JSON: look for that form too.
        let json = values
            .iter()
            .map(|(v, r)| {
                let quoted = serde_json::to_string(v).unwrap_or_default();
                (quoted.trim_matches('"').to_owned(), r.clone())
            })
            .collect();
        Scrubbers {
            text: Arc::new(outboard_base::scrub::Scrubber::new(values)),
            json: outboard_base::scrub::Scrubber::new(json),
        }
    }

    /// `kind` scrubbed: through its JSON, so every string field is covered, and kinds added
    /// later too. Unchanged (and not re-parsed) when no value occurs.
    pub(super) fn event(&self, mut kind: EventKind) -> EventKind {
        if self.json.is_empty() {
            return kind;
        }
        // The streaming chunks, many per step, are one text each: scanned as is, no JSON.
        if let EventKind::AssistantDelta { text } | EventKind::ToolOutputDelta { text, .. } =
            &mut kind
        {
            if let std::borrow::Cow::Owned(clean) = self.text.scrub_str(text) {
                *text = clean;
            }
            return kind;
        }
        let Ok(json) = serde_json::to_string(&kind) else { return kind };
        match self.json.scrub_str(&json) {
            std::borrow::Cow::Borrowed(_) => kind,
            std::borrow::Cow::Owned(clean) => serde_json::from_str(&clean).unwrap_or(kind),
        }
    }
}

/// Of a log's `mode_changed`, `todos` and `background_task` events, those whose state still
/// holds: the last `mode_changed`, the last `todos`, and the last event of each background command whose last event says it runs.
pub(super) fn standing(marks: Vec<SessionEvent>) -> Vec<SessionEvent> {
    let mut todos = None;
    let mut mode = None;
    let mut tasks: Vec<SessionEvent> = Vec::new();
    for event in marks {
        match &event.kind {
            EventKind::Todos { .. } => todos = Some(event),
            EventKind::ModeChanged { .. } => mode = Some(event),
            EventKind::BackgroundTask { shell_id, status, .. } => {
                let running = *status == outboard_shared::TaskStatus::Running;
                let id = shell_id.clone();
                tasks.retain(|t| {
                    !matches!(&t.kind, EventKind::BackgroundTask { shell_id, .. } if *shell_id == id)
                });
                if running {
                    tasks.push(event);
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<SessionEvent> = mode.into_iter().chain(todos).chain(tasks).collect();
    out.sort_by_key(|e| e.seq);
    out
}

impl Actor {
    pub(super) async fn emit(&mut self, kind: EventKind, durable: bool) -> Result<u64, EmitError> {
        self.emit_from(kind, durable, None, None).await
    }

    /// [`Actor::emit`]; a durable event with a `title` also gives the session that title, in
    /// the same commit, when it has none yet.
    pub(super) async fn emit_titled(
        &mut self,
        kind: EventKind,
        durable: bool,
        title: Option<String>,
    ) -> Result<u64, EmitError> {
        self.emit_from(kind, durable, title, None).await
    }

    /// [`Actor::emit_titled`] of an event that a subagent (`parent`) may have produced.
    pub(super) async fn emit_from(
        &mut self,
        kind: EventKind,
        durable: bool,
        title: Option<String>,
        parent: Option<Arc<str>>,
    ) -> Result<u64, EmitError> {
        let durable = durable && kind.is_durable();
        let kind = self.scrubbed(kind);
        let seq = if durable { self.last_seq + 1 } else { self.last_seq };
        let event = SessionEvent {
            session_id: self.row.id.clone(),
            seq,
            ts: now_rfc3339(),
            kind,
            parent: parent.map(|p| p.to_string()),
        };
        if durable {
            if self.lost.is_cancelled() {
                return Err(self.store_failed(StoreError::Fenced(self.row.id.0.clone())));
            }
            match title {
                Some(title) => {
                    self.row.title = self
                        .store
                        .append_event_titled(event.clone(), title)
                        .await
                        .map_err(|e| self.store_failed(e))?;
                }
                None => {
                    if let Err(e) = self.store.append_event(event.clone()).await {
                        return Err(self.store_failed(e));
                    }
                }
            }
        }
        self.published(event, durable);
        Ok(seq)
    }

    /// Durable events committed in one transaction at consecutive seqs, then published in
    /// order; all or none.
    pub(super) async fn emit_all(
        &mut self,
        kinds: Vec<EventKind>,
        parent: Option<Arc<str>>,
    ) -> Result<Vec<u64>, EmitError> {
        let ts = now_rfc3339();
        let mut events = Vec::with_capacity(kinds.len());
        for kind in kinds {
            if !kind.is_durable() {
                return Err(EmitError::Store(format!(
                    "a {} event is not durable and cannot be committed",
                    kind.type_name()
                )));
            }
            events.push(SessionEvent {
                session_id: self.row.id.clone(),
                seq: self.last_seq + 1 + events.len() as u64,
                ts: ts.clone(),
                kind: self.scrubbed(kind),
                parent: parent.as_ref().map(|p| p.to_string()),
            });
        }
        if self.lost.is_cancelled() {
            return Err(self.store_failed(StoreError::Fenced(self.row.id.0.clone())));
        }
        if let Err(e) = self.store.append_events(events.clone()).await {
            return Err(self.store_failed(e));
        }
        let seqs = events.iter().map(|e| e.seq).collect();
        for event in events {
            self.published(event, true);
        }
        Ok(seqs)
    }

    /// After a durable `event` was committed (or for a transient one): the actor's view of the
    /// session follows, and every attached client gets it.
    pub(super) fn published(&mut self, event: SessionEvent, durable: bool) {
        if durable {
            self.last_seq = event.seq;
            self.row.last_seq = event.seq;
            self.row.updated_at = event.ts.clone();
            self.metrics.event(&event.kind, event.parent.is_some());
        }
        if let (true, EventKind::Todos { todos }) = (durable, &event.kind) {
            self.row.todos = Some(outboard_store::todo_progress(todos));
        }
        if event.parent.is_none() {
            // A subagent's streamed text is its own; clients see it live and then as events.
            self.track_in_flight(&event.kind);
        } else if let EventKind::ToolOutputDelta { .. } | EventKind::ToolResult { .. } = &event.kind
        {
            self.track_in_flight(&event.kind);
        }
        // No receivers is fine: nobody is attached.
        let _ = self.events.send(Arc::new(event));
    }

    /// Keeps the not-yet-durable output of the turn so a client attaching mid-stream can draw it.
    pub(super) fn track_in_flight(&mut self, kind: &EventKind) {
        track_in_flight(&mut self.in_flight, kind);
    }

    /// One page, read with a LIMIT on the log's primary key: a long log costs no more to attach
    /// to than a short one, and the actor is busy for one page's read only.
    pub(super) async fn attach(&mut self, after_seq: Option<u64>) -> Result<Attached, ErrorBody> {
        let page = HISTORY_PAGE_EVENTS as u32;
        let events = match after_seq {
            Some(after) => self.store.events_after_limited(&self.row.id, after, page).await,
            None => self.store.events_before(&self.row.id, u64::MAX, page).await,
        }
        .map_err(internal)?;
        let standing = match after_seq {
            Some(_) => Vec::new(),
            None => {
                let marks = self
                    .store
                    .standing_events(
                        &self.row.id,
                        &["mode_changed", "todos"],
                        &["background_task"],
                        outboard_harness::approvals::KINDS,
                    )
                    .await
                    .map_err(internal)?;
                let mut standing: Vec<SessionEvent> =
                    outboard_harness::approvals::open_requests(&marks)
                        .into_iter()
                        .cloned()
                        .collect();
                standing.extend(self::standing(marks));
                standing.sort_by_key(|e| e.seq);
                standing
            }
        };
        Ok(Attached {
            session: self.row.clone(),
            events,
            in_flight: self.running.as_ref().map(|_| self.in_flight.clone()),
            standing,
            live: self.events.subscribe(),
        })
    }

    /// `kind` with every org secret's value replaced by `[secret NAME]`.
    pub(super) fn scrubbed(&self, kind: EventKind) -> EventKind {
        match &self.scrub {
            Some(s) => s.event(kind),
            None => kind,
        }
    }
}
