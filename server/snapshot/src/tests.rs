use std::collections::HashMap;
use std::os::unix::fs::{symlink, PermissionsExt as _};
use std::path::Path;
use std::process::Command;

use outboard_vfs::confined::Root;
use pretty_assertions::assert_eq;

use crate::*;

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
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: std::path::PathBuf,
    repo: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let repo = tmp.path().join("shadow.git");
    std::fs::create_dir(&ws).unwrap();
    git(tmp.path(), &["init", "-q", "--bare", repo.to_str().unwrap()]);
    Fixture { ws: ws.canonicalize().unwrap(), repo, _tmp: tmp }
}

fn take(f: &Fixture, cache: &mut Cache) -> Snapshot {
    let root = Root::open(&f.ws).unwrap();
    snapshot(&root, &Objects::new(&f.repo), cache).unwrap()
}

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// What `git ls-tree -r` lists of `tree` in the shadow: path → (mode, type).
fn listed(f: &Fixture, tree: &Oid) -> Vec<String> {
    let text = git(&f.repo, &["ls-tree", "-r", "--full-tree", &tree.to_string()]);
    text.lines().map(str::to_owned).collect()
}

#[test]
fn a_snapshot_is_the_tree_git_would_write() {
    let f = fixture();
    write(&f.ws.join("a.txt"), "a\n");
    write(&f.ws.join("src/main.rs"), "fn main() {}\n");
    write(&f.ws.join("src/z-y.rs"), "x\n");
    write(&f.ws.join("src-x"), "file beside a directory sharing its prefix\n");
    write(&f.ws.join("run.sh"), "#!/bin/sh\n");
    std::fs::set_permissions(f.ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    symlink("src/main.rs", f.ws.join("link")).unwrap();
    write(&f.ws.join(".gitignore"), "target/\n*.log\n");
    write(&f.ws.join("target/debug/big"), "ignored\n");
    write(&f.ws.join("x.log"), "ignored\n");
    let snap = take(&f, &mut Cache::default());

    // git itself, over a copy of the same files, writes the same tree.
    let check = tempfile::tempdir().unwrap();
    git(check.path(), &["init", "-q"]);
    Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", f.ws.display()))
        .arg(check.path())
        .status()
        .unwrap();
    git(check.path(), &["add", "-A"]);
    assert_eq!(snap.tree.to_string(), git(check.path(), &["write-tree"]));
    // and git reads what we wrote
    assert_eq!(
        git(&f.repo, &["cat-file", "-p", &format!("{}:src/main.rs", snap.tree)]),
        "fn main() {}"
    );
}

#[test]
fn a_nested_repository_is_plain_files_and_its_config_never_runs() {
    let f = fixture();
    let nested = f.ws.join("vendor/lib");
    std::fs::create_dir_all(&nested).unwrap();
    git(&nested, &["init", "-q"]);
    write(&nested.join("lib.c"), "int x;\n");
    git(&nested, &["add", "-A"]);
    git(&nested, &["commit", "-q", "-m", "c"]);
    let marker = f._tmp.path().join("HOST_MARKER");
    git(&nested, &["config", "core.fsmonitor", &format!("id > {}; false", marker.display())]);
    write(&nested.join("lib.c"), "int y;\n");
    let mut cache = Cache::default();
    take(&f, &mut cache);
    let snap = take(&f, &mut cache);
    assert!(!marker.exists(), "the nested repository's fsmonitor ran");
    let names = listed(&f, &snap.tree);
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].ends_with("\tvendor/lib/lib.c"), "{names:?}");
    assert!(names[0].starts_with("100644 blob"), "{names:?}");
}

#[test]
fn links_are_stored_as_links_and_never_followed() {
    let f = fixture();
    let secret = f._tmp.path().join("host-secret");
    std::fs::write(&secret, "HOST BYTES").unwrap();
    symlink(&secret, f.ws.join("leak")).unwrap();
    std::fs::create_dir(f.ws.join("d")).unwrap();
    symlink(f._tmp.path(), f.ws.join("d/up")).unwrap();
    let snap = take(&f, &mut Cache::default());
    let listing = git(&f.repo, &["ls-tree", "-r", &snap.tree.to_string()]);
    assert!(listing.contains("120000 blob"), "{listing}");
    let everything = git(&f.repo, &["cat-file", "--batch-all-objects", "--batch"]);
    assert!(!everything.contains("HOST BYTES"), "a host file reached the repository");
}

