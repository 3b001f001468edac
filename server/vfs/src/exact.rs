//! Exact operations beneath a root: paths that follow no symbolic link at all, for the code
//! that restores or copies a whole tree (a checkpoint's rewind, a fork) rather than serving a
//! path the model named.
//!
//! CONTRACT: [`Root::open_dir_exact`], [`Root::list_dir_exact`], [`Root::make_dirs_exact`], [`open_child`],
//! [`create_new`], [`replace_file`], [`replace_symlink`], [`remove_entry`],
//! [`remove_empty_dir`].
//!
//! Why not [`Root::locate`]: the file tools follow a symlink that stays inside the tree (a model
//! that edits `latest/x` through `latest -> v2` means `v2/x`), but a restore must make *the
//! tree the snapshot holds*: a symlink where the snapshot has a directory is removed and the
//! directory made, as git's checkout does, and nothing is ever written through a link. So
//! directories are resolved with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` (the kernel refuses
//! any link on the way, at the moment of the call), and every change is made by name relative
//! to a directory descriptor: `mkdirat`, `openat(O_CREAT | O_EXCL | O_NOFOLLOW)` then
//! `renameat` (which replaces a link itself, never its target), `symlinkat`, `unlinkat`.
//! Whatever a background command swaps meanwhile, these calls act inside the directory held.
//!
//! A server running as root gives what it makes the owner of the directory it is made in, as
//! [`crate::confined::Located::write_atomic`] does: a workspace stays its sandbox user's.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

use crate::confined::{
    file_type, gid, openat2_retry, regular, uid, ConfinedError, Root, READ_FLAGS,
};

/// How every directory of an exact operation is resolved: beneath the root, no symlink of any
/// kind, no mount crossed.
const EXACT: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// Flags of a directory opened to act in.
const DIR_FLAGS: OFlags = OFlags::PATH.union(OFlags::DIRECTORY);

impl Root {
    /// The directory `rel` (the root itself for an empty path), reached through no symlink.
    pub fn open_dir_exact(&self, rel: &Path) -> Result<OwnedFd, ConfinedError> {
        openat2_retry(self.dir_fd(), rel, DIR_FLAGS, Mode::empty(), EXACT)
            .map_err(ConfinedError::from_errno)
    }

    /// The directory `rel` reached through no symlink, opened for listing (a walk's start).
    pub fn list_dir_exact(&self, rel: &Path) -> Result<OwnedFd, ConfinedError> {
        let flags = READ_FLAGS | OFlags::DIRECTORY;
        openat2_retry(self.dir_fd(), rel, flags, Mode::empty(), EXACT)
            .map_err(ConfinedError::from_errno)
    }

    /// The directory `rel`, made where missing one level at a time through no symlink: a file,
    /// symlink or other non-directory in the way is removed first (the tree being restored
    /// has a directory there).
    pub fn make_dirs_exact(&self, rel: &Path) -> Result<OwnedFd, ConfinedError> {
        let mut dir = self.open_dir_exact(Path::new(""))?;
        for component in rel.components() {
            let Component::Normal(name) = component else { return Err(ConfinedError::Escapes) };
            dir = child_dir(dir.as_fd(), name)?;
        }
        Ok(dir)
    }
}

/// The directory `name` in `dir`, made if missing, replacing a non-directory there.
fn child_dir(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, ConfinedError> {
    let open = || openat2_retry(dir, Path::new(name), DIR_FLAGS, Mode::empty(), EXACT);
    match open() {
        Ok(fd) => return Ok(fd),
        // A symlink (ELOOP under NO_SYMLINKS) or a file (ENOTDIR) holds the name.
        Err(Errno::LOOP | Errno::NOTDIR) => {
            rfs::unlinkat(dir, name, AtFlags::empty()).map_err(ConfinedError::from_errno)?;
        }
        Err(Errno::NOENT) => {}
        Err(e) => return Err(ConfinedError::from_errno(e)),
    }
    match rfs::mkdirat(dir, name, Mode::from_raw_mode(0o777)) {
        Ok(()) => own_like_parent(dir, name)?,
        Err(Errno::EXIST) => {}
        Err(e) => return Err(ConfinedError::from_errno(e)),
    }
    open().map_err(|e| match e {
        // Swapped for a link again between the mkdir and the open: refused, not followed.
        Errno::LOOP | Errno::NOTDIR | Errno::NOENT => ConfinedError::Raced,
        e => ConfinedError::from_errno(e),
    })
}

/// When the server runs as root, gives `name` in `dir` the owner of `dir` (never through a
/// symlink).
fn own_like_parent(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), ConfinedError> {
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let parent = rfs::fstat(dir).map_err(ConfinedError::from_errno)?;
    rfs::chownat(dir, name, Some(uid(&parent)), Some(gid(&parent)), AtFlags::SYMLINK_NOFOLLOW)
        .map_err(ConfinedError::from_errno)
}

/// Opens the regular file `name` in `dir` for reading: never through a symlink, never blocking
/// on a FIFO, checked to be a regular file on the descriptor. Returns it with its `fstat`.
pub fn open_child(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(File, Stat), ConfinedError> {
    let fd = rfs::openat(dir, name, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty())
        .map_err(ConfinedError::from_errno)?;
    regular(fd)
}

/// Creates the new regular file `name` in `dir` for writing (`O_EXCL | O_NOFOLLOW`: nothing
/// there is reused or followed), with `mode` before the umask; owned like `dir` under root.
pub fn create_new(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> std::io::Result<File> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::NOCTTY;
    let fd = rfs::openat(dir, name, flags | OFlags::CLOEXEC, Mode::from_raw_mode(mode))?;
    let file = File::from(fd);
    if rustix::process::geteuid().is_root() {
        let parent = rfs::fstat(dir)?;
        rfs::fchown(&file, Some(uid(&parent)), Some(gid(&parent)))?;
    }
    Ok(file)
}

/// A temporary name beside `name`, unique in this process.
fn temp_name(name: &OsStr) -> OsString {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".outboard-{}-{n}.tmp", std::process::id()));
    tmp
}

