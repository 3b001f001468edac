//! Path routing and confinement: every path the model gives a file tool goes through
//! [`route`], which decides where the file lives, or refuses it.
//!
//! CONTRACT: [`route`], [`Route`], [`OrgPath`], [`Workspace::new`], [`Workspace::mount`],
//! [`Workspace::root`], [`Workspace::confined`], [`Workspace::relative`],
//! [`Workspace::resolve`], [`Workspace::model_path`], [`Workspace::display`].
//!
//! The three kinds of path (docs/ARCHITECTURE.md, `vfs.rs` and "Org files"):
//! - `/memory/**`, `/skills/**` and `/agents/**`: the org's shared files, in the store
//!   ([`crate::orgfs`]); routed as an [`OrgPath`].
//! - `/workspace/**` and relative paths: the session's workspace on the host.
//! - anything else: refused, naming the valid roots (Bash reaches the rest of the sandbox).
//!
//! Normalisation comes first and is purely lexical: repeated slashes, `.` and trailing slashes
//! go; `..` climbs within the path's own namespace, and a `..` that would climb out of it
//! (`/memory/../workspace/x`, `/workspace/..`) is refused rather than re-routed, because a
//! model that writes it is confused about where the file is, and a silent re-route would put
//! a shared file in a private place or the reverse.
//!
//! Workspace access then goes through [`confined`]: the lexical path, relative to the root, is
//! resolved and opened in one `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` call on the root
//! directory's descriptor (opened once per [`Workspace`]), so symlinks that stay inside are
//! followed and nothing outside is ever reached, even while a command swaps directories and
//! links under the tools' feet. [`Workspace::resolve`] only *names* where a path leads (the
//! read ledger's key, messages); nothing opens the host path it returns. The same [`Workspace`]
//! type also serves the read-only projection of the org files ([`Workspace::mount`] with prefix
//! `/memory`, `/skills` or `/agents`), so `Glob` and `Grep` search them with the same code.
//!
//! Paths shown to the model are always `/workspace/…` (or `/memory/…`, `/skills/…`, `/agents/…`), never the
//! host path, which would leak the server's data dir.
//!
//! Names are also refused when they hold Unicode bidirectional controls: a file name reaches
//! every org member's system prompt (the skills index) and the TUI, where such characters can
//! make text read differently from what it is ("Trojan Source").

pub mod confined;

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use confined::{ConfinedError, Root};

/// How the model names the workspace root.
pub const WORKSPACE_PREFIX: &str = "/workspace";
/// The org's shared memory.
pub const MEMORY_PREFIX: &str = "/memory";
/// The org's shared skills.
pub const SKILLS_PREFIX: &str = "/skills";
/// The org's agent types (`/agents/NAME.md`, see [`crate::orgfs::agents`]).
pub const AGENTS_PREFIX: &str = "/agents";
/// Every org root, in the order listings and searches show them.
pub const ORG_ROOTS: [&str; 3] = [MEMORY_PREFIX, SKILLS_PREFIX, AGENTS_PREFIX];
/// The longest path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// The longest file or directory name accepted, in bytes (the host filesystem's limit).
pub const MAX_NAME_BYTES: usize = 255;

/// The valid roots, for error messages.
const ROOTS_HINT: &str = "file tools work on /workspace/... (this session's files; relative \
                          paths too), /memory/... (your org's shared memory), /skills/... \
                          (your org's shared skills) and /agents/... (your org's agent types)";

/// Where a path lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The session's workspace: the path as given, for [`Workspace::resolve`].
    Workspace(String),
    /// An org file (or directory) in the store.
    Org(OrgPath),
}

/// Routes a path given to a file tool (see the module header).
pub fn route(path: &str) -> Result<Route, VfsError> {
    check_basic(path)?;
    if !path.starts_with('/') {
        return Ok(Route::Workspace(path.to_owned()));
    }
    let first = path.split('/').find(|c| !c.is_empty() && *c != "." && *c != "..");
    match first {
        Some("memory") | Some("skills") | Some("agents") => OrgPath::parse(path).map(Route::Org),
        Some("workspace") => Ok(Route::Workspace(path.to_owned())),
        None => Err(VfsError::Escapes(format!(
            "{path} is the filesystem root; {ROOTS_HINT}. Use Bash for other files"
        ))),
        Some(_) => Err(VfsError::Escapes(format!(
            "{} is outside the file tools' roots: {ROOTS_HINT}. Use Bash for other files",
            shorten(path)
        ))),
    }
}

