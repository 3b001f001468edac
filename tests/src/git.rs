//! `git` as the suites run it on their own repositories: a test identity, `main` as the first
//! branch, and no user or system configuration.

#![allow(clippy::expect_used)] // a test helper: a failing git fails the test

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// `git ARGS` in `dir`, fed `stdin`, which must succeed; its stdout.
pub fn git(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let mut child = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git runs");
    let mut pipe = child.stdin.take().expect("a stdin pipe");
    pipe.write_all(stdin.unwrap_or_default().as_bytes()).expect("git takes its input");
    drop(pipe);
    let out = child.wait_with_output().expect("git ends");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("git's output is UTF-8")
}
