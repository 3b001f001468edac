use super::*;
use pretty_assertions::assert_eq;

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn paths(selection: &Selection) -> Vec<&str> {
    selection.paths.iter().map(|p| p.to_str().unwrap()).collect()
}

#[test]
fn a_work_tree_is_what_git_lists_on_disk_plus_nested_repositories_as_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q"]);
    write(&root.join(".gitignore"), "*.log\n");
    write(&root.join("kept.txt"), "a\n");
    write(&root.join("gone.txt"), "b\n");
    write(&root.join("sub/changed.rs"), "c\n");
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "one"]);
    std::fs::remove_file(root.join("gone.txt")).unwrap();
    write(&root.join("sub/changed.rs"), "changed\n");
    write(&root.join("new.txt"), "untracked\n");
    write(&root.join("noise.log"), "ignored\n");
    // A nested repository: its files as plain files (its own ignore file honoured), no .git.
    let nested = root.join("vendor/lib");
    std::fs::create_dir_all(&nested).unwrap();
    git(&nested, &["init", "-q"]);
    write(&nested.join("lib.c"), "int x;\n");
    write(&nested.join(".gitignore"), "*.o\n");
    write(&nested.join("lib.o"), "object\n");

    let selection = select(&root.join("sub")).unwrap();
    assert!(selection.git);
    assert_eq!(selection.root, root.canonicalize().unwrap());
    assert_eq!(
        paths(&selection),
        [
            ".gitignore",
            "kept.txt",
            "new.txt",
            "sub/changed.rs",
            "vendor/lib/.gitignore",
            "vendor/lib/lib.c"
        ]
    );
}

#[test]
fn a_plain_directory_honours_gitignore_and_ignore_and_keeps_hidden_files() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(&root.join(".gitignore"), "target/\n");
    write(&root.join(".ignore"), "*.secret\n");
    write(&root.join(".hidden"), "kept\n");
    write(&root.join("a/b.txt"), "kept\n");
    write(&root.join("target/x"), "ignored\n");
    write(&root.join("key.secret"), "ignored\n");
    write(&root.join(".git/config"), "never\n");
    let selection = select(root).unwrap();
    assert!(!selection.git);
    assert_eq!(paths(&selection), [".gitignore", ".hidden", ".ignore", "a", "a/b.txt"]);
}

#[test]
fn the_reserved_path_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join(".outboard-upload/history.bundle"), "mine\n");
    let err = pack(dir.path()).unwrap_err();
    assert!(matches!(err, UploadError::Reserved(_)), "{err}");
}

#[test]
fn http_base_follows_the_websocket_scheme() {
    assert_eq!(http_base("ws://127.0.0.1:7700").unwrap(), "http://127.0.0.1:7700");
    assert_eq!(http_base("wss://ob.example.com/").unwrap(), "https://ob.example.com");
    assert!(matches!(http_base("http://h:1"), Err(UploadError::Url(_))));
}
