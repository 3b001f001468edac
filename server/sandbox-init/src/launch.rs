//! The sandbox launcher: the short-lived process between the server and `bwrap` that decides
//! which host user the sandbox is.
//!
//! The server spawns `<our binary> __sandbox-launch CONFIG`; the launcher prepares what `bwrap`
//! needs and then `exec`s it (same pid, so the server's handle on the child is `bwrap`'s).
//!
//! Why a launcher: a server run as root that starts `bwrap` directly gets a sandbox whose uid
//! maps to host uid 0 (`/proc/self/uid_map` inside said `1000 0 1`). Kernel checks that look
//! only at the uid then let a command write global sysctls, read root-only files and plant a
//! setuid-root binary in the workspace. So when the server is root, the launcher:
//! - enters a private mount namespace (nothing it mounts is seen by the host, and everything
//!   goes away with the sandbox's last process — no cleanup after a crash);
//! - mounts a small tmpfs at [`STAGE`] and attaches there **idmapped** mounts of the workspace
//!   (read-write), the org's projected files and the agent binary (read-only): through them,
//!   files owned by the server's user appear owned by the sandbox's host uid, so the sandbox can
//!   work on a root-owned workspace while everything it writes lands owned by the original
//!   owner on disk (`nosuid`, `nodev`; the seccomp filter of [`crate::seccomp`] refuses setuid
//!   and setgid modes, so nothing written through the mapping becomes a host privilege);
//! - drops to a per-sandbox unprivileged host uid (see [`UidLease`]: one uid per live sandbox,
//!   so sandboxes are isolated from each other and from every real user) and `exec`s `bwrap`,
//!   which then runs unprivileged: inside, uid 1000 maps to that host uid.
//!
//! A server run by an ordinary user needs none of this: its sandboxes map to that user, as
//! before; the launcher only hands `bwrap` the generated `/etc` files.
//!
//! The generated `/etc` files reach `bwrap` as sealed memory files (`--ro-bind-data FD`), never
//! as files on disk: the old per-sandbox directory at a predictable `/tmp` name let another local
//! user pre-plant symlinks that redirected root's writes. Passing the descriptors across `exec`
//! is why this is a separate process (the server itself cannot clear `O_CLOEXEC` on a child's
//! descriptors without an `unsafe` `pre_exec`).

use std::collections::{BTreeSet, HashMap};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use rustix::fs::{Mode, OFlags, CWD};
use rustix::mount::{
    MountAttrFlags, MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags,
};
use serde::{Deserialize, Serialize};

use crate::bwrap::{self, Sources, ETC_FILES};
use crate::error::SandboxError;

/// The hidden first argument that turns our binaries into the launcher.
pub const LAUNCH_ARG: &str = "__sandbox-launch";

/// Where the launcher's private tmpfs is mounted (in its own mount namespace only; the host's
/// `/tmp` is untouched and the sandbox gets its own `/tmp` from `bwrap`).
pub const STAGE: &str = "/tmp";

/// First host uid (and gid) of the sandbox range: above the ranges Debian and systemd hand to
/// users (`/etc/login.defs`, subordinate ids) and to nspawn containers (up to 1878982656 +
/// 65536), below systemd's dynamic-user ranges at 2^31.
pub const UID_BASE: u32 = 1_900_000_000;

/// How many sandbox uids there are: at most this many sandboxes run at once as root.
pub const UID_SLOTS: u32 = 65_536;

