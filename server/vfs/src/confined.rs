//! Confined file access beneath a root directory that other processes change concurrently.
//!
//! CONTRACT: [`Root`] (open once per tree; [`Root::locate`], [`Root::open_read`],
//! [`Root::open_dir`], [`Root::walk`]), [`Located`] (read, atomic write), [`read_child`],
//! [`ConfinedError`], [`Walker`], [`Visit`], [`WalkEntry`], [`WalkEnd`].
//!
//! Why: a session's background commands keep running in the sandbox while the file tools work,
//! and they can rename, swap (`renameat2(RENAME_EXCHANGE)`) or replace anything in the
//! workspace. A check on a path followed by an open of the same path string is a race the
//! command can win: the path then leads through a symlink to the host (the server runs as root),
//! to a FIFO that blocks the opening thread forever, or to a sparse file of gigabytes. So every
//! access is made on descriptors, and every check on the descriptor that is then used:
//!
//! - The root directory is opened once ([`Root::open`]); every path is resolved *and* opened in
//!   one system call, `openat2(root, rel, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: the kernel
//!   refuses (EXDEV) any resolution that would leave the root at any moment — `..`, an absolute
//!   symlink, a relative symlink climbing out — and `/proc/*/fd`-style magic links (ELOOP).
//!   Relative symlinks that stay inside keep working, as they did before. We chose this over
//!   `RESOLVE_NO_SYMLINKS` because projects hold such links (`node_modules/.bin`, `latest ->
//!   v2`), and the kernel's guarantee is the same either way: nothing outside is reached.
//! - Files are opened `O_NONBLOCK | O_NOCTTY | O_CLOEXEC` (a FIFO or device opens without
//!   blocking), then `fstat`ed: anything but a regular file or directory is refused by type.
//!   Sizes come from `fstat` and reads go through a hard limit (at most `max + 1` bytes are ever
//!   read, whatever the size claimed), so a sparse file of gigabytes costs nothing.
//! - Writes happen relative to the parent directory's descriptor: a temp file created with
//!   `openat(O_CREAT | O_EXCL | O_NOFOLLOW)` in it, written, permission bits copied, `fsync`ed,
//!   then `renameat` within the same directory. Missing parents are made with `mkdirat`, one
//!   level at a time, each level re-opened beneath the root.
//! - Walks ([`Root::walk`]) list directories through their descriptors (`rustix::fs::Dir`) and
//!   open each child directory with `openat(O_DIRECTORY | O_NOFOLLOW)` relative to its parent,
//!   so a symlink is never followed and a swapped directory leads nowhere outside; they check a
//!   cancel flag between entries and stop at an entry and a depth cap.
//!
//! A directory descriptor stays inside the tree even if the directory is moved later: the trees
//! served here are bind mounts (the workspace) or server-owned (the org projection), and a
//! rename cannot move a directory out of its mount.
//!
//! Host paths are still computed, but only to *name* what was opened (the read ledger's key, the
//! `/workspace/…` shown to the model), from the descriptor itself (`/proc/self/fd`); they are
//! never opened again.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use rustix::fs::{self as rfs, AtFlags, Dir, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

/// How every path beneath a root is resolved (see the module header).
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);
/// How a fixed server-chosen path below a directory (`.git/info/exclude`) is resolved: no
/// symlink at all, it is never one in a real repository.
const RESOLVE_STRICT: ResolveFlags =
    RESOLVE.union(ResolveFlags::NO_SYMLINKS).union(ResolveFlags::NO_XDEV);
/// Flags of every open that may read a file: never block, never become a controlling tty.
pub(crate) const READ_FLAGS: OFlags =
    OFlags::RDONLY.union(OFlags::NONBLOCK).union(OFlags::NOCTTY).union(OFlags::CLOEXEC);
/// Attempts of an `openat2` that the kernel answered EAGAIN (a rename raced the `..` check).
const OPEN_RETRIES: usize = 32;
/// Directory levels a walk descends at most (each level holds one descriptor).
pub const MAX_WALK_DEPTH: usize = 256;

