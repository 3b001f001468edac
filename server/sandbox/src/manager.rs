//! The per-session sandbox manager: a task owning the lifecycle state machine
//! (`none → provisioning → running ⇄ suspended`, `running → dead → provisioning`, `→ stopped`),
//! the live [`Instance`] and the idle timers. [`super::Sandbox`] is its handle.
//!
//! Why a task: the idle timers must fire between turns, when nobody calls the sandbox. Every
//! state change goes through [`Manager::enter`], which checks the transition is one of the
//! machine's and reports it (with its latency) on the session's transition channel.
//!
//! Every transition reaches the session, in order: when its channel is full (the session's
//! store is slow), transitions wait in the manager's own backlog and go out as room appears,
//! so a slow consumer never blocks the sandbox (a frozen sandbox must still thaw for the next
//! command) and never loses a report. Only a consumer stuck for [`TRANSITION_BACKLOG`]
//! transitions loses the oldest ones, each logged as an error.
//!
//! `ms` of a transition is how long getting into that state took: `running` after a cold start
//! is the provision time (spawn to the agent's hello), after a thaw the thaw-to-pong time;
//! `suspended` the freeze; `stopped` the kill; `provisioning` and `dead` are 0 (they begin or are
//! noticed).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use outboard_shared::{OutputStream, SandboxQueue, SandboxState};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use outboard_sandbox_init::error::SandboxError;

use crate::agent_exe::resolve_agent_exe;
use crate::cgroup::Hits;
use crate::config::{scratch_dir, Backend, SandboxConfig};
use crate::instance::{Event, ExecFailure, Instance};
use crate::jobs::{JobReport, Jobs, MAX_RUNNING_JOBS};
use crate::pool::Admission;
use crate::request::Request;
use crate::types::{ExecResult, SandboxTransition};

/// Transitions kept while the session's channel is full. A session emits a few per command
/// (provisioning, running; a freeze and a thaw between commands), and the channel before this
/// holds 16: 64 more is dozens of commands' worth, which only a consumer that is stuck, not
/// slow, falls behind by. Past it the oldest is dropped (and logged) rather than growing
/// without bound.
pub const TRANSITION_BACKLOG: usize = 64;

/// How long a manager whose session dropped its handles waits to hand over the last waiting
/// transitions (the final `stopped`) before it ends anyway.
const LAST_REPORTS_WAIT: Duration = Duration::from_secs(5);

/// A session's report channel (sandbox transitions, background jobs' starts and ends) and
/// what is waiting for room in it.
struct Reports<T> {
    tx: mpsc::Sender<T>,
    backlog: VecDeque<T>,
}

impl<T: Clone + std::fmt::Debug> Reports<T> {
    fn new(tx: mpsc::Sender<T>) -> Self {
        Reports { tx, backlog: VecDeque::new() }
    }

    /// Queues `t` behind what waits, then sends what fits.
    fn push(&mut self, t: T) {
        if self.backlog.len() >= TRANSITION_BACKLOG {
            if let Some(lost) = self.backlog.pop_front() {
                tracing::error!(
                    ?lost,
                    "sandbox report lost: the session has not taken the last {} reports",
                    TRANSITION_BACKLOG
                );
            }
        }
        self.backlog.push_back(t);
        self.flush();
    }

