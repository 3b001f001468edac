//! The bubblewrap sandbox against the real `bwrap`: isolation (environment, files, network) and
//! process control (timeout, cancel, streaming, output cap).

use std::time::{Duration, Instant};

use outboard_shared::OutputStream;
use tokio_util::sync::CancellationToken;

use super::*;

const T: Duration = Duration::from_secs(20);

async fn run(dir: &std::path::Path, command: &str) -> ExecResult {
    let mut sandbox = Sandbox::new(SandboxConfig::Bwrap, dir.to_path_buf());
    sandbox.exec(command, T, &mut |_, _| {}, CancellationToken::new()).await.unwrap()
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
    assert_eq!(
        r,
        ExecResult {
            exit_code: Some(0),
            output: "/workspace\nfrom host\noutboard\noutboard\n".to_string(),
            timed_out: false
        }
    );
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
    let r = run(ws.path(), "env; echo ---; tr '\\0' '\\n' < /proc/1/environ | wc -c").await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    assert!(!r.output.contains("s3cr3t"), "{}", r.output);
    assert!(!r.output.contains("OUTBOARD_TEST_SECRET"), "{}", r.output);
    let (env, environ_len) = r.output.split_once("---\n").unwrap();
    assert_eq!(environ_len.trim(), "0", "/proc/1/environ must be empty");
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

/// Whether a host process has `marker` in its command line.
fn host_process_with(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(marker))
            .unwrap_or(false)
    })
}

async fn wait_until_gone(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while host_process_with(marker) {
        assert!(Instant::now() < deadline, "processes with {marker} still alive after 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn timeout_kills_the_whole_tree_quickly() {
    let ws = tempfile::tempdir().unwrap();
    let mut sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
    let start = Instant::now();
    let mut were_running = false;
    let r = sandbox
        .exec(
            "setsid sleep 31.4159 & sleep 0.1; echo started; sleep 30.2718",
            Duration::from_millis(500),
            &mut |_, _| were_running = host_process_with("31.4159"),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(were_running, "the daemonised sleep should have been running");
    assert!(start.elapsed() < Duration::from_secs(3), "took {:?}", start.elapsed());
    assert_eq!(r, ExecResult { exit_code: None, output: "started\n".to_string(), timed_out: true });
    wait_until_gone("30.2718").await;
    wait_until_gone("31.4159").await;
}

#[tokio::test]
async fn cancel_kills() {
    let ws = tempfile::tempdir().unwrap();
    let mut sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let start = Instant::now();
    let r = sandbox.exec("sleep 29.1828", T, &mut |_, _| {}, cancel).await.unwrap();
    assert!(start.elapsed() < Duration::from_secs(3), "took {:?}", start.elapsed());
    assert_eq!(r.exit_code, None);
    assert!(!r.timed_out);
    wait_until_gone("29.1828").await;
}

#[tokio::test]
async fn output_streams_in_order_as_it_comes() {
    let ws = tempfile::tempdir().unwrap();
    let mut sandbox = Sandbox::new(SandboxConfig::Bwrap, ws.path().to_path_buf());
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
    let r = run(ws.path(), "for i in $(seq 1 20000); do echo line$i; done").await;
    assert_eq!(r.exit_code, Some(0));
    assert!(r.output.starts_with("line1\nline2\n"), "{}", &r.output[..50]);
    assert!(r.output.ends_with("line19999\nline20000\n"));
    assert!(r.output.contains("bytes of output cut from the middle"));
    assert!(r.output.len() < 31_000, "{}", r.output.len());
}
