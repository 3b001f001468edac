//! The workspace limit, enforced while commands run.
//!
//! A command's writes never pass through the server, so the only way to hold a workspace to its
//! size is to look at it while the sandbox runs. When a sandbox is `running` (a foreground
//! command, a background job, or a process left behind by one), a watch task asks the session's
//! [`WorkspaceCheck`] once per [`WATCH_INTERVAL`]. When the check says the workspace went over
//! its limit, the watch stops what writes: it cancels the foreground command (whose result then
//! carries the check's sentence as its failure) and stops the sandbox, which kills every
//! process in it — background jobs included, reported `killed`. The workspace stays; the next
//! command starts a fresh sandbox, and a command that frees space (`rm`) runs as usual.
//!
//! The overshoot is what the sandbox writes in one interval plus one check (stated in
//! `docs/SECURITY.md`). A frozen or stopped sandbox writes nothing and is not watched, so idle
//! sessions cost nothing. What counts as "over" and how cheaply it is decided (without walking
//! the tree every second) is the check's business: the sandbox does not know quotas.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use outboard_shared::SandboxState;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::request::Request;

/// How often a running sandbox's workspace is checked.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// The session's workspace limit: `Some(sentence for the model)` when the workspace grew past
/// it since the last check, `None` otherwise. Called once per [`WATCH_INTERVAL`] while the
/// sandbox runs, and once with `start` set when it starts running (to take a baseline: a
/// workspace already over its limit, which a command may be about to shrink, is not a reason to
/// stop it).
pub type WorkspaceCheck = Arc<dyn Fn(bool) -> BoxFuture<'static, Option<String>> + Send + Sync>;

/// A session's [`WorkspaceCheck`] in its sandbox configuration (compared by identity).
#[derive(Clone)]
pub struct WorkspaceWatch(pub WorkspaceCheck);

impl std::fmt::Debug for WorkspaceWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WorkspaceWatch")
    }
}

impl PartialEq for WorkspaceWatch {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for WorkspaceWatch {}

/// What a sandbox's handles share with its watch: the token that fires when the watch stops the
/// sandbox's commands, and why.
#[derive(Debug, Default)]
pub struct Tripwire {
    inner: Mutex<Trip>,
}

#[derive(Debug, Default)]
struct Trip {
    /// Fires when the watch stops the commands; replaced by a fresh one after each trip.
    token: CancellationToken,
    /// The sentence of the last trip.
    reason: Option<String>,
}

impl Tripwire {
    /// The token a command started now is cancelled with.
    pub fn token(&self) -> CancellationToken {
        self.lock().token.clone()
    }

    /// Why the last trip happened.
    pub fn reason(&self) -> Option<String> {
        self.lock().reason.clone()
    }

    /// Fires the current token with `reason` and arms a fresh one for later commands.
    fn trip(&self, reason: String) {
        let mut trip = self.lock();
        trip.token.cancel();
        trip.token = CancellationToken::new();
        trip.reason = Some(reason);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Trip> {
        // A panic while holding this lock leaves a token and a string: both still valid.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Watches while the manager's state is `running`; ends with the manager (its state channel
/// closes).
pub(crate) async fn run(
    check: WorkspaceCheck,
    mut state: watch::Receiver<SandboxState>,
    manager: mpsc::WeakSender<Request>,
    tripwire: Arc<Tripwire>,
) {
    loop {
        if state.wait_for(|s| *s == SandboxState::Running).await.is_err() {
            return;
        }
        check(true).await;
        loop {
            tokio::select! {
                changed = state.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if *state.borrow_and_update() != SandboxState::Running {
                        break;
                    }
                }
                () = tokio::time::sleep(WATCH_INTERVAL) => {
                    let Some(reason) = check(false).await else { continue };
                    tracing::warn!("{reason}: stopping the sandbox's commands");
                    tripwire.trip(reason.clone());
                    let Some(manager) = manager.upgrade() else { return };
                    // Queued behind the foreground command, which the trip has just cancelled.
                    let (reply, done) = oneshot::channel();
                    if manager.send(Request::StopFor(reason, reply)).await.is_err() {
                        return;
                    }
                    drop(manager);
                    let _ = done.await;
                    break;
                }
            }
        }
    }
}
