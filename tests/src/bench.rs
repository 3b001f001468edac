//! What the benchmark binaries share: percentiles, unit conversion, and the sandbox settings of
//! in-process servers.

use std::time::Duration;

/// The `p` quantile (0.0–1.0) of `sorted` samples (nearest rank; zero when empty).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Microseconds, for tables.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The sandbox of in-process servers: a benchmark binary does not carry the sandbox agent, so
/// point at the `outboard-server` built beside it (`scripts/bench.sh` builds it).
pub fn sandbox_config() -> outboard_server::sandbox::SandboxConfig {
    let agent_exe = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("outboard-server")));
    outboard_server::sandbox::SandboxConfig {
        agent_exe,
        ..outboard_server::sandbox::SandboxConfig::default()
    }
}
