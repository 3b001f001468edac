//! Where a session's workspace comes from, and how its changes leave: cloning a repository,
//! unpacking an upload, diffing a workspace against its base, pushing it as a branch, deleting it.
//!
//! Layout under the data dir, per session `ID`:
//! - `workspaces/ID/`: the workspace, bound at `/workspace` in the sandbox. For a repository it is
//!   a normal clone (its `.git` included, so the agent can use git), whose remote URL carries no
//!   credential and whose config holds no helper.
//! - `git/ID.git`: the session's *shadow* repository, bare, the server's own and never visible to
//!   the sandbox. It holds the base commit (`refs/outboard/base`), the commits pushed, and the
//!   objects of every snapshot.
//! - `git/ID.snap`: the stat cache of the session's snapshots (`outboard_snapshot::Cache`), so
//!   the next one reads only the files that changed.
//!
//! The workspace is bytes to the host: snapshots (checkpoints, diffs, pushes, a rewind's, a
//! fork's, an upload's base) read it through the confined open and write objects in-process
//! (`outboard-snapshot`); restores (rewind, fork) write it through the exact operations of
//! `outboard-vfs`. Git runs only over the shadow repository, never with a work tree, so nothing
//! the sandbox writes — a nested repository's `core.fsmonitor`, a hook, a filter, attributes,
//! links swapped in a loop — is read, followed or run by the server. (A clone's first checkout is
//! git's, into a directory no sandbox has seen yet.)
//!
//! A new workspace is built under `.incoming-*` names and renamed into place only when complete:
//! a failure (unreachable host, refused credential, missing ref, full disk) leaves nothing behind,
//! and the session row is written only after the rename.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use outboard_shared::{SessionId, SessionSource};

use outboard_snapshot::{Cache, CopyError, Objects, RestoreError, Snapshot, SnapshotError};
use outboard_vfs::confined::Root;

use crate::git::{
    classify, is_commit_id, Git, GitError, ProgressSink, Remote, RemoteRefs, RepoUrl,
};

pub mod collect;
pub mod in_place;
pub mod large;
pub mod shadow;
#[cfg(test)]
mod tests;

pub use large::TooLarge;

/// The empty tree's id (SHA-1): the base of a session that started with an empty workspace.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// The ref naming a session's base commit in its shadow repository.
const BASE_REF: &str = "refs/outboard/base";

/// A failure to prepare or read a session's workspace.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// git said no; the message says why.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A file operation on the data dir failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The request does not fit this session.
    #[error("{0}")]
    Invalid(String),
    /// Files too large to push (see [`large`]), named.
    #[error("{0}")]
    TooLarge(String),
    /// The workspace could not be snapshot.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// A checkpoint could not be restored into the workspace.
    #[error(transparent)]
    Restore(#[from] RestoreError),
    /// A fork's copy of the workspace's `.git` failed or would not fit.
    #[error("cannot copy the workspace's .git: {0}")]
    Copy(#[from] CopyError),
    /// Another part refused, with the protocol error to answer (an upload that cannot be used).
    #[error("{}", .0.message)]
    Refused(outboard_shared::ErrorBody),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SourceError {
    let what = what.into();
    move |source| SourceError::Io { what, source }
}

/// The sessions' git state, and the git program.
pub struct Sources {
    git: Git,
    /// Where the sessions' workspaces live.
    workspaces: PathBuf,
    /// Where their shadow repositories live.
    shadows: PathBuf,
    /// One lock per session: one snapshot, restore or collection of its shadow at a time.
    locks: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
    /// Each shadow's size as estimated ([`collect`]): measured once, then grown by what each
    /// snapshot writes.
    usage: Mutex<HashMap<SessionId, u64>>,
}

/// Removes a half-built directory unless it was kept.
struct Staging {
    paths: Vec<PathBuf>,
    kept: bool,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.kept {
            for path in &self.paths {
                let _ = remove_any(path);
            }
        }
    }
}

/// What a finished clone or upload produced.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Where it came from, for the session row.
    pub source: SessionSource,
}