    /// Hands over everything that waits, waiting for room (the manager is ending; nobody waits
    /// for it), at most [`LAST_REPORTS_WAIT`].
    async fn hand_over(mut self) {
        let sends = async {
            while let Some(t) = self.backlog.pop_front() {
                if self.tx.send(t).await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(LAST_REPORTS_WAIT, sends).await.is_err() {
            tracing::error!("sandbox transitions lost: the session did not take them at the end");
        }
    }

    /// Sends waiting transitions, oldest first, while the channel has room.
    fn flush(&mut self) {
        while let Some(t) = self.backlog.front().cloned() {
            match self.tx.try_send(t) {
                Ok(()) => {
                    self.backlog.pop_front();
                }
                Err(mpsc::error::TrySendError::Full(_)) => return,
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    // The session is gone: nobody will log these.
                    self.backlog.clear();
                    return;
                }
            }
        }
    }
}

/// The CA bundle's file name, next to the proxy socket (bound at
/// [`outboard_egress::SANDBOX_CA_BUNDLE`]).
const CA_BUNDLE_FILE: &str = "ca-bundle.pem";

pub struct Manager {
    config: SandboxConfig,
    workspace: PathBuf,
    /// The unsafe host mode's private dir for the working-directory file.
    scratch: Option<tempfile::TempDir>,
    /// The session's network proxy and the private directory of its socket: made with the
    /// first sandbox, kept for the session (one byte budget across sandbox restarts).
    proxy: Option<(outboard_egress::ProxyHandle, tempfile::TempDir)>,
    state: SandboxState,
    instance: Option<Instance>,
    /// When the last command ended (or the sandbox started).
    idle_since: Instant,
    /// Limit hits seen after the last command (a background fork bomb shows up later).
    hits: Hits,
    reports: Option<Reports<SandboxTransition>>,
    /// Background commands, and where their starts and ends go (the session's log).
    jobs: Jobs,
    job_reports: Option<Reports<JobReport>>,
    /// This manager's id in the live-sandbox pool, and a weak handle others use to stop it.
    member: u64,
    myself: mpsc::WeakSender<Request>,
    /// The state, for the workspace watch ([`crate::watch`]), which runs only while `running`.
    state_tx: watch::Sender<SandboxState>,
}

/// How long `KillShell` waits for the agent to report the job's end.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Characters of a shell id: `bash_` and 8 hex digits, short for the model to repeat, random so
/// ids of a sandbox before a restart are never reused.
const SHELL_ID_LEN: usize = 13;

/// Whether the state machine has the edge `from → to`.
fn allowed(from: SandboxState, to: SandboxState) -> bool {
    use SandboxState::*;
    matches!(
        (from, to),
        (None | Dead | Stopped, Provisioning | Waiting)
            | (Waiting, Provisioning | Stopped)
            | (Provisioning, Running | Dead)
            | (Running, Suspended | Dead | Stopped)
            | (Suspended, Running | Dead | Stopped)
            | (Dead, Stopped)
    )
}

enum Wake {
    Request(Option<Request>),
    Idle,
    Died(String),
    /// The agent sent a frame unasked: a background job's output or end.
    Frame(outboard_sandbox_init::protocol::FromAgent),
    /// The transition channel has room for the backlog.
    Room,
}

impl Manager {
    pub fn new(
        config: SandboxConfig,
        workspace: PathBuf,
        transitions: Option<mpsc::Sender<SandboxTransition>>,
        jobs: Option<mpsc::Sender<JobReport>>,
        lost: Vec<(String, String)>,
        myself: mpsc::WeakSender<Request>,
        state_tx: watch::Sender<SandboxState>,
    ) -> Self {
        let mut table = Jobs::default();
        table.adopt_lost(lost);
        Manager {
            member: crate::pool::PoolTicket::member_id(),
            myself,
            config,
            workspace,
            scratch: None,
            proxy: None,
            state: SandboxState::None,
            instance: None,
            idle_since: Instant::now(),
            hits: Hits::default(),
            reports: transitions.map(Reports::new),
            jobs: table,
            job_reports: jobs.map(Reports::new),
            state_tx,
        }
    }

    /// The one place the state changes.
    fn enter(&mut self, to: SandboxState, took: Duration) {
        self.enter_with(to, took, None);
    }

