//! Path routing and confinement. Every path the model gives a file tool is resolved here to a
//! host path beneath the session's workspace root, or refused.
//!
//! CONTRACT: [`Workspace::new`], [`Workspace::root`], [`Workspace::resolve`].

use std::path::{Path, PathBuf};

/// A session's workspace directory, seen by the model as `/workspace`.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

/// A path the tools refuse.
#[derive(Debug, thiserror::Error)]
pub enum VfsError {
    /// The path leads outside the workspace.
    #[error("{0}")]
    Escapes(String),
}

impl Workspace {
    /// The workspace rooted at `root` (created if missing).
    pub fn new(root: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&root)?;
        Ok(Workspace { root })
    }

    /// The host directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a model path to a host path beneath the root.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, VfsError> {
        Err(VfsError::Escapes(format!("{path}: not built yet")))
    }
}
