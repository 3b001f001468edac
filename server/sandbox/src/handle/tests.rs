//! The bubblewrap sandbox against the real `bwrap` and the real cgroups: isolation
//! (environment, files, network), process control (timeout, cancel, streaming, output cap) and
//! the lifecycle (lazy start, freeze/thaw, death and replacement, limits).

use std::time::{Duration, Instant};

use outboard_shared::{OutputStream, SandboxState};
use pretty_assertions::assert_eq;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::SandboxLimits;
use crate::testing::{host_process_with, wait_until_gone};
use crate::{jobs, manager, pool};

const T: Duration = Duration::from_secs(20);

async fn run(dir: &std::path::Path, command: &str) -> ExecResult {
    let sandbox = Sandbox::new(SandboxConfig::Bwrap, dir.to_path_buf());
    sandbox.exec(command, T, &mut |_, _| {}, CancellationToken::new()).await.unwrap()
}

fn ok(output: &str) -> ExecResult {
    ExecResult {
        exit_code: Some(0),
        output: output.to_string(),
        timed_out: false,
        signal: None,
        failure: None,
    }
}

#[tokio::test]
async fn check_passes_on_this_host() {
    Sandbox::check(&SandboxConfig::Bwrap).await.unwrap();
}

#[tokio::test]
async fn echo_runs_in_workspace_and_sees_its_files() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.txt"), "from host\n").unwrap();
    let r = run(ws.path(), "pwd; cat hello.txt; echo made > new.txt; id -un; hostname").await;
    assert_eq!(r, ok("/workspace\nfrom host\noutboard\noutboard\n"));
    assert_eq!(std::fs::read_to_string(ws.path().join("new.txt")).unwrap(), "made\n");
}

#[tokio::test]
async fn exit_code_is_reported() {
    let ws = tempfile::tempdir().unwrap();
    let r = run(ws.path(), "echo out; echo err >&2; exit 7").await;
    assert_eq!(r.exit_code, Some(7));
    assert!(r.output.contains("out\n") && r.output.contains("err\n"), "{}", r.output);
}

#[tokio::test]
async fn environment_has_nothing_of_the_server() {
    std::env::set_var("OUTBOARD_TEST_SECRET", "s3cr3t");
    let ws = tempfile::tempdir().unwrap();
    let r = run(ws.path(), "env; echo ---; cat /proc/1/environ 2>&1; true").await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    assert!(!r.output.contains("s3cr3t"), "{}", r.output);
    assert!(!r.output.contains("OUTBOARD_TEST_SECRET"), "{}", r.output);
    let (env, environ_len) = r.output.split_once("---\n").unwrap();
    // The agent is non-dumpable: its /proc entries are closed to commands (its environment is
    // bwrap's `PWD` alone anyway, see `main_if_agent`).
    assert!(
        environ_len.contains("Permission denied"),
        "/proc/1/environ is readable: {environ_len}"
    );
    let mut names: Vec<&str> = env.lines().filter_map(|l| l.split_once('=')).map(|p| p.0).collect();
    names.sort_unstable();
    assert_eq!(names, ["HOME", "LANG", "PATH", "PWD", "SHLVL", "TERM", "_"]);
}

#[tokio::test]
async fn files_outside_the_workspace_are_invisible() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(outside.path(), "host secret").unwrap();
    let cmd = format!(
        "cat {} ; ls /root /home /work 2>&1; cat /etc/shadow; ls /etc",
        outside.path().display()
    );
    let r = run(ws.path(), &cmd).await;
    assert!(!r.output.contains("host secret"), "{}", r.output);
    let etc: Vec<&str> = r.output.lines().rev().take_while(|l| !l.contains("No such")).collect();
    let mut etc: Vec<&str> = etc.into_iter().rev().collect();
    etc.sort_unstable();
    assert_eq!(
        etc,
        [
            "alternatives",
            "group",
            "hostname",
            "hosts",
            "ld.so.cache",
            "localtime",
            "nsswitch.conf",
            "passwd",
            "ssl"
        ]
    );
}

