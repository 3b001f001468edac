//! The read ledger: which files a session has `Read`, and what they held at that time.
//!
//! It enforces Claude Code's rule: `Write`/`Edit` of an existing file fails unless the session
//! has read it and it has not changed since, so the model never overwrites what it has not seen
//! (a command's output, a teammate's edit). A new file needs no prior read.
//!
//! Design choice: the state is a SHA-256 of the content plus its length, not the mtime. A
//! command that rewrites a file within the same mtime tick, or `touch` with no change, would
//! fool or needlessly trip an mtime check; hashing costs one read of a file the tool is about
//! to read anyway.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// What a file held when the session read or wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadStamp {
    /// Length in bytes.
    pub len: u64,
    /// SHA-256 of the content.
    pub sha256: [u8; 32],
}

impl ReadStamp {
    /// The stamp of `content`.
    pub fn of(content: &[u8]) -> Self {
        ReadStamp { len: content.len() as u64, sha256: Sha256::digest(content).into() }
    }
}

/// The files a session has read (keyed by resolved host path) and their state at that time; for
/// org files (`/memory`, `/skills`, keyed by their path) the version read.
#[derive(Debug, Clone, Default)]
pub struct ReadLedger {
    /// Each file's stamp, with the tick it was last recorded at (for eviction).
    files: HashMap<PathBuf, (u64, ReadStamp)>,
    org: HashMap<String, OrgStamp>,
    tick: u64,
}

/// Workspace files a ledger remembers at most; past it, the file recorded longest ago is
/// forgotten (editing it again needs a fresh `Read`, which is what the model is told). A session
/// of hours reads a few hundred files; this bounds one that walks a whole monorepo.
pub const MAX_LEDGER_FILES: usize = 4096;

/// What the session knows of an org file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrgStamp {
    /// The version it last read or wrote.
    pub version: u64,
    /// The newest version it has been told about (so a change is announced once).
    pub announced: u64,
}

impl ReadLedger {
    /// An empty ledger (a new session has read nothing).
    pub fn new() -> Self {
        ReadLedger::default()
    }

    /// Records that the session has seen `content` at `path` (after a Read, Write or Edit).
    pub fn record(&mut self, path: &Path, content: &[u8]) {
        self.record_stamp(path, ReadStamp::of(content));
    }

    /// Records a stamp computed elsewhere (a sandbox host's answer, see [`crate::remote`]) as
    /// [`ReadLedger::record`] would have recorded the content it stands for.
    pub fn record_stamp(&mut self, path: &Path, stamp: ReadStamp) {
        self.tick += 1;
        self.files.insert(path.to_path_buf(), (self.tick, stamp));
        if self.files.len() > MAX_LEDGER_FILES {
            // Rare (once per record past the cap), so a scan beats keeping a second index.
            let oldest =
                self.files.iter().min_by_key(|(_, (tick, _))| *tick).map(|(p, _)| p.clone());
            if let Some(oldest) = oldest {
                self.files.remove(&oldest);
            }
        }
    }

    /// The workspace files recorded, oldest first (what a remote call carries to its host).
    pub fn files(&self) -> Vec<(&Path, &ReadStamp)> {
        let mut files: Vec<_> = self.files.iter().collect();
        files.sort_by_key(|(_, (tick, _))| *tick);
        files.into_iter().map(|(path, (_, stamp))| (path.as_path(), stamp)).collect()
    }

    /// Takes `other`'s entries for the files and org paths this ledger has not recorded (what
    /// was recorded here is newer).
    pub fn merge(&mut self, other: ReadLedger) {
        for (path, (_, stamp)) in other.files {
            if self.files.len() >= MAX_LEDGER_FILES {
                break;
            }
            self.tick += 1;
            let tick = self.tick;
            self.files.entry(path).or_insert((tick, stamp));
        }
        for (path, stamp) in other.org {
            self.org.entry(path).or_insert(stamp);
        }
    }

    /// The recorded state of `path`, if the session has read it.
    pub fn stamp(&self, path: &Path) -> Option<&ReadStamp> {
        self.files.get(path).map(|(_, stamp)| stamp)
    }

    /// Forgets `path` (e.g. the file was deleted).
    pub fn forget(&mut self, path: &Path) {
        self.files.remove(path);
    }

    /// Records that the session has seen `version` of the org file `path`.
    pub fn record_org(&mut self, path: &str, version: u64) {
        self.org.insert(path.to_owned(), OrgStamp { version, announced: version });
    }

    /// The version of the org file `path` the session last saw, if any.
    pub fn org_stamp(&self, path: &str) -> Option<OrgStamp> {
        self.org.get(path).copied()
    }

    /// The org files the session has seen.
    pub fn org_paths(&self) -> Vec<String> {
        self.org.keys().cloned().collect()
    }

    /// Notes that the session was told `path` is now at `version`.
    pub fn announced_org(&mut self, path: &str, version: u64) {
        if let Some(stamp) = self.org.get_mut(path) {
            stamp.announced = stamp.announced.max(version);
        }
    }

    /// Whether an existing file holding `current` may be overwritten: the session must have read
    /// it and it must not have changed since. The error is the message for the model.
    pub fn check_unchanged(&self, path: &Path, current: &[u8]) -> Result<(), String> {
        match self.files.get(path).map(|(_, stamp)| stamp) {
            None => Err("File has not been read yet. Read it first before writing to it.".into()),
            Some(stamp) if *stamp == ReadStamp::of(current) => Ok(()),
            Some(_) => Err("File has been modified since read, either by the user or by a \
                            command (e.g. a linter or Bash). Read it again before attempting to \
                            write it."
                .into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_forgets_the_file_recorded_longest_ago_past_its_bound() {
        let mut ledger = ReadLedger::new();
        let path = |i: usize| PathBuf::from(format!("/w/f{i}"));
        for i in 0..=MAX_LEDGER_FILES {
            ledger.record(&path(i), b"x");
            if i == 10 {
                ledger.record(&path(0), b"x"); // read again: now recent
            }
        }
        assert_eq!(ledger.files.len(), MAX_LEDGER_FILES);
        assert!(ledger.stamp(&path(0)).is_some(), "re-read, so kept");
        assert!(ledger.stamp(&path(1)).is_none(), "the oldest is forgotten");
        assert!(ledger.stamp(&path(MAX_LEDGER_FILES)).is_some());
    }

    #[test]
    fn unread_changed_and_unchanged() {
        let mut ledger = ReadLedger::new();
        let p = Path::new("/w/a.txt");
        assert!(ledger.check_unchanged(p, b"x").unwrap_err().starts_with("File has not been read"));
        ledger.record(p, b"x");
        assert_eq!(ledger.check_unchanged(p, b"x"), Ok(()));
        assert!(ledger.check_unchanged(p, b"y").unwrap_err().starts_with("File has been modified"));
        assert_eq!(ledger.stamp(p).map(|s| s.len), Some(1));
        ledger.forget(p);
        assert!(ledger.stamp(p).is_none());
    }
}
