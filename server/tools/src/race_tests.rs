//! Hostile-workspace tests of the file tools through [`run`]: a thread keeps swapping names
//! (`renameat2(RENAME_EXCHANGE)`, as a background command in the sandbox can) while the tools
//! run, so a tool that checks a path and then opens it by path again loses the race. Timeouts
//! here are failure detectors for a tool that blocks forever, not performance assertions.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::{Mode, OFlags, RenameFlags};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::*;
use outboard_sandbox::{Sandbox, SandboxConfig};
use outboard_vfs::Workspace;

/// Generous: only a tool stuck on a FIFO (forever) reaches it.
const STUCK: Duration = Duration::from_secs(60);

struct Env {
    _dir: tempfile::TempDir,
    workspace: Workspace,
    sandbox: Sandbox,
    reads: ReadLedger,
    cancel: CancellationToken,
    /// A directory next to the workspace, standing for the host (another org's files).
    host: PathBuf,
}

impl Env {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path().join("ws")).unwrap();
        let host = dir.path().join("host");
        std::fs::create_dir_all(&host).unwrap();
        std::fs::write(host.join("target.txt"), "HOST ORIGINAL\n").unwrap();
        std::fs::write(host.join("secret.txt"), "HOST-SECRET-7f3a\n").unwrap();
        let config = SandboxConfig {
            agent_exe: Some(outboard_sandbox::testing::agent_exe_for_tests().unwrap()),
            ..SandboxConfig::Bwrap
        };
        let sandbox = Sandbox::new(config, workspace.root().to_path_buf());
        Env {
            _dir: dir,
            workspace,
            sandbox,
            reads: ReadLedger::new(),
            cancel: CancellationToken::new(),
            host,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.workspace.root().join(rel)
    }

    async fn call(&mut self, name: &str, input: Value) -> ToolOutcome {
        let mut on_output = |_: outboard_shared::OutputStream, _: &str| {};
        let ctx = ToolCtx {
            workspace: &self.workspace,
            sandbox: &self.sandbox,
            on_output: &mut on_output,
            cancel: self.cancel.clone(),
            default_timeout: Duration::from_secs(20),
            events: None,
            reads: &mut self.reads,
            org: None,
            remote: None,
            read_only: false,
        };
        run(name, &input, ctx).await
    }

    /// What the host directory holds, name by name.
    fn host_snapshot(&self) -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&self.host)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
            })
            .collect();
        out.sort();
        out
    }
}

/// A thread exchanging the names `a` and `b` in `dir` until dropped.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    fn start(dir: &Path, a: &'static str, b: &'static str) -> Swapper {
        let fd: OwnedFd = rustix::fs::open(
            dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let (stop2, swaps2) = (stop.clone(), swaps.clone());
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(&fd, a, &fd, b, RenameFlags::EXCHANGE).unwrap();
                swaps2.fetch_add(1, Ordering::Relaxed);
            }
        });
        Swapper { stop, swaps, thread: Some(thread) }
    }

    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

impl Drop for Swapper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn assert_no_host_content(tool: &str, r: &ToolOutcome) {
    assert!(
        !r.output.contains("HOST-SECRET") && !r.output.contains("HOST ORIGINAL"),
        "{tool} returned content from outside the workspace: {}",
        r.output
    );
}

/// A directory and a symlink to the host swapped continuously while Write (new and existing
/// files), Edit, Read and Grep run: nothing outside is written or read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_with_a_symlink_never_leads_the_tools_out() {
    let mut env = Env::new();
    let deep = deep_dir(&env);
    std::fs::create_dir_all(env.path(&format!("{deep}d"))).unwrap();
    std::fs::write(env.path(&format!("{deep}d/target.txt")), "inside\n").unwrap();
    std::os::unix::fs::symlink(&env.host, env.path(&format!("{deep}lnk"))).unwrap();
    let before = env.host_snapshot();

    let swapper = Swapper::start(&env.path(&deep), "d", "lnk");
    let target = format!("{deep}d/target.txt");
    let work = tokio::spawn(async move {
        for i in 0..200 {
            // A new file needs no read; an existing one is read, then written and edited.
            let new = format!("{deep}d/new{i}.txt");
            let r = env.call("Write", json!({"file_path": new, "content": "created\n"})).await;
            assert_no_host_content("Write", &r);
            let r = env.call("Read", json!({"file_path": target})).await;
            assert_no_host_content("Read", &r);
            let r = env.call("Write", json!({"file_path": target, "content": "inside\n"})).await;
            assert_no_host_content("Write", &r);
            let input =
                json!({"file_path": target, "old_string": "inside", "new_string": "edited"});
            let r = env.call("Edit", input).await;
            assert_no_host_content("Edit", &r);
            let r = env.call("Read", json!({"file_path": format!("{deep}d/secret.txt")})).await;
            assert_no_host_content("Read", &r);
            if i % 4 == 0 {
                for input in [
                    json!({"pattern": "HOST", "output_mode": "content"}),
                    json!({"pattern": "HOST", "output_mode": "content", "path": format!("{deep}d")}),
                ] {
                    let r = env.call("Grep", input).await;
                    assert_no_host_content("Grep", &r);
                }
            }
        }
        env
    });
    let env = tokio::time::timeout(STUCK, work).await.expect("the tools got stuck").unwrap();
    let swaps = swapper.stop();
    assert!(swaps > 0, "the swapper never ran");
    assert_eq!(env.host_snapshot(), before, "a file outside the workspace was changed");
}

