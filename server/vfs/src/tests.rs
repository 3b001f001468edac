use std::path::Path;

use crate::error::*;
use crate::route::*;
use crate::workspace::*;
use std::os::unix::fs::symlink;

fn setup() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path().join("ws")).unwrap();
    std::fs::create_dir_all(ws.root().join("src")).unwrap();
    std::fs::write(ws.root().join("src/main.rs"), "fn main() {}\n").unwrap();
    (dir, ws)
}

fn escapes(ws: &Workspace, path: &str) -> String {
    match ws.resolve(path) {
        Err(VfsError::Escapes(msg)) => msg,
        other => panic!("{path} should be refused, got {other:?}"),
    }
}

#[test]
fn model_forms_resolve_beneath_the_root() {
    let (_d, ws) = setup();
    let main = ws.canonical_root().join("src/main.rs");
    for path in [
        "/workspace/src/main.rs",
        "src/main.rs",
        "./src/./main.rs",
        "/workspace//src///main.rs",
        "src/../src/main.rs",
        "/workspace/src/../src/main.rs",
    ] {
        assert_eq!(ws.resolve(path).unwrap(), main, "{path}");
    }
    assert_eq!(ws.resolve("/workspace").unwrap(), ws.canonical_root());
    assert_eq!(ws.resolve("/workspace/").unwrap(), ws.canonical_root());
    assert_eq!(ws.resolve(".").unwrap(), ws.canonical_root());
    assert_eq!(ws.resolve("src/").unwrap(), ws.canonical_root().join("src"));
    assert_eq!(
        ws.resolve("new/dir/file.txt").unwrap(),
        ws.canonical_root().join("new/dir/file.txt")
    );
}

#[test]
fn escapes_are_refused_with_the_valid_root_named() {
    let (_d, ws) = setup();
    let msg = escapes(&ws, "/etc/passwd");
    assert!(msg.starts_with("/etc/passwd is outside /workspace: file tools work on"), "{msg}");
    assert!(msg.contains("/memory/...") && msg.contains("/skills/..."), "{msg}");
    escapes(&ws, "../x");
    escapes(&ws, "src/../../x");
    escapes(&ws, "/workspace/../../etc/passwd");
    escapes(&ws, "/workspace/..");
    escapes(&ws, "/workspacefoo/x");
    let host = ws.canonical_root().join("src/main.rs");
    escapes(&ws, &host.to_string_lossy());
    assert!(matches!(ws.resolve(""), Err(VfsError::Invalid(_))));
}

#[test]
fn symlinks_leading_outside_are_refused() {
    let (dir, ws) = setup();
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), "s").unwrap();
    symlink("/etc", ws.root().join("etc")).unwrap();
    symlink("/etc/passwd", ws.root().join("passwd")).unwrap();
    symlink(&outside, ws.root().join("src/out")).unwrap();
    symlink("/nonexistent/new-file", ws.root().join("dangling")).unwrap();

    let msg = escapes(&ws, "etc/passwd");
    assert!(msg.starts_with("/workspace/etc/passwd is a symbolic link"), "{msg}");
    assert!(!msg.contains(&*dir.path().to_string_lossy()), "no host path: {msg}");
    escapes(&ws, "/workspace/passwd");
    escapes(&ws, "etc");
    escapes(&ws, "src/out/secret");
    escapes(&ws, "src/out/not-yet/created.txt");
    escapes(&ws, "dangling");
}

#[test]
fn symlinks_inside_the_workspace_work() {
    let (_d, ws) = setup();
    symlink("src", ws.root().join("code")).unwrap();
    symlink("src/main.rs", ws.root().join("main-link.rs")).unwrap();
    symlink("../src/main.rs", ws.root().join("src/up-and-back.rs")).unwrap();
    let main = ws.canonical_root().join("src/main.rs");
    assert_eq!(ws.resolve("code/main.rs").unwrap(), main);
    assert_eq!(ws.resolve("main-link.rs").unwrap(), main);
    assert_eq!(ws.resolve("src/up-and-back.rs").unwrap(), main);
    assert_eq!(ws.resolve("code/new.rs").unwrap(), ws.canonical_root().join("src/new.rs"));
    // An absolute link is refused even when its host path lies inside: resolution never
    // starts over at the host's `/` (and inside the sandbox that path means nothing).
    symlink(ws.root().join("src/main.rs"), ws.root().join("abs-link.rs")).unwrap();
    escapes(&ws, "abs-link.rs");
}