impl Sources {
    /// The sessions' git state: workspaces in `workspaces`, shadow repositories beside them
    /// (in `.shadows` there when it is a directory shared by several nodes, else in `data_dir`).
    /// Removes directories a crash left half-built.
    pub fn new(data_dir: &Path, workspaces: Option<&Path>) -> Sources {
        let (workspaces, shadows) = match workspaces {
            Some(dir) => (dir.to_owned(), dir.join(".shadows")),
            None => (data_dir.join("workspaces"), data_dir.join("git")),
        };
        let sources = Sources {
            git: Git::default(),
            workspaces,
            shadows,
            locks: Mutex::default(),
            usage: Mutex::default(),
        };
        for dir in [sources.workspaces(), sources.shadows()] {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for entry in entries.flatten() {
                    if entry.file_name().to_string_lossy().starts_with(".incoming-") {
                        let _ = remove_any(&entry.path());
                    }
                }
            }
        }
        sources
    }

    fn workspaces(&self) -> PathBuf {
        self.workspaces.clone()
    }

    fn shadows(&self) -> PathBuf {
        self.shadows.clone()
    }

    /// The shadow repository of `session`.
    pub fn shadow(&self, session: &SessionId) -> PathBuf {
        self.shadows().join(format!("{}.git", session.as_str()))
    }

    /// The stat cache of `session`'s snapshots.
    fn cache(&self, session: &SessionId) -> PathBuf {
        self.shadows().join(format!("{}.snap", session.as_str()))
    }

    /// The estimated size of `session`'s shadow, if known.
    fn usage_of(&self, session: &SessionId) -> Option<u64> {
        self.usage.lock().ok()?.get(session).copied()
    }

    /// Records the size of `session`'s shadow.
    fn set_usage(&self, session: &SessionId, bytes: u64) {
        if let Ok(mut usage) = self.usage.lock() {
            usage.insert(session.clone(), bytes);
        }
    }

    /// The session's shadow lock: one snapshot or restore of a session at a time.
    fn lock(&self, session: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = match self.locks.lock() {
            Ok(l) => l,
            Err(poisoned) => poisoned.into_inner(),
        };
        locks.entry(session.clone()).or_default().clone()
    }

    fn staging(&self, session: &SessionId) -> Result<(PathBuf, PathBuf, Staging), SourceError> {
        std::fs::create_dir_all(self.workspaces()).map_err(io("cannot create the workspaces"))?;
        std::fs::create_dir_all(self.shadows()).map_err(io("cannot create the git dir"))?;
        let ws = self.workspaces().join(format!(".incoming-{}", session.as_str()));
        let shadow = self.shadows().join(format!(".incoming-{}.git", session.as_str()));
        let staging = Staging {
            paths: vec![ws.clone(), shadow.clone(), shadow.with_extension("snap")],
            kept: false,
        };
        Ok((ws, shadow, staging))
    }

    /// Moves a finished staging pair into place as `session`'s workspace and shadow, with the
    /// shadow's stat cache (`<shadow>.snap`).
    fn keep(
        &self,
        session: &SessionId,
        ws: &Path,
        shadow: &Path,
        mut staging: Staging,
    ) -> Result<(), SourceError> {
        let final_ws = self.workspaces().join(session.as_str());
        std::fs::rename(ws, &final_ws).map_err(io("cannot move the workspace into place"))?;
        if let Err(e) = std::fs::rename(shadow, self.shadow(session)) {
            let _ = std::fs::remove_dir_all(&final_ws);
            return Err(io("cannot move the git state into place")(e));
        }
        if let Err(e) = std::fs::rename(shadow.with_extension("snap"), self.cache(session)) {
            let _ = std::fs::remove_dir_all(&final_ws);
            let _ = std::fs::remove_dir_all(self.shadow(session));
            return Err(io("cannot move the snapshot cache into place")(e));
        }
        staging.kept = true;
        Ok(())
    }

    /// A snapshot of `ws` into the repository `repo`, with its stat cache (`<repo>.snap`),
    /// seeded from the tree `seed` of `repo` when there is none yet (its files' objects are
    /// there: only what differs is written). The caller holds the repository's lock.
    async fn take(
        &self,
        repo: &Path,
        ws: &Path,
        seed: Option<&str>,
    ) -> Result<Snapshot, SourceError> {
        let cache_path = repo.with_extension("snap");
        let cache = match (Cache::load(&cache_path), seed) {
            (Some(cache), _) => cache,
            (None, Some(tree)) => {
                Cache::seeded(&shadow::ls_tree(&self.git, repo, tree).await.unwrap_or_default())
            }
            (None, None) => Cache::default(),
        };
        let (repo, ws) = (repo.to_path_buf(), ws.to_path_buf());
        tokio::task::spawn_blocking(move || {
            let mut cache = cache;
            let root = open_root(&ws)?;
            let snap = outboard_snapshot::snapshot(&root, &Objects::new(&repo), &mut cache)?;
            cache.save(&cache_path).map_err(io("cannot save the snapshot's cache"))?;
            Ok(snap)
        })
        .await
        .map_err(|e| SourceError::Invalid(format!("the snapshot failed: {e}")))?
    }

    /// Clones `url` at `git_ref` (the default branch when `None`) as the workspace of the new
    /// session `session`, reporting git's progress. On error nothing is left behind.
    pub async fn clone_repo(
        &self,
        session: &SessionId,
        url: &RepoUrl,
        git_ref: Option<&str>,
        remote: &Remote,
        progress: &dyn ProgressSink,
    ) -> Result<Prepared, SourceError> {
        let (ws, shadow, staging) = self.staging(session)?;
        let git = &self.git;
        let fail = |e: GitError| SourceError::Git(classify(e, remote));

        progress_line(
            progress,
            "resolving",
            &format!("Resolving {} at {}", url.url, git_ref.unwrap_or("its default branch")),
        );
        let advertised = git
            .remote_command(None, remote, &["ls-remote", "--symref", &url.url])
            .text()
            .await
            .map_err(fail)?;
        let refs = RemoteRefs::parse(&advertised);
        let (name, commit, branch) = resolve(&refs, url, git_ref)?;

        git.command(None, &["init", "--bare", "-q"]).env("GIT_DIR", &shadow).output().await?;
        let config = |key: &'static str, value: String| {
            git.command(None, &["config", key, &value]).env("GIT_DIR", &shadow).output()
        };
        config("remote.origin.url", url.url.clone()).await?;
        config("remote.origin.fetch", "+refs/heads/*:refs/heads/*".into()).await?;
        if let Some(b) = &branch {
            let head = format!("refs/heads/{b}");
            git.command(None, &["symbolic-ref", "HEAD", &head])
                .env("GIT_DIR", &shadow)
                .output()
                .await?;
        }
        git.remote_command(None, remote, &["fetch", "--progress", "--tags", "origin"])
            .env("GIT_DIR", &shadow)
            .run_reporting(progress)
            .await
            .map_err(fail)?;
        let commit = match commit {
            Some(c) => c,
            None => {
                // A commit id: fetched with its branches, or ask for it by id.
                let wanted = git_ref.unwrap_or_default().to_owned();
                let spec = format!("{wanted}^{{commit}}");
                let have = git
                    .command(None, &["cat-file", "-e", &spec])
                    .env("GIT_DIR", &shadow)
                    .output()
                    .await
                    .is_ok();
                if !have {
                    let fetched = git
                        .remote_command(None, remote, &["fetch", "-q", "origin", &wanted])
                        .env("GIT_DIR", &shadow)
                        .output()
                        .await;
                    if fetched.is_err() {
                        return Err(GitError::MissingRef(format!(
                            "{} has no branch, tag or commit {wanted}",
                            url.url
                        ))
                        .into());
                    }
                }
                git.command(None, &["rev-parse", "--verify", &spec])
                    .env("GIT_DIR", &shadow)
                    .text()
                    .await
                    .map_err(|_| {
                        GitError::MissingRef(format!("{wanted} is not a commit of {}", url.url))
                    })?
            }
        };
        git.command(None, &["update-ref", BASE_REF, &commit])
            .env("GIT_DIR", &shadow)
            .output()
            .await?;

        // The workspace's own repository: a copy (never hard links: the sandbox may write to
        // its files, and the shadow's must stay as fetched) without any trace of the shadow.
        let shadow_text = shadow.to_string_lossy().into_owned();
        let ws_text = ws.to_string_lossy().into_owned();
        git.command(
            None,
            &["clone", "-q", "--no-hardlinks", "--no-checkout", &shadow_text, &ws_text],
        )
        .output()
        .await?;
        git.command(Some(&ws), &["remote", "set-url", "origin", &url.url]).output().await?;
        match &branch {
            Some(b) => {
                let track = format!("origin/{b}");
                git.command(
                    Some(&ws),
                    &["checkout", "--progress", "-q", "-B", b, "--track", &track],
                )
                .run_reporting(progress)
                .await?
            }
            None => {
                git.command(Some(&ws), &["checkout", "--progress", "-q", "--detach", &commit])
                    .run_reporting(progress)
                    .await?
            }
        };
        // The base tree's files are the cache's first entries: the first snapshot hashes each
        // file once and writes none that the clone already has.
        let base = shadow::ls_tree(git, &shadow, &commit).await?;
        Cache::seeded(&base)
            .save(&shadow.with_extension("snap"))
            .map_err(io("cannot save the snapshot's cache"))?;
        self.keep(session, &ws, &shadow, staging)?;
        Ok(Prepared { source: SessionSource::Repo { url: url.url.clone(), git_ref: name, commit } })
    }

    /// Records the base of a workspace built by someone else (an unpacked upload) at `ws`: a
    /// snapshot of every file in it, the parent being `head` when the upload had history.
    pub async fn snapshot_base(
        &self,
        shadow: &Path,
        ws: &Path,
        head: Option<&str>,
    ) -> Result<String, SourceError> {
        let git = &self.git;
        git.command(None, &["init", "--bare", "-q"]).env("GIT_DIR", shadow).output().await?;
        if let Some(head) = head {
            // The upload's history, from the repository the server itself just made.
            let from = ws.join(".git").to_string_lossy().into_owned();
            git.command(None, &["fetch", "-q", &from, head])
                .env("GIT_DIR", shadow)
                .output()
                .await?;
        }
        let tree = self.take(shadow, ws, head).await?.tree.to_string();
        let mut args = vec!["commit-tree", tree.as_str(), "-m", "Uploaded working tree"];
        if let Some(head) = head {
            args.extend(["-p", head]);
        }
        let commit = git
            .command(None, &args)
            .env("GIT_DIR", shadow)
            .env("GIT_AUTHOR_NAME", "Outboard")
            .env("GIT_AUTHOR_EMAIL", "outboard@localhost");
        let commit = committer(commit).text().await?;
        git.command(None, &["update-ref", BASE_REF, &commit])
            .env("GIT_DIR", shadow)
            .output()
            .await?;
        Ok(commit)
    }

    /// Unpacks a finished upload into place: `build` fills the staging workspace and says which
    /// commit its `.git` has checked out, if any; the base snapshot is taken from it.
    pub async fn from_upload<F, Fut, T>(
        &self,
        session: &SessionId,
        build: F,
    ) -> Result<(String, T), SourceError>
    where
        F: FnOnce(PathBuf) -> Fut,
        Fut: std::future::Future<Output = Result<(Option<String>, T), SourceError>>,
    {
        let (ws, shadow, staging) = self.staging(session)?;
        std::fs::create_dir_all(&ws).map_err(io("cannot create the workspace"))?;
        let (head, built) = build(ws.clone()).await?;
        let commit = self.snapshot_base(&shadow, &ws, head.as_deref()).await?;
        self.keep(session, &ws, &shadow, staging)?;
        Ok((commit, built))
    }

    /// The tree of `session`'s workspace now, written into its shadow repository (made on
    /// first use for a session that started empty). Returns `(base commit or tree, tree)`.
    async fn snapshot(
        &self,
        session: &SessionId,
        ws: &Path,
    ) -> Result<(String, String, Vec<TooLarge>), SourceError> {
        let lock = self.lock(session);
        let _held = lock.lock().await;
        self.snapshot_held(session, ws).await
    }

    /// [`Sources::snapshot`], the session's lock held by the caller.
    async fn snapshot_held(
        &self,
        session: &SessionId,
        ws: &Path,
    ) -> Result<(String, String, Vec<TooLarge>), SourceError> {
        let shadow = self.shadow(session);
        self.shadow_made(&shadow).await?;
        let base = match self
            .git
            .command(None, &["rev-parse", "-q", "--verify", BASE_REF])
            .env("GIT_DIR", &shadow)
            .text()
            .await
        {
            Ok(commit) => commit,
            Err(_) => EMPTY_TREE.to_owned(),
        };
        let (tree, skipped) = self.tree_held(session, ws).await?;
        Ok((base, tree, skipped))
    }

    /// The shadow repository at `shadow`, made (bare, empty) if it is not there yet.
    async fn shadow_made(&self, shadow: &Path) -> Result<(), SourceError> {
        if !shadow.join("HEAD").exists() {
            std::fs::create_dir_all(self.shadows()).map_err(io("cannot create the git dir"))?;
            self.git
                .command(None, &["init", "--bare", "-q"])
                .env("GIT_DIR", shadow)
                .output()
                .await?;
        }
        Ok(())
    }

    /// The workspace's tree now, and the files left out of it as too large to read; the
    /// session's lock held by the caller, its shadow made.
    async fn tree_held(
        &self,
        session: &SessionId,
        ws: &Path,
    ) -> Result<(String, Vec<TooLarge>), SourceError> {
        let snap = self.take(&self.shadow(session), ws, Some(BASE_REF)).await?;
        if let Ok(mut usage) = self.usage.lock() {
            if let Some(bytes) = usage.get_mut(session) {
                *bytes = bytes.saturating_add(snap.written);
            }
        }
        Ok((snap.tree.to_string(), snap.too_large))
    }

    /// `git diff` (or `--stat`) of `session`'s workspace against its base, as a child process
    /// whose stdout is the diff, and the files left out as too large to read. `ws` is the
    /// workspace directory.
    pub async fn diff(
        &self,
        session: &SessionId,
        ws: &Path,
        stat: bool,
    ) -> Result<(tokio::process::Child, Vec<TooLarge>), SourceError> {
        let (base, tree, skipped) = self.snapshot(session, ws).await?;
        let args = diff_args(&base, &tree, stat);
        let child = self.git.command(None, &args).env("GIT_DIR", self.shadow(session));
        Ok((child.spawn_stdout()?, skipped))
    }

    /// Commits `session`'s workspace on top of `parent` and pushes it to `branch` of `remote`,
    /// never forcing. Returns the new commit, or `None` when there was nothing new to commit.
    #[allow(clippy::too_many_arguments)]
    pub async fn push(
        &self,
        session: &SessionId,
        ws: &Path,
        parent: &str,
        branch: &str,
        author: (&str, &str),
        message: &str,
        remote: &Remote,
        progress: &dyn ProgressSink,
    ) -> Result<Option<String>, SourceError> {
        let (_, tree, skipped) = self.snapshot(session, ws).await?;
        if !skipped.is_empty() {
            let names: Vec<String> = skipped
                .iter()
                .map(|f| format!("{} ({})", f.path, outboard_org::quota::human_bytes(f.bytes)))
                .collect();
            return Err(SourceError::TooLarge(format!(
                "not pushed: {} over the {} MiB limit of pushes: {}. Delete it, add it to \
                 .gitignore, or make it smaller, then push again",
                if skipped.len() == 1 { "a file is" } else { "files are" },
                large::MAX_FILE_BYTES >> 20,
                names.join(", ")
            )));
        }
        let shadow = self.shadow(session);
        let parent_tree = self
            .git
            .command(None, &["rev-parse", &format!("{parent}^{{tree}}")])
            .env("GIT_DIR", &shadow)
            .text()
            .await?;
        if parent_tree == tree {
            return Ok(None);
        }
        let commit = self
            .git
            .command(None, &["commit-tree", &tree, "-p", parent, "-m", message])
            .env("GIT_DIR", &shadow)
            .env("GIT_AUTHOR_NAME", author.0)
            .env("GIT_AUTHOR_EMAIL", author.1);
        let commit = committer(commit).text().await?;
        let refspec = format!("{commit}:refs/heads/{branch}");
        let pushed = self
            .git
            .remote_command(
                None,
                remote,
                &["push", "--progress", "--porcelain", &remote.url, &refspec],
            )
            .env("GIT_DIR", &shadow)
            .run_reporting(progress)
            .await;
        match pushed {
            Ok(_) => {
                // A ref keeps the pushed commit through checkpoint collections ([`collect`]):
                // the next push is made on top of it.
                let name = format!("refs/outboard/pushed/{branch}");
                self.git
                    .command(None, &["update-ref", &name, &commit])
                    .env("GIT_DIR", &shadow)
                    .output()
                    .await?;
                Ok(Some(commit))
            }
            Err(GitError::Failed { detail, .. })
                if detail.contains("[rejected]")
                    || detail.contains("non-fast-forward")
                    || detail.contains("fetch first") =>
            {
                Err(GitError::PushRefused(format!(
                    "{branch} changed on {} since this session pushed it; push to a new branch \
                     with --branch NAME",
                    remote.url
                ))
                .into())
            }
            Err(e) => Err(classify(e, remote).into()),
        }
    }

    /// The commit `branch` has on `remote`, if it exists.
    pub async fn remote_branch(
        &self,
        remote: &Remote,
        branch: &str,
    ) -> Result<Option<String>, SourceError> {
        let refname = format!("refs/heads/{branch}");
        let text = self
            .git
            .remote_command(None, remote, &["ls-remote", &remote.url, &refname])
            .text()
            .await
            .map_err(|e| classify(e, remote))?;
        Ok(RemoteRefs::parse(&text).get(&refname).map(str::to_owned))
    }

    /// Checks a branch name with git's own rules.
    pub async fn check_branch(&self, branch: &str) -> Result<(), SourceError> {
        self.git
            .command(None, &["check-ref-format", "--branch", branch])
            .output()
            .await
            .map(|_| ())
            .map_err(|_| SourceError::Invalid(format!("{branch:?} is not a valid branch name")))
    }

    /// A checkpoint of `session`'s workspace `ws`: its tree now, written into the shadow
    /// repository with the same `add -A` + `write-tree` a diff makes (the shadow index's stat
    /// cache makes it cheap), so files a command changed are in it too. Files too large to read
    /// are left out, as from a diff.
    pub async fn checkpoint(&self, session: &SessionId, ws: &Path) -> Result<String, SourceError> {
        if !ws.exists() {
            // A workspace no turn has made yet is empty.
            return Ok(EMPTY_TREE.to_owned());
        }
        let lock = self.lock(session);
        let _held = lock.lock().await;
        self.shadow_made(&self.shadow(session)).await?;
        Ok(self.tree_held(session, ws).await?.0)
    }

    /// [`Sources::checkpoint`], then, with `bound` (the trees of the session's older
    /// checkpoints, newest first, and the org's `checkpoint_bytes`), the shadow held within the
    /// quota under the same lock ([`collect`]).
    pub async fn checkpoint_bounded(
        &self,
        session: &SessionId,
        ws: &Path,
        bound: Option<(Vec<String>, u64)>,
    ) -> Result<(String, Option<collect::Collected>), SourceError> {
        if !ws.exists() {
            return Ok((EMPTY_TREE.to_owned(), None));
        }
        let lock = self.lock(session);
        let _held = lock.lock().await;
        self.shadow_made(&self.shadow(session)).await?;
        let tree = self.tree_held(session, ws).await?.0;
        let Some((older, limit)) = bound else { return Ok((tree, None)) };
        let mut trees = vec![tree.clone()];
        trees.extend(older.into_iter().filter(|t| *t != tree));
        let collected = self.bound_held(session, &trees, limit).await?;
        Ok((tree, collected))
    }

    /// Restores `session`'s workspace `ws` to the checkpoint `tree`, crash-safely: the workspace
    /// as it is is snapshot first (returned: nothing is lost), a [`PendingRewind`] naming both
    /// trees and `seq` — where the caller will log the rewind — is written durably, then the
    /// files are checked out (`read-tree --reset -u`: changed and deleted files come back,
    /// files made since go; ignored files and those too large to snapshot are left alone).
    /// The caller logs the rewind, then calls [`Sources::rewind_done`]; after a crash in
    /// between, [`Sources::finish_rewind`] redoes or undoes it.
    pub async fn restore(
        &self,
        session: &SessionId,
        ws: &Path,
        tree: &str,
        seq: u64,
    ) -> Result<String, SourceError> {
        let lock = self.lock(session);
        let _held = lock.lock().await;
        let shadow = self.shadow(session);
        self.shadow_made(&shadow).await?;
        let now = self.take(&shadow, ws, Some(BASE_REF)).await?;
        let from = now.tree.to_string();
        let pending = PendingRewind { seq, from: from.clone(), to: tree.to_owned() };
        write_durably(&self.rewind_marker(session), &pending)?;
        self.restore_from(session, ws, now, tree).await?;
        Ok(from)
    }

    /// The rewind of `session` is logged: its marker goes.
    pub fn rewind_done(&self, session: &SessionId) {
        let _ = std::fs::remove_file(self.rewind_marker(session));
    }

    /// The restore of `session`'s workspace that a crash interrupted, if any.
    pub fn pending_rewind(
        &self,
        session: &SessionId,
    ) -> Result<Option<PendingRewind>, SourceError> {
        let marker = self.rewind_marker(session);
        let text = match std::fs::read(&marker) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("cannot read an unfinished rewind")(e)),
        };
        serde_json::from_slice(&text)
            .map(Some)
            .map_err(|e| SourceError::Invalid(format!("an unfinished rewind is unreadable: {e}")))
    }

    /// Completes a restore a crash interrupted: the workspace is checked out again at the
    /// checkpoint (`logged`: the rewind reached the log) or back at what it was before, from
    /// whatever mix of both the crash left; then the marker goes.
    pub async fn finish_rewind(
        &self,
        session: &SessionId,
        ws: &Path,
        pending: &PendingRewind,
        logged: bool,
    ) -> Result<(), SourceError> {
        let lock = self.lock(session);
        let _held = lock.lock().await;
        // The restore starts from a snapshot of the mix, so that it removes what the mix has
        // and the tree has not.
        let tree = if logged { &pending.to } else { &pending.from };
        self.check_out_held(session, ws, tree).await?;
        self.rewind_done(session);
        Ok(())
    }

    /// The sessions whose rewind a crash interrupted (markers in the shadows' directory), to
    /// finish at start.
    pub fn pending_rewinds(&self) -> Vec<SessionId> {
        let Ok(entries) = std::fs::read_dir(self.shadows()) else { return Vec::new() };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let id = name.strip_suffix(".rewind")?;
                (!id.starts_with('.')).then(|| SessionId(id.to_owned()))
            })
            .collect()
    }

    fn rewind_marker(&self, session: &SessionId) -> PathBuf {
        self.shadows().join(format!("{}.rewind", session.as_str()))
    }

    /// Makes the workspace hold `tree`'s files: a snapshot of it now, then a restore from that
    /// to `tree`; the session's lock held by the caller.
    async fn check_out_held(
        &self,
        session: &SessionId,
        ws: &Path,
        tree: &str,
    ) -> Result<(), SourceError> {
        let shadow = self.shadow(session);
        self.shadow_made(&shadow).await?;
        let now = self.take(&shadow, ws, Some(BASE_REF)).await?;
        self.restore_from(session, ws, now, tree).await
    }

    /// Restores the workspace, whose files are the snapshot `now` just taken, to `tree`
    /// ([`outboard_snapshot::restore`]), and updates the stat cache to match (the files written
    /// are read again by the next snapshot, once); the session's lock held by the caller.
    async fn restore_from(
        &self,
        session: &SessionId,
        ws: &Path,
        now: Snapshot,
        tree: &str,
    ) -> Result<(), SourceError> {
        let shadow = self.shadow(session);
        let target = shadow::ls_tree(&self.git, &shadow, tree).await?;
        let (git, repo, dir) = (self.git.clone(), shadow.clone(), ws.to_path_buf());
        tokio::task::spawn_blocking(move || {
            let root = open_root(&dir)?;
            let mut blobs = shadow::CatFile::start(&git, &repo)
                .map_err(io("cannot read the server's repository"))?;
            let cache_path = repo.with_extension("snap");
            let cache = Cache::load(&cache_path).unwrap_or_default();
            // A restore cut midway leaves files the cache does not know: drop it first, so the
            // next snapshot starts from the base tree rather than from a stale key.
            let _ = std::fs::remove_file(&cache_path);
            outboard_snapshot::restore(&root, &now.entries, &target, &mut blobs)?;
            cache
                .restored(&target)
                .save(&cache_path)
                .map_err(io("cannot save the snapshot's cache"))
        })
        .await
        .map_err(|e| SourceError::Invalid(format!("the restore failed: {e}")))??;
        Ok(())
    }

    /// Makes the workspace and shadow repository of `session`, a fork of `from` at `tree` (a
    /// checkpoint's, or a snapshot of now): the shadow is a copy of `from`'s (its base, its
    /// pushes and every snapshot: the fork diffs and pushes like its original), the workspace
    /// has `tree`'s files, plus a copy as bytes of `from`'s own `.git` when `from_ws` has one
    /// (as it is now: it is not part of a checkpoint; links stay links, sparse files sparse).
    /// The files and the copy together must fit in `limit` bytes (the org's workspace quota),
    /// checked before the copy is made. On error nothing is left behind.
    pub async fn fork(
        &self,
        from: &SessionId,
        from_ws: &Path,
        session: &SessionId,
        tree: &str,
        limit: u64,
    ) -> Result<(), SourceError> {
        let (ws, shadow, staging) = self.staging(session)?;
        std::fs::create_dir_all(&ws).map_err(io("cannot create the workspace"))?;
        let source = self.shadow(from);
        if source.join("HEAD").exists() {
            let lock = self.lock(from);
            let _held = lock.lock().await;
            // A local clone copies the object files whole, so trees no ref names come along.
            let (src, dst) = (source.to_string_lossy(), shadow.to_string_lossy());
            let args = ["clone", "--mirror", "--no-hardlinks", "-q", &*src, &*dst];
            self.git.command(None, &args).output().await?;
        } else {
            self.git
                .command(None, &["init", "--bare", "-q"])
                .env("GIT_DIR", &shadow)
                .output()
                .await?;
        }
        let target = shadow::ls_tree(&self.git, &shadow, tree).await?;
        let (git, repo, dir, from_dir) =
            (self.git.clone(), shadow.clone(), ws.clone(), from_ws.to_path_buf());
        tokio::task::spawn_blocking(move || {
            let root = open_root(&dir)?;
            let mut blobs = shadow::CatFile::start(&git, &repo)
                .map_err(io("cannot read the server's repository"))?;
            let done = outboard_snapshot::restore(&root, &[], &target, &mut blobs)?;
            if from_dir.is_dir() {
                let from_root = open_root(&from_dir)?;
                let left = limit.saturating_sub(done.bytes);
                let git_dir = Path::new(".git");
                outboard_snapshot::copy_dir(&from_root, git_dir, &root, git_dir, left)?;
            }
            Cache::seeded(&target)
                .save(&repo.with_extension("snap"))
                .map_err(io("cannot save the snapshot's cache"))
        })
        .await
        .map_err(|e| SourceError::Invalid(format!("the fork's copy failed: {e}")))??;
        self.keep(session, &ws, &shadow, staging)
    }

    /// Deletes `session`'s workspace (unless it is worked on in place) and git state.
    pub fn delete(&self, session: &SessionId, in_place: bool) -> Result<(), SourceError> {
        if !in_place {
            remove(&self.workspaces().join(session.as_str()))?;
        }
        remove(&self.shadow(session))?;
        let _ = std::fs::remove_file(self.cache(session));
        let _ = std::fs::remove_file(self.shadows().join(format!("{}.dropped", session.as_str())));
        if let Ok(mut usage) = self.usage.lock() {
            usage.remove(session);
        }
        // A shadow index of an earlier version's, if any.
        let _ = std::fs::remove_file(self.shadows().join(format!("{}.index", session.as_str())));
        self.rewind_done(session);
        let mut locks = match self.locks.lock() {
            Ok(l) => l,
            Err(poisoned) => poisoned.into_inner(),
        };
        locks.remove(session);
        Ok(())
    }
}

