//! Where Bash commands run: one sandbox per session, started when a command first needs it,
//! frozen when idle, thawed on the next command, replaced when it dies.
//!
//! CONTRACT (used by `tools` and `session`): [`SandboxConfig`], [`Sandbox::new`],
//! [`Sandbox::with_transitions`], [`Sandbox::exec`], [`Sandbox::check`], [`SandboxTransition`].
//!
//! Rooms: [`manager`] (the per-session task: lifecycle state machine and idle timers; a
//! [`Sandbox`] is its cheap cloneable handle), [`instance`] (one live sandbox process and its
//! pipes), [`agent`] (the in-sandbox PID 1, shipped inside our own binaries), [`protocol`] (the
//! framed, versioned agent protocol), [`bwrap`] (what the sandbox sees), [`cgroup`] (freezing
//! and limits), [`output`] (streaming and the output cap).
//!
//! Design choice: a persistent sandbox with an agent, rather than one `bwrap` per command, so
//! background processes and the working directory survive between commands and a frozen
//! sandbox resumes in well under a millisecond instead of paying a start per command.

pub mod agent;
pub mod bwrap;
pub mod cgroup;
mod instance;
pub mod jobs;
pub mod launch;
mod manager;
pub mod output;
pub mod pool;
pub mod protocol;
pub mod seccomp;

use std::path::PathBuf;
use std::time::Duration;

use outboard_shared::{OutputStream, SandboxState};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

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
    /// A private directory (the server's data dir) for the few scratch files the sandbox
    /// machinery needs (the startup check's workspace, the unsafe host mode's working-directory
    /// file); `None` means the system temp dir. Names are random and created exclusively.
    pub scratch_dir: Option<PathBuf>,
    /// The server's live-sandbox registry; sessions take their org's ticket from it.
    pub live_pool: Option<pool::LivePool>,
    /// The org's place in the server's live-sandbox registry (the `live_sandboxes` quota);
    /// `None`: no cap.
    pub pool: Option<pool::PoolTicket>,
    /// The session's network. `Some`: the sandbox's one way out is the server's proxy
    /// ([`outboard_egress`]), started with the first sandbox and kept for the session (its byte
    /// budget spans sandbox restarts). `None`: no network at all. Ignored by the unsafe host
    /// mode, whose commands have the host's network anyway.
    pub network: Option<outboard_egress::SessionNet>,
    /// The server's own listening ports: the proxy refuses them on every local address.
    pub server_ports: Vec<u16>,
    /// Where the manager counts its states and transitions; `None`: nowhere.
    pub metrics: Option<crate::metrics::SandboxMetrics>,
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
        scratch_dir: None,
        live_pool: None,
        pool: None,
        network: None,
        server_ports: Vec::new(),
        metrics: None,
    };
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig::Bwrap
    }
}

/// A state change of a session's sandbox, for the session's durable `sandbox` event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SandboxTransition {
    /// The state entered.
    pub state: SandboxState,
    /// How long entering it took, in milliseconds (see [`manager`]).
    pub ms: f64,
}

/// The result of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    /// Exit code (`None` when killed by a signal, timed out or cancelled).
    pub exit_code: Option<i32>,
    /// Combined output as kept (capped).
    pub output: String,
    /// The command exceeded its timeout and was killed.
    pub timed_out: bool,
    /// The signal that killed `bash`, if one did.
    pub signal: Option<i32>,
    /// The sandbox stopped the command for hitting a limit (memory, processes): a sentence for
    /// the model. The command counts as failed whatever its exit code.
    pub failure: Option<String>,
}

/// Why a command could not run.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The sandbox could not be started.
    #[error("the sandbox could not start: {0}")]
    Start(String),
    /// The host cannot run the sandbox at all (found by [`Sandbox::check`]); the message says
    /// what to install or configure.
    #[error("the sandbox is unavailable on this host: {0}")]
    Unavailable(String),
    /// The sandbox died while the command ran; the next command gets a fresh sandbox.
    #[error(
        "the sandbox died while the command ran ({0}); background processes are gone, \
         /workspace is intact, and the next command starts a fresh sandbox"
    )]
    Died(String),
    /// The sandbox's agent could not start the command (e.g. no process slot left).
    #[error("the sandbox could not start the command: {0}")]
    Refused(String),
    /// The session's sandbox manager is gone (the session is shutting down).
    #[error("the sandbox manager has stopped (the session is closing); retry in a new session")]
    Gone,
}

