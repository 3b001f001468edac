//! The bubblewrap backend: each command runs in a fresh `bwrap` over the session's workspace.
//!
//! This per-command spawn is the first version. A persistent sandbox with an in-sandbox agent
//! (PID 1 of the namespace, keeping background processes alive between commands, freeze/thaw)
//! is a later step; until then a background process dies with the command that started it.
//!
//! What the command sees, and why:
//! - `--unshare-all`: new user, mount, pid, net, ipc, uts and cgroup namespaces. The net
//!   namespace has only its own loopback, so the server's `127.0.0.1` ports are unreachable.
//! - The process environment is cleared before `bwrap` runs (`env_clear`): `bwrap` is PID 1 of
//!   the pid namespace and its `/proc/1/environ` would otherwise show the server's environment,
//!   API keys included. Only `PATH`, `HOME=/workspace`, `LANG=C.UTF-8` and `TERM=dumb` are set.
//! - `--uid 1000 --gid 1000` rather than root-in-the-namespace: a non-zero uid gets no
//!   capabilities inside the user namespace, which closes most of the kernel surface that user
//!   namespaces expose (mounting, raw sockets, …). Workspace files, owned by the server's uid on
//!   the host, appear owned by this user, so the command can still write them.
//! - The filesystem is built from explicit binds only: `/usr` (and the merged-`/usr` symlinks
//!   or binds for `/bin`, `/lib`, …) read-only, a generated minimal `/etc` (passwd, group,
//!   hostname, hosts, nsswitch.conf) plus read-only binds of `/etc/alternatives`,
//!   `/etc/ld.so.cache`, `/etc/ssl` and `/etc/localtime`, a private `/proc`, `/dev`, a tmpfs
//!   `/tmp` and the workspace at `/workspace`. The root itself is remounted read-only. Nothing of
//!   the server's data dir, config or home is visible.
//! - The generated `/etc` files are written once per [`Sandbox`](super::Sandbox) into a private
//!   temp dir and bound read-only. `--ro-bind-data FD` would avoid the dir but needs file
//!   descriptors inherited across `exec`, which requires `unsafe` `pre_exec` (forbidden here).
//! - `bwrap` is spawned in its own process group (terminal signals aimed at the server do not
//!   reach it) with `--die-with-parent` and `kill_on_drop`. Killing it on timeout or cancel kills
//!   the whole command tree: its namespace's PID 1 gets `SIGKILL` as its parent dies, and the
//!   kernel then kills every process of the pid namespace, daemonised ones included — stronger
//!   than `killpg`, which a `setsid` escapes.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use outboard_shared::OutputStream;
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::output::{CappedOutput, Utf8Stream};
use super::{ExecResult, SandboxError};

/// The `PATH` inside the sandbox.
const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// Read size of each pipe read; small enough to stream promptly.
const READ_CHUNK: usize = 8192;

/// Top-level system paths that merged-`/usr` systems make symlinks and others make directories.
const SYSTEM_ROOTS: &[&str] = &["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"];

/// Host `/etc` entries programs need, bound read-only when present; nothing else of the host's
/// `/etc` is visible. `/etc/alternatives` holds Debian's `awk`, `editor`, … links.
const HOST_ETC: &[&str] = &["/etc/alternatives", "/etc/ld.so.cache", "/etc/ssl", "/etc/localtime"];

/// The generated `/etc` files.
const ETC_FILES: &[(&str, &str)] = &[
    (
        "passwd",
        "root:x:0:0:root:/root:/usr/sbin/nologin\n\
         outboard:x:1000:1000:outboard:/workspace:/bin/bash\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    ),
    ("group", "root:x:0:\noutboard:x:1000:\nnogroup:x:65534:\n"),
    ("hostname", "outboard\n"),
    ("hosts", "127.0.0.1\tlocalhost outboard\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
    ("nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files\n"),
];

/// A private directory holding the generated `/etc` files; removed on drop.
#[derive(Debug)]
pub(super) struct EtcDir {
    dir: PathBuf,
}

impl EtcDir {
    /// Writes the generated `/etc` files into a fresh temp dir.
    pub(super) fn create() -> Result<Self, SandboxError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("outboard-etc-{}-{n}", std::process::id()));
        let fail = |e: std::io::Error| {
            SandboxError::Start(format!(
                "could not write the sandbox's /etc into {}: {e}",
                dir.display()
            ))
        };
        // A leftover from a crashed process with the same pid is stale: replace it.
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(fail)?;
        for (name, content) in ETC_FILES {
            std::fs::write(dir.join(name), content).map_err(fail)?;
        }
        Ok(EtcDir { dir })
    }
}

