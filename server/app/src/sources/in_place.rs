//! A workspace worked on in place (embedded mode): the user's own repository, read as data.
//!
//! Its diff is against its `HEAD`, found by reading the repository's files (a `.git` file's
//! `gitdir:`, `commondir`, `HEAD`, loose refs, `packed-refs`) through size limits; the snapshot's
//! objects go into a repository the server keeps per directory (`git/inplace-*.git`), whose
//! `objects/info/alternates` names the user's objects. Git never runs in the user's repository:
//! neither its configuration (a `core.fsmonitor`, a filter, a textconv a sandbox or anyone
//! planted) nor its index is read, and nothing of it is written.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use outboard_shared::SessionId;
use outboard_snapshot::Oid;

use super::{diff_args, io, SourceError, Sources, TooLarge, EMPTY_TREE};

/// The most bytes of a ref file, `HEAD` or `.git` file read from an in-place repository.
const MAX_REF_BYTES: u64 = 4096;
/// The most bytes of a `packed-refs` file read.
const MAX_PACKED_REFS_BYTES: u64 = 64 << 20;

impl Sources {
    /// The diff of a workspace worked on in place (embedded mode) against its `HEAD`, untracked
    /// files included, and the files left out as too large to read. The user's repository is
    /// read as data: `HEAD` from its files ([`in_place`]), its objects through an
    /// alternate of a repository the server keeps for that directory (`git/inplace-*.git`),
    /// where the snapshot's objects go. Git never runs in the user's repository, so neither its
    /// configuration nor its index is read or touched.
    pub async fn diff_in_place(
        &self,
        dir: &Path,
        stat: bool,
    ) -> Result<(tokio::process::Child, Vec<TooLarge>), SourceError> {
        let owned = dir.to_path_buf();
        let found = tokio::task::spawn_blocking(move || in_place(&owned))
            .await
            .map_err(|e| SourceError::Invalid(format!("cannot read the repository: {e}")))??;
        let key = outboard_snapshot::objects::hash(
            outboard_snapshot::Kind::Blob,
            found.top.as_os_str().as_encoded_bytes(),
        )
        .to_string();
        let repo = self.shadows().join(format!("inplace-{}.git", &key[..16]));
        let lock = self.lock(&SessionId(format!("inplace-{key}")));
        let _held = lock.lock().await;
        self.shadow_made(&repo).await?;
        let objects = found.objects.to_string_lossy();
        if objects.contains('\n') {
            return Err(SourceError::Invalid("the repository's path holds a newline".into()));
        }
        std::fs::write(repo.join("objects/info/alternates"), format!("{objects}\n"))
            .map_err(io("cannot point the diff's repository at the user's objects"))?;
        let snap = self.take(&repo, &found.top, found.head.as_deref()).await?;
        let base = found.head.unwrap_or_else(|| EMPTY_TREE.to_owned());
        let tree = snap.tree.to_string();
        let args = diff_args(&base, &tree, stat);
        let child = self.git.command(None, &args).env("GIT_DIR", &repo).spawn_stdout()?;
        Ok((child, snap.too_large))
    }
}

/// A repository worked on in place, as found from its files.
#[derive(Debug)]
pub struct InPlace {
    /// Its top directory (the work tree).
    pub top: PathBuf,
    /// Where its objects are (the common git dir's `objects`).
    pub objects: PathBuf,
    /// The commit `HEAD` names, `None` on a branch with no commit yet.
    pub head: Option<String>,
}

/// Reads the small file `path` (never a FIFO or device: opened non-blocking, checked regular).
fn read_small(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Finds the repository `dir` is in: its top (the nearest directory up with a `.git`), its git
/// dir (a `.git` file's `gitdir:` followed), and `HEAD`'s commit, reading refs as files (loose,
/// then `packed-refs`). Git itself is never run here: its configuration is not read.
pub fn in_place(dir: &Path) -> Result<InPlace, SourceError> {
    let not_git = || {
        SourceError::Invalid(format!(
            "{} is not in a git work tree: there is no base to diff against",
            dir.display()
        ))
    };
    let top = dir
        .ancestors()
        .find(|d| std::fs::symlink_metadata(d.join(".git")).is_ok())
        .ok_or_else(not_git)?
        .to_path_buf();
    let dot_git = top.join(".git");
    let git_dir = if std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) {
        let text = read_small(&dot_git, MAX_REF_BYTES).ok_or_else(not_git)?;
        let text = String::from_utf8_lossy(&text);
        let target = text.trim().strip_prefix("gitdir:").ok_or_else(not_git)?.trim();
        top.join(target)
    } else {
        dot_git
    };
    let common = match read_small(&git_dir.join("commondir"), MAX_REF_BYTES) {
        Some(text) => git_dir.join(String::from_utf8_lossy(&text).trim()),
        None => git_dir.clone(),
    };
    let head = read_small(&git_dir.join("HEAD"), MAX_REF_BYTES).ok_or_else(not_git)?;
    let head = String::from_utf8_lossy(&head).trim().to_owned();
    let head = match head.strip_prefix("ref:") {
        None if Oid::parse(&head).is_some() => Some(head),
        None => return Err(not_git()),
        Some(name) => resolve_ref(&git_dir, &common, name.trim())?,
    };
    Ok(InPlace { top, objects: common.join("objects"), head })
}

/// The commit the ref `name` names, or `None` when it does not exist (an unborn branch).
fn resolve_ref(git_dir: &Path, common: &Path, name: &str) -> Result<Option<String>, SourceError> {
    if !name.starts_with("refs/") || name.split('/').any(|part| part.is_empty() || part == "..") {
        return Err(SourceError::Invalid(format!("HEAD names {name:?}, which is not a ref")));
    }
    for dir in [git_dir, common] {
        if let Some(text) = read_small(&dir.join(name), MAX_REF_BYTES) {
            let text = String::from_utf8_lossy(&text).trim().to_owned();
            return match Oid::parse(&text) {
                Some(_) => Ok(Some(text)),
                None => Err(SourceError::Invalid(format!(
                    "{name} does not hold a commit id (a symbolic ref chain or a reftable \
                     repository, which in-place diffs do not read)"
                ))),
            };
        }
    }
    if let Some(packed) = read_small(&common.join("packed-refs"), MAX_PACKED_REFS_BYTES) {
        for line in packed.split(|&b| b == b'\n') {
            let mut parts = line.splitn(2, |&b| b == b' ');
            if let (Some(oid), Some(refname)) = (parts.next(), parts.next()) {
                if refname == name.as_bytes() {
                    let oid = String::from_utf8_lossy(oid).into_owned();
                    return Ok(Oid::parse(&oid).map(|_| oid));
                }
            }
        }
    }
    Ok(None)
}