/// Why a confined access failed. [`ConfinedError::describe`] words it for the model.
#[derive(Debug, thiserror::Error)]
pub enum ConfinedError {
    /// The resolution would leave the root (EXDEV from `RESOLVE_BENEATH`, a magic link).
    #[error("leads outside the tree")]
    Escapes,
    /// Nothing exists there.
    #[error("does not exist")]
    NotFound,
    /// A symbolic link whose target does not exist (a write would create it wherever it points).
    #[error("is a symbolic link whose target does not exist")]
    DanglingLink,
    /// A directory where a file was expected.
    #[error("is a directory")]
    IsDir,
    /// A file where a directory was expected (the path or one of its parents).
    #[error("is not a directory")]
    NotDir,
    /// A FIFO, socket, device or symlink where a regular file was expected.
    #[error("is a {0}, not a regular file")]
    NotRegular(&'static str),
    /// Larger than the limit (the size, as far as it was seen).
    #[error("is too large ({size} bytes; the limit is {limit})")]
    TooLarge {
        /// The size `fstat` reported, or the bytes read when the file grew past the limit.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The path changed while it was being opened (e.g. a command renamed it): try again.
    #[error("changed while it was being opened")]
    Raced,
    /// The system refused.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl ConfinedError {
    pub(crate) fn from_errno(e: Errno) -> Self {
        match e {
            Errno::XDEV => ConfinedError::Escapes,
            // ELOOP under RESOLVE_NO_MAGICLINKS / NO_SYMLINKS, or a link loop: never followed.
            Errno::LOOP => ConfinedError::Escapes,
            Errno::NOENT => ConfinedError::NotFound,
            Errno::NOTDIR => ConfinedError::NotDir,
            Errno::ISDIR => ConfinedError::IsDir,
            Errno::AGAIN => ConfinedError::Raced,
            Errno::NOSYS => ConfinedError::Io(std::io::Error::other(
                "this kernel lacks openat2 (Linux 5.6 or later is required for confined file \
                 access)",
            )),
            e => ConfinedError::Io(e.into()),
        }
    }

    /// The message for the model about `shown` (its `/workspace/…` name).
    pub fn describe(&self, shown: &str) -> String {
        match self {
            ConfinedError::Escapes => format!(
                "{shown} is a symbolic link (or lies under one) that leads outside the \
                 workspace; file tools only work inside /workspace. Use Bash for files elsewhere"
            ),
            ConfinedError::NotFound => format!("{shown} does not exist"),
            ConfinedError::DanglingLink => format!(
                "{shown} is a symbolic link whose target does not exist; file tools do not \
                 follow it. Inspect it with `ls -l` in Bash"
            ),
            ConfinedError::IsDir => format!(
                "{shown} is a directory, not a file. To list it, use Glob (e.g. pattern \"*\" \
                 with path \"{shown}\") or `ls {shown}` via Bash."
            ),
            ConfinedError::NotDir => {
                format!("{shown}: a part of this path is a file, not a directory")
            }
            ConfinedError::NotRegular(kind) => format!(
                "{shown} is a {kind}, not a regular file; file tools only read and write regular \
                 files. Inspect it with Bash (e.g. `ls -l`, `file`)."
            ),
            ConfinedError::TooLarge { size, limit } => format!(
                "{shown} is too large ({size} bytes; the limit is {limit}). Use Grep to find \
                 the part you need, or Bash (`head`, `sed -n 'A,Bp'`)."
            ),
            ConfinedError::Raced => format!(
                "{shown} changed while it was being opened (a command is renaming files); try \
                 again once it has settled"
            ),
            ConfinedError::Io(e) => format!("Cannot access {shown}: {e}"),
        }
    }
}

/// The kind of a file, in words, for a refusal.
fn kind_name(file_type: FileType) -> &'static str {
    match file_type {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "special file",
    }
}

/// The type of a `stat`.
pub fn file_type(stat: &Stat) -> FileType {
    FileType::from_raw_mode(stat.st_mode)
}

/// The modification time of a `stat`.
pub fn mtime(stat: &Stat) -> SystemTime {
    let secs = u64::try_from(stat.st_mtime).unwrap_or(0);
    let nanos = u32::try_from(stat.st_mtime_nsec).unwrap_or(0).min(999_999_999);
    SystemTime::UNIX_EPOCH + Duration::new(secs, nanos)
}

/// A directory tree, opened once; every access beneath it goes through this (module header).
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    canonical: PathBuf,
}

/// A place for a file: its parent directory (opened beneath the root) and its name there.
#[derive(Debug)]
pub struct Located {
    parent: OwnedFd,
    name: OsString,
    /// The host path it has now (parent's real path + name): a name for the ledger and the
    /// model, never opened.
    pub host: PathBuf,
}

