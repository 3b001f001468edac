//! Getting a session's work out: `outboard diff`, `outboard apply`, `outboard push`, and
//! `outboard sessions rm`.
//!
//! The diff travels over HTTP (`GET /v1/sessions/{id}/diff`), streamed: `diff` copies it to
//! stdout as it arrives; `apply` keeps it in a private temporary file, checks it against the
//! work tree with `git apply --check` and only then applies it, so a hunk that does not apply
//! changes nothing (git names the files). `push` is a WebSocket request whose progress frames
//! are printed on stderr.

use std::io::Write;
use std::path::Path;

use futures_util::StreamExt as _;
use outboard_shared::{methods, SessionId, SessionPushParams, SessionRef};

use crate::args::{ApplyArgs, DiffArgs, PushArgs, SessionsRmArgs};
use crate::connect::ExitCode as _;
use crate::run::{Connection, RunError};

/// What can go wrong getting changes out.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    /// Connecting or the server's answer.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The server's answer, or the HTTP transfer.
    #[error("{}", crate::connect::Hinted(.0))]
    Client(#[from] crate::client::ClientError),
    /// Writing the output or the temporary file.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The diff does not apply; nothing was changed.
    #[error("the session's changes do not apply to {dir}; nothing was changed:\n{detail}")]
    DoesNotApply {
        /// The work tree.
        dir: String,
        /// What `git apply --check` said (it names the files).
        detail: String,
    },
    /// git is missing or failed.
    #[error("git apply: {0}")]
    Git(String),
}

impl ChangesError {
    /// The exit status: 1 for a refusal, as `outboard run` maps the rest.
    pub fn exit_code(&self) -> i32 {
        match self {
            ChangesError::Run(e) => e.exit_code(),
            ChangesError::Client(e) => e.exit_code(),
            ChangesError::Io(_) | ChangesError::DoesNotApply { .. } | ChangesError::Git(_) => {
                crate::exit::FAILED
            }
        }
    }
}

fn finish(result: Result<(), ChangesError>) -> i32 {
    match result {
        Ok(()) => crate::exit::OK,
        Err(err) => {
            eprintln!("outboard: {err}");
            err.exit_code()
        }
    }
}

/// `outboard diff SESSION [--stat]`.
pub async fn diff(args: &DiffArgs, out: &mut impl Write) -> i32 {
    finish(write_diff(args, out).await)
}

async fn write_diff(args: &DiffArgs, out: &mut impl Write) -> Result<(), ChangesError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    let endpoint = conn.http();
    let session = SessionId(args.session_id.clone());
    let copied = async {
        let response = endpoint.diff(&session, args.stat).await?;
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                crate::client::ClientError::Protocol(format!("the diff was cut: {e}"))
            })?;
            out.write_all(&chunk)?;
        }
        out.flush()?;
        Ok::<(), ChangesError>(())
    }
    .await;
    conn.close().await;
    copied
}

/// `outboard apply SESSION [--dir DIR]`.
pub async fn apply(args: &ApplyArgs, err: &mut impl Write) -> i32 {
    finish(apply_diff(args, err).await)
}

async fn apply_diff(args: &ApplyArgs, err: &mut impl Write) -> Result<(), ChangesError> {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir()?,
    };
    if !dir.is_dir() {
        return Err(ChangesError::Git(format!("{} is not a directory", dir.display())));
    }
    let conn = Connection::open_for(&args.connect, false).await?;
    let endpoint = conn.http();
    let session = SessionId(args.session_id.clone());
    let mut file = tempfile::NamedTempFile::new()?;
    let downloaded = async {
        let response = endpoint.diff(&session, false).await?;
        let mut body = response.bytes_stream();
        let mut bytes = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                crate::client::ClientError::Protocol(format!("the diff was cut: {e}"))
            })?;
            bytes += chunk.len() as u64;
            file.write_all(&chunk)?;
        }
        file.flush()?;
        Ok::<u64, ChangesError>(bytes)
    }
    .await;
    conn.close().await;
    if downloaded? == 0 {
        writeln!(err, "outboard: session {session} has no changes; nothing to apply")?;
        return Ok(());
    }
    git_apply(&dir, file.path(), true)?;
    git_apply(&dir, file.path(), false)?;
    let stat = std::process::Command::new("git")
        .args(["apply", "--stat"])
        .arg(file.path())
        .current_dir(&dir)
        .output();
    if let Ok(stat) = stat {
        err.write_all(&stat.stdout)?;
    }
    writeln!(err, "outboard: applied session {session}'s changes to {}", dir.display())?;
    Ok(())
}

