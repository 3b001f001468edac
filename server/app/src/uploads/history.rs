//! The uploaded history: the bundle checked against [`super::bundle`]'s bounds, then `.git`
//! made from it by git run in a clean environment.

use std::path::{Path, PathBuf};

use super::{bundle, limits, unpack, UploadError};

/// The history bundle read against [`bundle`]'s bounds before git sees it (on a blocking
/// thread: it inflates the pack).
pub(super) async fn check_bundle(path: &Path, max_entries: u64) -> Result<(), UploadError> {
    let p = path.to_path_buf();
    let depth = unpack::MAX_DEPTH as u64;
    let checked = tokio::task::spawn_blocking(move || bundle::check(&p, max_entries, depth))
        .await
        .map_err(|e| UploadError::io("the bundle check")(std::io::Error::other(e.to_string())))?;
    match checked {
        Ok(c) => {
            tracing::debug!(
                objects = c.objects,
                entries = c.entries,
                depth = c.depth,
                "history bundle checked"
            );
            Ok(())
        }
        Err(refusal) => {
            let bound = matches!(refusal, bundle::Refusal::Bound(_));
            tracing::info!(
                bound,
                "an uploaded history bundle was refused before git ran: {refusal}"
            );
            let member = outboard_shared::http::UPLOAD_HISTORY_BUNDLE.to_owned();
            let reason = refusal.to_string();
            Err(match refusal {
                bundle::Refusal::Bound(_) => {
                    UploadError::Bounded { member, reason, bound: limits::Bound::Bundle }
                }
                bundle::Refusal::Malformed(_) => UploadError::Unsafe { member, reason },
            })
        }
    }
}

/// git run with a clean environment: no system or global config, an empty home, no prompt.
pub(super) struct Git {
    dir: PathBuf,
    home: tempfile::TempDir,
}

impl Git {
    pub(super) fn new(dir: &Path) -> Result<Git, UploadError> {
        let home = tempfile::tempdir().map_err(UploadError::io("cannot make git's empty home"))?;
        Ok(Git { dir: dir.to_path_buf(), home })
    }

    pub(super) async fn run(&self, step: &str, args: &[&str]) -> Result<String, UploadError> {
        let output = tokio::process::Command::new("git")
            .args(args)
            .current_dir(&self.dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
            .env("HOME", self.home.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|e| UploadError::Git {
                step: step.to_owned(),
                detail: format!("cannot run git: {e} (is git installed on the server?)"),
            })?;
        if !output.status.success() {
            let detail = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            return Err(UploadError::Git { step: step.to_owned(), detail });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// `git init`, fetch the bundle's branches, HEAD on the uploaded branch (or detached at the
/// bundle's HEAD), index at HEAD. Returns the branch checked out and the commit.
pub(super) async fn restore_history(
    dest: &Path,
    bundle: &Path,
    branch: Option<&str>,
) -> Result<(Option<String>, String), UploadError> {
    let git = Git::new(dest)?;
    let bundle_arg = bundle.to_string_lossy().into_owned();
    git.run("init", &["init", "-q", "--template="]).await?;
    // The bundle is the client's: git's complaint about it names the server's paths, so it is
    // answered as a bad member instead (and logged whole).
    let bad_bundle = |e: UploadError| {
        tracing::info!("an uploaded history bundle was refused: {e}");
        UploadError::Unsafe {
            member: outboard_shared::http::UPLOAD_HISTORY_BUNDLE.to_owned(),
            reason: "is not a git bundle this server can read (make it with `git bundle create`, \
                     or upload the tree without it)"
                .to_owned(),
        }
    };
    let heads = git
        .run("bundle list-heads", &["bundle", "list-heads", &bundle_arg])
        .await
        .map_err(bad_bundle)?;
    let mut head = None;
    let mut branches = Vec::new();
    for line in heads.lines() {
        let Some((commit, name)) = line.split_once(' ') else { continue };
        if name == "HEAD" {
            head = Some(commit.to_owned());
        } else if let Some(b) = name.strip_prefix("refs/heads/") {
            branches.push((b.to_owned(), commit.to_owned()));
        }
    }
    let on_branch = branch.and_then(|b| branches.iter().find(|(name, _)| name == b));
    let Some(head) = head.or_else(|| on_branch.map(|(_, c)| c.clone())) else {
        return Err(UploadError::Unsafe {
            member: outboard_shared::http::UPLOAD_HISTORY_BUNDLE.to_owned(),
            reason: "has no HEAD".to_owned(),
        });
    };
    let mut fetch = vec!["fetch", "-q", "--update-head-ok", "--no-tags", bundle_arg.as_str()];
    if !branches.is_empty() {
        fetch.push("+refs/heads/*:refs/heads/*");
    }
    fetch.push("HEAD");
    git.run("fetch", &fetch).await.map_err(bad_bundle)?;
    let checked_out = match on_branch {
        Some((name, _)) => {
            git.run("symbolic-ref", &["symbolic-ref", "HEAD", &format!("refs/heads/{name}")])
                .await?;
            Some(name.clone())
        }
        None => {
            git.run("update-ref", &["update-ref", "--no-deref", "HEAD", &head]).await?;
            None
        }
    };
    git.run("reset", &["reset", "-q", "--mixed"]).await?;
    let commit = git.run("rev-parse", &["rev-parse", "HEAD"]).await?.trim().to_owned();
    Ok((checked_out, commit))
}