/// What the launcher is told (JSON, the argument after [`LAUNCH_ARG`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchConfig {
    /// Absolute path of `bwrap` (the launcher runs with an empty environment, so no `PATH`).
    pub bwrap: PathBuf,
    /// The workspace on the host.
    pub workspace: PathBuf,
    /// The agent binary on the host.
    pub agent_exe: PathBuf,
    /// The agent's own configuration, passed through.
    pub agent_config: String,
    /// Host directories bound read-only, and where they appear.
    pub ro_mounts: Vec<(PathBuf, String)>,
    /// The session's proxy socket on the host, bound at [`outboard_egress::SANDBOX_SOCKET`].
    #[serde(default)]
    pub proxy_socket: Option<PathBuf>,
    /// The session's CA bundle on the host, bound read-only at
    /// [`outboard_egress::SANDBOX_CA_BUNDLE`].
    #[serde(default)]
    pub ca_bundle: Option<PathBuf>,
    /// When set, the sandbox runs as this host uid and gid (the server is root).
    pub host_id: Option<u32>,
    /// The sandbox's cgroup directories: the launcher moves itself into each before anything
    /// else, so `bwrap` and every process it makes are born inside (and a server killed
    /// mid-start leaves nothing its successor's orphan reaper does not find).
    #[serde(default)]
    pub cgroups: Vec<PathBuf>,
    /// The server's pid. The launcher dies with it (`PR_SET_PDEATHSIG`, set again after the
    /// uid drop, which clears it) and gives up when its parent is already another process:
    /// `bwrap --die-with-parent` arms the same signal only once it runs, too late for a server
    /// that died first.
    #[serde(default)]
    pub parent: Option<u32>,
}

/// A host uid reserved for one live sandbox; returned to the pool on drop.
#[derive(Debug)]
pub struct UidLease(u32);

/// The uids of live sandboxes. A `std` mutex held for one set operation.
static LEASED: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
/// Where the next search for a free uid starts, so a released uid is not reused at once.
static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);

impl UidLease {
    /// Reserves a uid no other live sandbox of this process has.
    pub fn take() -> Result<UidLease, SandboxError> {
        let mut leased =
            LEASED.lock().map_err(|_| SandboxError::Start("uid pool poisoned".into()))?;
        if leased.is_empty() && NEXT_SLOT.load(Ordering::Relaxed) == 0 {
            // Start at a random slot: two server processes on one host (a team server and an
            // embedded one) then almost never hand out the same uid. Unique within a process;
            // across processes, unlikely to collide, not impossible.
            let mut seed = [0u8; 4];
            if getrandom::getrandom(&mut seed).is_ok() {
                NEXT_SLOT.store(u32::from_le_bytes(seed) % UID_SLOTS, Ordering::Relaxed);
            }
        }
        for _ in 0..UID_SLOTS {
            let slot = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % UID_SLOTS;
            let uid = UID_BASE + slot;
            if leased.insert(uid) {
                return Ok(UidLease(uid));
            }
        }
        Err(SandboxError::Start(format!(
            "all {UID_SLOTS} sandbox uids are in use: stop some sessions' sandboxes"
        )))
    }

    /// The uid (also used as the gid).
    pub fn id(&self) -> u32 {
        self.0
    }
}

impl Drop for UidLease {
    fn drop(&mut self) {
        if let Ok(mut leased) = LEASED.lock() {
            leased.remove(&self.0);
        }
    }
}

/// Runs the launcher when the process was started as `<binary> __sandbox-launch CONFIG`; `None`
/// otherwise. Returns only on failure: on success the process
/// has become `bwrap`.
pub fn main_if_launcher(first: &std::ffi::OsStr) -> Option<std::process::ExitCode> {
    if first != LAUNCH_ARG {
        return None;
    }
    let config = std::env::args_os()
        .nth(2)
        .and_then(|a| serde_json::from_str::<LaunchConfig>(&a.to_string_lossy()).ok());
    let Some(config) = config else {
        eprintln!("outboard sandbox launcher: expected a JSON configuration after {LAUNCH_ARG}");
        return Some(std::process::ExitCode::from(2));
    };
    let err = launch(&config);
    eprintln!("outboard sandbox launcher: {err}");
    Some(std::process::ExitCode::from(1))
}

