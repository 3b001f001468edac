//! Per-org quotas: what one org may consume of the server, with documented defaults that an
//! admin changes per org (`outboard-server admin quota set --org ORG KEY VALUE`).
//!
//! CONTRACT (used by `gateway`/`hub`, `orgfs`, `tools`, `main`, and the sandbox manager):
//! [`Quotas`] (`Quotas::for_org(&store, &org).await?.live_sandboxes`), [`QuotaKey`],
//! [`create_session`], [`charge_org_file`], [`workspace_over`], [`workspace_write_refusal`],
//! [`set`], [`show`].
//!
//! | key | default | enforced |
//! |---|---|---|
//! | `workspace_bytes` | 10 GiB | after each Bash command and before each workspace Write/Edit, by measuring the workspace |
//! | `org_file_versions` | 100,000 | in the transaction of every org file change |
//! | `org_file_bytes` | 1 GiB | same, counting every version's size |
//! | `sessions_per_hour` | 120 | in the transaction that creates the session |
//! | `title_bytes` | 256 | when the session is created (the CLI's 60-character titles always fit) |
//! | `live_sandboxes` | 8 | stored here; the sandbox manager reads it |
//! | `upload_bytes_per_day`, `upload_files_per_day` | 10 GiB, 2,000,000 | stored here; `POST /v1/uploads` checks them as the body arrives (server `uploads::limits`) |
//! | `pending_uploads_per_user`, `pending_upload_bytes_per_user` | 8, 1 GiB | same |
//!
//! Design choices:
//! - **Checked where the write commits.** The org file and session quotas are read and checked
//!   inside the store transaction that writes (the store has one writer thread), so two
//!   concurrent writers cannot both slip under the limit. Org file usage is a counter row kept
//!   in that same transaction (`org_file_usage`), so the check is one indexed read.
//! - **The workspace is measured, not tracked.** Commands write files the server never sees,
//!   so the only honest number is a walk of the workspace: the sum of `st_blocks * 512` of every
//!   entry (hard links once), without following symlinks or crossing into other filesystems, on
//!   a blocking thread, cancellable, and bounded to [`WALK_MAX_ENTRIES`] entries. A command runs
//!   whatever the usage (so `rm` can bring it back), and if the workspace is over the quota when
//!   it ends, the command reports failure with the usage. A `Write`/`Edit` that would grow a
//!   workspace past the quota is refused before it writes. Limits: a single command can overshoot
//!   while it runs (it is measured when it ends; the disk itself is the backstop), background
//!   processes can write between measurements, and a workspace the walk cannot finish (more
//!   entries than the bound, an unreadable directory) counts as over. Filesystem project quotas
//!   or a loop-mounted image per workspace would bound a command as it writes.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use outboard_shared::{ErrorBody, ErrorCode, OrgId};
use outboard_store::db::{params, Db, OptionalExtension};
use tokio_util::sync::CancellationToken;

use outboard_base::util::now_rfc3339;
use outboard_store::{
    insert_session, org_id_by_name, org_name, SessionRow, Store, StoreError, UserRow,
};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Entries a workspace measurement visits at most; a workspace with more counts as over its
/// quota (the walk's time is bounded, and a million tiny files must not hide a big one).
pub const WALK_MAX_ENTRIES: u64 = 2_000_000;

/// One quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKey {
    /// Disk used by one session's workspace, bytes.
    WorkspaceBytes,
    /// Versions of org files kept, all paths and versions of the org.
    OrgFileVersions,
    /// Bytes of org files kept, every version counted.
    OrgFileBytes,
    /// Sessions the org may create per rolling hour.
    SessionsPerHour,
    /// Length of a session title, bytes.
    TitleBytes,
    /// Sandboxes of the org's sessions running at once (enforced by the sandbox manager).
    LiveSandboxes,
    /// Disk used by one session's checkpoints (its shadow repository), bytes: past it the
    /// oldest checkpoints' files are dropped.
    CheckpointBytes,
    /// Archive bytes of the org's uploads of the last day (waiting, arriving or used: a row is
    /// kept a day), counted from each upload's first byte.
    UploadBytesPerDay,
    /// Archive members (files, directories, links) of the same uploads: what their unpacking
    /// creates, so that many small uploads of empty files cannot exhaust the disk's inodes.
    UploadFilesPerDay,
    /// Uploads one user may have waiting for a session (stored or still arriving).
    PendingUploadsPerUser,
    /// Archive bytes of those waiting uploads.
    PendingUploadBytesPerUser,
}