#[tokio::test]
async fn system_dirs_and_root_are_read_only_tmp_is_writable() {
    let ws = tempfile::tempdir().unwrap();
    let r = run(
        ws.path(),
        "touch /usr/x 2>/dev/null || echo usr-ro; touch /x 2>/dev/null || echo root-ro; \
         touch /etc/x 2>/dev/null || echo etc-ro; echo t > /tmp/t && cat /tmp/t; \
         awk 'BEGIN { print \"awk-ok\" }'",
    )
    .await;
    assert_eq!(r.output, "usr-ro\nroot-ro\netc-ro\nt\nawk-ok\n");
}

#[tokio::test]
async fn host_loopback_is_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let ws = tempfile::tempdir().unwrap();
    let r = run(ws.path(), &format!("echo hi > /dev/tcp/127.0.0.1/{port} && echo connected")).await;
    assert_ne!(r.exit_code, Some(0), "{}", r.output);
    assert!(!r.output.contains("connected"), "{}", r.output);
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "nothing may have connected");
}

#[tokio::test]
async fn timeout_kills_the_whole_tree() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
    let mut were_running = false;
    let r = sandbox
        .exec(
            "setsid sleep 31.4159 & sleep 0.1; echo started; sleep 30.2718",
            Duration::from_secs(2),
            &mut |_, _| were_running = host_process_with("31.4159"),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(were_running, "the daemonised sleep should have been running");
    // Killed at the timeout, not run to its end: the 30 s sleep never printed or exited.
    assert_eq!(
        r,
        ExecResult {
            exit_code: None,
            output: "started\n".to_string(),
            timed_out: true,
            signal: Some(9),
            failure: None
        }
    );
    wait_until_gone("30.2718").await;
    wait_until_gone("31.4159").await;
}

#[tokio::test]
async fn cancel_kills() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
    exec(&sandbox, "true").await.unwrap();
    let pid = sandbox.pid().await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    // Cancelled once the command has demonstrably started: its marker line arrived and the
    // long sleep is a live process.
    let mut was_running = false;
    let r = sandbox
        .exec(
            "sleep 29.1828 & echo started; wait",
            T,
            &mut |_, text| {
                if text.contains("started") {
                    was_running = host_process_with("29.1828");
                    trigger.cancel();
                }
            },
            cancel,
        )
        .await
        .unwrap();
    assert!(was_running, "the command's sleep was running when cancelled");
    assert_eq!(
        r,
        ExecResult {
            exit_code: None,
            output: "started\n".to_string(),
            timed_out: false,
            signal: Some(9),
            failure: None
        }
    );
    wait_until_gone("29.1828").await;
    // Only the command was killed: the same sandbox runs the next one.
    assert_eq!(exec(&sandbox, "echo next").await.unwrap(), ok("next\n"));
    assert_eq!(sandbox.pid().await, pid);
}

#[tokio::test]
async fn output_streams_in_order_as_it_comes() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
    let start = Instant::now();
    let mut seen: Vec<(OutputStream, String, Duration)> = Vec::new();
    let r = sandbox
        .exec(
            "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three",
            T,
            &mut |stream, text| seen.push((stream, text.to_string(), start.elapsed())),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(r.output, "one\ntwo\nthree\n");
    let chunks: Vec<(OutputStream, &str)> = seen.iter().map(|(s, t, _)| (*s, t.as_str())).collect();
    assert_eq!(
        chunks,
        [
            (OutputStream::Stdout, "one\n"),
            (OutputStream::Stderr, "two\n"),
            (OutputStream::Stdout, "three\n")
        ]
    );
    // The first chunk arrived before the command finished: streamed, not buffered.
    assert!(seen[0].2 + Duration::from_millis(400) < seen[2].2, "{seen:?}");
}