    /// [`Manager::enter`], with the place in the org's queue that `waiting` reports.
    fn enter_with(&mut self, to: SandboxState, took: Duration, queue: Option<SandboxQueue>) {
        let from = self.state;
        if !allowed(from, to) {
            tracing::error!(?from, ?to, "sandbox transition outside the state machine");
        }
        self.state = to;
        self.state_tx.send_replace(to);
        if let Some(metrics) = &self.config.metrics {
            metrics.transition(from, to, took);
        }
        if let Some(pool) = &self.config.pool {
            pool.update(self.member, to);
        }
        let ms = took.as_secs_f64() * 1000.0;
        tracing::debug!(?from, ?to, ms, workspace = %self.workspace.display(), "sandbox transition");
        if let Some(reports) = &mut self.reports {
            reports.push(SandboxTransition { state: to, ms, queue });
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        let c = &self.config;
        match self.state {
            // A background job is work: the sandbox is neither frozen nor stopped under it, and
            // the idle time counts from its end.
            SandboxState::Running if self.jobs.running() > 0 => None,
            SandboxState::Running => Some(self.idle_since + c.idle_freeze.min(c.idle_stop)),
            SandboxState::Suspended => Some(self.idle_since + c.idle_stop),
            _ => None,
        }
    }

    pub async fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        loop {
            let wake = self.next_wake();
            let event = tokio::select! {
                req = rx.recv() => Wake::Request(req),
                _ = sleep_opt(wake) => Wake::Idle,
                event = next_event(self.instance.as_mut()) => match event {
                    Event::Exited(why) => Wake::Died(why),
                    Event::Frame(frame) => Wake::Frame(frame),
                },
                () = room(self.reports.as_ref()) => Wake::Room,
                () = room(self.job_reports.as_ref()) => Wake::Room,
            };
            match event {
                Wake::Request(None) => {
                    self.stop().await;
                    self.report_jobs();
                    if let Some(reports) = self.reports.take() {
                        reports.hand_over().await;
                    }
                    if let Some(reports) = self.job_reports.take() {
                        reports.hand_over().await;
                    }
                    return;
                }
                Wake::Request(Some(req)) => self.handle(req).await,
                Wake::Idle => self.on_idle().await,
                Wake::Died(why) => {
                    tracing::warn!(workspace = %self.workspace.display(), "{why}");
                    self.bury().await;
                }
                Wake::Frame(frame) => {
                    let was_running = self.jobs.running();
                    self.jobs.frame(&frame);
                    if self.jobs.running() < was_running {
                        self.idle_since = Instant::now();
                    }
                }
                Wake::Room => {
                    if let Some(reports) = &mut self.reports {
                        reports.flush();
                    }
                    if let Some(reports) = &mut self.job_reports {
                        reports.flush();
                    }
                }
            }
            self.report_jobs();
        }
    }

    /// Hands the jobs' starts and ends to the session.
    fn report_jobs(&mut self) {
        let reports = self.jobs.take_reports();
        if let Some(out) = &mut self.job_reports {
            for report in reports {
                out.push(report);
            }
        }
    }

    async fn spawn_job(&mut self, command: &str, read_only: bool) -> Result<String, SandboxError> {
        if self.jobs.running() >= MAX_RUNNING_JOBS {
            return Err(SandboxError::Refused(format!(
                "{MAX_RUNNING_JOBS} background commands are running already: read their output \
                 with BashOutput and stop those you no longer need with KillShell"
            )));
        }
        // A background command's start waits in the org's queue like a command (bounded).
        self.ensure_running(&CancellationToken::new()).await?;
        let Some(instance) = self.instance.as_mut() else {
            return Err(SandboxError::Start("the sandbox is not running".into()));
        };
        match instance.spawn_job(command, read_only, &mut self.jobs).await {
            Ok(agent_id) => {
                let mut shell_id = outboard_base::util::new_id("bash");
                shell_id.truncate(SHELL_ID_LEN);
                self.jobs.add(shell_id.clone(), agent_id, command.to_owned());
                Ok(shell_id)
            }
            Err(ExecFailure::Refused(message)) => Err(SandboxError::Refused(message)),
            Err(ExecFailure::Lost(why)) => {
                self.bury().await;
                Err(SandboxError::Died(why))
            }
        }
    }

    async fn kill_job(&mut self, shell_id: &str) -> Result<bool, SandboxError> {
        let Some(agent_id) = self.jobs.agent_id(shell_id) else { return Ok(false) };
        let Some(instance) = self.instance.as_mut() else { return Ok(false) };
        if let Err(ExecFailure::Lost(why) | ExecFailure::Refused(why)) =
            instance.kill_job(agent_id).await
        {
            self.bury().await;
            return Err(SandboxError::Died(why));
        }
        // The end follows from the agent; wait for it so the caller's next read sees `killed`.
        let deadline = Instant::now() + KILL_WAIT;
        while self.jobs.agent_id(shell_id).is_some() {
            let Some(instance) = self.instance.as_mut() else { break };
            match tokio::time::timeout_at(deadline, instance.next_event()).await {
                Ok(Event::Frame(frame)) => {
                    self.jobs.frame(&frame);
                }
                Ok(Event::Exited(why)) => {
                    tracing::warn!("{why}");
                    self.bury().await;
                }
                Err(_) => break,
            }
        }
        if self.jobs.running() == 0 {
            self.idle_since = Instant::now();
        }
        Ok(true)
    }

