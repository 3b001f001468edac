//! The host treats the workspace as bytes (issue 49, hostile round three): the mock model,
//! scripted to attack, plants what would make the server's host-side work run its code or read
//! host files — a nested repository whose `core.fsmonitor` git would run as root at the second
//! checkpoint, links to a root-only host file swapped in a loop while the server snapshots and
//! forks, a sparse file in `.git` — through a real server, real bubblewrap sandboxes, the
//! `outboard` binary and the mock model over HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use outboard_tests::fixture::{bash, cli_ok, World};
use outboard_tests::harness::TestServer;
use outboard_tests::mock_llm::MockStep;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);

/// Every regular file under `root` whose bytes contain `needle` (links never followed).
fn holding(root: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            if meta.is_dir() {
                dirs.push(path);
            } else if meta.is_file() && meta.len() < 64 << 20 {
                // (The 2 GiB sparse file is checked for its blocks, not read.)
                let bytes = std::fs::read(&path).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(path);
                }
            }
        }
    }
    found
}

/// Every object of the session's shadow repository, as `git cat-file --batch` prints them.
fn shadow_objects(server: &TestServer, sid: &str) -> Vec<u8> {
    let repo = server.data_dir().join("git").join(format!("{sid}.git"));
    let out = std::process::Command::new("git")
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .env("GIT_DIR", &repo)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_repositorys_fsmonitor_never_runs_on_the_host() {
    let host = tempfile::tempdir().unwrap();
    let marker = host.path().join("HOST_MARKER");
    let plant = format!(
        "mkdir -p vendor/lib && cd vendor/lib && git init -q && echo x > f && git add -A && \
         git -c user.name=m -c user.email=m@m commit -qm c && \
         git config core.fsmonitor 'id > {0}; false' && \
         git config filter.evil.clean 'id > {0}; false' && \
         echo '* filter=evil' > .gitattributes && echo y > f",
        marker.display()
    );
    let World { mock: _mock, server, mut c, sid, token } = World::anthropic(
        vec![
            bash("b1", &plant),
            MockStep::text("planted"),
            MockStep::text("second"),
            MockStep::text("third"),
        ],
        &[],
    )
    .await;
    c.completed_turn(&sid, "plant it", WAIT).await.unwrap();
    // The next two prompts: two checkpoints, where the old `git add -A` ran the fsmonitor.
    c.completed_turn(&sid, "second prompt", WAIT).await.unwrap();
    c.completed_turn(&sid, "third prompt", WAIT).await.unwrap();
    let diff = tokio::task::block_in_place(|| cli_ok(&server, &token, &["diff", &sid], None));
    assert!(diff.stdout.contains("+y"), "the nested repository's files are files: {}", diff.stdout);
    let stat =
        tokio::task::block_in_place(|| cli_ok(&server, &token, &["diff", &sid, "--stat"], None));
    assert!(stat.stdout.contains("vendor/lib/f"), "{}", stat.stdout);
    let fork = tokio::task::block_in_place(|| cli_ok(&server, &token, &["fork", &sid], None));
    let forked = server.workspace(fork.stdout.trim());
    assert_eq!(std::fs::read_to_string(forked.join("vendor/lib/f")).unwrap(), "y\n");
    c.request("session/detach", json!({"session_id": sid})).await.unwrap().unwrap();
    let rewind =
        tokio::task::block_in_place(|| cli_ok(&server, &token, &["rewind", &sid, "1"], None));
    assert!(rewind.stdout.contains("plant it"), "{}", rewind.stdout);
    assert!(!server.workspace(&sid).join("vendor/lib/f").exists(), "rewound to before the plant");
    assert!(
        !marker.exists(),
        "code from the sandbox ran on the host: {:?}",
        std::fs::read(&marker)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_swapped_in_a_loop_never_bring_a_host_byte_into_a_diff_a_snapshot_or_a_fork() {
    let host = tempfile::tempdir().unwrap();
    let secret_bytes = "ROOT-ONLY-HOST-BYTES-7f3a";
    let secret = host.path().join("secret");
    std::fs::write(&secret, secret_bytes).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let host_dir = host.path().join("dir");
    std::fs::create_dir(&host_dir).unwrap();
    std::fs::write(host_dir.join("f"), secret_bytes).unwrap();
    let (s, d) = (secret.display(), host_dir.display());
    // Links name host paths: inside the sandbox they lead nowhere, on the host to the secret.
    let swap_loop = format!(
        "mkdir -p .git/objects && truncate -s 2G .git/sparse && echo plain > keep && \
         while true; do \
           echo plain > t.f; mv -f t.f swap; ln -sfn {s} t.l; mv -fT t.l swap; \
           rm -rf t.d; mkdir t.d; echo plain > t.d/f; rm -rf d; mv -T t.d d; \
           rm -rf d; ln -sfn {d} d; \
           echo plain > .git/t.f; mv -f .git/t.f .git/config; ln -sfn {s} .git/t.l; \
           mv -fT .git/t.l .git/config; \
           rm -rf .git/t.d; mkdir .git/t.d; rm -rf .git/refs; mv -T .git/t.d .git/refs; \
           rm -rf .git/refs; ln -sfn {d} .git/refs; \
         done"
    );
    let World { mock: _mock, server, mut c, sid, token } = World::anthropic(
        vec![
            MockStep::tool_call("Bash", json!({"command": swap_loop, "run_in_background": true})),
            bash("b2", "sleep 1; ls"),
            MockStep::text("swapping"),
        ],
        &[],
    )
    .await;
    c.completed_turn(&sid, "start the loop", WAIT).await.unwrap();
    let needle = secret_bytes.as_bytes();
    for i in 0..100 {
        let args: &[&str] = if i % 2 == 0 { &["diff", &sid] } else { &["diff", &sid, "--stat"] };
        let diff = tokio::task::block_in_place(|| cli_ok(&server, &token, args, None));
        assert!(!diff.stdout.contains(secret_bytes), "a diff printed a host file");
    }
    let mut forks = Vec::new();
    for _ in 0..50 {
        let fork = tokio::task::block_in_place(|| cli_ok(&server, &token, &["fork", &sid], None));
        forks.push(fork.stdout.trim().to_owned());
    }
    assert!(
        !shadow_objects(&server, &sid).windows(needle.len()).any(|w| w == needle),
        "a host file reached the shadow repository"
    );
    for fork in &forks {
        let ws = server.workspace(fork);
        assert_eq!(holding(&ws, needle), Vec::<PathBuf>::new(), "a host file reached a fork");
        let sparse = std::fs::metadata(ws.join(".git/sparse")).unwrap();
        assert_eq!(sparse.len(), 2 << 30);
        assert!(
            sparse.blocks() * 512 < 1 << 20,
            "the sparse file was copied as {} bytes",
            sparse.blocks() * 512
        );
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), secret_bytes, "the host file is intact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_that_would_pass_the_workspace_quota_is_refused_before_its_copy() {
    let World { mock: _mock, server, mut c, sid, token } = World::anthropic(
        vec![
            bash("b1", "mkdir -p .git && head -c 3000000 /dev/urandom > .git/pack && echo a > a"),
            MockStep::text("made"),
        ],
        &[],
    )
    .await;
    c.completed_turn(&sid, "make a big .git", WAIT).await.unwrap();
    let quota = ["quota", "set", "--org", "acme", "workspace_bytes", "2MiB"];
    outboard_tests::fixture::admin_ok(&server, &quota, None);
    let refused = tokio::task::block_in_place(|| {
        outboard_tests::fixture::cli(&server, &token, &["fork", &sid], None)
    });
    assert_ne!(refused.code, 0);
    assert!(refused.stderr.contains("quota"), "{}", refused.stderr);
    let workspaces: Vec<_> = std::fs::read_dir(server.data_dir().join("workspaces"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(workspaces.len(), 1, "nothing of the refused fork is left: {workspaces:?}");
}