#[tokio::test]
async fn output_cap_keeps_head_and_tail() {
    let ws = tempfile::tempdir().unwrap();
    let r = run(ws.path(), "for i in $(seq 1 40000); do echo line$i; done").await;
    assert_eq!(r.exit_code, Some(0));
    assert!(r.output.starts_with("line1\nline2\n"), "{}", &r.output[..50]);
    assert!(r.output.ends_with("line39999\nline40000\n"));
    assert!(r.output.contains("bytes of output cut from the middle"));
    let cap = outboard_sandbox_init::output::OUTPUT_HEAD_BYTES
        + outboard_sandbox_init::output::OUTPUT_TAIL_BYTES;
    assert!(r.output.len() < cap + 1_000, "{}", r.output.len());
}

/// Waits for `cond` with a deadline, saying what was awaited.
async fn wait_for<F: std::future::Future<Output = bool>>(what: &str, mut cond: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn drain(rx: &mut mpsc::Receiver<SandboxTransition>) -> Vec<SandboxState> {
    let mut states = Vec::new();
    while let Ok(t) = rx.try_recv() {
        assert!(t.ms >= 0.0, "{t:?}");
        states.push(t.state);
    }
    states
}

fn config(freeze_ms: u64) -> SandboxConfig {
    SandboxConfig { idle_freeze: Duration::from_millis(freeze_ms), ..SandboxConfig::Bwrap }
}

async fn exec(sandbox: &Sandbox, command: &str) -> Result<ExecResult, SandboxError> {
    sandbox.exec(command, T, &mut |_, _| {}, CancellationToken::new()).await
}

#[tokio::test]
async fn nothing_starts_before_the_first_command() {
    let ws = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let sandbox = Sandbox::with_transitions(config(60_000), ws.path().to_path_buf(), tx);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(sandbox.state().await, SandboxState::None);
    assert_eq!(sandbox.pid().await, None);
    assert_eq!(drain(&mut rx), []);
    assert_eq!(exec(&sandbox, "echo hi").await.unwrap(), ok("hi\n"));
    assert_eq!(sandbox.state().await, SandboxState::Running);
    assert_eq!(drain(&mut rx), [SandboxState::Provisioning, SandboxState::Running]);
    sandbox.stop().await;
    assert_eq!(drain(&mut rx), [SandboxState::Stopped]);
}

#[tokio::test]
async fn working_directory_carries_over_between_commands() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
    exec(&sandbox, "mkdir -p 'a b/c' && cd 'a b/c' && touch here").await.unwrap();
    assert_eq!(exec(&sandbox, "pwd; ls").await.unwrap(), ok("/workspace/a b/c\nhere\n"));
    assert_eq!(exec(&sandbox, "cd /tmp; exit 3").await.unwrap().exit_code, Some(3));
    assert_eq!(exec(&sandbox, "pwd").await.unwrap(), ok("/tmp\n"));
}

#[tokio::test]
async fn freezes_when_idle_and_a_background_server_survives_thaw() {
    let ws = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let sandbox = Sandbox::with_transitions(config(300), ws.path().to_path_buf(), tx);
    // The server logs to the command's stderr: it must keep working after the command ends.
    let r = exec(
        &sandbox,
        "python3 -m http.server 8765 --bind 127.0.0.1 & \
         for i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/8765) 2>/dev/null && break; sleep 0.05; done; \
         echo up",
    )
    .await
    .unwrap();
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    wait_for("the sandbox to freeze", || async {
        sandbox.state().await == SandboxState::Suspended
    })
    .await;
    let get =
        "exec 3<>/dev/tcp/127.0.0.1/8765 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && head -1 <&3";
    for _ in 0..2 {
        let r = exec(&sandbox, get).await.unwrap();
        assert_eq!(r.output.trim_end(), "HTTP/1.0 200 OK", "{r:?}");
    }
    wait_for("a second freeze", || async { sandbox.state().await == SandboxState::Suspended })
        .await;
    let r = exec(&sandbox, get).await.unwrap();
    assert_eq!(r.output.trim_end(), "HTTP/1.0 200 OK", "{r:?}");
    assert_eq!(
        drain(&mut rx),
        [
            SandboxState::Provisioning,
            SandboxState::Running,
            SandboxState::Suspended,
            SandboxState::Running,
            SandboxState::Suspended,
            SandboxState::Running,
        ]
    );
}

