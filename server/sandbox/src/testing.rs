//! Helpers for tests that run real sandboxes (this crate's and the crates above it), with the
//! `test-support` feature: whether a host process is still alive.

use std::time::{Duration, Instant};

/// Whether a host process has `marker` in its command line.
pub fn host_process_with(marker: &str) -> bool {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(marker))
            .unwrap_or(false)
    })
}

/// Waits (at most 5 s) until no host process has `marker` in its command line.
pub async fn wait_until_gone(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while host_process_with(marker) {
        assert!(Instant::now() < deadline, "processes with {marker} still alive after 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
