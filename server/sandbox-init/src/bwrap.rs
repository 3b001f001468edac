//! The bubblewrap backend: the arguments that start one persistent sandbox over a session's
//! workspace, with the in-sandbox agent (the init) as PID 1 of its pid namespace.
//!
//! What the sandbox sees, and why:
//! - `--unshare-all`: new user, mount, pid, net, ipc, uts and cgroup namespaces. The net
//!   namespace has only its own loopback, so the server's `127.0.0.1` ports are unreachable.
//!   A session with network gets the server's proxy socket bound at
//!   `/run/outboard/proxy.sock` instead (see `outboard_egress`): still no route anywhere.
//!   When the proxy intercepts hosts for injected credentials, the session's CA bundle (the
//!   system's roots and the org's sandbox CA certificate, never its key) is bound read-only at
//!   `/run/outboard/ca-bundle.pem`.
//! - The process environment is cleared before `bwrap` runs (`env_clear`) and no `--setenv` is
//!   given: the agent is PID 1, its environment holds only the `PWD` bwrap sets, and it is
//!   non-dumpable, so commands cannot read its `/proc/1/environ`. The commands' environment
//!   (`PATH`, `HOME=/workspace`, `LANG=C.UTF-8`, `TERM=dumb`) is set by the agent per command.
//! - `--as-pid-1`: the agent itself is PID 1 (no bwrap init in between): it reaps orphans and
//!   keeps background processes between commands; when it exits, the kernel kills everything
//!   in the namespace.
//! - `--uid 1000 --gid 1000` rather than root-in-the-namespace: a non-zero uid gets no
//!   capabilities inside the user namespace, which closes most of the kernel surface that user
//!   namespaces expose (mounting, raw sockets, …). Which *host* uid that is depends on the
//!   server: an unprivileged server's own uid, or, for a root server, a per-sandbox
//!   unprivileged uid chosen by the launcher (the launcher) — never host root.
//! - The filesystem is built from explicit binds only: `/usr` (and the merged-`/usr` symlinks
//!   or binds for `/bin`, `/lib`, …) read-only, a generated minimal `/etc` (passwd, group,
//!   hostname, hosts, nsswitch.conf, from memory files: `--ro-bind-data FD`) plus read-only
//!   binds of `/etc/alternatives`, `/etc/ld.so.cache`, `/etc/ssl/certs` (only the public trust
//!   store: `/etc/ssl/private` holds the host's keys) and `/etc/localtime`, a private `/proc`
//!   with `/proc/sys` a read-only bind, `/dev`, a tmpfs
//!   `/tmp`, the agent binary read-only at [`AGENT_PATH`], the workspace at `/workspace`, and
//!   the org's projected files read-only at `/memory`, `/skills` and `/agents`. The root itself is
//!   remounted read-only. Nothing of the server's data dir, config or home is visible.
//! - `bwrap` is spawned in its own process group (terminal signals aimed at the server do not
//!   reach it) with `--die-with-parent` and `kill_on_drop`: killing `bwrap` kills the agent,
//!   and with it every process of the namespace, daemonised ones included.

use std::path::PathBuf;

/// The `PATH` inside the sandbox.
pub const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// Where the agent binary is bound inside the sandbox.
pub const AGENT_PATH: &str = "/run/outboard/agent";

/// Where the agent's `EXIT` trap records the working directory (the private `/tmp`).
pub const CWD_FILE: &str = "/tmp/.outboard-cwd";

/// Top-level system paths that merged-`/usr` systems make symlinks and others make directories.
const SYSTEM_ROOTS: &[&str] = &["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"];

/// Host `/etc` entries programs need, bound read-only when present; nothing else of the host's
/// `/etc` is visible. `/etc/alternatives` holds Debian's `awk`, `editor`, … links.
const HOST_ETC: &[&str] = &[
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/localtime",
];

/// The generated `/etc` files.
pub const ETC_FILES: &[(&str, &str)] = &[
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

/// The host paths a sandbox is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    /// Bound read-write at `/workspace`.
    pub workspace: PathBuf,
    /// The agent binary, bound read-only at [`AGENT_PATH`].
    pub agent: PathBuf,
    /// Directories bound read-only, and where they appear.
    pub ro_mounts: Vec<(PathBuf, String)>,
    /// The session's proxy socket, bound at [`outboard_egress::SANDBOX_SOCKET`] (read-write:
    /// connecting to a socket is a write); `None`: no network at all.
    pub proxy_socket: Option<PathBuf>,
    /// The session's CA bundle (system roots and the org's sandbox CA), bound read-only at
    /// [`outboard_egress::SANDBOX_CA_BUNDLE`]; `None` when no host is intercepted.
    pub ca_bundle: Option<PathBuf>,
}

/// The `bwrap` arguments that run the agent (with its JSON `agent_config`) over the workspace;
/// `etc_fds` are inheritable descriptors holding the generated `/etc` files, by name.
pub fn bwrap_args(sources: &Sources, etc_fds: &[(i32, &str)], agent_config: &str) -> Vec<String> {
    let mut args: Vec<String> = Vec::with_capacity(96);
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| s.to_string()));
    push(&[
        "--unshare-all",
        "--as-pid-1",
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
    for (fd, name) in etc_fds {
        push(&["--ro-bind-data", &fd.to_string(), &format!("/etc/{name}")]);
    }
    for path in HOST_ETC {
        push(&["--ro-bind-try", path, path]);
    }
    push(&["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]);
    // Sysctls read-only as a mount, not only by permission: a uid check is all that stood
    // between the old root-mapped sandbox and `kernel.core_pattern`. (The source is the host's
    // procfs; sysctl files answer for the reader's namespaces, so the view is the same.)
    push(&["--ro-bind", "/proc/sys", "/proc/sys"]);
    push(&["--ro-bind", &sources.agent.to_string_lossy(), AGENT_PATH]);
    push(&["--bind", &sources.workspace.to_string_lossy(), "/workspace"]);
    // The org's files: read-only binds, so a write there fails with EROFS; the host side is
    // updated in place and the change shows through the bind at once.
    for (host, target) in &sources.ro_mounts {
        push(&["--ro-bind", &host.to_string_lossy(), target]);
    }
    if let Some(socket) = &sources.proxy_socket {
        push(&["--bind", &socket.to_string_lossy(), outboard_egress::SANDBOX_SOCKET]);
    }
    if let Some(bundle) = &sources.ca_bundle {
        push(&["--ro-bind", &bundle.to_string_lossy(), outboard_egress::SANDBOX_CA_BUNDLE]);
    }
    // After every mount point in the root exists: the root tmpfs becomes read-only, so only
    // /workspace and /tmp are writable.
    push(&["--remount-ro", "/", "--chdir", "/workspace"]);
    push(&[AGENT_PATH, crate::protocol::AGENT_ARG, agent_config]);
    args
}

/// The message when `bwrap` is not installed.
pub const NOT_FOUND: &str =
    "bubblewrap (bwrap) was not found on the PATH: install it with `apt-get install bubblewrap` \
     (Debian, Ubuntu) or `dnf install bubblewrap` (Fedora, RHEL), or your distribution's \
     `bubblewrap` package";

/// Turns a failed trivial run into an explanation of what to fix on the host.
pub fn explain_check_failure(exit_code: Option<i32>, output: &str) -> String {
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