#[tokio::test]
async fn stops_after_the_long_idle_and_starts_again_over_the_same_workspace() {
    let ws = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let config = SandboxConfig {
        idle_freeze: Duration::from_millis(100),
        idle_stop: Duration::from_millis(400),
        ..SandboxConfig::Bwrap
    };
    let sandbox = Sandbox::with_transitions(config, ws.path().to_path_buf(), tx);
    exec(&sandbox, "echo kept > f").await.unwrap();
    wait_for("the stop", || async { sandbox.state().await == SandboxState::Stopped }).await;
    assert_eq!(exec(&sandbox, "cat f").await.unwrap(), ok("kept\n"));
    assert_eq!(
        drain(&mut rx),
        [
            SandboxState::Provisioning,
            SandboxState::Running,
            SandboxState::Suspended,
            SandboxState::Stopped,
            SandboxState::Provisioning,
            SandboxState::Running,
        ]
    );
}

fn kill9(pid: u32) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
}

#[tokio::test]
async fn a_killed_sandbox_is_replaced_with_the_workspace_intact() {
    let ws = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(16);
    let sandbox = Sandbox::with_transitions(config(60_000), ws.path().to_path_buf(), tx);
    exec(&sandbox, "echo data > f; sleep 1000 &").await.unwrap();
    let first = sandbox.pid().await.unwrap();
    kill9(first);
    wait_for("the death to be noticed", || async { sandbox.state().await == SandboxState::Dead })
        .await;
    assert_eq!(exec(&sandbox, "cat f; pgrep -c sleep || true").await.unwrap(), ok("data\n0\n"));
    assert_ne!(sandbox.pid().await, Some(first));
    assert_eq!(
        drain(&mut rx),
        [
            SandboxState::Provisioning,
            SandboxState::Running,
            SandboxState::Dead,
            SandboxState::Provisioning,
            SandboxState::Running,
        ]
    );
}

#[tokio::test]
async fn death_during_a_command_is_a_clear_error_and_the_next_command_runs() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
    exec(&sandbox, "true").await.unwrap();
    let pid = sandbox.pid().await.unwrap();
    // Killed once the command has demonstrably started (its marker line arrived).
    let err = sandbox
        .exec(
            "echo started; sleep 30",
            T,
            &mut |_, text| {
                if text.contains("started") {
                    kill9(pid);
                }
            },
            CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::Died(_)), "{err}");
    assert!(err.to_string().contains("next command starts a fresh sandbox"), "{err}");
    assert_eq!(exec(&sandbox, "echo again").await.unwrap(), ok("again\n"));
}

#[tokio::test]
async fn a_fork_bomb_is_contained_and_reported() {
    let ws = tempfile::tempdir().unwrap();
    let config = SandboxConfig {
        limits: SandboxLimits { max_processes: 64, ..SandboxLimits::DEFAULT },
        ..SandboxConfig::Bwrap
    };
    let sandbox = Sandbox::new(config, ws.path().to_path_buf());
    exec(&sandbox, "echo safe > f").await.unwrap();
    let r = sandbox
        .exec(
            ":(){ :|:& };:; sleep 2",
            Duration::from_secs(3),
            &mut |_, _| {},
            CancellationToken::new(),
        )
        .await
        .unwrap();
    let failure = r.failure.unwrap_or_default();
    assert!(failure.contains("limit of 64 processes"), "{failure}");
    assert_eq!(exec(&sandbox, "cat f").await.unwrap(), ok("safe\n"));
    // The classic form returns at once; the bomb goes on in the background and the next
    // command finds a fresh sandbox.
    exec(&sandbox, ":(){ :|:& };:").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(exec(&sandbox, "cat f").await.unwrap(), ok("safe\n"));
}

