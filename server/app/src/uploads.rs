//! Working trees sent by clients (`POST /v1/uploads`, `outboard run --upload`) and their
//! unpacking into a session's workspace ([`materialize`]).
//!
//! An upload is one uncompressed tar archive (the layout is in `docs/PROTOCOL.md`): the files of
//! the tree, and for a git work tree its branch's history as a `git bundle` at the reserved member
//! [`outboard_shared::http::UPLOAD_HISTORY_BUNDLE`]. The endpoint only stores it: it streams the
//! body to `<data dir>/uploads/<id>.tar.part` under [`crate::config::Limits::max_upload_bytes`]
//! (refused from `Content-Length` before a byte of the body is read, and counted while it
//! streams, for a sender that sends no length), fsyncs, renames it to `<id>.tar` and records the
//! row. The archive is only trusted to be what its uploader chose: it is checked member by member
//! when a session unpacks it, and nothing but regular files, directories and symlinks beneath the
//! destination ever lands; the `.git` is made by the server from the bundle, never unpacked.
//!
//! An upload is used once: [`materialize`] claims it by renaming the file, so two sessions
//! cannot both get it, and the row stays behind (marked used) to say "used already". Rows and
//! files older than [`UNUSED_UPLOAD_TTL`] are removed by [`sweep`], at start and every
//! [`SWEEP_INTERVAL`]; at start also every partial or claimed file a crash left. What uploads may
//! hold is bounded from their first byte by the org's quotas ([`limits`]), the body by a
//! deadline and its token's revocation, the unpack's work by [`unpack`] and a history bundle's by
//! [`bundle`]; once unpacked, the workspace quota measures the tree.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::{Extension, Json};
use futures_util::StreamExt as _;
use outboard_shared::{ErrorBody, ErrorCode, UploadResponse};
use tokio::io::AsyncWriteExt as _;
use tokio_util::sync::CancellationToken;

use crate::http_common::{authenticate, ApiError};
use crate::hub::Hub;
use crate::net::ConnInfo;
use outboard_org::quota::human_bytes;
use outboard_store::{Store, StoreError, UserRow};

/// A body that sends nothing for this long is cut: a stalled client must not hold a connection
/// and a partial file forever, and a minute is far beyond any pause of a working network.
pub const CHUNK_TIMEOUT: Duration = Duration::from_secs(60);

/// An upload no session used within this long is removed: `outboard run --upload` creates its
/// session right after the upload, so a day only keeps what a crashed client left for a while.
pub const UNUSED_UPLOAD_TTL: Duration = Duration::from_secs(24 * 3600);

/// How often [`sweep`] runs after the start.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// The longest branch name taken in the branch header (git's own limit is the file system's).
const MAX_BRANCH_BYTES: usize = 255;

pub use crate::config::uploads_dir;

