//! Per-sandbox control groups: freezing, limits (memory, processes, CPU share) and counting
//! limit hits, over whatever the machine offers — detected once per process and logged.
//!
//! Order of preference for freezing: cgroup v2 `cgroup.freeze`, the cgroup v1 freezer, and
//! otherwise `SIGSTOP`/`SIGCONT` of every process of the sandbox (see
//! the instance). Limits need the matching controller; without one the agent sets
//! rlimits instead (`ulimit` before each command).
//!
//! Layout: each sandbox gets `<hierarchy>/<the server's own cgroup>/outboard/<pid>-<start>-<n>`
//! (the server's pid, its start time in clock ticks since boot from `/proc/self/stat`, and a
//! counter). Nested under the server's own group so a memory limit on the server's container
//! still covers its sandboxes; all sandboxes share one `outboard` parent so, with `cpu.shares`,
//! together they weigh like one peer of the server rather than each one.
//!
//! Orphans ([`reap_orphans`], at every server start): a server that dies without stopping its
//! sandboxes (SIGKILL, a crash) leaves their groups behind, and with the v1 freezer their
//! processes frozen forever — the SIGKILL that `--die-with-parent` sends them stays pending
//! until they are thawed. The rule for whose groups a starting server may reap: a group is an
//! orphan when its owner (pid *and* start time, so a reused pid is not mistaken for the owner)
//! is no longer a live process. Several servers may share one parent (two data dirs on one host,
//! tests in parallel); a live server's sandboxes are never touched, whatever its data dir. (The
//! rule reads `/proc`, so it assumes servers sharing a parent share a pid namespace, as a
//! container with its own pid namespace normally has its own cgroups too.) Names
//! of the older `<pid>-<n>` form are judged by the pid alone; names of any other form are not
//! ours and are left alone. Reaping kills every process of the group in every hierarchy
//! (SIGKILL first, so nothing runs between the thaw and the kill), thaws it, waits until every
//! hierarchy's group is empty and removes the directories. The `SIGSTOP` fallback (no freezer)
//! needs no reaper: the kernel's `SIGKILL` from `--die-with-parent` ends stopped processes too.
//!
//! cgroup v2 is written to the interface but untested here (this project's machines mount v1);
//! where the server's own group holds processes, v2 cannot enable controllers below it, and only
//! the freezer (which needs none) is used.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::config::SandboxLimits;

/// How sandboxes are frozen on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreezeMethod {
    /// cgroup v2 `cgroup.freeze`.
    CgroupV2,
    /// cgroup v1 freezer (`freezer.state`).
    CgroupV1,
    /// `SIGSTOP`/`SIGCONT` of every process in the sandbox.
    Signals,
}

/// What the machine offers, found once.
#[derive(Debug, Clone)]
pub struct Controls {
    /// How sandboxes are frozen.
    pub freeze: FreezeMethod,
    v2: Option<PathBuf>,
    v1_freezer: Option<PathBuf>,
    v1_memory: Option<PathBuf>,
    v1_pids: Option<PathBuf>,
    v1_cpu: Option<PathBuf>,
    /// v2 only: whether memory/pids/cpu could be enabled below the parent.
    v2_limits: bool,
}

impl Controls {
    /// Whether cgroups enforce memory and process limits (else rlimits are used).
    pub fn has_limits(&self) -> bool {
        self.v2_limits || (self.v1_memory.is_some() && self.v1_pids.is_some())
    }

    /// The machine's controls, detected on first call and logged.
    pub fn get() -> &'static Controls {
        static CONTROLS: OnceLock<Controls> = OnceLock::new();
        CONTROLS.get_or_init(|| {
            let c = detect();
            tracing::info!(
                freeze = ?c.freeze,
                limits = if c.has_limits() { "cgroups" } else { "rlimits" },
                v2 = ?c.v2, v1_freezer = ?c.v1_freezer, v1_memory = ?c.v1_memory,
                v1_pids = ?c.v1_pids, v1_cpu = ?c.v1_cpu,
                "sandbox controls detected"
            );
            c
        })
    }
}

/// The server's own path in the hierarchy whose controller list contains `name` (v1), or the
/// v2 line (`name` empty).
fn own_path(name: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit =
            if name.is_empty() { ctrls.is_empty() } else { ctrls.split(',').any(|c| c == name) };
        hit.then(|| path.trim_start_matches('/').to_string())
    })
}

