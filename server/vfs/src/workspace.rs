//! The session's workspace on the host, served without waking the sandbox: every open goes through
//! [`crate::confined`] beneath its root, so a symlink a command planted cannot lead out.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::confined::{ConfinedError, Root};
use crate::error::VfsError;
use crate::route::{check_basic, shorten, ROOTS_HINT, WORKSPACE_PREFIX};

/// A session's workspace directory, seen by the model as `/workspace` (or another directory
/// mounted at a prefix, see [`Workspace::mount`]).
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    canonical_root: PathBuf,
    prefix: &'static str,
    /// The root directory's descriptor, opened once; all access goes through it.
    dir: Arc<Root>,
    /// Whether it counts against the org's `workspace_bytes` quota: a directory the server made
    /// for the session does; a user's own directory worked on in place does not (it is theirs,
    /// and measuring a real repository after every command would cost more than it protects).
    metered: bool,
}

impl Workspace {
    /// The workspace rooted at `root` (created if missing).
    pub fn new(root: PathBuf) -> std::io::Result<Self> {
        Self::mount(root, WORKSPACE_PREFIX)
    }

    /// The directory `root` (created if missing) seen by the model as `prefix`.
    pub fn mount(root: PathBuf, prefix: &'static str) -> std::io::Result<Self> {
        std::fs::create_dir_all(&root)?;
        let canonical_root = std::fs::canonicalize(&root)?;
        let dir = Arc::new(Root::open(&canonical_root)?);
        Ok(Workspace { root, canonical_root, prefix, dir, metered: true })
    }

    /// The same workspace, not counted against the `workspace_bytes` quota (a user's own
    /// directory, worked on in place).
    pub fn unmetered(mut self) -> Self {
        self.metered = false;
        self
    }

    /// Whether the workspace counts against the org's `workspace_bytes` quota.
    pub fn metered(&self) -> bool {
        self.metered
    }

    /// How the model names the root (`/workspace`).
    pub fn prefix(&self) -> &'static str {
        self.prefix
    }

    /// The host directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The host directory with every symlink resolved; resolved paths lie beneath it.
    pub fn canonical_root(&self) -> &Path {
        &self.canonical_root
    }

    /// The confined root: every open, read, write and walk of this tree goes through it.
    pub fn confined(&self) -> &Root {
        &self.dir
    }

    /// A model path as a path relative to the root (lexical; see the module header).
    pub fn relative(&self, path: &str) -> Result<PathBuf, VfsError> {
        self.lexical(path)
    }

    /// Names the host path a model path leads to now (symlinks inside resolved, the missing
    /// tail appended), for the read ledger and messages. Refuses what leads outside or through
    /// a dangling symlink. Never open the result: open through [`Workspace::confined`].
    pub fn resolve(&self, path: &str) -> Result<PathBuf, VfsError> {
        let relative = self.lexical(path)?;
        self.dir.resolve_name(&relative).map_err(|e| self.refusal(&relative, e))
    }

    /// A [`ConfinedError`] about `relative` as a [`VfsError`] with the model's wording.
    pub fn refusal(&self, relative: &Path, e: ConfinedError) -> VfsError {
        let shown = self.display(relative);
        match e {
            ConfinedError::Escapes | ConfinedError::DanglingLink => {
                VfsError::Escapes(e.describe(&shown))
            }
            e => VfsError::Invalid(e.describe(&shown)),
        }
    }

    /// The model's name (`/workspace/…`) for a host path beneath the root. A path outside the
    /// root (which [`Workspace::resolve`] never returns) is shown as `<outside the workspace>`,
    /// so the host layout never leaks.
    pub fn model_path(&self, host: &Path) -> String {
        match host.strip_prefix(&self.canonical_root).or_else(|_| host.strip_prefix(&self.root)) {
            Ok(relative) => self.display_relative(relative),
            Err(_) => format!("<outside {}>", self.prefix),
        }
    }

    /// Normalises `path` lexically to a path relative to the root.
    fn lexical(&self, path: &str) -> Result<PathBuf, VfsError> {
        check_basic(path)?;
        let outside = || {
            VfsError::Escapes(format!(
                "{} is outside {}: {ROOTS_HINT}. Use Bash for other files",
                shorten(path),
                self.prefix
            ))
        };
        let rest = if path.starts_with('/') {
            let rest = path.strip_prefix(self.prefix).ok_or_else(outside)?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return Err(outside());
            }
            rest.trim_start_matches('/')
        } else {
            path
        };
        let mut out = PathBuf::new();
        for component in Path::new(rest).components() {
            match component {
                Component::Normal(name) => out.push(name),
                Component::CurDir | Component::RootDir => {}
                Component::ParentDir => {
                    if !out.pop() {
                        return Err(outside());
                    }
                }
                Component::Prefix(_) => return Err(outside()),
            }
        }
        Ok(out)
    }
}

impl Workspace {
    /// `/workspace/<relative>` (or `/workspace` for the root) for a path relative to the root.
    pub fn display(&self, relative: &Path) -> String {
        self.display_relative(relative)
    }

    fn display_relative(&self, relative: &Path) -> String {
        if relative.as_os_str().is_empty() {
            self.prefix.to_string()
        } else {
            format!("{}/{}", self.prefix, relative.display())
        }
    }
}