/// A file opened for reading beneath the root, with its `fstat`.
#[derive(Debug)]
pub struct Opened {
    /// The descriptor.
    pub file: File,
    /// Its `fstat` (taken on this descriptor).
    pub stat: Stat,
    /// The host path it has now (a name only, see [`Located::host`]).
    pub host: PathBuf,
}

impl Root {
    /// Opens the directory `canonical` (a path without symlinks, owned by the server) as a root.
    /// Fails when the kernel lacks `openat2`, so a server that cannot confine does not start
    /// serving files.
    pub fn open(canonical: &Path) -> std::io::Result<Root> {
        let dir = rfs::open(
            canonical,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let root = Root { dir, canonical: canonical.to_path_buf() };
        root.openat2(Path::new(""), OFlags::PATH | OFlags::DIRECTORY)
            .map_err(|e| std::io::Error::other(ConfinedError::from_errno(e).to_string()))?;
        Ok(root)
    }

    /// The root directory's descriptor (`O_PATH`), for operations made relative to it.
    pub(crate) fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The host path of the root.
    pub fn canonical(&self) -> &Path {
        &self.canonical
    }

    /// `openat2` beneath the root, retried when the kernel asks to (EAGAIN: a concurrent rename
    /// made it unsure about a `..`) or a signal interrupted it.
    fn openat2(&self, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
        openat2_retry(self.dir.as_fd(), rel, flags, Mode::empty(), RESOLVE)
    }

    /// The path of an open descriptor relative to the root, as the kernel names it now; `None`
    /// when it cannot say (the file was deleted meanwhile, or `/proc` is missing).
    fn real_rel(&self, fd: BorrowedFd<'_>) -> Option<PathBuf> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        if link.as_os_str().as_bytes().ends_with(b" (deleted)") {
            return None;
        }
        link.strip_prefix(&self.canonical).ok().map(Path::to_path_buf)
    }

    /// The host path for `rel` as it resolves now, for naming only: the real path of the
    /// deepest part that exists plus the missing names. A dangling symlink is refused (writing
    /// through it would create its target).
    pub fn resolve_name(&self, rel: &Path) -> Result<PathBuf, ConfinedError> {
        let mut existing = rel.to_path_buf();
        let mut missing: Vec<OsString> = Vec::new();
        loop {
            match self.openat2(&existing, OFlags::PATH) {
                Ok(fd) => {
                    let real = self.real_rel(fd.as_fd()).ok_or(ConfinedError::Raced)?;
                    if let Some(first) = missing.last() {
                        let st = rfs::statat(&fd, first.as_os_str(), AtFlags::SYMLINK_NOFOLLOW);
                        if st.is_ok_and(|st| file_type(&st) == FileType::Symlink) {
                            return Err(ConfinedError::DanglingLink);
                        }
                    }
                    let mut host = self.canonical.join(real);
                    host.extend(missing.iter().rev());
                    return Ok(host);
                }
                Err(Errno::NOENT) => {
                    let Some(name) = existing.file_name().map(OsStr::to_os_string) else {
                        return Err(ConfinedError::NotFound);
                    };
                    missing.push(name);
                    existing.pop();
                }
                Err(e) => return Err(ConfinedError::from_errno(e)),
            }
        }
    }

    /// Where the file `rel` is (following symlinks that stay inside, a final one included), or
    /// would be created. With `create_parents`, missing directories are made (see the module
    /// header). The root itself, or a directory, is [`ConfinedError::IsDir`].
    pub fn locate(&self, rel: &Path, create_parents: bool) -> Result<Located, ConfinedError> {
        let real = match self.openat2(rel, OFlags::PATH) {
            Ok(fd) => {
                let stat = rfs::fstat(&fd).map_err(ConfinedError::from_errno)?;
                if file_type(&stat) == FileType::Directory {
                    return Err(ConfinedError::IsDir);
                }
                self.real_rel(fd.as_fd()).ok_or(ConfinedError::Raced)?
            }
            Err(Errno::NOENT) => rel.to_path_buf(),
            Err(e) => return Err(ConfinedError::from_errno(e)),
        };
        let Some(name) = real.file_name().map(OsStr::to_os_string) else {
            return Err(ConfinedError::IsDir);
        };
        let parent_rel = real.parent().unwrap_or(Path::new(""));
        let parent = if create_parents {
            self.make_dirs(parent_rel)?
        } else {
            self.openat2(parent_rel, OFlags::PATH | OFlags::DIRECTORY)
                .map_err(ConfinedError::from_errno)?
        };
        let parent_real = self.real_rel(parent.as_fd()).ok_or(ConfinedError::Raced)?;
        let host = self.canonical.join(parent_real).join(&name);
        Ok(Located { parent, name, host })
    }

