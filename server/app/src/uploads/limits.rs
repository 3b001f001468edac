//! What an upload may take of the server, counted from its first byte: the org's uploads of the
//! last day by bytes and by archive members (`upload_bytes_per_day`, `upload_files_per_day`),
//! and one user's uploads waiting for a session by count and bytes (`pending_uploads_per_user`,
//! `pending_upload_bytes_per_user`), all [`outboard_org::quota`] keys an admin sets per org.
//!
//! Design choice: stored uploads are rows (shared by every node of a store); uploads still
//! arriving are this node's own, kept in an [`Ledger`] (one entry per body being received, so
//! its size is bounded by the node's connections). A check adds the two: the stored usage read
//! once when the request starts, and the ledger as it is now. The row is written by
//! [`commit_row`], which reads the stored usage again inside its transaction and adds the other
//! arriving uploads, so two uploads racing for the last room cannot both be stored; an upload
//! leaves the ledger only after its row is committed (counted twice for that moment, never
//! zero times). Uploads arriving on another node are only seen once stored.
//!
//! Archive members are counted as the body arrives by [`Tally`], a streaming reader of tar
//! headers, so an archive of 300,000 empty files is stopped at the org's file quota although
//! its bytes are few. The unpack counts members again with the real parser and refuses an
//! archive that holds more than were counted on arrival, so no header trick makes the tally
//! undercount what lands.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use outboard_org::quota::{human_bytes, raise_hint, QuotaKey, Quotas};
use outboard_store::db::Db;
use outboard_store::{Store, StoreError, UserRow};

use super::UploadError;

/// Uploads arriving on this node, by a number of their own.
#[derive(Debug, Default)]
pub struct Ledger {
    arriving: Mutex<HashMap<u64, Arriving>>,
    next: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Clone)]
struct Arriving {
    org: String,
    user: String,
    bytes: u64,
    files: u64,
}

/// One upload's entry in the [`Ledger`]; dropping it removes the entry.
#[derive(Debug)]
pub struct Entry {
    ledger: Arc<Ledger>,
    id: u64,
}

/// What the checks add up (see the module header).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Bytes of the org's uploads of the last day.
    pub org_bytes: u64,
    /// Archive members of the same.
    pub org_files: u64,
    /// The user's uploads waiting for a session.
    pub user_pending: u64,
    /// Their bytes.
    pub user_pending_bytes: u64,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arriving>> {
        self.arriving.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers an upload of `user` that has not sent a byte yet (it counts as one pending
    /// upload from now).
    pub fn enter(self: &Arc<Self>, user: &UserRow) -> Entry {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let arriving =
            Arriving { org: user.org_id.0.clone(), user: user.id.0.clone(), bytes: 0, files: 0 };
        self.lock().insert(id, arriving);
        Entry { ledger: self.clone(), id }
    }

    /// The arriving uploads of `user`'s org and of `user`, but `except`.
    fn arriving(&self, user: &UserRow, except: Option<u64>) -> Usage {
        let mut usage = Usage::default();
        for (id, a) in self.lock().iter() {
            if Some(*id) == except || a.org != user.org_id.0 {
                continue;
            }
            usage.org_bytes += a.bytes;
            usage.org_files += a.files;
            if a.user == user.id.0 {
                usage.user_pending += 1;
                usage.user_pending_bytes += a.bytes;
            }
        }
        usage
    }

    /// Uploads arriving on this node (all orgs).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no upload is arriving.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Entry {
    /// Records the entry's bytes and members so far.
    pub fn set(&self, bytes: u64, files: u64) {
        if let Some(a) = self.ledger.lock().get_mut(&self.id) {
            a.bytes = bytes;
            a.files = files;
        }
    }

    /// What every upload of `user`'s org and of `user` counts now: `stored` (read at the start)
    /// plus the arriving ones, this one included.
    pub fn usage(&self, user: &UserRow, stored: Usage) -> Usage {
        add(stored, self.ledger.arriving(user, None))
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        self.ledger.lock().remove(&self.id);
    }
}

fn add(a: Usage, b: Usage) -> Usage {
    Usage {
        org_bytes: a.org_bytes + b.org_bytes,
        org_files: a.org_files + b.org_files,
        user_pending: a.user_pending + b.user_pending,
        user_pending_bytes: a.user_pending_bytes + b.user_pending_bytes,
    }
}

/// Which bound refused an upload: the label of `outboard_upload_refusals_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// `upload_bytes_per_day`.
    OrgBytes,
    /// `upload_files_per_day`.
    OrgFiles,
    /// `pending_uploads_per_user`.
    UserPending,
    /// `pending_upload_bytes_per_user`.
    UserPendingBytes,
    /// The token was revoked while the body arrived.
    Revoked,
    /// The body's overall deadline passed.
    Deadline,
    /// `--max-upload-bytes`.
    Cap,
    /// A member deeper than [`super::unpack::MAX_DEPTH`] or a path longer than
    /// [`super::unpack::MAX_PATH_BYTES`].
    Depth,
    /// A history bundle past one of [`super::bundle`]'s bounds.
    Bundle,
}