impl QuotaKey {
    /// Every key, in the order `admin quota show` lists them.
    pub const ALL: [QuotaKey; 11] = [
        QuotaKey::WorkspaceBytes,
        QuotaKey::OrgFileVersions,
        QuotaKey::OrgFileBytes,
        QuotaKey::SessionsPerHour,
        QuotaKey::TitleBytes,
        QuotaKey::LiveSandboxes,
        QuotaKey::CheckpointBytes,
        QuotaKey::UploadBytesPerDay,
        QuotaKey::UploadFilesPerDay,
        QuotaKey::PendingUploadsPerUser,
        QuotaKey::PendingUploadBytesPerUser,
    ];

    /// The name used by `admin quota` and stored in `org_quotas`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaKey::WorkspaceBytes => "workspace_bytes",
            QuotaKey::OrgFileVersions => "org_file_versions",
            QuotaKey::OrgFileBytes => "org_file_bytes",
            QuotaKey::SessionsPerHour => "sessions_per_hour",
            QuotaKey::TitleBytes => "title_bytes",
            QuotaKey::LiveSandboxes => "live_sandboxes",
            QuotaKey::CheckpointBytes => "checkpoint_bytes",
            QuotaKey::UploadBytesPerDay => "upload_bytes_per_day",
            QuotaKey::UploadFilesPerDay => "upload_files_per_day",
            QuotaKey::PendingUploadsPerUser => "pending_uploads_per_user",
            QuotaKey::PendingUploadBytesPerUser => "pending_upload_bytes_per_user",
        }
    }

    /// The default when the org has no override.
    pub fn default_value(self) -> u64 {
        match self {
            QuotaKey::WorkspaceBytes => 10 * GIB,
            QuotaKey::OrgFileVersions => 100_000,
            QuotaKey::OrgFileBytes => GIB,
            QuotaKey::SessionsPerHour => 120,
            QuotaKey::TitleBytes => 256,
            QuotaKey::LiveSandboxes => 8,
            QuotaKey::CheckpointBytes => 2 * GIB,
            QuotaKey::UploadBytesPerDay => 10 * GIB,
            QuotaKey::UploadFilesPerDay => 2_000_000,
            QuotaKey::PendingUploadsPerUser => 8,
            QuotaKey::PendingUploadBytesPerUser => GIB,
        }
    }

    /// Whether the value is a size in bytes (shown as KiB/MiB/GiB, accepts those suffixes).
    pub fn is_bytes(self) -> bool {
        matches!(
            self,
            QuotaKey::WorkspaceBytes
                | QuotaKey::OrgFileBytes
                | QuotaKey::TitleBytes
                | QuotaKey::CheckpointBytes
                | QuotaKey::UploadBytesPerDay
                | QuotaKey::PendingUploadBytesPerUser
        )
    }
}

impl std::str::FromStr for QuotaKey {
    type Err = QuotaError;

    fn from_str(s: &str) -> Result<Self, QuotaError> {
        QuotaKey::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| QuotaError::UnknownKey(s.to_owned()))
    }
}

/// Why a quota could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// Not one of the quotas.
    #[error("unknown quota {0:?}: use one of {keys}", keys = key_list())]
    UnknownKey(String),
    /// Not a number (or `default`).
    #[error(
        "invalid value {0:?}: give a whole number (bytes may end in KiB, MiB or GiB), or \
         `default` to go back to the default"
    )]
    InvalidValue(String),
    /// The org does not exist.
    #[error(
        "no org named {0:?}: orgs are created by `outboard-server admin user add NAME --org ORG`"
    )]
    NoOrg(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn key_list() -> String {
    QuotaKey::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
}

/// The quotas of one org, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quotas {
    /// See [`QuotaKey::WorkspaceBytes`].
    pub workspace_bytes: u64,
    /// See [`QuotaKey::OrgFileVersions`].
    pub org_file_versions: u64,
    /// See [`QuotaKey::OrgFileBytes`].
    pub org_file_bytes: u64,
    /// See [`QuotaKey::SessionsPerHour`].
    pub sessions_per_hour: u64,
    /// See [`QuotaKey::TitleBytes`].
    pub title_bytes: u64,
    /// See [`QuotaKey::LiveSandboxes`].
    pub live_sandboxes: u64,
    /// See [`QuotaKey::CheckpointBytes`].
    pub checkpoint_bytes: u64,
    /// See [`QuotaKey::UploadBytesPerDay`].
    pub upload_bytes_per_day: u64,
    /// See [`QuotaKey::UploadFilesPerDay`].
    pub upload_files_per_day: u64,
    /// See [`QuotaKey::PendingUploadsPerUser`].
    pub pending_uploads_per_user: u64,
    /// See [`QuotaKey::PendingUploadBytesPerUser`].
    pub pending_upload_bytes_per_user: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        let mut q = Quotas {
            workspace_bytes: 0,
            org_file_versions: 0,
            org_file_bytes: 0,
            sessions_per_hour: 0,
            title_bytes: 0,
            live_sandboxes: 0,
            checkpoint_bytes: 0,
            upload_bytes_per_day: 0,
            upload_files_per_day: 0,
            pending_uploads_per_user: 0,
            pending_upload_bytes_per_user: 0,
        };
        for key in QuotaKey::ALL {
            *q.slot(key) = key.default_value();
        }
        q
    }
}

