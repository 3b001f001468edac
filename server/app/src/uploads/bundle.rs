//! An upload's history bundle, read by the server itself before git runs on it: the bundle's
//! refs and pack are parsed here, and a bundle past one of the bounds below is refused before
//! `git fetch` or `git reset` does any work.
//!
//! Why: git expands what a bundle describes. A "tree bomb" — a tree naming one subtree twice,
//! that subtree naming the next twice, 19 levels — is a few hundred bytes of objects, and
//! `git reset` makes an index entry for every path it describes (2^19 of them: 38 s, a 52 MiB
//! index, each level doubling). Counting a tree's entries takes one visit per distinct tree
//! when the count of each is remembered, so the expansion is known before it happens.
//!
//! What is checked, in this order, each with its bound:
//! - the header: a v2 or v3 bundle of SHA-1 objects without prerequisites (a bundle that needs
//!   commits the new repository does not have could not be restored anyway);
//! - objects: the pack's own count, at most [`MAX_OBJECTS`], read from its header before any
//!   object;
//! - inflated bytes: every object is inflated once to find where it ends and to hash it (what
//!   git's `index-pack` does too); the sizes their headers declare add up to at most
//!   [`MAX_INFLATED_BYTES`], checked before each object is inflated;
//! - deltas: only commits and trees are rebuilt from deltas (blobs never are), at most
//!   [`MAX_DELTA_BYTES`] produced in all and chains at most [`MAX_DELTA_CHAIN`] long;
//! - entries and depth: the tree of every commit a ref names, counted with each distinct tree
//!   visited once, expands to at most the org's `upload_files_per_day` entries (the paths the
//!   index would hold) and nests at most [`super::unpack::MAX_DEPTH`] directories.
//!
//! A bundle whose trees name objects this reading cannot find (a thin pack, a delta on a base
//! it does not hold) is refused: git could not restore it either.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use flate2::{Decompress, FlushDecompress, Status};
use sha1::{Digest as _, Sha1};

/// Objects a bundle's pack may hold: a repository whose history packs into the upload cap
/// holds far fewer, and the reading keeps about 60 bytes per object.
pub const MAX_OBJECTS: u64 = 1_000_000;

/// Bytes the pack's objects may inflate to in all: ten times the default upload cap, more than
/// a source history compresses from, while a zlib bomb (1,000 to 1) is stopped at its header.
pub const MAX_INFLATED_BYTES: u64 = 2 << 30;

/// Bytes rebuilding commits and trees from deltas may produce in all.
pub const MAX_DELTA_BYTES: u64 = 512 << 20;

/// The longest delta chain followed (git's own `pack.depth` is at most 4,095).
pub const MAX_DELTA_CHAIN: usize = 4_095;

/// Resolved commits and trees kept to rebuild the deltas on them.
const CACHE_BYTES: usize = 64 << 20;

type Oid = [u8; 20];

/// What a bundle holds, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Objects in its pack.
    pub objects: u64,
    /// Paths the largest tree a ref names expands to.
    pub entries: u64,
    /// Its deepest directory nesting.
    pub depth: u64,
    /// Commits and trees rebuilt from deltas.
    pub rebuilt: u64,
}

/// Why a bundle is refused; the message completes "the history bundle …".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a bundle this reading understands.
    #[error("is not a git bundle this server can read ({0})")]
    Malformed(String),
    /// One of the bounds.
    #[error("is refused before git reads it: {0}")]
    Bound(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Commit,
    Tree,
    Blob,
    Tag,
    OfsDelta(u64),
    RefDelta(Oid),
}

#[derive(Debug, Clone)]
struct Object {
    kind: Kind,
    /// Where its compressed data starts.
    data: u64,
}

fn malformed(what: impl Into<String>) -> Refusal {
    Refusal::Malformed(what.into())
}

