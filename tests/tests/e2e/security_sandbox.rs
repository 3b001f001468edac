//! Security regressions of the sandbox itself (issue #10, item 1 and 8): every case here was a
//! successful attack of a hostile test against the old server, which ran `bwrap` as root with
//! uid 1000 mapped to host uid 0.
//!
//! The tests use the real sandbox (`bwrap`, the launcher and the agent from the real
//! `outboard-server` binary) over a workspace made by the test. CI runs them as root, which is
//! the case that matters: a root server must never give a command host root. Run by an ordinary
//! user they check the same guarantees for that user's sandboxes.
//!
//! The kernel-facing probes are a small C program compiled by the test (`cc` is a CI
//! prerequisite) and run inside the sandbox: each line says which call it made and the errno it
//! got, so a failure names the call that got through.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::time::Duration;

use outboard_server::sandbox::launch::{UID_BASE, UID_SLOTS};
use outboard_server::sandbox::{ExecResult, Sandbox, SandboxConfig};
use outboard_tests::harness::bin;
use tokio_util::sync::CancellationToken;

const T: Duration = Duration::from_secs(30);

fn config() -> SandboxConfig {
    SandboxConfig { agent_exe: Some(bin("outboard-server").unwrap()), ..SandboxConfig::Bwrap }
}

async fn run(sandbox: &Sandbox, command: &str) -> ExecResult {
    sandbox.exec(command, T, &mut |_, _| {}, CancellationToken::new()).await.unwrap()
}

fn host_is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// The host uid a sandbox's processes run as, read from the host's side (`/proc/PID/status`
/// and `uid_map` of the agent, PID 1 inside), after checking the view from inside.
///
/// From inside, `/proc/self/uid_map` reads `1000 0 1` whoever the host user is: `bwrap`
/// running unprivileged nests two user namespaces (the outer one maps its root to the calling
/// host uid so `bwrap` can set up mounts, the inner one maps 1000 to that root), and the file
/// shows ids relative to the parent namespace. What the kernel checks is the host uid, so that
/// is what this asserts on.
async fn host_uid(sandbox: &Sandbox) -> u32 {
    let r = run(sandbox, "cat /proc/self/uid_map; id -u").await;
    let fields: Vec<&str> = r.output.split_whitespace().collect();
    assert_eq!(fields.len(), 4, "one mapping and the uid expected: {}", r.output);
    assert_eq!((fields[0], fields[2], fields[3]), ("1000", "1", "1000"), "{}", r.output);
    let pid = sandbox.pid().await.unwrap();
    let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    let map: Vec<u32> = map.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert_eq!((map[0], map[2]), (1000, 1), "one uid mapped: {map:?}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    let ids: Vec<u32> = line.split_whitespace().skip(1).map(|v| v.parse().unwrap()).collect();
    assert_eq!(ids, [map[1]; 4], "real, effective, saved and fs uid: {line}");
    map[1]
}

#[tokio::test]
async fn a_root_server_never_gives_the_sandbox_host_root() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(config(), ws.path().to_path_buf());
    let uid = host_uid(&sandbox).await;
    assert_ne!(uid, 0, "uid 1000 inside is host root");
    if host_is_root() {
        assert!((UID_BASE..UID_BASE + UID_SLOTS).contains(&uid), "{uid} is not a sandbox uid");
    } else {
        assert_eq!(uid, rustix_uid(), "an unprivileged server maps the sandbox to itself");
    }
}

fn rustix_uid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap()
}

#[tokio::test]
async fn two_sandboxes_are_two_host_users() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sa = Sandbox::new(config(), a.path().to_path_buf());
    let sb = Sandbox::new(config(), b.path().to_path_buf());
    let (ua, ub) = (host_uid(&sa).await, host_uid(&sb).await);
    if host_is_root() {
        assert_ne!(ua, ub, "two live sandboxes share host uid {ua}");
    } else {
        // An unprivileged server has only its own uid to give.
        assert_eq!((ua, ub), (rustix_uid(), rustix_uid()));
    }
}

#[tokio::test]
async fn sysctls_are_not_writable_from_inside() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(config(), ws.path().to_path_buf());
    let before = std::fs::read_to_string("/proc/sys/vm/stat_interval").unwrap();
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
    let r = run(
        &sandbox,
        "echo 7 > /proc/sys/vm/stat_interval && echo WROTE-stat_interval; \
         echo '|/workspace/evil' > /proc/sys/kernel/core_pattern && echo WROTE-core_pattern; \
         echo \"ro-mounts=$(grep -c ' /proc/sys ro,' /proc/self/mountinfo)\"",
    )
    .await;
    assert!(!r.output.contains("WROTE"), "{}", r.output);
    assert_eq!(std::fs::read_to_string("/proc/sys/vm/stat_interval").unwrap(), before);
    assert_eq!(std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap(), pattern);
    // A marker, not the last line: stderr of the refused writes may arrive after it.
    assert!(r.output.contains("ro-mounts=1\n"), "/proc/sys is not a read-only mount: {}", r.output);
}

