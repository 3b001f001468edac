//! Sessions on real repositories, against git's own smart-HTTP server (`git http-backend`) on
//! loopback behind Basic auth: the server clones at a branch, a tag and a commit with the org's
//! credential, which never reaches the workspace, the sandbox, the log or a tool result; wrong
//! or missing credentials, missing refs and bad URLs are refused and leave nothing behind; the
//! work comes out with `outboard diff`, `outboard apply` (byte for byte) and `outboard push` (a
//! new branch with the session's trailer, never touching a branch it did not create); and
//! `outboard sessions rm` deletes a session's files.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use outboard_tests::fixture::{noise, serve};
use outboard_tests::git_http::{git_command, make_repo, GitHttp, Repo};
use outboard_tests::harness::{bin, outboard_in, Api, CliRun, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

/// The org's credential for the git host: what must never leak.
const TOKEN: &str = "ghs_sEcReT_t0ken_4242";

struct World {
    _root: tempfile::TempDir,
    git: GitHttp,
    repo: Repo,
    server: TestServer,
    alice: String,
    mock: MockLlm,
    dev: String,
}

fn secret_set(server: &TestServer, org: &str, host: &str, value: &str) -> std::process::Output {
    use std::io::Write as _;
    let mut child = std::process::Command::new(bin("outboard-server").unwrap())
        .args(["admin", "secret", "set", "--org", org, "--host", host, "git"])
        .arg("--data")
        .arg(server.data_dir())
        .args(outboard_tests::harness::store_args(server.data_dir()).unwrap())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{value}\n").as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

async fn world(steps: Vec<MockStep>) -> World {
    let root = tempfile::tempdir().unwrap();
    let repo = make_repo(
        root.path(),
        "shop.git",
        &[
            ("README.md", b"# Shop\n"),
            ("src/lib.rs", b"pub fn price() -> u32 { 42 }\n"),
            ("src/old.rs", b"// to be removed\n"),
            ("logo.bin", &[0u8, 159, 146, 150, 0, 1, 2, 255]),
        ],
    )
    .unwrap();
    let dev = repo
        .commit("dev", "main", "dev work", &[("README.md", b"# Shop (dev)\n")], &["src/old.rs"])
        .unwrap();
    repo.tag("v1", "main").unwrap();
    let git = GitHttp::start(root.path(), "x-access-token", TOKEN).unwrap();
    let mock = MockLlm::start(steps).await.unwrap();
    let flags = git.allow_flags();
    let server =
        serve(&mock, Api::Anthropic, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let alice = server.add_user("alice", "acme").unwrap();
    let set = secret_set(&server, "acme", &git.authority(), TOKEN);
    assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
    World { _root: root, git, repo, server, alice, mock, dev }
}

async fn create(client: &mut WsClient, url: &str, git_ref: Option<&str>) -> Result<Value, Value> {
    let mut source = json!({"type": "repo", "url": url});
    if let Some(r) = git_ref {
        source["ref"] = json!(r);
    }
    match client.request("session/create", json!({"source": source})).await.unwrap() {
        Ok(v) => Ok(v["session"].clone()),
        Err(e) => Err(serde_json::to_value(e).unwrap()),
    }
}

fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = git_command(dir).arg("-C").arg(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Every file under `dir` (`.git` excluded unless `with_git`), with its bytes and exec bit.
fn tree(dir: &Path, with_git: bool) -> Vec<(String, Vec<u8>, bool)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            if !with_git && rel == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let exec = meta.permissions().mode() & 0o111 != 0;
                out.push((rel, std::fs::read(&path).unwrap(), exec));
            }
        }
    }
    out.sort();
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn entries(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    }
}