    async fn handle(&mut self, req: Request) {
        match req {
            Request::Exec { command, read_only, timeout, cancel, output, reply } => {
                let result = self.exec(&command, read_only, timeout, &output, &cancel).await;
                let _ = reply.send(result);
                self.yield_to_waiters().await;
            }
            Request::State(reply) => {
                let _ = reply.send(self.state);
            }
            Request::Pid(reply) => {
                let _ = reply.send(self.instance.as_ref().and_then(Instance::init_pid));
            }
            Request::Cwd(reply) => {
                let _ = reply.send(self.instance.as_ref().and_then(|i| i.cwd().map(str::to_owned)));
            }
            Request::Stop(reply) => {
                self.stop().await;
                let _ = reply.send(());
            }
            Request::StopFor(why, reply) => {
                self.jobs.note_running(&why);
                self.stop().await;
                let _ = reply.send(());
            }
            Request::Spawn { command, read_only, reply } => {
                let _ = reply.send(self.spawn_job(&command, read_only).await);
            }
            Request::ReadJob { shell_id, reply } => {
                let _ = reply.send(self.jobs.read(&shell_id));
            }
            Request::KillJob { shell_id, reply } => {
                let _ = reply.send(self.kill_job(&shell_id).await);
            }
            Request::Untold(reply) => {
                let _ = reply.send(self.jobs.untold());
            }
            // Handled between commands, so never in the middle of one.
            Request::Yield => self.yield_to_waiters().await,
        }
    }

    async fn on_idle(&mut self) {
        let idle = self.idle_since.elapsed();
        match self.state {
            SandboxState::Running if idle >= self.config.idle_stop => self.stop().await,
            SandboxState::Running => self.freeze().await,
            SandboxState::Suspended => self.stop().await,
            _ => {}
        }
    }

    /// Freezes the sandbox now when other sessions of the org wait for a live one and it is
    /// idle (between commands, no background job): the first waiter takes its place instead of
    /// waiting for the idle timer; thawing it again would cost under a millisecond, so a
    /// session whose next command comes soon loses little when nobody takes it.
    async fn yield_to_waiters(&mut self) {
        let waiters = self.config.pool.as_ref().is_some_and(|p| p.has_waiters());
        if waiters && self.state == SandboxState::Running && self.jobs.running() == 0 {
            self.freeze().await;
        }
    }

    /// Freezes the running sandbox (`suspended`).
    async fn freeze(&mut self) {
        let started = Instant::now();
        let Some(instance) = self.instance.as_mut() else { return };
        match instance.freeze().await {
            Ok(()) => self.enter(SandboxState::Suspended, started.elapsed()),
            Err(e) => {
                // Could not freeze: keep it running, and try again after another idle period
                // rather than spinning.
                tracing::warn!("could not freeze the sandbox: {e}");
                self.idle_since = Instant::now();
            }
        }
    }

    /// The sandbox died: clean up what is left and enter `dead`.
    async fn bury(&mut self) {
        if let Some(instance) = self.instance.take() {
            instance.kill().await;
        }
        self.jobs.all_killed();
        if matches!(
            self.state,
            SandboxState::Running | SandboxState::Suspended | SandboxState::Provisioning
        ) {
            self.enter(SandboxState::Dead, Duration::ZERO);
        }
    }

    /// Kills the sandbox (if any) and enters `stopped`; the workspace stays.
    async fn stop(&mut self) {
        let started = Instant::now();
        if let Some(instance) = self.instance.take() {
            instance.kill().await;
        }
        self.jobs.all_killed();
        if matches!(
            self.state,
            SandboxState::Running | SandboxState::Suspended | SandboxState::Dead
        ) {
            self.enter(SandboxState::Stopped, started.elapsed());
        }
    }

    async fn provision(&mut self, cancel: &CancellationToken) -> Result<(), SandboxError> {
        let started = Instant::now();
        self.admit(cancel).await?;
        self.enter(SandboxState::Provisioning, Duration::ZERO);
        let result = self.start_instance().await;
        match result {
            Ok(instance) => {
                self.hits = instance.cgroup().map(|c| c.hits()).unwrap_or_default();
                self.instance = Some(instance);
                self.idle_since = Instant::now();
                self.enter(SandboxState::Running, started.elapsed());
                Ok(())
            }
            Err(e) => {
                self.enter(SandboxState::Dead, Duration::ZERO);
                Err(e)
            }
        }
    }

    /// Whether this sandbox holds a slot of its org's quota (always, without a quota).
    fn counted(&self) -> bool {
        self.config.pool.as_ref().is_none_or(|p| p.holds(self.member))
    }