/// How long a starting server waits for orphaned sandbox groups to empty: killing them takes
/// milliseconds, so one still populated after this has a process stuck in the kernel, which
/// waiting longer would not fix; the start goes on and the warning names what is left.
const REAP_DEADLINE: Duration = Duration::from_secs(10);

/// Kills the sandboxes that servers which are gone left behind (frozen ones included) and
/// removes their cgroups in every hierarchy; logs what was reaped. Call it at server start,
/// before any sandbox of this process exists. See [`cgroup::reap_orphans`] for whose groups
/// count as orphans (never those of a live server sharing the parent).
pub async fn reap_orphans() -> cgroup::Reaped {
    let started = std::time::Instant::now();
    let reaped = tokio::task::spawn_blocking(|| {
        cgroup::reap_orphans(cgroup::Controls::get(), REAP_DEADLINE)
    })
    .await
    .unwrap_or_default();
    tracing::info!(
        groups = reaped.groups,
        processes = reaped.processes,
        ms = started.elapsed().as_secs_f64() * 1000.0,
        "orphaned sandboxes reaped"
    );
    if !reaped.left.is_empty() {
        tracing::warn!(
            left = ?reaped.left,
            "orphaned sandbox cgroups still populated after {} s; remove them by hand once empty",
            REAP_DEADLINE.as_secs()
        );
    }
    reaped
}

/// Output chunks queued between the manager and the caller of [`Sandbox::exec`]: enough to
/// absorb a burst; when full the agent's pipe fills and the command waits, never the server.
const OUTPUT_CHANNEL_CAPACITY: usize = 64;

/// Requests queued to the manager: one command at a time plus a few state queries.
const REQUEST_CHANNEL_CAPACITY: usize = 8;

/// Where a sandbox reports its background jobs' starts and ends, and the `(shell id, command)`
/// of jobs a restart lost.
type JobWiring = (mpsc::Sender<jobs::JobReport>, Vec<(String, String)>);

/// Handle to a session's sandbox manager (cheap to clone). The manager task ends, and the
/// sandbox is stopped, when the last handle is dropped.
#[derive(Clone)]
pub struct Sandbox {
    tx: Option<mpsc::Sender<manager::Request>>,
    /// The session network's audit sink, flushed after each command (see [`Sandbox::exec`]).
    audit: Option<std::sync::Arc<dyn outboard_egress::Audit>>,
    /// The session's network as the server's own fetches for the model use it (`WebFetch`):
    /// the same policy and audit sink as the proxy, reached without waking the sandbox.
    egress: Option<std::sync::Arc<outboard_egress::Egress>>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("running", &self.tx.is_some()).finish_non_exhaustive()
    }
}

/// How long a finished command waits for its network records to be flushed: the store is
/// normally milliseconds away; a stuck one must not hold the command's result.
const AUDIT_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// How long [`Sandbox::check`] waits for its trivial command.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

impl Sandbox {
    /// A sandbox for the workspace at `workspace` that reports no transitions; nothing starts
    /// until a command runs. Call within a tokio runtime (the manager is a task).
    pub fn new(config: SandboxConfig, workspace: PathBuf) -> Self {
        Self::spawn(config, workspace, None, None)
    }

    /// Like [`Sandbox::new`], reporting every state change on `transitions`, in order. The
    /// manager never waits for the receiver: what does not fit waits in its backlog (see
    /// [`manager`]), so a few slots (e.g. 16) are enough.
    pub fn with_transitions(
        config: SandboxConfig,
        workspace: PathBuf,
        transitions: mpsc::Sender<SandboxTransition>,
    ) -> Self {
        Self::spawn(config, workspace, Some(transitions), None)
    }

    /// Like [`Sandbox::with_transitions`], also reporting each background job's start and end
    /// on `jobs`, in order (through the same kind of backlog). `lost` are the `(shell id,
    /// command)` of jobs the session's log shows running when the server stopped: the model is
    /// told at its next step, and `BashOutput` answers `lost` for them.
    pub fn with_reports(
        config: SandboxConfig,
        workspace: PathBuf,
        transitions: mpsc::Sender<SandboxTransition>,
        jobs: mpsc::Sender<jobs::JobReport>,
        lost: Vec<(String, String)>,
    ) -> Self {
        Self::spawn(config, workspace, Some(transitions), Some((jobs, lost)))
    }