impl Bound {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Bound::OrgBytes => "upload_bytes_per_day",
            Bound::OrgFiles => "upload_files_per_day",
            Bound::UserPending => "pending_uploads_per_user",
            Bound::UserPendingBytes => "pending_upload_bytes_per_user",
            Bound::Revoked => "revoked",
            Bound::Deadline => "deadline",
            Bound::Cap => "max_upload_bytes",
            Bound::Depth => "depth",
            Bound::Bundle => "history_bundle",
        }
    }

    /// Whether it is one of the org's quotas (a refusal the sender should read, not a cut).
    pub fn is_quota(self) -> bool {
        matches!(
            self,
            Bound::OrgBytes | Bound::OrgFiles | Bound::UserPending | Bound::UserPendingBytes
        )
    }

    /// Every bound, for the metric's series at zero.
    pub const ALL: [Bound; 9] = [
        Bound::OrgBytes,
        Bound::OrgFiles,
        Bound::UserPending,
        Bound::UserPendingBytes,
        Bound::Revoked,
        Bound::Deadline,
        Bound::Cap,
        Bound::Depth,
        Bound::Bundle,
    ];
}

/// The stored usage of `user`'s org and of `user` (rows of the last day; waiting ones for the
/// user), read inside the caller's transaction when `c` is one.
fn stored_usage(c: &Db, user: &UserRow) -> Result<Usage, StoreError> {
    let cutoff = outboard_base::util::rfc3339_ago(super::UNUSED_UPLOAD_TTL);
    let (org_bytes, org_files) = c
        .prepare_cached(
            "SELECT COALESCE(SUM(bytes), 0), COALESCE(SUM(files), 0) FROM uploads
             WHERE org_id = ?1 AND created_at > ?2",
        )?
        .query_row([&user.org_id.0, &cutoff], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })?;
    let (user_pending, user_pending_bytes) = c
        .prepare_cached(
            "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM uploads
             WHERE user_id = ?1 AND used_at IS NULL AND created_at > ?2",
        )?
        .query_row([&user.id.0, &cutoff], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })?;
    Ok(Usage { org_bytes, org_files, user_pending, user_pending_bytes })
}

/// The org's quotas and the stored usage, read once when an upload starts.
pub async fn read(store: &Store, user: &UserRow) -> Result<(Quotas, Usage), UploadError> {
    let user = user.clone();
    Ok(store.call(move |c| Ok((Quotas::read(c, &user.org_id)?, stored_usage(c, &user)?))).await?)
}

/// The first quota `usage` passes, with the message for the uploader.
pub fn check(quotas: &Quotas, usage: &Usage, org: &str) -> Result<(), (Bound, String)> {
    let over = |bound: Bound, key: QuotaKey, what: String| {
        let hint = raise_hint(org, key);
        Err((
            bound,
            format!(
                "{what}: upload again once a session used your waiting uploads or later; {hint}"
            ),
        ))
    };
    if usage.user_pending > quotas.pending_uploads_per_user {
        return over(
            Bound::UserPending,
            QuotaKey::PendingUploadsPerUser,
            format!(
                "you have {} uploads waiting for a session (this one included), over the \
                 pending_uploads_per_user quota ({}); an upload waits until `outboard run \
                 --upload` makes its session, or a day",
                usage.user_pending, quotas.pending_uploads_per_user
            ),
        );
    }
    if usage.user_pending_bytes > quotas.pending_upload_bytes_per_user {
        return over(
            Bound::UserPendingBytes,
            QuotaKey::PendingUploadBytesPerUser,
            format!(
                "your uploads waiting for a session reach {} with this one, over the \
                 pending_upload_bytes_per_user quota ({})",
                human_bytes(usage.user_pending_bytes),
                human_bytes(quotas.pending_upload_bytes_per_user)
            ),
        );
    }
    if usage.org_bytes > quotas.upload_bytes_per_day {
        return over(
            Bound::OrgBytes,
            QuotaKey::UploadBytesPerDay,
            format!(
                "your org's uploads of the last day reach {} with this one, over its \
                 upload_bytes_per_day quota ({})",
                human_bytes(usage.org_bytes),
                human_bytes(quotas.upload_bytes_per_day)
            ),
        );
    }
    if usage.org_files > quotas.upload_files_per_day {
        return over(
            Bound::OrgFiles,
            QuotaKey::UploadFilesPerDay,
            format!(
                "your org's uploads of the last day hold {} files and directories with this \
                 one, over its upload_files_per_day quota ({})",
                usage.org_files, quotas.upload_files_per_day
            ),
        );
    }
    Ok(())
}

