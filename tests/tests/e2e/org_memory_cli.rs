//! `outboard memory …` and `outboard skills …`, the real binary against a real server: import a
//! directory of Claude Code-style skills, list and show them, write, list, read, follow history,
//! restore and delete memory, with the exit codes a script relies on — and org scoping.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_tests::fixture::{cli, cli_ok, serve};
use outboard_tests::harness::{outboard, Api, CliRun, TestServer};

fn run(server: &TestServer, token: &str, args: &[&str], stdin: Option<&str>) -> CliRun {
    cli(server, token, args, stdin)
}

fn ok(server: &TestServer, token: &str, args: &[&str], stdin: Option<&str>) -> String {
    cli_ok(server, token, args, stdin).stdout
}

#[tokio::test]
async fn people_manage_memory_and_skills_from_the_command_line() {
    let mock = outboard_tests::scripted::start().await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let alice = server.add_user("alice", "acme").unwrap();
    let eve = server.add_user("eve", "evil").unwrap();

    // A directory of skills: two good ones, one without SKILL.md, a hidden file, a binary.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let write = |rel: &str, content: &[u8]| {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    };
    write(
        "deploy/SKILL.md",
        b"---\nname: deploy\ndescription: Ship the API to production\n---\n# Deploy\nrun make ship\n",
    );
    write("deploy/scripts/ship.sh", b"#!/bin/sh\nmake ship\n");
    write("review/SKILL.md", b"---\nname: review\ndescription: Review a pull request\n---\n");
    write("review/.secret", b"hidden");
    write("review/logo.png", &[0x89, b'P', b'N', b'G', 0, 0, 1]);
    write("notes/README.md", b"not a skill");

    let imported = run(&server, &alice, &["skills", "import", root.to_str().unwrap()], None);
    assert_eq!(imported.code, 0, "{}", imported.stderr);
    assert!(
        imported.stdout.contains("deploy") && imported.stdout.contains("review"),
        "{}",
        imported.stdout
    );
    assert!(
        imported.stderr.contains("notes"),
        "the directory without SKILL.md is reported: {}",
        imported.stderr
    );
    assert!(
        imported.stderr.contains("logo.png"),
        "the binary file is reported: {}",
        imported.stderr
    );

    let listed = ok(&server, &alice, &["skills", "ls"], None);
    assert!(listed.contains("deploy") && listed.contains("Ship the API to production"), "{listed}");
    assert!(!listed.contains("notes"), "{listed}");
    let shown = ok(&server, &alice, &["skills", "cat", "deploy"], None);
    assert!(shown.contains("run make ship"), "{shown}");
    let script = ok(&server, &alice, &["skills", "cat", "deploy", "scripts/ship.sh"], None);
    assert_eq!(script, "#!/bin/sh\nmake ship\n");
    // Importing the same directory again makes no new version.
    let again = ok(&server, &alice, &["skills", "import", root.to_str().unwrap()], None);
    assert!(again.contains("unchanged"), "{again}");

    // Memory: write from stdin, list, read, change, history, restore, delete.
    ok(&server, &alice, &["memory", "write", "MEMORY.md", "-"], Some("Deploy on Tuesdays.\n"));
    ok(&server, &alice, &["memory", "write", "/memory/MEMORY.md"], Some("Deploy on Thursdays.\n"));
    let ls = ok(&server, &alice, &["memory", "ls"], None);
    assert!(ls.contains("/memory/MEMORY.md") && ls.contains("v2") && ls.contains("alice"), "{ls}");
    assert_eq!(
        ok(&server, &alice, &["memory", "cat", "MEMORY.md"], None),
        "Deploy on Thursdays.\n"
    );
    assert_eq!(
        ok(&server, &alice, &["memory", "cat", "MEMORY.md", "v1"], None),
        "Deploy on Tuesdays.\n"
    );
    let history = ok(&server, &alice, &["memory", "history", "MEMORY.md"], None);
    assert!(
        history.contains("v1") && history.contains("v2") && history.contains("write"),
        "{history}"
    );
    let stale = run(
        &server,
        &alice,
        &["memory", "write", "MEMORY.md", "--base-version", "1"],
        Some("stale\n"),
    );
    assert_eq!(stale.code, 1, "a stale base version is refused: {}", stale.stderr);
    assert!(stale.stderr.contains("v2, written by alice"), "{}", stale.stderr);
    let restored = ok(&server, &alice, &["memory", "restore", "MEMORY.md", "1"], None);
    assert!(restored.contains("v3"), "{restored}");
    assert_eq!(ok(&server, &alice, &["memory", "cat", "MEMORY.md"], None), "Deploy on Tuesdays.\n");
    ok(&server, &alice, &["memory", "rm", "MEMORY.md"], None);
    let gone = run(&server, &alice, &["memory", "cat", "MEMORY.md"], None);
    assert_eq!(gone.code, 1, "a deleted file is not found: {}", gone.stderr);
    assert!(gone.stderr.contains("deleted"), "{}", gone.stderr);
    let history = ok(&server, &alice, &["memory", "history", "MEMORY.md", "--json"], None);
    assert!(history.contains("\"delete\"") && history.contains("\"restore\""), "{history}");

    // Bad input and another org.
    let escape = run(&server, &alice, &["memory", "cat", "/memory/../etc/passwd"], None);
    assert_ne!(escape.code, 0);
    let other = run(&server, &eve, &["memory", "cat", "MEMORY.md"], None);
    assert_eq!(other.code, 1, "{}", other.stderr);
    let other = ok(&server, &eve, &["skills", "ls"], None);
    assert!(!other.contains("deploy"), "{other}");
    let wrong = run(&server, "ob_wrong", &["memory", "ls"], None);
    assert_eq!(wrong.code, 3, "{}", wrong.stderr);
}

#[test]
fn embedded_mode_needs_no_api_key_for_org_files() {
    // `outboard()` clears every *_API_KEY: the embedded server starts anyway, since these
    // commands never call the model.
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let wrote =
        outboard(&["memory", "write", "MEMORY.md", "--data", dir], Some("local note\n")).unwrap();
    assert_eq!(wrote.code, 0, "{}", wrote.stderr);
    let read = outboard(&["memory", "cat", "MEMORY.md", "--data", dir], None).unwrap();
    assert_eq!((read.code, read.stdout.as_str()), (0, "local note\n"), "{}", read.stderr);
    let skills = outboard(&["skills", "ls", "--data", dir], None).unwrap();
    assert_eq!(skills.code, 0, "{}", skills.stderr);
    // A turn still needs a model, and says how to give one.
    let run = outboard(&["run", "hi", "--data", dir], None).unwrap();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("API key"), "{}", run.stderr);
}
