//! One live sandbox: the `bwrap` process with the agent inside, the framed pipes to it, and
//! its cgroup. Starting, running a command, pinging, freezing, thawing and killing; the
//! lifecycle decisions are the manager's (the manager).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use outboard_shared::OutputStream;
use rustix::process::{Pid, Signal};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use outboard_sandbox_init::bwrap;
use outboard_sandbox_init::error::SandboxError;
use outboard_sandbox_init::init::AgentConfig;
use outboard_sandbox_init::launch::{LaunchConfig, UidLease, LAUNCH_ARG};
use outboard_sandbox_init::output::CappedOutput;
use outboard_sandbox_init::protocol::{
    write_frame, FrameReader, FromAgent, ToAgent, AGENT_ARG, PROTOCOL_VERSION,
};

use crate::cgroup::{Cgroup, Controls};
use crate::config::{Backend, SandboxConfig};
use crate::jobs::Jobs;
use outboard_egress::relay::RelayConfig;

/// How long a new sandbox has to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// How long past its timeout (or a cancel) the agent has to report a command's end before the
/// sandbox is declared hung and killed.
const AGENT_GRACE: Duration = Duration::from_secs(5);

/// How long a thawed agent has to answer a ping.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// A running sandbox.
#[derive(Debug)]
pub struct Instance {
    child: Child,
    stdin: ChildStdin,
    frames: FrameReader<ChildStdout>,
    /// Host pid of the sandbox's PID 1 (the agent).
    init_pid: Option<u32>,
    cgroup: Option<Cgroup>,
    next_id: u64,
    /// The working directory the agent reported after the last command (where the next one
    /// starts); `None` before the first.
    cwd: Option<String>,
    /// The host uid this sandbox runs as, when the server is root (released on drop).
    _uid: Option<UidLease>,
}

/// How a command ended, as the agent reported it.
#[derive(Debug)]
pub struct Finished {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub output: CappedOutput,
}

/// What a live sandbox did between commands.
#[derive(Debug)]
pub enum Event {
    /// A frame the agent sent unasked.
    Frame(FromAgent),
    /// The sandbox is gone: why.
    Exited(String),
}

/// Why a command did not finish normally.
#[derive(Debug)]
pub enum ExecFailure {
    /// The agent refused or could not start it; the sandbox is fine.
    Refused(String),
    /// The sandbox is gone or hung; it must be replaced.
    Lost(String),
}

fn agent_config(
    config: &SandboxConfig,
    workspace: &Path,
    cwd_file: &Path,
    rlimits: bool,
    proxy: Option<RelayConfig>,
    ca_bundle: bool,
) -> AgentConfig {
    let home = workspace.to_string_lossy().into_owned();
    let ulimit_prefix = if rlimits {
        // Without cgroups: address space and processes per command (soft and hard).
        format!(
            "ulimit -v {} -u {} 2>/dev/null; ",
            config.limits.memory_bytes / 1024,
            config.limits.max_processes
        )
    } else {
        String::new()
    };
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), bwrap::SANDBOX_PATH.into()),
        ("HOME".into(), home),
        ("LANG".into(), "C.UTF-8".into()),
        ("TERM".into(), "dumb".into()),
    ];
    if proxy.is_some() {
        env.extend(outboard_egress::proxy_env());
        if let Some(network) = &config.network {
            env.extend(network.env.iter().cloned());
        }
    }
    if ca_bundle {
        env.extend(outboard_egress::ca_env());
    }
    AgentConfig {
        workspace: workspace.to_path_buf(),
        cwd_file: cwd_file.to_path_buf(),
        env,
        ulimit_prefix,
        harden: config.backend == Backend::Bwrap,
        proxy,
    }
}

