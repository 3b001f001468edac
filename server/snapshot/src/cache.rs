//! The stat cache of a session's snapshots (the server's own file beside its shadow
//! repository): each file of the last snapshot with the `lstat` it had, so the next snapshot
//! reads only files whose `lstat` changed. Its entries are also what the workspace *tracks*:
//! a file the snapshot holds stays in the next one even once a `.gitignore` covers it, as it
//! does in git's index.
//!
//! Every object an entry names exists in the shadow repository (written by a snapshot, or
//! listed from a tree of it when the cache is seeded), so a file whose content hashes to its
//! entry's id needs no write.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::Path;

use rustix::fs::Stat;

use crate::objects::Oid;
use crate::tree::Entry;

const MAGIC: &[u8; 8] = b"OBSNAP1\n";
/// A cache file larger than this is not read (it is rebuilt).
const MAX_CACHE_BYTES: u64 = 1 << 30;

/// What of a file's `lstat` says it is unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatKey {
    ino: u64,
    size: u64,
    mode: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl StatKey {
    /// The key of an `lstat`.
    pub fn of(st: &Stat) -> StatKey {
        StatKey {
            ino: st.st_ino,
            size: st.st_size as u64,
            mode: st.st_mode,
            mtime: (st.st_mtime, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime, st.st_ctime_nsec as i64),
        }
    }

    /// Whether the file changed so recently (at or after `since`, seconds) that a change in
    /// the same clock tick would keep this key: such a key is not trusted next time.
    pub fn racy(&self, since: i64) -> bool {
        self.mtime.0 >= since || self.ctime.0 >= since
    }
}

/// One file of the last snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cached {
    /// Its mode in the tree.
    pub mode: u32,
    /// Its object.
    pub oid: Oid,
    /// Its `lstat` then; `None`: read it again.
    pub stat: Option<StatKey>,
}

/// The cache: path → [`Cached`], in path order.
#[derive(Debug, Clone, Default)]
pub struct Cache {
    /// The entries.
    pub entries: BTreeMap<Vec<u8>, Cached>,
}

impl Cache {
    /// A cache that knows the files of a tree (their objects exist) but no `lstat`: the first
    /// snapshot reads every file once and writes only those that differ.
    pub fn seeded(entries: &[Entry]) -> Cache {
        let entries = entries
            .iter()
            .map(|e| (e.path.clone(), Cached { mode: e.mode, oid: e.oid, stat: None }))
            .collect();
        Cache { entries }
    }

    /// The cache once the workspace it describes was restored to `target`: entries whose file
    /// the restore did not touch keep their `lstat` key, the others are read again next time.
    pub fn restored(&self, target: &[Entry]) -> Cache {
        let entries = target
            .iter()
            .map(|e| {
                let stat = self
                    .entries
                    .get(&e.path)
                    .filter(|c| c.mode == e.mode && c.oid == e.oid)
                    .and_then(|c| c.stat);
                (e.path.clone(), Cached { mode: e.mode, oid: e.oid, stat })
            })
            .collect();
        Cache { entries }
    }

    /// Whether any entry lies beneath the directory `dir` (a `/`-separated path).
    pub fn has_under(&self, dir: &[u8]) -> bool {
        let mut prefix = dir.to_vec();
        prefix.push(b'/');
        self.entries.range(prefix.clone()..).next().is_some_and(|(k, _)| k.starts_with(&prefix))
    }

    /// Reads the cache at `path`; `None` when it is missing or unreadable (the caller seeds a
    /// new one).
    pub fn load(path: &Path) -> Option<Cache> {
        let file = std::fs::File::open(path).ok()?;
        let mut bytes = Vec::new();
        file.take(MAX_CACHE_BYTES).read_to_end(&mut bytes).ok()?;
        parse(&bytes)
    }

    /// Writes the cache to `path` (a temporary, then a rename).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut out = Vec::with_capacity(16 + self.entries.len() * 96);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for (path, c) in &self.entries {
            out.extend_from_slice(&(path.len() as u32).to_le_bytes());
            out.extend_from_slice(path);
            out.extend_from_slice(&c.mode.to_le_bytes());
            out.extend_from_slice(&c.oid.0);
            match &c.stat {
                None => out.push(0),
                Some(s) => {
                    out.push(1);
                    for v in [s.ino, s.size, u64::from(s.mode)] {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                    for v in [s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1] {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                }
            }
        }
        let tmp = path.with_extension("snap.part");
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&out)?;
        drop(file);
        std::fs::rename(&tmp, path)
    }
}

fn parse(bytes: &[u8]) -> Option<Cache> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(8)? != MAGIC {
        return None;
    }
    let count = r.u64()?;
    let mut entries = BTreeMap::new();
    for _ in 0..count {
        let len = r.u32()? as usize;
        let path = r.take(len)?.to_vec();
        let mode = r.u32()?;
        let oid = Oid(r.take(20)?.try_into().ok()?);
        let stat = match r.take(1)?[0] {
            0 => None,
            _ => Some(StatKey {
                ino: r.u64()?,
                size: r.u64()?,
                mode: r.u64()? as u32,
                mtime: (r.u64()? as i64, r.u64()? as i64),
                ctime: (r.u64()? as i64, r.u64()? as i64),
            }),
        };
        entries.insert(path, Cached { mode, oid, stat });
    }
    Some(Cache { entries })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}
