//! The in-sandbox agent: PID 1 of the sandbox's pid namespace, speaking [`crate::protocol`] on
//! its stdin/stdout.
//!
//! It ships inside our own binaries (`outboard-server __sandbox-agent CONFIG` and
//! `outboard __sandbox-agent CONFIG`, dispatched by [`main_if_agent`] at the top of each `main`)
//! and is bound read-only into the sandbox, so there is no second artefact to install or version.
//!
//! What it does, and why this way:
//! - Runs each command as `bash -c` in its own process group, stdin `/dev/null`, stdout and
//!   stderr on fresh pipes streamed back as [`FromAgent::Output`] frames.
//! - The working directory persists: the script starts with an `EXIT` trap that writes `pwd`
//!   into a private file, read after the command. (Passing an extra fd would need `pre_exec`,
//!   which is `unsafe`.)
//! - A command is done when its `bash` exits, not when its pipes close: a background process
//!   (`server &`) keeps the pipes open for as long as it lives. On exit the pipes are drained of
//!   what is already buffered (non-blocking reads), then handed to a task that keeps reading and
//!   discards, so a background process that logs never meets `EPIPE`.
//! - It is PID 1 (bwrap `--as-pid-1`): orphans are reparented to it, and it reaps every child
//!   with `waitpid(-1)` on `SIGCHLD`. That is why commands are spawned with `std::process` (which
//!   never reaps) rather than `tokio::process` (whose own reaping would race ours). Chosen over
//!   bwrap's own init + the agent as its child: one process less per sandbox, and the agent sees
//!   every exit status directly.
//! - Timeout and cancel kill the command's process group and, when the agent is PID 1, every
//!   process that appeared in the namespace since the command started (a `setsid` daemon of a
//!   timed-out command goes too); background processes of earlier commands stay.
//! - Background jobs ([`ToAgent::Spawn`]) run like commands, in their own process group, with
//!   no timeout; a task per job reads its pipes and hands output to the main loop over a bounded
//!   channel (a job that writes faster than the server takes it waits on its pipe). The job's
//!   end is sent unsolicited ([`FromAgent::JobDone`]) once its `bash` exited and its pipes are
//!   drained, or [`JOB_PIPE_GRACE`] after the exit when a process it left behind holds them
//!   open. A foreground command's timeout spares the jobs' process groups.
//! - When its stdin closes (the server went away), it exits, and the kernel kills everything
//!   in the namespace with it.
//! - A command or job marked `read_only` (plan mode) runs in the read-only view
//!   ([`crate::view`]), made by a holder process forked before the seccomp filter; when the view
//!   could not be made, such a command fails with the reason (in the unsafe host mode, which has
//!   no namespaces, it runs as any other).
//! - For a session with network it also relays `127.0.0.1:3128` to the server's proxy socket
//!   (`outboard_egress::relay`), on the same thread: the relay only copies bytes.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use outboard_shared::OutputStream;
use rustix::process::{Pid, Signal, WaitOptions};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::output::Utf8Stream;
use crate::protocol::{write_frame, FrameReader, FromAgent, ToAgent, AGENT_ARG, PROTOCOL_VERSION};
use crate::view::View;

/// Read size of each pipe read; small enough to stream promptly.
const READ_CHUNK: usize = 8192;

/// Background jobs running at once. The server keeps to its own lower cap
/// (the server's job table, `MAX_RUNNING_JOBS`); this one only stops a confused server from making the
/// agent hold pipes and reader tasks without end.
const MAX_AGENT_JOBS: usize = 64;

/// Messages from the jobs' reader tasks queued for the main loop: a few chunks per job; when it
/// is full the readers wait, so the jobs block on their pipes, never the agent's memory.
const JOB_MSG_QUEUE: usize = 64;

/// How long after a job's `bash` exited its pipes may stay open before its end is reported: a
/// process it started in the background may hold them for as long as it lives, and the job is
/// over when its shell is.
const JOB_PIPE_GRACE: Duration = Duration::from_millis(200);

/// A background job's state in the main loop.
struct BgJob {
    pid: Pid,
    /// Exit code and signal, once its `bash` was reaped.
    exit: Option<(Option<i32>, Option<i32>)>,
    /// Its pipes may still hold output.
    open: bool,
}