    fn spawn(
        config: SandboxConfig,
        workspace: PathBuf,
        transitions: Option<mpsc::Sender<SandboxTransition>>,
        jobs: Option<JobWiring>,
    ) -> Self {
        let audit = match config.backend {
            Backend::Bwrap => config.network.as_ref().map(|n| n.audit.clone()),
            Backend::UnsafeHost => None,
        };
        let egress = match config.backend {
            Backend::Bwrap => config.network.as_ref().map(|net| {
                let server_ports = config.server_ports.clone();
                std::sync::Arc::new(outboard_egress::Egress { net: net.clone(), server_ports })
            }),
            Backend::UnsafeHost => None,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!("Sandbox created outside a tokio runtime: it will refuse commands");
            return Sandbox { tx: None, audit, egress };
        };
        let (tx, rx) = mpsc::channel(REQUEST_CHANNEL_CAPACITY);
        let (jobs, lost) = jobs.map_or((None, Vec::new()), |(tx, lost)| (Some(tx), lost));
        let manager =
            manager::Manager::new(config, workspace, transitions, jobs, lost, tx.downgrade());
        runtime.spawn(manager.run(rx));
        Sandbox { tx: Some(tx), audit, egress }
    }

    /// The session's network policy, audit sink and the server's own ports, for fetches the
    /// server makes for the model itself; `None` without a session network (the unsafe host
    /// mode, or a sandbox made without one). Never starts or thaws the sandbox.
    pub fn egress(&self) -> Option<&outboard_egress::Egress> {
        self.egress.as_deref()
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> manager::Request) -> Option<T> {
        let (reply, answer) = oneshot::channel();
        self.tx.as_ref()?.send(make(reply)).await.ok()?;
        answer.await.ok()
    }