impl Quotas {
    fn slot(&mut self, key: QuotaKey) -> &mut u64 {
        match key {
            QuotaKey::WorkspaceBytes => &mut self.workspace_bytes,
            QuotaKey::OrgFileVersions => &mut self.org_file_versions,
            QuotaKey::OrgFileBytes => &mut self.org_file_bytes,
            QuotaKey::SessionsPerHour => &mut self.sessions_per_hour,
            QuotaKey::TitleBytes => &mut self.title_bytes,
            QuotaKey::LiveSandboxes => &mut self.live_sandboxes,
            QuotaKey::CheckpointBytes => &mut self.checkpoint_bytes,
            QuotaKey::UploadBytesPerDay => &mut self.upload_bytes_per_day,
            QuotaKey::UploadFilesPerDay => &mut self.upload_files_per_day,
            QuotaKey::PendingUploadsPerUser => &mut self.pending_uploads_per_user,
            QuotaKey::PendingUploadBytesPerUser => &mut self.pending_upload_bytes_per_user,
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: QuotaKey) -> u64 {
        match key {
            QuotaKey::WorkspaceBytes => self.workspace_bytes,
            QuotaKey::OrgFileVersions => self.org_file_versions,
            QuotaKey::OrgFileBytes => self.org_file_bytes,
            QuotaKey::SessionsPerHour => self.sessions_per_hour,
            QuotaKey::TitleBytes => self.title_bytes,
            QuotaKey::LiveSandboxes => self.live_sandboxes,
            QuotaKey::CheckpointBytes => self.checkpoint_bytes,
            QuotaKey::UploadBytesPerDay => self.upload_bytes_per_day,
            QuotaKey::UploadFilesPerDay => self.upload_files_per_day,
            QuotaKey::PendingUploadsPerUser => self.pending_uploads_per_user,
            QuotaKey::PendingUploadBytesPerUser => self.pending_upload_bytes_per_user,
        }
    }

    /// The quotas of `org`, read on the store thread (inside a transaction when `c` is one).
    pub fn read(c: &Db, org: &OrgId) -> Result<Quotas, StoreError> {
        Ok(Self::read_overrides(c, org)?.0)
    }

    /// The quotas of `org` and which keys the org overrides.
    fn read_overrides(c: &Db, org: &OrgId) -> Result<(Quotas, Vec<QuotaKey>), StoreError> {
        let mut quotas = Quotas::default();
        let mut set = Vec::new();
        let mut stmt = c.prepare_cached("SELECT key, value FROM org_quotas WHERE org_id = ?1")?;
        let rows =
            stmt.query_map([&org.0], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        for row in rows {
            let (key, value) = row?;
            // A key from a newer server is ignored rather than failing every check.
            if let Ok(key) = key.parse::<QuotaKey>() {
                *quotas.slot(key) = value.max(0) as u64;
                set.push(key);
            }
        }
        Ok((quotas, set))
    }

    /// The quotas of `org` (one indexed read). The sandbox manager reads `live_sandboxes` here.
    pub async fn for_org(store: &Store, org: &OrgId) -> Result<Quotas, StoreError> {
        let org = org.clone();
        store.call(move |c| Quotas::read(c, &org)).await
    }
}

/// A size for people: `512 B`, `3.5 KiB`, `10 GiB`, `10.2 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    let (unit, name) = match bytes {
        b if b >= GIB => (GIB, "GiB"),
        b if b >= MIB => (MIB, "MiB"),
        b if b >= KIB => (KIB, "KiB"),
        _ => return format!("{bytes} B"),
    };
    let tenths = (bytes as u128 * 10 / unit as u128) as u64;
    if tenths.is_multiple_of(10) {
        format!("{} {name}", tenths / 10)
    } else {
        format!("{}.{} {name}", tenths / 10, tenths % 10)
    }
}

