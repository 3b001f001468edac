//! The read-only view: where plan-mode commands run (`ToAgent::Exec` of the protocol and
//! `Spawn` with `read_only`). In it `/workspace`, `/tmp` and every other mount of the sandbox is
//! read-only, so a command the plan-mode judgement let through (`outboard_bashguard::read_only`)
//! still cannot write a file: the kernel answers `EROFS`.
//!
//! Why a holder process, made at the agent's start: the agent is uid 1000 with no capability
//! (`bwrap --cap-drop ALL`), and its seccomp filter ([`crate::seccomp`]) refuses `unshare`,
//! `setns` and `mount` to every process of the sandbox, the agent's own later calls included.
//! So before the filter, [`View::start`] forks the holder, which enters a new user namespace
//! (its uid and gid mapped to themselves: files look the same) and a new mount namespace owned
//! by it, remounts every mount that is writable read-only (`MS_REMOUNT | MS_BIND | MS_RDONLY`,
//! keeping the flags that are locked), checks that none is left writable, drops its
//! capabilities, installs the same seccomp filter, and waits for requests. A plan-mode command
//! is started by the holder with `clone(CLONE_PARENT)`: its parent is the agent, which reaps it,
//! times it out and kills it as any other command. Its pipes, and the file its `EXIT` trap
//! writes the working directory to (opened by the agent before the request, outside the view,
//! as descriptor [`CWD_FD`]), come with the request (`SCM_RIGHTS`).
//!
//! Why a command cannot undo the view: it runs as uid 1000 with no capability, under the same
//! seccomp filter (no `mount`, `unshare`, `setns`, `ptrace`), and the holder is non-dumpable.
//! Mounts copied into a namespace of a less privileged user namespace keep their read-only flag
//! locked (`MNT_LOCK_READONLY`), so a kernel that let it nest a namespace would not help. What
//! runs outside the view keeps writing: background jobs started before plan mode live in the
//! agent's view (jobs started in plan mode live in this one).
//!
//! When the holder cannot be made (a kernel or a policy that forbids nested user namespaces),
//! the agent runs, and every read-only request fails with the reason: plan mode fails closed.

use std::io::{IoSlice, IoSliceMut, Read as _, Write as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rustix::mount::{MountFlags, MountPropagationFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use rustix::process::Pid;
use serde::{Deserialize, Serialize};

/// The descriptor on which a read-only command's `EXIT` trap finds the working-directory file.
pub const CWD_FD: i32 = 9;

/// How long the agent waits for the holder's answer: it answers in microseconds, so one that
/// does not was stopped or killed (any command of the sandbox's uid can signal it), and the
/// command fails rather than the agent hanging.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// The largest request (the script is most of it): a command the server sends is far smaller.
const MAX_REQUEST_BYTES: usize = 16 << 20;

/// Descriptors a request carries: stdout, stderr and the working-directory file.
const MAX_FDS: usize = 3;

/// Why the view could not be made, or could not start a command.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The holder could not be made (the reason is the kernel's).
    #[error("the read-only view for plan mode could not be made: {0}")]
    Setup(String),
    /// Talking to the holder failed (stopped, killed).
    #[error("the read-only view for plan mode does not answer: {0}")]
    Gone(#[from] std::io::Error),
    /// The holder could not start the command.
    #[error("the read-only view could not start the command: {0}")]
    Spawn(String),
}

/// What the agent asks the holder.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    script: String,
    cwd: PathBuf,
    /// The request carries the working-directory file as its third descriptor.
    cwd_file: bool,
}

/// What the holder answers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Answer {
    /// The view is made (the first answer).
    Ready,
    /// The command runs as this pid (a child of the agent).
    Started { pid: i32 },
    /// What went wrong.
    Failed { message: String },
}

/// The agent's end of the holder.
#[derive(Debug)]
pub struct View {
    socket: UnixStream,
}

/// A command started in the view: its pid and the read ends of its stdout and stderr.
pub type Started = (Pid, OwnedFd, OwnedFd);