impl Drop for EtcDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `bwrap` arguments that run `command` over `workspace`.
pub(super) fn bwrap_args(etc: &EtcDir, workspace: &Path, command: &str) -> Vec<String> {
    let mut args: Vec<String> = Vec::with_capacity(96);
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
    push(&[
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        "1000",
        "--gid",
        "1000",
        "--hostname",
        "outboard",
        "--ro-bind",
        "/usr",
        "/usr",
    ]);
    for root in SYSTEM_ROOTS {
        match std::fs::symlink_metadata(root) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(root) {
                    push(&["--symlink", &target.to_string_lossy(), root]);
                }
            }
            Ok(meta) if meta.is_dir() => push(&["--ro-bind", root, root]),
            _ => {}
        }
    }
    push(&["--dir", "/etc"]);
    for (name, _) in ETC_FILES {
        let host = etc.dir.join(name);
        push(&["--ro-bind", &host.to_string_lossy(), &format!("/etc/{name}")]);
    }
    for path in HOST_ETC {
        push(&["--ro-bind-try", path, path]);
    }
    push(&["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
    push(&["--bind", &workspace.to_string_lossy(), "/workspace"]);
    // After every mount point in the root exists: the root tmpfs becomes read-only, so only
    // /workspace and /tmp are writable.
    push(&["--remount-ro", "/", "--chdir", "/workspace"]);
    push(&["--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/workspace"]);
    push(&["--setenv", "LANG", "C.UTF-8", "--setenv", "TERM", "dumb"]);
    push(&["/bin/bash", "--noprofile", "--norc", "-c", command]);
    args
}

/// How a run ended when it did not end by itself.
enum Stop {
    TimedOut,
    Cancelled,
}

/// Runs `command` in a fresh bubblewrap sandbox, streaming output to `on_output`.
pub(super) async fn exec(
    etc: &EtcDir,
    workspace: &Path,
    command: &str,
    timeout: Duration,
    on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
    cancel: CancellationToken,
) -> Result<ExecResult, SandboxError> {
    let mut child = Command::new("bwrap")
        .args(bwrap_args(etc, workspace, command))
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => SandboxError::Start(NOT_FOUND.to_string()),
            _ => SandboxError::Start(format!("could not spawn bwrap: {e}")),
        })?;
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(SandboxError::Start("bwrap's output pipes were not set up".to_string()));
    };

    let mut kept = CappedOutput::default();
    let (mut out_dec, mut err_dec) = (Utf8Stream::default(), Utf8Stream::default());
    let (mut out_buf, mut err_buf) = (vec![0u8; READ_CHUNK], vec![0u8; READ_CHUNK]);
    let (mut out_open, mut err_open) = (true, true);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);

    let mut emit = |stream: OutputStream, text: String, kept: &mut CappedOutput| {
        if !text.is_empty() {
            on_output(stream, &text);
            kept.push(&text);
        }
    };

    let mut stop = None;
    while out_open || err_open {
        tokio::select! {
            read = stdout.read(&mut out_buf), if out_open => match read {
                Ok(n) if n > 0 => emit(OutputStream::Stdout, out_dec.push(&out_buf[..n]), &mut kept),
                _ => {
                    out_open = false;
                    emit(OutputStream::Stdout, out_dec.finish(), &mut kept);
                }
            },
            read = stderr.read(&mut err_buf), if err_open => match read {
                Ok(n) if n > 0 => emit(OutputStream::Stderr, err_dec.push(&err_buf[..n]), &mut kept),
                _ => {
                    err_open = false;
                    emit(OutputStream::Stderr, err_dec.finish(), &mut kept);
                }
            },
            _ = &mut deadline => { stop = Some(Stop::TimedOut); break; }
            _ = cancel.cancelled() => { stop = Some(Stop::Cancelled); break; }
        }
    }

    // Both pipes closed: the command tree is gone, wait for bwrap's status (bounded anyway).
    let status = if stop.is_none() {
        tokio::select! {
            status = child.wait() => Some(status),
            _ = &mut deadline => { stop = Some(Stop::TimedOut); None }
            _ = cancel.cancelled() => { stop = Some(Stop::Cancelled); None }
        }
    } else {
        None
    };
    let exit_code = match (status, &stop) {
        (Some(Ok(status)), None) => status.code(),
        (Some(Err(e)), None) => {
            return Err(SandboxError::Start(format!("could not wait for bwrap: {e}")));
        }
        _ => {
            // Kills bwrap; its namespace and every process in it die with it.
            let _ = child.start_kill();
            let _ = child.wait().await;
            None
        }
    };
    Ok(ExecResult {
        exit_code,
        output: kept.into_string(),
        timed_out: matches!(stop, Some(Stop::TimedOut)),
    })
}

/// The message when `bwrap` is not installed.
pub(super) const NOT_FOUND: &str =
    "bubblewrap (bwrap) was not found: install it with `apt-get install bubblewrap` \
     (or your distribution's `bubblewrap` package)";

/// Turns a failed trivial run into an explanation of what to fix on the host.
pub(super) fn explain_check_failure(exit_code: Option<i32>, output: &str) -> String {
    let said = output.trim();
    let userns = ["namespace", "uid map", "uid_map", "setting up uid", "Operation not permitted"]
        .iter()
        .any(|needle| said.contains(needle));
    if userns {
        format!(
            "bubblewrap could not create its namespaces (bwrap said: {said}). User namespaces \
             must be available to the server's user: check that `sysctl user.max_user_namespaces` \
             is above 0, that `sysctl kernel.unprivileged_userns_clone` is 1 (Debian kernels), \
             and that `sysctl kernel.apparmor_restrict_unprivileged_userns` is 0 (Ubuntu 23.10+); \
             in a container, its seccomp/AppArmor profile must allow `unshare`"
        )
    } else {
        let code = exit_code.map_or_else(|| "a signal".to_string(), |c| format!("exit code {c}"));
        format!("a trivial command failed in the bubblewrap sandbox ({code}): {said}")
    }
}