/// Refuses what no route accepts: empty, NUL, control characters, overlong.
fn check_basic(path: &str) -> Result<(), VfsError> {
    if path.trim().is_empty() {
        return Err(VfsError::Invalid(format!("the path is empty: {ROOTS_HINT}")));
    }
    if path.contains('\0') {
        return Err(VfsError::Invalid("the path contains a NUL byte".to_string()));
    }
    if path.chars().any(|c| c.is_control()) {
        return Err(VfsError::Invalid(format!(
            "the path {:?} contains a control character",
            shorten(path)
        )));
    }
    if let Some(c) = path.chars().find(|c| is_bidi_control(*c)) {
        return Err(VfsError::Invalid(format!(
            "the path {:?} contains the invisible Unicode direction control U+{:04X}, which \
             makes a name display differently from what it is; use a name without it",
            shorten(path),
            c as u32
        )));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(VfsError::Invalid(format!(
            "the path is {} bytes long; the limit is {MAX_PATH_BYTES}",
            path.len()
        )));
    }
    Ok(())
}

/// Unicode bidirectional formatting characters (embeddings, overrides, isolates, marks).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// The first 120 characters of a path, for a message.
fn shorten(path: &str) -> String {
    match path.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &path[..i]),
        None => path.to_owned(),
    }
}

/// A normalised org path: `/memory`, `/memory/deploys.md`, `/skills/deploy/SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrgPath(String);

impl OrgPath {
    /// Parses and normalises an absolute path under an org root (see the module
    /// header for the rules).
    pub fn parse(path: &str) -> Result<OrgPath, VfsError> {
        check_basic(path)?;
        if !path.starts_with('/') {
            return Err(VfsError::Invalid(format!(
                "{} is relative; org files are named /memory/..., /skills/... or /agents/...",
                shorten(path)
            )));
        }
        let mut parts: Vec<&str> = Vec::new();
        let mut root: Option<&str> = None;
        for component in path.split('/') {
            match component {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        if let Some(root) = root {
                            return Err(VfsError::Escapes(format!(
                                "{} climbs out of /{root} with `..`; {ROOTS_HINT}",
                                shorten(path)
                            )));
                        }
                    }
                }
                name if root.is_none() => match name {
                    "memory" | "skills" | "agents" => root = Some(name),
                    _ => {
                        return Err(VfsError::Escapes(format!(
                            "{} is not under /memory, /skills or /agents; {ROOTS_HINT}",
                            shorten(path)
                        )))
                    }
                },
                name => {
                    if name.len() > MAX_NAME_BYTES {
                        return Err(VfsError::Invalid(format!(
                            "a name in {} is {} bytes long; the limit is {MAX_NAME_BYTES}",
                            shorten(path),
                            name.len()
                        )));
                    }
                    parts.push(name);
                }
            }
        }
        let Some(root) = root else {
            return Err(VfsError::Escapes(format!(
                "{} is not under /memory, /skills or /agents; {ROOTS_HINT}",
                shorten(path)
            )));
        };
        let mut out = format!("/{root}");
        for part in parts {
            out.push('/');
            out.push_str(part);
        }
        Ok(OrgPath(out))
    }

    /// The normalised path.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `/memory`, `/skills` or `/agents`.
    pub fn root(&self) -> &'static str {
        // A parsed path is a root or starts with `<root>/`, so the prefix test is exact.
        ORG_ROOTS.into_iter().find(|r| self.0.starts_with(r)).unwrap_or(MEMORY_PREFIX)
    }

    /// Whether this is an org root itself (`/memory`, `/skills`, `/agents`).
    pub fn is_root(&self) -> bool {
        ORG_ROOTS.contains(&self.0.as_str())
    }

    /// The path below the root (`deploys.md`, `deploy/SKILL.md`; empty for the root).
    pub fn relative(&self) -> &str {
        self.0[self.root().len()..].trim_start_matches('/')
    }

    /// The ancestors strictly between the root and this path (`/memory/a`, `/memory/a/b` for
    /// `/memory/a/b/c`).
    pub fn ancestors(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut at = self.root().to_owned();
        let names: Vec<&str> = self.relative().split('/').filter(|n| !n.is_empty()).collect();
        for name in names.iter().take(names.len().saturating_sub(1)) {
            at.push('/');
            at.push_str(name);
            out.push(at.clone());
        }
        out
    }
}

