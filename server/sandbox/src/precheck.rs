//! Starts the server's sandbox check ([`Preflight`]) in the background, or not at all when a
//! pass is remembered in the data directory for this agent binary, kernel and bubblewrap (a
//! file holding their description): later starts of the same installation check nothing. A
//! sandbox that fails to start anyway (a sysctl changed) forgets the pass and checks again, so
//! its error still says what to fix.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::{Backend, SandboxConfig};
use crate::preflight::{Preflight, Recheck};
use crate::{Sandbox, SandboxError};

/// The check of `config`'s backend: passed at once when `memo_file` remembers a pass for this
/// installation, else started in the background (a pass is then written to `memo_file`).
/// Needs a tokio runtime.
pub fn start(config: &SandboxConfig, memo_file: Option<&Path>) -> Preflight {
    let config = SandboxConfig { preflight: None, ..config.clone() };
    let memo = memo_file.map(|path| Arc::new(Memo { path: path.into(), key: key(&config) }));
    if let Some(memo) = memo.clone().filter(|m| m.remembered()) {
        let recheck: Recheck = Arc::new(move || {
            let (config, memo) = (config.clone(), memo.clone());
            Box::pin(async move {
                memo.forget();
                check_and_remember(&config, Some(&memo)).await
            })
        });
        return Preflight::remembered(recheck);
    }
    let (outcome, preflight) = Preflight::pending();
    tokio::spawn(async move {
        outcome.report(check_and_remember(&config, memo.as_deref()).await);
    });
    preflight
}

/// Runs [`Sandbox::check`] and remembers a pass in `memo`.
async fn check_and_remember(config: &SandboxConfig, memo: Option<&Memo>) -> Result<(), String> {
    match Sandbox::check(config).await {
        Ok(()) => {
            if let Some(memo) = memo {
                memo.remember();
            }
            Ok(())
        }
        Err(SandboxError::Unavailable(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}

/// A passed check remembered in a file.
#[derive(Debug)]
struct Memo {
    path: PathBuf,
    /// What the check depended on, as the file holds it.
    key: String,
}

impl Memo {
    fn remembered(&self) -> bool {
        std::fs::read_to_string(&self.path).is_ok_and(|held| held == self.key)
    }

    fn remember(&self) {
        if let Err(e) = std::fs::write(&self.path, &self.key) {
            tracing::debug!("cannot remember the sandbox check in {}: {e}", self.path.display());
        }
    }

    fn forget(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a check's outcome depends on: the backend, the agent binary (path, size, mtime), the
/// kernel release, and for bubblewrap the `bwrap` found on the `PATH` (path, size, mtime).
fn key(config: &SandboxConfig) -> String {
    let agent = crate::agent_exe::resolve_agent_exe(config).ok();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let bwrap = match config.backend {
        Backend::Bwrap => outboard_sandbox_init::launch::find_bwrap().ok(),
        Backend::UnsafeHost => None,
    };
    format!(
        "backend {}\nagent {}\nkernel {}\nbwrap {}\n",
        config.backend.as_str(),
        describe(agent.as_deref()),
        kernel.trim(),
        describe(bwrap.as_deref()),
    )
}

/// `PATH SIZE MTIME_NS` of a file, or `-` (absent, unreadable).
fn describe(path: Option<&Path>) -> String {
    let Some(path) = path else { return "-".into() };
    let Ok(meta) = std::fs::metadata(path) else { return "-".into() };
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{} {} {mtime}", path.display(), meta.len())
}

#[cfg(test)]
mod tests;
