//! [`Sandbox`]: the cheap cloneable handle a session holds to its sandbox manager, and the
//! server-wide checks (the host can run sandboxes; orphans of dead servers are reaped).

use std::path::PathBuf;
use std::time::Duration;

use outboard_sandbox_init::error::SandboxError;
use outboard_shared::{OutputStream, SandboxState};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::cgroup;
use outboard_sandbox_init::bwrap;

use crate::config::{scratch_dir, Backend, SandboxConfig};
use crate::jobs::{JobRead, JobReport};
use crate::manager::Manager;
use crate::request::Request;
use crate::types::{ExecResult, SandboxTransition};
use crate::watch::Tripwire;

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
type JobWiring = (mpsc::Sender<JobReport>, Vec<(String, String)>);

/// Handle to a session's sandbox manager (cheap to clone). The manager task ends, and the
/// sandbox is stopped, when the last handle is dropped.
#[derive(Clone)]
pub struct Sandbox {
    tx: Option<mpsc::Sender<Request>>,
    /// The session network's audit sink, flushed after each command (see [`Sandbox::exec`]).
    audit: Option<std::sync::Arc<dyn outboard_egress::Audit>>,
    /// The session's network as the server's own fetches for the model use it (`WebFetch`):
    /// the same policy and audit sink as the proxy, reached without waking the sandbox.
    egress: Option<std::sync::Arc<outboard_egress::Egress>>,
    /// Fires when the workspace watch stops the sandbox's commands ([`crate::watch`]).
    tripwire: std::sync::Arc<Tripwire>,
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
        jobs: mpsc::Sender<JobReport>,
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
            return Sandbox { tx: None, audit, egress, tripwire: Default::default() };
        };
        let (tx, rx) = mpsc::channel(REQUEST_CHANNEL_CAPACITY);
        let (jobs, lost) = jobs.map_or((None, Vec::new()), |(tx, lost)| (Some(tx), lost));
        let (state_tx, state_rx) = tokio::sync::watch::channel(SandboxState::None);
        let tripwire = std::sync::Arc::new(Tripwire::default());
        if let Some(watch) = &config.workspace_watch {
            let check = watch.0.clone();
            runtime.spawn(crate::watch::run(check, state_rx, tx.downgrade(), tripwire.clone()));
        }
        let manager =
            Manager::new(config, workspace, transitions, jobs, lost, tx.downgrade(), state_tx);
        runtime.spawn(manager.run(rx));
        Sandbox { tx: Some(tx), audit, egress, tripwire }
    }

    /// The session's network policy, audit sink and the server's own ports, for fetches the
    /// server makes for the model itself; `None` without a session network (the unsafe host
    /// mode, or a sandbox made without one). Never starts or thaws the sandbox.
    pub fn egress(&self) -> Option<&outboard_egress::Egress> {
        self.egress.as_deref()
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Request) -> Option<T> {
        let (reply, answer) = oneshot::channel();
        self.tx.as_ref()?.send(make(reply)).await.ok()?;
        answer.await.ok()
    }

    /// Runs `command` with `bash -c` in the sandbox's working directory (`/workspace` at
    /// first; a `cd` carries over), streaming output to `on_output` as it comes. Starts or
    /// thaws the sandbox as needed. On timeout or cancel the command's processes are killed and
    /// the output so far is returned (`timed_out` set on timeout; `exit_code` `None` in both).
    /// When the workspace watch stops the sandbox's commands meanwhile, the command is killed
    /// the same way and its `failure` says why.
    pub async fn exec(
        &self,
        command: &str,
        timeout: Duration,
        on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> Result<ExecResult, SandboxError> {
        self.run(command, false, timeout, on_output, cancel).await
    }

    /// Like [`Sandbox::exec`], in the sandbox's read-only view (plan mode): `/workspace`, `/tmp`
    /// and every other mount are read-only to the command, so a write fails with `EROFS`
    /// (see `outboard_sandbox_init::view`). In the unsafe host mode, which has no view, the
    /// command runs as with [`Sandbox::exec`].
    pub async fn exec_read_only(
        &self,
        command: &str,
        timeout: Duration,
        on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> Result<ExecResult, SandboxError> {
        self.run(command, true, timeout, on_output, cancel).await
    }

    async fn run(
        &self,
        command: &str,
        read_only: bool,
        timeout: Duration,
        on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> Result<ExecResult, SandboxError> {
        let tx = self.tx.as_ref().ok_or(SandboxError::Gone)?;
        let (out_tx, mut out_rx) = mpsc::channel(OUTPUT_CHANNEL_CAPACITY);
        let (reply, mut answer) = oneshot::channel();
        let tripped = self.tripwire.token();
        let cancel = cancel.child_token();
        let request = Request::Exec {
            command: command.to_string(),
            read_only,
            timeout,
            cancel: cancel.clone(),
            output: out_tx,
            reply,
        };
        tx.send(request).await.map_err(|_| SandboxError::Gone)?;
        loop {
            tokio::select! {
                biased;
                Some((stream, text)) = out_rx.recv() => on_output(stream, &text),
                () = tripped.cancelled(), if !cancel.is_cancelled() => cancel.cancel(),
                result = &mut answer => {
                    // Everything was queued before the answer.
                    while let Ok((stream, text)) = out_rx.try_recv() {
                        on_output(stream, &text);
                    }
                    // The command's refused connections become events before its result does.
                    if let Some(audit) = &self.audit {
                        let _ = tokio::time::timeout(AUDIT_FLUSH_WAIT, audit.flush()).await;
                    }
                    let mut result = result.map_err(|_| SandboxError::Gone)??;
                    if tripped.is_cancelled() && result.failure.is_none() {
                        result.failure = self.tripwire.reason();
                    }
                    return Ok(result);
                }
            }
        }
    }

    /// Starts `command` as a background job (no timeout; the sandbox stays unfrozen while it
    /// runs); its shell id. Refused past [`jobs::MAX_RUNNING_JOBS`] running jobs.
    pub async fn spawn_job(&self, command: &str) -> Result<String, SandboxError> {
        self.start_job(command, false).await
    }

    /// Like [`Sandbox::spawn_job`], in the sandbox's read-only view (plan mode; see
    /// [`Sandbox::exec_read_only`]).
    pub async fn spawn_job_read_only(&self, command: &str) -> Result<String, SandboxError> {
        self.start_job(command, true).await
    }

    async fn start_job(&self, command: &str, read_only: bool) -> Result<String, SandboxError> {
        let command = command.to_owned();
        self.ask(|reply| Request::Spawn { command, read_only, reply })
            .await
            .unwrap_or(Err(SandboxError::Gone))
    }

    /// A job's output since the last read and its state; `None` for an unknown shell id. Never
    /// wakes the sandbox.
    pub async fn read_job(&self, shell_id: &str) -> Option<JobRead> {
        let shell_id = shell_id.to_owned();
        self.ask(|reply| Request::ReadJob { shell_id, reply }).await.flatten()
    }

    /// Kills a running job's process group and waits for its end; `Ok(false)` when no job of
    /// that id is running.
    pub async fn kill_job(&self, shell_id: &str) -> Result<bool, SandboxError> {
        let shell_id = shell_id.to_owned();
        self.ask(|reply| Request::KillJob { shell_id, reply })
            .await
            .unwrap_or(Err(SandboxError::Gone))
    }

    /// Jobs that ended since the model was last told (each is returned once).
    pub async fn untold_jobs(&self) -> Vec<JobReport> {
        self.ask(Request::Untold).await.unwrap_or_default()
    }

    /// The lifecycle state now (does not wake the sandbox).
    pub async fn state(&self) -> SandboxState {
        self.ask(Request::State).await.unwrap_or(SandboxState::Stopped)
    }

    /// Host pid of the sandbox's PID 1 (the agent), when one is up.
    pub async fn pid(&self) -> Option<u32> {
        self.ask(Request::Pid).await.flatten()
    }

    /// The directory the next command starts in, as the live sandbox last reported it; `None`
    /// when no sandbox is up (a fresh one starts in the workspace) or no command ran yet. Never
    /// wakes the sandbox.
    pub async fn cwd(&self) -> Option<String> {
        self.ask(Request::Cwd).await.flatten()
    }

    /// Stops the sandbox now (the workspace stays); the next command starts a fresh one.
    pub async fn stop(&self) {
        self.ask(Request::Stop).await;
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
        // The check's own sandbox waits for no check (it is the check).
        let sandbox =
            Sandbox::new(SandboxConfig { preflight: None, ..config.clone() }, dir.clone());
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

#[cfg(test)]
mod tests;