/// Prepares and `exec`s `bwrap`; returns only the error that stopped it.
fn launch(config: &LaunchConfig) -> String {
    for dir in &config.cgroups {
        let procs = dir.join("cgroup.procs");
        if let Err(e) = std::fs::write(&procs, std::process::id().to_string()) {
            return format!("could not join the sandbox's cgroup {}: {e}", dir.display());
        }
    }
    if let Err(e) = die_with_parent(config.parent) {
        return e;
    }
    let etc = match etc_memfds() {
        Ok(fds) => fds,
        Err(e) => return format!("could not prepare the sandbox's /etc: {e}"),
    };
    let sources = match config.host_id {
        Some(id) => match stage(config, id) {
            Ok(sources) => sources,
            Err(e) => return e,
        },
        None => Sources {
            workspace: config.workspace.clone(),
            agent: config.agent_exe.clone(),
            ro_mounts: config.ro_mounts.clone(),
            proxy_socket: config.proxy_socket.clone(),
            ca_bundle: config.ca_bundle.clone(),
        },
    };
    let etc_fds: Vec<(i32, &str)> = etc.iter().map(|(fd, name)| (fd.as_raw_fd(), *name)).collect();
    let mut cmd = Command::new(&config.bwrap);
    cmd.args(bwrap::bwrap_args(&sources, &etc_fds, &config.agent_config)).env_clear();
    if let Some(id) = config.host_id {
        if let Err(e) = drop_to(id) {
            return format!("could not become the sandbox's host uid {id}: {e}");
        }
        // The uid change cleared the parent-death signal: arm it again, and look again.
        if let Err(e) = die_with_parent(config.parent) {
            return e;
        }
    }
    let err = cmd.exec();
    format!("could not run {}: {err}", config.bwrap.display())
}

/// Arms `SIGKILL` for when the parent dies, then checks the parent is still `parent`: a
/// server that died before the signal was armed has left the launcher to init (or to a
/// subreaper), and nothing would ever end what it starts.
fn die_with_parent(parent: Option<u32>) -> Result<(), String> {
    let Some(parent) = parent else { return Ok(()) };
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| format!("could not arm the parent-death signal: {e}"))?;
    let now = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get().unsigned_abs());
    if now != parent {
        return Err(format!("the server (pid {parent}) is gone; not starting a sandbox for it"));
    }
    Ok(())
}

/// Drops every id to `id` for good: no supplementary groups, then real, effective and saved
/// gid and uid (so no capability survives). The raw calls change the calling thread only,
/// which is the whole process: the launcher has no other thread (checked).
fn drop_to(id: u32) -> std::io::Result<()> {
    use rustix::process::{Gid, Uid};
    let threads = std::fs::read_dir("/proc/self/task")?.count();
    if threads != 1 {
        return Err(std::io::Error::other(format!(
            "the launcher has {threads} threads, and ids are per thread"
        )));
    }
    rustix::thread::set_thread_groups(&[])?;
    let gid = Gid::from_raw(id);
    rustix::thread::set_thread_res_gid(gid, gid, gid)?;
    let uid = Uid::from_raw(id);
    rustix::thread::set_thread_res_uid(uid, uid, uid)?;
    Ok(())
}

/// One memory file per generated `/etc` file, left inheritable for `bwrap --ro-bind-data`.
fn etc_memfds() -> std::io::Result<Vec<(OwnedFd, &'static str)>> {
    let mut fds = Vec::with_capacity(ETC_FILES.len());
    for (name, content) in ETC_FILES {
        // No MFD_CLOEXEC: bwrap must inherit it.
        let fd = rustix::fs::memfd_create(*name, rustix::fs::MemfdFlags::empty())?;
        let mut file = std::fs::File::from(fd);
        file.write_all(content.as_bytes())?;
        rustix::fs::seek(&file, rustix::fs::SeekFrom::Start(0))?;
        fds.push((OwnedFd::from(file), *name));
    }
    Ok(fds)
}

