//! Embedded mode works on the code where you are: `outboard run` with no `--server` uses the
//! current directory (or `--workspace DIR`) in place as `/workspace`, records it with the session
//! so `--session ID` finds it from anywhere, refuses `/` and the home directory unless named, and
//! puts the project's `AGENTS.md` (else `CLAUDE.md`) in the system prompt. A `serve` server
//! refuses a client's `workspace`. Real `outboard` binary, real sandbox, mock model over HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use outboard_tests::fixture::serve;
use outboard_tests::harness::{outboard_in, Api, CliRun, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep, RecordedRequest};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

/// `outboard run --json` in embedded mode against `mock`, in `cwd`, with `extra` flags.
async fn run_in(
    mock: &MockLlm,
    data: &Path,
    cwd: &Path,
    env: &[(&str, &str)],
    extra: &[&str],
    prompt: &str,
) -> CliRun {
    let base = mock.openai_base_url();
    let data = data.to_str().unwrap().to_owned();
    let cwd = cwd.to_path_buf();
    let env: Vec<(String, String)> =
        env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    // An unknown model whose server says nothing of its window gets 8,192 tokens, which
    // Outboard's own prompt and tools nearly fill: a window of its own keeps compaction out.
    let mut args: Vec<String> = [
        "run",
        "--json",
        "--provider",
        "openai",
        "--base-url",
        &base,
        "--model",
        "m",
        "--context-window",
        "200000",
        "--data",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.push(data);
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args.push(prompt.to_owned());
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        outboard_in(Some(&cwd), &env, &args, None)
    })
    .await
    .unwrap()
    .unwrap()
}

fn session_id(out: &CliRun) -> String {
    let lines = out.json_lines().unwrap();
    lines[0]["session_id"].as_str().unwrap().to_owned()
}

fn tool_results(out: &CliRun) -> Vec<Value> {
    out.json_lines().unwrap().into_iter().filter(|l| l["type"] == "tool_result").collect()
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap()
}

/// The system prompt of a recorded Chat Completions request.
fn system_of(r: &RecordedRequest) -> String {
    let first = &r.body["messages"][0];
    assert_eq!(first["role"], "system", "{}", r.body);
    match &first["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        other => panic!("system content {other}"),
    }
}

fn sessions_json(data: &Path, cwd: &Path) -> Vec<Value> {
    let data = data.to_str().unwrap();
    let out = outboard_in(Some(cwd), &[], &["sessions", "--json", "--data", data], None).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str(&out.stdout).unwrap()
}

#[tokio::test]
async fn embedded_run_edits_the_current_directory_in_place_and_the_session_remembers_it() {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "hello old\n").unwrap();
    let data = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Read", json!({"file_path": "notes.txt"})),
        MockStep::tool_call(
            "Edit",
            json!({"file_path": "/workspace/notes.txt", "old_string": "old", "new_string": "new"}),
        ),
        MockStep::tool_call("Bash", json!({"command": "ls"})),
        MockStep::text("Edited."),
    ])
    .await
    .unwrap();
    let out = run_in(&mock, data.path(), project.path(), &[], &[], "edit notes").await;
    assert_eq!(out.code, 0, "stderr: {}\nstdout: {}", out.stderr, out.stdout);
    let results = tool_results(&out);
    assert_eq!(results.len(), 3, "{}", out.stdout);
    assert!(results[0]["output"].as_str().unwrap().contains("hello old"), "{}", out.stdout);
    assert!(results[2]["output"].as_str().unwrap().contains("notes.txt"), "{}", out.stdout);
    assert_eq!(std::fs::read_to_string(project.path().join("notes.txt")).unwrap(), "hello new\n");
    // The data dir holds the database, and no workspace.
    assert!(data.path().join("outboard.db").exists());
    assert!(!data.path().join("workspaces").exists(), "a workspace was made in the data dir");

    // The session recorded its directory: listed, and used again from another directory.
    let sid = session_id(&out);
    let elsewhere = tempfile::tempdir().unwrap();
    let listed = sessions_json(data.path(), elsewhere.path());
    let shown = canonical(project.path()).to_str().unwrap().to_owned();
    assert_eq!(listed[0]["id"], sid.as_str());
    assert_eq!(listed[0]["workspace"], shown.as_str());
    let text = outboard_in(
        Some(elsewhere.path()),
        &[],
        &["sessions", "--data", data.path().to_str().unwrap()],
        None,
    )
    .unwrap();
    assert!(text.stdout.contains("SOURCE") && text.stdout.contains(&shown), "{}", text.stdout);

    mock.push(MockStep::tool_call("Read", json!({"file_path": "notes.txt"})));
    mock.push(MockStep::tool_call(
        "Edit",
        json!({"file_path": "notes.txt", "old_string": "new", "new_string": "newer"}),
    ));
    mock.push(MockStep::text("Edited again."));
    let again =
        run_in(&mock, data.path(), elsewhere.path(), &[], &["--session", &sid], "more").await;
    assert_eq!(again.code, 0, "stderr: {}\nstdout: {}", again.stderr, again.stdout);
    assert_eq!(std::fs::read_to_string(project.path().join("notes.txt")).unwrap(), "hello newer\n");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0, "the other cwd was used");
    assert!(!data.path().join("workspaces").exists());
}