    /// Opens `rel` (a directory, the root itself, or a file) for reading beneath the root; for a
    /// directory the descriptor can be walked.
    pub fn open_read(&self, rel: &Path) -> Result<Opened, ConfinedError> {
        let fd = self.openat2(rel, READ_FLAGS).map_err(ConfinedError::from_errno)?;
        let stat = rfs::fstat(&fd).map_err(ConfinedError::from_errno)?;
        let host = self.canonical.join(self.real_rel(fd.as_fd()).ok_or(ConfinedError::Raced)?);
        match file_type(&stat) {
            FileType::RegularFile | FileType::Directory => {
                Ok(Opened { file: File::from(fd), stat, host })
            }
            other => Err(ConfinedError::NotRegular(kind_name(other))),
        }
    }

    /// The directory `rel` beneath the root, opened for listing.
    pub fn open_dir(&self, rel: &Path) -> Result<OwnedFd, ConfinedError> {
        self.openat2(rel, READ_FLAGS | OFlags::DIRECTORY).map_err(ConfinedError::from_errno)
    }

    /// Opens (making what is missing) the directory `rel`, one level at a time.
    fn make_dirs(&self, rel: &Path) -> Result<OwnedFd, ConfinedError> {
        let dir_flags = OFlags::PATH | OFlags::DIRECTORY;
        match self.openat2(rel, dir_flags) {
            Ok(fd) => return Ok(fd),
            Err(Errno::NOENT) => {}
            Err(e) => return Err(ConfinedError::from_errno(e)),
        }
        let mut at = PathBuf::new();
        let mut dir = self.openat2(&at, dir_flags).map_err(ConfinedError::from_errno)?;
        for component in rel.components() {
            let Component::Normal(name) = component else { return Err(ConfinedError::Escapes) };
            at.push(name);
            dir = match self.openat2(&at, dir_flags) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    // Made inside the directory we hold, whatever its path has become.
                    match rfs::mkdirat(&dir, name, Mode::from_raw_mode(0o777)) {
                        Ok(()) if rustix::process::geteuid().is_root() => {
                            // Owned like its parent (see `Located::write_atomic`); never through
                            // a symlink swapped in meanwhile.
                            let parent = rfs::fstat(&dir).map_err(ConfinedError::from_errno)?;
                            rfs::chownat(
                                &dir,
                                name,
                                Some(uid(&parent)),
                                Some(gid(&parent)),
                                AtFlags::SYMLINK_NOFOLLOW,
                            )
                            .map_err(ConfinedError::from_errno)?;
                        }
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(ConfinedError::from_errno(e)),
                    }
                    match self.openat2(&at, dir_flags) {
                        Ok(fd) => fd,
                        // Still missing after mkdir: a dangling symlink holds the name.
                        Err(Errno::NOENT) => return Err(ConfinedError::DanglingLink),
                        Err(e) => return Err(ConfinedError::from_errno(e)),
                    }
                }
                Err(e) => return Err(ConfinedError::from_errno(e)),
            };
        }
        Ok(dir)
    }

    /// Walks the directory `start` (from [`Root::open_dir`] or [`Root::open_read`]) depth
    /// first, calling `walker` for each entry (see [`Walker`]). Stops after `max_entries`
    /// entries or when `cancel` is set; both are reported in the [`WalkEnd`].
    pub fn walk<W: Walker>(
        &self,
        start: OwnedFd,
        walker: &mut W,
        max_entries: usize,
        cancel: &AtomicBool,
    ) -> Result<WalkEnd, ConfinedError> {
        walk(start, walker, max_entries, cancel)
    }
}

/// `openat2` retried on EAGAIN and EINTR (bounded).
pub(crate) fn openat2_retry(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
    resolve: ResolveFlags,
) -> Result<OwnedFd, Errno> {
    let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
    let mut tries = 0;
    loop {
        match rfs::openat2(dir, rel, flags | OFlags::CLOEXEC, mode, resolve) {
            Err(Errno::AGAIN | Errno::INTR) if tries < OPEN_RETRIES => tries += 1,
            other => return other,
        }
    }
}

