//! Helpers for tests that run real sandboxes, this crate's and the crates' above: the init's
//! executable built fresh, whether a host process is still alive. Compiled always (like the
//! store's `pgtest`), so tests of other crates reach them without a feature that would change
//! every crate's build under `cargo test`.

use std::path::PathBuf;
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

/// The workspace's binaries (`outboard-server`, `outboard`) built once per test process — a
/// no-op when they are fresh — and the directory holding them (`target/debug`). Every test
/// binary and the end-to-end suites build exactly this set, so none undoes another's build: a
/// narrower set (`-p outboard-server` alone) unifies other features and relinks the same file.
pub fn workspace_bin_dir() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut build = std::process::Command::new(cargo);
            build.args([
                "build",
                "--quiet",
                "-p",
                "outboard-server",
                "-p",
                "outboard-cli",
                "--bins",
            ]);
            // What cargo set for this test (its package's CARGO_MANIFEST_DIR, CARGO_PKG_*...) is
            // not the build's: build scripts that track such a variable (ring tracks
            // CARGO_MANIFEST_DIR) would see it change from one test binary to the next and
            // rebuild half the tree each time (a minute per test binary in CI).
            for (name, _) in std::env::vars_os() {
                let name = name.to_string_lossy();
                let per_package = ["CARGO_MANIFEST_", "CARGO_PKG_", "CARGO_CRATE_", "CARGO_BIN_"]
                    .iter()
                    .any(|p| name.starts_with(p));
                if per_package
                    || ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "OUT_DIR"]
                        .contains(&name.as_ref())
                {
                    build.env_remove(name.as_ref());
                }
            }
            let status = build.status().map_err(|e| format!("cannot run cargo build: {e}"))?;
            if !status.success() {
                return Err("cargo build of the binaries failed".into());
            }
            // A test runs from target/debug/deps/<test>, a binary (crash, bench) from
            // target/debug/<bin>: both want target/debug.
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let mut dir = exe.parent().ok_or_else(|| "cannot locate the target dir".to_owned())?;
            if dir.file_name().is_some_and(|n| n == "deps") {
                dir = dir.parent().ok_or_else(|| "cannot locate the target dir".to_owned())?;
            }
            Ok(dir.to_path_buf())
        })
        .clone()
}

/// `outboard-server` from [`workspace_bin_dir`] (a test binary cannot be the in-sandbox init
/// itself: libtest owns its `main`): what a test's [`crate::SandboxConfig::agent_exe`] names.
pub fn agent_exe_for_tests() -> Result<PathBuf, SandboxError> {
    workspace_bin_dir().map(|dir| dir.join("outboard-server")).map_err(SandboxError::Start)
}