/// The finished upload's row, written if the quotas still hold with the stored usage read again
/// in the same transaction (see the module header).
pub async fn commit_row(
    store: &Store,
    user: &UserRow,
    entry: &Entry,
    row: (String, u64, u64, Option<String>),
) -> Result<Result<(), (Bound, String)>, UploadError> {
    let (user, ledger, me) = (user.clone(), entry.ledger.clone(), entry.id);
    Ok(store
        .call(move |c| {
            let tx = c.transaction_immediate()?;
            let quotas = Quotas::read(&tx, &user.org_id)?;
            let others = ledger.arriving(&user, Some(me));
            let (id, bytes, files, branch) = row.clone();
            let mine = Usage {
                org_bytes: bytes,
                org_files: files,
                user_pending: 1,
                user_pending_bytes: bytes,
            };
            let usage = add(add(stored_usage(&tx, &user)?, others), mine);
            if let Err(refused) = check(&quotas, &usage, &user.org) {
                return Ok(Err(refused));
            }
            tx.execute(
                "INSERT INTO uploads (id, org_id, user_id, bytes, files, branch, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                outboard_store::params![
                    id,
                    user.org_id.0,
                    user.id.0,
                    bytes as i64,
                    files as i64,
                    branch,
                    outboard_base::util::now_rfc3339()
                ],
            )?;
            tx.commit()?;
            Ok(Ok(()))
        })
        .await?)
}

/// Marks upload `id` used (it no longer waits for its user); a failure only leaves it counted
/// as waiting until the sweep, so it is logged.
pub async fn mark_used(store: &Store, id: &str) {
    let id = id.to_owned();
    let marked = store
        .call(move |c| {
            c.execute(
                "UPDATE uploads SET used_at = ?2 WHERE id = ?1",
                [&id, &outboard_base::util::now_rfc3339()],
            )?;
            Ok(())
        })
        .await;
    if let Err(e) = marked {
        tracing::warn!("cannot mark an upload used: {e}");
    }
}

/// Counts the members of a tar archive as its bytes arrive: each 512-byte header is read, the
/// member's data and padding skipped. GNU long names and pax headers are metadata of the member
/// that follows, not members. Its state is one header block.
#[derive(Debug)]
pub struct Tally {
    block: Box<[u8; 512]>,
    have: usize,
    skip: u64,
    members: u64,
}

impl Default for Tally {
    fn default() -> Self {
        Tally { block: Box::new([0; 512]), have: 0, skip: 0, members: 0 }
    }
}

impl Tally {
    /// Members whose header arrived.
    pub fn members(&self) -> u64 {
        self.members
    }

    /// Reads `bytes`, the next bytes of the archive.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = (self.skip.min(bytes.len() as u64)) as usize;
                self.skip -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let n = (512 - self.have).min(bytes.len());
            self.block[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == 512 {
                self.have = 0;
                self.header();
            }
        }
    }

    fn header(&mut self) {
        let block = &self.block;
        if block.iter().all(|b| *b == 0) {
            return; // the end-of-archive blocks (or padding the parser stops at)
        }
        let size = tar_size(&block[124..136]);
        self.skip = size.div_ceil(512).saturating_mul(512);
        match block[156] {
            b'x' | b'g' | b'L' | b'K' => {}
            _ => self.members += 1,
        }
    }
}

/// A header's size field: octal digits, or GNU's base-256 when the top bit is set.
fn tar_size(field: &[u8]) -> u64 {
    if field[0] & 0x80 != 0 {
        let mut n: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            n = n.saturating_mul(256).saturating_add(u64::from(*b));
        }
        return n;
    }
    let mut n: u64 = 0;
    for b in field.iter().skip_while(|b| **b == b' ') {
        match b {
            b'0'..=b'7' => n = n.saturating_mul(8).saturating_add(u64::from(b - b'0')),
            _ => break,
        }
    }
    n
}
