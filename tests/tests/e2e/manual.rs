//! Shell completions and man pages of both binaries, generated from their flags.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::process::Command;

use outboard_tests::harness::{bin, outboard};

#[test]
fn outboard_prints_completions_for_each_shell_and_writes_a_page_per_subcommand() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let done = outboard(&["completions", shell], None).unwrap();
        assert_eq!(done.code, 0, "{shell}: {}", done.stderr);
        assert!(
            done.stdout.contains("approve") && done.stdout.contains("reconnect-for"),
            "{shell}"
        );
    }
    let refused = outboard(&["completions", "tcsh"], None).unwrap();
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("bash"), "{}", refused.stderr);

    let top = outboard(&["man"], None).unwrap();
    assert_eq!(top.code, 0, "{}", top.stderr);
    assert!(top.stdout.starts_with(".ie") || top.stdout.contains(".TH outboard"), "{}", top.stdout);
    let dir = tempfile::tempdir().unwrap();
    let written = outboard(&["man", dir.path().to_str().unwrap()], None).unwrap();
    assert_eq!(written.code, 0, "{}", written.stderr);
    for page in ["outboard.1", "outboard-run.1", "outboard-approve.1", "outboard-memory-write.1"] {
        let text = std::fs::read_to_string(dir.path().join(page))
            .unwrap_or_else(|e| panic!("{page}: {e}; wrote:\n{}", written.stdout));
        assert!(text.contains(".TH"), "{page}");
    }
    let run = std::fs::read_to_string(dir.path().join("outboard-run.1")).unwrap();
    assert!(run.contains("approve"), "the run page documents --approve");
}

#[test]
fn outboard_server_prints_completions_and_man_pages() {
    let server = bin("outboard-server").unwrap();
    let out = Command::new(&server).args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("policy") && text.contains("--listen"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(&server).arg("man").arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page =
        std::fs::read_to_string(dir.path().join("outboard-server-admin-policy-set.1")).unwrap();
    assert!(page.contains("PATTERN"), "{page}");
}