/// Why an upload was refused or cannot be unpacked. Each message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// No such upload for this user (another user's id is reported the same way).
    #[error("no upload {0}: upload the tree again (`outboard run --upload`)")]
    NotFound(String),
    /// A session already used it.
    #[error(
        "upload {0} was used by a session already: an upload is used once, upload the tree again"
    )]
    Used(String),
    /// The body is over the cap.
    #[error(
        "the upload is {found_text} bytes{human}, over this server's cap of {cap} bytes ({cap_human}, \
         --max-upload-bytes): leave large files out with .gitignore, or ask the operator to raise the cap",
        found_text = if *complete { found.to_string() } else { format!("more than {found}") },
        human = if *complete { format!(" ({})", human_bytes(*found)) } else { String::new() },
        cap_human = human_bytes(*cap)
    )]
    TooLarge {
        /// The size the `Content-Length` announced, or the bytes received when the cap was passed.
        found: u64,
        /// The cap.
        cap: u64,
        /// Whether `found` is the whole size (false: the body was cut at the cap).
        complete: bool,
    },
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// An org or user quota on uploads (see [`limits`]).
    #[error("{0}")]
    Quota(String),
    /// The token was revoked while the body arrived.
    #[error(
        "the token was revoked while the upload arrived (after {received} bytes); nothing was \
         stored: upload again with a valid token"
    )]
    Revoked {
        /// Bytes received.
        received: u64,
    },
    /// The body stopped arriving or broke off.
    #[error("the upload broke off after {received} bytes ({reason}): try again")]
    Interrupted {
        /// Bytes received.
        received: u64,
        /// Why.
        reason: String,
    },
    /// A member of the archive cannot be read.
    #[error(
        "the uploaded archive is corrupt at member {member:?}: {reason}; upload the tree again"
    )]
    Corrupt {
        /// The member's path, as far as it could be read.
        member: String,
        /// Why.
        reason: String,
    },
    /// A member is not something a workspace may hold.
    #[error("the uploaded archive is refused: member {member:?} {reason}; nothing was unpacked")]
    Unsafe {
        /// The member's path.
        member: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A member past one of the unpack's bounds: depth, path length, a history bundle's.
    #[error("the uploaded archive is refused: member {member:?} {reason}; nothing was unpacked")]
    Bounded {
        /// The member's path.
        member: String,
        /// Which bound and by how much.
        reason: String,
        /// The bound (the metric's label).
        bound: limits::Bound,
    },
    /// `dest` is not an empty directory.
    #[error("cannot unpack into {0}: it must be an existing empty directory")]
    Destination(PathBuf),
    /// Making the `.git` from the history bundle failed.
    #[error("cannot restore the uploaded history (git {step}): {detail}")]
    Git {
        /// Which git command.
        step: String,
        /// Its error output.
        detail: String,
    },
    /// The server's own files.
    #[error("upload storage: {what}: {source} — check the data directory's disk and permissions")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The store.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl UploadError {
    /// The wire error.
    pub fn body(&self) -> ErrorBody {
        let code = match self {
            UploadError::NotFound(_) => ErrorCode::NotFound,
            UploadError::Used(_) => ErrorCode::Conflict,
            UploadError::TooLarge { .. } => ErrorCode::TooLarge,
            UploadError::Quota(_) => ErrorCode::QuotaExceeded,
            UploadError::Revoked { .. } => ErrorCode::Unauthorized,
            UploadError::BadRequest(_)
            | UploadError::Interrupted { .. }
            | UploadError::Corrupt { .. }
            | UploadError::Unsafe { .. }
            | UploadError::Bounded { .. } => ErrorCode::BadRequest,
            UploadError::Store(StoreError::Closed) => ErrorCode::ShuttingDown,
            UploadError::Destination(_)
            | UploadError::Git { .. }
            | UploadError::Io { .. }
            | UploadError::Store(_) => ErrorCode::Internal,
        };
        ErrorBody::new(code, self.to_string())
    }

    /// The bound an unpack hit, if that is why it failed.
    pub fn bound(&self) -> Option<limits::Bound> {
        match self {
            UploadError::Bounded { bound, .. } => Some(*bound),
            _ => None,
        }
    }

    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> UploadError {
        let what = what.into();
        move |source| UploadError::Io { what, source }
    }
}

impl From<UploadError> for ApiError {
    fn from(e: UploadError) -> ApiError {
        ApiError(e.body())
    }
}

/// What the upload endpoint shares between requests: the node's open tokens (a revoked token
/// ends its uploads) and the uploads arriving ([`limits::Ledger`]).
#[derive(Debug, Clone)]
pub struct Receiving {
    live: Arc<outboard_org::tokens::LiveTokens>,
    ledger: Arc<limits::Ledger>,
}

impl Receiving {
    /// The endpoint's state, for the router.
    pub fn new(live: Arc<outboard_org::tokens::LiveTokens>) -> Receiving {
        Receiving { live, ledger: Arc::default() }
    }
}