impl std::fmt::Display for OrgPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

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
        assert!(msg.starts_with("/etc/passwd is outside /workspace: file tools work on"), "{msg}");
        assert!(msg.contains("/memory/...") && msg.contains("/skills/..."), "{msg}");
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
        symlink("src/main.rs", ws.root().join("main-link.rs")).unwrap();
        symlink("../src/main.rs", ws.root().join("src/up-and-back.rs")).unwrap();
        let main = ws.canonical_root().join("src/main.rs");
        assert_eq!(ws.resolve("code/main.rs").unwrap(), main);
        assert_eq!(ws.resolve("main-link.rs").unwrap(), main);
        assert_eq!(ws.resolve("src/up-and-back.rs").unwrap(), main);
        assert_eq!(ws.resolve("code/new.rs").unwrap(), ws.canonical_root().join("src/new.rs"));
        // An absolute link is refused even when its host path lies inside: resolution never
        // starts over at the host's `/` (and inside the sandbox that path means nothing).
        symlink(ws.root().join("src/main.rs"), ws.root().join("abs-link.rs")).unwrap();
        escapes(&ws, "abs-link.rs");
    }

    #[test]
    fn model_paths_hide_the_host() {
        let (_d, ws) = setup();
        let p = ws.resolve("src/main.rs").unwrap();
        assert_eq!(ws.model_path(&p), "/workspace/src/main.rs");
        assert_eq!(ws.model_path(ws.canonical_root()), "/workspace");
        assert_eq!(ws.model_path(Path::new("/etc/passwd")), "<outside /workspace>");
    }

    fn org(path: &str) -> String {
        match route(path) {
            Ok(Route::Org(p)) => p.as_str().to_owned(),
            other => panic!("{path:?} should route to the org store, got {other:?}"),
        }
    }

    fn refused(path: &str) -> String {
        match route(path) {
            Err(e) => e.to_string(),
            Ok(r) => panic!("{path:?} should be refused, got {r:?}"),
        }
    }

    #[test]
    fn org_paths_are_normalised_and_routed() {
        assert_eq!(org("/memory/deploys.md"), "/memory/deploys.md");
        assert_eq!(org("//memory//a"), "/memory/a");
        assert_eq!(org("/memory/./a/"), "/memory/a");
        assert_eq!(org("/memory/a/b/../c"), "/memory/a/c");
        assert_eq!(org("/skills"), "/skills");
        assert_eq!(org("/skills/"), "/skills");
        assert_eq!(org("/./skills/x/SKILL.md"), "/skills/x/SKILL.md");
        assert_eq!(org("/../memory/a"), "/memory/a");
        let p = OrgPath::parse("/skills/deploy/scripts/run.sh").unwrap();
        assert_eq!(p.root(), "/skills");
        assert_eq!(p.relative(), "deploy/scripts/run.sh");
        assert_eq!(p.ancestors(), vec!["/skills/deploy", "/skills/deploy/scripts"]);
        assert!(OrgPath::parse("/memory").unwrap().is_root());
        assert!(OrgPath::parse("/memory").unwrap().ancestors().is_empty());
        assert_eq!(org("/agents//reviewer.md"), "/agents/reviewer.md");
        assert_eq!(org("/agents/"), "/agents");
        let p = OrgPath::parse("/agents/reviewer.md").unwrap();
        assert_eq!((p.root(), p.relative()), ("/agents", "reviewer.md"));
        assert!(OrgPath::parse("/agents").unwrap().is_root());
        assert!(!p.is_root());
    }

    #[test]
    fn workspace_paths_route_to_the_workspace() {
        for path in ["/workspace/x", "x", "./memory/a", "memory/a", "/workspace", "../x"] {
            assert_eq!(route(path).unwrap(), Route::Workspace(path.to_owned()), "{path}");
        }
    }

    #[test]
    fn escapes_and_bad_paths_are_refused_naming_the_roots() {
        let msg = refused("/memory/../workspace/x");
        assert!(msg.contains("climbs out of /memory"), "{msg}");
        assert!(msg.contains("/workspace/...") && msg.contains("/skills/..."), "{msg}");
        refused("/memory/./a/../../etc/passwd");
        refused("/skills/..");
        let msg = refused("/agents/../skills/x");
        assert!(msg.contains("climbs out of /agents") && msg.contains("/agents/..."), "{msg}");
        refused("/agentsx/a");
        let msg = refused("/memoryx/a");
        assert!(msg.contains("outside the file tools' roots"), "{msg}");
        refused("/etc/passwd");
        refused("/");
        refused("");
        refused("   ");
        assert!(refused("/memory/a\0b").contains("NUL"));
        assert!(refused("/memory/a\nb").contains("control character"));
        let long = format!("/memory/{}", "a/".repeat(600));
        assert!(refused(&long).contains("limit is 1024"));
        let long_name = format!("/memory/{}", "n".repeat(300));
        assert!(refused(&long_name).contains("limit is 255"));
        // Bidirectional controls would make a name display as something else.
        for c in
            ['\u{202E}', '\u{2066}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}', '\u{202A}']
        {
            let msg = refused(&format!("/memory/evil{c}dm.md"));
            assert!(msg.contains("direction control"), "{msg}");
            assert!(route(&format!("notes/a{c}b.txt")).is_err());
        }
        // Non-ASCII names are fine; non-UTF-8 cannot reach here (tool input is JSON text).
        assert_eq!(org("/memory/café/日本.md"), "/memory/café/日本.md");
    }

    #[test]
    fn a_mount_shows_its_own_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let mem = Workspace::mount(dir.path().join("memory"), MEMORY_PREFIX).unwrap();
        std::fs::write(mem.root().join("a.md"), "x").unwrap();
        let host = mem.resolve("/memory/a.md").unwrap();
        assert_eq!(mem.model_path(&host), "/memory/a.md");
        assert!(mem.resolve("/memory/../x").is_err());
    }
}
