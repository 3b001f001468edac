//! Helpers for tests that run real sandboxes, this crate's and the crates' above: the init's
//! executable built fresh, whether a host process is still alive. Compiled always (like the
//! store's `pgtest`), so tests of other crates reach them without a feature that would change
//! every crate's build under `cargo test`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use outboard_sandbox_init::error::SandboxError;

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

/// `outboard-server`, built once per test binary (which cannot be the in-sandbox init itself:
/// libtest owns its `main`): what a test's [`crate::SandboxConfig::agent_exe`] names.
pub fn agent_exe_for_tests() -> Result<PathBuf, SandboxError> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = std::process::Command::new(cargo)
                .args(["build", "--quiet", "-p", "outboard-server", "--bin", "outboard-server"])
                .status()
                .map_err(|e| format!("cannot run cargo build: {e}"))?;
            if !status.success() {
                return Err("cargo build of outboard-server failed".into());
            }
            // target/debug/deps/<test> → target/debug
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let dir = exe.parent().and_then(Path::parent).ok_or("no target dir")?;
            Ok(dir.join("outboard-server"))
        })
        .clone()
        .map_err(SandboxError::Start)
}