/// `POST /v1/uploads`: stores the body as a new upload of the authenticated user.
pub(crate) async fn upload(
    State(hub): State<Arc<Hub>>,
    Extension(info): Extension<ConnInfo>,
    Extension(receiving): Extension<Receiving>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<UploadResponse>, ApiError> {
    let user = authenticate(&hub, &headers, &info).await?;
    let refused = |bound: limits::Bound, e: UploadError| -> ApiError {
        hub.metrics().upload_refused(bound.label());
        tracing::info!(user = %user.name, org = %user.org, bound = bound.label(), "upload refused: {e}");
        e.into()
    };
    let cap = hub.config().limits.max_upload_bytes;
    let announced = match headers.get(header::CONTENT_LENGTH) {
        None => None,
        Some(v) => {
            Some(v.to_str().ok().and_then(|v| v.trim().parse::<u64>().ok()).ok_or_else(|| {
                UploadError::BadRequest("the Content-Length header is not a number".into())
            })?)
        }
    };
    if let Some(found) = announced.filter(|n| *n > cap) {
        // Refused before a byte of the body is read: the answer closes the connection.
        return Err(refused(
            limits::Bound::Cap,
            UploadError::TooLarge { found, cap, complete: true },
        ));
    }
    let branch = branch_header(&headers)?;
    // The upload counts from here: one more waiting upload of the user, and what it announced.
    let (quotas, stored) = limits::read(hub.store(), &user).await?;
    let entry = receiving.ledger.enter(&user);
    entry.set(announced.unwrap_or(0), 0);
    if let Err((bound, message)) = limits::check(&quotas, &entry.usage(&user, stored), &user.org) {
        return Err(refused(bound, UploadError::Quota(message)));
    }
    // Registered like a connection: the node's revocation check signals it.
    let watched = bearer(&headers).map(|token| receiving.live.watch(token));
    let dir = hub.config().uploads_dir();
    let id = outboard_base::util::new_id("up");
    let part = dir.join(format!("{id}.tar.part"));
    let deadline = hub.config().limits.upload_deadline;
    let arriving = Arriving { cap, deadline, quotas: &quotas, stored, user: &user, entry: &entry };
    let mut stream = body.into_data_stream();
    let result = receive(&mut stream, &dir, &part, &arriving, watched.as_ref()).await;
    let (bytes, files) = match result {
        Ok(got) => got,
        Err((bound, e)) => {
            remove_quietly(&part).await;
            if let (Some(b), Some(length)) = (bound, announced) {
                if b.is_quota() {
                    // The sender announced a length the server takes (under the cap): read the
                    // rest and drop it, so that it reads the answer rather than a reset.
                    drain(&mut stream, length, deadline).await;
                }
            }
            return Err(match bound {
                Some(bound) => refused(bound, e),
                None => e.into(),
            });
        }
    };
    let done = dir.join(format!("{id}.tar"));
    if let Err(e) = tokio::fs::rename(&part, &done).await {
        remove_quietly(&part).await;
        return Err(UploadError::io("cannot store the upload")(e).into());
    }
    sync_dir(&dir).await;
    let row = (id.clone(), bytes, files, branch);
    let committed = limits::commit_row(hub.store(), &user, &entry, row).await;
    drop(entry);
    match committed {
        Ok(Ok(())) => {}
        Ok(Err((bound, message))) => {
            remove_quietly(&done).await;
            return Err(refused(bound, UploadError::Quota(message)));
        }
        Err(e) => {
            remove_quietly(&done).await;
            return Err(e.into());
        }
    }
    tracing::info!(upload = %id, user = %user.name, org = %user.org, bytes, files, "upload stored");
    Ok(Json(UploadResponse { upload_id: id, bytes }))
}

/// The bearer token of a request [`authenticate`] accepted.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    Some(value.strip_prefix("Bearer ")?.trim()).filter(|t| !t.is_empty())
}