impl View {
    /// Forks the holder, which makes the view; `env` is the commands' environment. Call while
    /// the agent has one thread, after it made itself non-dumpable and before its seccomp
    /// filter.
    pub fn start(env: &[(String, String)]) -> Result<View, ViewError> {
        let (agent_end, holder_end) = UnixStream::pair()?;
        if fork()? == 0 {
            drop(agent_end);
            let code = holder(&holder_end, env);
            exit_now(code);
        }
        drop(holder_end);
        agent_end.set_read_timeout(Some(ANSWER_WAIT))?;
        agent_end.set_write_timeout(Some(ANSWER_WAIT))?;
        match read_frame::<Answer>(&agent_end)? {
            Answer::Ready => Ok(View { socket: agent_end }),
            Answer::Failed { message } => Err(ViewError::Setup(message)),
            Answer::Started { .. } => Err(ViewError::Setup("an unexpected answer".into())),
        }
    }

    /// Starts `bash -c script` in `cwd` in the view, in a process group of its own; with
    /// `cwd_file`, that file (truncated) is open on [`CWD_FD`] for the script's `EXIT` trap.
    pub fn spawn(
        &self,
        script: &str,
        cwd: &Path,
        cwd_file: Option<&Path>,
    ) -> Result<Started, ViewError> {
        let (out_r, out_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(std::io::Error::from)?;
        let (err_r, err_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(std::io::Error::from)?;
        let file = match cwd_file {
            Some(path) => Some(OwnedFd::from(
                std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(path)?,
            )),
            None => None,
        };
        let request =
            Request { script: script.to_owned(), cwd: cwd.to_owned(), cwd_file: file.is_some() };
        let body = serde_json::to_vec(&request).map_err(std::io::Error::other)?;
        let len = u32::try_from(body.len()).map_err(std::io::Error::other)?;
        // The descriptors ride on the length; the body follows on the stream.
        let header = len.to_be_bytes();
        {
            let mut fds = vec![out_w.as_fd(), err_w.as_fd()];
            fds.extend(file.as_ref().map(|f| f.as_fd()));
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
                return Err(ViewError::Spawn("the descriptors do not fit".into()));
            }
            let sent = rustix::net::sendmsg(
                &self.socket,
                &[IoSlice::new(&header)],
                &mut control,
                SendFlags::NOSIGNAL,
            )
            .map_err(std::io::Error::from)?;
            let mut socket = &self.socket;
            socket.write_all(header.get(sent..).unwrap_or_default())?;
            socket.write_all(&body)?;
        }
        // The holder has its copies; the read ends must see EOF when the command's end exits.
        drop((out_w, err_w, file));
        match read_frame::<Answer>(&self.socket)? {
            Answer::Started { pid } => match Pid::from_raw(pid) {
                Some(pid) => Ok((pid, out_r, err_r)),
                None => Err(ViewError::Spawn(format!("an invalid pid {pid}"))),
            },
            Answer::Failed { message } => Err(ViewError::Spawn(message)),
            Answer::Ready => Err(ViewError::Spawn("an unexpected answer".into())),
        }
    }
}

/// The holder's life: makes the view, says so, then starts commands until the agent's end
/// closes. Returns the exit code.
fn holder(socket: &UnixStream, env: &[(String, String)]) -> i32 {
    if let Err(message) = enter() {
        let _ = write_frame(socket, &Answer::Failed { message });
        return 1;
    }
    if write_frame(socket, &Answer::Ready).is_err() {
        return 1;
    }
    loop {
        let Ok((request, fds)) = receive(socket) else { return 0 };
        let answer = match start_in_view(&request, fds, env) {
            Ok(pid) => Answer::Started { pid },
            Err(message) => Answer::Failed { message },
        };
        if write_frame(socket, &answer).is_err() {
            return 0;
        }
    }
}

/// Enters the new user and mount namespaces and makes every mount read-only, then gives up
/// every capability and installs the sandbox's seccomp filter.
fn enter() -> Result<(), String> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    unshare_user_and_mounts().map_err(|e| format!("a nested user namespace is refused ({e})"))?;
    // A non-dumpable process's `/proc/self` files belong to root, so its own id maps are out of
    // its reach: dumpable while it writes them (no command runs yet: the agent waits for this
    // holder's answer before it serves), non-dumpable again before it answers.
    let dumpable = |behavior| {
        rustix::process::set_dumpable_behavior(behavior)
            .map_err(|e| format!("could not change whether the holder is dumpable: {e}"))
    };
    dumpable(rustix::process::DumpableBehavior::Dumpable)?;
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("could not write {file}: {e}"))
    };
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/setgroups", "deny".to_owned())?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    dumpable(rustix::process::DumpableBehavior::NotDumpable)?;
    rustix::mount::mount_change("/", MountPropagationFlags::PRIVATE | MountPropagationFlags::REC)
        .map_err(|e| format!("could not make the mounts private: {e}"))?;
    for mount in writable_mounts()? {
        rustix::mount::mount_remount(
            &mount.point,
            MountFlags::BIND | MountFlags::RDONLY | mount.kept,
            "",
        )
        .map_err(|e| format!("could not make {} read-only: {e}", mount.point.display()))?;
    }
    if let Some(left) = writable_mounts()?.first() {
        return Err(format!("{} is still writable", left.point.display()));
    }
    let none = rustix::thread::CapabilitySet::empty();
    let sets =
        rustix::thread::CapabilitySets { effective: none, permitted: none, inheritable: none };
    rustix::thread::set_capabilities(None, sets)
        .map_err(|e| format!("could not drop the capabilities: {e}"))?;
    crate::seccomp::install().map_err(|e| format!("could not install the seccomp filter: {e}"))
}

