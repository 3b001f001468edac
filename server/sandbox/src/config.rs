//! The sandbox's configuration, owned here and filled in by the application: which backend, the
//! limits, the host paths, the session's network, where transitions are counted.

use std::path::PathBuf;
use std::time::Duration;

use crate::observe::Observer;

/// Which backend runs commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// bubblewrap: namespaces, empty environment, no network, cgroup limits.
    Bwrap,
    /// Commands run on the host as the server's user, with only the agent's rlimits/cgroups.
    /// Never chosen unless named (`--sandbox unsafe-host`).
    UnsafeHost,
}

impl Backend {
    /// The name used by `--sandbox`.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Bwrap => "bwrap",
            Backend::UnsafeHost => "unsafe-host",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bwrap" => Ok(Backend::Bwrap),
            "unsafe-host" => Ok(Backend::UnsafeHost),
            other => Err(format!(
                "unknown sandbox {other:?}: use `bwrap` (the default) or, only where namespaces \
                 are unavailable and you accept commands running on the host, `unsafe-host`"
            )),
        }
    }
}

/// Resource limits of one sandbox (cgroups; rlimits where cgroups are missing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Memory, bytes.
    pub memory_bytes: u64,
    /// Processes (and threads) at once.
    pub max_processes: u32,
    /// CPU weight relative to the server's 1024 (cgroup v1 `cpu.shares`).
    pub cpu_shares: u32,
}

impl SandboxLimits {
    /// 1 GiB, 512 processes, half the server's CPU weight.
    pub const DEFAULT: SandboxLimits =
        SandboxLimits { memory_bytes: 1 << 30, max_processes: 512, cpu_shares: 512 };
}

/// How sandboxes are made and when they sleep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Which backend.
    pub backend: Backend,
    /// Idle time after the last command before the sandbox is frozen.
    pub idle_freeze: Duration,
    /// Idle time after the last command before the sandbox is stopped (the workspace stays).
    pub idle_stop: Duration,
    /// Per-sandbox limits.
    pub limits: SandboxLimits,
    /// The executable holding the agent (`outboard-server` or `outboard`); `None` means this
    /// process's own executable, which only works inside those two binaries. Tests, benchmarks
    /// and other embedders set it.
    pub agent_exe: Option<PathBuf>,
    /// Host directories bound read-only into the sandbox, with where they appear (the org's
    /// `/memory`, `/skills` and `/agents`). Ignored by the unsafe host mode.
    pub ro_mounts: Vec<(PathBuf, String)>,
    /// The workspace is the user's own directory, worked on in place: at each start, its
    /// `.git` is bound read-only over it ([`crate::git_guard`]). Ignored by the unsafe host
    /// mode.
    pub protect_git: bool,
    /// A private directory (the server's data dir) for the few scratch files the sandbox
    /// machinery needs (the startup check's workspace, the unsafe host mode's working-directory
    /// file); `None` means the system temp dir. Names are random and created exclusively.
    pub scratch_dir: Option<PathBuf>,
    /// The server's live-sandbox registry; sessions take their org's ticket from it.
    pub live_pool: Option<crate::pool::LivePool>,
    /// The org's place in the server's live-sandbox registry (the `live_sandboxes` quota);
    /// `None`: no cap.
    pub pool: Option<crate::pool::PoolTicket>,
    /// The session's network. `Some`: the sandbox's one way out is the server's proxy
    /// ([`outboard_egress`]), started with the first sandbox and kept for the session (its byte
    /// budget spans sandbox restarts). `None`: no network at all. Ignored by the unsafe host
    /// mode, whose commands have the host's network anyway.
    pub network: Option<outboard_egress::SessionNet>,
    /// The server's own listening ports: the proxy refuses them on every local address.
    pub server_ports: Vec<u16>,
    /// Where the manager counts its states and transitions; `None`: nowhere.
    pub metrics: Option<Observer>,
    /// The session's workspace limit, checked while the sandbox runs ([`crate::watch`]);
    /// `None`: not watched (a directory of the user's own, worked on in place).
    pub workspace_watch: Option<crate::watch::WorkspaceWatch>,
    /// The server's sandbox check, which a sandbox's first start waits for (its failure is
    /// the command's error); `None`: no check (tests, the check's own sandbox).
    pub preflight: Option<crate::preflight::Preflight>,
}

impl SandboxConfig {
    /// The default bubblewrap configuration (30 s to freeze, 30 min to stop). Named like the
    /// variant of the first version so `SandboxConfig::Bwrap` call sites keep compiling.
    #[allow(non_upper_case_globals)]
    pub const Bwrap: SandboxConfig = SandboxConfig {
        backend: Backend::Bwrap,
        idle_freeze: Duration::from_secs(30),
        idle_stop: Duration::from_secs(30 * 60),
        limits: SandboxLimits::DEFAULT,
        agent_exe: None,
        ro_mounts: Vec::new(),
        protect_git: false,
        scratch_dir: None,
        live_pool: None,
        pool: None,
        network: None,
        server_ports: Vec::new(),
        metrics: None,
        workspace_watch: None,
        preflight: None,
    };
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig::Bwrap
    }
}

/// A fresh private directory (mode 0700, random name) under the configured scratch dir.
pub fn scratch_dir(config: &SandboxConfig, prefix: &str) -> std::io::Result<tempfile::TempDir> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    match &config.scratch_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            builder.tempdir_in(dir)
        }
        None => builder.tempdir(),
    }
}
