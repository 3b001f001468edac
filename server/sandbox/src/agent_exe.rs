//! Which executable the sandbox runs as its PID 1: the in-sandbox init ships inside our own
//! binaries (`outboard-server`, `outboard`), behind a hidden first argument.

#[cfg(any(test, feature = "test-support"))]
use std::path::Path;
use std::path::PathBuf;
#[cfg(any(test, feature = "test-support"))]
use std::sync::OnceLock;

use outboard_sandbox_init::error::SandboxError;

use crate::config::SandboxConfig;

/// The agent executable: the configured one, else this process's own when it is one of our
/// binaries, else an `outboard-server` next to it (or one directory up: `target/debug/deps`).
pub fn resolve_agent_exe(config: &SandboxConfig) -> Result<PathBuf, SandboxError> {
    if let Some(exe) = &config.agent_exe {
        return Ok(exe.clone());
    }
    #[cfg(any(test, feature = "test-support"))]
    {
        // One of our binaries built with this feature (a `cargo test --workspace` builds them
        // so) carries the init itself; a test binary does not.
        let own = std::env::current_exe().ok().filter(|exe| {
            let name = exe.file_name().and_then(|n| n.to_str());
            matches!(name, Some("outboard-server" | "outboard"))
        });
        match own {
            Some(exe) => Ok(exe),
            None => agent_exe_for_tests(),
        }
    }
    #[cfg(not(any(test, feature = "test-support")))]
    {
        /// Names of our binaries that carry the agent.
        const AGENT_BINARIES: &[&str] = &["outboard-server", "outboard"];
        let exe = std::env::current_exe().map_err(|e| {
            SandboxError::Start(format!("cannot find this executable for the sandbox agent: {e}"))
        })?;
        let own = exe.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if AGENT_BINARIES.contains(&own) {
            return Ok(exe);
        }
        let near = exe.parent().into_iter().flat_map(|d| [Some(d), d.parent()]).flatten();
        for dir in near {
            let candidate = dir.join("outboard-server");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
        Err(SandboxError::Start(format!(
            "{} does not carry the sandbox agent: set SandboxConfig::agent_exe to an \
             `outboard-server` or `outboard` binary",
            exe.display()
        )))
    }
}

#[cfg(any(test, feature = "test-support"))]
/// `outboard-server`, built once for a test binary (which cannot be the agent itself: libtest owns
/// its `main`). Only with the `test-support` feature, which the crates' tests turn on.
fn agent_exe_for_tests() -> Result<PathBuf, SandboxError> {
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