/// A mount that is writable, with the flags a remount must keep (they may be locked).
struct Mount {
    point: PathBuf,
    kept: MountFlags,
}

/// The mounts of this namespace not mounted read-only (`/proc/self/mountinfo`).
fn writable_mounts() -> Result<Vec<Mount>, String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("could not read the mounts: {e}"))?;
    let mut writable = Vec::new();
    for line in info.lines() {
        let mut fields = line.split(' ');
        let (Some(point), Some(options)) = (fields.nth(4), fields.next()) else { continue };
        let options: Vec<&str> = options.split(',').collect();
        if options.contains(&"ro") {
            continue;
        }
        let mut kept = MountFlags::empty();
        for (name, flag) in [
            ("nosuid", MountFlags::NOSUID),
            ("nodev", MountFlags::NODEV),
            ("noexec", MountFlags::NOEXEC),
            ("noatime", MountFlags::NOATIME),
            ("nodiratime", MountFlags::NODIRATIME),
            ("relatime", MountFlags::RELATIME),
        ] {
            if options.contains(&name) {
                kept |= flag;
            }
        }
        if !options.contains(&"noatime") && !options.contains(&"relatime") {
            kept |= MountFlags::STRICTATIME;
        }
        writable.push(Mount { point: PathBuf::from(unescape(point)), kept });
    }
    Ok(writable)
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let octal =
            bytes.get(i + 1..i + 4).filter(|d| b == b'\\' && d.iter().all(u8::is_ascii_digit));
        match octal.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(value) => {
                out.push(value);
                i += 4;
            }
            None => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads one request and its descriptors.
