//! The tokens of this node's open connections, checked against the store on a short interval so
//! that a revocation closes them on every node.
//!
//! Design choice: `admin token revoke` runs against the store, not against a node (several nodes
//! may share one PostgreSQL store, and the command may run while no node does), so each node
//! must notice by itself. Each node polls: every [`REVOCATION_CHECK_EVERY`] it asks the store
//! which of the token hashes its connections hold still exist, in one indexed query per
//! [`CHECK_CHUNK`] hashes, and cancels the connections of every hash that is gone. This works the
//! same on SQLite and PostgreSQL, needs no schema change and no notification channel that could
//! be missed, and costs nothing when no connection is open. LISTEN/NOTIFY would be faster on
//! PostgreSQL but needs a poll behind it anyway (a dropped listener connection misses notices).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboard_base::digest::hash_token;
use outboard_store::{Store, StoreError};
use tokio_util::sync::CancellationToken;

/// How often a node checks that the tokens of its open connections still exist: a revoked
/// token's connections close within this (plus one store query) on every node.
pub const REVOCATION_CHECK_EVERY: Duration = Duration::from_millis(500);

/// Token hashes asked about in one query: the statement is always this many placeholders (the
/// last hash repeated), so every check reuses one prepared statement.
pub const CHECK_CHUNK: usize = 64;

/// The open connections of each token on this node. Its size is bounded by the node's
/// connection cap: each entry is one authenticated connection, removed when it closes.
#[derive(Debug, Default)]
pub struct LiveTokens {
    /// Token hash → connection number → that connection's "revoked" signal.
    by_hash: Mutex<HashMap<String, HashMap<u64, CancellationToken>>>,
    next: AtomicU64,
}

/// One connection's registration in [`LiveTokens`]; dropping it (the connection closed)
/// removes it.
#[derive(Debug)]
pub struct Watched {
    live: Arc<LiveTokens>,
    hash: String,
    id: u64,
    revoked: CancellationToken,
}

impl Watched {
    /// Resolves once the connection's token has been found revoked.
    pub async fn revoked(&self) {
        self.revoked.cancelled().await
    }

    /// Whether the token has been found revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked.is_cancelled()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Ok(mut by_hash) = self.live.by_hash.lock() {
            if let Some(conns) = by_hash.get_mut(&self.hash) {
                conns.remove(&self.id);
                if conns.is_empty() {
                    by_hash.remove(&self.hash);
                }
            }
        }
    }
}

impl LiveTokens {
    /// Registers a connection authenticated by `token` (kept as its hash only).
    pub fn watch(self: &Arc<Self>, token: &str) -> Watched {
        let hash = hash_token(token);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let revoked = CancellationToken::new();
        if let Ok(mut by_hash) = self.by_hash.lock() {
            by_hash.entry(hash.clone()).or_default().insert(id, revoked.clone());
        }
        Watched { live: self.clone(), hash, id, revoked }
    }

    /// How many connections are registered.
    pub fn connections(&self) -> usize {
        self.by_hash.lock().map_or(0, |m| m.values().map(HashMap::len).sum())
    }

    fn hashes(&self) -> Vec<String> {
        self.by_hash.lock().map_or_else(|_| Vec::new(), |m| m.keys().cloned().collect())
    }

    /// Asks the store which registered tokens still exist and signals the connections of the
    /// others. Returns how many connections were signalled.
    pub async fn sweep(&self, store: &Store) -> Result<usize, StoreError> {
        let hashes = self.hashes();
        if hashes.is_empty() {
            return Ok(0);
        }
        let existing = existing_hashes(store, hashes.clone()).await?;
        let Ok(mut by_hash) = self.by_hash.lock() else {
            return Ok(0);
        };
        let mut signalled = 0;
        for hash in hashes.iter().filter(|h| !existing.contains(*h)) {
            if let Some(conns) = by_hash.remove(hash) {
                for revoked in conns.values() {
                    revoked.cancel();
                    signalled += 1;
                }
            }
        }
        Ok(signalled)
    }