/// Checks the bundle at `path` against the bounds of the module header; `max_entries` is the
/// org's `upload_files_per_day`, `max_depth` the unpack's depth bound.
pub fn check(path: &Path, max_entries: u64, max_depth: u64) -> Result<Checked, Refusal> {
    let file = File::open(path).map_err(|e| malformed(format!("cannot be opened: {e}")))?;
    let len = file.metadata().map_err(|e| malformed(e.to_string()))?.len();
    let mut at = 0u64;
    let line = |at: &mut u64| -> Result<String, Refusal> {
        let mut buf = Vec::new();
        loop {
            let mut b = [0u8; 1];
            if file.read_at(&mut b, *at).map_err(|e| malformed(e.to_string()))? == 0 {
                return Err(malformed("ends in its header"));
            }
            *at += 1;
            if b[0] == b'\n' {
                break;
            }
            buf.push(b[0]);
            if buf.len() > 4096 {
                return Err(malformed("a header line is longer than 4096 bytes"));
            }
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    let first = line(&mut at)?;
    if first != "# v2 git bundle" && first != "# v3 git bundle" {
        return Err(malformed("its first line is not `# v2 git bundle` or `# v3 git bundle`"));
    }
    let mut tips: Vec<Oid> = Vec::new();
    loop {
        let l = line(&mut at)?;
        if l.is_empty() {
            break;
        }
        if let Some(cap) = l.strip_prefix('@') {
            if cap.starts_with("object-format=") && cap != "object-format=sha1" {
                return Err(malformed("only SHA-1 repositories are taken"));
            }
            continue;
        }
        if l.starts_with('-') {
            return Err(malformed(
                "it needs commits the new repository does not have (prerequisites): bundle the \
                 whole branch",
            ));
        }
        let hex = l.split(' ').next().unwrap_or_default();
        tips.push(parse_hex(hex).ok_or_else(|| malformed("a ref line is not `OID NAME`"))?);
        if tips.len() > 100_000 {
            return Err(Refusal::Bound("it names more than 100,000 refs".into()));
        }
    }
    let pack_start = at;
    let mut head = [0u8; 12];
    if file.read_at(&mut head, at).map_err(|e| malformed(e.to_string()))? != 12
        || &head[..4] != b"PACK"
    {
        return Err(malformed("no pack follows its refs"));
    }
    let version = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    if version != 2 && version != 3 {
        return Err(malformed(format!("pack version {version}")));
    }
    let count = u64::from(u32::from_be_bytes([head[8], head[9], head[10], head[11]]));
    if count > MAX_OBJECTS {
        return Err(Refusal::Bound(format!(
            "its pack holds {count} objects, more than the {MAX_OBJECTS} a history bundle may hold"
        )));
    }
    at += 12;
    let mut reader = Pack { file: &file, len, inflater: Decompress::new(true), inflated: 0 };
    // Pass 1: every object's header; the whole ones hashed, the deltas noted.
    let mut objects: Vec<(u64, Object)> = Vec::with_capacity(count as usize);
    let mut by_oid: HashMap<Oid, u64> = HashMap::new();
    for _ in 0..count {
        let offset = at;
        let (kind, size) = reader.header(&mut at, offset, pack_start)?;
        let data = at;
        let hashed = match kind {
            Kind::Commit | Kind::Tree | Kind::Blob | Kind::Tag => Some(kind_name(kind)),
            Kind::OfsDelta(_) | Kind::RefDelta(_) => None,
        };
        let mut hasher = hashed.map(|name| {
            let mut h = Sha1::new();
            h.update(format!("{name} {size}\0").as_bytes());
            h
        });
        at += reader.inflate(data, size, &mut |chunk| {
            if let Some(h) = hasher.as_mut() {
                h.update(chunk);
            }
        })?;
        if let Some(h) = hasher {
            by_oid.insert(h.finalize().into(), offset);
        }
        objects.push((offset, Object { kind, data }));
    }
    let index: HashMap<u64, usize> =
        objects.iter().enumerate().map(|(i, (offset, _))| (*offset, i)).collect();
    let mut resolver = Resolver {
        reader,
        objects: &objects,
        index: &index,
        cache: HashMap::new(),
        cached: 0,
        produced: 0,
    };
    // Pass 2: the deltas on commits and trees rebuilt and hashed (their chains followed by
    // offset; a chain through a base named by id waits until that base is known).
    let mut found: HashMap<Oid, u64> = by_oid;
    let mut rebuilt: std::collections::HashSet<u64> = std::collections::HashSet::new();
    loop {
        let mut progress = false;
        for (offset, object) in &objects {
            if !matches!(object.kind, Kind::OfsDelta(_) | Kind::RefDelta(_)) {
                continue;
            }
            if rebuilt.contains(offset) {
                continue;
            }
            let Some(root) = resolver.root_kind(*offset, &found)? else { continue };
            if !matches!(root, Kind::Commit | Kind::Tree) {
                continue;
            }
            let content = resolver.resolve(*offset, &found)?;
            rebuilt.insert(*offset);
            let mut h = Sha1::new();
            h.update(format!("{} {}\0", kind_name(root), content.len()).as_bytes());
            h.update(&content);
            found.insert(h.finalize().into(), *offset);
            progress = true;
        }
        if !progress {
            break;
        }
    }
    // The trees of every tip, each distinct tree counted once.
    let mut walk = Walk { resolver: &mut resolver, found: &found, memo: HashMap::new(), max_depth };
    let (mut entries, mut depth) = (0u64, 0u64);
    for tip in &tips {
        let (kind, content) = walk.object(tip)?;
        if kind != Kind::Commit {
            continue; // a tag or a tree as a ref: nothing git checks out from it here
        }
        let tree = commit_tree(&content).ok_or_else(|| malformed("a commit names no tree"))?;
        let (e, d) = walk.tree(&tree, 1)?;
        entries = entries.max(e);
        depth = depth.max(d);
        if entries > max_entries {
            return Err(Refusal::Bound(format!(
                "a commit's tree expands to more than {max_entries} paths (the org's \
                 upload_files_per_day quota); a git \"tree bomb\" names the same subtree over \
                 and over"
            )));
        }
    }
    Ok(Checked { objects: count, entries, depth, rebuilt: rebuilt.len() as u64 })
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Commit => "commit",
        Kind::Tree => "tree",
        Kind::Blob => "blob",
        Kind::Tag => "tag",
        Kind::OfsDelta(_) | Kind::RefDelta(_) => "delta",
    }
}

fn parse_hex(hex: &str) -> Option<Oid> {
    if hex.len() != 40 {
        return None;
    }
    let mut oid = [0u8; 20];
    for (i, b) in oid.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(oid)
}

fn commit_tree(content: &[u8]) -> Option<Oid> {
    let first = content.split(|b| *b == b'\n').next()?;
    parse_hex(std::str::from_utf8(first.strip_prefix(b"tree ")?).ok()?)
}

/// The pack file, read at offsets.
struct Pack<'a> {
    file: &'a File,
    len: u64,
    inflater: Decompress,
    inflated: u64,
}

