//! The user's repository, worked on in place: its `.git` is read-only in the sandbox.
//!
//! A session in place (embedded mode) binds the user's own directory at `/workspace`. Without
//! this, a command could write the repository's `.git/config` (a `core.fsmonitor`, an alias,
//! a filter) or `.git/hooks/*`, which the user's next own `git` runs on the host, as the user.
//! So the sandbox sees `.git` through a read-only bind over the writable workspace (Codex's
//! workspace-write sandbox keeps the same carve-out): `git status`, `git diff` and `git log`
//! work; `git commit`, `git checkout` and `git stash` fail with "Read-only file system", and the
//! agent tells the user to run them. A `.git` *file* (a worktree's `gitdir: PATH`) is bound
//! read-only itself, so it cannot be pointed elsewhere, and the git dir it names is bound
//! read-only too when it lies inside the workspace (outside it, the sandbox cannot see it).
//! A `.git` that is a symlink is not followed (nothing is bound). The binds are computed at
//! each start of the session's sandbox, when none of its processes runs (a sandbox's
//! processes die with its PID 1), so what a command swapped earlier is seen then.

use std::path::{Component, Path, PathBuf};

/// The read-only binds (host path, path in the sandbox) that protect the repository at the
/// top of `workspace` (a directory in place), in the order they are to be mounted.
pub fn read_only_mounts(workspace: &Path) -> Vec<(PathBuf, String)> {
    let dot_git = workspace.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&dot_git) else { return Vec::new() };
    let mut mounts = vec![(dot_git.clone(), "/workspace/.git".to_owned())];
    if meta.is_file() {
        if let Some((real, inside)) = gitdir_inside(workspace, &dot_git) {
            mounts.push((real, format!("/workspace/{}", inside.display())));
        }
    } else if !meta.is_dir() {
        return Vec::new();
    }
    mounts
}

/// The git dir a `.git` file names, when it lies inside `workspace`: its real path (no link
/// left to follow) and its path relative to the workspace.
fn gitdir_inside(workspace: &Path, dot_git: &Path) -> Option<(PathBuf, PathBuf)> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(dot_git).ok()?.take(4096).read_to_string(&mut text).ok()?;
    let target = text.trim().strip_prefix("gitdir:")?.trim();
    let real = std::fs::canonicalize(workspace.join(target)).ok()?;
    let top = std::fs::canonicalize(workspace).ok()?;
    let rel = real.strip_prefix(&top).ok()?.to_path_buf();
    let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
    (plain && !rel.as_os_str().is_empty() && real.is_dir()).then_some((real, rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_dir_a_git_file_and_its_git_dir_inside_are_bound_read_only() {
        let ws = tempfile::tempdir().unwrap();
        assert_eq!(read_only_mounts(ws.path()), Vec::new());
        std::fs::create_dir(ws.path().join(".git")).unwrap();
        assert_eq!(
            read_only_mounts(ws.path()),
            vec![(ws.path().join(".git"), "/workspace/.git".to_owned())]
        );
        let wt = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(wt.path().join("meta/wt")).unwrap();
        std::fs::write(wt.path().join(".git"), "gitdir: meta/wt\n").unwrap();
        let mounts = read_only_mounts(wt.path());
        assert_eq!(mounts.len(), 2, "{mounts:?}");
        assert_eq!(mounts[1].1, "/workspace/meta/wt");
        std::fs::write(wt.path().join(".git"), "gitdir: /elsewhere\n").unwrap();
        assert_eq!(read_only_mounts(wt.path()).len(), 1);
    }
}
