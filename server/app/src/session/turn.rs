//! A turn's life in the actor: started from a prompt, the conversation lent to the harness's
//! task, titles, and the end (completed, failed, interrupted) with what the session keeps.

use std::sync::Arc;

use outboard_base::util::new_id;
use outboard_harness as agent;
use outboard_harness::{ToolEnv, Turn, TurnEnd};
use outboard_org::orgfs::Author;
use outboard_shared::{ErrorBody, ErrorCode, EventKind, SessionStatus, TurnId, TurnSendResponse};
use outboard_tools::{ExternalTools, OrgCtx, ReadLedger};
use outboard_vfs::Workspace;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::command::{emitter, Command};
use super::prompt::Prompt;
use super::{gone, window, Actor, Running};

impl Actor {
    pub(super) async fn start_turn(
        &mut self,
        prompt: Prompt,
        by: String,
    ) -> Result<TurnSendResponse, ErrorBody> {
        if let Some(reason) = &self.row.failure {
            return Err(ErrorBody::new(
                ErrorCode::Conflict,
                format!("this session failed: {reason}"),
            ));
        }
        if self.shutdown.is_cancelled() {
            return Err(ErrorBody::new(
                ErrorCode::ShuttingDown,
                "the server is restarting; send the message again in a moment",
            ));
        }
        if let Some(r) = &self.running {
            let what = if r.compaction.is_some() {
                "the conversation is being compacted: send the message again when it is done"
            } else {
                "a turn is already running in this session: wait for it to end or interrupt it"
            };
            return Err(ErrorBody::new(ErrorCode::Conflict, what));
        }
        if prompt.text.trim().is_empty() && prompt.attachments.is_empty() {
            return Err(ErrorBody::new(ErrorCode::BadRequest, "the message is empty"));
        }
        self.check_images(&prompt)?;
        let Prompt { text, attachments } = prompt;
        self.conversation_loaded().await?;
        let turn_id = TurnId(new_id("t"));
        self.turn_by = by.clone();
        // Before the first event of the turn: its events are scrubbed with the org's secrets.
        self.prepare_network().await;
        let title =
            if self.row.title.is_empty() { Some(self.derived_title(&text).await) } else { None };
        let titled = title.is_some();
        self.checkpoint().await.map_err(|e| {
            ErrorBody::new(ErrorCode::Internal, format!("cannot record the checkpoint: {e}"))
        })?;
        let started = async {
            self.emit(EventKind::TurnStarted { turn_id: turn_id.clone(), by }, true).await?;
            let message =
                EventKind::UserMessage { text: text.clone(), attachments: attachments.clone() };
            self.emit_titled(message, true, title).await
        };
        let seq = started.await.map_err(|e| {
            ErrorBody::new(ErrorCode::Internal, format!("cannot record the message: {e}"))
        })?;
        if titled {
            self.announce_title().await;
        }
        if let Some(conversation) = &mut self.conversation {
            conversation.push_prompt(seq, text, attachments);
        }
        self.spawn_turn(turn_id.clone(), agent::Resume::default())?;
        Ok(TurnSendResponse { turn_id, seq })
    }

    /// Tells the attached clients the title the first message's commit gave the session (the
    /// store's, which kept a title set meanwhile): they show it without asking for the list.
    pub(super) async fn announce_title(&mut self) {
        if self.row.title.is_empty() {
            return;
        }
        let kind = EventKind::SessionTitled { title: self.row.title.clone() };
        if let Err(e) = self.emit(kind, false).await {
            tracing::debug!(session = %self.row.id, "cannot announce the title: {e}");
        }
    }

    /// The title a session created without one gets from its first message, within the org's
    /// `title_bytes` quota.
    pub(super) async fn derived_title(&self, message: &str) -> String {
        let max = match outboard_org::quota::Quotas::for_org(&self.store, &self.row.org_id).await {
            Ok(q) => q.title_bytes,
            Err(e) => {
                tracing::warn!(session = %self.row.id, "cannot read the title_bytes quota: {e}");
                outboard_org::quota::Quotas::default().title_bytes
            }
        };
        outboard_store::derived_title(message, usize::try_from(max).unwrap_or(usize::MAX))
    }

    /// How many characters of a tool result the model sees in this session.
    pub(super) fn result_chars(&self) -> usize {
        self.window.result_chars(self.limits.result_chars)
    }

    /// Hands the conversation and tools to a new turn task (a new turn, or one being resumed).
    pub(super) fn spawn_turn(
        &mut self,
        turn_id: TurnId,
        resume: agent::Resume,
    ) -> Result<(), ErrorBody> {
        let (turn, tx, cancel) = self.lend(turn_id.clone(), resume)?;
        let task = tokio::spawn(agent::run_turn(turn));
        // A panic in the turn must not wedge the session: the watcher reports the end either way.
        tokio::spawn(async move {
            let end = task.await.ok().map(Box::new);
            let _ = tx.send(Command::TurnEnded(end)).await;
        });
        self.running = Some(Running { turn_id, cancel, compaction: None });
        Ok(())
    }

