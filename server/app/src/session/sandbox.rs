//! The session's sandbox: its network policy and the sandbox made for a turn, with the
//! forwarders of its state changes and background jobs.

use std::sync::Arc;

use outboard_sandbox::{jobs::JobReport, Sandbox, SandboxTransition};
use outboard_shared::EventKind;
use tokio::sync::mpsc;

use super::command::{emitter, ActorRefusals};
use super::publish::Scrubbers;
use super::{Actor, SANDBOX_JOB_REPORTS, SANDBOX_TRANSITIONS};

impl Actor {
    /// Makes the session's network (its policy, the org's injected credentials, the audit
    /// sink) and reads the org's secret values to scrub, once, before the first turn: the
    /// sandbox handle is made synchronously and takes the network from here. Only bubblewrap
    /// sandboxes have a proxy: the unsafe host mode's commands have the host's network anyway.
    pub(super) async fn prepare_network(&mut self) {
        if self.scrub.is_some() {
            return;
        }
        let values = if self.sandbox_config.backend == outboard_sandbox::Backend::Bwrap {
            let events = Arc::new(ActorRefusals(self.tx.clone()));
            let parts = crate::netsession::build(&self.network_deps, &self.row, events).await;
            let values = parts.scrub.clone();
            self.network = Some(parts);
            values
        } else {
            crate::netsession::scrub_values(&self.network_deps, &self.row.org_id).await
        };
        self.scrub = Some(Scrubbers::new(values));
    }

    /// The session's sandbox handle. Its state changes (including a freeze between turns) become
    /// durable `sandbox` events: a forwarder task turns each transition into an event through
    /// the actor, holding only a weak sender so it never keeps the actor alive.
    pub(super) fn new_sandbox(&mut self) -> Sandbox {
        let (tx, mut rx) = mpsc::channel::<SandboxTransition>(SANDBOX_TRANSITIONS);
        let (jobs_tx, mut jobs_rx) = mpsc::channel::<JobReport>(SANDBOX_JOB_REPORTS);
        let actor = self.tx.clone();
        tokio::spawn(async move {
            while let Some(job) = jobs_rx.recv().await {
                let Some(tx) = actor.upgrade() else { return };
                let kind = EventKind::BackgroundTask {
                    shell_id: job.shell_id,
                    command: job.command,
                    status: job.state.status(),
                    exit_code: job.state.exit_code(),
                };
                if emitter(tx).durable(kind).await.is_err() {
                    return;
                }
            }
        });
        let actor = self.tx.clone();
        tokio::spawn(async move {
            while let Some(t) = rx.recv().await {
                let Some(tx) = actor.upgrade() else { return };
                let kind = EventKind::Sandbox { state: t.state, ms: t.ms, queue: t.queue };
                let emitter = emitter(tx);
                if emitter.durable(kind).await.is_err() {
                    return;
                }
            }
        });
        let mut config = self.sandbox_config.clone();
        config.network = self.network.as_ref().map(|n| n.net.clone());
        // The org's files, read-only at /memory, /skills and /agents (kept current before each
        // command).
        match self.org_fs.projection_dirs(&self.row.org_id) {
            Ok(dirs) => {
                for (dir, prefix) in dirs.mounts() {
                    config.ro_mounts.push((dir.to_path_buf(), prefix.to_owned()));
                }
            }
            Err(e) => tracing::warn!(session = %self.row.id, "no org files in the sandbox: {e}"),
        }
        // The user's own repository, in place: its `.git` read-only inside.
        config.protect_git = self.row.workspace.is_some();
        if let Some(live) = &config.live_pool {
            let (store, org) = (self.store.clone(), self.row.org_id.clone());
            let limit: outboard_sandbox::pool::LimitFn = std::sync::Arc::new(move || {
                let (store, org) = (store.clone(), org.clone());
                Box::pin(async move {
                    match outboard_org::quota::Quotas::for_org(&store, &org).await {
                        Ok(q) => usize::try_from(q.live_sandboxes).unwrap_or(usize::MAX),
                        Err(e) => {
                            tracing::warn!(%org, "cannot read the live_sandboxes quota: {e}");
                            outboard_org::quota::Quotas::default().live_sandboxes as usize
                        }
                    }
                })
            });
            config.pool = Some(live.ticket(self.row.org_id.as_str(), limit));
        }
        // A workspace the server made is held to the org's quota while commands run; a
        // directory of the user's own, worked on in place, is not metered.
        if self.row.workspace.is_none() {
            let watch = std::sync::Arc::new(outboard_org::quota::WorkspaceWatch::new(
                self.store.clone(),
                self.row.org_id.clone(),
                self.workspace_dir.clone(),
            ));
            let check: outboard_sandbox::WorkspaceCheck = std::sync::Arc::new(move |start| {
                let watch = watch.clone();
                Box::pin(async move { watch.check(start).await })
            });
            config.workspace_watch = Some(outboard_sandbox::WorkspaceWatch(check));
        }
        let lost = std::mem::take(&mut self.lost_jobs);
        let sandbox = Sandbox::with_reports(config, self.workspace_dir.clone(), tx, jobs_tx, lost);
        self.sandbox = Some(sandbox.clone());
        sandbox
    }
}