#[tokio::test]
async fn a_memory_hog_is_contained_and_reported() {
    let ws = tempfile::tempdir().unwrap();
    let config = SandboxConfig {
        limits: SandboxLimits { memory_bytes: 64 << 20, ..SandboxLimits::DEFAULT },
        ..SandboxConfig::Bwrap
    };
    let sandbox = Sandbox::new(config, ws.path().to_path_buf());
    let r = exec(&sandbox, "python3 -c 'b = bytearray(512 << 20); print(len(b))'").await.unwrap();
    assert_ne!(r.exit_code, Some(0), "{r:?}");
    let failure = r.failure.unwrap_or_default();
    assert!(failure.contains("ran out of memory"), "{failure}");
    assert_eq!(exec(&sandbox, "echo fine").await.unwrap(), ok("fine\n"));
}

#[tokio::test]
async fn a_secret_in_the_servers_home_is_invisible() {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let ws = tempfile::tempdir().unwrap();
    let r = run(ws.path(), &format!("ls -a {home} 2>&1; echo $HOME")).await;
    assert!(
        r.output.contains("No such file") || r.output.trim_end().ends_with("/workspace"),
        "{r:?}"
    );
    assert!(!r.output.contains(".cargo"), "{r:?}");
}

#[tokio::test]
async fn the_live_sandbox_quota_stops_the_lru_frozen_one_and_queues_when_all_run() {
    let pool = pool::LivePool::default();
    let config = SandboxConfig {
        idle_freeze: Duration::from_millis(200),
        pool: Some(pool.ticket("acme", pool::fixed_limit(2))),
        ..SandboxConfig::Bwrap
    };
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let boxes: Vec<Sandbox> =
        dirs.iter().map(|d| Sandbox::new(config.clone(), d.path().to_path_buf())).collect();
    let exec = |i: usize, cmd: &'static str| {
        let sandbox = boxes[i].clone();
        async move { sandbox.exec(cmd, T, &mut |_, _| {}, CancellationToken::new()).await }
    };
    exec(0, "true").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    exec(1, "true").await.unwrap();
    assert_eq!(pool.live("acme"), 2);
    // Both freeze; the third takes the place of the least recently used (the first).
    let deadline = std::time::Instant::now() + T;
    while boxes[1].state().await != SandboxState::Suspended {
        assert!(std::time::Instant::now() < deadline, "never froze");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    exec(2, "true").await.unwrap();
    assert_eq!(boxes[0].state().await, SandboxState::Stopped, "the LRU frozen sandbox stops");
    assert_eq!(boxes[1].state().await, SandboxState::Suspended);
    assert_eq!(pool.live("acme"), 2, "the cap is reached, never passed");

    // Two commands running at once fill the org; a third sandbox waits for one of them to end
    // (see `pool::tests` for the queue itself).
    let long = tokio::spawn(exec(1, "sleep 2"));
    let long2 = tokio::spawn(exec(2, "sleep 2"));
    while boxes[1].state().await != SandboxState::Running
        || boxes[2].state().await != SandboxState::Running
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    exec(0, "true").await.unwrap();
    assert!(long.is_finished() || long2.is_finished(), "it ran after one of them ended");
    long.await.unwrap().unwrap();
    long2.await.unwrap().unwrap();
    assert_eq!(pool.live("acme"), 2, "the cap is reached, never passed");
    // Another org is not affected by acme's cap.
    let other =
        SandboxConfig { pool: Some(pool.ticket("globex", pool::fixed_limit(2))), ..config.clone() };
    let od = tempfile::tempdir().unwrap();
    Sandbox::new(other, od.path().to_path_buf())
        .exec("true", T, &mut |_, _| {}, CancellationToken::new())
        .await
        .unwrap();
}