#[tokio::test]
async fn files_the_agent_creates_in_place_belong_to_the_directorys_owner() {
    let project = tempfile::tempdir().unwrap();
    let as_root = rustix::process::geteuid().is_root();
    // As root (the launcher's idmapped mount), the project belongs to someone else; otherwise
    // it is ours, and so must be what the agent makes.
    let owner = if as_root { 1234 } else { rustix::process::geteuid().as_raw() };
    if as_root {
        std::os::unix::fs::chown(project.path(), Some(owner), Some(owner)).unwrap();
    }
    let data = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Bash", json!({"command": "echo hi > by-bash.txt && id -u"})),
        MockStep::tool_call("Write", json!({"file_path": "sub/by-write.txt", "content": "w\n"})),
        MockStep::text("Made them."),
    ])
    .await
    .unwrap();
    let out = run_in(&mock, data.path(), project.path(), &[], &[], "make files").await;
    assert_eq!(out.code, 0, "stderr: {}\nstdout: {}", out.stderr, out.stdout);
    let results = tool_results(&out);
    assert_eq!(results[0]["is_error"], false, "{}", out.stdout);
    for file in ["by-bash.txt", "sub", "sub/by-write.txt"] {
        let meta = std::fs::metadata(project.path().join(file)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (owner, owner), "{file} owner");
    }
}

#[tokio::test]
async fn root_and_home_are_refused_unless_named_and_a_bad_workspace_is_a_usage_error() {
    let mock = MockLlm::start(vec![]).await.unwrap();
    let data = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let home_str = home.path().to_str().unwrap().to_owned();
    let env = [("HOME", home_str.as_str())];

    let at_root = run_in(&mock, data.path(), Path::new("/"), &env, &[], "hi").await;
    assert_eq!(at_root.code, 2, "{}", at_root.stderr);
    assert!(
        at_root.stderr.contains("refusing to work in / (the root directory)"),
        "{}",
        at_root.stderr
    );
    assert!(at_root.stderr.contains("--workspace DIR"), "{}", at_root.stderr);

    let at_home = run_in(&mock, data.path(), home.path(), &env, &[], "hi").await;
    assert_eq!(at_home.code, 2, "{}", at_home.stderr);
    assert!(at_home.stderr.contains("your home directory"), "{}", at_home.stderr);
    assert!(at_home.stderr.contains("cd into a project directory"), "{}", at_home.stderr);

    let missing = home.path().join("nope");
    let flag = ["--workspace", missing.to_str().unwrap()];
    let gone = run_in(&mock, data.path(), home.path(), &env, &flag, "hi").await;
    assert_eq!(gone.code, 2, "{}", gone.stderr);
    assert!(gone.stderr.contains("--workspace"), "{}", gone.stderr);
    let file = home.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let flag = ["--workspace", file.to_str().unwrap()];
    let not_dir = run_in(&mock, data.path(), home.path(), &env, &flag, "hi").await;
    assert_eq!(not_dir.code, 2, "{}", not_dir.stderr);
    assert!(not_dir.stderr.contains("is not a directory"), "{}", not_dir.stderr);
    assert_eq!(mock.requests().len(), 0, "a refused run called the model");

    // Named explicitly (from `/`), the home directory is used.
    mock.push(MockStep::text("ok"));
    let flag = ["--workspace", home_str.as_str()];
    let named = run_in(&mock, data.path(), Path::new("/"), &env, &flag, "hi").await;
    assert_eq!(named.code, 0, "{}", named.stderr);
    let listed = sessions_json(data.path(), home.path());
    assert_eq!(listed[0]["workspace"], canonical(home.path()).to_str().unwrap());
    // Through the environment too, and never `/` itself by accident.
    mock.push(MockStep::text("ok"));
    let env2 = [("HOME", home_str.as_str()), ("OUTBOARD_WORKSPACE", home_str.as_str())];
    let by_env = run_in(&mock, data.path(), Path::new("/"), &env2, &[], "hi").await;
    assert_eq!(by_env.code, 0, "{}", by_env.stderr);
}