fn detect() -> Controls {
    let mut c = Controls {
        freeze: FreezeMethod::Signals,
        v2: None,
        v1_freezer: None,
        v1_memory: None,
        v1_pids: None,
        v1_cpu: None,
        v2_limits: false,
    };
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        let Some(own) = own_path("") else { return c };
        let own_dir = root.join(own);
        let parent = own_dir.join("outboard");
        if std::fs::create_dir_all(&parent).is_ok() {
            // Fails (EBUSY) when the server's group holds processes and is not the root.
            let enable = |dir: &Path| {
                std::fs::write(dir.join("cgroup.subtree_control"), "+memory +pids +cpu").is_ok()
            };
            c.v2_limits = enable(&own_dir) && enable(&parent);
            if parent.join("cgroup.freeze").exists() || own_dir.join("cgroup.freeze").exists() {
                c.freeze = FreezeMethod::CgroupV2;
            }
            c.v2 = Some(parent);
        }
        return c;
    }
    let v1 = |name: &str, probe: &str| -> Option<PathBuf> {
        let mount = root.join(name);
        if !mount.join(probe).exists() && !mount.join("cgroup.procs").exists() {
            return None;
        }
        let parent = mount.join(own_path(name)?).join("outboard");
        std::fs::create_dir_all(&parent).ok()?;
        parent.join(probe).exists().then_some(parent)
    };
    c.v1_freezer = v1("freezer", "freezer.state");
    c.v1_memory = v1("memory", "memory.limit_in_bytes");
    c.v1_pids = v1("pids", "pids.max");
    c.v1_cpu = v1("cpu", "cpu.shares");
    if c.v1_freezer.is_some() {
        c.freeze = FreezeMethod::CgroupV1;
    }
    c
}

/// One sandbox's groups; removed (once empty) by [`Cgroup::remove`].
#[derive(Debug)]
pub struct Cgroup {
    /// Every directory the sandbox's processes are added to.
    dirs: Vec<PathBuf>,
    v2: Option<PathBuf>,
    freezer: Option<PathBuf>,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
}

/// Limit hits so far (monotonic counters of the kernel).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hits {
    /// Forks refused at the process limit.
    pub pids: u64,
    /// Processes killed by the OOM killer.
    pub oom: u64,
}

fn write(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::write(path, value).map_err(|e| {
        std::io::Error::new(e.kind(), format!("writing {value:?} to {}: {e}", path.display()))
    })
}

/// `key N` from a flat-keyed cgroup file.
fn keyed(path: &Path, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix(key)?.trim().parse().ok()))
        .unwrap_or(0)
}