    /// Runs `command` with `bash -c` in the sandbox's working directory (`/workspace` at
    /// first; a `cd` carries over), streaming output to `on_output` as it comes. Starts or
    /// thaws the sandbox as needed. On timeout or cancel the command's processes are killed and
    /// the output so far is returned (`timed_out` set on timeout; `exit_code` `None` in both).
    pub async fn exec(
        &self,
        command: &str,
        timeout: Duration,
        on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> Result<ExecResult, SandboxError> {
        let tx = self.tx.as_ref().ok_or(SandboxError::Gone)?;
        let (out_tx, mut out_rx) = mpsc::channel(OUTPUT_CHANNEL_CAPACITY);
        let (reply, mut answer) = oneshot::channel();
        let request = manager::Request::Exec {
            command: command.to_string(),
            timeout,
            cancel,
            output: out_tx,
            reply,
        };
        tx.send(request).await.map_err(|_| SandboxError::Gone)?;
        loop {
            tokio::select! {
                biased;
                Some((stream, text)) = out_rx.recv() => on_output(stream, &text),
                result = &mut answer => {
                    // Everything was queued before the answer.
                    while let Ok((stream, text)) = out_rx.try_recv() {
                        on_output(stream, &text);
                    }
                    // The command's refused connections become events before its result does.
                    if let Some(audit) = &self.audit {
                        let _ = tokio::time::timeout(AUDIT_FLUSH_WAIT, audit.flush()).await;
                    }
                    return result.map_err(|_| SandboxError::Gone)?;
                }
            }
        }
    }

    /// Starts `command` as a background job (no timeout; the sandbox stays unfrozen while it
    /// runs); its shell id. Refused past [`jobs::MAX_RUNNING_JOBS`] running jobs.
    pub async fn spawn_job(&self, command: &str) -> Result<String, SandboxError> {
        let command = command.to_owned();
        self.ask(|reply| manager::Request::Spawn { command, reply })
            .await
            .unwrap_or(Err(SandboxError::Gone))
    }

    /// A job's output since the last read and its state; `None` for an unknown shell id. Never
    /// wakes the sandbox.
    pub async fn read_job(&self, shell_id: &str) -> Option<jobs::JobRead> {
        let shell_id = shell_id.to_owned();
        self.ask(|reply| manager::Request::ReadJob { shell_id, reply }).await.flatten()
    }

    /// Kills a running job's process group and waits for its end; `Ok(false)` when no job of
    /// that id is running.
    pub async fn kill_job(&self, shell_id: &str) -> Result<bool, SandboxError> {
        let shell_id = shell_id.to_owned();
        self.ask(|reply| manager::Request::KillJob { shell_id, reply })
            .await
            .unwrap_or(Err(SandboxError::Gone))
    }

    /// Jobs that ended since the model was last told (each is returned once).
    pub async fn untold_jobs(&self) -> Vec<jobs::JobReport> {
        self.ask(manager::Request::Untold).await.unwrap_or_default()
    }

    /// The lifecycle state now (does not wake the sandbox).
    pub async fn state(&self) -> SandboxState {
        self.ask(manager::Request::State).await.unwrap_or(SandboxState::Stopped)
    }

    /// Host pid of the sandbox's PID 1 (the agent), when one is up.
    pub async fn pid(&self) -> Option<u32> {
        self.ask(manager::Request::Pid).await.flatten()
    }

    /// The directory the next command starts in, as the live sandbox last reported it; `None`
    /// when no sandbox is up (a fresh one starts in the workspace) or no command ran yet. Never
    /// wakes the sandbox.
    pub async fn cwd(&self) -> Option<String> {
        self.ask(manager::Request::Cwd).await.flatten()
    }

    /// Stops the sandbox now (the workspace stays); the next command starts a fresh one.
    pub async fn stop(&self) {
        self.ask(manager::Request::Stop).await;
    }

    /// Starts a sandbox with `config` and runs a trivial command once (call it at server
    /// start): fails with [`SandboxError::Unavailable`] saying what to install or which sysctl
    /// to check. The unsafe host mode passes with a loud warning.
    pub async fn check(config: &SandboxConfig) -> Result<(), SandboxError> {
        if config.backend == Backend::UnsafeHost {
            tracing::warn!(
                "--sandbox unsafe-host: Bash commands run ON THE HOST as the server's user, with \
                 its files and network; use only where namespaces are unavailable"
            );
        }
        let scratch = scratch_dir(config, "outboard-check-").map_err(|e| {
            SandboxError::Unavailable(format!("could not create a scratch directory: {e}"))
        })?;
        let dir = scratch.path().to_path_buf();
        let sandbox = Sandbox::new(config.clone(), dir.clone());
        let result =
            sandbox.exec("echo ok", CHECK_TIMEOUT, &mut |_, _| {}, CancellationToken::new()).await;
        sandbox.stop().await;
        drop(sandbox);
        drop(scratch);
        match result {
            Ok(r) if r.exit_code == Some(0) && r.output.trim() == "ok" => Ok(()),
            Ok(r) if r.timed_out => Err(SandboxError::Unavailable(format!(
                "a trivial command did not finish within {} s in the sandbox",
                CHECK_TIMEOUT.as_secs()
            ))),
            Ok(r) => {
                Err(SandboxError::Unavailable(bwrap::explain_check_failure(r.exit_code, &r.output)))
            }
            Err(SandboxError::Start(msg)) if msg == bwrap::NOT_FOUND => {
                Err(SandboxError::Unavailable(msg))
            }
            Err(SandboxError::Start(msg)) => {
                Err(SandboxError::Unavailable(bwrap::explain_check_failure(None, &msg)))
            }
            Err(e) => Err(SandboxError::Unavailable(e.to_string())),
        }
    }
}

/// A fresh private directory (mode 0700, random name) under the configured scratch dir.
pub(crate) fn scratch_dir(
    config: &SandboxConfig,
    prefix: &str,
) -> std::io::Result<tempfile::TempDir> {
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

/// The agent executable: the configured one, else this process's own when it is one of our
/// binaries, else an `outboard-server` next to it (or one directory up: `target/debug/deps`).
pub(crate) fn resolve_agent_exe(config: &SandboxConfig) -> Result<PathBuf, SandboxError> {
    if let Some(exe) = &config.agent_exe {
        return Ok(exe.clone());
    }
    #[cfg(test)]
    {
        tests::agent_exe_for_unit_tests()
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

#[cfg(test)]
pub(crate) mod tests;
