//! The embedded server's start failures, through the real `outboard` binary: a host without
//! bubblewrap is a configuration problem (exit 2) with the install hint, not "cannot connect".

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::process::{Command, Stdio};

use outboard_tests::harness::bin;

/// `outboard ARGS` in embedded mode with a `PATH` under which no `bwrap` exists (the server looks
/// bubblewrap up on its `PATH`), and nothing else from the developer's environment.
fn outboard_without_bwrap(args: &[&str], home: &std::path::Path) -> (i32, String) {
    let empty_bin = home.join("no-bwrap-here");
    std::fs::create_dir_all(&empty_bin).unwrap();
    let out = Command::new(bin("outboard").unwrap())
        .args(args)
        .env_clear()
        .env("PATH", &empty_bin)
        .env("HOME", home)
        .env("USER", "tester")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_missing_bubblewrap_is_a_configuration_error_with_the_install_hint() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let data = data.to_str().unwrap();
    for args in [&["sessions", "--data", data][..], &["memory", "ls", "--data", data][..]] {
        let (code, stderr) = outboard_without_bwrap(args, home.path());
        assert_eq!(code, 2, "{args:?}: exit code; stderr: {stderr}");
        assert!(stderr.contains("bubblewrap (bwrap) was not found"), "{args:?}: {stderr}");
        assert!(stderr.contains("apt-get install bubblewrap"), "{args:?}: {stderr}");
        assert!(stderr.contains("dnf install bubblewrap"), "{args:?}: {stderr}");
        assert!(!stderr.contains("cannot connect"), "{args:?}: {stderr}");
        assert!(!stderr.contains("check --data"), "{args:?}: not a data dir problem: {stderr}");
    }
}