/// What a job's reader task tells the main loop.
enum JobMsg {
    Output {
        id: u64,
        stream: OutputStream,
        text: String,
    },
    /// Both pipes reached their end.
    Eof {
        id: u64,
    },
    /// [`JOB_PIPE_GRACE`] passed since the job's exit.
    Grace {
        id: u64,
    },
}

/// How the server configures the agent (JSON, the argument after [`AGENT_ARG`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentConfig {
    /// The first working directory, and the fallback when the tracked one disappears.
    pub workspace: PathBuf,
    /// Where the `EXIT` trap writes the working directory (a private, writable place).
    pub cwd_file: PathBuf,
    /// The commands' whole environment.
    pub env: Vec<(String, String)>,
    /// Shell prefix setting rlimits (`ulimit …;`) where cgroups are missing; empty otherwise.
    pub ulimit_prefix: String,
    /// Install the seccomp filter ([`crate::seccomp`]) and make the agent non-dumpable before
    /// serving (the bubblewrap backend; the unsafe host mode changes nothing of the host's).
    #[serde(default)]
    pub harden: bool,
    /// Relay `127.0.0.1:PORT` to the server's proxy socket (a session with network).
    #[serde(default)]
    pub proxy: Option<outboard_egress::relay::RelayConfig>,
}

/// Runs the agent when the process was started as `<binary> __sandbox-agent CONFIG`; returns
/// `None` otherwise so `main` goes on normally. Call it first thing in `main`.
pub fn main_if_agent() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    let first = args.next()?;
    if first != OsStr::new(AGENT_ARG) {
        return crate::launch::main_if_launcher(&first);
    }
    let config =
        args.next().and_then(|a| serde_json::from_str::<AgentConfig>(&a.to_string_lossy()).ok());
    let Some(config) = config else {
        eprintln!("outboard sandbox agent: expected a JSON configuration after {AGENT_ARG}");
        return Some(ExitCode::from(2));
    };
    // The agent's own environment is bwrap's `PWD=/workspace` alone (bwrap sets it after any
    // `--unsetenv`), and nothing reads it: every command gets exactly `config.env`, and
    // `harden` makes `/proc/1/environ` unreadable to commands. (Re-executing with an empty
    // environment only to empty that unreadable file cost a whole exec of this binary, about
    // 1 ms, on every cold start.)
    let mut view = None;
    if config.harden {
        match harden(&config) {
            Ok(made) => view = Some(made),
            Err(e) => {
                eprintln!("outboard sandbox agent: {e}");
                return Some(ExitCode::from(1));
            }
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("outboard sandbox agent: cannot start the runtime: {e}");
            return Some(ExitCode::from(1));
        }
    };
    match runtime.block_on(serve(config, view)) {
        Ok(()) => Some(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("outboard sandbox agent: {e}");
            Some(ExitCode::from(1))
        }
    }
}

/// The read-only view as the agent has it: `None` in the unsafe host mode (no view: read-only
/// commands run as any other), the reason when it could not be made (they fail).
type ViewSlot = Option<Result<View, String>>;

/// Makes the agent non-dumpable (its `/proc/1/*`, pipes included, become inaccessible to the
/// commands, and it cannot be ptraced even where `ptrace` is allowed), forks the read-only
/// view's holder (which inherits that) and installs the seccomp filter, while the process
/// still has one thread.
fn harden(config: &AgentConfig) -> Result<Result<View, String>, String> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| format!("cannot make the agent non-dumpable: {e}"))?;
    let view = View::start(&config.env).map_err(|e| e.to_string());
    crate::seccomp::install().map_err(|e| format!("cannot install the seccomp filter: {e}"))?;
    Ok(view)
}

/// The command being run.
struct Running {
    id: u64,
    pid: Pid,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    out_dec: Utf8Stream,
    err_dec: Utf8Stream,
    deadline: Instant,
    timed_out: bool,
    killed: bool,
    /// Pids alive in the namespace when the command started (only when the agent is PID 1).
    before: Option<HashSet<i32>>,
}

