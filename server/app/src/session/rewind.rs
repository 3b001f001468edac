//! Checkpoints and rewinds of a session, in its actor: a checkpoint before each prompt, the
//! list, the rewind itself, and the end of a rewind a crash interrupted.
//!
//! A rewind that restores files is crash-safe: the workspace's tree before it and the
//! checkpoint's are recorded durably beside the shadow repository before a file is touched
//! ([`crate::sources::PendingRewind`]), the files are checked out, then the `rewound` event is
//! logged and the record removed. An actor that starts with such a record left (at the
//! server's start, [`crate::hub::Hub::resume_all`] starts those sessions' actors) finishes it
//! before anything else: the checkpoint's files again if the event reached the log, the files
//! from before otherwise. The workspace is thus the old state or the new, never a mix.

use outboard_shared::{
    CheckpointInfo, ErrorBody, ErrorCode, EventKind, SessionRewindParams, SessionRewindResponse,
};

use super::{internal, Actor};

impl Actor {
    /// The checkpoint of the prompt about to be logged: the workspace's snapshot (none for a
    /// session on a sandbox host, whose files the server cannot read) and the log position.
    pub(super) async fn checkpoint(&mut self) -> Result<u64, outboard_harness::EmitError> {
        // A user's directory that is gone has nothing to snapshot (the turn will say so); the
        // server's own workspace is made by the first turn, and is empty until then.
        let gone = self.row.workspace.is_some() && !self.workspace_dir.is_dir();
        let tree = if self.row.host.is_some() || gone {
            None
        } else {
            let started = std::time::Instant::now();
            let bound = self.checkpoint_bound().await;
            match self.sources.checkpoint_bounded(&self.row.id, &self.workspace_dir, bound).await {
                Ok((tree, collected)) => {
                    tracing::debug!(
                        session = %self.row.id, ms = started.elapsed().as_millis() as u64,
                        "checkpoint"
                    );
                    if let Some(c) = collected {
                        tracing::info!(
                            session = %self.row.id, kept = c.kept, dropped = c.dropped,
                            before = c.before, after = c.after,
                            "checkpoint storage over its quota: the oldest checkpoints' files \
                             dropped"
                        );
                    }
                    Some(tree)
                }
                Err(e) => {
                    // The prompt still runs; only this checkpoint's files cannot be restored.
                    tracing::warn!(session = %self.row.id, "no snapshot for the checkpoint: {e}");
                    None
                }
            }
        };
        self.emit(EventKind::Checkpoint { tree, at_seq: self.last_seq }, true).await
    }

    /// When the session's checkpoint storage is estimated over the org's `checkpoint_bytes`
    /// quota: the trees of its checkpoints (and of rewinds' snapshots), newest first, not
    /// dropped yet, and the quota, for [`crate::sources::Sources::checkpoint_bounded`]. A
    /// failure is logged: the prompt goes on.
    async fn checkpoint_bound(&mut self) -> Option<(Vec<String>, u64)> {
        let id = self.row.id.clone();
        let limit = match outboard_org::quota::Quotas::for_org(&self.store, &self.row.org_id).await
        {
            Ok(q) => q.checkpoint_bytes,
            Err(e) => {
                tracing::warn!(session = %id, "cannot read the checkpoint quota: {e}");
                return None;
            }
        };
        if !self.sources.over(&id, limit).await {
            return None;
        }
        let marks = match self.store.events_of_kinds(&id, outboard_harness::rewind::KINDS).await {
            Ok(marks) => marks,
            Err(e) => {
                tracing::warn!(session = %id, "cannot bound the checkpoint storage: {e}");
                return None;
            }
        };
        let dropped = self.sources.dropped(&id);
        let mut trees: Vec<String> = Vec::new();
        for event in marks.iter().rev() {
            let named = match &event.kind {
                EventKind::Checkpoint { tree: Some(t), .. } => t,
                EventKind::Rewound { from_tree: Some(t), .. } => t,
                _ => continue,
            };
            if !trees.contains(named) && !dropped.contains(named) {
                trees.push(named.clone());
            }
        }
        Some((trees, limit))
    }

    /// The session's checkpoints, from the few kinds of event they are made of; those whose
    /// files were dropped ([`crate::sources::collect`]) say so.
    pub(super) async fn checkpoints(&mut self) -> Result<Vec<CheckpointInfo>, ErrorBody> {
        let marks = self
            .store
            .events_of_kinds(&self.row.id, outboard_harness::rewind::KINDS)
            .await
            .map_err(internal)?;
        let dropped = self.sources.dropped(&self.row.id);
        Ok(outboard_harness::rewind::checkpoints(&marks)
            .into_iter()
            .map(|c| {
                let mut info = c.info;
                if c.tree.as_ref().is_some_and(|t| dropped.contains(t)) {
                    info.dropped = true;
                    info.code = false;
                }
                info
            })
            .collect())
    }

