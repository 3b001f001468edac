//! Which executable the sandbox runs as its PID 1: the in-sandbox init ships inside our own
//! binaries (`outboard-server`, `outboard`), behind a hidden first argument.

use std::path::PathBuf;

use outboard_sandbox_init::error::SandboxError;

use crate::config::SandboxConfig;

/// The agent executable: the configured one, else this process's own when it is one of our
/// binaries, else an `outboard-server` next to it (or one directory up: `target/debug/deps`).
pub fn resolve_agent_exe(config: &SandboxConfig) -> Result<PathBuf, SandboxError> {
    if let Some(exe) = &config.agent_exe {
        return Ok(exe.clone());
    }
    #[cfg(test)]
    {
        crate::testing::agent_exe_for_tests()
    }
    #[cfg(not(test))]
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