impl Cgroup {
    /// Creates the groups of a new sandbox and sets its limits; `None` when the machine has no
    /// usable cgroup at all.
    pub fn create(controls: &Controls, limits: &SandboxLimits) -> std::io::Result<Option<Cgroup>> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!("{}-{}", own_tag(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let mk = |parent: &Option<PathBuf>| -> std::io::Result<Option<PathBuf>> {
            let Some(parent) = parent else { return Ok(None) };
            let dir = parent.join(&name);
            match std::fs::create_dir(&dir) {
                Ok(()) => Ok(Some(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Some(dir)),
                Err(e) => {
                    Err(std::io::Error::new(e.kind(), format!("creating {}: {e}", dir.display())))
                }
            }
        };
        let mut cg = Cgroup { dirs: Vec::new(), v2: None, freezer: None, memory: None, pids: None };
        if let Some(dir) = mk(&controls.v2)? {
            if controls.v2_limits {
                write(&dir.join("memory.max"), &limits.memory_bytes.to_string())?;
                write(&dir.join("memory.swap.max"), "0").ok();
                write(&dir.join("pids.max"), &limits.max_processes.to_string())?;
                let weight = 1 + (u64::from(limits.cpu_shares).saturating_sub(2) * 9999) / 262_142;
                write(&dir.join("cpu.weight"), &weight.to_string())?;
                cg.memory = Some(dir.clone());
                cg.pids = Some(dir.clone());
            }
            cg.v2 = Some(dir.clone());
            cg.dirs.push(dir);
        }
        if let Some(dir) = mk(&controls.v1_freezer)? {
            cg.freezer = Some(dir.clone());
            cg.dirs.push(dir);
        }
        if let Some(dir) = mk(&controls.v1_memory)? {
            write(&dir.join("memory.limit_in_bytes"), &limits.memory_bytes.to_string())?;
            cg.memory = Some(dir.clone());
            cg.dirs.push(dir);
        }
        if let Some(dir) = mk(&controls.v1_pids)? {
            write(&dir.join("pids.max"), &limits.max_processes.to_string())?;
            cg.pids = Some(dir.clone());
            cg.dirs.push(dir);
        }
        if let Some(dir) = mk(&controls.v1_cpu)? {
            write(&dir.join("cpu.shares"), &limits.cpu_shares.to_string())?;
            cg.dirs.push(dir);
        }
        Ok((!cg.dirs.is_empty()).then_some(cg))
    }

    /// Every directory of the sandbox's groups (what a process joins, by writing its pid to
    /// each `cgroup.procs`).
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Moves process `pid` (with its future children) into every group.
    pub fn add(&self, pid: u32) -> std::io::Result<()> {
        for dir in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Whether this sandbox can be frozen by its cgroup.
    pub fn can_freeze(&self) -> bool {
        self.v2.is_some() || self.freezer.is_some()
    }

    /// Freezes every process and waits until the kernel says frozen.
    pub async fn freeze(&self) -> std::io::Result<()> {
        let (file, value, done): (PathBuf, &str, Box<dyn Fn() -> bool + Send>) = if let Some(dir) =
            &self.v2
        {
            let events = dir.join("cgroup.events");
            (dir.join("cgroup.freeze"), "1", Box::new(move || keyed(&events, "frozen ") == 1))
        } else if let Some(dir) = &self.freezer {
            let state = dir.join("freezer.state");
            (
                state.clone(),
                "FROZEN",
                Box::new(move || {
                    std::fs::read_to_string(&state).map(|s| s.trim() == "FROZEN").unwrap_or(false)
                }),
            )
        } else {
            return Err(std::io::Error::other("no cgroup freezer"));
        };
        write(&file, value)?;
        for _ in 0..2000 {
            if done() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        Err(std::io::Error::other("the cgroup did not reach the frozen state within 1 s"))
    }

    /// Thaws every process (returns once the kernel accepted the request).
    pub fn thaw(&self) -> std::io::Result<()> {
        if let Some(dir) = &self.v2 {
            write(&dir.join("cgroup.freeze"), "0")
        } else if let Some(dir) = &self.freezer {
            write(&dir.join("freezer.state"), "THAWED")
        } else {
            Ok(())
        }
    }

    /// Limit hits so far.
    pub fn hits(&self) -> Hits {
        let pids = self.pids.as_ref().map_or(0, |d| keyed(&d.join("pids.events"), "max "));
        let oom = self.memory.as_ref().map_or(0, |d| {
            if self.v2.is_some() {
                keyed(&d.join("memory.events"), "oom_kill ")
            } else {
                keyed(&d.join("memory.oom_control"), "oom_kill ")
            }
        });
        Hits { pids, oom }
    }

    /// Bytes of memory charged to the sandbox now, when the memory controller is there.
    pub fn memory_bytes(&self) -> Option<u64> {
        let dir = self.memory.as_ref()?;
        let file = if self.v2.is_some() { "memory.current" } else { "memory.usage_in_bytes" };
        std::fs::read_to_string(dir.join(file)).ok()?.trim().parse().ok()
    }

    /// Sends SIGKILL to every process in the sandbox's groups (frozen ones die once thawed).
    pub fn kill_all(&self) {
        for dir in &self.dirs {
            for pid in procs(dir) {
                sigkill(pid);
            }
        }
    }

    /// Removes the groups in the background, once their processes are gone.
    pub fn remove(self) {
        let dirs = self.dirs;
        let frozen = self.v2.clone().or(self.freezer.clone());
        let work = move || {
            // A frozen v1 task never handles its pending SIGKILL: thaw first.
            if let Some(dir) = &frozen {
                let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
                let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
            }
            for _ in 0..500 {
                let mut left = false;
                for dir in &dirs {
                    for pid in procs(dir) {
                        sigkill(pid);
                    }
                    if std::fs::remove_dir(dir).is_err() && dir.exists() {
                        left = true;
                    }
                }
                if !left {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            tracing::warn!(?dirs, "sandbox cgroups not removed after 5 s");
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn_blocking(work);
        } else {
            work();
        }
    }
}

/// This process's part of its groups' names: `<pid>-<start time>`.
fn own_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let pid = std::process::id();
        match process_start(pid) {
            Some((start, _)) => format!("{pid}-{start}"),
            None => format!("{pid}-0"),
        }
    })
}

/// The start time (clock ticks since boot) and state letter of process `pid`, when it exists.
fn process_start(pid: u32) -> Option<(u64, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses. After the comm, the
    // state is field 3 and the start time field 22 of the line.
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?.chars().next()?;
    let start = rest.nth(18)?.parse().ok()?;
    Some((start, state))
}

/// Who created a group, from its name: `(pid, start time)`, the start time absent in the older
/// `<pid>-<n>` form; `None` when the name is not one of ours.
fn owner_of(name: &str) -> Option<(u32, Option<u64>)> {
    let parts: Vec<&str> = name.split('-').collect();
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !parts.iter().all(|p| number(p)) {
        return None;
    }
    match parts.as_slice() {
        [pid, _] => Some((pid.parse().ok()?, None)),
        [pid, start, _] => Some((pid.parse().ok()?, Some(start.parse().ok()?))),
        _ => None,
    }
}

/// Whether the owner of a group is still a live process (a zombie is not).
fn owner_alive(pid: u32, start: Option<u64>) -> bool {
    match process_start(pid) {
        None => false,
        Some((_, 'Z' | 'X' | 'x')) => false,
        Some((actual, _)) => start.is_none_or(|s| s == actual),
    }
}

/// What [`reap_orphans`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reaped {
    /// Orphaned sandbox groups found (each counted once across hierarchies).
    pub groups: usize,
    /// Processes killed in them.
    pub processes: usize,
    /// Group directories that could not be removed before the deadline.
    pub left: Vec<PathBuf>,
}

/// Every pid listed in a group's `cgroup.procs`.
fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn sigkill(pid: u32) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
}

/// Thaws a group in whichever freezer it has (v2 `cgroup.freeze`, v1 `freezer.state`).
fn thaw_dir(dir: &Path) {
    let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
    let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
}

/// Finds the sandbox groups of servers that are gone (see the module's header for the rule),
/// kills their processes in every hierarchy, and removes the groups; waits at most `deadline`
/// for them to empty. Blocking: call it on a blocking thread.
pub fn reap_orphans(controls: &Controls, deadline: Duration) -> Reaped {
    let parents: Vec<&PathBuf> = [
        &controls.v2,
        &controls.v1_freezer,
        &controls.v1_memory,
        &controls.v1_pids,
        &controls.v1_cpu,
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut names = std::collections::BTreeSet::new();
    for parent in &parents {
        let Ok(entries) = std::fs::read_dir(parent) else { continue };
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if let Some((pid, start)) = owner_of(&name) {
                if !owner_alive(pid, start) {
                    names.insert(name);
                }
            }
        }
    }
    let dirs: Vec<PathBuf> = names
        .iter()
        .flat_map(|name| parents.iter().map(move |p| p.join(name)))
        .filter(|d| d.is_dir())
        .collect();
    let mut killed = std::collections::BTreeSet::new();
    // SIGKILL before the thaw: a frozen task keeps the signal pending and dies as it wakes, so
    // no orphan runs a single instruction after the thaw.
    for dir in &dirs {
        for pid in procs(dir) {
            killed.insert(pid);
            sigkill(pid);
        }
    }
    for dir in &dirs {
        thaw_dir(dir);
    }
    let until = std::time::Instant::now() + deadline;
    let mut left: Vec<PathBuf> = dirs;
    loop {
        left.retain(|dir| {
            for pid in procs(dir) {
                killed.insert(pid);
                sigkill(pid);
            }
            std::fs::remove_dir(dir).is_err() && dir.exists()
        });
        if left.is_empty() || std::time::Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Reaped { groups: names.len(), processes: killed.len(), left }
}

#[cfg(test)]
mod reap_tests {
    use super::*;

    #[test]
    fn names_say_who_owns_a_group() {
        assert_eq!(owner_of("123-456-7"), Some((123, Some(456))));
        assert_eq!(owner_of("123-7"), Some((123, None)));
        for foreign in ["", "abc", "123", "1-2-3-4", "12-x", "-1-2", "1--2"] {
            assert_eq!(owner_of(foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn this_process_owns_its_tag_and_a_dead_or_reused_pid_does_not() {
        let (pid, start) = owner_of(&format!("{}-0", own_tag())).unwrap();
        assert!(owner_alive(pid, start));
        assert!(!owner_alive(pid, start.map(|s| s + 1)), "a reused pid is not the owner");
        // pid_max is at most 2^22: this pid never exists.
        assert!(!owner_alive(u32::MAX - 1, None));
    }
}
