//! The workspace as bytes: snapshots of a workspace written as git objects into the server's
//! own repository, and trees restored from it, without any program — git included — running
//! over the workspace, and without reading any configuration, hook, attribute or driver from it.
//!
//! CONTRACT: [`snapshot()`] (workspace → tree, with a stat [`Cache`]), [`restore()`] (tree →
//! workspace, through [`Blobs`]), [`copy_dir`] (a directory copied as bytes, within a limit),
//! [`Objects`], [`Oid`], [`Entry`], [`write_trees`].
//!
//! Why: the server runs as root outside every sandbox, and the workspace is written by the
//! sandbox. Git, run over a work tree, executes what the tree's repositories configure — a
//! nested repository's `core.fsmonitor` runs when `git add` asks whether that "submodule" is
//! dirty, and git clears the environment overrides that would stop it — and follows links it
//! `lstat`ed a moment before. So the host reads the workspace only through the confined open
//! of `outboard-vfs` (descriptors, no link followed, limits), hashes and compresses in
//! process, and writes loose objects into the shadow repository, which git then diffs,
//! commits and pushes as the server's own data. Restores write through the exact operations of
//! `outboard-vfs` the same way.
//!
//! Floor 3: uses `outboard-vfs` only; the git program (reading the server's own repository) is
//! the caller's, behind [`Blobs`].

pub mod cache;
pub mod copy;
pub mod objects;
pub mod restore;
pub mod snapshot;
pub mod tree;

#[cfg(test)]
mod tests;

pub use cache::Cache;
pub use copy::{copy_dir, CopyError};
pub use objects::{Kind, Objects, Oid};
pub use restore::{restore, Blobs, RestoreError, Restored};
pub use snapshot::{snapshot, Snapshot, SnapshotError, TooLarge, MAX_FILE_BYTES};
pub use tree::{write_trees, Entry, MODE_EXEC, MODE_FILE, MODE_GITLINK, MODE_LINK, MODE_TREE};