fn receive(socket: &UnixStream) -> std::io::Result<(Request, Vec<OwnedFd>)> {
    let mut header = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        socket,
        &mut [IoSliceMut::new(&mut header)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?
    .bytes;
    if got == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    let mut stream = socket;
    stream.read_exact(header.get_mut(got..).unwrap_or_default())?;
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_REQUEST_BYTES {
        return Err(std::io::Error::other("the request is too large"));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    let request = serde_json::from_slice(&body).map_err(std::io::Error::other)?;
    Ok((request, fds))
}

/// Starts the request's command in the view as a child of the agent; its pid.
fn start_in_view(
    request: &Request,
    fds: Vec<OwnedFd>,
    env: &[(String, String)],
) -> Result<i32, String> {
    let wanted = if request.cwd_file { 3 } else { 2 };
    if fds.len() != wanted {
        return Err(format!("{} descriptors came with the request, not {wanted}", fds.len()));
    }
    // Above CWD_FD, so placing the working-directory file there overwrites none of them.
    let mut high = Vec::with_capacity(fds.len());
    for fd in &fds {
        high.push(
            rustix::io::fcntl_dupfd_cloexec(fd, CWD_FD + 1)
                .map_err(|e| format!("could not move a descriptor: {e}"))?,
        );
    }
    drop(fds);
    let mut high = high.into_iter();
    let (Some(stdout), Some(stderr)) = (high.next(), high.next()) else {
        return Err("the pipes are missing".into());
    };
    let cwd_file = high.next();
    let pid = clone_as_sibling().map_err(|e| format!("could not start a process: {e}"))?;
    if pid != 0 {
        return Ok(pid);
    }
    // The child: this process is a copy of the single-threaded holder, about to exec.
    let mut err_pipe = std::fs::File::from(stderr);
    if let Some(file) = &cwd_file {
        if let Err(e) = place_on_cwd_fd(file) {
            let _ = writeln!(err_pipe, "could not pass the working-directory file: {e}");
            exit_now(127);
        }
    }
    let stderr = err_pipe.try_clone().map_or_else(|_| Stdio::null(), Stdio::from);
    let e = std::process::Command::new("/bin/bash")
        .args(["--noprofile", "--norc", "-c", &request.script])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(&request.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(stderr)
        .process_group(0)
        .exec();
    let _ = writeln!(err_pipe, "could not start bash: {e}");
    exit_now(127)
}

/// Writes one answer: a 4-byte big-endian length, then JSON.
fn write_frame<T: Serialize>(socket: &UnixStream, message: &T) -> std::io::Result<()> {
    let body = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    let len = u32::try_from(body.len()).map_err(std::io::Error::other)?;
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let mut stream = socket;
    stream.write_all(&frame)
}

/// Reads one answer.
fn read_frame<T: for<'de> Deserialize<'de>>(socket: &UnixStream) -> std::io::Result<T> {
    let mut stream = socket;
    let mut header = [0u8; 4];
    stream.read_exact(&mut header)?;
    let len = u32::from_be_bytes(header) as usize;
    if len > MAX_REQUEST_BYTES {
        return Err(std::io::Error::other("the answer is too large"));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(std::io::Error::other)
}

/// `fork(2)`; 0 in the child.
#[allow(unsafe_code)]
fn fork() -> std::io::Result<i32> {
    // SAFETY: called by the agent before it starts any thread (first thing in its `main`, before
    // the runtime), so the child is a complete copy with no lock held by a vanished thread; the
    // child never returns into the agent's code (it leaves through `exit_now`).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(pid)
}

/// `clone(CLONE_PARENT | SIGCHLD)`: a copy of the holder whose parent is the holder's parent
/// (the agent), which reaps it. 0 in the child.
#[allow(unsafe_code)]
fn clone_as_sibling() -> std::io::Result<i32> {
    let flags = (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong;
    // SAFETY: like `fork` (no new stack: the child runs on a copy of this one); the holder has a
    // single thread, so the child holds no lock a vanished thread took, and it only sets up its
    // descriptors and execs (or exits through `exit_now`).
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    i32::try_from(pid).map_err(std::io::Error::other)
}

/// Puts `file` on [`CWD_FD`], inherited by the exec.
#[allow(unsafe_code)]
fn place_on_cwd_fd(file: &OwnedFd) -> std::io::Result<()> {
    // SAFETY: `file` is open for the whole call; `CWD_FD` is below every descriptor the child
    // owns (they were moved above it), so nothing it still uses is closed by the `dup2`.
    if unsafe { libc::dup2(file.as_raw_fd(), CWD_FD) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `unshare(CLONE_NEWUSER | CLONE_NEWNS)`.
#[allow(unsafe_code)]
fn unshare_user_and_mounts() -> std::io::Result<()> {
    use rustix::thread::UnshareFlags;
    // SAFETY: rustix marks unshare unsafe only for `CLONE_FILES`, which is not passed; the holder
    // has one thread (a new user namespace requires it, and the kernel checks).
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNS) }
        .map_err(std::io::Error::from)
}

/// `_exit(2)`: leaves a forked copy without running the agent's exit path.
#[allow(unsafe_code)]
fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` ends the process at once; nothing of Rust's runs after it.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape(r"/work\040space/a\134b"), r"/work space/a\b");
        assert_eq!(unescape("/tmp"), "/tmp");
    }
}