/// Reads an open regular file through the hard limit: refused by `fstat` size first, and never
/// more than `max + 1` bytes read whatever the size claimed (a file that grows meanwhile).
pub fn read_capped(mut file: File, stat: &Stat, max: u64) -> Result<Vec<u8>, ConfinedError> {
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if size > max {
        return Err(ConfinedError::TooLarge { size, limit: max });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    (&mut file).take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(ConfinedError::TooLarge { size: bytes.len() as u64, limit: max });
    }
    Ok(bytes)
}

/// Opens the regular file `rel` below the directory `dir` (never through a symlink, never
/// above `dir`) and reads it through the limit `max`.
pub fn read_child(dir: BorrowedFd<'_>, rel: &Path, max: u64) -> Result<Vec<u8>, ConfinedError> {
    let fd = openat2_retry(dir, rel, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty(), RESOLVE_STRICT)
        .map_err(ConfinedError::from_errno)?;
    let (file, stat) = regular(fd)?;
    read_capped(file, &stat, max)
}

/// The owner of `stat`.
pub(crate) fn uid(stat: &Stat) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw(stat.st_uid)
}

/// The group of `stat`.
pub(crate) fn gid(stat: &Stat) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw(stat.st_gid)
}

/// `fstat`s a descriptor and keeps it only if it is a regular file.
pub(crate) fn regular(fd: OwnedFd) -> Result<(File, Stat), ConfinedError> {
    let stat = rfs::fstat(&fd).map_err(ConfinedError::from_errno)?;
    match file_type(&stat) {
        FileType::RegularFile => Ok((File::from(fd), stat)),
        FileType::Directory => Err(ConfinedError::IsDir),
        other => Err(ConfinedError::NotRegular(kind_name(other))),
    }
}

impl Located {
    /// Opens the file at this place for reading, without following a symlink (a final symlink
    /// was already resolved by [`Root::locate`]; one here now is dangling or was swapped in).
    /// `None` when nothing is there.
    pub fn open(&self) -> Result<Option<(File, Stat)>, ConfinedError> {
        let flags = READ_FLAGS | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rfs::openat(&self.parent, self.name.as_os_str(), flags, Mode::empty()) {
            Ok(fd) => regular(fd).map(Some),
            Err(Errno::NOENT) => Ok(None),
            Err(Errno::LOOP) => Err(ConfinedError::DanglingLink),
            Err(e) => Err(ConfinedError::from_errno(e)),
        }
    }

    /// The content of the file at this place through the limit `max`; `None` when absent.
    pub fn read(&self, max: u64) -> Result<Option<Vec<u8>>, ConfinedError> {
        match self.open()? {
            Some((file, stat)) => read_capped(file, &stat, max).map(Some),
            None => Ok(None),
        }
    }

    /// Replaces the file at this place with `content` atomically: a temp file in the same
    /// directory (the directory's descriptor, not its path), the current permission bits,
    /// `fsync`, then `renameat` over the name. The set-id bits are not carried over: the server
    /// writes as its own user, and a set-id file with content the model chose must not appear.
    pub fn write_atomic(&self, content: &[u8]) -> std::io::Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut tmp = OsString::from(".");
        tmp.push(&self.name);
        tmp.push(format!(".outboard-{}-{n}.tmp", std::process::id()));
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        let fd = rfs::openat(&self.parent, tmp.as_os_str(), flags, Mode::from_raw_mode(0o666))?;
        let result = (|| -> std::io::Result<()> {
            let mut file = File::from(fd);
            file.write_all(content)?;
            let before =
                rfs::statat(&self.parent, self.name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW);
            let before = before.ok().filter(|st| file_type(st) == FileType::RegularFile);
            if let Some(st) = &before {
                rfs::fchmod(&file, Mode::from_raw_mode(st.st_mode & 0o777))?;
            }
            if rustix::process::geteuid().is_root() {
                // A root server working in a user's directory in place must leave the user's
                // files theirs: the file keeps its owner, a new one gets its directory's.
                let owner = match before {
                    Some(st) => st,
                    None => rfs::fstat(&self.parent)?,
                };
                rfs::fchown(&file, Some(uid(&owner)), Some(gid(&owner)))?;
            }
            file.sync_all()?;
            rfs::renameat(&self.parent, tmp.as_os_str(), &self.parent, self.name.as_os_str())?;
            Ok(())
        })();
        if result.is_err() {
            let _ = rfs::unlinkat(&self.parent, tmp.as_os_str(), AtFlags::empty());
        }
        result
    }
}

