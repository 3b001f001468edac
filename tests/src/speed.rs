//! What `bench_speed` measures a process with (issue #37): the real `outboard` binary started as
//! a child, timed from its spawn to the requests reaching the mock model
//! ([`crate::mock_llm::MockLlm::arrivals`]), its CPU as the kernel counted it at its reaping
//! (`wait4`), and, sampled, its own peak RSS and that of its process tree.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

/// How often the tree sampler reads `/proc`: the tree's peak lasts as long as its sandbox
/// (most of the task), and a finer period took a tenth of a 2-core machine's CPU from what it
/// measured.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// A child the bench waited for.
#[derive(Debug, Clone)]
pub struct Reaped {
    /// When it was spawned (just before `spawn`).
    pub spawned: Instant,
    /// When `wait4` returned.
    pub ended: Instant,
    /// Its exit code (`-1` for a signal).
    pub code: i32,
    /// User + system CPU of the process and every descendant it waited for.
    pub cpu: Duration,
    /// The process's own peak RSS, bytes: the kernel's high-water mark of its memory
    /// (`VmHWM`), as last read by the sampler, at most [`SAMPLE_EVERY`] before its exit.
    ///
    /// Not `wait4`'s `ru_maxrss`: std spawns with `posix_spawn`, whose child shares the bench's
    /// memory until it execs, and the kernel then counts the bench's own peak as the child's, so
    /// that figure never fell below the bench's (16 MB).
    pub peak_rss: u64,
    /// The largest sum of the RSS of the process and all its descendants at one sample, bytes.
    pub tree_peak_rss: u64,
}

/// Runs `command` to its end, sampling its tree's RSS meanwhile. Blocking: call it off the
/// runtime that serves the mock model.
pub fn run(mut command: Command) -> anyhow::Result<Reaped> {
    let spawned = Instant::now();
    let child = command.spawn().with_context(|| format!("cannot start {command:?}"))?;
    let pid = child.id();
    let sampler = Sampler::start(pid);
    let waited = wait4(pid);
    let ended = Instant::now();
    let (tree_peak_rss, peak_rss) = sampler.stop();
    // `wait4` reaped it: the std handle must not wait again (dropping it does not).
    drop(child);
    let (code, cpu) = waited?;
    Ok(Reaped { spawned, ended, code, cpu, peak_rss, tree_peak_rss })
}

/// `wait4(pid)`: the exit code and the CPU (user + system) the kernel summed for the process and
/// the descendants it reaped. std's `wait` discards the usage.
#[allow(unsafe_code)]
fn wait4(pid: u32) -> anyhow::Result<(i32, Duration)> {
    let pid = libc::pid_t::try_from(pid).context("pid out of range")?;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both pointers are to live locals of the right types for the call's duration.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            bail!("wait4({pid}): {e}");
        }
    }
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    let cpu = tv(usage.ru_utime) + tv(usage.ru_stime);
    Ok((code, cpu))
}

/// A thread that samples a process's memory every [`SAMPLE_EVERY`] until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, u64)>,
}

impl Sampler {
    /// Starts sampling `pid` and its descendants.
    pub fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || sample_tree(pid, &stop))
        };
        Sampler { stop, thread }
    }

    /// Stops: the largest summed RSS of the tree at one sample, and the process's own peak
    /// (`VmHWM`) as last read, bytes.
    pub fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or((0, 0))
    }
}

/// Until `stop`: the largest summed RSS of `pid` and its descendants seen, and `pid`'s own
/// high-water mark as last read, bytes.
fn sample_tree(pid: u32, stop: &AtomicBool) -> (u64, u64) {
    let (mut tree, mut own) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        tree = tree.max(tree_rss(pid));
        own = own.max(high_water(pid));
        std::thread::sleep(SAMPLE_EVERY);
    }
    (tree, own)
}

