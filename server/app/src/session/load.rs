//! Loading a session's state from its log without holding the whole log in memory.
//!
//! A session's log grows without end (a 1,000,000-event log is ordinary for a long-lived
//! session), but what a turn needs of it is small: the conversation from the last compaction
//! on (what came before is its summary, see [`agent::replay_start`]), the approvals and mode
//! (a few kinds of event, read through the `(session_id, kind, seq)` index), the open turn's
//! events to resume it, and the files the model touched (a scan in windows of the log that
//! keeps only the paths). Each gives the same state as a replay of the whole log: the
//! conversation's equality is tested in the harness, the others read every event of the kinds
//! they use.

use outboard_harness::{self as agent};
use outboard_shared::{ErrorBody, ErrorCode, EventKind, SessionEvent, SessionStatus};
use outboard_store::StoreError;

use super::{internal, Actor};

/// The kinds the approvals gate is restored from (see `Gate::restore`).
const GATE_KINDS: &[&str] =
    &["mode_changed", "system_reminder", "approval_requested", "approval_resolved"];

/// The kinds a start needs to know who spoke last, whether a turn is open and what ran.
pub(super) const START_KINDS: &[&str] =
    &["turn_started", "turn_completed", "turn_failed", "background_task"];

/// The kinds [`agent::FilesTouched`] reads.
const TOUCH_KINDS: &[&str] = &["assistant_message", "tool_result"];

/// How many seqs of the log one read of the files scan covers.
pub(super) const SCAN_WINDOW: u64 = 1024;

/// What a load read of the log.
pub(super) struct Loaded {
    /// The conversation, from the last compaction on.
    pub conversation: agent::Conversation,
    /// The events the gate is restored from.
    pub gate: Vec<SessionEvent>,
    /// The events of the open turn, from its `turn_started` on (empty when no turn is open).
    pub open_turn: Vec<SessionEvent>,
    /// The last seq read.
    pub last_seq: Option<u64>,
    /// What the session's prompts quoted of the org.
    pub org_shown: std::collections::BTreeMap<String, u64>,
}

impl Actor {
    /// Reads the conversation and the gate's events, and, when `open_from` names the seq of an
    /// open turn's `turn_started`, that turn's events: one range read from the earlier of that
    /// seq and the conversation's start.
    pub(super) async fn read_loaded(&self, open_from: Option<u64>) -> Result<Loaded, StoreError> {
        let marks = self.store.events_of_kinds(&self.row.id, agent::REPLAY_KINDS).await?;
        let start = agent::replay_start(&marks);
        drop(marks);
        let from = open_from.map_or(start, |t| t.min(start));
        let log = self.store.events_after(&self.row.id, from.saturating_sub(1)).await?;
        let at = log.partition_point(|e| e.seq < start);
        let conversation = agent::Conversation::from_log(&log[at..], self.result_chars());
        let open_turn = match open_from {
            Some(t) => log[log.partition_point(|e| e.seq < t)..].to_vec(),
            None => Vec::new(),
        };
        let last_seq = log.last().map(|e| e.seq);
        drop(log);
        let gate = self.store.events_of_kinds(&self.row.id, GATE_KINDS).await?;
        let shown = self.store.events_of_kinds(&self.row.id, &["org_context"]).await?;
        let org_shown = agent::org_shown(&shown);
        Ok(Loaded { conversation, gate, open_turn, last_seq, org_shown })
    }

    /// The files the session's main loop touched ([`agent::files_touched`] of the whole log),
    /// read a window of [`SCAN_WINDOW`] seqs at a time.
    pub(super) async fn files_touched_scan(&self, upto: u64) -> Result<Vec<String>, StoreError> {
        let mut touched = agent::FilesTouched::default();
        let mut after = 0;
        while after < upto {
            let end = after.saturating_add(SCAN_WINDOW).min(upto);
            let page =
                self.store.events_of_kinds_between(&self.row.id, TOUCH_KINDS, after, end).await?;
            for event in page.iter().filter(|e| e.parent.is_none()) {
                touched.add(event);
            }
            after = end;
        }
        Ok(touched.into_files())
    }
}