/// The branch header, checked: printable, no longer than [`MAX_BRANCH_BYTES`].
fn branch_header(headers: &HeaderMap) -> Result<Option<String>, UploadError> {
    let Some(value) = headers.get(outboard_shared::http::UPLOAD_BRANCH_HEADER) else {
        return Ok(None);
    };
    let bad = || {
        UploadError::BadRequest(format!(
            "the {} header must be a branch name of at most {MAX_BRANCH_BYTES} printable bytes",
            outboard_shared::http::UPLOAD_BRANCH_HEADER
        ))
    };
    let branch = value.to_str().map_err(|_| bad())?.trim();
    if branch.is_empty()
        || branch.len() > MAX_BRANCH_BYTES
        || branch.chars().any(|c| c.is_control() || c == ' ')
        || branch.starts_with('-')
    {
        return Err(bad());
    }
    Ok(Some(branch.to_owned()))
}

/// What a body being received is checked against.
struct Arriving<'a> {
    cap: u64,
    deadline: Duration,
    quotas: &'a outboard_org::quota::Quotas,
    stored: limits::Usage,
    user: &'a UserRow,
    entry: &'a limits::Entry,
}

/// Streams `body` into `part` (created new): at most `cap` bytes, each chunk within
/// [`CHUNK_TIMEOUT`], the whole within the deadline, the quotas checked at every chunk with
/// this upload's bytes and members so far, and cut when `watched`'s token is revoked; fsyncs it.
/// Returns the bytes written and the archive's members; an error names the bound it hit.
async fn receive(
    stream: &mut axum::body::BodyDataStream,
    dir: &Path,
    part: &Path,
    limits: &Arriving<'_>,
    watched: Option<&outboard_org::tokens::Watched>,
) -> Result<(u64, u64), (Option<limits::Bound>, UploadError)> {
    let plain = |e: UploadError| (None, e);
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(UploadError::io("cannot make the uploads directory"))
        .map_err(plain)?;
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(part)
        .await
        .map_err(UploadError::io("cannot create the upload's file"))
        .map_err(plain)?;
    let mut received: u64 = 0;
    let mut tally = limits::Tally::default();
    let deadline = tokio::time::Instant::now() + limits.deadline;
    let revoked = async {
        match watched {
            Some(w) => w.revoked().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(revoked);
    loop {
        let next = tokio::time::timeout(CHUNK_TIMEOUT, stream.next());
        let chunk = tokio::select! {
            () = &mut revoked => {
                return Err((Some(limits::Bound::Revoked), UploadError::Revoked { received }));
            }
            () = tokio::time::sleep_until(deadline) => {
                return Err((Some(limits::Bound::Deadline), UploadError::Interrupted {
                    received,
                    reason: format!(
                        "the body took longer than the server's upload deadline of {} s \
                         (--upload-deadline-secs)",
                        limits.deadline.as_secs()
                    ),
                }));
            }
            next = next => next,
        };
        let chunk = match chunk {
            Err(_) => {
                return Err(plain(UploadError::Interrupted {
                    received,
                    reason: format!("nothing arrived for {} s", CHUNK_TIMEOUT.as_secs()),
                }))
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(plain(UploadError::Interrupted { received, reason: e.to_string() }))
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        received = received.saturating_add(chunk.len() as u64);
        if received > limits.cap {
            let cap = limits.cap;
            let e = UploadError::TooLarge { found: cap, cap, complete: false };
            return Err((Some(limits::Bound::Cap), e));
        }
        tally.feed(&chunk);
        limits.entry.set(received, tally.members());
        let usage = limits.entry.usage(limits.user, limits.stored);
        if let Err((bound, message)) = limits::check(limits.quotas, &usage, &limits.user.org) {
            return Err((Some(bound), UploadError::Quota(message)));
        }
        file.write_all(&chunk)
            .await
            .map_err(UploadError::io("cannot write the upload"))
            .map_err(plain)?;
    }
    file.sync_all().await.map_err(UploadError::io("cannot sync the upload")).map_err(plain)?;
    Ok((received, tally.members()))
}

/// Reads what is left of a refused body, at most `length` bytes in all, each chunk within
/// [`CHUNK_TIMEOUT`] and the whole within `deadline`, keeping nothing.
async fn drain(stream: &mut axum::body::BodyDataStream, length: u64, deadline: Duration) {
    let until = tokio::time::Instant::now() + deadline;
    let mut read: u64 = 0;
    while read < length {
        let next = tokio::time::timeout(CHUNK_TIMEOUT, stream.next());
        match tokio::time::timeout_at(until, next).await {
            Ok(Ok(Some(Ok(chunk)))) => read += chunk.len() as u64,
            _ => return,
        }
    }
}

async fn remove_quietly(path: &Path) {
    if let Err(e) = tokio::fs::remove_file(path).await {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), "cannot remove an upload's file: {e}");
        }
    }
}

/// Makes a rename in `dir` durable; a failure only weakens durability, so it is logged.
async fn sync_dir(dir: &Path) {
    let dir = dir.to_path_buf();
    let synced = tokio::task::spawn_blocking(move || std::fs::File::open(&dir)?.sync_all()).await;
    if let Ok(Err(e)) = synced {
        tracing::warn!("cannot sync the uploads directory: {e}");
    }
}

/// What [`materialize`] unpacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Materialized {
    /// The archive's size.
    pub bytes: u64,
    /// The branch checked out (uploads from a git work tree on a branch).
    pub branch: Option<String>,
    /// The commit checked out (uploads with history).
    pub head: Option<String>,
    /// Directory lookups the unpack made: one per path component the kernel resolved for it
    /// (the `outboard_upload_unpack_lookups` metric), linear in the archive's size.
    pub lookups: u64,
}