/// The root-only part: a private mount namespace with the idmapped mounts at [`STAGE`].
/// Every source is cloned (detached) before the staging tmpfs covers `/tmp`, where a
/// workspace or the agent binary may well live.
fn stage(config: &LaunchConfig, id: u32) -> Result<Sources, String> {
    unshare(rustix::thread::UnshareFlags::NEWNS)
        .map_err(|e| format!("could not make a private mount namespace: {e}"))?;
    rustix::mount::mount_change("/", MountPropagationFlags::PRIVATE | MountPropagationFlags::REC)
        .map_err(|e| format!("could not make the mount namespace private: {e}"))?;
    let mut userns = Userns::new(id);
    let workspace_tree = userns
        .clone_tree(&config.workspace, false)
        .map_err(|e| idmap_error(&config.workspace, &e))?;
    // The agent's filesystem may not support idmapped mounts; a plain read-only clone works as
    // long as the binary is world-executable (it normally is).
    let agent_tree = userns
        .clone_tree(&config.agent_exe, true)
        .or_else(|_| plain_clone(&config.agent_exe))
        .map_err(|e| format!("could not bind the agent binary: {e}"))?;
    let mut ro_trees = Vec::with_capacity(config.ro_mounts.len());
    for (host, target) in &config.ro_mounts {
        let tree = userns.clone_tree(host, true).map_err(|e| idmap_error(host, &e))?;
        // Asked now: the staging tmpfs may cover where `host` lives (a data dir under /tmp).
        ro_trees.push((tree, target.clone(), host.is_dir()));
    }
    // The proxy socket lives in a directory private to root, which the sandbox's uid cannot
    // traverse: bind the socket itself. Connecting needs write permission on the socket only
    // (mode 0666, see `netproxy::serve`), which no id mapping is needed for.
    let socket_tree =
        match &config.proxy_socket {
            Some(socket) => Some(socket_clone(socket).map_err(|e| {
                format!("could not bind the proxy socket {}: {e}", socket.display())
            })?),
            None => None,
        };
    // The CA bundle sits in that same directory: one file, cloned the same way (it is
    // world-readable, so no id mapping either).
    let bundle_tree = match &config.ca_bundle {
        Some(bundle) => Some(
            socket_clone(bundle)
                .map_err(|e| format!("could not bind the CA bundle {}: {e}", bundle.display()))?,
        ),
        None => None,
    };

    rustix::mount::mount(
        "outboard",
        STAGE,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV,
        Some(c"mode=0755,size=64k"),
    )
    .map_err(|e| format!("could not mount the staging tmpfs: {e}"))?;
    let stage = Path::new(STAGE);
    let workspace = stage.join("workspace");
    mkdir(&workspace)?;
    attach(&workspace_tree, &workspace)?;
    let agent = stage.join("agent");
    std::fs::File::create(&agent).map_err(|e| format!("staging the agent: {e}"))?;
    attach(&agent_tree, &agent)?;
    let mut ro_mounts = Vec::with_capacity(ro_trees.len());
    for (n, (tree, target, is_dir)) in ro_trees.iter().enumerate() {
        let staged = stage.join(format!("ro{n}"));
        if *is_dir {
            mkdir(&staged)?;
        } else {
            // A file (a worktree's `.git` file): its mount point is a file.
            std::fs::File::create(&staged).map_err(|e| format!("staging a file bind: {e}"))?;
        }
        attach(tree, &staged)?;
        ro_mounts.push((staged, target.clone()));
    }
    let proxy_socket = match &socket_tree {
        Some(tree) => {
            let staged = stage.join("proxy.sock");
            std::fs::File::create(&staged).map_err(|e| format!("staging the proxy socket: {e}"))?;
            attach(tree, &staged)?;
            Some(staged)
        }
        None => None,
    };
    let ca_bundle = match &bundle_tree {
        Some(tree) => {
            let staged = stage.join("ca-bundle.pem");
            std::fs::File::create(&staged).map_err(|e| format!("staging the CA bundle: {e}"))?;
            attach(tree, &staged)?;
            Some(staged)
        }
        None => None,
    };
    Ok(Sources { workspace, agent, ro_mounts, proxy_socket, ca_bundle })
}