    /// `session/rewind`: restores the checkpoint's files (see the module header), logs the
    /// `rewound` event, and lets the conversation be rebuilt from the log, which now ends in
    /// that event. Refused while a turn runs.
    pub(super) async fn rewind(
        &mut self,
        params: SessionRewindParams,
        by: String,
    ) -> Result<SessionRewindResponse, ErrorBody> {
        self.may_rewind(&params)?;
        let marks = self
            .store
            .events_of_kinds(&self.row.id, outboard_harness::rewind::KINDS)
            .await
            .map_err(internal)?;
        let all = outboard_harness::rewind::checkpoints(&marks);
        let n = params.checkpoint;
        let Some(checkpoint) = n.checked_sub(1).and_then(|i| all.get(i as usize)) else {
            return Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!(
                    "this session has no checkpoint {n}: it has {} (one per prompt, from 1; \
                     `outboard checkpoints SESSION` lists them)",
                    all.len()
                ),
            ));
        };
        let from_tree = match params.code {
            true => Some(self.restore(n, checkpoint.tree.as_deref()).await?),
            false => None,
        };
        let kind = EventKind::Rewound {
            checkpoint: n,
            to_seq: checkpoint.to_seq,
            code: params.code,
            conversation: params.conversation,
            from_tree,
            by,
        };
        let logged = self.emit(kind, true).await;
        let seq = match logged {
            Ok(seq) => seq,
            Err(e) => {
                if params.code {
                    self.finish_rewind().await;
                }
                return Err(ErrorBody::new(
                    ErrorCode::Internal,
                    format!("cannot record the rewind (nothing changed): {e}"),
                ));
            }
        };
        self.sources.rewind_done(&self.row.id);
        if params.conversation {
            // Rebuilt from the log when next needed, exactly as a restart would.
            self.conversation = None;
        }
        tracing::info!(session = %self.row.id, checkpoint = n, code = params.code,
            conversation = params.conversation, "rewound");
        Ok(SessionRewindResponse { seq, prompt: checkpoint.info.prompt.clone() })
    }

    /// Why a rewind cannot be made now, if it cannot.
    fn may_rewind(&self, params: &SessionRewindParams) -> Result<(), ErrorBody> {
        let refused = |code, message: &str| Err(ErrorBody::new(code, message));
        if let Some(reason) = &self.row.failure {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                format!("this session failed: {reason}"),
            ));
        }
        if self.running.is_some() {
            return refused(
                ErrorCode::Conflict,
                "a turn is running in this session: interrupt it (or wait for its end), then \
                 rewind",
            );
        }
        if self.shutdown.is_cancelled() {
            return refused(
                ErrorCode::ShuttingDown,
                "the server is restarting; rewind in a moment",
            );
        }
        if !params.code && !params.conversation {
            return refused(
                ErrorCode::BadRequest,
                "say what to rewind: the code, the conversation, or both",
            );
        }
        Ok(())
    }

    /// Restores checkpoint `n`'s files (`tree`); returns the workspace's tree from before.
    async fn restore(&mut self, n: u32, tree: Option<&str>) -> Result<String, ErrorBody> {
        let refused = |message: String| Err(ErrorBody::new(ErrorCode::BadRequest, message));
        if let Some(host) = &self.row.host {
            return refused(format!(
                "restoring files is not supported yet for a session on a sandbox host ({host}): \
                 rewind the conversation only"
            ));
        }
        let Some(tree) = tree else {
            return refused(format!(
                "checkpoint {n} has no snapshot of the files (its prompt came before this server \
                 made checkpoints, or the snapshot failed): rewind the conversation only"
            ));
        };
        if self.sources.dropped(&self.row.id).contains(tree) {
            return refused(format!(
                "checkpoint {n}'s files were dropped when this session's checkpoints reached \
                 the org's checkpoint_bytes quota (the newest are kept): rewind the \
                 conversation only, or ask an admin to raise the quota"
            ));
        }
        if self.row.workspace.is_none() {
            // The server's own workspace, not made yet if no turn needed it.
            std::fs::create_dir_all(&self.workspace_dir).map_err(|e| {
                ErrorBody::new(ErrorCode::Internal, format!("cannot create the workspace: {e}"))
            })?;
        } else if !self.workspace_dir.is_dir() {
            return refused(format!(
                "this session's workspace {} is not a directory any more",
                self.workspace_dir.display()
            ));
        }
        // Nothing may write into the workspace while it is restored: the sandbox stops, its
        // background commands with it; the next command starts a fresh one.
        if let Some(sandbox) =
            self.sandbox.clone().or_else(|| self.env.as_ref().map(|e| e.sandbox.clone()))
        {
            sandbox.stop().await;
        }
        let seq = self.last_seq + 1;
        self.sources.restore(&self.row.id, &self.workspace_dir, tree, seq).await.map_err(|e| {
            ErrorBody::new(ErrorCode::Internal, format!("cannot restore the files: {e}"))
        })
    }

    /// Finishes a restore a crash (or a failed append) interrupted, if the session has one:
    /// the checkpoint's files if its `rewound` event is in the log, the files from before
    /// otherwise.
    pub(super) async fn finish_rewind(&mut self) {
        let id = self.row.id.clone();
        let pending = match self.sources.pending_rewind(&id) {
            Ok(Some(pending)) => pending,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(session = %id, "{e}");
                return;
            }
        };
        let after = pending.seq.saturating_sub(1);
        let logged = match self.store.events_after_limited(&id, after, 1).await {
            Ok(events) => events.first().is_some_and(|e| {
                matches!(&e.kind, EventKind::Rewound { from_tree: Some(f), .. } if *f == pending.from)
            }),
            Err(e) => {
                tracing::error!(session = %id, "cannot finish an interrupted rewind: {e}");
                return;
            }
        };
        match self.sources.finish_rewind(&id, &self.workspace_dir, &pending, logged).await {
            Ok(()) => tracing::info!(session = %id, logged, "finished an interrupted rewind"),
            Err(e) => tracing::error!(session = %id, "cannot finish an interrupted rewind: {e}"),
        }
    }
}