/// The progress callback of [`materialize`]: `(phase, done, total)`. Phases: `unpacking` (bytes
/// of the archive read, of its size) and `restoring_history` (0 then 1, of 1). Called from the
/// calling task, at most once per archive member.
pub type Progress<'a> = &'a (dyn Fn(&str, u64, Option<u64>) + Sync);

/// Unpacks upload `id` of `user` into `dest` (an empty directory that exists), consuming the
/// upload: the working tree exactly as uploaded, and when the archive has a history bundle, a
/// `.git` whose HEAD is the uploaded branch at its commit with the index at HEAD, so that
/// `git status` in `dest` shows the uploaded uncommitted and untracked changes.
///
/// On any failure `dest` is left empty, and the upload is used up all the same (an archive
/// refused once is refused every time).
pub async fn materialize(
    store: &Store,
    data_dir: &Path,
    user: &UserRow,
    id: &str,
    dest: &Path,
    progress: Progress<'_>,
) -> Result<Materialized, UploadError> {
    let is_empty_dir = std::fs::read_dir(dest).map(|mut d| d.next().is_none()).unwrap_or(false);
    if !is_empty_dir {
        return Err(UploadError::Destination(dest.to_path_buf()));
    }
    let (uid, owner) = (id.to_owned(), user.id.0.clone());
    let row = store
        .call(move |c| {
            use outboard_store::db::OptionalExtension as _;
            c.query_row(
                "SELECT bytes, branch, files FROM uploads WHERE id = ?1 AND user_id = ?2",
                [&uid, &owner],
                |r| {
                    Ok((
                        r.get::<_, i64>(0)? as u64,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, i64>(2)? as u64,
                    ))
                },
            )
            .optional()
        })
        .await?;
    let Some((bytes, branch, files)) = row else {
        return Err(UploadError::NotFound(id.to_owned()));
    };
    let dir = uploads_dir(data_dir);
    let claimed = dir.join(format!("{id}.tar.claimed"));
    // The rename is the claim: of two sessions given the same id, one wins.
    match tokio::fs::rename(dir.join(format!("{id}.tar")), &claimed).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(UploadError::Used(id.to_owned()))
        }
        Err(e) => return Err(UploadError::io("cannot claim the upload")(e)),
    }
    limits::mark_used(store, id).await;
    let bundle = dir.join(format!("{id}.bundle"));
    let max_entries = match outboard_org::quota::Quotas::for_org(store, &user.org_id).await {
        Ok(q) => q.upload_files_per_day,
        Err(e) => {
            remove_quietly(&claimed).await;
            return Err(e.into());
        }
    };
    let counts = (files, max_entries);
    let result = unpack_and_restore(&claimed, &bundle, dest, bytes, counts, branch, progress).await;
    remove_quietly(&claimed).await;
    remove_quietly(&bundle).await;
    if result.is_err() {
        empty_dir(dest).await;
    }
    result
}

