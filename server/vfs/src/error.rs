//! Why a path was refused or could not be served.

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
