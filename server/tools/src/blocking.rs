//! Blocking work (a directory walk, a large grep) off the async threads, stopped when the call is
//! cancelled.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::outcome::ToolOutcome;

/// Sets its flag when dropped: the blocking work learns that nobody waits for it any more.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs bounded blocking file work on the blocking pool. The work gets a flag that is set when
/// the turn is interrupted or this future is dropped (walks check it between entries); an
/// interrupt answers at once with "Interrupted by the user", as `Bash` does, even if the
/// blocking thread is still finishing its current step.
pub async fn offload<T: Send + 'static>(
    cancel: &CancellationToken,
    work: impl FnOnce(&AtomicBool) -> T + Send + 'static,
) -> Result<T, ToolOutcome> {
    let flag = Arc::new(AtomicBool::new(false));
    let _guard = CancelOnDrop(flag.clone());
    let handle = tokio::task::spawn_blocking(move || work(&flag));
    tokio::select! {
        joined = handle => joined
            .map_err(|e| ToolOutcome::error(format!("The tool failed unexpectedly: {e}"))),
        _ = cancel.cancelled() => Err(ToolOutcome::error("Interrupted by the user")),
    }
}