/// Puts the temporary entry `tmp` in place of `name` (a directory there must be empty and is
/// removed first); the temporary goes on failure.
fn put_in_place(dir: BorrowedFd<'_>, tmp: &OsStr, name: &OsStr) -> std::io::Result<()> {
    let result = (|| {
        if let Ok(st) = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            if file_type(&st) == FileType::Directory {
                rfs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
            }
        }
        rfs::renameat(dir, tmp, dir, name)
    })();
    if result.is_err() {
        let _ = rfs::unlinkat(dir, tmp, AtFlags::empty());
    }
    Ok(result?)
}

/// Makes `name` in `dir` a regular file holding `content` (mode 0777 or 0666 before the umask,
/// as git checks files out), replacing a file, a symlink or an empty directory there; the
/// new file is complete before it takes the name.
pub fn replace_file(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    content: &[u8],
    executable: bool,
) -> std::io::Result<()> {
    use std::io::Write as _;
    if let Some((mut file, st)) = overwritable(dir, name)? {
        // The file keeps its inode: a restore of thousands of files makes no inode churn
        // (ext4 scans its recently freed inodes on every new one).
        file.set_len(0)?;
        file.write_all(content)?;
        let bits = st.st_mode & 0o7777;
        // As git does: execute where read is allowed, or none.
        let wanted = if executable { bits | ((bits & 0o444) >> 2) } else { bits & !0o111 };
        if wanted != bits {
            rfs::fchmod(&file, Mode::from_raw_mode(wanted))?;
        }
        return Ok(());
    }
    let tmp = temp_name(name);
    let mode = if executable { 0o777 } else { 0o666 };
    let written = create_new(dir, &tmp, mode).and_then(|mut file| file.write_all(content));
    if let Err(e) = written {
        let _ = rfs::unlinkat(dir, &tmp, AtFlags::empty());
        return Err(e);
    }
    put_in_place(dir, &tmp, name)
}

/// The regular file `name` in `dir` opened for writing when it can be overwritten where it is:
/// not a link (never followed), not a FIFO or device (opened without blocking, checked on the
/// descriptor), and with one name only (writing a hard-linked file would change its other
/// names too). `None`: it must be replaced by a new file.
fn overwritable(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<Option<(File, Stat)>> {
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = match rfs::openat(dir, name, flags | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(_) => return Ok(None),
    };
    let st = rfs::fstat(&fd)?;
    if file_type(&st) != FileType::RegularFile || st.st_nlink != 1 {
        return Ok(None);
    }
    Ok(Some((File::from(fd), st)))
}

/// Makes `name` in `dir` a symlink to `target` (never resolved here), replacing what is there
/// as [`replace_file`] does.
pub fn replace_symlink(dir: BorrowedFd<'_>, name: &OsStr, target: &OsStr) -> std::io::Result<()> {
    let tmp = temp_name(name);
    rfs::symlinkat(target, dir, &tmp)?;
    if rustix::process::geteuid().is_root() {
        let parent = rfs::fstat(dir)?;
        let owned = rfs::chownat(
            dir,
            &tmp,
            Some(uid(&parent)),
            Some(gid(&parent)),
            AtFlags::SYMLINK_NOFOLLOW,
        );
        if let Err(e) = owned {
            let _ = rfs::unlinkat(dir, &tmp, AtFlags::empty());
            return Err(e.into());
        }
    }
    put_in_place(dir, &tmp, name)
}

/// Removes `name` in `dir` unless it is a directory. `false` when nothing (or a directory) was
/// there.
pub fn remove_entry(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<bool> {
    match rfs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT | Errno::ISDIR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Removes the directory `name` in `dir` if it is empty; `false` otherwise.
pub fn remove_empty_dir(dir: BorrowedFd<'_>, name: &OsStr) -> bool {
    rfs::unlinkat(dir, name, AtFlags::REMOVEDIR).is_ok()
}