/// A restore of a workspace to a checkpoint, recorded before its files are touched (see
/// [`Sources::restore`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingRewind {
    /// The seq the rewind's event is to be logged at.
    pub seq: u64,
    /// The workspace's tree before the restore.
    pub from: String,
    /// The checkpoint's tree.
    pub to: String,
}

/// Writes `value` as JSON to `path` so that a crash leaves the old file or the new one, both
/// whole and on disk.
fn write_durably(path: &Path, value: &impl serde::Serialize) -> Result<(), SourceError> {
    use std::io::Write;
    let text = serde_json::to_vec(value)
        .map_err(|e| SourceError::Invalid(format!("cannot record the rewind: {e}")))?;
    let part = path.with_extension("part");
    let mut file = std::fs::File::create(&part).map_err(io("cannot record the rewind"))?;
    file.write_all(&text).and_then(|()| file.sync_all()).map_err(io("cannot record the rewind"))?;
    std::fs::rename(&part, path).map_err(io("cannot record the rewind"))?;
    if let Some(dir) = path.parent() {
        let _ = std::fs::File::open(dir).and_then(|d| d.sync_all());
    }
    Ok(())
}

fn remove(path: &Path) -> Result<(), SourceError> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(format!("cannot delete {}", path.display()))(e)),
    }
}