impl Pack<'_> {
    fn byte(&self, at: &mut u64) -> Result<u8, Refusal> {
        let mut b = [0u8; 1];
        if *at >= self.len
            || self.file.read_at(&mut b, *at).map_err(|e| malformed(e.to_string()))? == 0
        {
            return Err(malformed("its pack ends in an object"));
        }
        *at += 1;
        Ok(b[0])
    }

    /// An object's header at `offset`: its kind and inflated size.
    fn header(&self, at: &mut u64, offset: u64, pack_start: u64) -> Result<(Kind, u64), Refusal> {
        let mut b = self.byte(at)?;
        let kind = (b >> 4) & 7;
        let mut size = u64::from(b & 15);
        let mut shift = 4;
        while b & 0x80 != 0 {
            b = self.byte(at)?;
            if shift > 56 {
                return Err(malformed("an object's size does not fit 64 bits"));
            }
            size |= u64::from(b & 0x7f) << shift;
            shift += 7;
        }
        let kind = match kind {
            1 => Kind::Commit,
            2 => Kind::Tree,
            3 => Kind::Blob,
            4 => Kind::Tag,
            6 => {
                let mut b = self.byte(at)?;
                let mut back = u64::from(b & 0x7f);
                while b & 0x80 != 0 {
                    b = self.byte(at)?;
                    back = back
                        .checked_add(1)
                        .and_then(|v| v.checked_mul(128))
                        .ok_or_else(|| malformed("a delta's base offset overflows"))?
                        + u64::from(b & 0x7f);
                }
                let base = offset
                    .checked_sub(back)
                    .filter(|b| *b >= pack_start + 12)
                    .ok_or_else(|| malformed("a delta's base is before the pack"))?;
                Kind::OfsDelta(base)
            }
            7 => {
                let mut oid = [0u8; 20];
                for b in &mut oid {
                    *b = self.byte(at)?;
                }
                Kind::RefDelta(oid)
            }
            other => return Err(malformed(format!("an object of unknown type {other}"))),
        };
        Ok((kind, size))
    }

    /// Inflates the zlib stream at `at`, which must give exactly `size` bytes, into `sink`;
    /// returns the compressed length.
    fn inflate(&mut self, at: u64, size: u64, sink: &mut dyn FnMut(&[u8])) -> Result<u64, Refusal> {
        self.inflated = self.inflated.saturating_add(size);
        if self.inflated > MAX_INFLATED_BYTES {
            return Err(Refusal::Bound(format!(
                "its objects inflate to more than {MAX_INFLATED_BYTES} bytes"
            )));
        }
        self.inflater.reset(true);
        let mut input = vec![0u8; 64 * 1024];
        let mut output = vec![0u8; 64 * 1024];
        let (mut pos, mut buffered, mut start) = (at, 0usize, 0usize);
        let mut out_total = 0u64;
        loop {
            if start == buffered {
                buffered =
                    self.file.read_at(&mut input, pos).map_err(|e| malformed(e.to_string()))?;
                start = 0;
            }
            let (before_in, before_out) = (self.inflater.total_in(), self.inflater.total_out());
            let status = self
                .inflater
                .decompress(&input[start..buffered], &mut output, FlushDecompress::None)
                .map_err(|e| malformed(format!("an object is not zlib data: {e}")))?;
            let used = (self.inflater.total_in() - before_in) as usize;
            let made = (self.inflater.total_out() - before_out) as usize;
            start += used;
            pos += used as u64;
            out_total += made as u64;
            if out_total > size {
                return Err(malformed("an object inflates past its declared size"));
            }
            sink(&output[..made]);
            match status {
                Status::StreamEnd => break,
                _ if used == 0 && made == 0 && buffered == 0 => {
                    return Err(malformed("its pack ends in an object"));
                }
                _ => {}
            }
        }
        if out_total != size {
            return Err(malformed("an object inflates short of its declared size"));
        }
        Ok(pos - at)
    }
}