#[test]
fn model_paths_hide_the_host() {
    let (_d, ws) = setup();
    let p = ws.resolve("src/main.rs").unwrap();
    assert_eq!(ws.model_path(&p), "/workspace/src/main.rs");
    assert_eq!(ws.model_path(ws.canonical_root()), "/workspace");
    assert_eq!(ws.model_path(Path::new("/etc/passwd")), "<outside /workspace>");
}

fn org(path: &str) -> String {
    match route(path) {
        Ok(Route::Org(p)) => p.as_str().to_owned(),
        other => panic!("{path:?} should route to the org store, got {other:?}"),
    }
}

fn refused(path: &str) -> String {
    match route(path) {
        Err(e) => e.to_string(),
        Ok(r) => panic!("{path:?} should be refused, got {r:?}"),
    }
}

#[test]
fn org_paths_are_normalised_and_routed() {
    assert_eq!(org("/memory/deploys.md"), "/memory/deploys.md");
    assert_eq!(org("//memory//a"), "/memory/a");
    assert_eq!(org("/memory/./a/"), "/memory/a");
    assert_eq!(org("/memory/a/b/../c"), "/memory/a/c");
    assert_eq!(org("/skills"), "/skills");
    assert_eq!(org("/skills/"), "/skills");
    assert_eq!(org("/./skills/x/SKILL.md"), "/skills/x/SKILL.md");
    assert_eq!(org("/../memory/a"), "/memory/a");
    let p = OrgPath::parse("/skills/deploy/scripts/run.sh").unwrap();
    assert_eq!(p.root(), "/skills");
    assert_eq!(p.relative(), "deploy/scripts/run.sh");
    assert_eq!(p.ancestors(), vec!["/skills/deploy", "/skills/deploy/scripts"]);
    assert!(OrgPath::parse("/memory").unwrap().is_root());
    assert!(OrgPath::parse("/memory").unwrap().ancestors().is_empty());
    assert_eq!(org("/agents//reviewer.md"), "/agents/reviewer.md");
    assert_eq!(org("/agents/"), "/agents");
    let p = OrgPath::parse("/agents/reviewer.md").unwrap();
    assert_eq!((p.root(), p.relative()), ("/agents", "reviewer.md"));
    assert!(OrgPath::parse("/agents").unwrap().is_root());
    assert!(!p.is_root());
}

#[test]
fn workspace_paths_route_to_the_workspace() {
    for path in ["/workspace/x", "x", "./memory/a", "memory/a", "/workspace", "../x"] {
        assert_eq!(route(path).unwrap(), Route::Workspace(path.to_owned()), "{path}");
    }
}

#[test]
fn escapes_and_bad_paths_are_refused_naming_the_roots() {
    let msg = refused("/memory/../workspace/x");
    assert!(msg.contains("climbs out of /memory"), "{msg}");
    assert!(msg.contains("/workspace/...") && msg.contains("/skills/..."), "{msg}");
    refused("/memory/./a/../../etc/passwd");
    refused("/skills/..");
    let msg = refused("/agents/../skills/x");
    assert!(msg.contains("climbs out of /agents") && msg.contains("/agents/..."), "{msg}");
    refused("/agentsx/a");
    let msg = refused("/memoryx/a");
    assert!(msg.contains("outside the file tools' roots"), "{msg}");
    refused("/etc/passwd");
    refused("/");
    refused("");
    refused("   ");
    assert!(refused("/memory/a\0b").contains("NUL"));
    assert!(refused("/memory/a\nb").contains("control character"));
    let long = format!("/memory/{}", "a/".repeat(600));
    assert!(refused(&long).contains("limit is 1024"));
    let long_name = format!("/memory/{}", "n".repeat(300));
    assert!(refused(&long_name).contains("limit is 255"));
    // Bidirectional controls would make a name display as something else.
    for c in ['\u{202E}', '\u{2066}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}', '\u{202A}'] {
        let msg = refused(&format!("/memory/evil{c}dm.md"));
        assert!(msg.contains("direction control"), "{msg}");
        assert!(route(&format!("notes/a{c}b.txt")).is_err());
    }
    // Non-ASCII names are fine; non-UTF-8 cannot reach here (tool input is JSON text).
    assert_eq!(org("/memory/café/日本.md"), "/memory/café/日本.md");
}

#[test]
fn a_mount_shows_its_own_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let mem = Workspace::mount(dir.path().join("memory"), MEMORY_PREFIX).unwrap();
    std::fs::write(mem.root().join("a.md"), "x").unwrap();
    let host = mem.resolve("/memory/a.md").unwrap();
    assert_eq!(mem.model_path(&host), "/memory/a.md");
    assert!(mem.resolve("/memory/../x").is_err());
}
