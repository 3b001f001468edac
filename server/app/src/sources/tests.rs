//! The shadow repositories against the real `git`, and a workspace written as a hostile sandbox
//! would write it.

use std::process::Command;

use super::*;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

async fn read_diff(child: tokio::process::Child) -> String {
    let out = child.wait_with_output().await.unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A nested repository whose `core.fsmonitor` (and a clean filter its attributes name) would
/// write `marker` if any git on the host looked at it as a repository.
fn plant_nested_repository(ws: &Path, marker: &Path) {
    let nested = ws.join("vendor/lib");
    std::fs::create_dir_all(&nested).unwrap();
    git(&nested, &["init", "-q"]);
    std::fs::write(nested.join("lib.c"), "int x;\n").unwrap();
    git(&nested, &["add", "-A"]);
    git(&nested, &["commit", "-q", "-m", "c"]);
    let hook = format!("id > {}; false", marker.display());
    git(&nested, &["config", "core.fsmonitor", &hook]);
    git(&nested, &["config", "filter.evil.clean", &hook]);
    std::fs::write(nested.join(".gitattributes"), "* filter=evil\n").unwrap();
    std::fs::write(nested.join("lib.c"), "int y;\n").unwrap();
}

#[tokio::test]
async fn a_nested_repositorys_config_never_runs_through_checkpoints_diff_rewind_or_fork() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let marker = data.path().join("HOST_MARKER");
    std::fs::write(ws.path().join("a.txt"), "one").unwrap();
    let session = SessionId("s_nested".into());
    let sources = Sources::new(data.path(), None);
    let first = sources.checkpoint(&session, ws.path()).await.unwrap();
    plant_nested_repository(ws.path(), &marker);
    // Two checkpoints (the next two prompts), then a diff, a rewind and a fork.
    sources.checkpoint(&session, ws.path()).await.unwrap();
    let second = sources.checkpoint(&session, ws.path()).await.unwrap();
    let (child, skipped) = sources.diff(&session, ws.path(), false).await.unwrap();
    let diff = read_diff(child).await;
    assert!(skipped.is_empty());
    assert!(diff.contains("+int y;"), "the nested repository's files are plain files: {diff}");
    assert!(!diff.contains("Subproject"), "{diff}");
    let fork = SessionId("s_nested_fork".into());
    sources.fork(&session, ws.path(), &fork, &second, u64::MAX).await.unwrap();
    sources.restore(&session, ws.path(), &first, 1).await.unwrap();
    sources.rewind_done(&session);
    assert!(!marker.exists(), "code from the workspace ran on the host");
    assert!(!ws.path().join("vendor/lib/lib.c").exists(), "the rewind removed what came since");
    // The nested `.git` was never part of a snapshot, so the rewind leaves it alone.
    assert!(ws.path().join("vendor/lib/.git").is_dir());
    let forked = data.path().join("workspaces/s_nested_fork/vendor/lib/lib.c");
    assert_eq!(std::fs::read_to_string(forked).unwrap(), "int y;\n");
}

#[tokio::test]
async fn an_in_place_diff_never_runs_the_users_repository_config() {
    let data = tempfile::tempdir().unwrap();
    let repo = tempfile::tempdir().unwrap();
    let marker = data.path().join("HOST_MARKER");
    let dir = repo.path();
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("kept.txt"), "old\n").unwrap();
    std::fs::write(dir.join("gone.txt"), "bye\n").unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "base"]);
    git(dir, &["pack-refs", "--all"]);
    // What a sandbox with a writable .git would plant for the user's next diff.
    let hook = format!("id > {}; false", marker.display());
    git(dir, &["config", "core.fsmonitor", &hook]);
    git(dir, &["config", "filter.evil.clean", &hook]);
    git(dir, &["config", "diff.evil.textconv", &hook]);
    std::fs::write(dir.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
    std::fs::write(dir.join("kept.txt"), "new\n").unwrap();
    std::fs::remove_file(dir.join("gone.txt")).unwrap();
    std::fs::write(dir.join("added.txt"), "hi\n").unwrap();
    plant_nested_repository(dir, &marker);
    let index_before = std::fs::read(dir.join(".git/index")).unwrap();
    let sources = Sources::new(data.path(), None);
    for _ in 0..2 {
        let (child, _) = sources.diff_in_place(&dir.join("vendor"), false).await.unwrap();
        let diff = read_diff(child).await;
        assert!(diff.contains("-old\n+new"), "{diff}");
        assert!(diff.contains("deleted file mode 100644"), "{diff}");
        assert!(diff.contains("+hi"), "{diff}");
        assert!(diff.contains("+int y;"), "{diff}");
    }
    assert!(!marker.exists(), "the user's repository config ran");
    assert_eq!(std::fs::read(dir.join(".git/index")).unwrap(), index_before);
    // Not a repository: a clear refusal.
    let plain = tempfile::tempdir().unwrap();
    let err = sources.diff_in_place(plain.path(), true).await.unwrap_err();
    assert!(err.to_string().contains("is not in a git work tree"), "{err}");
}

#[tokio::test]
async fn a_cache_a_killed_server_left_broken_is_rebuilt() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "one").unwrap();
    let session = SessionId("s_cache".into());
    let sources = Sources::new(data.path(), None);
    let first = sources.checkpoint(&session, ws.path()).await.unwrap();
    std::fs::write(sources.cache(&session), b"OBSNAP1\n\xff\xff").unwrap();
    std::fs::write(ws.path().join("a.txt"), "two").unwrap();
    let second = sources.checkpoint(&session, ws.path()).await.unwrap();
    assert_ne!(first, second);
    std::fs::write(ws.path().join("a.txt"), "one").unwrap();
    assert_eq!(sources.checkpoint(&session, ws.path()).await.unwrap(), first);
}

/// `n` bytes that do not compress (xorshift).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[tokio::test]
async fn checkpoint_storage_stays_within_its_quota_keeping_the_newest() {
    let data = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let session = SessionId("s_bound".into());
    let sources = Sources::new(data.path(), None);
    let limit = 3 << 20;
    let mut trees: Vec<String> = Vec::new();
    for i in 0..10u64 {
        std::fs::write(ws.path().join("big.bin"), noise(1 << 20, i + 1)).unwrap();
        let tree = sources.checkpoint(&session, ws.path()).await.unwrap();
        trees.insert(0, tree);
        sources.bound_checkpoints(&session, &trees, limit).await.unwrap();
    }
    let used = collect_disk_usage(&sources.shadow(&session));
    assert!(used <= limit, "the shadow takes {used} bytes, over {limit}");
    let dropped = sources.dropped(&session);
    assert!(dropped.contains(&trees[9]), "the oldest checkpoint is dropped");
    assert!(!dropped.contains(&trees[0]) && !dropped.contains(&trees[1]));
    // The newest ones still restore.
    sources.restore(&session, ws.path(), &trees[1], 1).await.unwrap();
    sources.rewind_done(&session);
    assert_eq!(std::fs::read(ws.path().join("big.bin")).unwrap(), noise(1 << 20, 9));
    // Within the limit, nothing more happens.
    assert_eq!(sources.bound_checkpoints(&session, &trees[..1], 1 << 40).await.unwrap(), None);
}

fn collect_disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            total += meta.blocks() * 512;
            if meta.is_dir() {
                dirs.push(entry.path());
            }
        }
    }
    total
}