/// Sandbox `exec`/`stop` cycles, each reporting `provisioning, running, stopped`.
async fn cycles(sandbox: &Sandbox, n: usize) -> Vec<SandboxState> {
    let mut expected = Vec::new();
    for _ in 0..n {
        assert_eq!(exec(sandbox, "true").await.unwrap().exit_code, Some(0));
        sandbox.stop().await;
        expected.extend([SandboxState::Provisioning, SandboxState::Running, SandboxState::Stopped]);
    }
    expected
}

/// The next `n` transitions, each awaited with a deadline.
async fn receive(rx: &mut mpsc::Receiver<SandboxTransition>, n: usize) -> Vec<SandboxState> {
    let mut got = Vec::new();
    while got.len() < n {
        match tokio::time::timeout(T, rx.recv()).await {
            Ok(Some(t)) => got.push(t.state),
            other => panic!(
                "transition {} of {n} did not arrive ({other:?}); got {got:?}",
                got.len() + 1
            ),
        }
    }
    got
}

#[tokio::test]
async fn every_transition_reaches_a_consumer_that_lags_behind_the_channel() {
    let ws = tempfile::tempdir().unwrap();
    // A two-slot channel whose consumer takes nothing until twelve transitions have happened.
    let (tx, mut rx) = mpsc::channel(2);
    let sandbox = Sandbox::with_transitions(config(60_000), ws.path().to_path_buf(), tx);
    let expected = cycles(&sandbox, 4).await;
    assert_eq!(expected.len(), 12);
    assert_eq!(receive(&mut rx, expected.len()).await, expected, "every one, in order");
    // The manager was never blocked by the full channel: it answered every request meanwhile.
    assert_eq!(sandbox.state().await, SandboxState::Stopped);
    drop(sandbox);
    assert_eq!(rx.recv().await, None, "nothing more");
}

#[tokio::test]
async fn a_stuck_consumer_loses_only_what_overflows_the_backlog() {
    let ws = tempfile::tempdir().unwrap();
    let (tx, mut rx) = mpsc::channel(1);
    let sandbox = Sandbox::with_transitions(config(60_000), ws.path().to_path_buf(), tx);
    let n = manager::TRANSITION_BACKLOG.div_ceil(3) + 2;
    let all = cycles(&sandbox, n).await;
    // The channel holds the first; the backlog the last TRANSITION_BACKLOG; the rest is lost.
    let lost = all.len() - 1 - manager::TRANSITION_BACKLOG;
    assert!(lost > 0, "the test must overflow the backlog");
    let mut expected = vec![all[0]];
    expected.extend_from_slice(&all[1 + lost..]);
    assert_eq!(receive(&mut rx, expected.len()).await, expected);
    drop(sandbox);
    assert_eq!(rx.recv().await, None, "nothing more");
}

#[tokio::test]
async fn background_jobs_are_capped_lose_no_output_and_survive_a_foreground_timeout() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
    let mut ids = Vec::new();
    for n in 0..jobs::MAX_RUNNING_JOBS {
        ids.push(sandbox.spawn_job(&format!("sleep 271.{n}")).await.unwrap());
    }
    let refused = sandbox.spawn_job("true").await.unwrap_err().to_string();
    assert!(refused.contains("8 background commands are running already"), "{refused}");

    // A foreground command that times out kills what it started, never the jobs.
    let r = sandbox
        .exec("sleep 30.5772", Duration::from_millis(500), &mut |_, _| {}, CancellationToken::new())
        .await
        .unwrap();
    assert!(r.timed_out);
    assert!(host_process_with("271.0"), "the jobs survive the command's timeout");

    assert!(sandbox.kill_job(&ids[0]).await.unwrap());
    assert!(!sandbox.kill_job(&ids[0]).await.unwrap(), "not running any more");
    assert_eq!(sandbox.read_job(&ids[0]).await.unwrap().state, jobs::JobState::Killed);
    wait_until_gone("271.0").await;

    // Output far past the agent's queue (64 chunks of at most 8 KiB) and the unread buffer:
    // nothing is lost on the way, the oldest unread is dropped and counted.
    let total: usize = 3 << 20;
    let big = sandbox.spawn_job(&format!("head -c {total} /dev/zero | tr '\\0' x")).await.unwrap();
    // Its end is told once, without a read (a read would consume the output).
    wait_for("the big job's end", || async {
        sandbox.untold_jobs().await.iter().any(|j| j.shell_id == big)
    })
    .await;
    let read = sandbox.read_job(&big).await.unwrap();
    assert_eq!(read.state, jobs::JobState::Exited(0));
    assert_eq!(read.output.len(), jobs::JOB_UNREAD_BYTES);
    assert_eq!(read.dropped, total - jobs::JOB_UNREAD_BYTES, "every byte is accounted for");
    assert!(read.output.bytes().all(|b| b == b'x'));
    sandbox.stop().await;
}