fn shown(key: QuotaKey, value: u64) -> String {
    if key.is_bytes() && value >= KIB {
        format!("{value} ({})", human_bytes(value))
    } else {
        value.to_string()
    }
}

/// Parses `admin quota set`'s value: `default` (`None`), a whole number, or for byte quotas a
/// number with a `KiB`/`MiB`/`GiB` suffix.
pub fn parse_value(key: QuotaKey, raw: &str) -> Result<Option<u64>, QuotaError> {
    let raw = raw.trim();
    if raw == "default" {
        return Ok(None);
    }
    let invalid = || QuotaError::InvalidValue(raw.to_owned());
    let (digits, unit) = match raw.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => (&raw[..at], raw[at..].trim()),
        None => (raw, ""),
    };
    let unit = match unit {
        "" => 1,
        "KiB" | "K" if key.is_bytes() => KIB,
        "MiB" | "M" if key.is_bytes() => MIB,
        "GiB" | "G" if key.is_bytes() => GIB,
        _ => return Err(invalid()),
    };
    let n: u64 = digits.parse().map_err(|_| invalid())?;
    let value = n.checked_mul(unit).filter(|v| *v <= i64::MAX as u64).ok_or_else(invalid)?;
    Ok(Some(value))
}

/// `admin quota set --org ORG KEY VALUE`: sets (or with `default`, removes) an override and
/// returns the org's quotas after the change.
pub async fn set(store: &Store, org: &str, key: &str, value: &str) -> Result<String, QuotaError> {
    let key: QuotaKey = key.parse()?;
    let value = parse_value(key, value)?;
    let org = org.to_owned();
    store
        .call(move |c| {
            let tx = c.transaction()?;
            let Some(id) = org_id_by_name(&tx, &org)? else {
                return Ok(Err(QuotaError::NoOrg(org.clone())));
            };
            match value {
                Some(v) => tx.execute(
                    "INSERT INTO org_quotas (org_id, key, value, set_at) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (org_id, key) DO UPDATE SET value = ?3, set_at = ?4",
                    params![id.0, key.as_str(), v as i64, now_rfc3339()],
                )?,
                None => tx.execute(
                    "DELETE FROM org_quotas WHERE org_id = ?1 AND key = ?2",
                    params![id.0, key.as_str()],
                )?,
            };
            let table = render(&tx, &org, &id)?;
            tx.commit()?;
            Ok(Ok(table))
        })
        .await?
}

/// `admin quota show --org ORG`: every quota with its value, usage where known, and whether it
/// is the default.
pub async fn show(store: &Store, org: &str) -> Result<String, QuotaError> {
    let org = org.to_owned();
    store
        .call(move |c| {
            let Some(id) = org_id_by_name(c, &org)? else {
                return Ok(Err(QuotaError::NoOrg(org.clone())));
            };
            Ok(Ok(render(c, &org, &id)?))
        })
        .await?
}

fn render(c: &Db, org: &str, id: &OrgId) -> Result<String, StoreError> {
    let (quotas, set) = Quotas::read_overrides(c, id)?;
    let (versions, bytes) = org_file_usage(c, id)?;
    let hour = sessions_last_hour(c, id)?;
    let (upload_bytes, upload_files) = c
        .prepare_cached(
            "SELECT COALESCE(SUM(bytes), 0), COALESCE(SUM(files), 0) FROM uploads WHERE org_id = ?1",
        )?
        .query_row([&id.0], |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)))?;
    let mut out = format!("org {org}\n");
    for key in QuotaKey::ALL {
        let value = shown(key, quotas.get(key));
        let source = if set.contains(&key) { "set" } else { "default" };
        let used = match key {
            QuotaKey::OrgFileVersions => format!("  (used: {versions})"),
            QuotaKey::OrgFileBytes => format!("  (used: {})", human_bytes(bytes)),
            QuotaKey::SessionsPerHour => format!("  (used: {hour} in the last hour)"),
            QuotaKey::UploadBytesPerDay => format!("  (used: {})", human_bytes(upload_bytes)),
            QuotaKey::UploadFilesPerDay => format!("  (used: {upload_files})"),
            _ => String::new(),
        };
        out.push_str(&format!("{:<18} {value}  [{source}]{used}\n", key.as_str()));
    }
    Ok(out)
}