#[tokio::test]
async fn only_the_public_trust_store_of_etc_ssl_is_visible() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(config(), ws.path().to_path_buf());
    let r =
        run(&sandbox, "ls /etc/ssl; echo --; ls /etc/ssl/private 2>&1; ls /etc/ssl/certs | wc -l")
            .await;
    assert!(!r.output.contains(".key"), "{}", r.output);
    let (listing, rest) = r.output.split_once("--\n").unwrap();
    let listing: Vec<&str> = listing.lines().collect();
    assert!(listing.contains(&"certs"), "{}", r.output);
    assert!(listing.iter().all(|e| ["certs", "openssl.cnf"].contains(e)), "{}", r.output);
    let rest: Vec<&str> = rest.lines().collect();
    assert!(rest[0].contains("No such file"), "{}", r.output);
    let certs: usize = rest[1].trim().parse().unwrap();
    let host_certs = std::fs::read_dir("/etc/ssl/certs").map(|d| d.count()).unwrap_or(0);
    assert_eq!(certs, host_certs, "the trust store is there for TLS clients");
}

/// The probe: one line per call, `NAME ERRNO` (0 when the call succeeded).
const PROBE_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

static void report(const char *name, long rc) { printf("%s %d\n", name, rc < 0 ? errno : 0); }

