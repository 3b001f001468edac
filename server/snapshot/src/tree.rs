//! Tree objects from a flat list of paths.

use std::collections::BTreeMap;

use crate::objects::{Kind, Objects, Oid};

/// A regular file.
pub const MODE_FILE: u32 = 0o100644;
/// An executable file.
pub const MODE_EXEC: u32 = 0o100755;
/// A symbolic link (its blob is the target).
pub const MODE_LINK: u32 = 0o120000;
/// A gitlink: a commit of another repository, kept opaque (never entered).
pub const MODE_GITLINK: u32 = 0o160000;
/// A directory.
pub const MODE_TREE: u32 = 0o40000;

/// One file of a tree: its `/`-separated path from the top, mode and object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The path, `/`-separated, no leading slash.
    pub path: Vec<u8>,
    /// [`MODE_FILE`], [`MODE_EXEC`], [`MODE_LINK`] or [`MODE_GITLINK`].
    pub mode: u32,
    /// The blob (or, for a gitlink, the commit).
    pub oid: Oid,
}

#[derive(Default)]
struct Dir<'a> {
    files: Vec<(&'a [u8], u32, Oid)>,
    dirs: BTreeMap<&'a [u8], Dir<'a>>,
}

impl<'a> Dir<'a> {
    fn insert(&mut self, path: &'a [u8], mode: u32, oid: Oid) {
        match path.iter().position(|&b| b == b'/') {
            Some(i) => self.dirs.entry(&path[..i]).or_default().insert(&path[i + 1..], mode, oid),
            None => self.files.push((path, mode, oid)),
        }
    }

    /// Writes this directory's tree (and its subtrees); `None` when it holds no file at all.
    fn write(&self, objects: &Objects) -> std::io::Result<Option<Oid>> {
        let mut items: Vec<(Vec<u8>, u32, Oid)> = Vec::new();
        for (name, mode, oid) in &self.files {
            items.push((name.to_vec(), *mode, *oid));
        }
        for (name, dir) in &self.dirs {
            if let Some(oid) = dir.write(objects)? {
                items.push((name.to_vec(), MODE_TREE, oid));
            }
        }
        if items.is_empty() {
            return Ok(None);
        }
        // Git's order: by name, a directory's name compared as if it ended with '/'.
        let key = |(name, mode, _): &(Vec<u8>, u32, Oid)| {
            let mut k = name.clone();
            if *mode == MODE_TREE {
                k.push(b'/');
            }
            k
        };
        items.sort_by_cached_key(key);
        let mut content = Vec::with_capacity(items.len() * 40);
        for (name, mode, oid) in &items {
            content.extend_from_slice(format!("{mode:o} ").as_bytes());
            content.extend_from_slice(name);
            content.push(0);
            content.extend_from_slice(&oid.0);
        }
        objects.write(Kind::Tree, &content).map(Some)
    }
}

/// Writes the trees of `entries` (paths unique; any order) and returns the top one's id (the
/// empty tree's when there is no entry).
pub fn write_trees(objects: &Objects, entries: &[Entry]) -> std::io::Result<Oid> {
    let mut top = Dir::default();
    for e in entries {
        top.insert(&e.path, e.mode, e.oid);
    }
    match top.write(objects)? {
        Some(oid) => Ok(oid),
        None => objects.write(Kind::Tree, b""),
    }
}
