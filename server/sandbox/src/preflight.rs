//! The outcome of the server's sandbox check, which every sandbox of the server waits for
//! before its first start (issue #37): the check runs beside the server's start, off the path
//! to the first model request, and a command that needs the sandbox learns what is wrong with
//! the host. The `precheck` module above starts the check and remembers a pass.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::SandboxError;

/// Checks the host again after a sandbox failed to start although the check had passed:
/// `Err` with the explanation when it now fails.
pub type Recheck = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// The check's outcome, shared by every sandbox of a server (cheap to clone).
#[derive(Clone)]
pub struct Preflight {
    /// `None` while the check runs; then what is wrong with the host, or nothing.
    outcome: watch::Receiver<Option<Result<(), String>>>,
    /// Set when the pass was remembered from an earlier start rather than seen now.
    recheck: Option<Recheck>,
}

impl std::fmt::Debug for Preflight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preflight").field("outcome", &*self.outcome.borrow()).finish()
    }
}

impl PartialEq for Preflight {
    fn eq(&self, other: &Self) -> bool {
        self.outcome.same_channel(&other.outcome)
    }
}

impl Eq for Preflight {}

/// Where the check reports its outcome to a [`Preflight`].
#[derive(Debug)]
pub struct Outcome(watch::Sender<Option<Result<(), String>>>);

impl Outcome {
    /// The check's result: `Err` says what to install or configure.
    pub fn report(self, result: Result<(), String>) {
        self.0.send_replace(Some(result));
    }
}

impl Preflight {
    /// A check still running: its result goes to the returned [`Outcome`].
    pub fn pending() -> (Outcome, Preflight) {
        let (tx, outcome) = watch::channel(None);
        (Outcome(tx), Preflight { outcome, recheck: None })
    }

    /// A pass remembered from an earlier start; `recheck` runs when a sandbox fails anyway.
    pub fn remembered(recheck: Recheck) -> Preflight {
        let (_, outcome) = watch::channel(Some(Ok(())));
        Preflight { outcome, recheck: Some(recheck) }
    }

    /// Waits for the check: `Err(Unavailable)` saying what to fix when it failed.
    pub async fn wait(&self) -> Result<(), SandboxError> {
        let mut outcome = self.outcome.clone();
        let result = match outcome.wait_for(Option::is_some).await {
            Ok(seen) => seen.clone().unwrap_or(Ok(())),
            // The check's task ended without a word (the runtime is shutting down).
            Err(_) => Err("the sandbox check did not finish".to_owned()),
        };
        result.map_err(SandboxError::Unavailable)
    }

    /// A sandbox failed to start with `error`: when the check's pass was only remembered, the
    /// host may have changed since, so check again and return its explanation if it now
    /// fails; else `error` as it was.
    pub async fn explain(&self, error: SandboxError) -> SandboxError {
        match (&self.recheck, &error) {
            (Some(recheck), SandboxError::Start(_)) => match recheck().await {
                Err(explanation) => SandboxError::Unavailable(explanation),
                Ok(()) => error,
            },
            _ => error,
        }
    }
}
