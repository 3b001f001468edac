//! Reading the server's own repositories for a snapshot's restore: tree listings and blobs, by
//! git run over the shadow repository only, never a work tree.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use outboard_snapshot::{Blobs, Entry, Oid};

use super::SourceError;
use crate::git::Git;

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
