//! Where a sandbox's state transitions are counted, without the sandbox knowing who counts: the
//! server's metrics implement [`TransitionObserver`].

use std::sync::Arc;
use std::time::Duration;

use outboard_shared::SandboxState;

/// Told of each transition of a sandbox's state machine and how long it took to get there.
pub trait TransitionObserver: Send + Sync {
    /// `from` → `to`, `took` to get there (`running` after `provisioning` is a cold start,
    /// after `suspended` a resume).
    fn transition(&self, from: SandboxState, to: SandboxState, took: Duration);
}

/// An observer as it rides in [`crate::SandboxConfig`].
#[derive(Clone)]
pub struct Observer(pub Arc<dyn TransitionObserver>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// Where a sandbox's transitions are counted does not change what the sandbox is: two
/// configurations that differ only here are the same configuration.
impl PartialEq for Observer {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Observer {}

impl Observer {
    /// One transition (see [`TransitionObserver::transition`]).
    pub fn transition(&self, from: SandboxState, to: SandboxState, took: Duration) {
        self.0.transition(from, to, took);
    }
}
