//! Sandbox hosts as separate processes for tests and benches: [`NetNs`] is a network namespace
//! of this machine joined to the test's by a veth pair (a private /30 on it), and
//! [`HostProcess`] is the real `outboard-server sandbox-host` binary running in one (or on
//! 127.0.0.1), with its address and certificate fingerprint read from its ready line.
//!
//! Traffic between the test and a host in a namespace crosses the veth pair only: it stays on
//! this machine, yet the host has its own network stack, as on another machine.
//!
//! Needs root and `ip` (iproute2) and `nsenter` (util-linux) for namespaces; without them
//! [`NetNs::create`] says what is missing (no silent skip).
//!
//! Design choice: a host is started in the namespace with `nsenter --net=/run/netns/NAME`, not
//! `ip netns exec NAME`: the latter also makes a mount namespace with a fresh `/sys`, which
//! hides `/sys/fs/cgroup`, so the host's sandboxes would silently run without cgroup limits nor
//! the freezer. `nsenter` with only `--net` enters the network namespace and `exec`s the binary,
//! so the child's pid is the host's and killing it kills the host.

use std::io::{BufRead as _, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use outboard_server::remote::client::HostEndpoint;

/// How long a host may take from spawn to its ready line (its sandbox check included).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long [`HostProcess::restart`] retries while the old process's port is still held.
pub const PORT_REUSE_DEADLINE: Duration = Duration::from_secs(30);

/// The interface name of the namespace's end of the veth pair.
pub const NS_INTERFACE: &str = "eth0";

/// Why a fixture could not be set up. Every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// Network namespaces need root.
    #[error(
        "network namespaces for sandbox host tests need root (this process runs as uid {uid}); \
         run the tests as root, e.g. in the project's dev container"
    )]
    NotRoot { uid: u32 },
    /// A command of the setup failed or could not run.
    #[error("`{command}` failed: {detail}; {hint}")]
    Command { command: String, detail: String, hint: &'static str },
    /// No namespace name or address was free.
    #[error(
        "no free network namespace name or 10.x.y.0/30 for pid {pid} after {tries} tries; delete \
         stale namespaces with `ip netns list` / `ip netns del NAME`"
    )]
    Exhausted { pid: u32, tries: u32 },
    /// The host process did not come up.
    #[error("the sandbox host did not start: {detail}\n--- its log ({log}) ---\n{stderr}")]
    Start { detail: String, log: String, stderr: String },
    /// A file or process operation of the fixture.
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HostsError {
    let what = what.into();
    move |error| HostsError::Io { what, error }
}

const IP_HINT: &str = "this needs root and iproute2 (`apt-get install iproute2`) with network \
                       namespace support in the kernel";

