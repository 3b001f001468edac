//! Reading the server's own repositories for a snapshot's restore (tree listings and blobs, by
//! git run over the shadow repository only, never a work tree), and finding an in-place
//! repository's `HEAD` by reading its files as data, without running git in it.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use outboard_snapshot::{Blobs, Entry, Oid};

use super::SourceError;
use crate::git::Git;

/// The most bytes of a ref file, `HEAD` or `.git` file read from an in-place repository.
const MAX_REF_BYTES: u64 = 4096;
/// The most bytes of a `packed-refs` file read.
const MAX_PACKED_REFS_BYTES: u64 = 64 << 20;

/// The files of `treeish` in the repository `repo` (git's `ls-tree -r`).
pub async fn ls_tree(git: &Git, repo: &Path, treeish: &str) -> Result<Vec<Entry>, SourceError> {
    let out = git
        .command(None, &["ls-tree", "-r", "-z", "--full-tree", treeish])
        .env("GIT_DIR", repo)
        .output()
        .await?;
    let mut entries = Vec::new();
    for record in out.split(|&b| b == 0).filter(|r| !r.is_empty()) {
        let bad = || SourceError::Invalid("git ls-tree printed a line it should not".into());
        let tab = record.iter().position(|&b| b == b'\t').ok_or_else(bad)?;
        let head = std::str::from_utf8(&record[..tab]).map_err(|_| bad())?;
        let mut parts = head.split(' ');
        let (Some(mode), Some(_kind), Some(oid)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        let mode = u32::from_str_radix(mode, 8).map_err(|_| bad())?;
        let oid = Oid::parse(oid).ok_or_else(bad)?;
        entries.push(Entry { path: record[tab + 1..].to_vec(), mode, oid });
    }
    Ok(entries)
}

/// Blobs of the repository `repo`, from one `git cat-file --batch` (blocking).
pub struct CatFile {
    child: Child,
    /// Git's stdin, or the thread writing a prefetch's ids into it (which gives it back).
    stdin: Option<ChildStdin>,
    writer: Option<std::thread::JoinHandle<std::io::Result<ChildStdin>>>,
    /// Ids asked for by the prefetch whose answers are still to be read, in order.
    asked: std::collections::VecDeque<Oid>,
    stdout: BufReader<ChildStdout>,
}

impl CatFile {
    /// Starts `git cat-file --batch` over `repo`.
    pub fn start(git: &Git, repo: &Path) -> std::io::Result<CatFile> {
        let mut command = git
            .command(None, &["cat-file", "--batch"])
            .env("GIT_DIR", repo)
            .die_with_server()
            .into_std();
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = command.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(std::io::Error::other("git cat-file has no pipes"));
        };
        Ok(CatFile {
            child,
            stdin: Some(stdin),
            writer: None,
            asked: std::collections::VecDeque::new(),
            stdout: BufReader::new(stdout),
        })
    }

    /// Git's stdin back from a prefetch's writer, once it wrote everything.
    fn stdin(&mut self) -> std::io::Result<&mut ChildStdin> {
        if let Some(writer) = self.writer.take() {
            let stdin =
                writer.join().map_err(|_| std::io::Error::other("the writer panicked"))??;
            self.stdin = Some(stdin);
        }
        self.stdin.as_mut().ok_or_else(|| std::io::Error::other("git cat-file has no stdin"))
    }
}

impl Blobs for CatFile {
    fn prefetch(&mut self, oids: &[Oid]) {
        // A thread writes every id while this one reads the answers: git answers as it reads,
        // and a pipe full both ways would stop both.
        if self.stdin().is_err() {
            return; // an earlier prefetch's writer failed: reads say so
        }
        let Some(mut stdin) = self.stdin.take() else { return };
        let ids: Vec<Oid> = oids.to_vec();
        self.asked.extend(ids.iter().copied());
        self.writer = Some(std::thread::spawn(move || {
            let mut text = String::with_capacity(ids.len() * 41);
            for oid in &ids {
                text.push_str(&format!("{oid}\n"));
            }
            stdin.write_all(text.as_bytes())?;
            stdin.flush()?;
            Ok(stdin)
        }));
    }

    fn read(&mut self, oid: &Oid) -> std::io::Result<Vec<u8>> {
        match self.asked.pop_front() {
            Some(asked) if asked == *oid => {}
            Some(_) => return Err(std::io::Error::other("blobs read out of the prefetch's order")),
            None => {
                let stdin = self.stdin()?;
                writeln!(stdin, "{oid}")?;
                stdin.flush()?;
            }
        }
        let mut header = String::new();
        (&mut self.stdout).take(256).read_line(&mut header)?;
        let mut words = header.split_whitespace();
        let (Some(_), Some(kind), Some(size)) = (words.next(), words.next(), words.next()) else {
            return Err(std::io::Error::other(format!(
                "not in the repository ({})",
                header.trim()
            )));
        };
        let size: usize = size.parse().map_err(|_| std::io::Error::other("a bad object size"))?;
        if kind != "blob" {
            return Err(std::io::Error::other(format!("a {kind}, not a blob")));
        }
        let mut content = vec![0u8; size + 1];
        self.stdout.read_exact(&mut content)?;
        content.pop(); // the newline after the content
        Ok(content)
    }
}

impl Drop for CatFile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
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