async fn serve(config: AgentConfig, view: ViewSlot) -> std::io::Result<()> {
    let stdin = std::io::stdin().as_fd().try_clone_to_owned()?;
    let stdout = std::io::stdout().as_fd().try_clone_to_owned()?;
    let mut frames = FrameReader::new(pipe::Receiver::from_owned_fd(stdin)?);
    let mut out = pipe::Sender::from_owned_fd(stdout)?;
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
    let is_init = rustix::process::getpid().as_raw_nonzero().get() == 1;
    if !is_init {
        // Outside a pid namespace (the unsafe host mode): still adopt orphans, so they are
        // reaped here rather than by the host's init.
        let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    }
    if let Some(relay) = &config.proxy {
        // Listening before the hello: the first command finds the proxy up.
        let listener = outboard_egress::relay::bind(relay).map_err(|e| {
            std::io::Error::other(format!("cannot listen on 127.0.0.1:{}: {e}", relay.port))
        })?;
        tokio::spawn(outboard_egress::relay::relay(
            listener,
            relay.socket.clone(),
            outboard_egress::relay::MAX_RELAYS,
        ));
    }
    write_frame(&mut out, &FromAgent::Hello { version: PROTOCOL_VERSION }).await?;

    let mut cwd = config.workspace.clone();
    let mut current: Option<Running> = None;
    let mut jobs: HashMap<u64, BgJob> = HashMap::new();
    let (job_tx, mut job_rx) = mpsc::channel::<JobMsg>(JOB_MSG_QUEUE);
    let (mut out_buf, mut err_buf) = (vec![0u8; READ_CHUNK], vec![0u8; READ_CHUNK]);
    loop {
        let deadline = current.as_ref().filter(|r| !r.killed).map(|r| r.deadline);
        let (cur_out, cur_err) = match current.as_mut() {
            Some(r) => (r.stdout.as_mut(), r.stderr.as_mut()),
            None => (None, None),
        };
        tokio::select! {
            frame = frames.next::<ToAgent>() => match frame {
                Ok(Some(ToAgent::Ping { id })) => write_frame(&mut out, &FromAgent::Pong { id }).await?,
                Ok(Some(ToAgent::Exec { id, command, timeout_ms, read_only })) => {
                    if current.is_some() {
                        let message = "a command is already running".to_string();
                        write_frame(&mut out, &FromAgent::Error { id: Some(id), message }).await?;
                    } else {
                        if !cwd.is_dir() {
                            cwd = config.workspace.clone();
                        }
                        let view = in_view(&view, read_only);
                        match start(&config, &cwd, id, &command, timeout_ms, is_init, view) {
                            Ok(run) => current = Some(run),
                            Err(e) => {
                                let message = format!("could not start bash: {e}");
                                write_frame(&mut out, &FromAgent::Error { id: Some(id), message }).await?;
                            }
                        }
                    }
                }
                Ok(Some(ToAgent::Spawn { id, command, read_only })) => {
                    if jobs.len() >= MAX_AGENT_JOBS {
                        let message = format!("{MAX_AGENT_JOBS} background jobs are running already");
                        write_frame(&mut out, &FromAgent::Error { id: Some(id), message }).await?;
                    } else {
                        if !cwd.is_dir() {
                            cwd = config.workspace.clone();
                        }
                        let view = in_view(&view, read_only);
                        match start_job(&config, &cwd, id, &command, job_tx.clone(), view) {
                            Ok(pid) => {
                                jobs.insert(id, BgJob { pid, exit: None, open: true });
                                write_frame(&mut out, &FromAgent::Spawned { id }).await?;
                            }
                            Err(e) => {
                                let message = format!("could not start bash: {e}");
                                write_frame(&mut out, &FromAgent::Error { id: Some(id), message }).await?;
                            }
                        }
                    }
                }
                Ok(Some(ToAgent::KillJob { id })) => {
                    if let Some(job) = jobs.get(&id).filter(|j| j.exit.is_none()) {
                        let _ = rustix::process::kill_process_group(job.pid, Signal::KILL);
                    }
                }
                Ok(Some(ToAgent::Cancel { id })) => {
                    if let Some(run) = current.as_mut().filter(|r| r.id == id) {
                        kill_command(run, &job_groups(&jobs));
                    }
                }
                Ok(None) | Err(_) => {
                    if let Some(run) = current.as_mut() {
                        kill_command(run, &job_groups(&jobs));
                    }
                    return Ok(());
                }
            },
            Some(msg) = job_rx.recv() => {
                let id = match msg {
                    JobMsg::Output { id, stream, text } => {
                        send_output(&mut out, id, stream, text).await?;
                        continue;
                    }
                    JobMsg::Eof { id } | JobMsg::Grace { id } => id,
                };
                if let Some(job) = jobs.get_mut(&id) {
                    job.open = false;
                }
                job_done(&mut jobs, id, &mut out).await?;
            }
            _ = sigchld.recv() => {
                let reaped = reap();
                for (pid, status) in &reaped {
                    let Some((&id, job)) = jobs.iter_mut().find(|(_, j)| j.pid == *pid) else {
                        continue;
                    };
                    job.exit = Some((status.exit_status(), status.terminating_signal()));
                    if job.open {
                        let tx = job_tx.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(JOB_PIPE_GRACE).await;
                            let _ = tx.send(JobMsg::Grace { id }).await;
                        });
                    }
                    job_done(&mut jobs, id, &mut out).await?;
                }
                let watched = current.as_ref().map(|r| r.pid);
                let finished = reaped.iter().find(|(pid, _)| Some(*pid) == watched).map(|(_, s)| *s);
                // Only the foreground's own end takes it: any other child's end (a background
                // job's, an orphan's) leaves it running. (Taking it first and matching after
                // dropped the running command, pipes and all, whenever a job ended during it.)
                let ended = if finished.is_some() { current.take() } else { None };
                if let (Some(status), Some(mut run)) = (finished, ended) {
                    finish(&mut run, &mut out).await?;
                    if let Ok(dir) = std::fs::read_to_string(&config.cwd_file) {
                        let dir = PathBuf::from(dir.trim_end_matches('\n'));
                        if dir.is_absolute() {
                            cwd = dir;
                        }
                    }
                    let done = FromAgent::Done {
                        id: run.id,
                        exit_code: status.exit_status(),
                        signal: status.terminating_signal(),
                        timed_out: run.timed_out,
                        cwd: Some(cwd.to_string_lossy().into_owned()),
                    };
                    write_frame(&mut out, &done).await?;
                }
            }
            read = read_opt(cur_out, &mut out_buf) => {
                if let Some(run) = current.as_mut() {
                    match read {
                        Ok(n) if n > 0 => {
                            let text = run.out_dec.push(&out_buf[..n]);
                            send_output(&mut out, run.id, OutputStream::Stdout, text).await?;
                        }
                        _ => run.stdout = None,
                    }
                }
            }
            read = read_opt(cur_err, &mut err_buf) => {
                if let Some(run) = current.as_mut() {
                    match read {
                        Ok(n) if n > 0 => {
                            let text = run.err_dec.push(&err_buf[..n]);
                            send_output(&mut out, run.id, OutputStream::Stderr, text).await?;
                        }
                        _ => run.stderr = None,
                    }
                }
            }
            _ = sleep_opt(deadline) => {
                if let Some(run) = current.as_mut() {
                    run.timed_out = true;
                    kill_command(run, &job_groups(&jobs));
                }
            }
        }
    }
}