/// The peak RSS of `pid` so far (`VmHWM` in `/proc/PID/status`), bytes; 0 once it has exited.
pub fn high_water(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The RSS of `pid` and its descendants now, bytes (processes that vanish midway count 0).
fn tree_rss(pid: u32) -> u64 {
    let mut total = 0;
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        total += rss(p);
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else { continue };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            todo.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    total
}

/// The resident set of `pid`, bytes (0 when gone): `/proc/PID/statm`, the cheapest file that
/// has it (the sampler must not weigh on what it measures).
fn rss(pid: u32) -> u64 {
    /// The page size of x86-64 and of most Linux hosts (`statm` counts pages).
    const PAGE: u64 = 4096;
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
    statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse::<u64>().ok())
        .map_or(0, |p| p * PAGE)
}

/// A build under test: a directory holding the release `outboard` and `outboard-server`.
#[derive(Debug, Clone)]
pub struct Build {
    /// Its name in the tables (`work`, a commit).
    pub label: String,
    /// The directory of its binaries.
    pub dir: PathBuf,
}

impl Build {
    /// Parses `LABEL=DIR`, or `DIR` (labelled by its path).
    pub fn parse(spec: &str) -> Result<Build, String> {
        let (label, dir) = match spec.split_once('=') {
            Some((label, dir)) => (label.to_owned(), PathBuf::from(dir)),
            None => (spec.to_owned(), PathBuf::from(spec)),
        };
        for bin in ["outboard", "outboard-server"] {
            if !dir.join(bin).is_file() {
                return Err(format!("{} has no `{bin}` (build it first)", dir.display()));
            }
        }
        Ok(Build { label, dir })
    }

    /// The release binaries beside the running bench (`target/release`).
    pub fn beside_bench() -> Result<Build, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let dir = exe.parent().unwrap_or(Path::new(".")).to_path_buf();
        Build::parse(&format!("work={}", dir.display()))
    }

    /// `outboard` or `outboard-server` of this build.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// A command for `bin` (`outboard`, `outboard-server`) of `build` with a clean environment:
/// only `PATH`, `HOME` (`home`, which also receives the process's stderr as `NAME.stderr`),
/// `USER` and `extra` (nothing from the developer's `OUTBOARD_*`, no log level).
pub fn command(
    build: &Build,
    bin: &str,
    home: &Path,
    extra: &[(&str, &str)],
) -> anyhow::Result<Command> {
    let stderr = std::fs::File::create(home.join(format!("{bin}.stderr")))?;
    let mut cmd = Command::new(build.bin(bin));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("USER", "bench")
        .envs(extra.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr);
    Ok(cmd)
}

/// What a command of [`command`] wrote to its stderr (for a failed run's error).
pub fn stderr_of(home: &Path, bin: &str) -> String {
    std::fs::read_to_string(home.join(format!("{bin}.stderr"))).unwrap_or_default()
}

/// Milliseconds, for tables.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Megabytes (10⁶ bytes, as the issue counts them), for tables.
pub fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// The median of byte counts (the upper one of an even count; 0 for none).
pub fn median_bytes(values: impl IntoIterator<Item = u64>) -> u64 {
    let mut v: Vec<u64> = values.into_iter().collect();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The median and p90 of `samples` (nearest rank), sorted in place.
pub fn median_p90(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    (crate::bench::percentile(samples, 0.5), crate::bench::percentile(samples, 0.9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_reads_a_live_process_s_own_peak_and_a_gone_one_as_zero() {
        // This test process: its peak is at least what it holds now, and not the whole machine.
        let now = rss(std::process::id());
        let own = high_water(std::process::id());
        assert!(own >= now, "VmHWM {own} below an earlier VmRSS {now}");
        assert!(own > 1 << 20 && own < 4 << 30, "VmHWM {own} bytes");
        // A child that exited and was reaped has no /proc entry left.
        let mut child = Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait");
        assert_eq!(high_water(pid), 0);
    }
}
