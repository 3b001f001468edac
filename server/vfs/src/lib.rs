//! Path routing and confinement: every path the model gives a file tool goes through
//! [`route`], which decides where the file lives, or refuses it.
//!
//! CONTRACT: [`route`], [`Route`], [`OrgPath`], [`Workspace::new`], [`Workspace::mount`],
//! [`Workspace::root`], [`Workspace::confined`], [`Workspace::relative`],
//! [`Workspace::resolve`], [`Workspace::model_path`], [`Workspace::display`].
//!
//! The three kinds of path (docs/ARCHITECTURE.md, `vfs.rs` and "Org files"):
//! - `/memory/**`, `/skills/**` and `/agents/**`: the org's shared files, in the store
//!   (the org file system above); routed as an [`OrgPath`].
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
//!
//! Floor 2: it must not know the store or the org file system; org paths are routed here and
//! served above.

pub mod confined;
pub mod error;
pub mod exact;
pub mod route;
pub mod workspace;

#[cfg(test)]
mod tests;

pub use error::VfsError;
pub use route::{
    route, OrgPath, Route, AGENTS_PREFIX, MAX_NAME_BYTES, MAX_PATH_BYTES, MEMORY_PREFIX, ORG_ROOTS,
    PLANS_PREFIX, SKILLS_PREFIX, WORKSPACE_PREFIX,
};
pub use workspace::Workspace;