int main(void) {
    report("add_key", syscall(SYS_add_key, "user", "outboard", "v", 1, -4 /* user keyring */));
    report("keyctl", syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0));
    report("ptrace_agent", ptrace(PTRACE_ATTACH, 1, 0, 0));
    report("open_agent_stdout", open("/proc/1/fd/1", O_WRONLY));
    report("open_agent_mem", open("/proc/1/mem", O_RDWR));
    close(open("plain", O_CREAT | O_WRONLY, 0755));
    report("chmod_setuid", chmod("plain", 04755));
    report("chmod_setgid", chmod("plain", 02755));
    report("fchmodat_setuid", fchmodat(AT_FDCWD, "plain", 04755, 0));
    report("open_setuid", open("made-setuid", O_CREAT | O_WRONLY, 04755));
    report("mkdir_setgid", mkdir("dir-setgid", 02755));
    report("mknod_setuid", mknod("node-setuid", S_IFREG | 04755, 0));
    report("setxattr_capability", setxattr("plain", "security.capability", "\1\0\0\2", 4, 0));
    report("unshare_user", unshare(CLONE_NEWUSER));
    report("bpf", syscall(SYS_bpf, 0, 0, 0));
    report("perf_event_open", syscall(SYS_perf_event_open, 0, 0, -1, -1, 0));
    report("userfaultfd", syscall(SYS_userfaultfd, 0));
    report("io_uring_setup", syscall(SYS_io_uring_setup, 1, 0));
    report("mount", syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, 0));
    report("chmod_plain", chmod("plain", 0700));
    /* Address families: the ones a build uses work, every other is refused (vsock is not
       namespaced and reaches the VM's host; a raw socket would bypass the proxy). */
    report("socket_unix", socket(AF_UNIX, SOCK_STREAM, 0));
    report("socket_inet", socket(AF_INET, SOCK_STREAM, 0));
    report("socket_inet6", socket(AF_INET6, SOCK_DGRAM, 0));
    report("socket_netlink", socket(AF_NETLINK, SOCK_RAW, 0 /* NETLINK_ROUTE */));
    report("socket_vsock", socket(40 /* AF_VSOCK */, SOCK_STREAM, 0));
    report("socket_vsock_dgram", socket(40 /* AF_VSOCK */, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    report("socket_packet", socket(AF_PACKET, SOCK_RAW, 0));
    report("socket_alg", socket(38 /* AF_ALG */, SOCK_SEQPACKET, 0));
    report("socket_bluetooth", socket(31 /* AF_BLUETOOTH */, SOCK_STREAM, 0));
    int pair[2];
    report("socketpair_unix", socketpair(AF_UNIX, SOCK_STREAM, 0, pair));
    report("socketpair_vsock", socketpair(40 /* AF_VSOCK */, SOCK_STREAM, 0, pair));
    return 0;
}
"#;

fn compile_probe(dir: &Path) {
    std::fs::write(dir.join("probe.c"), PROBE_C).unwrap();
    let out = std::process::Command::new("cc")
        .args(["-O0", "-o"])
        .arg(dir.join("probe"))
        .arg(dir.join("probe.c"))
        .output()
        .expect("cc is a prerequisite of the test suite (CI installs gcc)");
    assert!(out.status.success(), "cc failed: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn dangerous_calls_are_refused_and_nothing_becomes_setuid_on_the_host() {
    let ws = tempfile::tempdir().unwrap();
    compile_probe(ws.path());
    let sandbox = Sandbox::new(config(), ws.path().to_path_buf());
    let r = run(&sandbox, "./probe; cp /bin/true t && chmod u+s t; echo chmod=$?").await;
    let got: BTreeMap<&str, i32> = r
        .output
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(name, errno)| Some((name, errno.parse().ok()?)))
        .collect();
    // Linux's errno values (the same on every architecture we build for).
    let (eperm, eacces, enosys, eopnotsupp, eafnosupport) = (1, 13, 38, 95, 97);
    let expected: BTreeMap<&str, i32> = [
        ("add_key", eperm),
        ("keyctl", eperm),
        ("ptrace_agent", eperm),
        ("open_agent_stdout", eacces),
        ("open_agent_mem", eacces),
        ("chmod_setuid", eperm),
        ("chmod_setgid", eperm),
        ("fchmodat_setuid", eperm),
        ("open_setuid", eperm),
        ("mkdir_setgid", eperm),
        ("mknod_setuid", eperm),
        ("setxattr_capability", eopnotsupp),
        ("unshare_user", eperm),
        ("bpf", eperm),
        ("perf_event_open", eperm),
        ("userfaultfd", eperm),
        ("io_uring_setup", enosys),
        ("mount", eperm),
        // Ordinary modes still work: the filter looks only at the set-id bits.
        ("chmod_plain", 0),
        ("socket_unix", 0),
        ("socket_inet", 0),
        ("socket_inet6", 0),
        ("socket_netlink", 0),
        ("socket_vsock", eafnosupport),
        ("socket_vsock_dgram", eafnosupport),
        ("socket_packet", eafnosupport),
        ("socket_alg", eafnosupport),
        ("socket_bluetooth", eafnosupport),
        ("socketpair_unix", 0),
        ("socketpair_vsock", eafnosupport),
    ]
    .into_iter()
    .collect();
    pretty_assertions::assert_eq!(got, expected, "{}", r.output);
    assert!(r.output.contains("chmod=1"), "chmod u+s succeeded: {}", r.output);

    // Whatever the probe made, nothing on the host carries a set-id bit.
    for entry in std::fs::read_dir(ws.path()).unwrap() {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().mode();
        assert_eq!(mode & 0o6000, 0, "{} is set-id on the host: {mode:o}", entry.path().display());
    }
}

#[tokio::test]
async fn a_root_owned_workspace_works_and_keeps_its_owner() {
    let ws = tempfile::tempdir().unwrap();
    let owner = std::fs::metadata(ws.path()).unwrap().uid();
    std::fs::write(ws.path().join("host.txt"), "from the host\n").unwrap();
    let sandbox = Sandbox::new(config(), ws.path().to_path_buf());
    let r = run(
        &sandbox,
        "echo more >> host.txt && mkdir -p sub && echo new > sub/new.txt && \
         stat -c '%u %n' host.txt sub/new.txt",
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    assert_eq!(r.output, "1000 host.txt\n1000 sub/new.txt\n", "inside, the sandbox's user owns it");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("host.txt")).unwrap(),
        "from the host\nmore\n"
    );
    for path in ["host.txt", "sub", "sub/new.txt"] {
        let uid = std::fs::metadata(ws.path().join(path)).unwrap().uid();
        assert_eq!(uid, owner, "{path} is owned by {uid} on the host, not the workspace's owner");
    }
}

#[tokio::test]
async fn mountinfo_reveals_no_server_pid_or_temp_paths() {
    let ws = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(config(), ws.path().to_path_buf());
    let r = run(&sandbox, "cat /proc/self/mountinfo").await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    // The old per-sandbox /etc directory was /tmp/outboard-etc-<server pid>-<n>.
    assert!(!r.output.contains("outboard-etc"), "{}", r.output);
    assert!(!r.output.contains(&format!("-{}-", std::process::id())), "{}", r.output);
    // The generated /etc files come from memory files, not from a directory on the host.
    let etc: Vec<&str> = r.output.lines().filter(|l| l.contains(" /etc/passwd ")).collect();
    assert_eq!(etc.len(), 1, "{}", r.output);
    assert!(!etc[0].contains("/tmp"), "{}", etc[0]);
}
