//! Bearer tokens. A token is shown once, when it is created, and stored only as its SHA-256: a
//! copy of the database does not let anyone log in. Tokens are 256 random bits, so a plain hash
//! (no salt, no slow KDF) is the right tool: there is nothing to brute-force.

mod live;

pub use live::{LiveTokens, Watched, CHECK_CHUNK, REVOCATION_CHECK_EVERY};
pub use outboard_base::digest::{hash_token, hex_sha256};
use outboard_store::{Store, StoreError};

/// How many hex characters of a token's hash identify it in `admin token ls` and `revoke`: not a
/// secret (the hash of a 256-bit token reveals nothing about it), short enough to type.
pub const TOKEN_ID_CHARS: usize = 8;

/// A token as `admin token ls` shows it: never the token, only an id from its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// The first [`TOKEN_ID_CHARS`] hex characters of the token's SHA-256.
    pub id: String,
    /// The user's name.
    pub user: String,
    /// The org's name.
    pub org: String,
    /// `admin` (from `admin user add`), `embedded pid=N` (an embedded CLI process), …
    pub label: String,
    /// RFC 3339.
    pub created_at: String,
}

/// Why a token could not be revoked.
#[derive(Debug, thiserror::Error)]
pub enum RevokeError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The id is too short or not hex.
    #[error("{0:?} is not a token id: give the ID column of `outboard-server admin token ls` (at least {TOKEN_ID_CHARS} hex characters)")]
    BadId(String),
    /// No token has this id.
    #[error("no token has the id {0}; list them with `outboard-server admin token ls`")]
    NotFound(String),
    /// Several tokens share the id prefix.
    #[error("{0} tokens have ids starting with {1}; give more characters of the hash")]
    Ambiguous(usize, String),
}

/// Every token (of one org when `org` is given), oldest first.
pub async fn list_tokens(store: &Store, org: Option<&str>) -> Result<Vec<TokenInfo>, StoreError> {
    let tokens = tokens_with_hash(store, org.map(str::to_owned)).await?;
    Ok(tokens.into_iter().map(|(_, info)| info).collect())
}

/// Deletes the token whose hash starts with `id` (the `admin token ls` id, or more of the
/// hash). The next `hello` with it is refused, and every node closes the connections it has
/// open with it at its next [`LiveTokens`] check. Returns the revoked token's description.
pub async fn revoke_by_id(store: &Store, id: &str) -> Result<TokenInfo, RevokeError> {
    let id = id.trim().to_ascii_lowercase();
    if id.len() < TOKEN_ID_CHARS || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(RevokeError::BadId(id));
    }
    let all = tokens_with_hash(store, None).await?;
    let matching: Vec<_> = all.into_iter().filter(|(hash, _)| hash.starts_with(&id)).collect();
    match matching.len() {
        0 => Err(RevokeError::NotFound(id)),
        1 => {
            let (hash, info) = matching.into_iter().next().ok_or(RevokeError::NotFound(id))?;
            delete_hash(store, hash).await?;
            Ok(info)
        }
        n => Err(RevokeError::Ambiguous(n, id)),
    }
}

/// Deletes `token` (embedded mode, at exit).
pub async fn revoke_token(store: &Store, token: &str) -> Result<(), StoreError> {
    delete_hash(store, hash_token(token)).await
}

/// The label prefix of tokens minted by embedded servers, followed by the minting process's id.
pub const EMBEDDED_TOKEN_LABEL: &str = "embedded";

/// Deletes the tokens of embedded processes that no longer run: labelled `embedded pid=N` with
/// no process `N` on this host, or the plain `embedded` of versions that did not record the pid.
/// An embedded CLI revokes its own token when it exits; this cleans up after a crash or a kill.
/// Returns how many were deleted.
pub async fn revoke_stale_embedded(store: &Store) -> Result<usize, StoreError> {
    let all = tokens_with_hash(store, None).await?;
    let mut revoked = 0;
    for (hash, info) in all {
        let Some(rest) = info.label.strip_prefix(EMBEDDED_TOKEN_LABEL) else {
            continue;
        };
        let stale = match rest.trim().strip_prefix("pid=").map(str::parse::<i32>) {
            None if rest.trim().is_empty() => true,
            Some(Ok(pid)) => !process_alive(pid),
            _ => false,
        };
        if stale {
            delete_hash(store, hash).await?;
            revoked += 1;
        }
    }
    Ok(revoked)
}

fn process_alive(pid: i32) -> bool {
    match rustix::process::Pid::from_raw(pid) {
        // ESRCH: no such process; EPERM: it exists under another user.
        Some(pid) => !matches!(
            rustix::process::test_kill_process(pid),
            Err(e) if e == rustix::io::Errno::SRCH
        ),
        None => false,
    }
}

/// Every token with its full hash (of one org when `org` is given), oldest first.
async fn tokens_with_hash(
    store: &Store,
    org: Option<String>,
) -> Result<Vec<(String, TokenInfo)>, StoreError> {
    store
        .call(move |c| {
            let mut stmt = c.prepare(
                "SELECT t.token_hash, u.name, o.name, t.label, t.created_at FROM tokens t
                 JOIN users u ON u.id = t.user_id JOIN orgs o ON o.id = u.org_id
                 WHERE CAST(?1 AS TEXT) IS NULL OR o.name = ?1
                 ORDER BY t.created_at, t.token_hash",
            )?;
            let rows = stmt.query_map([&org], |r| {
                let hash: String = r.get(0)?;
                let info = TokenInfo {
                    id: hash.chars().take(TOKEN_ID_CHARS).collect(),
                    user: r.get(1)?,
                    org: r.get(2)?,
                    label: r.get(3)?,
                    created_at: r.get(4)?,
                };
                Ok((hash, info))
            })?;
            rows.collect::<Result<Vec<_>, _>>()
        })
        .await
}

async fn delete_hash(store: &Store, hash: String) -> Result<(), StoreError> {
    store
        .call(move |c| {
            c.execute("DELETE FROM tokens WHERE token_hash = ?1", [&hash])?;
            Ok(())
        })
        .await
}