struct Resolver<'a> {
    reader: Pack<'a>,
    objects: &'a [(u64, Object)],
    index: &'a HashMap<u64, usize>,
    cache: HashMap<u64, std::rc::Rc<Vec<u8>>>,
    cached: usize,
    produced: u64,
}

impl Resolver<'_> {
    fn object(&self, offset: u64) -> Result<&Object, Refusal> {
        self.index
            .get(&offset)
            .map(|i| &self.objects[*i].1)
            .ok_or_else(|| malformed("a delta's base is not an object of the pack"))
    }

    /// The chain from `offset` to its whole base (the base first), or `None` when a base named
    /// by id is not known yet.
    fn chain(&self, offset: u64, found: &HashMap<Oid, u64>) -> Result<Option<Vec<u64>>, Refusal> {
        let mut chain = vec![offset];
        let mut at = offset;
        loop {
            let base = match self.object(at)?.kind {
                Kind::OfsDelta(base) => base,
                Kind::RefDelta(oid) => match found.get(&oid) {
                    Some(base) => *base,
                    None => return Ok(None),
                },
                _ => break,
            };
            if chain.len() > MAX_DELTA_CHAIN {
                return Err(Refusal::Bound(format!(
                    "a delta chain is longer than {MAX_DELTA_CHAIN}"
                )));
            }
            chain.push(base);
            at = base;
        }
        chain.reverse();
        Ok(Some(chain))
    }

    fn root_kind(&self, offset: u64, found: &HashMap<Oid, u64>) -> Result<Option<Kind>, Refusal> {
        match self.chain(offset, found)? {
            Some(chain) => Ok(Some(self.object(chain[0])?.kind)),
            None => Ok(None),
        }
    }

    fn raw(&mut self, offset: u64) -> Result<Vec<u8>, Refusal> {
        let object = self.object(offset)?.clone();
        let mut at = offset;
        let (_, size) = self.reader.header(&mut at, offset, 0)?;
        if size > MAX_DELTA_BYTES {
            return Err(Refusal::Bound(format!(
                "a commit or tree is larger than {MAX_DELTA_BYTES} bytes"
            )));
        }
        let mut content = Vec::with_capacity(size as usize);
        // Counted once already in pass 1: only the work of producing it again is bounded here.
        self.reader.inflated = self.reader.inflated.saturating_sub(size);
        self.reader.inflate(object.data, size, &mut |c| content.extend_from_slice(c))?;
        Ok(content)
    }

    /// The whole content of the object at `offset` (a delta rebuilt on its chain).
    fn resolve(&mut self, offset: u64, found: &HashMap<Oid, u64>) -> Result<Vec<u8>, Refusal> {
        if let Some(hit) = self.cache.get(&offset) {
            return Ok(hit.as_ref().clone());
        }
        let chain = self
            .chain(offset, found)?
            .ok_or_else(|| malformed("a delta's base is not in the bundle (a thin pack)"))?;
        let mut content = self.raw(chain[0])?;
        for link in &chain[1..] {
            if let Some(hit) = self.cache.get(link) {
                content = hit.as_ref().clone();
                continue;
            }
            let delta = self.raw(*link)?;
            content = apply_delta(&content, &delta)?;
            self.produced = self.produced.saturating_add(content.len() as u64);
            if self.produced > MAX_DELTA_BYTES {
                return Err(Refusal::Bound(format!(
                    "rebuilding its commits and trees from deltas makes more than \
                     {MAX_DELTA_BYTES} bytes"
                )));
            }
            if self.cached + content.len() > CACHE_BYTES {
                self.cache.clear();
                self.cached = 0;
            }
            self.cached += content.len();
            self.cache.insert(*link, std::rc::Rc::new(content.clone()));
        }
        Ok(content)
    }
}

