//! Path routing and confinement. Every path the model gives a file tool is resolved here to a
//! host path beneath the session's workspace root, or refused.
//!
//! CONTRACT: [`Workspace::new`], [`Workspace::root`], [`Workspace::resolve`],
//! [`Workspace::model_path`].
//!
//! Resolution is two steps. First a lexical one: the model writes `/workspace`, `/workspace/…`
//! or a path relative to the workspace; `.`, `..`, repeated and trailing slashes are normalised
//! without touching the disk, and `..` above the root is refused. Then a physical one, because a
//! command run through Bash can plant symlinks: the deepest part of the path that exists is
//! canonicalised and must still lie beneath the canonical root; the rest does not exist yet and
//! consists of plain names, so it cannot hide a link. Symlinks that stay inside are followed;
//! dangling ones are refused (writing through one would create its target wherever it points).
//!
//! Paths shown to the model are always `/workspace/…`, never the host path, which would leak
//! the server's data dir.
//!
//! Known limit: the check and the later open are separate system calls, so a command running
//! concurrently could swap a directory for a symlink in between. Tools and commands of a session
//! run one at a time, which closes that window in practice; `openat2(RESOLVE_BENEATH)` would
//! close it fully but needs a syscall wrapper this crate does not have.

use std::path::{Component, Path, PathBuf};

/// How the model names the workspace root.
pub const WORKSPACE_PREFIX: &str = "/workspace";

/// A session's workspace directory, seen by the model as `/workspace`.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    canonical_root: PathBuf,
}

/// A path the tools refuse.
#[derive(Debug, thiserror::Error)]
pub enum VfsError {
    /// The path leads outside the workspace.
    #[error("{0}")]
    Escapes(String),
    /// The path is not usable at all (empty, contains NUL) or the disk refused to resolve it.
    #[error("{0}")]
    Invalid(String),
}

