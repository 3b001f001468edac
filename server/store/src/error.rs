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
    /// PostgreSQL could not be reached for as long as the store retries a job
    /// ([`crate::Store::set_retry_bound`]): the job was not done.
    #[error("the server's store (PostgreSQL at {target}) is unreachable; it was retried for {waited_s} s")]
    Unreachable {
        /// `host:port/dbname` of the URL.
        target: String,
        /// How long the job was retried.
        waited_s: u64,
    },
    /// The connection to PostgreSQL broke while a change was being committed and the change
    /// cannot be safely made again: whether it was saved is unknown.
    #[error(
        "the connection to the server's store (PostgreSQL at {target}) broke while a change was \
         being committed; whether it was saved is unknown"
    )]
    CommitUnknown {
        /// `host:port/dbname` of the URL.
        target: String,
    },
    /// The OS could not produce a random token.
    #[error("cannot generate a token: {0}")]
    Random(std::io::Error),
}

/// How a failed statement relates to the connection it ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// The statement itself failed; the connection is fine.
    No,
    /// The server ended the session or the connection could not be made (SQLSTATE class 08,
    /// `57P01`–`57P03`, a refused connect): whatever the statement was, it did not take effect.
    Refused,
    /// The link broke under the statement (an I/O error, a connection closed mid-request): a
    /// commit under way may or may not have taken effect.
    Cut,
}

impl StoreError {
    /// Whether this failure is the connection's, and how (see [`Broken`]): what the store's
    /// workers retry.
    pub fn broken(&self) -> Broken {
        match self {
            StoreError::Postgres(e) => pg_broken(e),
            StoreError::Connect { .. } => Broken::Refused,
            _ => Broken::No,
        }
    }

    /// Whether the store could not be reached (the server's store is down or cut off), rather
    /// than refusing the request: what clients are told as "unavailable".
    pub fn is_unreachable(&self) -> bool {
        matches!(self, StoreError::Unreachable { .. } | StoreError::CommitUnknown { .. })
            || self.broken() != Broken::No
    }
}

/// [`StoreError::broken`] of a driver error.
fn pg_broken(e: &postgres::Error) -> Broken {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        return if code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03") {
            Broken::Refused
        } else {
            Broken::No
        };
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return Broken::Cut;
        }
        source = s.source();
    }
    if e.is_closed() || e.to_string().contains("connection closed") {
        Broken::Cut
    } else {
        Broken::No
    }
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