/// `git apply [--check]` of `patch` in `dir`.
fn git_apply(dir: &Path, patch: &Path, check: bool) -> Result<(), ChangesError> {
    let mut command = std::process::Command::new("git");
    command.arg("apply");
    if check {
        command.arg("--check");
    }
    let output = command
        .args(["--binary", "--whitespace=nowarn"])
        .arg(patch)
        .current_dir(dir)
        .output()
        .map_err(|e| ChangesError::Git(format!("cannot run git ({e}): install git")))?;
    if output.status.success() {
        return Ok(());
    }
    let detail = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if check {
        return Err(ChangesError::DoesNotApply { dir: dir.display().to_string(), detail });
    }
    Err(ChangesError::Git(detail))
}

/// The local git identity as `Name <email>`, when both are set.
fn local_author(dir: &Path) -> Option<String> {
    let get = |key: &str| {
        let out = std::process::Command::new("git")
            .args(["config", key])
            .current_dir(dir)
            .output()
            .ok()?;
        let value = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (out.status.success() && !value.is_empty()).then_some(value)
    };
    Some(format!("{} <{}>", get("user.name")?, get("user.email")?))
}

/// `outboard push SESSION [--branch NAME]`.
pub async fn push(args: &PushArgs, out: &mut impl Write) -> i32 {
    finish(push_branch(args, out).await)
}

async fn push_branch(args: &PushArgs, out: &mut impl Write) -> Result<(), ChangesError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    let author = std::env::current_dir().ok().as_deref().and_then(local_author);
    let params = SessionPushParams {
        session_id: SessionId(args.session_id.clone()),
        branch: args.branch.clone(),
        author,
    };
    let (call, mut progress) = conn.client.call_with_progress::<methods::SessionPush>(params);
    tokio::pin!(call);
    let mut printer =
        crate::output::Printer::new(crate::output::Mode::Plain, std::io::sink(), std::io::stderr());
    let pushed = loop {
        tokio::select! {
            done = &mut call => {
                while let Ok(frame) = progress.try_recv() {
                    if !args.json {
                        let _ = printer.progress(&crate::output::progress_line(frame));
                    }
                }
                break done;
            }
            Some(frame) = progress.recv(), if !args.json => {
                let _ = printer.progress(&crate::output::progress_line(frame));
            }
        }
    };
    conn.close().await;
    let pushed = pushed?;
    if args.json {
        serde_json::to_writer(&mut *out, &pushed).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        let verb = if pushed.created { "created" } else { "updated" };
        writeln!(out, "{verb} {} at {} on {}", pushed.branch, short(&pushed.commit), pushed.url)?;
    }
    Ok(())
}

/// `outboard sessions restore SESSION`.
pub async fn restore(args: &SessionsRmArgs, out: &mut impl Write) -> i32 {
    finish(restore_session(args, out).await)
}

async fn restore_session(args: &SessionsRmArgs, out: &mut impl Write) -> Result<(), ChangesError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    let session = SessionId(args.session_id.clone());
    let restored = conn
        .client
        .call::<methods::SessionRestore>(SessionRef { session_id: session.clone() })
        .await;
    conn.close().await;
    let restored = restored?;
    writeln!(
        out,
        "session {session} moved from sandbox host {} to {}; its workspace there is new and empty",
        restored.from_host, restored.host
    )?;
    Ok(())
}

fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// `outboard sessions rm SESSION`.
pub async fn remove(args: &SessionsRmArgs, out: &mut impl Write) -> i32 {
    finish(remove_session(args, out).await)
}

async fn remove_session(args: &SessionsRmArgs, out: &mut impl Write) -> Result<(), ChangesError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    let session = SessionId(args.session_id.clone());
    let removed = conn
        .client
        .call::<methods::SessionDelete>(SessionRef { session_id: session.clone() })
        .await;
    conn.close().await;
    removed?;
    writeln!(out, "deleted session {session}")?;
    Ok(())
}