fn quota_error(message: String) -> ErrorBody {
    ErrorBody::new(ErrorCode::QuotaExceeded, message)
}

/// How to raise a quota, for messages.
pub fn raise_hint(org: &str, key: QuotaKey) -> String {
    format!(
        "an admin can raise it with `outboard-server admin quota set --org {org} {} N`",
        key.as_str()
    )
}

fn sessions_last_hour(c: &Db, org: &OrgId) -> Result<u64, StoreError> {
    // `created_at` is RFC 3339 UTC with milliseconds, and so is the cutoff, so the comparison
    // is a string comparison along `sessions_by_org_created`.
    let cutoff = outboard_base::util::rfc3339_ago(std::time::Duration::from_secs(3600));
    let n: i64 = c
        .prepare_cached("SELECT COUNT(*) FROM sessions WHERE org_id = ?1 AND created_at > ?2")?
        .query_row([&org.0, &cutoff], |r| r.get(0))?;
    Ok(n as u64)
}

/// Creates a session for `session/create`: refuses a title longer than `title_bytes` and a
/// session past the org's `sessions_per_hour`, counted and inserted in one transaction.
pub async fn create_session(
    store: &Store,
    owner: &UserRow,
    title: &str,
    model: &str,
) -> Result<SessionRow, ErrorBody> {
    create_session_row(store, owner, SessionRow::new(owner, title, model)).await
}

/// [`create_session`] of a row built by the caller (one with a recorded workspace).
pub async fn create_session_row(
    store: &Store,
    owner: &UserRow,
    row: SessionRow,
) -> Result<SessionRow, ErrorBody> {
    let org_label = owner.org.clone();
    let r = row.clone();
    let decided = store
        .call(move |c| {
            let tx = c.transaction_immediate()?;
            let quotas = Quotas::read(&tx, &r.org_id)?;
            if r.title.len() as u64 > quotas.title_bytes {
                return Ok(Err(quota_error(format!(
                    "the title is {} bytes; the limit is {} bytes (title_bytes quota): shorten it",
                    r.title.len(),
                    quotas.title_bytes
                ))));
            }
            let hour = sessions_last_hour(&tx, &r.org_id)?;
            if hour >= quotas.sessions_per_hour {
                return Ok(Err(quota_error(format!(
                    "your org created {hour} sessions in the last hour, its sessions_per_hour \
                     quota ({}): continue an existing session (`outboard sessions` lists them) or \
                     try again later; {}",
                    quotas.sessions_per_hour,
                    raise_hint(&org_label, QuotaKey::SessionsPerHour)
                ))));
            }
            insert_session(&tx, &r)?;
            tx.commit()?;
            Ok(Ok(()))
        })
        .await
        .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))?;
    decided.map(|()| row)
}

fn org_file_usage(c: &Db, org: &OrgId) -> Result<(u64, u64), StoreError> {
    Ok(c.prepare_cached("SELECT versions, bytes FROM org_file_usage WHERE org_id = ?1")?
        .query_row([&org.0], |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64)))
        .optional()?
        .unwrap_or((0, 0)))
}