// Multi-threaded: the mock model keeps answering while a test thread waits for the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_is_cloned_at_a_branch_a_tag_and_a_commit_and_its_credential_stays_out() {
    let w = world(vec![]).await;
    let url = w.git.url("shop.git");
    let mut client = WsClient::connect(&w.server.url, &w.alice).await.unwrap();

    let at_dev = create(&mut client, &url, Some("dev")).await.unwrap();
    assert_eq!(
        at_dev["source"],
        json!({"type": "repo", "url": url, "ref": "dev", "commit": w.dev})
    );
    let ws = w.server.workspace(at_dev["id"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(ws.join("README.md")).unwrap(), "# Shop (dev)\n");
    assert!(!ws.join("src/old.rs").exists());
    assert_eq!(git_out(&ws, &["rev-parse", "HEAD"]), w.dev);
    assert_eq!(git_out(&ws, &["symbolic-ref", "HEAD"]), "refs/heads/dev");
    assert_eq!(git_out(&ws, &["remote", "get-url", "origin"]), url);
    assert_eq!(git_out(&ws, &["status", "--porcelain"]), "");
    // git's own progress (the host's counting and compressing; receiving and checking out only
    // when they take a while) comes through, after the server's own first line.
    assert_eq!(client.progress[0].phase, "resolving", "{:?}", client.progress);
    assert!(client.progress.iter().any(|p| p.phase == "counting"), "{:?}", client.progress);

    let at_tag = create(&mut client, &url, Some("v1")).await.unwrap();
    assert_eq!(at_tag["source"]["commit"], json!(w.repo.main));
    let tag_ws = w.server.workspace(at_tag["id"].as_str().unwrap());
    assert_eq!(std::fs::read(tag_ws.join("logo.bin")).unwrap(), [0u8, 159, 146, 150, 0, 1, 2, 255]);
    assert!(tag_ws.join("src/old.rs").exists());

    let at_commit = create(&mut client, &url, Some(&w.dev)).await.unwrap();
    assert_eq!(at_commit["source"]["commit"], json!(w.dev));
    let default = create(&mut client, &url, None).await.unwrap();
    assert_eq!(default["source"]["ref"], json!("main"));
    assert_eq!(default["source"]["commit"], json!(w.repo.main));

    // The host saw the credential; nothing the sandbox can read holds it.
    let basic = outboard_tests::git_http::basic_auth("x-access-token", TOKEN);
    assert!(w.git.requests().iter().any(|r| r.authorization.as_deref() == Some(basic.as_str())));
    for session in [&at_dev, &at_tag, &at_commit, &default] {
        let ws = w.server.workspace(session["id"].as_str().unwrap());
        for (path, bytes, _) in tree(&ws, true) {
            assert!(!contains(&bytes, TOKEN), "{path} holds the token");
            assert!(!contains(&bytes, &basic), "{path} holds the Basic header");
        }
        let config = std::fs::read_to_string(ws.join(".git/config")).unwrap();
        assert!(!config.contains('@') && !config.contains("credential"), "{config}");
    }
    assert!(!w.server.log().contains(TOKEN));
    let db = std::fs::read(w.server.data_dir().join("outboard.db")).unwrap();
    assert!(!contains(&db, TOKEN), "the database holds the token in clear");
}

