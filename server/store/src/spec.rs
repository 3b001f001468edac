//! Where the store lives (`--store`, `OUTBOARD_STORE`) and how hard a commit is pushed to disk:
//! the store's own configuration, which the application fills in.

use std::path::PathBuf;

/// How hard a commit is pushed to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// WAL + `synchronous=NORMAL`: survives a process crash; may lose the last commits on power loss.
    Normal,
    /// WAL + `synchronous=FULL`: fsync on every commit; survives power loss.
    Full,
}

/// Where the store lives (`--store`, `OUTBOARD_STORE`). Its `Debug` shows no credentials (a
/// configuration printed for a bug report must not carry the database password).
#[derive(Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// The SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database, with the connections this node keeps to it.
    Postgres {
        /// `postgres://user@host:port/db`.
        url: String,
        /// Connections (store worker threads).
        pool: usize,
    },
}

/// Connections a node keeps to PostgreSQL by default.
pub const DEFAULT_PG_POOL: usize = 8;

impl std::fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            StoreSpec::Postgres { pool, .. } => f
                .debug_struct("Postgres")
                .field("target", &self.describe())
                .field("pool", pool)
                .finish(),
        }
    }
}

impl StoreSpec {
    /// `postgres://…`/`postgresql://…` is PostgreSQL; `sqlite:PATH` or any other text is a
    /// SQLite file.
    pub fn parse(text: &str) -> StoreSpec {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            StoreSpec::Postgres { url: text.to_owned(), pool: DEFAULT_PG_POOL }
        } else {
            StoreSpec::Sqlite(PathBuf::from(text.strip_prefix("sqlite:").unwrap_or(text)))
        }
    }

    /// For messages and logs: the file, or the server without credentials.
    pub fn describe(&self) -> String {
        match self {
            StoreSpec::Sqlite(p) => p.display().to_string(),
            StoreSpec::Postgres { url, .. } => format!("postgres://{}", target_of(url)),
        }
    }
}

/// `host:port/db` of a URL, for messages: no user, no password, no query.
pub fn target_of(url: &str) -> String {
    if !url.contains("://") {
        return "the server of the connection string".into();
    }
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('?').next().unwrap_or_default().to_owned()
}
