//! Routing a path the model names: `/workspace/**` and relative paths to the session's workspace,
//! `/memory/**`, `/skills/**`, `/agents/**` and `/plans/**` to the org's files ([`OrgPath`]), anything else to
//! the sandbox; names checked before any of them is touched.

use crate::error::VfsError;

/// How the model names the workspace root.
pub const WORKSPACE_PREFIX: &str = "/workspace";

/// The org's shared memory.
pub const MEMORY_PREFIX: &str = "/memory";

/// The org's shared skills.
pub const SKILLS_PREFIX: &str = "/skills";

/// The org's agent types (`/agents/NAME.md`, see the org file system above).
pub const AGENTS_PREFIX: &str = "/agents";

/// The org's plans (`/plans/<date>-<slug>.md`, written when a session in plan mode proposes
/// one with `ExitPlanMode`).
pub const PLANS_PREFIX: &str = "/plans";

/// Every org root, in the order listings and searches show them.
pub const ORG_ROOTS: [&str; 4] = [MEMORY_PREFIX, SKILLS_PREFIX, AGENTS_PREFIX, PLANS_PREFIX];

/// The longest path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;

/// The longest file or directory name accepted, in bytes (the host filesystem's limit).
pub const MAX_NAME_BYTES: usize = 255;

/// The valid roots, for error messages.
pub(crate) const ROOTS_HINT: &str =
    "file tools work on /workspace/... (this session's files; relative \
                          paths too), /memory/... (your org's shared memory), /skills/... \
                          (your org's shared skills), /agents/... (your org's agent types) and /plans/... \
                          (your org's plans)";

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
        Some("memory") | Some("skills") | Some("agents") | Some("plans") => {
            OrgPath::parse(path).map(Route::Org)
        }
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
pub(crate) fn check_basic(path: &str) -> Result<(), VfsError> {
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
pub(crate) fn shorten(path: &str) -> String {
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
                "{} is relative; org files are named /memory/..., /skills/..., /agents/... or \
                 /plans/...",
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
                    "memory" | "skills" | "agents" | "plans" => root = Some(name),
                    _ => {
                        return Err(VfsError::Escapes(format!(
                            "{} is not under /memory, /skills, /agents or /plans; {ROOTS_HINT}",
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
                "{} is not under /memory, /skills, /agents or /plans; {ROOTS_HINT}",
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

    /// `/memory`, `/skills`, `/agents` or `/plans`.
    pub fn root(&self) -> &'static str {
        // A parsed path is a root or starts with `<root>/`, so the prefix test is exact.
        ORG_ROOTS.into_iter().find(|r| self.0.starts_with(r)).unwrap_or(MEMORY_PREFIX)
    }

    /// Whether this is an org root itself (`/memory`, `/skills`, `/agents`, `/plans`).
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