    /// Sweeps every [`REVOCATION_CHECK_EVERY`] (`every` in tests) until `shutdown`. A store
    /// error is logged and the next sweep tries again: a connection stays open while the store
    /// cannot be asked, as it would be refused at its next `hello`.
    pub async fn run(self: Arc<Self>, store: Store, every: Duration, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
            match self.sweep(&store).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(connections = n, "closing the connections of revoked tokens")
                }
                Err(e) => tracing::warn!(error = %e, "cannot check the open connections' tokens"),
            }
        }
    }
}

/// The hashes among `hashes` that the store still holds.
async fn existing_hashes(
    store: &Store,
    hashes: Vec<String>,
) -> Result<std::collections::HashSet<String>, StoreError> {
    let placeholders: Vec<String> = (1..=CHECK_CHUNK).map(|i| format!("?{i}")).collect();
    let sql =
        format!("SELECT token_hash FROM tokens WHERE token_hash IN ({})", placeholders.join(", "));
    store
        .call(move |c| {
            let mut found = std::collections::HashSet::new();
            for chunk in hashes.chunks(CHECK_CHUNK) {
                let mut params: Vec<String> = chunk.to_vec();
                let last = params.last().cloned().unwrap_or_default();
                params.resize(CHECK_CHUNK, last);
                let mut stmt = c.prepare_cached(&sql)?;
                let rows = stmt.query_map(&params, |r| r.get::<_, String>(0))?;
                for row in rows {
                    found.insert(row?);
                }
            }
            Ok(found)
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn store_with_tokens(n: usize) -> (tempfile::TempDir, Store, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open(&dir.path().join("t.db"), outboard_store::Durability::Normal).unwrap();
        let mut tokens = Vec::new();
        for i in 0..n {
            let (_, token) = store.add_user("acme", &format!("u{i}")).await.unwrap();
            tokens.push(token);
        }
        (dir, store, tokens)
    }

    async fn delete(store: &Store, token: &str) {
        let hash = hash_token(token);
        store
            .call(move |c| {
                c.execute("DELETE FROM tokens WHERE token_hash = ?1", [&hash])?;
                Ok(())
            })
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_deleted_token_signals_its_connections_and_only_them() {
        let (_dir, store, tokens) = store_with_tokens(2).await;
        let live = Arc::new(LiveTokens::default());
        let (a1, a2, b) = (live.watch(&tokens[0]), live.watch(&tokens[0]), live.watch(&tokens[1]));
        assert_eq!(live.sweep(&store).await.unwrap(), 0);
        assert!(!a1.is_revoked());

        delete(&store, &tokens[0]).await;
        assert_eq!(live.sweep(&store).await.unwrap(), 2);
        assert!(a1.is_revoked() && a2.is_revoked() && !b.is_revoked());
        tokio::time::timeout(Duration::from_secs(1), a1.revoked()).await.unwrap();
        assert_eq!(live.connections(), 1);
        drop(b);
        assert_eq!(live.connections(), 0);
    }

    /// More tokens than one query asks about: every chunk is checked, the padded last one too.
    #[tokio::test]
    async fn tokens_beyond_one_chunk_are_checked() {
        let (_dir, store, tokens) = store_with_tokens(CHECK_CHUNK + 3).await;
        let live = Arc::new(LiveTokens::default());
        let watched: Vec<Watched> = tokens.iter().map(|t| live.watch(t)).collect();
        assert_eq!(live.sweep(&store).await.unwrap(), 0);
        for t in &tokens[CHECK_CHUNK - 1..] {
            delete(&store, t).await;
        }
        assert_eq!(live.sweep(&store).await.unwrap(), 4);
        let revoked = watched.iter().filter(|w| w.is_revoked()).count();
        assert_eq!(revoked, 4);
        assert!(watched[..CHECK_CHUNK - 1].iter().all(|w| !w.is_revoked()));
    }
}
