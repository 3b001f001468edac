//! What a store call can fail with. One enum for both engines; no message ever carries the
//! database password.

use std::path::PathBuf;

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite said no.
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL said no (or its connection broke).
    #[error("database error: {}", describe(.0))]
    Postgres(#[from] postgres::Error),
    /// A query that must return a row returned none.
    #[error("database error: the query returned no row")]
    NoRows,
    /// A cell is not of the type its reader expects.
    #[error("database error: column {column} is not {want}")]
    Type {
        /// The column index.
        column: usize,
        /// What was expected.
        want: &'static str,
    },
    /// This node's lease on the session is gone (another node took it over): it must not write
    /// for the session again.
    #[error("session {0} is owned by another node now")]
    Fenced(String),
    /// A stored payload does not decode.
    #[error("corrupt event payload in the store: {0}")]
    Corrupt(String),
    /// A `seq` other than `last_seq + 1` was appended (a bug in the caller).
    #[error("event seq {got} does not follow the session's last seq {last}")]
    SeqGap {
        /// The session's last seq.
        last: u64,
        /// The seq offered.
        got: u64,
    },
    /// The name is taken (user name within an org).
    #[error("{0} already exists")]
    Exists(String),
    /// Something was not found.
    #[error("{0} not found")]
    NotFound(String),
    /// The store thread is gone (the server is shutting down).
    #[error("the store is closed")]
    Closed,
    /// The database file could not be opened.
    #[error("cannot open the database {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// The PostgreSQL server could not be reached or refused us (the URL's password is never
    /// part of the message).
    #[error("cannot connect to PostgreSQL at {target}: {reason}")]
    Connect {
        /// `host:port/dbname` of the URL.
        target: String,
        /// Why.
        reason: String,
    },
    /// The OS could not produce a random token.
    #[error("cannot generate a token: {0}")]
    Random(std::io::Error),
}

/// A driver error as a line: the server's own message and code when it sent one.
pub fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        }
    }
}
