//! Git's object ids and loose objects, written into the server's own repository.
//!
//! An object is `"<kind> <length>\0" + content`; its id is the SHA-1 of that, and its loose file
//! `objects/xx/yyyy…` the zlib stream of it. Git reads such files as it reads its own, so the
//! shadow repository diffs, commits and pushes what is written here.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha1::{Digest as _, Sha1};

/// A git object id (SHA-1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Oid(pub [u8; 20]);

impl Oid {
    /// Parses 40 hex digits.
    pub fn parse(hex: &str) -> Option<Oid> {
        let bytes = hex.as_bytes();
        if bytes.len() != 40 {
            return None;
        }
        let mut out = [0u8; 20];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let digit = |b: u8| (b as char).to_digit(16);
            out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
        }
        Some(Oid(out))
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Oid({self})")
    }
}

/// The kinds of object written here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A file's content or a symlink's target.
    Blob,
    /// A directory.
    Tree,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Blob => "blob",
            Kind::Tree => "tree",
        }
    }
}

fn header(kind: Kind, len: usize) -> String {
    format!("{} {len}\0", kind.name())
}

/// The id git gives `content` as an object of `kind`.
pub fn hash(kind: Kind, content: &[u8]) -> Oid {
    let mut sha = Sha1::new();
    sha.update(header(kind, content.len()).as_bytes());
    sha.update(content);
    Oid(sha.finalize().into())
}

/// The object directory of a repository the server owns (never a workspace's).
#[derive(Debug)]
pub struct Objects {
    dir: PathBuf,
    /// Bytes written so far (compressed, as on disk).
    written: AtomicU64,
}

impl Objects {
    /// The objects of the (bare) repository at `repo`.
    pub fn new(repo: &Path) -> Objects {
        Objects { dir: repo.join("objects"), written: AtomicU64::new(0) }
    }

    /// Bytes of objects this handle wrote (as on disk).
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn path(&self, oid: &Oid) -> PathBuf {
        let hex = oid.to_string();
        self.dir.join(&hex[..2]).join(&hex[2..])
    }

    /// Whether `oid` is there as a loose object.
    pub fn has_loose(&self, oid: &Oid) -> bool {
        self.path(oid).exists()
    }

    /// Writes `content` as an object of `kind` unless it is there loose already; its id.
    /// The file is complete before it takes its name (a temporary, then a rename).
    pub fn write(&self, kind: Kind, content: &[u8]) -> std::io::Result<Oid> {
        let oid = hash(kind, content);
        let path = self.path(&oid);
        if path.exists() {
            return Ok(oid);
        }
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let fan = path.parent().unwrap_or(&self.dir);
        std::fs::create_dir_all(fan)?;
        let tmp = self.dir.join(format!("tmp_obj_outboard_{}_{n}", std::process::id()));
        let result = (|| {
            let file = std::fs::File::create(&tmp)?;
            // Git's own default for loose objects (core.looseCompression = 1).
            let mut z = flate2::write::ZlibEncoder::new(file, flate2::Compression::fast());
            z.write_all(header(kind, content.len()).as_bytes())?;
            z.write_all(content)?;
            let file = z.finish()?;
            let bytes = file.metadata()?.len();
            std::fs::rename(&tmp, &path)?;
            self.written.fetch_add(bytes, Ordering::Relaxed);
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map(|()| oid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_gits() {
        // `printf hello | git hash-object --stdin`, and the empty tree.
        assert_eq!(
            hash(Kind::Blob, b"hello").to_string(),
            "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"
        );
        assert_eq!(hash(Kind::Tree, b"").to_string(), "4b825dc642cb6eb9a060e54bf8d69288fbee4904");
        let oid = hash(Kind::Blob, b"x");
        assert_eq!(Oid::parse(&oid.to_string()), Some(oid));
        assert_eq!(Oid::parse("zz"), None);
    }
}
