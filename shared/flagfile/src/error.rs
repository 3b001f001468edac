//! What can be wrong with a configuration file. Every message names the file, and, once the file
//! is read, the line and the key, so the fix is one look away.

/// Why a configuration file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FlagFileError {
    /// The file cannot be read (a file named explicitly that does not exist included).
    #[error("cannot read the configuration file {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        error: std::io::Error,
    },
    /// The file is not TOML.
    #[error("{path}:{line}: not valid TOML: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// Where the parser stopped (from 1).
        line: usize,
        /// What the parser says.
        message: String,
    },
    /// A key that is no flag's long name.
    #[error("{path}:{line}: unknown key `{key}`: {hint}")]
    UnknownKey {
        /// The file.
        path: String,
        /// The key's line.
        line: usize,
        /// The key.
        key: String,
        /// What the key may have meant, or where the keys come from.
        hint: String,
    },
    /// A value of the wrong TOML type (a number for a URL, a string for a switch).
    #[error("{path}:{line}: `{key}` must be {expected}, not {found}")]
    WrongType {
        /// The file.
        path: String,
        /// The key's line.
        line: usize,
        /// The key.
        key: String,
        /// The type the flag takes.
        expected: &'static str,
        /// The type the file gives.
        found: &'static str,
    },
    /// A value the flag's parser refuses (an address that is not one, an unknown mode).
    #[error("{path}:{line}: `{key}`: {reason}")]
    InvalidValue {
        /// The file.
        path: String,
        /// The key's line.
        line: usize,
        /// The key.
        key: String,
        /// What the flag's parser says (never the value of a secret).
        reason: String,
    },
}