/// The workspace watch: a check that trips (here: once a file named `trip` exists) stops the
/// foreground command with the check's sentence and kills the background jobs, telling them why;
/// the baseline taken when the sandbox starts never trips, and the next command runs as usual.
#[tokio::test]
async fn the_workspace_watch_stops_every_command_when_it_trips() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path().to_path_buf();
    let starts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = starts.clone();
    let check: crate::WorkspaceCheck = std::sync::Arc::new(move |start| {
        let tripped = root.join("trip").exists();
        if start {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        Box::pin(async move { (!start && tripped).then(|| "the workspace is over".to_owned()) })
    });
    let config = SandboxConfig {
        workspace_watch: Some(crate::WorkspaceWatch(check)),
        ..SandboxConfig::Bwrap
    };
    let sandbox = Sandbox::new(config, ws.path().to_path_buf());
    let job = sandbox.spawn_job("sleep 60").await.unwrap();
    let started = Instant::now();
    let cancel = CancellationToken::new();
    let r = sandbox.exec("touch trip; sleep 30; echo done", T, &mut |_, _| {}, cancel).await;
    let r = r.unwrap();
    assert!(started.elapsed() < Duration::from_secs(15), "stopped within the interval");
    assert_eq!(r.failure.as_deref(), Some("the workspace is over"), "{r:?}");
    assert!(!r.output.contains("done"), "{r:?}");
    let read = sandbox.read_job(&job).await.unwrap();
    assert_eq!(read.state, jobs::JobState::Killed);
    assert!(read.output.contains("the workspace is over"), "{read:?}");
    assert_eq!(sandbox.state().await, SandboxState::Stopped);
    // The next command starts a fresh sandbox; a workspace left over does not stop it (the
    // baseline is retaken at the start, and this check trips only on later ticks).
    std::fs::remove_file(ws.path().join("trip")).unwrap();
    let r = sandbox.exec("echo again", T, &mut |_, _| {}, CancellationToken::new()).await.unwrap();
    assert_eq!(r, ok("again\n"));
    let baselines = Instant::now();
    while starts.load(std::sync::atomic::Ordering::SeqCst) < 2 && baselines.elapsed() < T {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(starts.load(std::sync::atomic::Ordering::SeqCst), 2, "a baseline per start");
}

/// Issue 35, item 1: background jobs that end while a foreground command runs leave it
/// unharmed — its result comes, whole, however many jobs end meanwhile.
#[tokio::test]
async fn background_jobs_ending_during_a_command_leave_it_unharmed() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
    let ticker = "for i in 1 2 3; do echo tick-$i; sleep 0.5; done";
    let jobs_started = [
        sandbox.spawn_job(ticker).await.unwrap(),
        sandbox.spawn_job("sleep 0.2").await.unwrap(),
        sandbox.spawn_job("echo quick").await.unwrap(),
    ];
    let r = tokio::time::timeout(
        T,
        sandbox.exec("sleep 3; echo done", T, &mut |_, _| {}, CancellationToken::new()),
    )
    .await
    .expect("the foreground command's result came");
    assert_eq!(r.unwrap(), ok("done\n"));
    for id in &jobs_started {
        let read = sandbox.read_job(id).await.unwrap();
        assert!(matches!(read.state, jobs::JobState::Exited(0)), "{id}: {read:?}");
    }
}