// Multi-threaded: the mock model keeps answering while a test thread waits for the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_missing_refs_and_bad_urls_leave_nothing_behind() {
    let w = world(vec![]).await;
    let url = w.git.url("shop.git");
    let mut alice = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let bob = w.server.add_user("bob", "other").unwrap();
    let mut bob = WsClient::connect(&w.server.url, &bob).await.unwrap();

    let missing = create(&mut bob, &url, None).await.unwrap_err();
    assert_eq!(missing["code"], "forbidden", "{missing}");
    let text = missing["message"].as_str().unwrap();
    assert!(text.contains(&w.git.authority()) && text.contains("admin secret set"), "{text}");

    let nothing_there = create(&mut alice, &w.git.url("nope.git"), None).await.unwrap_err();
    assert_eq!(nothing_there["code"], "not_found", "{nothing_there}");

    let no_ref = create(&mut alice, &url, Some("release-9")).await.unwrap_err();
    assert_eq!(no_ref["code"], "not_found", "{no_ref}");
    let text = no_ref["message"].as_str().unwrap();
    assert!(text.contains("release-9") && text.contains("main"), "{text}");

    let with_userinfo = url.replace("http://", &format!("http://x-access-token:{TOKEN}@"));
    let refused = create(&mut alice, &with_userinfo, None).await.unwrap_err();
    assert_eq!(refused["code"], "bad_request");
    assert!(refused["message"].as_str().unwrap().contains("admin secret set"), "{refused}");
    assert!(!refused.to_string().contains(TOKEN), "{refused}");

    for bad in ["file:///etc", "/etc", "ssh://git@127.0.0.1/x", "ftp://127.0.0.1/x"] {
        let refused = create(&mut alice, bad, None).await.unwrap_err();
        assert_eq!(refused["code"], "bad_request", "{bad}: {refused}");
    }
    // The server's own port and any other loopback port are not git hosts an admin named.
    let own = format!("http://{}/healthz", w.server.addr());
    for internal in [own.as_str(), "http://127.0.0.1:9/git/x.git"] {
        let refused = create(&mut alice, internal, None).await.unwrap_err();
        assert_eq!(refused["code"], "forbidden", "{internal}: {refused}");
        assert!(refused["message"].as_str().unwrap().contains("--git-allow-host"), "{refused}");
    }

    // A wrong credential is "refused", not "missing".
    let set = secret_set(&w.server, "acme", &w.git.authority(), "not-the-token");
    assert!(set.status.success());
    let wrong = create(&mut alice, &url, None).await.unwrap_err();
    assert_eq!(wrong["code"], "forbidden", "{wrong}");
    assert!(wrong["message"].as_str().unwrap().contains("refused"), "{wrong}");
    w.git.forbid_user("x-access-token");
    let set = secret_set(&w.server, "acme", &w.git.authority(), TOKEN);
    assert!(set.status.success());
    let forbidden = create(&mut alice, &url, None).await.unwrap_err();
    assert!(forbidden["message"].as_str().unwrap().contains("refused"), "{forbidden}");

    let listed = alice.request("session/list", json!({})).await.unwrap().unwrap();
    assert_eq!(listed["sessions"], json!([]));
    let data = w.server.data_dir();
    assert_eq!(entries(&data.join("workspaces")), Vec::<String>::new());
    assert_eq!(entries(&data.join("git")), Vec::<String>::new());
}

/// `outboard ARGS` against the world's server as alice, in `cwd`, with a clean git identity.
fn cli(w: &World, cwd: &Path, args: &[&str]) -> CliRun {
    let mut full = args.to_vec();
    full.extend(["--server", w.server.url.as_str()]);
    let env = [
        ("OUTBOARD_TOKEN", w.alice.as_str()),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_CONFIG_NOSYSTEM", "1"),
    ];
    outboard_in(Some(cwd), &env, &full, None).unwrap()
}

/// What a Bash step prints: the sandbox's environment, every process's, and the git config.
const SNOOP: &str = "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; \
                     git config -l; cat .git/config; ls -la";

/// The changes the agent makes: an edit, a deletion, a new text file, a new binary file, a new
/// executable script.
const CHANGE: &str = "printf 'more\\n' >> README.md && rm src/old.rs && mkdir -p src/new && \
                      printf 'pub fn tax() {}\\n' > src/new/tax.rs && \
                      printf '\\000\\001\\377binary' > src/new/blob.bin && \
                      printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod +x run.sh && \
                      printf '\\001\\002' > logo.bin";