async fn unpack_and_restore(
    archive: &Path,
    bundle: &Path,
    dest: &Path,
    bytes: u64,
    (files, max_entries): (u64, u64),
    branch: Option<String>,
    progress: Progress<'_>,
) -> Result<Materialized, UploadError> {
    // The blocking unpack reports through a watch: it keeps only the latest count, so a slow
    // callback never holds the unpack back and nothing queues.
    let (tx, mut rx) = tokio::sync::watch::channel(0u64);
    let (a, b, d) = (archive.to_path_buf(), bundle.to_path_buf(), dest.to_path_buf());
    let mut unpack = tokio::task::spawn_blocking(move || unpack(&a, &b, &d, bytes, files, &tx));
    progress("unpacking", 0, Some(bytes));
    let (has_bundle, lookups) = loop {
        tokio::select! {
            joined = &mut unpack => {
                break joined.map_err(|e| UploadError::Io {
                    what: "the unpack task".into(),
                    source: std::io::Error::other(e.to_string()),
                })??;
            }
            changed = rx.changed() => {
                if changed.is_ok() {
                    let done = *rx.borrow_and_update();
                    progress("unpacking", done, Some(bytes));
                }
            }
        }
    };
    progress("unpacking", bytes, Some(bytes));
    if !has_bundle {
        if let Some(branch) = &branch {
            // A repository without a commit yet: a `.git` on the unborn branch, so `git status`
            // shows the files as untracked as it did for the uploader.
            let git = history::Git::new(dest)?;
            git.run("init", &["init", "-q", "--template="]).await?;
            git.run("symbolic-ref", &["symbolic-ref", "HEAD", &format!("refs/heads/{branch}")])
                .await?;
        }
        return Ok(Materialized { bytes, branch: None, head: None, lookups });
    }
    progress("restoring_history", 0, Some(1));
    history::check_bundle(bundle, max_entries).await?;
    let (branch, head) = history::restore_history(dest, bundle, branch.as_deref()).await?;
    progress("restoring_history", 1, Some(1));
    Ok(Materialized { bytes, branch, head: Some(head), lookups })
}