impl Workspace {
    /// The workspace rooted at `root` (created if missing).
    pub fn new(root: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&root)?;
        let canonical_root = std::fs::canonicalize(&root)?;
        Ok(Workspace { root, canonical_root })
    }

    /// The host directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The host directory with every symlink resolved; resolved paths lie beneath it.
    pub fn canonical_root(&self) -> &Path {
        &self.canonical_root
    }

    /// Resolves a model path to a host path beneath the root. Existing parts are returned
    /// canonicalised (symlinks resolved), so the result is what the tools must open.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, VfsError> {
        let relative = self.lexical(path)?;
        let full = self.canonical_root.join(&relative);

        // Split into the deepest existing ancestor and the missing tail (plain names only).
        let mut existing = full.as_path();
        let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
        loop {
            match std::fs::symlink_metadata(existing) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let (Some(parent), Some(name)) = (existing.parent(), existing.file_name())
                    else {
                        return Err(VfsError::Invalid(format!("{path}: cannot be resolved")));
                    };
                    missing.push(name);
                    existing = parent;
                }
                Err(e) => {
                    return Err(VfsError::Invalid(format!(
                        "{}: cannot be accessed: {e}",
                        display_relative(&relative)
                    )))
                }
            }
        }
        let canonical = std::fs::canonicalize(existing).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                VfsError::Escapes(format!(
                    "{} is a symbolic link whose target does not exist; file tools do not follow \
                     it. Inspect it with `ls -l` in Bash",
                    display_relative(&relative)
                ))
            } else {
                VfsError::Invalid(format!(
                    "{}: cannot be resolved: {e}",
                    display_relative(&relative)
                ))
            }
        })?;
        if !canonical.starts_with(&self.canonical_root) {
            return Err(VfsError::Escapes(format!(
                "{} is a symbolic link (or lies under one) that leads outside the workspace; file \
                 tools only work inside /workspace. Use Bash for files elsewhere",
                display_relative(&relative)
            )));
        }
        let mut resolved = canonical;
        resolved.extend(missing.iter().rev());
        Ok(resolved)
    }

    /// The model's name (`/workspace/…`) for a host path beneath the root. A path outside the
    /// root (which [`Workspace::resolve`] never returns) is shown as `<outside the workspace>`,
    /// so the host layout never leaks.
    pub fn model_path(&self, host: &Path) -> String {
        match host.strip_prefix(&self.canonical_root).or_else(|_| host.strip_prefix(&self.root)) {
            Ok(relative) => display_relative(relative),
            Err(_) => "<outside the workspace>".to_string(),
        }
    }

    /// Normalises `path` lexically to a path relative to the root.
    fn lexical(&self, path: &str) -> Result<PathBuf, VfsError> {
        if path.trim().is_empty() {
            return Err(VfsError::Invalid(
                "the path is empty: give a path such as /workspace/src/main.rs or src/main.rs"
                    .to_string(),
            ));
        }
        if path.contains('\0') {
            return Err(VfsError::Invalid("the path contains a NUL byte".to_string()));
        }
        let outside = || {
            VfsError::Escapes(format!(
                "{path} is outside the workspace: file tools work on /workspace/... or relative \
                 paths; use Bash for other files"
            ))
        };
        let rest = if path.starts_with('/') {
            let rest = path.strip_prefix(WORKSPACE_PREFIX).ok_or_else(outside)?;
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

/// `/workspace/<relative>` (or `/workspace` for the root).
fn display_relative(relative: &Path) -> String {
    if relative.as_os_str().is_empty() {
        WORKSPACE_PREFIX.to_string()
    } else {
        format!("{WORKSPACE_PREFIX}/{}", relative.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path().join("ws")).unwrap();
        std::fs::create_dir_all(ws.root().join("src")).unwrap();
        std::fs::write(ws.root().join("src/main.rs"), "fn main() {}\n").unwrap();
        (dir, ws)
    }

    fn escapes(ws: &Workspace, path: &str) -> String {
        match ws.resolve(path) {
            Err(VfsError::Escapes(msg)) => msg,
            other => panic!("{path} should be refused, got {other:?}"),
        }
    }

    #[test]
    fn model_forms_resolve_beneath_the_root() {
        let (_d, ws) = setup();
        let main = ws.canonical_root().join("src/main.rs");
        for path in [
            "/workspace/src/main.rs",
            "src/main.rs",
            "./src/./main.rs",
            "/workspace//src///main.rs",
            "src/../src/main.rs",
            "/workspace/src/../src/main.rs",
        ] {
            assert_eq!(ws.resolve(path).unwrap(), main, "{path}");
        }
        assert_eq!(ws.resolve("/workspace").unwrap(), ws.canonical_root());
        assert_eq!(ws.resolve("/workspace/").unwrap(), ws.canonical_root());
        assert_eq!(ws.resolve(".").unwrap(), ws.canonical_root());
        assert_eq!(ws.resolve("src/").unwrap(), ws.canonical_root().join("src"));
        assert_eq!(
            ws.resolve("new/dir/file.txt").unwrap(),
            ws.canonical_root().join("new/dir/file.txt")
        );
    }

    #[test]
    fn escapes_are_refused_with_the_valid_root_named() {
        let (_d, ws) = setup();
        let msg = escapes(&ws, "/etc/passwd");
        assert_eq!(
            msg,
            "/etc/passwd is outside the workspace: file tools work on /workspace/... or relative \
             paths; use Bash for other files"
        );
        escapes(&ws, "../x");
        escapes(&ws, "src/../../x");
        escapes(&ws, "/workspace/../../etc/passwd");
        escapes(&ws, "/workspace/..");
        escapes(&ws, "/workspacefoo/x");
        let host = ws.canonical_root().join("src/main.rs");
        escapes(&ws, &host.to_string_lossy());
        assert!(matches!(ws.resolve(""), Err(VfsError::Invalid(_))));
    }

    #[test]
    fn symlinks_leading_outside_are_refused() {
        let (dir, ws) = setup();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        symlink("/etc", ws.root().join("etc")).unwrap();
        symlink("/etc/passwd", ws.root().join("passwd")).unwrap();
        symlink(&outside, ws.root().join("src/out")).unwrap();
        symlink("/nonexistent/new-file", ws.root().join("dangling")).unwrap();

        let msg = escapes(&ws, "etc/passwd");
        assert!(msg.starts_with("/workspace/etc/passwd is a symbolic link"), "{msg}");
        assert!(!msg.contains(&*dir.path().to_string_lossy()), "no host path: {msg}");
        escapes(&ws, "/workspace/passwd");
        escapes(&ws, "etc");
        escapes(&ws, "src/out/secret");
        escapes(&ws, "src/out/not-yet/created.txt");
        escapes(&ws, "dangling");
    }

    #[test]
    fn symlinks_inside_the_workspace_work() {
        let (_d, ws) = setup();
        symlink("src", ws.root().join("code")).unwrap();
        symlink(ws.root().join("src/main.rs"), ws.root().join("main-link.rs")).unwrap();
        let main = ws.canonical_root().join("src/main.rs");
        assert_eq!(ws.resolve("code/main.rs").unwrap(), main);
        assert_eq!(ws.resolve("main-link.rs").unwrap(), main);
        assert_eq!(ws.resolve("code/new.rs").unwrap(), ws.canonical_root().join("src/new.rs"));
    }

    #[test]
    fn model_paths_hide_the_host() {
        let (_d, ws) = setup();
        let p = ws.resolve("src/main.rs").unwrap();
        assert_eq!(ws.model_path(&p), "/workspace/src/main.rs");
        assert_eq!(ws.model_path(ws.canonical_root()), "/workspace");
        assert_eq!(ws.model_path(Path::new("/etc/passwd")), "<outside the workspace>");
    }
}