#[test]
fn the_cache_reads_only_what_changed_and_keeps_tracked_ignored_files() {
    let f = fixture();
    write(&f.ws.join("keep.txt"), "one\n");
    write(&f.ws.join("tracked.log"), "tracked\n");
    let mut cache = Cache::default();
    let first = take(&f, &mut cache);
    write(&f.ws.join(".gitignore"), "*.log\n");
    write(&f.ws.join("new.log"), "new\n");
    let second = take(&f, &mut cache);
    let paths: Vec<&[u8]> = second.entries.iter().map(|e| e.path.as_slice()).collect();
    assert_eq!(paths, vec![&b".gitignore"[..], b"keep.txt", b"tracked.log"]);
    assert_ne!(first.tree, second.tree);
    // Saved and loaded, the cache says the same.
    let path = f._tmp.path().join("c.snap");
    cache.save(&path).unwrap();
    let loaded = Cache::load(&path).unwrap();
    assert_eq!(loaded.entries, cache.entries);
    // A change is seen even within the same second (racy entries are read again).
    write(&f.ws.join("keep.txt"), "two\n");
    let third = take(&f, &mut cache);
    assert_ne!(third.tree, second.tree);
}

#[test]
fn files_over_the_limit_are_listed_not_read() {
    let f = fixture();
    let big = std::fs::File::create(f.ws.join("huge.bin")).unwrap();
    big.set_len(MAX_FILE_BYTES + 1).unwrap();
    write(&f.ws.join("small"), "s\n");
    let snap = take(&f, &mut Cache::default());
    assert_eq!(
        snap.too_large,
        vec![TooLarge { path: "huge.bin".into(), bytes: MAX_FILE_BYTES + 1 }]
    );
    assert_eq!(snap.entries.len(), 1);
}

struct GitBlobs<'a>(&'a Path);

impl Blobs for GitBlobs<'_> {
    fn read(&mut self, oid: &Oid) -> std::io::Result<Vec<u8>> {
        let out = Command::new("git")
            .args(["cat-file", "blob", &oid.to_string()])
            .env("GIT_DIR", self.0)
            .output()?;
        Ok(out.stdout)
    }
}

#[test]
fn a_restore_brings_back_a_tree_and_removes_what_came_since() {
    let f = fixture();
    write(&f.ws.join("a/b/c.txt"), "c1\n");
    write(&f.ws.join("keep"), "k\n");
    symlink("keep", f.ws.join("l")).unwrap();
    let mut cache = Cache::default();
    let old = take(&f, &mut cache);
    write(&f.ws.join("a/b/c.txt"), "c2\n");
    write(&f.ws.join("new/deep/file"), "n\n");
    std::fs::remove_file(f.ws.join("l")).unwrap();
    std::fs::remove_file(f.ws.join("keep")).unwrap();
    let now = take(&f, &mut cache);
    let root = Root::open(&f.ws).unwrap();
    let done = restore(&root, &now.entries, &old.entries, &mut GitBlobs(&f.repo)).unwrap();
    assert_eq!(done, Restored { written: 3, removed: 1, bytes: 3 + 2 + 4 });
    assert_eq!(std::fs::read_to_string(f.ws.join("a/b/c.txt")).unwrap(), "c1\n");
    assert!(!f.ws.join("new").exists(), "the emptied directories go");
    assert_eq!(std::fs::read_link(f.ws.join("l")).unwrap(), Path::new("keep"));
    let again = take(&f, &mut cache);
    assert_eq!(again.tree, old.tree);
}

#[test]
fn a_restore_never_writes_through_a_link_in_the_way() {
    let f = fixture();
    write(&f.ws.join("dir/file"), "mine\n");
    let mut cache = Cache::default();
    let old = take(&f, &mut cache);
    // The sandbox replaces the directory with a link to a host directory.
    let outside = f._tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::remove_dir_all(f.ws.join("dir")).unwrap();
    symlink(&outside, f.ws.join("dir")).unwrap();
    let now = take(&f, &mut cache);
    let root = Root::open(&f.ws).unwrap();
    restore(&root, &now.entries, &old.entries, &mut GitBlobs(&f.repo)).unwrap();
    assert!(std::fs::read_dir(&outside).unwrap().next().is_none(), "written outside");
    assert!(std::fs::symlink_metadata(f.ws.join("dir")).unwrap().is_dir());
    assert_eq!(std::fs::read_to_string(f.ws.join("dir/file")).unwrap(), "mine\n");
}