/// A directory nested 400 levels deep: each lookup of a path through it is slow, which widens
/// the window between a check and an open by the same path that the swapper has to hit (on a
/// busy machine the swapper rarely runs inside a window of a few microseconds).
fn deep_dir(env: &Env) -> String {
    let deep = "a/".repeat(400);
    std::fs::create_dir_all(env.path(&deep)).unwrap();
    deep
}

/// A regular file swapped with a FIFO under `Read` and `Grep`: they answer (the file's content
/// or a refusal naming the FIFO) and never block; a FIFO named directly is refused by type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_swapped_in_never_blocks_read_or_grep() {
    let mut env = Env::new();
    let deep = deep_dir(&env);
    std::fs::write(env.path(&format!("{deep}f")), "regular text\n").unwrap();
    let fifo_at = |name: &str| {
        let path = env.path(&format!("{deep}{name}"));
        rustix::fs::mkfifoat(rustix::fs::CWD, path, Mode::from_raw_mode(0o644)).unwrap();
    };
    fifo_at("p");
    fifo_at("still");

    let work = tokio::spawn(async move {
        let r = env.call("Read", json!({"file_path": format!("{deep}still")})).await;
        assert!(r.is_error && r.output.contains("is a FIFO, not a regular file"), "{}", r.output);
        let r = env.call("Grep", json!({"pattern": "x", "path": format!("{deep}still")})).await;
        assert!(r.is_error && r.output.contains("is a FIFO, not a regular file"), "{}", r.output);

        let swapper = Swapper::start(&env.path(&deep), "f", "p");
        for i in 0..2000 {
            let r = env.call("Read", json!({"file_path": format!("{deep}f")})).await;
            let fifo = r.is_error && r.output.contains("is a FIFO, not a regular file");
            assert!(fifo || r.output == "     1\tregular text\n", "Read: {}", r.output);
            if i % 20 == 0 {
                // Depending on the moment, the text is found under either name (or both, if the
                // swap happened between two entries of the listing), or not at all.
                let r = env.call("Grep", json!({"pattern": "regular"})).await;
                let ok = r.output.starts_with("Found ") || r.output == "No files found";
                assert!(ok && !r.is_error, "Grep: {}", r.output);
            }
        }
        swapper.stop()
    });
    let swaps = tokio::time::timeout(STUCK, work).await.expect("a tool blocked on a FIFO").unwrap();
    assert!(swaps > 0, "the swapper never ran");
}

/// The peak resident memory of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// A sparse file of 2.5 GB swapped in under `Read` and `Grep`: refused by size, never read into
/// memory. (No writes here: an atomic write over the name would replace the big file.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_sparse_file_swapped_in_is_refused_without_reading_it() {
    let mut env = Env::new();
    let deep = deep_dir(&env);
    std::fs::write(env.path(&format!("{deep}f")), "small\n").unwrap();
    let big = std::fs::File::create(env.path(&format!("{deep}big"))).unwrap();
    rustix::fs::ftruncate(&big, 2_500_000_000).unwrap(); // sparse: no disk, no memory
    drop(big);
    let peak_before = peak_rss();

    let work = tokio::spawn(async move {
        let r = env.call("Read", json!({"file_path": format!("{deep}big")})).await;
        assert!(r.is_error && r.output.contains("is too large (2500000000 bytes"), "{}", r.output);

        let swapper = Swapper::start(&env.path(&deep), "f", "big");
        for i in 0..2000 {
            let r = env.call("Read", json!({"file_path": format!("{deep}f")})).await;
            let refused = r.is_error && r.output.contains("is too large");
            assert!(refused || r.output == "     1\tsmall\n", "Read: {}", r.output);
            if i % 20 == 0 {
                let r = env.call("Grep", json!({"pattern": "small"})).await;
                assert!(!r.is_error, "Grep: {}", r.output);
            }
        }
        swapper.stop()
    });
    let swaps = tokio::time::timeout(STUCK, work).await.expect("the tools got stuck").unwrap();
    assert!(swaps > 0, "the swapper never ran");
    let grown = peak_rss().saturating_sub(peak_before);
    assert!(grown < 1024 * 1024 * 1024, "peak memory grew by {grown} bytes");
}

/// An interrupt ends a `Grep` whose walk would never finish on its own, and the walk stops too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_a_stuck_walk() {
    let mut env = Env::new();
    std::fs::write(env.path("a.txt"), "needle\n").unwrap();
    std::fs::write(env.path(".outboard-test-stall"), "").unwrap();
    let trigger = env.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let work = tokio::spawn(async move {
        let r = env.call("Grep", json!({"pattern": "needle"})).await;
        (r, env)
    });
    let (r, mut env) =
        tokio::time::timeout(STUCK, work).await.expect("the interrupt did not end Grep").unwrap();
    assert_eq!(r, ToolOutcome::error("Interrupted by the user"));
    // The next call, with a fresh token and without the stall, works.
    env.cancel = CancellationToken::new();
    std::fs::remove_file(env.path(".outboard-test-stall")).unwrap();
    let r = env.call("Glob", json!({"pattern": "*.txt"})).await;
    assert_eq!(r, ToolOutcome::ok("/workspace/a.txt"));
}
