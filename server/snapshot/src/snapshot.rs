//! A snapshot: the workspace's files as a tree in the server's own repository, read through
//! the confined open.
//!
//! The walk ([`outboard_vfs::confined::Root::walk`]) lists each directory through its
//! descriptor and opens children relative to it with `O_NOFOLLOW`; a file is read with
//! [`outboard_vfs::confined::read_child`] (no symlink, no other mount, a regular file checked on
//! the descriptor, through a hard size limit); a symlink's target is read with `readlinkat` and
//! stored as data, never followed. Whatever a background command swaps meanwhile, no byte
//! from outside the workspace is read.
//!
//! What git's `add -A` would take, minus everything that makes git run code: `.gitignore` files
//! are honoured (parsed as data, each through a size limit), files the last snapshot held stay
//! tracked when ignored, any entry named `.git` is left out at every depth, and a repository
//! nested in the workspace is plain files (its `.git` left out), never entered as a
//! repository. A gitlink the base tree had (a submodule of a cloned repository) stays as it was
//! while its directory exists: opaque, never entered. FIFOs, sockets and devices are left out,
//! and so are other filesystems mounted inside.

use std::collections::BTreeMap;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use outboard_vfs::confined::{self, ConfinedError, Root, Visit, WalkEntry, Walker};
use rustix::fs::FileType;

use crate::cache::{Cache, Cached, StatKey};
use crate::objects::{hash, Kind, Objects, Oid};
use crate::tree::{write_trees, Entry, MODE_EXEC, MODE_FILE, MODE_GITLINK, MODE_LINK};

/// The largest file a snapshot reads: larger ones are listed as too large, not read. GitHub
/// refuses files over 100 MiB; a patch of a 64 MiB file is past what anyone reviews.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Entries a snapshot visits at most: past it the snapshot is refused rather than incomplete.
pub const MAX_ENTRIES: usize = 2_000_000;

/// The largest `.gitignore` read; a larger one is ignored as a whole.
const MAX_IGNORE_FILE_BYTES: u64 = 1 << 20;

/// A file left out of a snapshot as too large to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// Relative to the workspace, `/`-separated.
    pub path: String,
    /// Its size (`lstat`), bytes.
    pub bytes: u64,
}

/// A snapshot taken.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The top tree.
    pub tree: Oid,
    /// Every file in it, in path order.
    pub entries: Vec<Entry>,
    /// Files left out as larger than [`MAX_FILE_BYTES`] (not ignored, not tracked).
    pub too_large: Vec<TooLarge>,
    /// Bytes of objects it wrote (compressed, as on disk).
    pub written: u64,
}

/// Why a snapshot could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The workspace's top directory cannot be opened or listed.
    #[error("cannot read the workspace: {0}")]
    Unreadable(ConfinedError),
    /// More than [`MAX_ENTRIES`] entries.
    #[error(
        "the workspace holds more than {MAX_ENTRIES} files and directories, too many to \
         snapshot; delete build outputs and caches first"
    )]
    TooMany,
    /// The server's repository could not be written.
    #[error("cannot write the snapshot into the server's repository: {0}")]
    Write(#[from] std::io::Error),
}

/// Takes a snapshot of the tree under `root` into `objects`, reading only what changed since
/// `cache` (which it then describes). Blocking.
pub fn snapshot(
    root: &Root,
    objects: &Objects,
    cache: &mut Cache,
) -> Result<Snapshot, SnapshotError> {
    let start = root.open_dir(Path::new("")).map_err(SnapshotError::Unreadable)?;
    let top = rustix::fs::fstat(&start)
        .map_err(|e| SnapshotError::Unreadable(ConfinedError::Io(e.into())))?;
    let since = now_secs() - 2;
    let mut walker = Snap {
        objects,
        old: cache,
        new: BTreeMap::new(),
        too_large: Vec::new(),
        dev: top.st_dev,
        error: None,
    };
    let end = root
        .walk(start, &mut walker, MAX_ENTRIES, &AtomicBool::new(false))
        .map_err(SnapshotError::Unreadable)?;
    if end.capped {
        return Err(SnapshotError::TooMany);
    }
    if let Some(e) = walker.error {
        return Err(SnapshotError::Write(e));
    }
    let Snap { new, too_large, .. } = walker;
    let entries: Vec<Entry> =
        new.iter().map(|(p, c)| Entry { path: p.clone(), mode: c.mode, oid: c.oid }).collect();
    let tree = write_trees(objects, &entries)?;
    cache.entries = new
        .into_iter()
        .map(|(p, mut c)| {
            c.stat = c.stat.filter(|s| !s.racy(since));
            (p, c)
        })
        .collect();
    Ok(Snapshot { tree, entries, too_large, written: objects.written() })
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Whether a name is git's own directory in any spelling a checkout would refuse.
pub fn is_git_dir_name(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b".git") || name.eq_ignore_ascii_case(b"git~1")
}

struct Snap<'a> {
    objects: &'a Objects,
    old: &'a Cache,
    new: BTreeMap<Vec<u8>, Cached>,
    too_large: Vec<TooLarge>,
    dev: u64,
    error: Option<std::io::Error>,
}

