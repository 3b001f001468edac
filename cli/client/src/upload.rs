//! `--upload [DIR]`: packs a working tree into one tar archive and sends it to the server's
//! `POST /v1/uploads` (layout in `docs/PROTOCOL.md`), before the session is created from it.
//!
//! What is packed. In a git work tree (DIR or any parent), the whole work tree: every file
//! `git ls-files --cached --others --exclude-standard` lists that exists on disk (tracked files as
//! they are on disk, uncommitted changes included; untracked files `.gitignore` does not exclude;
//! a deleted tracked file is simply absent), symlinks as symlinks, the executable bit kept, plus
//! the current branch's history as a `git bundle` at the reserved member
//! [`outboard_shared::http::UPLOAD_HISTORY_BUNDLE`] (none before the first commit). Submodules and
//! nested repositories are packed as plain files, walked like a directory outside git (their own
//! ignore files honoured, their `.git` left out); their history is not sent. Elsewhere, DIR's
//! files walked with the `ignore` crate, honouring `.gitignore` and `.ignore`, hidden files
//! included except `.git`.
//!
//! The archive is built in a temp file (its size is the `Content-Length`, which lets the server
//! refuse an oversize tree before it is sent) and streamed from it, reporting its progress to
//! the caller ([`Progress`]; the binary draws it on stderr).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use outboard_shared::{http, UploadResponse};
use tokio::io::AsyncReadExt as _;

use crate::conn::ConnectOptions;

/// Bytes read from the archive per chunk of the body: large enough that the per-chunk cost
/// disappears next to the network, small enough that the progress line moves.
const CHUNK_BYTES: usize = 256 * 1024;

/// Why an upload could not be made. Each message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// DIR cannot be read.
    #[error("cannot upload {path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A git command failed in a work tree.
    #[error("git {step} failed in {dir}: {detail}")]
    Git {
        /// Which command.
        step: String,
        /// The work tree.
        dir: String,
        /// Its error output.
        detail: String,
    },
    /// The tree has a file at the path reserved for the history bundle.
    #[error("{0} exists in the tree, but .outboard-upload/ is reserved for the upload's history: rename it, or add it to .gitignore")]
    Reserved(String),
    /// The server's URL has no HTTP equivalent.
    #[error("cannot upload to {0}: the server URL must be ws:// or wss://")]
    Url(String),
    /// `--ca-cert` cannot be used.
    #[error("cannot read the CA certificate {path}: {reason}")]
    CaCert {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The request failed before the server answered.
    #[error("the upload to {url} failed: {reason}")]
    Transport {
        /// Where.
        url: String,
        /// Why.
        reason: String,
    },
    /// The server refused it (`413` over its cap, `401` a bad token, …).
    #[error("the server refused the upload (HTTP {status}): {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> UploadError + '_ {
    move |source| UploadError::Io { path: path.display().to_string(), source }
}

/// What is uploaded from a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The root of what is uploaded: the work tree's top level, or DIR itself.
    pub root: PathBuf,
    /// Whether `root` is a git work tree.
    pub git: bool,
    /// The paths to pack, relative to `root`, sorted; directories only outside git (so that an
    /// empty directory arrives too).
    pub paths: Vec<PathBuf>,
}

/// Decides what is uploaded from `dir` (see the module's header).
pub fn select(dir: &Path) -> Result<Selection, UploadError> {
    let dir = dir.canonicalize().map_err(io_err(dir))?;
    match git_toplevel(&dir) {
        Some(root) => {
            let paths = git_paths(&root)?;
            Ok(Selection { root, git: true, paths })
        }
        None => {
            let paths = walk(&dir, true)?;
            Ok(Selection { root: dir, git: false, paths })
        }
    }
}

fn git_toplevel(dir: &Path) -> Option<PathBuf> {
    let out = Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let top = String::from_utf8(out.stdout).ok()?;
    PathBuf::from(top.trim_end_matches('\n')).canonicalize().ok()
}

