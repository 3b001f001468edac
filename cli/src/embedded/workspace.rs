//! The directory a new embedded session works in: in place in the current directory (or
//! `--workspace DIR`). The server is told the directory with `session/create`, which only the
//! embedded server accepts (`allow_client_workspaces`). `/` and the home directory itself are
//! refused unless named explicitly, since a session there could touch every file the user has.
//! Plain std, so it builds (and is checked before connecting) in every build of the client.

use crate::args::ConnectArgs;

/// Why the directory a new session should work in is refused. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// `--workspace` names nothing usable.
    #[error("--workspace {dir}: {reason} — name an existing project directory")]
    Missing {
        /// The directory as given.
        dir: String,
        /// The OS error.
        reason: String,
    },
    /// `--workspace` names a file.
    #[error("--workspace {0} is not a directory — name the project's directory")]
    NotDirectory(String),
    /// The current directory is `/` or the home directory, not named with `--workspace`.
    #[error("refusing to work in {dir} ({what}): the agent could change any file there — cd into a project directory, or pass --workspace DIR (--workspace {dir} if you really mean it)")]
    TooBroad {
        /// The directory.
        dir: String,
        /// What it is.
        what: &'static str,
    },
    /// The current directory is gone or unreadable.
    #[error("cannot use the current directory: {0} — cd into a project directory, or pass --workspace DIR")]
    Cwd(String),
    /// The path cannot be sent (the protocol carries UTF-8).
    #[error("the directory {0} is not valid UTF-8 — rename it, or pass --workspace with another directory")]
    NotUtf8(String),
    /// `--workspace` with `--server`.
    #[error("--workspace works only without --server (embedded mode): a remote server gives each session a directory of its own")]
    Remote,
}

impl WorkspaceError {
    /// The process exit status: always a usage error (2).
    pub fn exit_code(&self) -> i32 {
        crate::exit::USAGE
    }
}

/// The directory a new session of `args` works in, canonical: `--workspace` (any existing
/// directory), else the current directory unless it is `/` or the home directory. `None` with
/// `--server` (a remote server picks the directory).
pub fn session_workspace(args: &ConnectArgs) -> Result<Option<String>, WorkspaceError> {
    if !cfg!(feature = "embedded") && args.server.is_none() {
        // A client-only build has no session to work in place for: connecting says it needs
        // --server, which is the one thing to fix (not the directory).
        return Ok(None);
    }
    if args.server.is_some() {
        return match args.workspace {
            Some(_) => Err(WorkspaceError::Remote),
            None => Ok(None),
        };
    }
    let canonical = match &args.workspace {
        Some(dir) => {
            let shown = dir.display().to_string();
            let canonical = std::fs::canonicalize(dir).map_err(|e| WorkspaceError::Missing {
                dir: shown.clone(),
                reason: e.to_string(),
            })?;
            if !canonical.is_dir() {
                return Err(WorkspaceError::NotDirectory(shown));
            }
            canonical
        }
        None => {
            let cwd = std::env::current_dir()
                .and_then(std::fs::canonicalize)
                .map_err(|e| WorkspaceError::Cwd(e.to_string()))?;
            let home = std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .and_then(|h| std::fs::canonicalize(h).ok());
            let what = if cwd == std::path::Path::new("/") {
                Some("the root directory")
            } else if home.as_deref() == Some(cwd.as_path()) {
                Some("your home directory")
            } else {
                None
            };
            if let Some(what) = what {
                return Err(WorkspaceError::TooBroad { dir: cwd.display().to_string(), what });
            }
            cwd
        }
    };
    canonical
        .into_os_string()
        .into_string()
        .map(Some)
        .map_err(|p| WorkspaceError::NotUtf8(p.to_string_lossy().into_owned()))
}