    /// The conversation, the tool environment (made on first use) and what else a task needs
    /// to work on the session, lent to a turn or a compaction until it hands them back.
    pub(super) fn lend(
        &mut self,
        turn_id: TurnId,
        resume: agent::Resume,
    ) -> Result<(Turn, mpsc::Sender<Command>, CancellationToken), ErrorBody> {
        let Some(tx) = self.tx.upgrade() else {
            return Err(gone());
        };
        let mut env = match self.env.take() {
            Some(env) => env,
            None => {
                if self.row.workspace.is_some() && !self.workspace_dir.is_dir() {
                    // Never recreate a user's directory that is gone (the server may be root).
                    return Err(ErrorBody::new(
                        ErrorCode::BadRequest,
                        format!(
                            "this session's workspace {} is not a directory any more: restore \
                             it, or start a new session",
                            self.workspace_dir.display()
                        ),
                    ));
                }
                let remote = match (&self.row.host, &self.hosts) {
                    (None, _) => None,
                    (Some(host), Some(hosts)) => {
                        let hosted = outboard_remote::workspace::RemoteWorkspace::new(
                            hosts.clone(),
                            host.clone(),
                            self.row.id.as_str().to_owned(),
                        );
                        Some(Arc::new(hosted) as Arc<dyn outboard_tools::HostedWorkspace>)
                    }
                    (Some(host), None) => {
                        return Err(ErrorBody::new(
                            ErrorCode::Internal,
                            format!(
                                "this session lives on sandbox host {host}, and this server has \
                                 no secret key to join hosts with; start it with its data \
                                 directory's secret.key"
                            ),
                        ))
                    }
                };
                let mut workspace = Workspace::new(self.workspace_dir.clone()).map_err(|e| {
                    ErrorBody::new(ErrorCode::Internal, format!("cannot create the workspace: {e}"))
                })?;
                if self.row.workspace.is_some() {
                    workspace = workspace.unmetered();
                }
                let touched = std::mem::take(&mut self.files_touched);
                let (org_touched, workspace_touched) = touched.into_iter().partition(|f| {
                    matches!(outboard_vfs::route(f), Ok(outboard_vfs::Route::Org(_)))
                });
                let org = OrgCtx {
                    fs: self.org_fs.clone(),
                    org_id: self.row.org_id.clone(),
                    author: Author { user: String::new(), session: Some(self.row.id.clone()) },
                    mcp: self.mcp.clone().map(|m| Arc::new(m) as Arc<dyn ExternalTools>),
                    secrets: self.network_deps.secrets.clone(),
                };
                ToolEnv {
                    workspace,
                    sandbox: self.new_sandbox(),
                    reads: ReadLedger::default(),
                    org: Some(org),
                    org_touched,
                    org_shown: std::mem::take(&mut self.org_shown),
                    workspace_touched,
                    scrub: self.scrub.as_ref().map_or_else(
                        || Arc::new(outboard_base::scrub::Scrubber::new(Vec::new())),
                        |s| s.text.clone(),
                    ),
                    metrics: Some(self.metrics.clone() as Arc<dyn outboard_harness::ToolMetrics>),
                    remote,
                }
            }
        };
        if let Some(org) = &mut env.org {
            org.author.user = self.turn_by.clone();
        }
        self.row.status = SessionStatus::Running;
        let cancel = CancellationToken::new();
        let turn = Turn {
            session_id: self.row.id.clone(),
            turn_id,
            provider: self.turn_provider(),
            conversation: self
                .conversation
                .take()
                .unwrap_or_else(|| agent::Conversation::new(self.result_chars())),
            window: self.window,
            env,
            emitter: emitter(tx.clone()),
            cancel: cancel.clone(),
            shutdown: self.shutdown.clone(),
            limits: self.limits.turn(),
            resume,
            role: agent::Role::Main,
            approvals: outboard_harness::approvals::Approvals {
                rules: Arc::default(),
                gate: self.gate.clone(),
                source: Some((self.store.clone(), self.row.org_id.clone())),
            },
            offered: Vec::new(),
            hooks: Default::default(),
        };
        Ok((turn, tx, cancel))
    }

    pub(super) async fn turn_ended(&mut self, end: Option<Box<TurnEnd>>) {
        let running = self.running.take();
        match end {
            Some(end) => {
                let end = *end;
                self.conversation = Some(end.conversation);
                self.env = Some(end.env);
                self.window = end.window;
                // Committed here, in the command that makes the session idle: a client that
                // answers `turn_completed` at once finds no turn running.
                if let Some(last) = end.last {
                    let committed = self.emit(last.clone(), true).await;
                    let r = agent::interrupted::noted(self.conversation.as_mut(), committed, &last);
                    if let Err(e) = r {
                        tracing::error!(session = %self.row.id, "cannot record the end of the turn: {e}");
                    }
                }
            }
            None => {
                // The turn task panicked: its conversation and tools are lost with it. Record the
                // failure and rebuild from the log, which is the source of truth.
                tracing::error!(session = %self.row.id, "the turn task panicked");
                if let Some(r) = running.filter(|r| r.compaction.is_none()) {
                    let _ = self.emit(window::panicked(r.turn_id), true).await;
                }
                match self.read_loaded(None).await {
                    Ok(loaded) => self.conversation = Some(loaded.conversation),
                    Err(e) => tracing::error!(session = %self.row.id, "cannot reload: {e}"),
                }
            }
        }
        self.row.status = SessionStatus::Idle;
        for waiter in self.idle_waiters.drain(..) {
            let _ = waiter.send(());
        }
    }
}