#[tokio::test]
async fn a_serve_server_refuses_a_client_workspace() {
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let mut client = WsClient::connect(&server.url, &token).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let refused = client
        .request("session/create", json!({"workspace": dir.path().to_str().unwrap()}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code, outboard_shared::ErrorCode::BadRequest, "{refused:?}");
    assert!(refused.message.contains("remote client must not name a directory"), "{refused:?}");
    let listed = client.request("session/list", json!({})).await.unwrap().unwrap();
    assert_eq!(listed["sessions"], json!([]), "a refused create made a session");
    // Without it, a session gets its own directory as before.
    assert!(client.request("session/create", json!({})).await.unwrap().is_ok());
}

#[tokio::test]
async fn agents_md_reaches_the_system_prompt_claude_md_only_without_it_cut_at_32_kib() {
    let project = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("AGENTS.md"), "Use tabs. MARKER-AGENTS\n").unwrap();
    std::fs::write(project.path().join("CLAUDE.md"), "MARKER-CLAUDE\n").unwrap();
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Read", json!({"file_path": "AGENTS.md"})),
        MockStep::text("ok"),
    ])
    .await
    .unwrap();
    let out = run_in(&mock, data.path(), project.path(), &[], &[], "hi").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let requests = mock.requests();
    let first = system_of(&requests[0]);
    assert!(first.contains("MARKER-AGENTS"), "{first}");
    assert!(!first.contains("MARKER-CLAUDE"), "{first}");
    assert!(first.contains("path=\"/workspace/AGENTS.md\" bytes=\"24\""), "{first}");
    assert!(first.contains("<project-data-"), "{first}");
    // Byte-stable while the file is unchanged (provider prompt caches).
    assert_eq!(first, system_of(&requests[1]));

    // Without AGENTS.md, CLAUDE.md.
    std::fs::remove_file(project.path().join("AGENTS.md")).unwrap();
    let sid = session_id(&out);
    mock.push(MockStep::text("ok"));
    let out = run_in(&mock, data.path(), project.path(), &[], &["--session", &sid], "hi").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let claude = system_of(mock.requests().last().unwrap());
    assert!(claude.contains("MARKER-CLAUDE") && !claude.contains("MARKER-AGENTS"), "{claude}");
    assert!(claude.contains("path=\"/workspace/CLAUDE.md\""), "{claude}");

    // A long AGENTS.md is cut at 32 KiB, with a note saying how to read the rest.
    let mut long = "HEAD-OF-AGENTS\n".to_owned();
    while long.len() < 40 * 1024 {
        long.push_str("é filler line for the instructions file\n");
    }
    long.push_str("TAIL-OF-AGENTS\n");
    std::fs::write(project.path().join("AGENTS.md"), &long).unwrap();
    mock.push(MockStep::text("ok"));
    let out = run_in(&mock, data.path(), project.path(), &[], &["--session", &sid], "hi").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let cut = system_of(mock.requests().last().unwrap());
    assert!(cut.contains("HEAD-OF-AGENTS") && !cut.contains("TAIL-OF-AGENTS"), "cut missing");
    assert!(!cut.contains("MARKER-CLAUDE"));
    assert!(
        cut.contains(&format!("[AGENTS.md was cut at 32768 bytes of {}", long.len())),
        "no cut note"
    );
    let quoted = cut.split("HEAD-OF-AGENTS").nth(1).unwrap().split("</project-data-").next();
    assert!(quoted.unwrap().len() < 32 * 1024, "more than 32 KiB quoted");
}

#[tokio::test]
async fn a_directory_worked_on_in_place_is_not_held_to_the_workspace_quota() {
    // The quota protects the server's disk from what sessions make in directories it owns; a
    // user's own project (a real repository, build output and all) is theirs.
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("big.bin"), vec![b'x'; 64 * 1024]).unwrap();
    let data = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(vec![MockStep::text("Hello.")]).await.unwrap();
    let first = run_in(&mock, data.path(), project.path(), &[], &[], "hi").await;
    assert_eq!(first.code, 0, "stderr: {}", first.stderr);
    let sid = session_id(&first);
    let set = std::process::Command::new(outboard_tests::harness::bin("outboard-server").unwrap())
        .args(["admin", "quota", "set", "--org", "local", "workspace_bytes", "1KiB", "--data"])
        .arg(data.path())
        .output()
        .unwrap();
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    mock.push(MockStep::tool_call("Write", json!({"file_path": "more.txt", "content": "more\n"})));
    mock.push(MockStep::tool_call("Bash", json!({"command": "cat more.txt"})));
    mock.push(MockStep::text("Done."));
    let again = run_in(&mock, data.path(), project.path(), &[], &["--session", &sid], "go").await;
    assert_eq!(again.code, 0, "stderr: {}\nstdout: {}", again.stderr, again.stdout);
    let results = tool_results(&again);
    assert_eq!(results[0]["is_error"], false, "{}", again.stdout);
    assert_eq!(results[1]["output"], "more\n", "{}", again.stdout);
}

