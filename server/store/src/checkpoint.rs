//! The SQLite log's WAL checkpoints, off the commit path.
//!
//! By default SQLite checkpoints inside the commit that takes the WAL past 1,000 pages: that
//! commit copies the WAL into the database and syncs both, about 12 ms on this project's machines
//! where a commit alone takes 30 µs. A 200-step turn commits about 400 times and met two to four
//! such commits, a quarter of the harness's own time per step. So the worker's connection does
//! not checkpoint (`wal_autocheckpoint = 0`): after its jobs it wakes this thread, which waits
//! [`SETTLE`] for more commits to gather and checkpoints on a connection of its own
//! (`PASSIVE`: it never blocks the writer, which goes on appending to the WAL meanwhile).
//!
//! Nothing changes for durability: a commit is as durable as before (the WAL is where it
//! lives until the checkpoint copies it, fsynced first), and a checkpoint cut by a crash is done
//! again at the next open. A WAL the checkpoints could not keep small (a long reader) is
//! truncated to [`WAL_KEEP_BYTES`] once it is reset.

use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::Duration;

use crate::error::StoreError;
use crate::spec::Durability;

/// How long the thread lets commits gather after a wake before it checkpoints.
pub const SETTLE: Duration = Duration::from_millis(100);

/// What the WAL file is truncated to when it is reset after growing past it.
pub const WAL_KEEP_BYTES: i64 = 64 << 20;

/// The worker's side: a wake of at most one pending signal (the queue's bound is 1: a wake
/// while one waits is already covered by it).
#[derive(Debug, Clone)]
pub struct Waker(SyncSender<()>);

impl Waker {
    /// Asks for a checkpoint soon; never blocks.
    pub fn wake(&self) {
        match self.0.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
        }
    }
}

/// Turns off the writer's own checkpoints on `conn` (the worker's) and starts the thread that
/// does them on a connection of its own to `path`. The thread ends, after a last checkpoint,
/// once every [`Waker`] is dropped (the store's worker has stopped).
pub fn start(
    conn: &rusqlite::Connection,
    path: &Path,
    durability: Durability,
) -> Result<Waker, StoreError> {
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.pragma_update(None, "journal_size_limit", WAL_KEEP_BYTES)?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let path = path.to_owned();
    std::thread::Builder::new()
        .name("outboard-store-checkpoint".into())
        .spawn(move || run(&path, durability, &rx))
        .map_err(|e| StoreError::Corrupt(format!("cannot start the checkpoint thread: {e}")))?;
    Ok(Waker(tx))
}

/// The thread: its connection is opened at the first wake (off the path of a server's start),
/// and again at the next one if that failed.
fn run(path: &Path, durability: Durability, wakes: &Receiver<()>) {
    let mut conn = None;
    while wakes.recv().is_ok() {
        std::thread::sleep(SETTLE);
        // The wakes that came while settling are covered by this checkpoint.
        while wakes.try_recv().is_ok() {}
        if conn.is_none() {
            conn = open(path, durability);
        }
        if let Some(conn) = &conn {
            checkpoint(conn);
        }
    }
    if let Some(conn) = &conn {
        checkpoint(conn);
    }
}

fn open(path: &Path, durability: Durability) -> Option<rusqlite::Connection> {
    let opened = crate::schema::open_connection(path, durability).and_then(|c| {
        c.pragma_update(None, "wal_autocheckpoint", 0)?;
        Ok(c)
    });
    match opened {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!("the store's checkpoint thread cannot open the database (retried): {e}");
            None
        }
    }
}

/// One passive checkpoint; a failure is logged and the next wake tries again.
fn checkpoint(conn: &rusqlite::Connection) {
    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
        tracing::warn!("the store's WAL checkpoint failed (retried at the next commit): {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The database file's length: it grows only when a checkpoint copies pages into it.
    fn main_file_len(path: &Path) -> u64 {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    }

    #[test]
    fn commits_do_not_checkpoint_and_the_thread_does_soon_after() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = crate::schema::open_connection(&path, Durability::Normal).unwrap();
        conn.execute_batch("CREATE TABLE t (x BLOB)").unwrap();
        let waker = start(&conn, &path, Durability::Normal).unwrap();
        let before = main_file_len(&path);
        // 3,000 pages of WAL: three times the size at which a commit would have checkpointed.
        for _ in 0..3000 {
            conn.execute("INSERT INTO t VALUES (zeroblob(4000))", []).unwrap();
        }
        assert_eq!(main_file_len(&path), before, "a commit copied the WAL into the database");
        // Many wakes, one pending at most: none blocks, and the thread checkpoints.
        for _ in 0..1000 {
            waker.wake();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while main_file_len(&path) < before + 3000 * 4000 {
            assert!(std::time::Instant::now() < deadline, "no checkpoint within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
