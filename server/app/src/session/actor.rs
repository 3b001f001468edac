//! The actor's loop: one command at a time, the session's lease (taken, renewed, lost, given
//! back), eviction, and the model and mode changes.

use std::sync::Arc;

use outboard_harness::EmitError;
use outboard_llm::Provider;
use outboard_shared::{ErrorBody, ErrorCode, EventKind, SandboxState, SessionInfo, SessionStatus};
use outboard_store::StoreError;
use tokio::sync::mpsc;

use super::command::Command;
use super::{held_elsewhere, internal, no_task, window, Actor};

impl Actor {
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        if let Err(refusal) = self.take_lease().await {
            tracing::debug!(session = %self.row.id, "not run here: {}", refusal.message);
            let _ = self.refusal.set(refusal);
            self.evict.evict(&self.row.id, self.epoch);
            // Queued commands are dropped: their callers find the refusal on the handle.
            rx.close();
            while rx.recv().await.is_some() {}
            return;
        }
        if let Err(e) = self.load().await {
            tracing::error!(session = %self.row.id, "cannot load the session: {e}");
        }
        let lost = self.lost.clone();
        loop {
            let next = tokio::select! {
                biased;
                () = lost.cancelled() => {
                    self.lease_lost(rx).await;
                    return;
                }
                next = tokio::time::timeout(self.idle_after, rx.recv()) => next,
            };
            let cmd = match next {
                Ok(Some(cmd)) => cmd,
                Ok(None) => {
                    self.give_lease_back().await;
                    return;
                }
                Err(_) => {
                    if self.evictable().await && self.evict.evict(&self.row.id, self.epoch) {
                        tracing::debug!(session = %self.row.id, "idle; the actor stops");
                        // Commands queued before the hub forgot us are dropped unanswered: their
                        // callers see a stopped actor and retry on a fresh one.
                        rx.close();
                        while rx.recv().await.is_some() {}
                        self.give_lease_back().await;
                        return;
                    }
                    continue;
                }
            };
            match cmd {
                Command::Emit { kind, parent, ack } => {
                    let result = self.emit_from(kind, ack.is_some(), None, parent).await;
                    if let Some(ack) = ack {
                        let _ = ack.send(result);
                    }
                }
                Command::EmitAll { kinds, parent, ack } => {
                    let _ = ack.send(self.emit_all(kinds, parent).await);
                }
                Command::Attach { after_seq, reply } => {
                    let _ = reply.send(self.attach(after_seq).await);
                }
                Command::Send { prompt, by, reply } => {
                    let _ = reply.send(self.start_turn(prompt, by).await);
                }
                Command::Interrupt { reply } => {
                    let interrupted = match &self.running {
                        Some(r) => {
                            tracing::info!(session = %self.row.id, turn = %r.turn_id, "interrupt");
                            r.cancel.cancel();
                            true
                        }
                        None => false,
                    };
                    let _ = reply.send(interrupted);
                }
                Command::WaitIdle { reply } => {
                    if self.running.is_some() {
                        self.idle_waiters.push(reply);
                    } else {
                        let _ = reply.send(());
                    }
                }
                Command::TurnEnded(end) => self.turn_ended(end).await,
                Command::Compact { focus, reply } => {
                    if let Err(e) = self.conversation_loaded().await {
                        let _ = reply.send(Err(e));
                        continue;
                    }
                    if let Err(e) = self.start_compaction(focus, reply) {
                        tracing::debug!(session = %self.row.id, "compaction refused: {}", e.message);
                    }
                }
                Command::CompactEnded(end) => self.compaction_ended(end).await,
                Command::Answer { call_id, answer, reply } => {
                    let answered = match self.gate.answer(&call_id, answer) {
                        outboard_harness::approvals::Delivery::Delivered => Ok(()),
                        outboard_harness::approvals::Delivery::NotWaiting(answer) => {
                            self.answer_early(&call_id, answer).await
                        }
                    };
                    let _ = reply.send(answered);
                }
                Command::SetMode { mode, by, reply } => {
                    let _ = reply.send(self.set_mode(mode, by).await);
                }
                Command::Checkpoints { reply } => {
                    let _ = reply.send(self.checkpoints().await);
                }
                Command::Rewind { params, by, reply } => {
                    let _ = reply.send(self.rewind(params, by).await);
                }
                Command::SetModel { model, by, reply } => {
                    let _ = reply.send(self.set_model(model, by).await);
                }
                Command::KillTask { shell_id, reply } => {
                    let Some(sandbox) = self.sandbox.clone() else {
                        let _ = reply.send(Err(no_task(&shell_id)));
                        continue;
                    };
                    // In a task of its own: the sandbox may be busy with a command for minutes.
                    tokio::spawn(async move {
                        let answer = match sandbox.kill_job(&shell_id).await {
                            Ok(true) => Ok(()),
                            Ok(false) => Err(no_task(&shell_id)),
                            Err(e) => Err(ErrorBody::new(ErrorCode::Internal, e.to_string())),
                        };
                        let _ = reply.send(answer);
                    });
                }
                Command::Close { reply } => {
                    if self.running.is_some() {
                        let _ = reply.send(Err(ErrorBody::new(
                            ErrorCode::Conflict,
                            "a turn is running in this session: interrupt it first",
                        )));
                        continue;
                    }
                    self.evict.evict(&self.row.id, self.epoch);
                    rx.close();
                    if let Some(env) = &self.env {
                        env.sandbox.stop().await;
                    }
                    self.give_lease_back().await;
                    let _ = reply.send(Ok(()));
                    return;
                }
            }
        }
    }

    /// Takes the session's lease for this node and reads the session row as it is now (another
    /// node may have run turns since the caller read it, and this actor's state is built from
    /// what the store holds once the lease is ours). The refusal when another node runs the
    /// session, or this node is shutting down.
    pub(super) async fn take_lease(&mut self) -> Result<(), ErrorBody> {
        if self.shutdown.is_cancelled() {
            return Err(ErrorBody::new(
                ErrorCode::Unavailable,
                "this server is shutting down; reconnect in a moment (to another node of the \
                 same store, or to this one once it has restarted)",
            ));
        }
        match self.store.acquire_lease(&self.row.id).await {
            Ok(Ok(lease)) => self.lease = Some(lease.epoch),
            Ok(Err(held)) => return Err(held_elsewhere(&held)),
            Err(e) => return Err(internal(e)),
        }
        match self.store.session(&self.row.id).await {
            Ok(Some(row)) => {
                self.last_seq = row.last_seq;
                self.row = row;
                Ok(())
            }
            Ok(None) => {
                self.give_lease_back().await;
                Err(ErrorBody::new(
                    ErrorCode::NotFound,
                    format!("session {} was deleted", self.row.id),
                ))
            }
            Err(e) => {
                self.give_lease_back().await;
                Err(internal(e))
            }
        }
    }

    /// Gives the lease this actor took back (it stops with nothing left to do).
    pub(super) async fn give_lease_back(&mut self) {
        if let Some(epoch) = self.lease.take() {
            if let Err(e) = self.store.release_lease(&self.row.id, Some(epoch)).await {
                // Not fatal: the lease expires on its own, and this node stops renewing it.
                tracing::warn!(session = %self.row.id, "cannot give the session's lease back: {e}");
            }
        }
    }

    /// This node lost the session's lease: another node runs it now. The turn is cancelled and
    /// the sandbox stopped (its commands must not go on changing the workspace the new owner
    /// works in); nothing more is written; queued commands are dropped, so their callers retry
    /// on a fresh actor, which finds the new owner.
    pub(super) async fn lease_lost(&mut self, mut rx: mpsc::Receiver<Command>) {
        tracing::warn!(session = %self.row.id, "the session's lease was taken over by another node; stopping here");
        self.evict.evict(&self.row.id, self.epoch);
        rx.close();
        if let Some(running) = &self.running {
            running.cancel.cancel();
        }
        if let Some(sandbox) =
            self.sandbox.clone().or_else(|| self.env.as_ref().map(|e| e.sandbox.clone()))
        {
            sandbox.stop().await;
        }
        while rx.recv().await.is_some() {}
        self.give_lease_back().await;
    }

    /// A failed append as the turn sees it; a fenced one also stops this actor (see
    /// [`Actor::lease_lost`]).
    pub(super) fn store_failed(&self, e: StoreError) -> EmitError {
        if matches!(e, StoreError::Fenced(_)) {
            self.lost.cancel();
        }
        EmitError::Store(e.to_string())
    }

    /// An answer for a call no loop waits on: held for the resumed loop if the log shows the
    /// question open (a restart resumed the turn, which has not reached the call yet).
    pub(super) async fn answer_early(
        &mut self,
        call_id: &str,
        answer: outboard_harness::approvals::Answer,
    ) -> Result<(), ErrorBody> {
        let marks = self
            .store
            .events_of_kinds(&self.row.id, outboard_harness::approvals::KINDS)
            .await
            .map_err(internal)?;
        if self.running.is_none() || !outboard_harness::approvals::is_open(&marks, call_id) {
            return Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!(
                    "no call {call_id} waits for approval in this session: it was answered \
                     already, its turn ended, or the id is wrong (the approval_requested event \
                     names it)"
                ),
            ));
        }
        if !self.gate.hold(call_id, answer) {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                "too many answers are waiting for this session's turn to resume; try again in \
                 a moment",
            ));
        }
        Ok(())
    }

    /// Nothing would be lost by stopping now: no turn, nobody subscribed, no live sandbox.
    pub(super) async fn evictable(&self) -> bool {
        if self.running.is_some() || !self.idle_waiters.is_empty() {
            return false;
        }
        if self.events.receiver_count() > 0 {
            return false;
        }
        match &self.env {
            Some(env) => matches!(
                env.sandbox.state().await,
                SandboxState::None | SandboxState::Stopped | SandboxState::Dead
            ),
            None => true,
        }
    }

    /// Marks the session failed because its log cannot be read, with the reason.
    pub(super) async fn fail_unreadable(&mut self, e: &StoreError) -> Result<(), StoreError> {
        let reason = format!("the session's log cannot be read ({e}); start a new session");
        tracing::error!(session = %self.row.id, "{reason}");
        self.store.fail_session(&self.row.id, &reason).await?;
        self.row.status = SessionStatus::Failed;
        self.row.failure = Some(reason);
        Ok(())
    }

    /// `session/set_model`: records the change durably and takes it into the session's row and
    /// window; a turn in flight finishes with the model it started with.
    pub(super) async fn set_model(
        &mut self,
        name: String,
        by: String,
    ) -> Result<SessionInfo, ErrorBody> {
        let (entry, _) =
            self.models.pick(&name).map_err(|e| ErrorBody::new(ErrorCode::BadRequest, e))?;
        let label = entry.label();
        let context_window = self.models.resolve_window(entry).await.tokens;
        if self.row.model_name.as_deref() == Some(name.as_str()) && self.row.model == label {
            return Ok(window::session_info(&self.models, &self.row));
        }
        let kind = EventKind::ModelChanged {
            model: name.clone(),
            label: label.clone(),
            context_window,
            by,
        };
        self.emit(kind, true)
            .await
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, format!("cannot record it: {e}")))?;
        tracing::info!(session = %self.row.id, model = %label, "model changed");
        self.row.model_name = Some(name);
        self.row.model = label;
        self.row.context_window = Some(context_window);
        self.window.tokens = context_window;
        Ok(window::session_info(&self.models, &self.row))
    }

    /// `session/set_mode`: records the switch durably, then the gate (which a running turn and
    /// its subagents judge their next calls by) takes it. The gate's mode is read from the log
    /// first when no turn has loaded it since the actor started. Refused for a failed session.
    pub(super) async fn set_mode(
        &mut self,
        mode: outboard_shared::SessionMode,
        by: String,
    ) -> Result<outboard_shared::SessionSetModeResponse, ErrorBody> {
        if let Some(reason) = &self.row.failure {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                format!("this session failed: {reason}"),
            ));
        }
        if self.conversation.is_none() && self.running.is_none() {
            let kinds = outboard_harness::approvals::MODE_KINDS;
            let marks = self.store.events_of_kinds(&self.row.id, kinds).await.map_err(internal)?;
            self.gate.restore(&marks);
        }
        if self.gate.mode() == mode {
            return Ok(outboard_shared::SessionSetModeResponse { mode, seq: self.last_seq });
        }
        let seq = self
            .emit(EventKind::ModeChanged { mode, by }, true)
            .await
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, format!("cannot record it: {e}")))?;
        self.gate.set_mode(mode);
        tracing::info!(session = %self.row.id, mode = mode.as_str(), "mode changed");
        Ok(outboard_shared::SessionSetModeResponse { mode, seq })
    }

    /// The provider of the session's model, for a turn (or a compaction) starting now. A
    /// session whose recorded model the server no longer offers runs with the default, and its
    /// log's `assistant_message.model` says so.
    pub(super) fn turn_provider(&self) -> Arc<Provider> {
        let (entry, provider) =
            self.models.for_session(self.row.model_name.as_deref(), &self.row.model);
        if entry.label() != self.row.model {
            tracing::warn!(
                session = %self.row.id,
                recorded = %self.row.model,
                using = %entry.label(),
                "the session's model is not offered by this server any more; using the default"
            );
        }
        provider.clone()
    }
}