/// A detached, `nosuid`, `nodev`, `noexec` clone of one socket (or file) (kept writable: a socket on a
/// read-only mount still accepts connections on Linux, but nothing here should rely on that).
fn socket_clone(source: &Path) -> std::io::Result<OwnedFd> {
    let tree = rustix::mount::open_tree(
        CWD,
        source,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )?;
    let flags = MountAttrFlags::MOUNT_ATTR_NOSUID
        | MountAttrFlags::MOUNT_ATTR_NODEV
        | MountAttrFlags::MOUNT_ATTR_NOEXEC;
    mount_setattr(tree.as_fd(), flags.bits().into(), None)?;
    Ok(tree)
}

/// Attaches a detached mount at `target`.
fn attach(tree: &OwnedFd, target: &Path) -> Result<(), String> {
    rustix::mount::move_mount(
        tree.as_fd(),
        "",
        CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| format!("could not attach {}: {e}", target.display()))
}

/// A detached, read-only, `nosuid` clone of `source` without an id mapping.
fn plain_clone(source: &Path) -> std::io::Result<OwnedFd> {
    let tree = rustix::mount::open_tree(
        CWD,
        source,
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
    )?;
    let flags = MountAttrFlags::MOUNT_ATTR_RDONLY
        | MountAttrFlags::MOUNT_ATTR_NOSUID
        | MountAttrFlags::MOUNT_ATTR_NODEV;
    mount_setattr(tree.as_fd(), flags.bits().into(), None)?;
    Ok(tree)
}

fn mkdir(path: &Path) -> Result<(), String> {
    std::fs::create_dir(path).map_err(|e| format!("staging {}: {e}", path.display()))
}

fn idmap_error(path: &Path, e: &std::io::Error) -> String {
    format!(
        "could not give the sandbox's user access to {} through an idmapped mount ({e}); the \
         filesystem must support idmapped mounts (ext4, xfs, btrfs, tmpfs on Linux 6.3+) when \
         the server runs as root — or run the server as an unprivileged user",
        path.display()
    )
}

/// User namespaces that map a file owner to the sandbox's host uid, one per distinct owner.
struct Userns {
    id: u32,
    by_owner: HashMap<(u32, u32), OwnedFd>,
}

impl Userns {
    fn new(id: u32) -> Userns {
        Userns { id, by_owner: HashMap::new() }
    }

    /// A detached, idmapped clone of `source` (`nosuid`, `nodev`): `source`'s owner appears
    /// as the sandbox's uid and gid.
    fn clone_tree(&mut self, source: &Path, read_only: bool) -> std::io::Result<OwnedFd> {
        let meta = std::fs::metadata(source)?;
        let owner = (meta.uid(), meta.gid());
        let userns = match self.by_owner.get(&owner) {
            Some(fd) => fd,
            None => {
                let fd = make_userns(owner, self.id)?;
                self.by_owner.entry(owner).or_insert(fd)
            }
        };
        let tree = rustix::mount::open_tree(
            CWD,
            source,
            OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
        )?;
        let mut flags = MountAttrFlags::MOUNT_ATTR_IDMAP
            | MountAttrFlags::MOUNT_ATTR_NOSUID
            | MountAttrFlags::MOUNT_ATTR_NODEV;
        if read_only {
            flags |= MountAttrFlags::MOUNT_ATTR_RDONLY;
        }
        mount_setattr(tree.as_fd(), flags.bits().into(), Some(userns.as_fd()))?;
        Ok(tree)
    }
}