// Multi-threaded: the mock model keeps answering while a test thread waits for the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_work_comes_out_by_diff_apply_and_push_and_the_token_never_reaches_a_turn() {
    let w = world(vec![
        MockStep::tool_call("Bash", json!({"command": SNOOP})),
        MockStep::tool_call("Bash", json!({"command": CHANGE})),
        MockStep::text("Done."),
    ])
    .await;
    let url = w.git.url("shop.git");
    let scratch = tempfile::tempdir().unwrap();
    let repo_arg = format!("{url}#main");
    let run = cli(&w, scratch.path(), &["run", "--json", "--repo", &repo_arg, "change the shop"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let lines = run.json_lines().unwrap();
    let first_started = lines.iter().position(|l| l["type"] == "run_started").unwrap();
    assert!(lines[..first_started].iter().any(|l| l["type"] == "progress"), "{}", run.stdout);
    let sid = lines[first_started]["session_id"].as_str().unwrap().to_owned();
    assert_eq!(w.mock.remaining(), 0);

    // Nothing of the turn holds the credential: not the tool results (the sandbox's env, every
    // process's environ, the git config), not any event of the log, not the server's log.
    assert!(!run.stdout.contains(TOKEN), "{}", run.stdout);
    let snoop = lines.iter().find(|l| l["type"] == "tool_result").unwrap();
    assert!(snoop.to_string().contains("origin"), "the snoop ran: {snoop}");
    let mut client = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let attached = client
        .request("session/attach", json!({"session_id": sid, "role": "watcher"}))
        .await
        .unwrap()
        .unwrap();
    assert!(!attached.to_string().contains(TOKEN));
    assert!(!w.server.log().contains(TOKEN));

    // diff, as text and as a summary.
    let diff = cli(&w, scratch.path(), &["diff", &sid]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    for needle in [
        "README.md",
        "deleted file mode",
        "src/new/tax.rs",
        "GIT binary patch",
        "new file mode 100755",
    ] {
        assert!(diff.stdout.contains(needle), "{needle} not in:\n{}", diff.stdout);
    }
    let stat = cli(&w, scratch.path(), &["diff", "--stat", &sid]);
    assert!(
        stat.stdout.contains("5 files changed") || stat.stdout.contains("6 files changed"),
        "{}",
        stat.stdout
    );

    // apply into a fresh clone at the same ref reproduces the workspace byte for byte.
    let fresh = scratch.path().join("fresh");
    let cloned = git_command(scratch.path())
        .args([
            "-c",
            &format!(
                "http.extraHeader=Authorization: {}",
                outboard_tests::git_http::basic_auth("x-access-token", TOKEN)
            ),
        ])
        .args(["clone", "-q", "-b", "main", &url])
        .arg(&fresh)
        .output()
        .unwrap();
    assert!(cloned.status.success(), "{}", String::from_utf8_lossy(&cloned.stderr));
    let applied = cli(&w, scratch.path(), &["apply", &sid, "--dir", fresh.to_str().unwrap()]);
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    let ws = w.server.workspace(&sid);
    assert_eq!(tree(&fresh, false), tree(&ws, false));
    // Applying again does not apply, names the files, and changes nothing.
    let before = tree(&fresh, false);
    let again = cli(&w, scratch.path(), &["apply", &sid, "--dir", fresh.to_str().unwrap()]);
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(
        again.stderr.contains("nothing was changed") && again.stderr.contains("README.md"),
        "{}",
        again.stderr
    );
    assert_eq!(tree(&fresh, false), before);

    // push makes a new branch with the trailer, whose diff from main is the session's diff.
    let pushed = cli(&w, scratch.path(), &["push", "--json", &sid]);
    assert_eq!(pushed.code, 0, "{}", pushed.stderr);
    let pushed: Value = serde_json::from_str(&pushed.stdout).unwrap();
    let branch = pushed["branch"].as_str().unwrap().to_owned();
    assert!(branch.starts_with("outboard/"), "{branch}");
    assert_eq!(pushed["created"], json!(true));
    let bare = &w.repo.path;
    let commit = git_out(bare, &["rev-parse", &format!("refs/heads/{branch}")]);
    assert_eq!(commit, pushed["commit"].as_str().unwrap());
    let message = git_out(bare, &["log", "-1", "--format=%an <%ae>%n%B", &commit]);
    assert!(message.starts_with("alice <alice@acme"), "{message}");
    assert!(message.contains("change the shop"), "{message}");
    assert!(message.contains(&format!("Outboard-Session: {sid}")), "{message}");
    assert_eq!(git_out(bare, &["rev-parse", &format!("{commit}^")]), w.repo.main);
    let pushed_diff = git_command(bare)
        .arg("-C")
        .arg(bare)
        .args(["diff", "--no-color", "-M", "--binary", "--full-index", "main", &commit])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&pushed_diff.stdout), diff.stdout);

    // Nothing new: refused. A branch it did not create: refused, and left as it was.
    let nothing = cli(&w, scratch.path(), &["push", &sid]);
    assert_eq!(nothing.code, 1, "{}", nothing.stderr);
    assert!(nothing.stderr.contains("nothing new"), "{}", nothing.stderr);
    let main_before = git_out(bare, &["rev-parse", "main"]);
    let onto_main = cli(&w, scratch.path(), &["push", "--branch", "main", &sid]);
    assert_eq!(onto_main.code, 1, "{}", onto_main.stderr);
    assert!(onto_main.stderr.contains("already exists"), "{}", onto_main.stderr);
    assert_eq!(git_out(bare, &["rev-parse", "main"]), main_before);
    let dev_before = git_out(bare, &["rev-parse", "dev"]);
    let onto_dev = cli(&w, scratch.path(), &["push", "--branch", "dev", &sid]);
    assert_eq!(onto_dev.code, 1);
    assert_eq!(git_out(bare, &["rev-parse", "dev"]), dev_before);

    // More work on the same session fast-forwards its own branch.
    std::fs::write(ws.join("NOTES.md"), "later\n").unwrap();
    let second = cli(&w, scratch.path(), &["push", "--json", &sid]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    let second: Value = serde_json::from_str(&second.stdout).unwrap();
    assert_eq!(second["created"], json!(false));
    assert_eq!(
        git_out(bare, &["rev-parse", &format!("{}^", second["commit"].as_str().unwrap())]),
        commit
    );

    // Another session may not push onto it.
    let other = create(&mut client, &url, None).await.unwrap();
    let other_id = other["id"].as_str().unwrap();
    std::fs::write(w.server.workspace(other_id).join("X.md"), "x\n").unwrap();
    let hijack = cli(&w, scratch.path(), &["push", "--branch", &branch, other_id]);
    assert_eq!(hijack.code, 1, "{}", hijack.stderr);
    assert!(hijack.stderr.contains("another session"), "{}", hijack.stderr);
}

// Multi-threaded: the mock model keeps answering while a test thread waits for the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_rm_deletes_a_session_with_its_workspace_and_git_state() {
    let w = world(vec![]).await;
    let mut client = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let session = create(&mut client, &w.git.url("shop.git"), None).await.unwrap();
    let sid = session["id"].as_str().unwrap().to_owned();
    let data: PathBuf = w.server.data_dir().to_path_buf();
    assert!(w.server.workspace(&sid).join("README.md").exists());
    assert!(data.join("git").join(format!("{sid}.git")).is_dir());
    let scratch = tempfile::tempdir().unwrap();

    let bob = w.server.add_user("bob", "acme").unwrap();
    let full = ["sessions", "rm", sid.as_str(), "--server", w.server.url.as_str()];
    let not_owner = outboard_in(None, &[("OUTBOARD_TOKEN", bob.as_str())], &full, None).unwrap();
    assert_eq!(not_owner.code, 2, "{}", not_owner.stderr);
    assert!(not_owner.stderr.contains("owner"), "{}", not_owner.stderr);

    let removed = cli(&w, scratch.path(), &["sessions", "rm", &sid]);
    assert_eq!(removed.code, 0, "{}", removed.stderr);
    assert!(!w.server.workspace(&sid).exists());
    assert!(!data.join("git").join(format!("{sid}.git")).exists());
    let listed = client.request("session/list", json!({})).await.unwrap().unwrap();
    assert_eq!(listed["sessions"], json!([]));
    let again = cli(&w, scratch.path(), &["sessions", "rm", &sid]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("no session"), "{}", again.stderr);
}