fn delta_size(delta: &[u8], at: &mut usize) -> Result<u64, Refusal> {
    let mut size = 0u64;
    let mut shift = 0;
    loop {
        let b = *delta.get(*at).ok_or_else(|| malformed("a delta ends in its header"))?;
        *at += 1;
        if shift > 56 {
            return Err(malformed("a delta's size does not fit 64 bits"));
        }
        size |= u64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            return Ok(size);
        }
    }
}

/// git's delta format: the base's size, the result's, then copies from the base and inserts.
fn apply_delta(base: &[u8], delta: &[u8]) -> Result<Vec<u8>, Refusal> {
    let bad = || malformed("a delta does not apply to its base");
    let mut at = 0;
    if delta_size(delta, &mut at)? != base.len() as u64 {
        return Err(bad());
    }
    let size = delta_size(delta, &mut at)?;
    if size > MAX_DELTA_BYTES {
        return Err(Refusal::Bound(format!("a delta makes more than {MAX_DELTA_BYTES} bytes")));
    }
    let mut out = Vec::with_capacity(size as usize);
    while at < delta.len() {
        let op = delta[at];
        at += 1;
        if op & 0x80 != 0 {
            let mut field = |bits: &[(u8, u32)]| -> Result<u64, Refusal> {
                let mut v = 0u64;
                for (bit, shift) in bits {
                    if op & bit != 0 {
                        v |= u64::from(*delta.get(at).ok_or_else(bad)?) << shift;
                        at += 1;
                    }
                }
                Ok(v)
            };
            let offset = field(&[(0x01, 0), (0x02, 8), (0x04, 16), (0x08, 24)])? as usize;
            let n = match field(&[(0x10, 0), (0x20, 8), (0x40, 16)])? {
                0 => 0x10000,
                n => n as usize,
            };
            let end = offset.checked_add(n).ok_or_else(bad)?;
            out.extend_from_slice(base.get(offset..end).ok_or_else(bad)?);
        } else if op != 0 {
            let n = op as usize;
            out.extend_from_slice(delta.get(at..at + n).ok_or_else(bad)?);
            at += n;
        } else {
            return Err(bad());
        }
        if out.len() as u64 > size {
            return Err(bad());
        }
    }
    if out.len() as u64 != size {
        return Err(bad());
    }
    Ok(out)
}