/// A user namespace whose single mapping is `owner` (inside) → `id` (host), for uid and gid.
/// A forked child enters a new user namespace and waits; the launcher writes its id maps and
/// keeps a descriptor of the namespace, which outlives the child. (A first version exec'd a
/// holder process: 3.5 ms of the 85 MB binary's start per provision; a fork is ~0.1 ms.)
fn make_userns(owner: (u32, u32), id: u32) -> std::io::Result<OwnedFd> {
    let (parent_end, child_end) = std::os::unix::net::UnixStream::pair()?;
    let pid = fork_holder(child_end.as_raw_fd(), parent_end.as_raw_fd())?;
    drop(child_end);
    let result = (|| {
        let mut ready = [0u8; 1];
        (&parent_end).read_exact(&mut ready)?;
        if ready[0] != b'r' {
            return Err(std::io::Error::other("could not create a user namespace"));
        }
        std::fs::write(format!("/proc/{pid}/uid_map"), format!("{} {id} 1\n", owner.0))?;
        std::fs::write(format!("/proc/{pid}/gid_map"), format!("{} {id} 1\n", owner.1))?;
        let fd = rustix::fs::open(
            format!("/proc/{pid}/ns/user"),
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(fd)
    })();
    // The child waits for this end to close, then exits.
    drop(parent_end);
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
    }
    result
}

/// Forks the namespace holder: the child unshares a user namespace, writes `r` (or `x` when it
/// could not) on `sock`, waits for EOF and exits. Returns the child's pid.
#[allow(unsafe_code)]
fn fork_holder(sock: RawFd, parent_end: RawFd) -> std::io::Result<i32> {
    // SAFETY: the launcher is single-threaded (it runs first thing in `main` and never starts a
    // thread), so the forked child is a complete copy with no lock held by a vanished thread.
    // The child runs only async-signal-safe system calls (close, unshare, write, read, _exit)
    // on descriptors it owns, and leaves through `_exit` without returning into Rust code.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: see above; `byte` and `buf` are live locals of the sizes passed.
        unsafe {
            libc::close(parent_end);
            let byte: u8 = if libc::unshare(libc::CLONE_NEWUSER) == 0 { b'r' } else { b'x' };
            libc::write(sock, std::ptr::from_ref(&byte).cast(), 1);
            let mut buf = [0u8; 1];
            while libc::read(sock, buf.as_mut_ptr().cast(), 1) > 0 {}
            libc::_exit(0);
        }
    }
    Ok(pid)
}

/// `unshare(2)` of a namespace (never `CLONE_FILES`).
#[allow(unsafe_code)]
fn unshare(flags: rustix::thread::UnshareFlags) -> std::io::Result<()> {
    debug_assert!(!flags.contains(rustix::thread::UnshareFlags::FILES));
    // SAFETY: rustix marks unshare unsafe only because `CLONE_FILES` can leave other threads
    // with descriptors of a table they no longer share; the launcher is single-threaded and only
    // ever passes namespace flags.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(std::io::Error::from)
}

/// `struct mount_attr` of `<linux/mount.h>` (`MOUNT_ATTR_SIZE_VER0`).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH, {attr_set, userns_fd})` (`userns_fd` only with
/// `MOUNT_ATTR_IDMAP`): the one syscall rustix does
/// not wrap.
#[allow(unsafe_code)]
fn mount_setattr(
    tree: BorrowedFd<'_>,
    attr_set: u64,
    userns: Option<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    let userns_fd = match userns {
        Some(fd) => u64::try_from(fd.as_raw_fd()).map_err(std::io::Error::other)?,
        None => 0,
    };
    let attr = MountAttr { attr_set, attr_clr: 0, propagation: 0, userns_fd };
    // SAFETY: every pointer passed is valid for the duration of the call: the empty path is a
    // static NUL-terminated string and `attr` a live, properly laid out `struct mount_attr` whose
    // size is passed with it; both descriptors are borrowed, so they stay open during the call.
    // The kernel only reads through the pointers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            std::ptr::from_ref(&attr),
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `bwrap`'s absolute path, from the server's `PATH`.
pub fn find_bwrap() -> Result<PathBuf, SandboxError> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join("bwrap"))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .map(|m| m.is_file() && m.mode() & 0o111 != 0)
                .unwrap_or(false)
        })
        .ok_or_else(|| SandboxError::Start(bwrap::NOT_FOUND.to_string()))
}