#[tokio::test]
async fn bwrap_and_everything_it_starts_are_in_the_sandboxs_groups() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(config(60_000), ws.path().to_path_buf());
    exec(&sandbox, "true").await.unwrap();
    let init = sandbox.pid().await.unwrap();
    let outer = crate::instance::parent_of(init).unwrap();
    let groups = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let ours: Vec<String> =
        groups(init).lines().filter(|l| l.contains("/outboard/")).map(str::to_owned).collect();
    assert!(!ours.is_empty(), "the agent is in no sandbox group:\n{}", groups(init));
    // bwrap itself (the launcher joined before it became bwrap) is in the same groups.
    for line in &ours {
        assert!(groups(outer).lines().any(|l| l == line), "bwrap {outer} is not in {line}");
    }
}

#[tokio::test]
async fn a_launcher_whose_server_is_gone_starts_nothing() {
    use outboard_sandbox_init::launch::{find_bwrap, LaunchConfig, LAUNCH_ARG};
    let ws = tempfile::tempdir().unwrap();
    let agent = crate::testing::agent_exe_for_tests().unwrap();
    let config = LaunchConfig {
        bwrap: find_bwrap().unwrap(),
        workspace: ws.path().to_path_buf(),
        agent_exe: agent.clone(),
        agent_config: "{}".into(),
        ro_mounts: Vec::new(),
        proxy_socket: None,
        ca_bundle: None,
        host_id: None,
        cgroups: Vec::new(),
        // Not this test's pid: as if the server had died and the launcher been reparented.
        parent: Some(std::process::id() + 1),
    };
    let out = std::process::Command::new(&agent)
        .args([LAUNCH_ARG, &serde_json::to_string(&config).unwrap()])
        .env_clear()
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is gone; not starting a sandbox for it"), "{stderr}");
}

/// Issue 49, item 5: plan mode enforced by the kernel. A command run in the read-only view
/// cannot write anywhere, whatever the line-level judgement would have let through (these
/// writers are called on the lower layer directly), and the view is per command: the next
/// ordinary command writes, and a `cd` in the view carries over.
#[tokio::test]
async fn a_command_in_the_read_only_view_cannot_write_anywhere() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("in.txt"), "b\na\n").unwrap();
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    let sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
    let ro = |command: &'static str| {
        let sandbox = sandbox.clone();
        async move { sandbox.exec_read_only(command, T, &mut |_, _| {}, CancellationToken::new()).await }
    };
    for writer in [
        "touch /workspace/x",
        "sort -o/workspace/x in.txt",
        "uniq -- in.txt -x",
        "mkdir /workspace/x",
        "echo t > /tmp/x",
        "rm in.txt",
        "mv in.txt x",
        "echo t > /dev/shm/x",
    ] {
        let r = ro(writer).await.unwrap();
        assert_ne!(r.exit_code, Some(0), "{writer}: {}", r.output);
        assert!(r.output.contains("Read-only file system"), "{writer}: {}", r.output);
    }
    let left: Vec<_> =
        std::fs::read_dir(ws.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "nothing made, nothing removed: {left:?}");
    // What only reads works there, and a `cd` carries over to the next command.
    assert_eq!(ro("sort in.txt && cd sub").await.unwrap(), ok("a\nb\n"));
    let r = sandbox.exec("pwd; touch made", T, &mut |_, _| {}, CancellationToken::new()).await;
    assert_eq!(r.unwrap(), ok("/workspace/sub\n"));
    assert!(ws.path().join("sub/made").exists(), "an ordinary command still writes");
    // A background job started in plan mode runs in the view too.
    let job = sandbox.spawn_job_read_only("touch /workspace/job").await.unwrap();
    let read = loop {
        let read = sandbox.read_job(&job).await.unwrap();
        if read.state != jobs::JobState::Running {
            break read;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(read.output.contains("Read-only file system"), "{read:?}");
    assert!(!ws.path().join("job").exists());
}