#[test]
fn a_copy_keeps_links_as_links_sparse_files_sparse_and_the_limit() {
    let f = fixture();
    let src = f.ws.join(".git");
    write(&src.join("objects/x"), "data\n");
    symlink("/etc/shadow", src.join("evil")).unwrap();
    let sparse = std::fs::File::create(src.join("sparse")).unwrap();
    sparse.set_len(2 << 30).unwrap();
    let to_dir = f._tmp.path().join("to");
    std::fs::create_dir(&to_dir).unwrap();
    let from = Root::open(&f.ws).unwrap();
    let to = Root::open(&to_dir.canonicalize().unwrap()).unwrap();
    let used = copy_dir(&from, Path::new(".git"), &to, Path::new(".git"), 1 << 20).unwrap();
    assert_eq!(used, Some(5));
    assert_eq!(std::fs::read_link(to_dir.join(".git/evil")).unwrap(), Path::new("/etc/shadow"));
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(to_dir.join(".git/sparse")).unwrap();
    assert_eq!(meta.len(), 2 << 30);
    assert!(
        meta.blocks() * 512 < 1 << 20,
        "the sparse file became {} allocated",
        meta.blocks() * 512
    );
    // Over the limit: refused before anything is made.
    write(&src.join("objects/y"), &"y".repeat(8192));
    let to2 = f._tmp.path().join("to2");
    std::fs::create_dir(&to2).unwrap();
    let to2_root = Root::open(&to2.canonicalize().unwrap()).unwrap();
    let refused = copy_dir(&from, Path::new(".git"), &to2_root, Path::new(".git"), 4096);
    assert!(matches!(refused, Err(CopyError::OverLimit { .. })), "{refused:?}");
    assert!(!to2.join(".git").exists());
}

/// A background job swaps a file and a directory with links to host files in a loop while
/// snapshots run: no host byte reaches the repository.
#[test]
fn a_swap_loop_during_snapshots_reads_no_host_byte() {
    let f = fixture();
    let secret = f._tmp.path().join("secret");
    std::fs::write(&secret, "ROOT-ONLY-HOST-BYTES").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let hostdir = f._tmp.path().join("hostdir");
    write(&hostdir.join("f"), "ROOT-ONLY-HOST-BYTES");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ws, stop2) = (f.ws.clone(), stop.clone());
    let swapper = std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = std::fs::write(ws.join("tmp.f"), "plain");
            let _ = std::fs::rename(ws.join("tmp.f"), ws.join("swap"));
            let _ = symlink(&secret, ws.join("tmp.l"));
            let _ = std::fs::rename(ws.join("tmp.l"), ws.join("swap"));
            let _ = std::fs::create_dir_all(ws.join("tmp.d"));
            let _ = std::fs::write(ws.join("tmp.d/f"), "plain");
            let _ = std::fs::remove_file(ws.join("d"));
            let _ = std::fs::rename(ws.join("tmp.d"), ws.join("d"));
            let _ = std::fs::remove_dir_all(ws.join("d"));
            let _ = symlink(&hostdir, ws.join("d"));
            n += 1;
        }
        n
    });
    let mut cache = Cache::default();
    let mut trees = HashMap::new();
    for _ in 0..100 {
        let snap = take(&f, &mut cache);
        trees.insert(snap.tree, ());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(swapper.join().unwrap() > 0);
    let everything = git(&f.repo, &["cat-file", "--batch-all-objects", "--batch"]);
    assert!(!everything.contains("ROOT-ONLY-HOST-BYTES"), "a host file reached the repository");
    assert!(trees.len() > 1, "the loop changed nothing the snapshots saw");
}

#[test]
fn a_restore_overwrites_in_place_but_never_through_a_second_hard_link() {
    let f = fixture();
    write(&f.ws.join(".gitignore"), "outside-link\n");
    write(&f.ws.join("x"), "old\n");
    write(&f.ws.join("y"), "old y\n");
    let mut cache = Cache::default();
    let old = take(&f, &mut cache);
    write(&f.ws.join("x"), "new\n");
    write(&f.ws.join("y"), "new y\n");
    std::fs::hard_link(f.ws.join("x"), f.ws.join("outside-link")).unwrap();
    use std::os::unix::fs::MetadataExt as _;
    let y_inode = std::fs::metadata(f.ws.join("y")).unwrap().ino();
    let now = take(&f, &mut cache);
    let root = Root::open(&f.ws).unwrap();
    restore(&root, &now.entries, &old.entries, &mut GitBlobs(&f.repo)).unwrap();
    assert_eq!(std::fs::read_to_string(f.ws.join("x")).unwrap(), "old\n");
    assert_eq!(std::fs::read_to_string(f.ws.join("outside-link")).unwrap(), "new\n");
    assert_eq!(std::fs::read_to_string(f.ws.join("y")).unwrap(), "old y\n");
    assert_eq!(std::fs::metadata(f.ws.join("y")).unwrap().ino(), y_inode, "kept its inode");
}
