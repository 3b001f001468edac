//! The archive unpacked member by member beneath `dest`, by descriptors, with work linear in
//! the archive's size.
//!
//! Why: resolving every member's whole path again (a `symlink_metadata` per ancestor to find a
//! link, then the tar crate's own `unpack_in`, which canonicalizes the parent) costs the square
//! of the depth per member: 500 files at depth 1,000 took 419 million directory lookups, 26 s of
//! CPU for 1.5 MiB. Here the directory of the previous member stays open: the next member walks
//! up (`..`) to where the two paths part and opens only the names below, one `openat` each with
//! `O_NOFOLLOW`, so a link on the way is found by the open itself and never followed, and a
//! member costs the components it does not share with the one before (at most its own path's,
//! which the archive holds). Two descriptors are open whatever the depth. Walking up by `..` is
//! safe because nothing else can reach `dest` while it is unpacked (no sandbox exists yet).
//!
//! Depth is bounded ([`MAX_DEPTH`] directories, [`MAX_PATH_BYTES`] per path): every path lands
//! in a workspace whose tools take paths, and the kernel takes at most 4,096 bytes in one.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, Timestamps};

use super::UploadError;

/// Directories a member may be nested in (its depth counts its own name).
pub const MAX_DEPTH: usize = 1024;

/// The longest member path, in bytes: under the kernel's 4,096 with room for the workspace's
/// own prefix.
pub const MAX_PATH_BYTES: usize = 4000;

/// The directory the previous member was created in, kept open.
pub(super) struct Cursor {
    /// `dest` itself.
    root: OwnedFd,
    /// The names from `dest` to the open directory.
    names: Vec<OsString>,
    /// The open directory (`None`: `root`).
    here: Option<OwnedFd>,
    /// Directory lookups made (each `openat`, `mkdirat`, create or `..`).
    pub lookups: u64,
}

/// Why a member could not be placed: said to the uploader as an unsafe or a corrupt member.
pub(super) enum Refused {
    Unsafe(String),
    Io(std::io::Error),
}

impl From<rustix::io::Errno> for Refused {
    fn from(e: rustix::io::Errno) -> Refused {
        Refused::Io(e.into())
    }
}

const DIR: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

impl Cursor {
    pub(super) fn new(dest: &Path) -> Result<Cursor, UploadError> {
        let root = rustix::fs::open(dest, DIR, Mode::empty())
            .map_err(|e| UploadError::io("cannot open the workspace")(e.into()))?;
        Ok(Cursor { root, names: Vec::new(), here: None, lookups: 0 })
    }

    fn fd(&self) -> &OwnedFd {
        self.here.as_ref().unwrap_or(&self.root)
    }

    /// Opens the directory `parents` (names beneath `dest`), creating what is missing: up to
    /// where it parts from the open one, then down, one name at a time.
    pub(super) fn enter(&mut self, parents: &[&OsStr]) -> Result<(), Refused> {
        let shared =
            self.names.iter().zip(parents).take_while(|(a, b)| a.as_os_str() == **b).count();
        while self.names.len() > shared {
            self.names.pop();
            self.lookups += 1;
            self.here = if self.names.is_empty() {
                None
            } else {
                Some(rustix::fs::openat(self.fd(), "..", DIR | OFlags::NOFOLLOW, Mode::empty())?)
            };
        }
        for name in &parents[shared..] {
            self.lookups += 1;
            let opened =
                match rustix::fs::openat(self.fd(), *name, DIR | OFlags::NOFOLLOW, Mode::empty()) {
                    Err(rustix::io::Errno::NOENT) => {
                        self.lookups += 1;
                        rustix::fs::mkdirat(self.fd(), *name, Mode::from_raw_mode(0o755))?;
                        rustix::fs::openat(self.fd(), *name, DIR | OFlags::NOFOLLOW, Mode::empty())?
                    }
                    Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                        return Err(Refused::Unsafe("goes through a symlink or a file".into()))
                    }
                    other => other?,
                };
            self.here = Some(opened);
            self.names.push(name.to_os_string());
        }
        Ok(())
    }

    /// Creates regular file `name` in the open directory, new, with `mode`'s permission bits,
    /// holding what `data` reads.
    pub(super) fn file(
        &mut self,
        name: &OsStr,
        mode: u32,
        mtime: Option<u64>,
        data: &mut dyn std::io::Read,
    ) -> Result<(), Refused> {
        self.lookups += 1;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(self.fd(), name, flags, Mode::from_raw_mode(0o600)) {
            Err(rustix::io::Errno::EXIST) => return Err(replaced()),
            other => other?,
        };
        let mut file = std::fs::File::from(fd);
        std::io::copy(data, &mut file).map_err(Refused::Io)?;
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode & 0o777))?;
        if let Some(t) = mtime {
            rustix::fs::futimens(&file, &times(t))?;
        }
        Ok(())
    }

    /// Makes directory `name` in the open directory (one that exists is taken as it is).
    pub(super) fn dir(&mut self, name: &OsStr, mode: u32) -> Result<(), Refused> {
        self.lookups += 1;
        // Owner-writable whatever the archive says, so that its later members can be made.
        let mode = Mode::from_raw_mode((mode & 0o777) | 0o700);
        match rustix::fs::mkdirat(self.fd(), name, mode) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::EXIST) => {
                let st = rustix::fs::statat(self.fd(), name, AtFlags::SYMLINK_NOFOLLOW)?;
                if rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir() {
                    Ok(())
                } else {
                    Err(replaced())
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Makes symlink `name` to `target` in the open directory (the link is never followed).
    pub(super) fn symlink(
        &mut self,
        name: &OsStr,
        target: &[u8],
        mtime: Option<u64>,
    ) -> Result<(), Refused> {
        self.lookups += 1;
        if target.is_empty() || target.contains(&0) {
            return Err(Refused::Unsafe("is a symlink to nothing".into()));
        }
        match rustix::fs::symlinkat(OsStr::from_bytes(target), self.fd(), name) {
            Err(rustix::io::Errno::EXIST) => return Err(replaced()),
            other => other?,
        }
        if let Some(t) = mtime {
            // Best effort: a link's time is not part of what it says.
            let _ = rustix::fs::utimensat(self.fd(), name, &times(t), AtFlags::SYMLINK_NOFOLLOW);
        }
        Ok(())
    }
}

fn replaced() -> Refused {
    Refused::Unsafe("would replace a file unpacked before it".into())
}

fn times(mtime: u64) -> Timestamps {
    // As the tar crate did: a zero time becomes 1, which tools take better.
    let t = rustix::fs::Timespec { tv_sec: mtime.max(1) as i64, tv_nsec: 0 };
    Timestamps { last_access: t, last_modification: t }
}

/// The depth and length bounds on a member's checked relative path.
pub(super) fn too_deep(rel: &Path) -> Option<String> {
    let depth = rel.components().count();
    if depth > MAX_DEPTH {
        return Some(format!(
            "is {depth} directories deep, deeper than {MAX_DEPTH}: a workspace takes no deeper \
             paths"
        ));
    }
    let len = rel.as_os_str().len();
    if len > MAX_PATH_BYTES {
        return Some(format!(
            "has a path of {len} bytes, longer than {MAX_PATH_BYTES}: a workspace takes no \
             longer paths"
        ));
    }
    None
}

/// The member's parent names and its own name.
pub(super) fn split(rel: &Path) -> (Vec<&OsStr>, &OsStr) {
    let mut names: Vec<&OsStr> = rel.iter().collect();
    let last = names.pop().unwrap_or_default();
    (names, last)
}