    /// Takes a slot of the org's live-sandbox quota: at once, or after waiting in the org's
    /// queue (entering `waiting`, so the session shows it); `stopped` when the wait fails.
    async fn admit(&mut self, cancel: &CancellationToken) -> Result<(), SandboxError> {
        let Some(pool) = self.config.pool.clone() else { return Ok(()) };
        let victim = match pool.request(self.member, self.myself.clone()).await? {
            Admission::Admitted(victim) => victim,
            Admission::Queued(waiting) => {
                let place = waiting.place();
                let queue = SandboxQueue { position: place.position, limit: place.limit };
                let since = Instant::now();
                self.enter_with(SandboxState::Waiting, Duration::ZERO, Some(queue));
                match waiting.granted(cancel).await {
                    Ok(victim) => victim,
                    Err(e) => {
                        self.enter(SandboxState::Stopped, since.elapsed());
                        return Err(e);
                    }
                }
            }
        };
        pool.evict(victim).await;
        Ok(())
    }

    /// Waits for the server's sandbox check, then starts the sandbox; a start that fails
    /// although the check passed gets the check's explanation when the host changed since.
    async fn start_instance(&mut self) -> Result<Instance, SandboxError> {
        let Some(preflight) = self.config.preflight.clone() else {
            return self.launch_instance().await;
        };
        preflight.wait().await?;
        match self.launch_instance().await {
            Ok(instance) => Ok(instance),
            Err(e) => Err(preflight.explain(e).await),
        }
    }

    async fn launch_instance(&mut self) -> Result<Instance, SandboxError> {
        let agent_exe = resolve_agent_exe(&self.config)?;
        let workspace = std::fs::canonicalize(&self.workspace).map_err(|e| {
            SandboxError::Start(format!(
                "the workspace {} is not accessible: {e}",
                self.workspace.display()
            ))
        })?;
        let cwd_file = match self.config.backend {
            Backend::Bwrap => PathBuf::from(outboard_sandbox_init::bwrap::CWD_FILE),
            Backend::UnsafeHost => {
                let scratch = match &mut self.scratch {
                    Some(dir) => dir,
                    slot => {
                        slot.insert(scratch_dir(&self.config, "outboard-host-").map_err(|e| {
                            SandboxError::Start(format!(
                                "could not create a scratch directory: {e}"
                            ))
                        })?)
                    }
                };
                scratch.path().join("cwd")
            }
        };
        let proxy_socket = self.proxy_socket().await?;
        let ca_bundle =
            match (&proxy_socket, self.config.network.as_ref().and_then(|n| n.ca.as_ref())) {
                (Some(socket), Some(_)) => Some(socket.with_file_name(CA_BUNDLE_FILE)),
                _ => None,
            };
        Instance::start(
            &self.config,
            &agent_exe,
            &workspace,
            &cwd_file,
            proxy_socket.as_deref(),
            ca_bundle.as_deref(),
        )
        .await
    }