/// Runs `program args`, its stdout on success.
fn run(program: &str, args: &[&str], hint: &'static str) -> Result<String, HostsError> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program).args(args).stdin(Stdio::null()).output().map_err(|e| {
        HostsError::Command { command: command.clone(), detail: e.to_string(), hint }
    })?;
    if !out.status.success() {
        return Err(HostsError::Command {
            command,
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
            hint,
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> Result<String, HostsError> {
    run("ip", args, IP_HINT)
}

/// This process's uid (from `/proc/self`, no libc call).
fn uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX)
}

/// The inode of a namespace file (`/proc/PID/ns/net`, `/run/netns/NAME`): equal inodes are the
/// same namespace.
pub fn ns_inode(path: &Path) -> Result<u64, HostsError> {
    std::fs::metadata(path).map(|m| m.ino()).map_err(io(format!("cannot stat {}", path.display())))
}

/// The network namespace of process `pid`, as an inode.
pub fn net_ns_of(pid: u32) -> Result<u64, HostsError> {
    ns_inode(&PathBuf::from(format!("/proc/{pid}/ns/net")))
}

/// Namespaces made by this process, counted so parallel tests get distinct names and subnets.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Per process, this many namespaces (8 bits of the /30 index); the pid gives the other 14.
const PER_PROCESS: u32 = 256;

/// A network namespace `ob-<pid>-<n>` with a veth pair to the creating namespace: the host end
/// `obv<pid>-<n>` holds `.1` of a private 10.x.y.0/30, the namespace's end ([`NS_INTERFACE`])
/// `.2`; both ends and the namespace's `lo` are up. Dropping it kills what still runs inside,
/// then deletes the pair and the namespace (also when a test panics).
#[derive(Debug)]
pub struct NetNs {
    name: String,
    host_if: String,
    host_addr: Ipv4Addr,
    ns_addr: Ipv4Addr,
}

impl NetNs {
    /// Makes a namespace with a unique name and /30 (the pid and a per-process counter pick
    /// them; a /30 any interface of this namespace already overlaps is skipped). Namespaces left
    /// by dead test processes (`ob-<pid>-…` whose pid is gone) are deleted first.
    pub fn create() -> Result<NetNs, HostsError> {
        let uid = uid();
        if uid != 0 {
            return Err(HostsError::NotRoot { uid });
        }
        run("nsenter", &["--version"], "install util-linux (`apt-get install util-linux`)")?;
        ip(&["netns", "list"])?;
        remove_stale();
        let pid = std::process::id();
        let mut tries = 0;
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            if n >= PER_PROCESS {
                return Err(HostsError::Exhausted { pid, tries });
            }
            tries += 1;
            let index = ((pid % (1 << 14)) << 8) | n;
            let base = u32::from(Ipv4Addr::new(10, 0, 0, 0)) | (index << 2);
            let (host_addr, ns_addr) = (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2));
            if subnet_in_use(base)? {
                continue;
            }
            let name = format!("ob-{pid}-{n}");
            match ip(&["netns", "add", &name]) {
                Ok(_) => {}
                Err(HostsError::Command { detail, .. }) if detail.contains("exists") => continue,
                Err(e) => return Err(e),
            }
            // From here on a failure drops `ns`, which undoes what was done.
            let ns = NetNs { host_if: format!("obv{pid}-{n}"), name, host_addr, ns_addr };
            ns.wire()?;
            return Ok(ns);
        }
    }

    fn wire(&self) -> Result<(), HostsError> {
        let (name, host_if) = (self.name.as_str(), self.host_if.as_str());
        ip(&["link", "add", host_if, "type", "veth", "peer", "name", NS_INTERFACE, "netns", name])?;
        ip(&["addr", "add", &format!("{}/30", self.host_addr), "dev", host_if])?;
        ip(&["-n", name, "addr", "add", &format!("{}/30", self.ns_addr), "dev", NS_INTERFACE])?;
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        ip(&["-n", name, "link", "set", NS_INTERFACE, "up"])?;
        ip(&["link", "set", host_if, "up"])?;
        // The pair carries traffic once the kernel calls both ends up (a few ms at most).
        let state = PathBuf::from(format!("/sys/class/net/{host_if}/operstate"));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = std::fs::read_to_string(&state).unwrap_or_default();
            if now.trim() == "up" {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(HostsError::Command {
                    command: format!("cat {}", state.display()),
                    detail: format!("the veth pair stayed {:?} for 10 s", now.trim()),
                    hint: IP_HINT,
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// `ob-<pid>-<n>`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/<name>`, the file that keeps the namespace (what `nsenter --net=` takes).
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// The namespace's address on the pair (where a host inside listens).
    pub fn address(&self) -> Ipv4Addr {
        self.ns_addr
    }

    /// The creating namespace's address on the pair.
    pub fn host_address(&self) -> Ipv4Addr {
        self.host_addr
    }

    /// The creating namespace's end of the pair.
    pub fn host_interface(&self) -> &str {
        &self.host_if
    }

    /// The namespace as an inode (compare with [`net_ns_of`]).
    pub fn inode(&self) -> Result<u64, HostsError> {
        ns_inode(&self.path())
    }

    /// The processes running in the namespace.
    pub fn pids(&self) -> Vec<u32> {
        ip(&["netns", "pids", &self.name])
            .map(|out| out.split_whitespace().filter_map(|p| p.parse().ok()).collect())
            .unwrap_or_default()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        for pid in self.pids() {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        // Deleting one end deletes both; then the namespace goes with its last process.
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Whether an address of this namespace lies in the /30 at `base`.
fn subnet_in_use(base: u32) -> Result<bool, HostsError> {
    let out = ip(&["-o", "-4", "addr", "show"])?;
    Ok(out
        .split_whitespace()
        .filter_map(|w| w.split_once('/'))
        .any(|(addr, _)| addr.parse::<Ipv4Addr>().is_ok_and(|a| u32::from(a) & !3 == base)))
}

/// Deletes `ob-<pid>-<n>` namespaces (and their pairs) whose process is gone: a test process
/// killed before its drops ran leaves them behind.
fn remove_stale() {
    let Ok(list) = ip(&["netns", "list"]) else { return };
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some((pid, n)) = name.strip_prefix("ob-").and_then(|rest| rest.split_once('-')) else {
            continue;
        };
        if pid.parse::<u32>().is_err() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let ns = NetNs {
            name: name.to_owned(),
            host_if: format!("obv{pid}-{n}"),
            host_addr: Ipv4Addr::UNSPECIFIED,
            ns_addr: Ipv4Addr::UNSPECIFIED,
        };
        drop(ns);
    }
}

/// How to start a host process; kept for [`HostProcess::restart`].
#[derive(Debug, Clone)]
struct Launch {
    exe: PathBuf,
    /// `/run/netns/NAME` and the name, or none for this namespace.
    netns: Option<(PathBuf, String)>,
    data: PathBuf,
    extra: Vec<String>,
    log: String,
    stderr: PathBuf,
}

/// A real `outboard-server sandbox-host` process, killed (SIGKILL) when dropped.
pub struct HostProcess {
    launch: Launch,
    child: Option<Child>,
    token: String,
    addr: SocketAddr,
    fingerprint: String,
}

impl HostProcess {
    /// Starts the workspace's `outboard-server` (built by [`crate::harness::bin`]) as a sandbox
    /// host with data in `data` and the join `token`, in `netns` on its address (else on
    /// 127.0.0.1), port 0, with `extra` arguments; returns once it printed its ready line.
    pub fn spawn(
        netns: Option<&NetNs>,
        data: &Path,
        token: &str,
        extra: &[&str],
    ) -> Result<HostProcess, HostsError> {
        let exe = crate::harness::bin("outboard-server").map_err(|e| HostsError::Start {
            detail: format!("{e:#}; run `cargo build -p outboard-server`"),
            log: String::new(),
            stderr: String::new(),
        })?;
        Self::spawn_exe(&exe, netns, data, token, extra, 0, "debug")
    }

    /// [`HostProcess::spawn`] with the binary `exe` (a bench's release build) on `port`
    /// (0: any), logging at `log` (`OUTBOARD_LOG`: `debug` for tests, `warn` for a bench).
    pub fn spawn_exe(
        exe: &Path,
        netns: Option<&NetNs>,
        data: &Path,
        token: &str,
        extra: &[&str],
        port: u16,
        log: &str,
    ) -> Result<HostProcess, HostsError> {
        let launch = Launch {
            exe: exe.to_path_buf(),
            netns: netns.map(|ns| (ns.path(), ns.name().to_owned())),
            data: data.to_path_buf(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            log: log.to_owned(),
            stderr: PathBuf::from(format!("{}.stderr", data.display())),
        };
        let ip = netns.map_or(Ipv4Addr::LOCALHOST, NetNs::address);
        let listen = SocketAddr::from((ip, port));
        let (child, addr, fingerprint) = start(&launch, listen, Some(token))?;
        Ok(HostProcess { launch, child: Some(child), token: token.to_owned(), addr, fingerprint })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `wss://ADDR`.
    pub fn url(&self) -> String {
        format!("wss://{}", self.addr)
    }

    /// The SHA-256 of its certificate, as it printed it.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Its pid while it runs (the host's own: `nsenter` execs it).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its data directory.
    pub fn data(&self) -> &Path {
        &self.launch.data
    }

    /// What it wrote to stderr so far (every start appends).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.launch.stderr).unwrap_or_default()
    }

    /// An endpoint for a [`outboard_server::remote::client::HostClient`] named `name`, with
    /// the host's token and no pin (the first join pins it).
    pub fn endpoint(&self, name: &str) -> HostEndpoint {
        HostEndpoint { name: name.into(), url: self.url(), token: self.token.clone(), pin: None }
    }

    /// Kills it with SIGKILL and reaps it (its sandboxes die with it: `--die-with-parent`).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it if it runs and starts it again on the same address and port and data, without
    /// the token (the host uses the hash it stored). Retries while the port is still held, for
    /// at most [`PORT_REUSE_DEADLINE`].
    pub fn restart(&mut self) -> Result<(), HostsError> {
        self.kill();
        let deadline = Instant::now() + PORT_REUSE_DEADLINE;
        loop {
            match start(&self.launch, self.addr, None) {
                Ok((child, addr, fingerprint)) => {
                    self.child = Some(child);
                    (self.addr, self.fingerprint) = (addr, fingerprint);
                    return Ok(());
                }
                Err(HostsError::Start { stderr, .. })
                    if stderr.contains("in use") && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Spawns the host and waits (at most [`READY_TIMEOUT`]) for `sandbox host listening on ADDR
/// (certificate FP)`.
fn start(
    launch: &Launch,
    listen: SocketAddr,
    token: Option<&str>,
) -> Result<(Child, SocketAddr, String), HostsError> {
    let stderr_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&launch.stderr)
        .map_err(io(format!("cannot open {}", launch.stderr.display())))?;
    let log_from = stderr_file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut command = match &launch.netns {
        Some((path, _)) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", path.display())).arg("--").arg(&launch.exe);
            c
        }
        None => Command::new(&launch.exe),
    };
    command
        .arg("sandbox-host")
        .arg("--listen")
        .arg(listen.to_string())
        .arg("--data")
        .arg(&launch.data)
        .args(&launch.extra)
        .env_remove("OUTBOARD_JOIN_TOKEN")
        .env_remove("OUTBOARD_HOST_LISTEN")
        .env_remove("OUTBOARD_HOST_DATA")
        .env_remove("OUTBOARD_SANDBOX")
        .env("OUTBOARD_LOG", &launch.log)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr_file);
    if let Some(token) = token {
        command.env("OUTBOARD_JOIN_TOKEN", token);
    }
    let failed = |detail: String| {
        let log = std::fs::read(&launch.stderr).unwrap_or_default();
        let start = usize::try_from(log_from).unwrap_or(0).min(log.len());
        HostsError::Start {
            detail,
            log: launch.stderr.display().to_string(),
            stderr: String::from_utf8_lossy(&log[start..]).into_owned(),
        }
    };
    let mut child =
        command.spawn().map_err(|e| failed(format!("cannot run {}: {e}", launch.exe.display())))?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(failed("no stdout pipe".into()));
    };
    // The reader keeps draining stdout after the ready line, so the host never blocks on it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next());
        for _ in lines {}
    });
    let line = match rx.recv_timeout(READY_TIMEOUT) {
        Ok(Some(Ok(line))) => line,
        outcome => {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            let place = launch.netns.as_ref().map_or("this namespace", |(_, n)| n.as_str());
            let what = if outcome.is_err() {
                format!("no ready line within {READY_TIMEOUT:?}, killed")
            } else {
                "it exited before its ready line".to_owned()
            };
            return Err(failed(format!("{what} (listening on {listen} in {place}; {status})")));
        }
    };
    let parsed = line.strip_prefix("sandbox host listening on ").and_then(|rest| {
        let (addr, rest) = rest.split_once(' ')?;
        let fp = rest.strip_prefix("(certificate ")?.strip_suffix(')')?;
        Some((addr.parse::<SocketAddr>().ok()?, fp.to_owned()))
    });
    match parsed {
        Some((addr, fingerprint)) => Ok((child, addr, fingerprint)),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(failed(format!("an unexpected first line {line:?}")))
        }
    }
}
