//! Files too large to diff or push: found by their apparent size before git reads anything.
//!
//! The server's git runs outside every sandbox and cgroup, so what it reads is the server's own
//! time: an 8 GiB sparse file (`truncate -s 8G`, twelve kilobytes on disk) took `git add` and the
//! diff 103 s of the server's CPU. Before a snapshot, a stat-only walk of the workspace lists the
//! files whose apparent size is over [`MAX_FILE_BYTES`]; those git does not ignore are left out of
//! the snapshot (a pathspec exclusion, so git never opens them), and the diff and the push name
//! them as too large instead.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The largest file a diff or a push reads: larger ones are listed, not read. GitHub refuses
/// files over 100 MiB; a patch of a 64 MiB file is already past what anyone reviews.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Entries the walk visits at most (the quota walk's bound): past it the diff is refused rather
/// than handing git a tree nobody measured.
const MAX_ENTRIES: u64 = 2_000_000;

/// Why the workspace could not be walked.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// Its top directory cannot be read.
    #[error("cannot read the workspace: {0}")]
    Unreadable(#[from] std::io::Error),
    /// More than [`MAX_ENTRIES`] entries.
    #[error(
        "the workspace holds more than {MAX_ENTRIES} files and directories, too many to diff or \
         push; delete build outputs and caches first"
    )]
    TooMany,
}

/// A file left out of a snapshot: its workspace-relative path and apparent size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// Relative to the workspace, `/`-separated.
    pub path: String,
    /// Apparent size, bytes.
    pub bytes: u64,
}

/// Regular files under `ws` over `limit` bytes, by apparent size, sorted by path. Symlinks are
/// not followed, other filesystems not entered, `.git` directories not read. Blocking.
pub fn find(ws: &Path, limit: u64) -> Result<Vec<TooLarge>, WalkError> {
    use std::os::unix::fs::MetadataExt as _;
    let top = std::fs::symlink_metadata(ws)?;
    let mut found = Vec::new();
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut pending: Vec<PathBuf> = vec![PathBuf::new()];
    let mut entries = 0u64;
    while let Some(rel) = pending.pop() {
        let Ok(dir) = std::fs::read_dir(ws.join(&rel)) else { continue };
        for entry in dir.flatten() {
            entries += 1;
            if entries > MAX_ENTRIES {
                return Err(WalkError::TooMany);
            }
            let Ok(meta) = entry.metadata() else { continue };
            let name = entry.file_name();
            let child = rel.join(&name);
            if meta.dev() != top.dev() {
                continue;
            }
            if meta.is_dir() {
                if name != ".git" {
                    pending.push(child);
                }
            } else if meta.is_file() && meta.len() > limit && seen.insert((meta.dev(), meta.ino()))
            {
                found.push(TooLarge {
                    path: child.to_string_lossy().into_owned(),
                    bytes: meta.len(),
                });
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// The pathspec file for `git add -A --pathspec-from-file F --pathspec-file-nul`: the whole tree
/// but `skip` (literal paths).
pub fn pathspec(skip: &[TooLarge]) -> Vec<u8> {
    let mut spec = b".\0".to_vec();
    for file in skip {
        spec.extend_from_slice(b":(exclude,literal)");
        spec.extend_from_slice(file.path.as_bytes());
        spec.push(0);
    }
    spec
}

/// The lines put before a diff that left files out (text before the first `diff --git` line,
/// which `git apply` and `patch` skip).
pub fn notice(skip: &[TooLarge]) -> String {
    if skip.is_empty() {
        return String::new();
    }
    let mut text = format!(
        "# Not compared: {} over the {} MiB limit of diffs and pushes (left out, not read):\n",
        if skip.len() == 1 { "one file is" } else { "these files are" },
        MAX_FILE_BYTES >> 20
    );
    for file in skip {
        text.push_str(&format!(
            "#   {} ({})\n",
            file.path,
            outboard_org::quota::human_bytes(file.bytes)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_and_large_files_are_found_by_apparent_size_and_git_dirs_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let big = std::fs::File::create(dir.path().join("sparse")).unwrap();
        big.set_len(8 << 30).unwrap();
        std::fs::create_dir_all(dir.path().join("sub/.git")).unwrap();
        std::fs::File::create(dir.path().join("sub/.git/pack")).unwrap().set_len(1 << 30).unwrap();
        std::fs::File::create(dir.path().join("sub/edge")).unwrap().set_len(100).unwrap();
        std::fs::write(dir.path().join("small"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("sparse"), dir.path().join("link")).unwrap();
        let found = find(dir.path(), 100).unwrap();
        assert_eq!(found, vec![TooLarge { path: "sparse".into(), bytes: 8 << 30 }]);
        assert_eq!(pathspec(&found), b".\0:(exclude,literal)sparse\0");
        assert!(notice(&found).contains("#   sparse (8 GiB)"), "{}", notice(&found));
        assert_eq!(notice(&[]), "");
    }
}