/// The server commits as itself (the author is the person).
fn committer(command: crate::git::GitCommand) -> crate::git::GitCommand {
    command.env("GIT_COMMITTER_NAME", "Outboard").env("GIT_COMMITTER_EMAIL", "outboard@localhost")
}

fn progress_line(sink: &dyn ProgressSink, phase: &str, line: &str) {
    sink.report(crate::git::Progress {
        phase: phase.into(),
        done: 0,
        total: None,
        line: line.into(),
    });
}

/// The ref asked for, against what the remote advertises: `(name, commit if known, branch)`.
fn resolve(
    refs: &RemoteRefs,
    url: &RepoUrl,
    git_ref: Option<&str>,
) -> Result<(String, Option<String>, Option<String>), SourceError> {
    let missing = |m: String| SourceError::Git(GitError::MissingRef(m));
    let Some(wanted) = git_ref else {
        let head = refs.head.clone().ok_or_else(|| {
            missing(format!(
                "{} has no default branch (is it empty?): name a ref with #REF",
                url.url
            ))
        })?;
        let commit = refs.get(&format!("refs/heads/{head}")).map(str::to_owned);
        return Ok((head.clone(), commit, Some(head)));
    };
    let wanted = wanted.strip_prefix("refs/heads/").unwrap_or(wanted);
    if let Some(c) = refs.get(&format!("refs/heads/{wanted}")) {
        return Ok((wanted.to_owned(), Some(c.to_owned()), Some(wanted.to_owned())));
    }
    let tag = wanted.strip_prefix("refs/tags/").unwrap_or(wanted);
    if let Some(c) = refs.get(&format!("refs/tags/{tag}")) {
        return Ok((tag.to_owned(), Some(c.to_owned()), None));
    }
    if is_commit_id(wanted) {
        return Ok((wanted.to_owned(), None, None));
    }
    let mut branches = refs.branches();
    branches.truncate(10);
    Err(missing(format!(
        "{} has no branch or tag {wanted:?} (branches: {}); a commit must be given in full",
        url.url,
        if branches.is_empty() { "none".to_owned() } else { branches.join(", ") }
    )))
}

/// `git diff` of `base` against `tree`: the patch with binaries, full ids and renames, or the
/// `--stat` summary.
fn diff_args<'a>(base: &'a str, tree: &'a str, stat: bool) -> Vec<&'a str> {
    let mut args = vec!["diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M"];
    if stat {
        args.extend(["--stat=200", "--summary"]);
    } else {
        args.extend(["--binary", "--full-index"]);
    }
    args.extend([base, tree]);
    args
}

/// The workspace at `ws` opened as a confined root (its real path: the data dir may be under a
/// linked home).
fn open_root(ws: &Path) -> Result<Root, SourceError> {
    let real = std::fs::canonicalize(ws).map_err(io("cannot open the workspace"))?;
    Root::open(&real).map_err(io("cannot open the workspace"))
}

/// Removes a directory tree or a file, whichever `path` is.
fn remove_any(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}