async fn read_opt(r: Option<&mut pipe::Receiver>, buf: &mut [u8]) -> std::io::Result<usize> {
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn sleep_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn send_output(
    out: &mut pipe::Sender,
    id: u64,
    stream: OutputStream,
    text: String,
) -> std::io::Result<()> {
    if text.is_empty() {
        return Ok(());
    }
    write_frame(out, &FromAgent::Output { id, stream, text }).await
}

/// Where a command runs: `None` the agent's own view, `Some` the read-only one (or the reason
/// it is missing).
type Where<'v> = Option<Result<&'v View, &'v str>>;

/// Where a command marked `read_only` or not runs.
fn in_view(view: &ViewSlot, read_only: bool) -> Where<'_> {
    match view {
        Some(made) if read_only => Some(made.as_ref().map_err(String::as_str)),
        _ => None,
    }
}

fn start(
    config: &AgentConfig,
    cwd: &Path,
    id: u64,
    command: &str,
    timeout_ms: u64,
    is_init: bool,
    view: Where<'_>,
) -> std::io::Result<Running> {
    let before = is_init.then(live_pids);
    // `>|` so a user's `set -o noclobber` cannot stop the write. In the read-only view the file
    // is already open on a descriptor (the view's `/tmp` is read-only).
    let target = match view {
        Some(_) => format!("&{}", crate::view::CWD_FD),
        None => format!("|{}", shell_quote(&config.cwd_file.to_string_lossy())),
    };
    let script = format!(
        "{}trap 'builtin pwd >{target} 2>/dev/null' EXIT\n{command}",
        config.ulimit_prefix,
    );
    let (pid, stdout, stderr) = match view {
        None => spawn_bash(config, cwd, &script)?,
        Some(view) => spawn_in_view(view, cwd, &script, Some(&config.cwd_file))?,
    };
    Ok(Running {
        id,
        pid,
        stdout,
        stderr,
        out_dec: Utf8Stream::default(),
        err_dec: Utf8Stream::default(),
        deadline: Instant::now() + Duration::from_millis(timeout_ms),
        timed_out: false,
        killed: false,
        before,
    })
}