/// The seq of the open top-level turn's `turn_started` in `marks` (events of [`START_KINDS`]),
/// if the last top-level turn has not ended.
pub(super) fn open_turn_start(marks: &[SessionEvent]) -> Option<u64> {
    let mut open = None;
    for event in marks.iter().filter(|e| e.parent.is_none()) {
        match &event.kind {
            EventKind::TurnStarted { .. } => open = Some(event.seq),
            EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => open = None,
            _ => {}
        }
    }
    open
}

impl Actor {
    /// Rebuilds the session's state from the log, and resumes a turn the log shows unfinished
    /// (the server stopped or crashed mid-turn): see [`agent::recover_plan`] for what is re-run.
    /// A log that cannot be read marks the session failed, with the reason, instead of leaving
    /// it stuck.
    pub(super) async fn load(&mut self) -> Result<(), StoreError> {
        self.finish_rewind().await;
        match self.load_from_log().await {
            Err(e @ StoreError::Corrupt(_)) => self.fail_unreadable(&e).await,
            other => other,
        }
    }

    async fn load_from_log(&mut self) -> Result<(), StoreError> {
        // Only a session whose last turn is open needs its conversation now, to resume the
        // turn; any other needs the few events that say who spoke last and what was running.
        let resuming = self.row.status == SessionStatus::Running;
        let marks = self.store.events_of_kinds(&self.row.id, START_KINDS).await?;
        let mut open_turn = Vec::new();
        if resuming {
            let loaded = self.read_loaded(open_turn_start(&marks)).await?;
            self.last_seq = loaded.last_seq.unwrap_or(self.row.last_seq);
            self.conversation = Some(loaded.conversation);
            self.files_touched = self.files_touched_scan(self.last_seq).await?;
            self.gate.restore(&loaded.gate);
            self.org_shown = loaded.org_shown;
            open_turn = loaded.open_turn;
        }
        self.lost_jobs = outboard_tools::background::running_in_log(&marks);
        for (shell_id, command) in self.lost_jobs.clone() {
            let lost = EventKind::BackgroundTask {
                shell_id,
                command,
                status: outboard_shared::TaskStatus::Lost,
                exit_code: None,
            };
            if let Err(e) = self.emit(lost, true).await {
                tracing::error!(session = %self.row.id, "cannot record a lost background command: {e}");
            }
        }
        if let Some(by) = marks.iter().rev().find_map(|e| match &e.kind {
            EventKind::TurnStarted { by, .. } => Some(by.clone()),
            _ => None,
        }) {
            self.turn_by = by;
        }
        if self.row.status == SessionStatus::Failed {
            return Ok(());
        }
        if let Some((turn_id, resume)) = agent::recover_plan(&open_turn).filter(|_| resuming) {
            tracing::info!(
                session = %self.row.id, turn = %turn_id, pending = resume.pending.len(),
                "resuming a turn cut short by a restart"
            );
            self.prepare_network().await;
            if let Err(e) = self.spawn_turn(turn_id, resume) {
                tracing::error!(session = %self.row.id, "cannot resume: {}", e.message);
            }
        }
        Ok(())
    }

    /// Builds the conversation (and the files to rebuild the read ledger from) from the log,
    /// unless it is in memory already.
    pub(super) async fn conversation_loaded(&mut self) -> Result<(), ErrorBody> {
        if self.conversation.is_some() {
            return Ok(());
        }
        let read = async {
            let loaded = self.read_loaded(None).await?;
            let touched = match self.env.is_none() {
                true => Some(self.files_touched_scan(self.last_seq.max(self.row.last_seq)).await?),
                false => None,
            };
            Ok::<_, StoreError>((loaded, touched))
        };
        let (loaded, touched) = match read.await {
            Ok(read) => read,
            Err(e @ StoreError::Corrupt(_)) => {
                self.fail_unreadable(&e).await.map_err(internal)?;
                return Err(ErrorBody::new(
                    ErrorCode::Conflict,
                    format!(
                        "this session failed: {}",
                        self.row.failure.clone().unwrap_or_default()
                    ),
                ));
            }
            Err(e) => return Err(internal(e)),
        };
        self.conversation = Some(loaded.conversation);
        self.gate.restore(&loaded.gate);
        if let Some(touched) = touched {
            self.files_touched = touched;
            self.org_shown = loaded.org_shown;
        }
        Ok(())
    }
}