/// Charges one new org file version of `size` bytes to `org`, inside the transaction that
/// writes it: refused (with the message for whoever wrote) when it would pass
/// `org_file_versions` or `org_file_bytes`; otherwise the usage counter moves with the version.
pub fn charge_org_file(c: &Db, org: &OrgId, size: u64) -> Result<Result<(), String>, StoreError> {
    let quotas = Quotas::read(c, org)?;
    let (versions, bytes) = org_file_usage(c, org)?;
    let refusal = |what: String, key: QuotaKey| {
        let name = org_name(c, org);
        format!(
            "{what}; nothing was written. Every version of an org file is kept, so deleting does \
             not free room: keep big or generated data in /workspace instead; {}",
            raise_hint(&name, key)
        )
    };
    if versions + 1 > quotas.org_file_versions {
        return Ok(Err(refusal(
            format!(
                "the org's files hold {versions} versions, its org_file_versions quota ({})",
                quotas.org_file_versions
            ),
            QuotaKey::OrgFileVersions,
        )));
    }
    if bytes + size > quotas.org_file_bytes {
        return Ok(Err(refusal(
            format!(
                "this version ({}) would take the org's files to {} of its org_file_bytes quota \
                 ({})",
                human_bytes(size),
                human_bytes(bytes + size),
                human_bytes(quotas.org_file_bytes)
            ),
            QuotaKey::OrgFileBytes,
        )));
    }
    c.prepare_cached(
        "INSERT INTO org_file_usage (org_id, versions, bytes) VALUES (?1, 1, ?2)
         ON CONFLICT (org_id) DO UPDATE SET versions = org_file_usage.versions + 1,
                                             bytes = org_file_usage.bytes + ?2",
    )?
    .execute(params![org.0, size as i64])?;
    Ok(Ok(()))
}

/// A workspace's measured disk usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes used: per entry the larger of its apparent size and its allocated blocks
    /// (`st_blocks * 512`), hard links counted once. Apparent sizes count, so a sparse file
    /// (`truncate -s 8G`) weighs what reading it costs: diffs, pushes and copies read it whole.
    pub bytes: u64,
    /// Entries visited.
    pub entries: u64,
}

/// Why a workspace could not be measured; each counts as over the quota.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// More entries than [`WALK_MAX_ENTRIES`].
    #[error(
        "the workspace holds more than {WALK_MAX_ENTRIES} files and directories, too many to \
         measure its disk usage; delete files (e.g. build outputs, caches) to continue"
    )]
    TooManyEntries,
    /// A directory could not be listed.
    #[error(
        "cannot measure the workspace's disk usage: {path} cannot be read ({source}); make it \
         readable (`chmod u+rx`) or delete it"
    )]
    Unreadable {
        /// Shown as a workspace path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The turn was interrupted.
    #[error("interrupted")]
    Cancelled,
}

/// Measures the disk usage of the tree at `root` (see the module header). Blocking: call it on a
/// blocking thread.
pub fn measure(
    root: &Path,
    cancel: &CancellationToken,
    max_entries: u64,
) -> Result<Usage, MeasureError> {
    use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
    use std::os::unix::ffi::OsStrExt as _;
    use std::rc::Rc;

    let shown = |p: &Path| match p.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => "/workspace".to_owned(),
        Ok(rel) => format!("/workspace/{}", rel.display()),
        Err(_) => p.display().to_string(),
    };
    let unreadable = |p: &Path, e: rustix::io::Errno| MeasureError::Unreadable {
        path: shown(p),
        source: e.into(),
    };
    // The root itself may be reached through a symlink (a data dir under a linked home); below
    // it, every directory is opened relative to its parent's descriptor with `O_NOFOLLOW`, so a
    // command that swaps a directory for a symlink while we walk cannot lead the walk out.
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let top = rustix::fs::open(root, flags, Mode::empty()).map_err(|e| unreadable(root, e))?;
    let stat = rustix::fs::fstat(&top).map_err(|e| unreadable(root, e))?;
    let dev = stat.st_dev;
    let mut usage = Usage { bytes: weight(&stat), entries: 1 };
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    // Pending directories: the parent's descriptor (shared, so at most the current path's
    // directories are open at once), the name in it, and its path for messages.
    let mut stack: Vec<(Rc<OwnedFd>, Option<std::ffi::OsString>, PathBuf)> =
        vec![(Rc::new(top), None, root.to_path_buf())];
    while let Some((parent, name, path)) = stack.pop() {
        let fd = match name {
            None => parent,
            Some(name) => {
                match rustix::fs::openat(
                    &*parent,
                    name.as_os_str(),
                    flags | OFlags::NOFOLLOW,
                    Mode::empty(),
                ) {
                    Ok(fd) => Rc::new(fd),
                    // Removed or replaced (by a symlink, a file) since it was listed.
                    Err(
                        rustix::io::Errno::NOENT
                        | rustix::io::Errno::NOTDIR
                        | rustix::io::Errno::LOOP,
                    ) => continue,
                    Err(e) => return Err(unreadable(&path, e)),
                }
            }
        };
        let dir = Dir::read_from(&*fd).map_err(|e| unreadable(&path, e))?;
        for entry in dir {
            let entry = entry.map_err(|e| unreadable(&path, e))?;
            let child = entry.file_name();
            if child == c"." || child == c".." {
                continue;
            }
            usage.entries += 1;
            if usage.entries > max_entries {
                return Err(MeasureError::TooManyEntries);
            }
            if usage.entries.is_multiple_of(1024) && cancel.is_cancelled() {
                return Err(MeasureError::Cancelled);
            }
            // lstat: a symlink is counted as itself and never followed.
            let Ok(st) = rustix::fs::statat(&*fd, child, AtFlags::SYMLINK_NOFOLLOW) else {
                continue; // removed while we walked
            };
            if st.st_dev != dev {
                continue; // another filesystem mounted inside: not this workspace's disk
            }
            let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            if st.st_nlink > 1 && !is_dir && !linked.insert((st.st_dev, st.st_ino)) {
                continue;
            }
            usage.bytes = usage.bytes.saturating_add(weight(&st));
            if is_dir {
                let name = std::ffi::OsStr::from_bytes(child.to_bytes()).to_os_string();
                let child_path = path.join(&name);
                stack.push((fd.clone(), Some(name), child_path));
            }
        }
    }
    Ok(usage)
}