impl Instance {
    /// Starts a sandbox over `workspace` and waits for the agent's hello. With `proxy_socket`
    /// (the host path of the session's proxy), the socket is bound in and the agent relays
    /// `127.0.0.1:3128` to it; with `ca_bundle` (the host path of the session's CA bundle,
    /// which trusts the org's sandbox CA), it is bound read-only at
    /// [`outboard_egress::SANDBOX_CA_BUNDLE`] and commands are pointed at it.
    pub async fn start(
        config: &SandboxConfig,
        agent_exe: &Path,
        workspace: &Path,
        host_cwd_file: &Path,
        proxy_socket: Option<&Path>,
        ca_bundle: Option<&Path>,
    ) -> Result<Instance, SandboxError> {
        let controls = Controls::get();
        let cgroup = Cgroup::create(controls, &config.limits).map_err(|e| {
            SandboxError::Start(format!("could not create the sandbox's cgroup: {e}"))
        })?;
        let rlimits = !controls.has_limits();
        let mut uid = None;
        let mut cmd = match config.backend {
            Backend::Bwrap => {
                let relay = proxy_socket.map(|_| RelayConfig {
                    port: outboard_egress::PROXY_PORT,
                    socket: outboard_egress::SANDBOX_SOCKET.into(),
                });
                let ac = agent_config(
                    config,
                    Path::new("/workspace"),
                    Path::new(bwrap::CWD_FILE),
                    rlimits,
                    relay,
                    ca_bundle.is_some(),
                );
                let agent_config =
                    serde_json::to_string(&ac).map_err(|e| SandboxError::Start(e.to_string()))?;
                // A root server never gives a sandbox host root: the launcher drops to a
                // per-sandbox unprivileged uid (see `launch`).
                let lease = if rustix::process::geteuid().is_root() {
                    Some(UidLease::take()?)
                } else {
                    None
                };
                let launch = LaunchConfig {
                    bwrap: outboard_sandbox_init::launch::find_bwrap()?,
                    workspace: workspace.to_path_buf(),
                    agent_exe: agent_exe.to_path_buf(),
                    agent_config,
                    // The repository's guard is computed now, at each start, when no process
                    // of this session's sandbox runs: a `.git` swapped for a link by an earlier
                    // one is seen here and not bound (a bind follows links).
                    ro_mounts: if config.protect_git {
                        let mut mounts = config.ro_mounts.clone();
                        mounts.extend(crate::git_guard::read_only_mounts(workspace));
                        mounts
                    } else {
                        config.ro_mounts.clone()
                    },
                    proxy_socket: proxy_socket.map(Path::to_path_buf),
                    ca_bundle: ca_bundle.map(Path::to_path_buf),
                    host_id: lease.as_ref().map(UidLease::id),
                    cgroups: cgroup.as_ref().map(|cg| cg.dirs().to_vec()).unwrap_or_default(),
                    parent: Some(std::process::id()),
                };
                uid = lease;
                let json = serde_json::to_string(&launch)
                    .map_err(|e| SandboxError::Start(e.to_string()))?;
                let mut cmd = Command::new(agent_exe);
                cmd.args([LAUNCH_ARG, &json]);
                cmd
            }
            Backend::UnsafeHost => {
                let ac = agent_config(config, workspace, host_cwd_file, rlimits, None, false);
                let json =
                    serde_json::to_string(&ac).map_err(|e| SandboxError::Start(e.to_string()))?;
                let mut cmd = Command::new(agent_exe);
                cmd.args([AGENT_ARG, &json]).current_dir(workspace);
                cmd
            }
        };
        let spawned = cmd
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some(cg) = cgroup {
                    cg.remove();
                }
                return Err(match (e.kind(), config.backend) {
                    (std::io::ErrorKind::NotFound, Backend::Bwrap) => {
                        SandboxError::Start(bwrap::NOT_FOUND.to_string())
                    }
                    _ => SandboxError::Start(format!("could not spawn the sandbox: {e}")),
                });
            }
        };
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(SandboxError::Start("the sandbox's pipes were not set up".into()));
        };
        let mut instance = Instance {
            init_pid: None,
            child,
            stdin,
            frames: FrameReader::new(stdout),
            cgroup,
            next_id: 0,
            cwd: None,
            _uid: uid,
        };
        let hello = tokio::time::timeout(HELLO_TIMEOUT, instance.frames.next::<FromAgent>()).await;
        match hello {
            Ok(Ok(Some(FromAgent::Hello { version }))) if version == PROTOCOL_VERSION => {}
            Ok(Ok(Some(FromAgent::Hello { version }))) => {
                instance.kill().await;
                return Err(SandboxError::Start(format!(
                    "the sandbox agent {} speaks protocol {version}, this server {PROTOCOL_VERSION}: \
                     rebuild it with the server (a stale binary?)",
                    agent_exe.display()
                )));
            }
            Ok(other) => {
                let said = drain_stderr(stderr).await;
                instance.kill().await;
                let what = match other {
                    Ok(Some(msg)) => format!("an unexpected first message {msg:?}"),
                    Ok(None) => "nothing".into(),
                    Err(e) => format!("a broken frame ({e})"),
                };
                return Err(SandboxError::Start(format!(
                    "the sandbox agent sent {what} instead of its hello; it said: {}",
                    said.trim()
                )));
            }
            Err(_) => {
                instance.kill().await;
                return Err(SandboxError::Start(format!(
                    "the sandbox agent did not say hello within {} s",
                    HELLO_TIMEOUT.as_secs()
                )));
            }
        }
        // The agent's stderr is not read again; it writes there only when it fails.
        drop(stderr);
        let outer = instance.child.id();
        instance.init_pid = match config.backend {
            Backend::Bwrap => outer.and_then(first_child),
            Backend::UnsafeHost => outer,
        };
        // The launcher joined the groups before it became bwrap, so bwrap's whole tree was born
        // in them; the unsafe host agent, spawned directly, is moved in now (it forks only on
        // a command).
        let cgroup = instance.cgroup.as_ref().filter(|_| config.backend == Backend::UnsafeHost);
        if let (Some(cg), Some(pid)) = (cgroup, outer) {
            if let Err(e) = cg.add(pid) {
                instance.kill().await;
                return Err(SandboxError::Start(format!(
                    "could not move the sandbox into its cgroup: {e}"
                )));
            }
        }
        Ok(instance)
    }

    /// Host pid of the sandbox's PID 1.
    pub fn init_pid(&self) -> Option<u32> {
        self.init_pid
    }

    /// Where the agent's next command starts, as it reported after the last one.
    pub fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    /// The sandbox's cgroup, when it has one.
    pub fn cgroup(&self) -> Option<&Cgroup> {
        self.cgroup.as_ref()
    }

    /// Runs one command, sending output chunks to `output` and keeping a capped copy; with
    /// `read_only`, in the sandbox's read-only view (plan mode).
    pub async fn exec(
        &mut self,
        command: &str,
        read_only: bool,
        timeout: Duration,
        output: &mpsc::Sender<(OutputStream, String)>,
        cancel: &CancellationToken,
        jobs: &mut Jobs,
    ) -> Result<Finished, ExecFailure> {
        self.next_id += 1;
        let id = self.next_id;
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let exec = ToAgent::Exec { id, command: command.to_string(), timeout_ms, read_only };
        write_frame(&mut self.stdin, &exec).await.map_err(|e| lost("taking the command", &e))?;
        let mut kept = CappedOutput::default();
        let mut cancelled = false;
        let backstop = tokio::time::sleep(timeout.saturating_add(AGENT_GRACE));
        tokio::pin!(backstop);
        loop {
            tokio::select! {
                frame = self.frames.next::<FromAgent>() => match frame {
                    Ok(Some(FromAgent::Output { id: got, stream, text })) if got == id => {
                        kept.push(&text);
                        if output.send((stream, text)).await.is_err() && !cancelled {
                            // Nobody waits for this command any more.
                            cancelled = true;
                            let _ = write_frame(&mut self.stdin, &ToAgent::Cancel { id }).await;
                        }
                    }
                    Ok(Some(FromAgent::Done { id: got, exit_code, signal, timed_out, cwd })) if got == id => {
                        if cwd.is_some() {
                            self.cwd = cwd;
                        }
                        return Ok(Finished { exit_code, signal, timed_out, cancelled, output: kept });
                    }
                    Ok(Some(FromAgent::Error { id: Some(got), message })) if got == id => {
                        return Err(ExecFailure::Refused(message));
                    }
                    Ok(Some(other)) => {
                        jobs.frame(&other);
                    }
                    Ok(None) => return Err(ExecFailure::Lost("the sandbox exited".into())),
                    Err(e) => return Err(lost("reading from the agent", &e)),
                },
                _ = cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    write_frame(&mut self.stdin, &ToAgent::Cancel { id })
                        .await
                        .map_err(|e| lost("cancelling", &e))?;
                    backstop.as_mut().reset(tokio::time::Instant::now() + AGENT_GRACE);
                }
                _ = &mut backstop => {
                    return Err(ExecFailure::Lost(format!(
                        "the sandbox did not report the command's end within {} s of its timeout",
                        AGENT_GRACE.as_secs()
                    )));
                }
            }
        }
    }

    /// Starts `command` as a background job (with `read_only`, in the read-only view); its agent
    /// id. Frames of other jobs that arrive meanwhile go to `jobs`.
    pub async fn spawn_job(
        &mut self,
        command: &str,
        read_only: bool,
        jobs: &mut Jobs,
    ) -> Result<u64, ExecFailure> {
        self.next_id += 1;
        let id = self.next_id;
        let spawn = ToAgent::Spawn { id, command: command.to_string(), read_only };
        write_frame(&mut self.stdin, &spawn).await.map_err(|e| lost("starting a job", &e))?;
        let wait = async {
            loop {
                match self.frames.next::<FromAgent>().await {
                    Ok(Some(FromAgent::Spawned { id: got })) if got == id => return Ok(id),
                    Ok(Some(FromAgent::Error { id: Some(got), message })) if got == id => {
                        return Err(ExecFailure::Refused(message));
                    }
                    Ok(Some(other)) => {
                        jobs.frame(&other);
                    }
                    Ok(None) => return Err(ExecFailure::Lost("the sandbox exited".into())),
                    Err(e) => return Err(lost("waiting for the job to start", &e)),
                }
            }
        };
        tokio::time::timeout(PING_TIMEOUT, wait)
            .await
            .map_err(|_| ExecFailure::Lost("the sandbox did not start the job".into()))?
    }

    /// Asks the agent to kill background job `id` (its end follows as a frame).
    pub async fn kill_job(&mut self, id: u64) -> Result<(), ExecFailure> {
        write_frame(&mut self.stdin, &ToAgent::KillJob { id })
            .await
            .map_err(|e| lost("killing a job", &e))
    }

    /// Between commands: the next frame the agent sends unasked (a job's output or end), or
    /// the sandbox's exit. Cancel-safe.
    pub async fn next_event(&mut self) -> Event {
        let frame = tokio::select! {
            frame = self.frames.next::<FromAgent>() => frame,
            status = self.child.wait() => return Event::Exited(exit_reason(status)),
        };
        match frame {
            Ok(Some(frame)) => Event::Frame(frame),
            Ok(None) => Event::Exited(self.exited().await),
            Err(e) => Event::Exited(format!("the connection to the sandbox broke: {e}")),
        }
    }

    /// Round trip to the agent: proves it is live (after a thaw).
    pub async fn ping(&mut self) -> Result<(), ExecFailure> {
        self.next_id += 1;
        let id = self.next_id;
        write_frame(&mut self.stdin, &ToAgent::Ping { id }).await.map_err(|e| lost("ping", &e))?;
        let wait = async {
            loop {
                match self.frames.next::<FromAgent>().await {
                    Ok(Some(FromAgent::Pong { id: got })) if got == id => return Ok(()),
                    Ok(Some(_)) => {}
                    Ok(None) => return Err(ExecFailure::Lost("the sandbox exited".into())),
                    Err(e) => return Err(lost("waiting for the ping's answer", &e)),
                }
            }
        };
        tokio::time::timeout(PING_TIMEOUT, wait)
            .await
            .map_err(|_| ExecFailure::Lost("the sandbox did not answer a ping".into()))?
    }

    /// Freezes every process of the sandbox.
    pub async fn freeze(&mut self) -> std::io::Result<()> {
        match &self.cgroup {
            Some(cg) if cg.can_freeze() => cg.freeze().await,
            _ => self.signal_all(Signal::STOP),
        }
    }

    /// Thaws every process of the sandbox.
    pub fn thaw(&mut self) -> std::io::Result<()> {
        match &self.cgroup {
            Some(cg) if cg.can_freeze() => cg.thaw(),
            _ => self.signal_all(Signal::CONT),
        }
    }

    /// `SIGSTOP`/`SIGCONT` of the sandbox's whole process tree (no cgroup freezer here).
    fn signal_all(&self, signal: Signal) -> std::io::Result<()> {
        let Some(root) = self.child.id() else { return Ok(()) };
        for pid in descendants(root) {
            if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
                let _ = rustix::process::kill_process(pid, signal);
            }
        }
        Ok(())
    }

    /// Resolves when the sandbox process exits.
    pub async fn exited(&mut self) -> String {
        exit_reason(self.child.wait().await)
    }

    /// Kills the sandbox (every process in it) and removes its cgroup.
    pub async fn kill(mut self) {
        let _ = self.child.start_kill();
        if let Some(pid) = self.init_pid.and_then(|p| i32::try_from(p).ok()).and_then(Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
        if let Some(cg) = self.cgroup.take() {
            // A frozen task acts on its SIGKILL only once thawed; the signal is sent before the
            // thaw so nothing runs in between, and everything else in the group (a process
            // that left the pid namespace's tree) gets one too.
            cg.kill_all();
            let _ = cg.thaw();
            cg.remove();
        } else {
            let _ = self.signal_all(Signal::CONT);
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

fn exit_reason(status: std::io::Result<std::process::ExitStatus>) -> String {
    match status {
        Ok(status) => format!("the sandbox exited ({status})"),
        Err(e) => format!("the sandbox could not be waited for: {e}"),
    }
}

fn lost(doing: &str, e: &std::io::Error) -> ExecFailure {
    ExecFailure::Lost(format!("the connection to the sandbox broke while {doing}: {e}"))
}

async fn drain_stderr(mut stderr: ChildStderr) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), stderr.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// The first child of `pid` (bwrap's: the sandbox's PID 1).
fn first_child(pid: u32) -> Option<u32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    if let Ok(text) = std::fs::read_to_string(path) {
        if let Some(first) = text.split_whitespace().next().and_then(|p| p.parse().ok()) {
            return Some(first);
        }
    }
    parents().into_iter().find(|&(_, ppid)| ppid == pid).map(|(p, _)| p)
}

/// Every process's `(pid, ppid)`.
fn parents() -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect()
}

/// The parent pid of `pid`, from `/proc/PID/stat`; `None` once it is gone.
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `root` and all its descendants.
fn descendants(root: u32) -> Vec<u32> {
    let all = parents();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(all.iter().filter(|&&(_, ppid)| ppid == p).map(|&(c, _)| c));
        i += 1;
    }
    out
}