/// Starts `bash -c script` in `cwd` with the sandbox's environment, in a process group of its
/// own (so a kill reaches everything it started), its output piped. The `Child` is dropped
/// without waiting: std never reaps, [`reap`] does.
fn spawn_bash(
    config: &AgentConfig,
    cwd: &Path,
    script: &str,
) -> std::io::Result<(Pid, Option<pipe::Receiver>, Option<pipe::Receiver>)> {
    let mut child = std::process::Command::new("/bin/bash")
        .args(["--noprofile", "--norc", "-c", script])
        .env_clear()
        .envs(config.env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let pid = Pid::from_child(&child);
    let stdout =
        child.stdout.take().map(|p| pipe::Receiver::from_owned_fd(p.into())).transpose()?;
    let stderr =
        child.stderr.take().map(|p| pipe::Receiver::from_owned_fd(p.into())).transpose()?;
    Ok((pid, stdout, stderr))
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Reaps every exited child; returns the pids that ended and how.
fn reap() -> Vec<(Pid, rustix::process::WaitStatus)> {
    let mut ended = Vec::new();
    while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
        if status.exited() || status.signaled() {
            ended.push((pid, status));
        }
    }
    ended
}

/// Reports job `id`'s end once its shell exited and its pipes are drained (or given up on).
async fn job_done(
    jobs: &mut HashMap<u64, BgJob>,
    id: u64,
    out: &mut pipe::Sender,
) -> std::io::Result<()> {
    let Some(&BgJob { exit: Some((exit_code, signal)), open: false, .. }) = jobs.get(&id) else {
        return Ok(());
    };
    jobs.remove(&id);
    write_frame(out, &FromAgent::JobDone { id, exit_code, signal }).await
}

/// The process groups of the running jobs (each job leads its own).
fn job_groups(jobs: &HashMap<u64, BgJob>) -> HashSet<i32> {
    jobs.values().filter(|j| j.exit.is_none()).map(|j| j.pid.as_raw_nonzero().get()).collect()
}

/// Starts `script` in the read-only view (or fails with why there is none).
fn spawn_in_view(
    view: Result<&View, &str>,
    cwd: &Path,
    script: &str,
    cwd_file: Option<&Path>,
) -> std::io::Result<(Pid, Option<pipe::Receiver>, Option<pipe::Receiver>)> {
    let view = view.map_err(std::io::Error::other)?;
    let (pid, stdout, stderr) = view.spawn(script, cwd, cwd_file).map_err(std::io::Error::other)?;
    let stdout = pipe::Receiver::from_owned_fd(stdout)?;
    let stderr = pipe::Receiver::from_owned_fd(stderr)?;
    Ok((pid, Some(stdout), Some(stderr)))
}

/// Starts background job `id`; a task reads its pipes into `tx`.
fn start_job(
    config: &AgentConfig,
    cwd: &Path,
    id: u64,
    command: &str,
    tx: mpsc::Sender<JobMsg>,
    view: Where<'_>,
) -> std::io::Result<Pid> {
    let script = format!("{}{command}", config.ulimit_prefix);
    let (pid, stdout, stderr) = match view {
        None => spawn_bash(config, cwd, &script)?,
        Some(view) => spawn_in_view(view, cwd, &script, None)?,
    };
    tokio::spawn(read_job(id, stdout, stderr, tx));
    Ok(pid)
}

/// Reads a job's pipes until both end, decoding each as UTF-8 across reads.
async fn read_job(
    id: u64,
    mut stdout: Option<pipe::Receiver>,
    mut stderr: Option<pipe::Receiver>,
    tx: mpsc::Sender<JobMsg>,
) {
    let (mut out_dec, mut err_dec) = (Utf8Stream::default(), Utf8Stream::default());
    let (mut out_buf, mut err_buf) = (vec![0u8; READ_CHUNK], vec![0u8; READ_CHUNK]);
    while stdout.is_some() || stderr.is_some() {
        let (stream, text) = tokio::select! {
            read = read_opt(stdout.as_mut(), &mut out_buf) => match read {
                Ok(n) if n > 0 => (OutputStream::Stdout, out_dec.push(&out_buf[..n])),
                _ => {
                    stdout = None;
                    (OutputStream::Stdout, out_dec.finish())
                }
            },
            read = read_opt(stderr.as_mut(), &mut err_buf) => match read {
                Ok(n) if n > 0 => (OutputStream::Stderr, err_dec.push(&err_buf[..n])),
                _ => {
                    stderr = None;
                    (OutputStream::Stderr, err_dec.finish())
                }
            },
        };
        if !text.is_empty() && tx.send(JobMsg::Output { id, stream, text }).await.is_err() {
            return;
        }
    }
    let _ = tx.send(JobMsg::Eof { id }).await;
}

/// After `bash` exited: takes what its pipes already hold, then leaves them to a task that
/// reads and discards (background processes may write for as long as they live).
async fn finish(run: &mut Running, out: &mut pipe::Sender) -> std::io::Result<()> {
    let mut buf = vec![0u8; READ_CHUNK];
    for (slot, stream) in
        [(&mut run.stdout, OutputStream::Stdout), (&mut run.stderr, OutputStream::Stderr)]
    {
        let dec = match stream {
            OutputStream::Stdout => &mut run.out_dec,
            OutputStream::Stderr => &mut run.err_dec,
        };
        if let Some(pipe) = slot.take() {
            let mut open = true;
            loop {
                match pipe.try_read(&mut buf) {
                    Ok(0) => {
                        open = false;
                        break;
                    }
                    Ok(n) => send_output(out, run.id, stream, dec.push(&buf[..n])).await?,
                    Err(_) => break,
                }
            }
            if open {
                tokio::spawn(discard(pipe));
            }
        }
        send_output(out, run.id, stream, dec.finish()).await?;
    }
    Ok(())
}

async fn discard(mut pipe: pipe::Receiver) {
    let mut buf = vec![0u8; READ_CHUNK];
    while matches!(pipe.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// Kills the command's process group and, as PID 1, every process newer than the command except
/// those of the background jobs' groups (`spare`).
fn kill_command(run: &mut Running, spare: &HashSet<i32>) {
    run.killed = true;
    let _ = rustix::process::kill_process_group(run.pid, Signal::KILL);
    if let Some(before) = &run.before {
        // Twice: a process may fork between the scan and the kill.
        for _ in 0..2 {
            for pid in live_pids() {
                if pid != 1 && !before.contains(&pid) {
                    if let Some(pid) = Pid::from_raw(pid) {
                        let group = rustix::process::getpgid(Some(pid));
                        if group.is_ok_and(|g| spare.contains(&g.as_raw_nonzero().get())) {
                            continue;
                        }
                        let _ = rustix::process::kill_process(pid, Signal::KILL);
                    }
                }
            }
        }
    }
}

/// Pids visible in `/proc` (the namespace's own when the agent is PID 1).
fn live_pids() -> HashSet<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashSet::new();
    };
    dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect()
}