fn git(root: &Path, step: &str, args: &[&str]) -> Result<Vec<u8>, UploadError> {
    let out = Command::new("git").args(args).current_dir(root).output().map_err(|e| {
        UploadError::Git {
            step: step.to_owned(),
            dir: root.display().to_string(),
            detail: format!("cannot run git: {e}"),
        }
    })?;
    if !out.status.success() {
        return Err(UploadError::Git {
            step: step.to_owned(),
            dir: root.display().to_string(),
            detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(out.stdout)
}

/// The files of a work tree: listed by git, present on disk; a listed directory (a submodule
/// or a nested repository) is walked as a plain directory.
fn git_paths(root: &Path) -> Result<Vec<PathBuf>, UploadError> {
    use std::os::unix::ffi::OsStrExt as _;
    let listed =
        git(root, "ls-files", &["ls-files", "-z", "--cached", "--others", "--exclude-standard"])?;
    let mut paths = Vec::new();
    for raw in listed.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        let rel = PathBuf::from(std::ffi::OsStr::from_bytes(raw.strip_suffix(b"/").unwrap_or(raw)));
        let Ok(meta) = std::fs::symlink_metadata(root.join(&rel)) else {
            continue; // deleted, not yet committed: absent from the upload
        };
        if meta.is_dir() {
            for inner in walk(&root.join(&rel), false)? {
                paths.push(rel.join(inner));
            }
        } else {
            paths.push(rel);
        }
    }
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// `dir`'s files (and, with `dirs`, its directories) relative to it, honouring `.gitignore` and
/// `.ignore` (also outside a repository), hidden files included, `.git` left out.
fn walk(dir: &Path, dirs: bool) -> Result<Vec<PathBuf>, UploadError> {
    let mut paths = Vec::new();
    let walker = ignore::WalkBuilder::new(dir)
        .hidden(false)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .ignore(true)
        .parents(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git")
        .build();
    for entry in walker {
        let entry = entry.map_err(|e| UploadError::Io {
            path: dir.display().to_string(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let Ok(rel) = entry.path().strip_prefix(dir) else { continue };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        if !is_dir || dirs {
            paths.push(rel.to_path_buf());
        }
    }
    paths.sort();
    Ok(paths)
}

/// An archive ready to send.
#[derive(Debug)]
pub struct Packed {
    /// The temp file holding it (removed when dropped).
    pub file: tempfile::NamedTempFile,
    /// Its size.
    pub bytes: u64,
    /// What was packed.
    pub selection: Selection,
    /// The branch checked out, in a git work tree on a branch.
    pub branch: Option<String>,
    /// Whether the history bundle is in it (a work tree with at least one commit).
    pub history: bool,
}

/// Packs `dir` (see the module's header).
pub fn pack(dir: &Path) -> Result<Packed, UploadError> {
    let selection = select(dir)?;
    let root = selection.root.clone();
    if selection.paths.iter().any(|p| p.starts_with(".outboard-upload")) {
        return Err(UploadError::Reserved(root.join(".outboard-upload").display().to_string()));
    }
    let file = tempfile::NamedTempFile::new().map_err(io_err(Path::new("a temp file")))?;
    let mut builder =
        tar::Builder::new(std::io::BufWriter::new(file.reopen().map_err(io_err(file.path()))?));
    builder.follow_symlinks(false);
    for rel in &selection.paths {
        builder.append_path_with_name(root.join(rel), rel).map_err(io_err(&root.join(rel)))?;
    }
    let (mut branch, mut history) = (None, false);
    if selection.git {
        branch = String::from_utf8(
            git(&root, "symbolic-ref", &["symbolic-ref", "-q", "HEAD"]).unwrap_or_default(),
        )
        .ok()
        .and_then(|r| r.trim().strip_prefix("refs/heads/").map(str::to_owned));
        let has_commit = git(&root, "rev-parse", &["rev-parse", "--verify", "-q", "HEAD"]).is_ok();
        if has_commit {
            let scratch = tempfile::tempdir().map_err(io_err(Path::new("a temp dir")))?;
            let bundle = scratch.path().join("history.bundle");
            let bundle_arg = bundle.to_string_lossy().into_owned();
            let mut args = vec!["bundle", "create", "-q", bundle_arg.as_str(), "HEAD"];
            if let Some(b) = &branch {
                args.push(b.as_str());
            }
            git(&root, "bundle create", &args)?;
            builder
                .append_path_with_name(&bundle, http::UPLOAD_HISTORY_BUNDLE)
                .map_err(io_err(&bundle))?;
            history = true;
        }
    }
    let writer = builder.into_inner().map_err(io_err(file.path()))?;
    writer.into_inner().map_err(|e| UploadError::Io {
        path: file.path().display().to_string(),
        source: e.into_error(),
    })?;
    let bytes = std::fs::metadata(file.path()).map_err(io_err(file.path()))?.len();
    Ok(Packed { file, bytes, selection, branch, history })
}

/// The `http(s)://host:port` of a `ws(s)://` server URL.
pub fn http_base(server: &str) -> Result<String, UploadError> {
    let (scheme, rest) = server.split_once("://").ok_or_else(|| UploadError::Url(server.into()))?;
    let scheme = match scheme {
        "ws" => "http",
        "wss" => "https",
        _ => return Err(UploadError::Url(server.into())),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return Err(UploadError::Url(server.into()));
    }
    Ok(format!("{scheme}://{authority}"))
}

/// What [`send`] reports as the archive goes out: bytes sent so far and the total. The
/// binary draws it (a progress line on stderr); a caller that shows nothing passes a no-op.
pub type Progress = Box<dyn FnMut(u64, u64) + Send>;

/// Sends `packed` to the server at `server` (its `ws(s)://` URL) as `token`'s upload.
pub async fn send(
    packed: &Packed,
    server: &str,
    token: &str,
    options: &ConnectOptions,
    mut progress: Progress,
) -> Result<UploadResponse, UploadError> {
    let url = format!("{}{}", http_base(server)?, http::UPLOADS);
    let client = http_client(options)?;
    let file =
        tokio::fs::File::open(packed.file.path()).await.map_err(io_err(packed.file.path()))?;
    let total = packed.bytes;
    let mut sent_so_far = 0u64;
    let meter = move |n: u64| {
        sent_so_far = sent_so_far.saturating_add(n);
        progress(sent_so_far, total)
    };
    let chunks = futures_util::stream::unfold((file, meter), |(mut file, mut meter)| async move {
        let mut buf = vec![0u8; CHUNK_BYTES];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                meter(n as u64);
                Some((Ok::<_, std::io::Error>(buf), (file, meter)))
            }
            Err(e) => Some((Err(e), (file, meter))),
        }
    });
    let mut request = client
        .post(&url)
        .bearer_auth(token)
        .header(reqwest::header::CONTENT_LENGTH, packed.bytes)
        .header(reqwest::header::CONTENT_TYPE, "application/x-tar");
    if let Some(branch) = &packed.branch {
        request = request.header(http::UPLOAD_BRANCH_HEADER, branch);
    }
    let sent = request.body(reqwest::Body::wrap_stream(chunks)).send().await;
    let response = match sent {
        Ok(response) => response,
        // The server may have answered (413: over its cap) and closed before the body was all
        // sent; the answer is then lost with the connection. Ask again without a body to read it.
        Err(e) => {
            return Err(probe(&client, &url, token, packed.bytes).await.unwrap_or_else(|| {
                UploadError::Transport { url: url.clone(), reason: error_chain(&e) }
            }))
        }
    };
    answer(response).await
}

/// The same request with the same `Content-Length` and a body that never comes: a server that
/// refuses from the headers answers at once, and nothing of ours is unread on its side, so the
/// answer arrives. A server that would take the body is left after a moment.
async fn probe(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    bytes: u64,
) -> Option<UploadError> {
    let never = futures_util::stream::pending::<Result<Vec<u8>, std::io::Error>>();
    let request = client
        .post(url)
        .bearer_auth(token)
        .header(reqwest::header::CONTENT_LENGTH, bytes)
        .body(reqwest::Body::wrap_stream(never))
        .send();
    let response = tokio::time::timeout(Duration::from_secs(10), request).await.ok()?.ok()?;
    answer(response).await.err()
}

async fn answer(response: reqwest::Response) -> Result<UploadResponse, UploadError> {
    let status = response.status();
    let body = response.bytes().await.unwrap_or_default();
    if status.is_success() {
        return serde_json::from_slice(&body).map_err(|e| UploadError::Refused {
            status: status.as_u16(),
            message: format!("the answer is not an upload: {e}"),
        });
    }
    let message = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).trim().to_owned());
    Err(UploadError::Refused { status: status.as_u16(), message })
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// reqwest over rustls, trusting the built-in roots and `--ca-cert`, as the WebSocket does.
fn http_client(options: &ConnectOptions) -> Result<reqwest::Client, UploadError> {
    let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(30));
    if let Some(path) = &options.ca_cert {
        let ca_err =
            |reason: String| UploadError::CaCert { path: path.display().to_string(), reason };
        let pem = std::fs::read(path).map_err(|e| ca_err(e.to_string()))?;
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_err(e.to_string()))?;
        if certs.is_empty() {
            return Err(ca_err("no CERTIFICATE in it".into()));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder.build().map_err(|e| UploadError::Transport {
        url: "(client setup)".into(),
        reason: error_chain(&e),
    })
}

#[cfg(test)]
mod tests;
