//! Copying a directory of one workspace into another (a fork's copy of the workspace's own
//! `.git`), as plain bytes: walked through descriptors, links copied as links and never
//! followed, FIFOs and devices left out, sparse files kept sparse, and the whole measured
//! against a limit before anything is made.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use outboard_vfs::confined::{ConfinedError, Root, Visit, WalkEntry, Walker};
use outboard_vfs::exact;
use rustix::fs::{FileType, SeekFrom};
use rustix::io::Errno;

/// Entries a copy visits at most.
pub const MAX_COPY_ENTRIES: usize = 1_000_000;

/// Why a copy failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// It would take more than the limit.
    #[error("the copy would take {need} bytes, more than the {limit} bytes left in the quota")]
    OverLimit {
        /// Bytes it needs (allocated blocks, or the size where that is larger... see `weight`).
        need: u64,
        /// The limit.
        limit: u64,
    },
    /// More entries than [`MAX_COPY_ENTRIES`].
    #[error("more than {MAX_COPY_ENTRIES} files to copy")]
    TooMany,
    /// The source or the destination failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The source or destination could not be opened.
    #[error("{0}")]
    Confined(#[from] ConfinedError),
}

/// What a file costs on disk once copied: its allocated blocks (a sparse file is copied
/// sparse), at least one block for a non-empty file.
fn weight(st: &rustix::fs::Stat) -> u64 {
    (st.st_blocks as u64).saturating_mul(512)
}

struct Measure {
    bytes: u64,
}

impl Walker for Measure {
    type Scope = ();
    fn enter(&mut self, _: BorrowedFd<'_>, _: &Path) {}
    fn entry(&mut self, entry: &WalkEntry<'_>, _: &[&()]) -> Visit {
        if entry.file_type() == FileType::RegularFile {
            self.bytes = self.bytes.saturating_add(weight(&entry.stat));
        }
        Visit::Descend
    }
}

struct Copy<'a> {
    to: &'a Root,
    to_rel: PathBuf,
    limit: u64,
    used: u64,
    error: Option<CopyError>,
}

impl Walker for Copy<'_> {
    type Scope = ();
    fn enter(&mut self, _: BorrowedFd<'_>, _: &Path) {}
    fn entry(&mut self, entry: &WalkEntry<'_>, _: &[&()]) -> Visit {
        if self.error.is_some() {
            return Visit::Skip;
        }
        let result = self.one(entry);
        match result {
            Ok(visit) => visit,
            Err(e) => {
                self.error = Some(e);
                Visit::Skip
            }
        }
    }
}

impl Copy<'_> {
    fn one(&mut self, entry: &WalkEntry<'_>) -> Result<Visit, CopyError> {
        let dest = self.to_rel.join(entry.rel);
        let parent = self.to.make_dirs_exact(dest.parent().unwrap_or(Path::new("")))?;
        let name = entry.name;
        match entry.file_type() {
            FileType::Directory => {
                self.to.make_dirs_exact(&dest)?;
                Ok(Visit::Descend)
            }
            FileType::Symlink => {
                let Ok(target) = rustix::fs::readlinkat(entry.dir, name, Vec::new()) else {
                    return Ok(Visit::Skip);
                };
                exact::replace_symlink(parent.as_fd(), name, OsStr::from_bytes(target.as_bytes()))?;
                Ok(Visit::Skip)
            }
            FileType::RegularFile => {
                let Ok((src, stat)) = exact::open_child(entry.dir, name) else {
                    return Ok(Visit::Skip); // gone or swapped meanwhile
                };
                let mode = stat.st_mode & 0o777;
                let dst = exact::create_new(parent.as_fd(), name, mode)?;
                self.used = self.used.saturating_add(copy_sparse(&src, &dst, stat.st_size as u64)?);
                if self.used > self.limit {
                    return Err(CopyError::OverLimit { need: self.used, limit: self.limit });
                }
                Ok(Visit::Skip)
            }
            _ => Ok(Visit::Skip),
        }
    }
}

/// Copies the first `size` bytes of `src` into `dst`, only the data segments (`SEEK_DATA` /
/// `SEEK_HOLE`): holes stay holes. Returns the bytes written.
fn copy_sparse(src: &File, dst: &File, size: u64) -> std::io::Result<u64> {
    let mut written = 0u64;
    let mut at = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    while at < size {
        let data = match rustix::fs::seek(src, SeekFrom::Data(at)) {
            Ok(d) => d,
            Err(Errno::NXIO) => break, // only a hole is left
            Err(e) => return Err(e.into()),
        };
        if data >= size {
            break;
        }
        let hole = rustix::fs::seek(src, SeekFrom::Hole(data))?.min(size);
        let mut off = data;
        while off < hole {
            let want = ((hole - off) as usize).min(buf.len());
            let n = rustix::io::pread(src, &mut buf[..want], off)?;
            if n == 0 {
                break;
            }
            let mut done = 0;
            while done < n {
                done += rustix::io::pwrite(dst, &buf[done..n], off + done as u64)?;
            }
            off += n as u64;
            written += n as u64;
        }
        at = hole.max(off);
    }
    dst.set_len(size)?;
    Ok(written)
}

/// Copies the directory `from_rel` under `from` to `to_rel` under `to` (which must not exist
/// yet), refused before anything is made when its files take more than `limit` bytes.
/// `Ok(None)` when `from_rel` is not a directory (missing, or a symlink: never followed).
/// Returns the bytes written. Blocking.
pub fn copy_dir(
    from: &Root,
    from_rel: &Path,
    to: &Root,
    to_rel: &Path,
    limit: u64,
) -> Result<Option<u64>, CopyError> {
    let open = || -> Result<Option<OwnedFd>, CopyError> {
        match from.list_dir_exact(from_rel) {
            Ok(fd) => Ok(Some(fd)),
            Err(ConfinedError::NotFound | ConfinedError::Escapes | ConfinedError::NotDir) => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    };
    let Some(start) = open()? else { return Ok(None) };
    let never = AtomicBool::new(false);
    let mut measure = Measure { bytes: 0 };
    if from.walk(start, &mut measure, MAX_COPY_ENTRIES, &never)?.capped {
        return Err(CopyError::TooMany);
    }
    if measure.bytes > limit {
        return Err(CopyError::OverLimit { need: measure.bytes, limit });
    }
    let Some(start) = open()? else { return Ok(None) };
    to.make_dirs_exact(to_rel)?;
    let mut copy = Copy { to, to_rel: to_rel.to_path_buf(), limit, used: 0, error: None };
    if from.walk(start, &mut copy, MAX_COPY_ENTRIES, &never)?.capped {
        return Err(CopyError::TooMany);
    }
    match copy.error {
        Some(e) => Err(e),
        None => Ok(Some(copy.used)),
    }
}