/// What one entry counts for: the larger of its apparent size and its allocated blocks (see
/// [`Usage::bytes`]).
fn weight(st: &rustix::fs::Stat) -> u64 {
    let allocated = u64::try_from(st.st_blocks).unwrap_or(0).saturating_mul(512);
    let apparent = u64::try_from(st.st_size).unwrap_or(0);
    allocated.max(apparent)
}

/// Measures `root` on a blocking thread.
async fn measure_async(root: PathBuf, cancel: CancellationToken) -> Result<Usage, MeasureError> {
    tokio::task::spawn_blocking(move || measure(&root, &cancel, WALK_MAX_ENTRIES))
        .await
        .unwrap_or(Err(MeasureError::Cancelled))
}

/// The message for a workspace over its quota.
pub fn exceeded_message(used: u64, quota: u64) -> String {
    format!(
        "workspace quota exceeded: {} used of {}; delete files in /workspace (build outputs, \
         caches, downloads) to get back under it. Until then Write and Edit that add data are \
         refused.",
        human_bytes(used),
        human_bytes(quota)
    )
}

async fn workspace_quota(store: &Store, org: &OrgId) -> Option<u64> {
    match Quotas::for_org(store, org).await {
        Ok(q) => Some(q.workspace_bytes),
        Err(e) => {
            tracing::warn!("cannot read the org's quotas; workspace quota not checked: {e}");
            None
        }
    }
}

