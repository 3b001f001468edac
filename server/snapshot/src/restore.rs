//! Restoring a tree into a workspace (a rewind, a fork's files): what git's `read-tree --reset
//! -u` did, made through the exact operations of [`outboard_vfs::exact`] — every directory
//! reached through no symlink, every change made by name in a directory held open — so a
//! workspace whose links a background command swaps cannot lead a write outside.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::fd::AsFd as _;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use outboard_vfs::confined::{ConfinedError, Root};
use outboard_vfs::exact;

use crate::objects::Oid;
use crate::tree::{Entry, MODE_EXEC, MODE_GITLINK, MODE_LINK};

/// Where the content of a tree's blobs comes from (the server's own repository).
pub trait Blobs {
    /// The content of the blob `oid`.
    fn read(&mut self, oid: &Oid) -> std::io::Result<Vec<u8>>;

    /// A hint: these blobs will be read next, in this order (a source may ask for them all at
    /// once).
    fn prefetch(&mut self, _oids: &[Oid]) {}
}

/// What a restore changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// Files (and links) written.
    pub written: usize,
    /// Files (and links) removed.
    pub removed: usize,
    /// Bytes written.
    pub bytes: u64,
}

/// Why a restore stopped.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A path of the tree could not be written.
    #[error("cannot restore {path}: {source}")]
    Write {
        /// The workspace-relative path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A blob could not be read from the server's repository.
    #[error("cannot read {oid} from the server's repository: {source}")]
    Blob {
        /// The object.
        oid: Oid,
        /// Why.
        source: std::io::Error,
    },
}

fn split(path: &[u8]) -> (&Path, &OsStr) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (Path::new(OsStr::from_bytes(&path[..i])), OsStr::from_bytes(&path[i + 1..])),
        None => (Path::new(""), OsStr::from_bytes(path)),
    }
}

fn shown(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

fn confined_io(e: ConfinedError) -> std::io::Error {
    match e {
        ConfinedError::Io(e) => e,
        other => std::io::Error::other(other.to_string()),
    }
}

/// Makes the workspace under `root`, whose files are `current` (a snapshot just taken), hold
/// `target`'s: files only `current` has are removed (and directories they leave empty), files
/// that differ or are missing written. Files neither lists (ignored, too large, untracked
/// since the snapshot) are left alone. Blocking.
pub fn restore(
    root: &Root,
    current: &[Entry],
    target: &[Entry],
    blobs: &mut dyn Blobs,
) -> Result<Restored, RestoreError> {
    let wanted: HashMap<&[u8], (u32, Oid)> =
        target.iter().map(|e| (e.path.as_slice(), (e.mode, e.oid))).collect();
    let have: HashMap<&[u8], (u32, Oid)> =
        current.iter().map(|e| (e.path.as_slice(), (e.mode, e.oid))).collect();
    let mut done = Restored::default();
    let mut emptied: BTreeSet<Vec<u8>> = BTreeSet::new();
    for e in current {
        if wanted.contains_key(e.path.as_slice()) {
            continue;
        }
        let (parent, name) = split(&e.path);
        // The file is not where the snapshot saw it (its directory went, or is now a link):
        // there is nothing of the tree's to remove.
        let Ok(dir) = root.open_dir_exact(parent) else { continue };
        if e.mode == MODE_GITLINK {
            exact::remove_empty_dir(dir.as_fd(), name);
        } else {
            let removed = exact::remove_entry(dir.as_fd(), name)
                .map_err(|source| RestoreError::Write { path: shown(&e.path), source })?;
            done.removed += usize::from(removed);
        }
        let mut at = e.path.as_slice();
        while let Some(i) = at.iter().rposition(|&b| b == b'/') {
            at = &at[..i];
            emptied.insert(at.to_vec());
        }
    }
    // Deepest first: a directory left empty goes, then its parent if that is empty too.
    let mut emptied: Vec<Vec<u8>> = emptied.into_iter().collect();
    emptied.sort_by_key(|p| std::cmp::Reverse(p.iter().filter(|&&b| b == b'/').count()));
    for dir_path in emptied {
        let (parent, name) = split(&dir_path);
        if let Ok(dir) = root.open_dir_exact(parent) {
            exact::remove_empty_dir(dir.as_fd(), name);
        }
    }
    let changed: Vec<&Entry> =
        target.iter().filter(|e| have.get(e.path.as_slice()) != Some(&(e.mode, e.oid))).collect();
    let reads: Vec<Oid> =
        changed.iter().filter(|e| e.mode != MODE_GITLINK).map(|e| e.oid).collect();
    blobs.prefetch(&reads);
    // The directory of the last file written, held: files of one directory come together.
    let mut held: Option<(Vec<u8>, std::os::fd::OwnedFd)> = None;
    for e in changed {
        let (parent, name) = split(&e.path);
        let fail = |source| RestoreError::Write { path: shown(&e.path), source };
        if e.mode == MODE_GITLINK {
            root.make_dirs_exact(Path::new(OsStr::from_bytes(&e.path)))
                .map_err(|err| fail(confined_io(err)))?;
            continue;
        }
        let content =
            blobs.read(&e.oid).map_err(|source| RestoreError::Blob { oid: e.oid, source })?;
        let parent_key = parent.as_os_str().as_bytes().to_vec();
        let dir = match held.take() {
            Some((key, fd)) if key == parent_key => fd,
            _ => root.make_dirs_exact(parent).map_err(|err| fail(confined_io(err)))?,
        };
        let written = if e.mode == MODE_LINK {
            exact::replace_symlink(dir.as_fd(), name, OsStr::from_bytes(&content))
        } else {
            exact::replace_file(dir.as_fd(), name, &content, e.mode == MODE_EXEC)
        };
        written.map_err(fail)?;
        held = Some((parent_key, dir));
        done.written += 1;
        done.bytes += content.len() as u64;
    }
    Ok(done)
}