/// Checkpoints of a directory worked on in place (issue 38, item 2): a rewind restores the
/// user's files and leaves their `.git` and the files their `.gitignore` names alone.
#[tokio::test]
async fn a_rewind_in_place_restores_the_users_files_and_leaves_their_git_and_ignored_files() {
    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    let git = |args: &[&str]| git_in(p, args);
    git(&["init", "-q"]);
    std::fs::write(p.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(p.join("notes.txt"), "v1\n").unwrap();
    std::fs::create_dir(p.join("target")).unwrap();
    std::fs::write(p.join("target/out.bin"), "build1\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "first"]);
    let head = git(&["rev-parse", "HEAD"]);
    let index = std::fs::read(p.join(".git/index")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(vec![
        MockStep::tool_call(
            "Bash",
            json!({"command": "echo v2 > notes.txt && echo new > new.txt && echo build2 > target/out.bin"}),
        ),
        MockStep::text("Changed."),
    ])
    .await
    .unwrap();
    let out = run_in(&mock, data.path(), p, &[], &[], "change things").await;
    assert_eq!(out.code, 0, "stderr: {}\nstdout: {}", out.stderr, out.stdout);
    assert_eq!(std::fs::read_to_string(p.join("notes.txt")).unwrap(), "v2\n");
    let sid = session_id(&out);

    let elsewhere = tempfile::tempdir().unwrap();
    let data_arg = data.path().to_str().unwrap();
    let rewound =
        outboard_in(Some(elsewhere.path()), &[], &["rewind", &sid, "1", "--data", data_arg], None)
            .unwrap();
    assert_eq!(rewound.code, 0, "{}", rewound.stderr);
    assert_eq!(std::fs::read_to_string(p.join("notes.txt")).unwrap(), "v1\n");
    assert!(!p.join("new.txt").exists(), "a file made since the checkpoint goes");
    assert_eq!(std::fs::read_to_string(p.join("target/out.bin")).unwrap(), "build2\n");
    assert_eq!(git(&["rev-parse", "HEAD"]), head);
    assert_eq!(std::fs::read(p.join(".git/index")).unwrap(), index, "the user's index is theirs");
}

/// Issue 49, item 4: in place, the sandbox sees the user's `.git` read-only, so nothing a
/// command writes there (a `core.fsmonitor`, a hook) runs at the user's next own `git`; git's
/// reading commands still work in the sandbox. The model is scripted to attack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_the_users_git_dir_is_read_only_in_the_sandbox() {
    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    let git = |args: &[&str]| git_in(p, args);
    git(&["init", "-q"]);
    std::fs::write(p.join("a.txt"), "one\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "first"]);
    let config = std::fs::read(p.join(".git/config")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let attack = "git config core.fsmonitor 'touch /workspace/PWNED; false'; \
        echo '[core] fsmonitor = x' >> .git/config; \
        printf '#!/bin/sh\\ntouch PWNED\\n' > .git/hooks/pre-commit; \
        rm -f .git/HEAD; mv .git .git-gone; \
        echo two > a.txt; git status --short; echo done";
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Bash", json!({"command": attack})),
        MockStep::text("Tried."),
    ])
    .await
    .unwrap();
    let out = run_in(&mock, data.path(), p, &[], &[], "attack the repository").await;
    assert_eq!(out.code, 0, "stderr: {}\nstdout: {}", out.stderr, out.stdout);
    let requests = mock.requests();
    let result = requests.last().unwrap().body.to_string();
    assert!(result.contains("Read-only file system"), "{result}");
    assert!(result.contains("M a.txt"), "git status works read-only: {result}");
    assert_eq!(std::fs::read(p.join(".git/config")).unwrap(), config, "the config is the user's");
    assert!(!p.join(".git/hooks/pre-commit").exists(), "no hook was planted");
    assert!(p.join(".git/HEAD").exists() && !p.join(".git-gone").exists());
    assert_eq!(
        std::fs::read_to_string(p.join("a.txt")).unwrap(),
        "two\n",
        "the files are writable"
    );
}

/// `git ARGS` in `dir` with a test identity, which must succeed; its stdout.
fn git_in(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}