/// After a command: the message to fail it with when the workspace at `root` is over `org`'s
/// `workspace_bytes`, or `None`. An interrupted turn is not measured.
pub async fn workspace_over(
    store: &Store,
    org: &OrgId,
    root: &Path,
    cancel: &CancellationToken,
) -> Option<String> {
    let quota = workspace_quota(store, org).await?;
    match measure_async(root.to_path_buf(), cancel.clone()).await {
        Ok(usage) if usage.bytes > quota => Some(exceeded_message(usage.bytes, quota)),
        Ok(_) | Err(MeasureError::Cancelled) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// Before a `Write`/`Edit` of the workspace that may add `growth` bytes: the refusal when the
/// workspace would end up over `org`'s `workspace_bytes`, or `None`. A write that adds nothing is
/// always allowed, so a workspace over its quota can still be trimmed.
pub async fn workspace_write_refusal(
    store: &Store,
    org: &OrgId,
    root: &Path,
    growth: u64,
    cancel: &CancellationToken,
) -> Option<String> {
    if growth == 0 {
        return None;
    }
    let quota = workspace_quota(store, org).await?;
    match measure_async(root.to_path_buf(), cancel.clone()).await {
        Ok(usage) if usage.bytes > quota => {
            Some(format!("Not written: {}", exceeded_message(usage.bytes, quota)))
        }
        Ok(usage) if usage.bytes.saturating_add(growth) > quota => Some(format!(
            "Not written: this write adds {} and the workspace already uses {} of its {} quota \
             (workspace_bytes); delete files in /workspace first.",
            human_bytes(growth),
            human_bytes(usage.bytes),
            human_bytes(quota)
        )),
        Ok(_) | Err(MeasureError::Cancelled) => None,
        Err(e) => Some(format!("Not written: {e}")),
    }
}

/// A workspace watch re-reads the org's quota every this many checks (an admin's change applies
/// within seconds, without a store read per second per running sandbox).
const WATCH_QUOTA_EVERY: u32 = 10;

/// A workspace watch walks the tree at least every this many checks, whatever the filesystem's
/// used space says (files deleted elsewhere on the same filesystem can hide the workspace's
/// growth).
const WATCH_WALK_EVERY: u32 = 30;

/// The workspace quota while commands run (the sandbox's watch calls [`WorkspaceWatch::check`]
/// once a second while the sandbox runs; see `outboard_sandbox::watch`).
///
/// Walking the tree every second would cost a large workspace a core, so the walk runs only
/// when the workspace may have crossed the quota: the growth of the filesystem's used space
/// since the last walk bounds the workspace's growth (every byte a command writes lands on that
/// filesystem), so while the last walk's usage plus that growth stays under the quota, nothing
/// is walked. Every [`WATCH_WALK_EVERY`]th check walks anyway. Apparent sizes (a sparse file)
/// do not move the filesystem's used space: the check after each command counts them.
///
/// It trips when the workspace is over the quota *and grew* since the previous walk, so a
/// workspace left over its quota can still be trimmed by the next command.
pub struct WorkspaceWatch {
    store: Store,
    org: OrgId,
    root: PathBuf,
    state: std::sync::Mutex<WatchState>,
}

#[derive(Debug, Default)]
struct WatchState {
    /// Usage at the last walk.
    usage: u64,
    /// The filesystem's used bytes at the last walk.
    fs_used: u64,
    checks: u32,
    quota: Option<u64>,
    /// The last walk could not count the tree (too many entries): tripped once, not again.
    unmeasurable: bool,
}

impl WorkspaceWatch {
    /// A watch of the workspace at `root` against `org`'s `workspace_bytes`.
    pub fn new(store: Store, org: OrgId, root: PathBuf) -> Self {
        WorkspaceWatch { store, org, root, state: Default::default() }
    }

    /// `start`: take a baseline (the sandbox has just started running), never trips. Otherwise:
    /// the sentence for the model when the workspace went over its quota since the last check.
    pub async fn check(&self, start: bool) -> Option<String> {
        let fs_used = fs_used(&self.root);
        let (quota, walk) = {
            let mut st = self.lock();
            st.checks = if start { 0 } else { st.checks.wrapping_add(1) };
            let stale = st.quota.is_none() || st.checks.is_multiple_of(WATCH_QUOTA_EVERY);
            (
                if stale { None } else { st.quota },
                start || st.checks.is_multiple_of(WATCH_WALK_EVERY),
            )
        };
        let quota = match quota {
            Some(q) => q,
            None => {
                let q = workspace_quota(&self.store, &self.org).await?;
                self.lock().quota = Some(q);
                q
            }
        };
        if !walk {
            let st = self.lock();
            let bound =
                st.usage.saturating_add(fs_used.unwrap_or(u64::MAX).saturating_sub(st.fs_used));
            if bound <= quota {
                return None;
            }
        }
        let measured = measure_async(self.root.clone(), CancellationToken::new()).await;
        let mut st = self.lock();
        st.fs_used = fs_used.unwrap_or(0);
        match measured {
            Ok(usage) => {
                let grew = usage.bytes > st.usage;
                st.usage = usage.bytes;
                st.unmeasurable = false;
                (!start && grew && usage.bytes > quota).then(|| watch_message(usage.bytes, quota))
            }
            Err(e @ MeasureError::TooManyEntries) => {
                let first = !std::mem::replace(&mut st.unmeasurable, true);
                (!start && first).then(|| format!("The sandbox's commands were stopped: {e}"))
            }
            // An unreadable directory: the check after the command reports it.
            Err(MeasureError::Unreadable { .. } | MeasureError::Cancelled) => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The used bytes of the filesystem holding `root`.
fn fs_used(root: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(root).ok()?;
    Some(st.f_blocks.saturating_sub(st.f_bfree).saturating_mul(st.f_frsize))
}

/// What a command stopped by the watch is told.
pub fn watch_message(used: u64, quota: u64) -> String {
    format!(
        "The sandbox's commands (background ones too) were stopped: they wrote past the \
         workspace quota ({} used of {}). /workspace is intact; delete files to get back under \
         it.",
        human_bytes(used),
        human_bytes(quota)
    )
}

#[cfg(test)]
mod tests;