/// Reads the archive member by member into `dest`, the history bundle into `bundle`. Returns
/// whether there was a bundle.
fn unpack(
    archive: &Path,
    bundle: &Path,
    dest: &Path,
    bytes: u64,
    arrived: u64,
    progress: &tokio::sync::watch::Sender<u64>,
) -> Result<(bool, u64), UploadError> {
    let file = std::fs::File::open(archive).map_err(UploadError::io("cannot open the upload"))?;
    let counted = Counted { inner: file, read: Arc::new(std::sync::atomic::AtomicU64::new(0)) };
    let read = counted.read.clone();
    let mut tar = tar::Archive::new(std::io::BufReader::new(counted));
    tar.set_overwrite(false);
    tar.set_preserve_permissions(false);
    tar.set_preserve_ownerships(false);
    tar.set_unpack_xattrs(false);
    tar.set_preserve_mtime(true);
    let corrupt = |member: &str, e: &dyn std::fmt::Display| UploadError::Corrupt {
        member: member.to_owned(),
        reason: e.to_string(),
    };
    let mut has_bundle = false;
    let mut members: u64 = 0;
    let mut cursor = unpack::Cursor::new(dest)?;
    let mut total: u64 = 0;
    // Kinds already unpacked, by path: a second member of a path is refused (except a directory
    // named twice), so nothing is ever replaced, least of all a symlink by what it points at.
    let mut seen: HashMap<PathBuf, tar::EntryType> = HashMap::new();
    let entries = tar.entries().map_err(|e| corrupt("(archive header)", &e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| corrupt("(after the last good member)", &e))?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let path = entry.path().map_err(|e| corrupt(&raw, &e))?.into_owned();
        let unsafe_member =
            |reason: &str| UploadError::Unsafe { member: raw.clone(), reason: reason.to_owned() };
        let rel = checked_path(&path).map_err(|reason| unsafe_member(&reason))?;
        if let Some(reason) = unpack::too_deep(&rel) {
            tracing::info!(member = %raw, "an upload was refused at its depth: {reason}");
            return Err(UploadError::Bounded { member: raw, reason, bound: limits::Bound::Depth });
        }
        members += 1;
        // 0: an upload stored before members were counted.
        if arrived > 0 && members > arrived {
            return Err(unsafe_member(&format!(
                "is past the {arrived} members counted when the archive arrived"
            )));
        }
        let kind = entry.header().entry_type();
        total = total.saturating_add(entry.size());
        if total > bytes {
            return Err(unsafe_member(
                "makes the files larger than the archive (sparse members are not taken)",
            ));
        }
        if rel == Path::new(outboard_shared::http::UPLOAD_HISTORY_BUNDLE) {
            if !kind.is_file() {
                return Err(unsafe_member("is the history bundle's reserved path but not a file"));
            }
            entry.unpack(bundle).map_err(|e| corrupt(&raw, &e))?;
            has_bundle = true;
            continue;
        }
        if rel.starts_with(".outboard-upload") {
            return Err(unsafe_member("is under .outboard-upload/, which is reserved"));
        }
        match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => {}
            tar::EntryType::Directory | tar::EntryType::Symlink => {}
            other => {
                return Err(unsafe_member(&format!(
                    "is a {}: only regular files, directories and symlinks are taken",
                    kind_name(other)
                )))
            }
        }
        if let Some(before) = seen.get(&rel) {
            if !(before.is_dir() && kind.is_dir()) {
                return Err(unsafe_member("appears twice in the archive"));
            }
            continue;
        }
        // No member is reached through a symlink, not even one pointing inside `dest`: the
        // archive describes a tree, and a link in a path means it describes something else.
        // The cursor opens each name with `O_NOFOLLOW` (see `unpack.rs`).
        let (parents, name) = unpack::split(&rel);
        let mtime = entry.header().mtime().ok();
        let mode = entry.header().mode().unwrap_or(0o644);
        let placed = cursor.enter(&parents).and_then(|()| match kind {
            tar::EntryType::Directory => cursor.dir(name, mode),
            tar::EntryType::Symlink => {
                let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
                cursor.symlink(name, &target, mtime)
            }
            _ => cursor.file(name, mode, mtime, &mut entry),
        });
        match placed {
            Ok(()) => {}
            Err(unpack::Refused::Unsafe(reason)) => return Err(unsafe_member(&reason)),
            Err(unpack::Refused::Io(e)) => return Err(corrupt(&raw, &e)),
        }
        seen.insert(rel, kind);
        progress.send_replace(read.load(std::sync::atomic::Ordering::Relaxed));
    }
    Ok((has_bundle, cursor.lookups))
}

/// The member's path made relative and checked: no absolute path, no `..`, no `.git`.
fn checked_path(path: &Path) -> Result<PathBuf, String> {
    let mut rel = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(name) => {
                if is_git_dir_name(name) {
                    return Err(
                        "is a .git or under one: the server makes .git from the history bundle"
                            .into(),
                    );
                }
                rel.push(name);
            }
            Component::CurDir => {}
            Component::ParentDir => return Err("has a `..` component".into()),
            Component::RootDir | Component::Prefix(_) => return Err("is an absolute path".into()),
        }
    }
    if rel.as_os_str().is_empty() {
        return Err("has an empty path".into());
    }
    Ok(rel)
}