    /// The host path of the session's proxy socket, starting the proxy on first use; `None`
    /// when the session has no network (or commands run on the host).
    async fn proxy_socket(&mut self) -> Result<Option<PathBuf>, SandboxError> {
        let Some(network) = &self.config.network else { return Ok(None) };
        if self.config.backend != Backend::Bwrap {
            return Ok(None);
        }
        if let Some((proxy, _)) = &self.proxy {
            return Ok(Some(proxy.socket_path().to_path_buf()));
        }
        let dir = scratch_dir(&self.config, "outboard-net-").map_err(|e| {
            SandboxError::Start(format!("could not create the proxy socket's directory: {e}"))
        })?;
        let path = dir.path().join("proxy.sock");
        if let Some(ca) = &network.ca {
            // Next to the socket, in the server's private directory; the sandbox gets a
            // read-only bind of this one file. World-readable: a root server's sandbox runs as
            // an unprivileged uid (it holds certificates only, never the CA's key).
            let bundle = dir.path().join(CA_BUNDLE_FILE);
            let written =
                std::fs::write(&bundle, outboard_egress::ca_bundle_pem(ca)).and_then(|()| {
                    use std::os::unix::fs::PermissionsExt as _;
                    std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o644))
                });
            written.map_err(|e| {
                SandboxError::Start(format!("could not write the sandbox's CA bundle: {e}"))
            })?;
        }
        let proxy =
            outboard_egress::serve(&path, network.clone(), self.config.server_ports.clone())
                .await
                .map_err(|e| SandboxError::Start(e.to_string()))?;
        self.proxy = Some((proxy, dir));
        Ok(Some(path))
    }

    /// Brings the sandbox to `running`: provisions, or thaws and pings. `cancel` ends a wait
    /// in the org's queue.
    async fn ensure_running(&mut self, cancel: &CancellationToken) -> Result<(), SandboxError> {
        if let Some(cg) = self.instance.as_ref().and_then(Instance::cgroup) {
            if cg.hits().pids > self.hits.pids {
                // A background fork bomb filled the process table after its command ended.
                tracing::warn!("the sandbox hit its process limit in the background; replacing it");
                self.bury().await;
            }
        }
        match self.state {
            SandboxState::Running if self.instance.is_some() => Ok(()),
            // Evicted by a waiter of the org while frozen (its stop is on the way): a sandbox
            // that is not counted must not run a command; it is replaced through the quota.
            SandboxState::Suspended if !self.counted() => {
                self.stop().await;
                self.provision(cancel).await
            }
            SandboxState::Suspended => {
                let started = Instant::now();
                let thawed = match self.instance.as_mut() {
                    Some(instance) => match instance.thaw() {
                        Ok(()) => instance.ping().await,
                        Err(e) => Err(ExecFailure::Lost(format!("could not thaw: {e}"))),
                    },
                    None => Err(ExecFailure::Lost("no instance".into())),
                };
                match thawed {
                    Ok(()) => {
                        self.enter(SandboxState::Running, started.elapsed());
                        Ok(())
                    }
                    Err(e) => {
                        // It died while frozen: replace it; the command has not run yet.
                        tracing::warn!(
                            "the suspended sandbox did not come back ({e:?}); replacing it"
                        );
                        self.bury().await;
                        self.provision(cancel).await
                    }
                }
            }
            _ => self.provision(cancel).await,
        }
    }

    async fn exec(
        &mut self,
        command: &str,
        read_only: bool,
        timeout: Duration,
        output: &mpsc::Sender<(OutputStream, String)>,
        cancel: &CancellationToken,
    ) -> Result<ExecResult, SandboxError> {
        self.ensure_running(cancel).await?;
        let Some(instance) = self.instance.as_mut() else {
            return Err(SandboxError::Start("the sandbox is not running".into()));
        };
        let result =
            instance.exec(command, read_only, timeout, output, cancel, &mut self.jobs).await;
        let hits = instance.cgroup().map(|c| c.hits()).unwrap_or_default();
        self.idle_since = Instant::now();
        let finished = match result {
            Ok(finished) => finished,
            Err(ExecFailure::Refused(message)) => return Err(SandboxError::Refused(message)),
            Err(ExecFailure::Lost(why)) => {
                self.bury().await;
                if hits.pids > self.hits.pids {
                    // The agent drowned in a fork bomb: that is the command's failure.
                    self.hits = Hits::default();
                    return Ok(ExecResult {
                        exit_code: None,
                        output: String::new(),
                        timed_out: false,
                        signal: None,
                        failure: Some(pids_failure(self.config.limits.max_processes)),
                    });
                }
                return Err(SandboxError::Died(why));
            }
        };
        let limits = &self.config.limits;
        let mut failure = None;
        if hits.oom > self.hits.oom {
            failure = Some(format!(
                "The sandbox ran out of memory (its limit is {} MiB): the kernel killed the \
                 largest process.",
                limits.memory_bytes >> 20
            ));
        }
        if hits.pids > self.hits.pids {
            failure = Some(pids_failure(limits.max_processes));
            self.bury().await;
        }
        self.hits = hits;
        Ok(ExecResult {
            exit_code: if finished.cancelled || finished.timed_out {
                None
            } else {
                finished.exit_code
            },
            output: finished.output.into_string(),
            timed_out: finished.timed_out,
            signal: finished.signal,
            failure,
        })
    }
}

fn pids_failure(max: u32) -> String {
    format!(
        "The command hit the sandbox's limit of {max} processes (a fork bomb?). The sandbox was \
         restarted: background processes are gone, /workspace is intact."
    )
}

async fn sleep_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the channel has room for a waiting transition (never when none waits).
async fn room<T>(reports: Option<&Reports<T>>) {
    match reports {
        Some(r) if !r.backlog.is_empty() => {
            // The permit is released at once; `flush` then takes the slot with `try_send`
            // (this manager is the channel's only sender). A closed channel resolves too, and
            // `flush` clears the backlog.
            let _ = r.tx.reserve().await;
        }
        _ => std::future::pending().await,
    }
}

async fn next_event(instance: Option<&mut Instance>) -> Event {
    match instance {
        Some(instance) => instance.next_event().await,
        None => std::future::pending().await,
    }
}