/// `git` in `dir` with a fixed identity and no user config.
fn local_git(dir: &Path, args: &[&str]) -> String {
    let out = git_command(dir)
        .args(["-c", "user.name=Ada", "-c", "user.email=ada@example.com"])
        .args(["-c", "init.defaultBranch=main"])
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploaded_work_tree_is_a_session_whose_diff_is_the_agents_work_only() {
    let w = world(vec![
        MockStep::tool_call(
            "Bash",
            json!({"command": "git status --porcelain; printf 'agent\\n' >> notes.txt"}),
        ),
        MockStep::text("Done."),
    ])
    .await;
    let mine = tempfile::tempdir().unwrap();
    let root = mine.path();
    local_git(root, &["init", "-q"]);
    std::fs::write(root.join("app.py"), "print('v1')\n").unwrap();
    std::fs::write(root.join("notes.txt"), "mine\n").unwrap();
    local_git(root, &["add", "-A"]);
    local_git(root, &["commit", "-q", "-m", "first"]);
    local_git(root, &["checkout", "-q", "-b", "feature"]);
    // Uncommitted and untracked work of mine, uploaded as it is.
    std::fs::write(root.join("app.py"), "print('v2')\n").unwrap();
    std::fs::write(root.join("draft.md"), "draft\n").unwrap();

    let scratch = tempfile::tempdir().unwrap();
    let dir = root.to_str().unwrap();
    let run = cli(&w, scratch.path(), &["run", "--json", "--upload", dir, "add a note"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let lines = run.json_lines().unwrap();
    let started = lines.iter().find(|l| l["type"] == "run_started").unwrap();
    let sid = started["session_id"].as_str().unwrap().to_owned();
    // The agent saw my uncommitted changes as uncommitted changes.
    let status = lines.iter().find(|l| l["type"] == "tool_result").unwrap().to_string();
    assert!(status.contains("M app.py") && status.contains("?? draft.md"), "{status}");

    let listed = cli(&w, scratch.path(), &["sessions", "--json"]);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    let source =
        &listed.as_array().unwrap().iter().find(|s| s["id"] == sid.as_str()).unwrap()["source"];
    assert_eq!(source["type"], "upload");
    assert_eq!(source["branch"], "feature");

    // The diff is against what I uploaded: the agent's line only.
    let diff = cli(&w, scratch.path(), &["diff", &sid]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    assert!(diff.stdout.contains("+agent"), "{}", diff.stdout);
    assert!(
        !diff.stdout.contains("app.py") && !diff.stdout.contains("draft.md"),
        "{}",
        diff.stdout
    );
    // Applied to my own tree, it brings exactly that change.
    let applied = cli(&w, scratch.path(), &["apply", &sid, "--dir", dir]);
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    assert_eq!(std::fs::read_to_string(root.join("notes.txt")).unwrap(), "mine\nagent\n");
    // An upload session has no remote to push to.
    let push = cli(&w, scratch.path(), &["push", &sid]);
    assert_eq!(push.code, 2, "{}", push.stderr);
    assert!(push.stderr.contains("outboard diff"), "{}", push.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_fills_up_mid_clone_leaves_no_session_and_no_files() {
    assert!(rustix::process::geteuid().is_root(), "this test mounts a small tmpfs: run it as root");
    let root = tempfile::tempdir().unwrap();
    // 3 MiB of noise that does not compress: more than the 2 MiB disk of the data dir.
    let noise = noise(3 << 20, 0x2545_f491_4f6c_dd1d);
    make_repo(root.path(), "big.git", &[("noise.bin", &noise)]).unwrap();
    let git = GitHttp::start(root.path(), "x-access-token", TOKEN).unwrap();
    let data = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(data.path())
        .status()
        .unwrap();
    assert!(mounted.success(), "cannot mount a tmpfs");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(data.path().to_path_buf());
    let mock = MockLlm::start(vec![]).await.unwrap();
    let flags = git.allow_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &flags).unwrap();
    let alice = server.add_user("alice", "acme").unwrap();
    assert!(secret_set(&server, "acme", &git.authority(), TOKEN).status.success());
    let mut client = WsClient::connect(&server.url, &alice).await.unwrap();
    let full = create(&mut client, &git.url("big.git"), None).await.unwrap_err();
    assert_eq!(full["code"], "quota_exceeded", "{full}");
    assert!(full["message"].as_str().unwrap().contains("disk is full"), "{full}");
    let listed = client.request("session/list", json!({})).await.unwrap().unwrap();
    assert_eq!(listed["sessions"], json!([]));
    let data = server.data_dir();
    assert_eq!(entries(&data.join("workspaces")), Vec::<String>::new());
    assert_eq!(entries(&data.join("git")), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_runs_at_most_four_clones_at_once_and_keeps_serving_meanwhile() {
    use outboard_shared::{methods, SessionCreateParams, SourceSpec};
    // A "git host" that accepts connections and never answers: every clone hangs on it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_host = silent.local_addr().unwrap().to_string();
    let url = format!("http://{silent_host}/git/slow.git");
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &["--git-allow-host", &silent_host]);
    let token = server.add_user("alice", "acme").unwrap();
    let client = outboard_cli::client::Client::connect(&server.url, &token).await.unwrap();
    let params = || SessionCreateParams {
        title: None,
        workspace: None,
        source: Some(SourceSpec::Repo { url: url.clone(), git_ref: None }),
        network: Default::default(),
        context_window: None,
        model: None,
    };
    use futures_util::FutureExt as _;
    let hanging: Vec<_> = (0..outboard_server::gateway::LONG_REQUESTS_PER_CONNECTION)
        .map(|_| {
            // Polled once here, so the request is queued on the connection before the ping.
            let mut call = Box::pin(client.call::<methods::SessionCreate>(params()));
            assert!((&mut call).now_or_never().is_none());
            tokio::spawn(call)
        })
        .collect();
    // The queue of the connection is in order: once a ping is answered, the four are running.
    client.ping().await.unwrap();
    let fifth = client.call::<methods::SessionCreate>(params()).await.unwrap_err();
    let text = fifth.to_string();
    assert!(text.contains("already running on this connection"), "{text}");
    // The connection still answers while the four hang.
    assert_eq!(client.list_sessions(None).await.unwrap(), vec![]);
    for call in &hanging {
        assert!(!call.is_finished(), "a clone of a silent host returned");
    }
    drop(client);
    drop(silent);
}

/// An 8 GiB sparse file (twelve kilobytes on disk) is listed, not read: the diff names it before
/// the patch of the rest, and a push refuses naming it. Before, git hashed and diffed it on the
/// server's own CPU for minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_file_is_neither_diffed_nor_pushed() {
    let w = world(vec![
        MockStep::tool_call(
            "Bash",
            json!({"command": "truncate -s 8G big.img && printf 'more\\n' >> README.md"}),
        ),
        MockStep::text("done"),
    ])
    .await;
    let url = w.git.url("shop.git");
    let scratch = tempfile::tempdir().unwrap();
    let repo_arg = format!("{url}#main");
    let run = cli(&w, scratch.path(), &["run", "--json", "--repo", &repo_arg, "grow"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let lines = run.json_lines().unwrap();
    let started = lines.iter().find(|l| l["type"] == "run_started").unwrap();
    let sid = started["session_id"].as_str().unwrap().to_owned();

    let diff = cli(&w, scratch.path(), &["diff", &sid]);
    assert_eq!(diff.code, 0, "{}", diff.stderr);
    assert!(
        diff.stdout.starts_with("# Not compared: one file is over the 64 MiB limit"),
        "{}",
        diff.stdout
    );
    assert!(diff.stdout.contains("#   big.img (8 GiB)\n"), "{}", diff.stdout);
    assert!(diff.stdout.contains("+more"), "the rest is diffed: {}", diff.stdout);
    assert!(!diff.stdout.contains("diff --git a/big.img"), "{}", diff.stdout);

    let pushed = cli(&w, scratch.path(), &["push", &sid]);
    assert_ne!(pushed.code, 0, "{}", pushed.stdout);
    assert!(
        pushed.stderr.contains("over the 64 MiB limit of pushes: big.img (8 GiB)"),
        "{}",
        pushed.stderr
    );
}

/// Issue 36, item 6: `--repo http://127.0.0.1:PORT/…` made the server's git request any local
/// port, and its errors ("no git repository", "does not speak git", "cannot reach") told open
/// ports from closed. Without an admin's allowance every internal address is refused before git
/// runs, with one text whatever listens there; and the org's credential never goes over plain
/// http:// to a host no admin marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_repository_hosts_are_refused_alike_open_or_closed_unless_an_admin_named_them() {
    let root = tempfile::tempdir().unwrap();
    make_repo(root.path(), "shop.git", &[("README.md", b"# Shop\n")]).unwrap();
    let git = GitHttp::start(root.path(), "x-access-token", TOKEN).unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let mut alice = WsClient::connect(&server.url, &token).await.unwrap();
    // An open port that speaks git, a closed one, the server's own, one that does not speak git
    // (the mock model), and the same by name.
    let urls = [
        git.url("shop.git"),
        format!("http://{closed}/git/shop.git"),
        format!("http://{}/healthz", server.addr()),
        format!("{}/git/x.git", mock.anthropic_base_url().trim_end_matches('/')),
        format!("http://localhost:{}/git/shop.git", git.authority().rsplit(':').next().unwrap()),
        format!("http://localhost:{}/git/shop.git", closed.port()),
    ];
    let mut texts = Vec::new();
    for url in &urls {
        let refused = create(&mut alice, url, None).await.unwrap_err();
        assert_eq!(refused["code"], "forbidden", "{url}: {refused}");
        let port = url.split("://").nth(1).unwrap().split(['/']).next().unwrap();
        let port = port.rsplit(':').next().unwrap();
        texts.push(refused["message"].as_str().unwrap().replace(port, "PORT"));
    }
    let uniform = texts[0].clone();
    assert!(
        uniform.contains("127.0.0.1:PORT is not a git host this server may reach"),
        "{uniform}"
    );
    assert!(uniform.contains("--git-allow-host HOST:PORT"), "{uniform}");
    for (url, text) in urls.iter().zip(&texts) {
        let expected = if url.contains("localhost") {
            uniform.replace("127.0.0.1", "localhost")
        } else {
            uniform.clone()
        };
        assert_eq!(text, &expected, "{url}");
    }
    assert!(git.requests().is_empty(), "git reached the host: {:?}", git.requests());

    // Named by an admin, but the org's credential would go over plain http: refused unsent.
    let host = git.authority();
    let named = serve(&mock, Api::Anthropic, &["--git-allow-host", &host]);
    let token = named.add_user("alice", "acme").unwrap();
    assert!(secret_set(&named, "acme", &host, TOKEN).status.success());
    let mut alice = WsClient::connect(&named.url, &token).await.unwrap();
    let refused = create(&mut alice, &git.url("shop.git"), None).await.unwrap_err();
    assert_eq!(refused["code"], "forbidden", "{refused}");
    let text = refused["message"].as_str().unwrap();
    assert!(
        text.contains("never sent over plain http://") && text.contains("--git-allow-http"),
        "{text}"
    );
    assert!(git.requests().is_empty(), "git reached the host: {:?}", git.requests());
    // With both marks (the fixture's flags) the same URL clones.
    let flags = git.allow_flags();
    let allowed =
        serve(&mock, Api::Anthropic, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let token = allowed.add_user("alice", "acme").unwrap();
    assert!(secret_set(&allowed, "acme", &host, TOKEN).status.success());
    let mut alice = WsClient::connect(&allowed.url, &token).await.unwrap();
    let made = create(&mut alice, &git.url("shop.git"), None).await.unwrap();
    assert_eq!(made["source"]["ref"], "main", "{made}");
}

/// Checkpoints of a repository session (issue 38, item 2): a rewind restores the clone's files
/// and its diff against the base is empty again; the workspace's own `.git` is not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_of_a_repository_session_brings_back_the_clone_and_an_empty_diff() {
    let w = world(vec![
        MockStep::tool_call("Bash", json!({"command": CHANGE})),
        MockStep::text("Done."),
    ])
    .await;
    let url = w.git.url("shop.git");
    let scratch = tempfile::tempdir().unwrap();
    let repo_arg = format!("{url}#main");
    let run = cli(&w, scratch.path(), &["run", "--json", "--repo", &repo_arg, "change the shop"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let lines = run.json_lines().unwrap();
    let started = lines.iter().find(|l| l["type"] == "run_started").unwrap();
    let sid = started["session_id"].as_str().unwrap().to_owned();
    let workspace = w.server.workspace(&sid);
    let changed = tree(&workspace, false);
    let dot_git = tree(&workspace.join(".git"), true);

    let rewound = cli(&w, scratch.path(), &["rewind", &sid, "1", "--code"]);
    assert_eq!(rewound.code, 0, "{}", rewound.stderr);
    let restored = tree(&workspace, false);
    assert_ne!(restored, changed);
    let clone = scratch.path().join("clone");
    let cloned = git_command(scratch.path())
        .args([
            "-c",
            &format!(
                "http.extraHeader=Authorization: {}",
                outboard_tests::git_http::basic_auth("x-access-token", TOKEN)
            ),
        ])
        .args(["clone", "-q", "-b", "main", &url])
        .arg(&clone)
        .output()
        .unwrap();
    assert!(cloned.status.success(), "{}", String::from_utf8_lossy(&cloned.stderr));
    assert_eq!(restored, tree(&clone, false), "the clone's files, byte for byte and mode");
    assert_eq!(tree(&workspace.join(".git"), true), dot_git, "the workspace's .git is the agent's");
    let diff = cli(&w, scratch.path(), &["diff", &sid]);
    assert_eq!((diff.code, diff.stdout.trim()), (0, ""), "{}", diff.stderr);
}