struct Walk<'r, 'a> {
    resolver: &'r mut Resolver<'a>,
    found: &'r HashMap<Oid, u64>,
    /// Each distinct tree's (paths, depth).
    memo: HashMap<Oid, (u64, u64)>,
    max_depth: u64,
}

impl Walk<'_, '_> {
    fn object(&mut self, oid: &Oid) -> Result<(Kind, Vec<u8>), Refusal> {
        let offset = *self
            .found
            .get(oid)
            .ok_or_else(|| malformed("a ref or tree names an object the bundle does not hold"))?;
        let chain = self.resolver.chain(offset, self.found)?.ok_or_else(|| malformed("thin"))?;
        let kind = self.resolver.object(chain[0])?.kind;
        Ok((kind, self.resolver.resolve(offset, self.found)?))
    }

    /// The paths under tree `oid` and its depth, `level` being its own nesting.
    fn tree(&mut self, oid: &Oid, level: u64) -> Result<(u64, u64), Refusal> {
        if level > self.max_depth {
            return Err(Refusal::Bound(format!(
                "its trees nest deeper than {} directories",
                self.max_depth
            )));
        }
        if let Some(known) = self.memo.get(oid) {
            if level + known.1 - 1 > self.max_depth {
                return Err(Refusal::Bound(format!(
                    "its trees nest deeper than {} directories",
                    self.max_depth
                )));
            }
            return Ok(*known);
        }
        let (kind, content) = self.object(oid)?;
        if kind != Kind::Tree {
            return Err(malformed("a tree entry names a directory that is not a tree"));
        }
        let (mut paths, mut depth) = (0u64, 1u64);
        let mut rest = &content[..];
        while !rest.is_empty() {
            let nul = rest.iter().position(|b| *b == 0).ok_or_else(|| malformed("a tree entry"))?;
            let header = &rest[..nul];
            let child: Oid = rest
                .get(nul + 1..nul + 21)
                .and_then(|s| s.try_into().ok())
                .ok_or_else(|| malformed("a tree entry is cut short"))?;
            rest = &rest[nul + 21..];
            if header.starts_with(b"40000 ") {
                let (p, d) = self.tree(&child, level + 1)?;
                paths = paths.saturating_add(p);
                depth = depth.max(d + 1);
            } else {
                paths = paths.saturating_add(1);
            }
        }
        self.memo.insert(*oid, (paths, depth));
        Ok((paths, depth))
    }
}