/// What to do with an entry of a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// Go on (and descend into it if it is a directory).
    Descend,
    /// Go on, but do not descend into it.
    Skip,
}

/// One entry met by a walk.
pub struct WalkEntry<'a> {
    /// The directory holding it.
    pub dir: BorrowedFd<'a>,
    /// Its name there.
    pub name: &'a OsStr,
    /// Its path relative to where the walk started.
    pub rel: &'a Path,
    /// Its `lstat` (a symlink is seen as a symlink).
    pub stat: Stat,
}

impl WalkEntry<'_> {
    /// The entry's type (from `lstat`).
    pub fn file_type(&self) -> FileType {
        file_type(&self.stat)
    }

    /// Reads the entry if it is a regular file (opened without following a symlink and checked
    /// again on the descriptor), through the limit `max`.
    pub fn read(&self, max: u64) -> Result<Vec<u8>, ConfinedError> {
        read_child(self.dir, Path::new(self.name), max)
    }
}

/// What a walk does at each directory and entry. `Scope` is per-directory state (ignore rules);
/// an entry sees the scopes of all directories from the start down to its own.
pub trait Walker {
    /// Per-directory state.
    type Scope;
    /// Called when a directory is entered (the start included), with its descriptor and path.
    fn enter(&mut self, dir: BorrowedFd<'_>, rel: &Path) -> Self::Scope;
    /// Called for each entry; `scopes` are outermost first.
    fn entry(&mut self, entry: &WalkEntry<'_>, scopes: &[&Self::Scope]) -> Visit;
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalkEnd {
    /// It stopped at the entry cap.
    pub capped: bool,
    /// It stopped because it was cancelled.
    pub cancelled: bool,
}

struct Frame<S> {
    dir: Dir,
    rel: PathBuf,
    scope: S,
}

fn walk<W: Walker>(
    start: OwnedFd,
    walker: &mut W,
    max_entries: usize,
    cancel: &AtomicBool,
) -> Result<WalkEnd, ConfinedError> {
    let scope = walker.enter(start.as_fd(), Path::new(""));
    let dir = Dir::new(start).map_err(ConfinedError::from_errno)?;
    let mut stack = vec![Frame { dir, rel: PathBuf::new(), scope }];
    let mut visited = 0usize;
    while !stack.is_empty() {
        if cancel.load(Ordering::Relaxed) {
            return Ok(WalkEnd { cancelled: true, ..WalkEnd::default() });
        }
        let top = stack.len() - 1;
        let name = match stack[top].dir.read() {
            None | Some(Err(_)) => {
                stack.pop();
                continue;
            }
            Some(Ok(entry)) => OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string(),
        };
        if name == "." || name == ".." {
            continue;
        }
        visited += 1;
        if visited > max_entries {
            return Ok(WalkEnd { capped: true, ..WalkEnd::default() });
        }
        let frame = &stack[top];
        let dir_fd = frame.dir.fd().map_err(ConfinedError::from_errno)?;
        let Ok(stat) = rfs::statat(dir_fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue; // gone meanwhile
        };
        let rel = frame.rel.join(&name);
        let visit = {
            let scopes: Vec<&W::Scope> = stack.iter().map(|f| &f.scope).collect();
            let entry = WalkEntry { dir: dir_fd, name: &name, rel: &rel, stat };
            walker.entry(&entry, &scopes)
        };
        if visit == Visit::Skip
            || file_type(&stat) != FileType::Directory
            || stack.len() >= MAX_WALK_DEPTH
        {
            continue;
        }
        // Relative to the parent's descriptor, never through a symlink: a directory swapped
        // for a link since the `lstat` fails here (ELOOP/ENOTDIR) and is skipped.
        let flags = READ_FLAGS | OFlags::DIRECTORY | OFlags::NOFOLLOW;
        let Ok(child) = rfs::openat(dir_fd, name.as_os_str(), flags, Mode::empty()) else {
            continue;
        };
        let scope = walker.enter(child.as_fd(), &rel);
        let Ok(dir) = Dir::new(child) else { continue };
        stack.push(Frame { dir, rel, scope });
    }
    Ok(WalkEnd::default())
}