/// A directory's `.gitignore`, parsed.
type Rules = Option<Gitignore>;

/// The path matchers see: rooted at a virtual `/`, nothing of the host's layout involved.
fn virtual_path(rel: &Path) -> PathBuf {
    Path::new("/").join(rel)
}

fn ignored(scopes: &[&Rules], rel: &Path, is_dir: bool) -> bool {
    let path = virtual_path(rel);
    for g in scopes.iter().rev().filter_map(|rules| rules.as_ref()) {
        let m = g.matched(&path, is_dir);
        if !m.is_none() {
            return m.is_ignore();
        }
    }
    false
}

impl Snap<'_> {
    /// Keeps the last snapshot's entry for `path` as it was.
    fn keep(&mut self, path: &[u8], c: &Cached) {
        self.new.insert(path.to_vec(), *c);
    }

    /// Stores `content` as a blob unless the entry `known` names it already.
    fn blob(&mut self, content: &[u8], known: Option<&Cached>) -> Option<Oid> {
        let oid = hash(Kind::Blob, content);
        if known.is_some_and(|c| c.oid == oid) || self.objects.has_loose(&oid) {
            return Some(oid);
        }
        match self.objects.write(Kind::Blob, content) {
            Ok(oid) => Some(oid),
            Err(e) => {
                self.error.get_or_insert(e);
                None
            }
        }
    }
}

impl Walker for Snap<'_> {
    type Scope = Rules;

    fn enter(&mut self, dir: BorrowedFd<'_>, rel: &Path) -> Rules {
        let bytes =
            confined::read_child(dir, Path::new(".gitignore"), MAX_IGNORE_FILE_BYTES).ok()?;
        let mut builder = GitignoreBuilder::new(virtual_path(rel));
        for line in String::from_utf8_lossy(&bytes).lines() {
            // A malformed line is skipped, as git does.
            let _ = builder.add_line(None, line);
        }
        builder.build().ok().filter(|g| !g.is_empty())
    }

    fn entry(&mut self, entry: &WalkEntry<'_>, scopes: &[&Rules]) -> Visit {
        if self.error.is_some() || is_git_dir_name(entry.name.as_bytes()) {
            return Visit::Skip;
        }
        if entry.stat.st_dev != self.dev {
            return Visit::Skip;
        }
        let path = entry.rel.as_os_str().as_bytes();
        let old = self.old;
        let known = old.entries.get(path);
        match entry.file_type() {
            FileType::Directory => {
                if let Some(c) = known.filter(|c| c.mode == MODE_GITLINK) {
                    self.keep(path, c);
                    return Visit::Skip;
                }
                if ignored(scopes, entry.rel, true) && !old.has_under(path) {
                    return Visit::Skip;
                }
                Visit::Descend
            }
            FileType::RegularFile => {
                if known.is_none() && ignored(scopes, entry.rel, false) {
                    return Visit::Skip;
                }
                let mode = if entry.stat.st_mode & 0o100 != 0 { MODE_EXEC } else { MODE_FILE };
                let key = StatKey::of(&entry.stat);
                if let Some(c) = known.filter(|c| c.mode == mode && c.stat == Some(key)) {
                    self.keep(path, c);
                    return Visit::Skip;
                }
                let size = entry.stat.st_size as u64;
                let content = match entry.read(MAX_FILE_BYTES) {
                    Ok(content) => content,
                    Err(ConfinedError::TooLarge { size: seen, .. }) => {
                        self.too_large(path, known, size.max(seen));
                        return Visit::Skip;
                    }
                    // Gone, swapped for something else, or unreadable: not in this snapshot.
                    Err(_) => return Visit::Skip,
                };
                if let Some(oid) = self.blob(&content, known) {
                    self.new.insert(path.to_vec(), Cached { mode, oid, stat: Some(key) });
                }
                Visit::Skip
            }
            FileType::Symlink => {
                if known.is_none() && ignored(scopes, entry.rel, false) {
                    return Visit::Skip;
                }
                let key = StatKey::of(&entry.stat);
                if let Some(c) = known.filter(|c| c.mode == MODE_LINK && c.stat == Some(key)) {
                    self.keep(path, c);
                    return Visit::Skip;
                }
                let Ok(target) = rustix::fs::readlinkat(entry.dir.as_fd(), entry.name, Vec::new())
                else {
                    return Visit::Skip;
                };
                if let Some(oid) = self.blob(target.as_bytes(), known) {
                    self.new
                        .insert(path.to_vec(), Cached { mode: MODE_LINK, oid, stat: Some(key) });
                }
                Visit::Skip
            }
            _ => Visit::Skip,
        }
    }
}

impl Snap<'_> {
    /// A file over the limit: a tracked one keeps its last content (as git's `add` with the
    /// file excluded keeps its index entry), a new one is listed.
    fn too_large(&mut self, path: &[u8], known: Option<&Cached>, bytes: u64) {
        match known {
            Some(c) => self.keep(path, c),
            None => self
                .too_large
                .push(TooLarge { path: String::from_utf8_lossy(path).into_owned(), bytes }),
        }
    }
}
