//! Bounded checkpoint storage: a session's shadow repository is held to the org's
//! `checkpoint_bytes` quota.
//!
//! Every snapshot adds the objects of the files it found changed, so a session that rewrites a
//! large file at every prompt grows its shadow by that file each time. The server keeps an
//! estimate of each shadow's size (measured once per process, then the bytes each snapshot
//! writes); when it passes the quota, the shadow is collected: the newest checkpoint trees that
//! fit (always the one just taken) are kept under `refs/outboard/keep/*`, everything no ref
//! reaches — the oldest checkpoints' files — is pruned (`git repack -a -d` then `git prune`, on
//! the server's own repository), and the trees dropped are listed in `git/ID.dropped`, so
//! `outboard checkpoints` marks them and a rewind of their files is refused with the reason.
//! The base commit and every pushed commit stay (refs), whatever their size.

use std::collections::HashSet;
use std::path::Path;

use outboard_shared::SessionId;

use super::{io, SourceError, Sources};

/// What a collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// Checkpoint trees kept.
    pub kept: usize,
    /// Checkpoint trees whose files were dropped (now, not before).
    pub dropped: usize,
    /// The shadow's size before, bytes.
    pub before: u64,
    /// Its size after, bytes.
    pub after: u64,
}

/// Bytes a directory tree of the server's own takes on disk (allocated blocks).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0u64;
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                dirs.push(entry.path());
            }
        }
    }
    total
}

impl Sources {
    fn dropped_path(&self, session: &SessionId) -> std::path::PathBuf {
        self.shadows().join(format!("{}.dropped", session.as_str()))
    }

    /// The checkpoint trees of `session` whose files were dropped to keep its shadow under the
    /// quota.
    pub fn dropped(&self, session: &SessionId) -> HashSet<String> {
        std::fs::read_to_string(self.dropped_path(session))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The shadow's size as estimated (measured on first use in this process).
    async fn shadow_usage(&self, session: &SessionId) -> u64 {
        if let Some(known) = self.usage_of(session) {
            return known;
        }
        let shadow = self.shadow(session);
        let measured = tokio::task::spawn_blocking(move || disk_usage(&shadow)).await.unwrap_or(0);
        self.set_usage(session, measured);
        measured
    }

    /// Whether `session`'s shadow is estimated over `limit` bytes (cheap after the first
    /// call: no walk).
    pub async fn over(&self, session: &SessionId, limit: u64) -> bool {
        self.shadow_usage(session).await > limit
    }

    /// Holds `session`'s shadow to `limit` bytes: when its size passes it, keeps the newest of
    /// `trees` (newest first; the first is always kept) that fit and drops the rest (module
    /// header). `None` when the shadow is within the limit.
    pub async fn bound_checkpoints(
        &self,
        session: &SessionId,
        trees: &[String],
        limit: u64,
    ) -> Result<Option<Collected>, SourceError> {
        let lock = self.lock(session);
        let _held = lock.lock().await;
        self.bound_held(session, trees, limit).await
    }

    /// [`Sources::bound_checkpoints`], the session's lock held by the caller (so no snapshot
    /// writes objects that no tree of `trees` names while unreachable objects are pruned).
    pub(super) async fn bound_held(
        &self,
        session: &SessionId,
        trees: &[String],
        limit: u64,
    ) -> Result<Option<Collected>, SourceError> {
        if self.shadow_usage(session).await <= limit || trees.is_empty() {
            return Ok(None);
        }
        let shadow = self.shadow(session);
        let before = {
            let s = shadow.clone();
            tokio::task::spawn_blocking(move || disk_usage(&s)).await.unwrap_or(0)
        };
        if before <= limit {
            self.set_usage(session, before);
            return Ok(None);
        }
        let git = |args: &[&str]| self.git.command(None, args).env("GIT_DIR", &shadow);
        // Objects every ref but the keep refs holds (the base, pushes): always kept.
        let usage = |k: usize| {
            let mut args = vec![
                "rev-list",
                "--objects",
                "--disk-usage",
                "--exclude=refs/outboard/keep/*",
                "--all",
            ];
            args.extend(trees[..k].iter().map(String::as_str));
            let command = git(&args);
            async move { command.text().await.ok().and_then(|t| t.parse::<u64>().ok()) }
        };
        // The most trees, newest first, whose objects fit in 80 % of the limit (room for the
        // next few prompts before the next collection); at least the newest.
        let target = limit / 10 * 8;
        let (mut lo, mut hi) = (1usize, trees.len());
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            match usage(mid).await {
                Some(bytes) if bytes <= target => lo = mid,
                _ => hi = mid - 1,
            }
        }
        let kept = lo;
        let mut stdin = String::new();
        let old =
            git(&["for-each-ref", "--format=%(refname)", "refs/outboard/keep/"]).text().await?;
        let names: Vec<String> = (0..kept).map(|i| format!("refs/outboard/keep/{i}")).collect();
        for name in old.lines().filter(|l| !l.is_empty() && !names.iter().any(|n| n == l)) {
            stdin.push_str(&format!("delete {name}\n"));
        }
        for (name, tree) in names.iter().zip(&trees[..kept]) {
            stdin.push_str(&format!("update {name} {tree}\n"));
        }
        let refs = shadow.with_extension("keep-refs");
        std::fs::write(&refs, &stdin).map_err(io("cannot write the checkpoints kept"))?;
        let updated = git(&["update-ref", "--stdin"]).stdin_file(&refs).output().await;
        let _ = std::fs::remove_file(&refs);
        updated?;
        git(&["repack", "-a", "-d", "-q"]).output().await?;
        git(&["prune", "--expire=now"]).output().await?;
        let after = {
            let s = shadow.clone();
            tokio::task::spawn_blocking(move || disk_usage(&s)).await.unwrap_or(0)
        };
        self.set_usage(session, after);
        let mut dropped = self.dropped(session);
        let newly: Vec<&String> =
            trees[kept..].iter().filter(|t| !trees[..kept].contains(t)).collect();
        let count = newly.iter().filter(|t| !dropped.contains(t.as_str())).count();
        dropped.extend(newly.into_iter().cloned());
        let mut text: Vec<&str> = dropped.iter().map(String::as_str).collect();
        text.sort_unstable();
        std::fs::write(self.dropped_path(session), text.join("\n") + "\n")
            .map_err(io("cannot record the checkpoints dropped"))?;
        Ok(Some(Collected { kept, dropped: count, before, after }))
    }
}