/// Whether git takes `name` for `.git`: it refuses such paths in an index on every platform
/// (`.GIT`, `.Git`, with trailing dots or spaces, the 8.3 name `GIT~1`), so a tree holding one
/// could never be snapshotted.
fn is_git_dir_name(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy().to_ascii_lowercase();
    let trimmed = name.trim_end_matches(['.', ' ']);
    trimmed == ".git" || trimmed == "git~1" || name.starts_with(".git:")
}

fn kind_name(kind: tar::EntryType) -> &'static str {
    match kind {
        tar::EntryType::Link => "hard link",
        tar::EntryType::Char => "character device",
        tar::EntryType::Block => "block device",
        tar::EntryType::Fifo => "FIFO",
        tar::EntryType::GNUSparse => "sparse file",
        _ => "special member",
    }
}

/// A reader that counts what it read (the unpack's progress).
struct Counted<R> {
    inner: R,
    read: Arc<std::sync::atomic::AtomicU64>,
}

impl<R: std::io::Read> std::io::Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// Removes everything in `dir`, leaving it empty (a failed materialization leaves nothing).
async fn empty_dir(dir: &Path) {
    let dir = dir.to_path_buf();
    let emptied = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    })
    .await;
    if !matches!(emptied, Ok(Ok(()))) {
        tracing::warn!("cannot empty the workspace after a failed unpack: {emptied:?}");
    }
}

/// Removes uploads older than `max_age` (rows and files); with `at_start`, also every partial
/// or claimed file, which only a crash leaves. Returns how many uploads were removed.
pub async fn sweep(
    store: &Store,
    data_dir: &Path,
    max_age: Duration,
    at_start: bool,
) -> Result<usize, UploadError> {
    let cutoff = outboard_base::util::rfc3339_ago(max_age);
    let (old, kept): (Vec<String>, Vec<String>) = store
        .call(move |c| {
            let mut stmt = c.prepare("SELECT id FROM uploads WHERE created_at <= ?1")?;
            let ids = stmt
                .query_map([&cutoff], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            c.execute("DELETE FROM uploads WHERE created_at <= ?1", [&cutoff])?;
            let mut stmt = c.prepare("SELECT id FROM uploads")?;
            let kept = stmt.query_map((), |r| r.get::<_, String>(0))?.collect::<Result<_, _>>()?;
            Ok((ids, kept))
        })
        .await?;
    let dir = uploads_dir(data_dir);
    for id in &old {
        for suffix in [".tar", ".tar.part", ".tar.claimed", ".bundle"] {
            remove_quietly(&dir.join(format!("{id}{suffix}"))).await;
        }
    }
    if at_start {
        let mut entries = match tokio::fs::read_dir(&dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(old.len()),
            Err(e) => return Err(UploadError::io("cannot list the uploads directory")(e)),
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            let name = entry.file_name().to_string_lossy().into_owned();
            // A `.tar` without its row: the server stopped between the rename and the insert.
            let orphan = name.strip_suffix(".tar").is_some_and(|id| !kept.iter().any(|k| k == id));
            if orphan || [".part", ".claimed", ".bundle"].iter().any(|s| name.ends_with(s)) {
                remove_quietly(&entry.path()).await;
            }
        }
    }
    Ok(old.len())
}

/// Sweeps now (a start's full sweep, awaited so that no upload of this process is touched),
/// then every [`SWEEP_INTERVAL`] until `shutdown`.
pub async fn start_sweeper(store: Store, data_dir: PathBuf, shutdown: CancellationToken) {
    match sweep(&store, &data_dir, UNUSED_UPLOAD_TTL, true).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(uploads = n, "removed uploads no session used within a day"),
        Err(e) => tracing::warn!("cannot sweep old uploads: {e}"),
    }
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(SWEEP_INTERVAL) => {}
            }
            match sweep(&store, &data_dir, UNUSED_UPLOAD_TTL, false).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(uploads = n, "removed uploads no session used within a day")
                }
                Err(e) => tracing::warn!("cannot sweep old uploads: {e}"),
            }
        }
    });
}

pub mod bundle;
mod history;
pub mod limits;
pub mod unpack;

#[cfg(test)]
mod tests;
