//! The projection of an org's files onto the host, where sandboxes mount them read-only: one
//! directory per org, written by the server alone (`0700`/`0600`), each path checked to stay
//! inside it, and strays removed.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use outboard_vfs::{AGENTS_PREFIX, MEMORY_PREFIX, PLANS_PREFIX, SKILLS_PREFIX};

/// The projected roots of one org, on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectionDirs {
    /// Seen as `/memory`.
    pub memory: PathBuf,
    /// Seen as `/skills`.
    pub skills: PathBuf,
    /// Seen as `/agents`.
    pub agents: PathBuf,
    /// Seen as `/plans`.
    pub plans: PathBuf,
}

impl ProjectionDirs {
    /// Each root's host directory with the path it is seen at (`/memory`, `/skills`,
    /// `/agents`, `/plans`): what a sandbox binds read-only and what `Glob`/`Grep` walk.
    pub fn mounts(&self) -> [(&Path, &'static str); 4] {
        [
            (&self.memory, MEMORY_PREFIX),
            (&self.skills, SKILLS_PREFIX),
            (&self.agents, AGENTS_PREFIX),
            (&self.plans, PLANS_PREFIX),
        ]
    }

    /// Whether `dir` is one of the roots themselves (never removed, the top of every walk up).
    pub(super) fn is_root(&self, dir: &Path) -> bool {
        self.mounts().iter().any(|(root, _)| *root == dir)
    }
}

/// An org id as a directory name (ids are `o_<hex>`; anything else is made safe).
pub(super) fn safe_dir_name(id: &str) -> String {
    id.chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect()
}

/// Modes of the projection: owner only. The sandbox's user (uid 1000 in its user namespace) is
/// the server's own uid mapped, so owner bits are all it needs; nobody else on the host may read
/// an org's files (the data dir is 0700 as well).
pub(super) const PROJECTION_DIR_MODE: u32 = 0o700;

/// See [`PROJECTION_DIR_MODE`].
pub(super) const PROJECTION_FILE_MODE: u32 = 0o600;

pub(super) fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
}

/// The host path of an org path within the projection.
pub(super) fn host_path(dirs: &ProjectionDirs, path: &str) -> Option<PathBuf> {
    let (root, rest) = dirs.mounts().into_iter().find_map(|(root, prefix)| {
        path.strip_prefix(prefix).filter(|r| r.starts_with('/')).map(|rest| (root, rest))
    })?;
    let rest = rest.trim_start_matches('/');
    // Stored paths were normalised by `OrgPath`; refuse anything else rather than trust it.
    if rest.is_empty() || rest.split('/').any(|n| n.is_empty() || n == "." || n == "..") {
        return None;
    }
    Some(root.join(rest))
}

/// Applies changed heads to the projection: deletes first (so a file can replace a directory
/// and the reverse), then writes. A full pass also removes files the store does not have.
pub(super) fn apply_projection(
    dirs: &ProjectionDirs,
    changed: Vec<(String, Option<String>, i64)>,
    full: bool,
) -> std::io::Result<()> {
    let mut live: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    let (deletes, writes): (Vec<_>, Vec<_>) =
        changed.into_iter().partition(|(_, c, _)| c.is_none());
    for (path, _, _) in deletes {
        if let Some(host) = host_path(dirs, &path) {
            remove_any(&host)?;
            prune_empty(&host, dirs);
        }
    }
    for (path, content, at_ms) in writes {
        let (Some(host), Some(content)) = (host_path(dirs, &path), content) else { continue };
        if full && std::fs::read(&host).is_ok_and(|b| b == content.as_bytes()) {
            live.insert(host);
            continue;
        }
        write_projected(&host, content.as_bytes(), at_ms, dirs)?;
        live.insert(host);
    }
    if full {
        for (root, _) in dirs.mounts() {
            remove_strays(root, &live)?;
        }
    }
    Ok(())
}

pub(super) fn remove_any(host: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(host) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(host),
        Ok(_) => std::fs::remove_file(host),
        // Gone already, or a file now stands where a parent directory was.
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Removes the empty directories above `host`, up to (not including) the projection roots.
pub(super) fn prune_empty(host: &Path, dirs: &ProjectionDirs) {
    let mut at = host.parent();
    while let Some(dir) = at {
        if dirs.is_root(dir) || std::fs::remove_dir(dir).is_err() {
            break;
        }
        at = dir.parent();
    }
}

pub(super) fn write_projected(
    host: &Path,
    content: &[u8],
    at_ms: i64,
    dirs: &ProjectionDirs,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let Some(parent) = host.parent() else { return Ok(()) };
    // A file where a directory must be (left by an earlier shape): remove it.
    let mut at = Some(parent);
    while let Some(dir) = at {
        if dirs.is_root(dir) {
            break;
        }
        if std::fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
            std::fs::remove_file(dir)?;
        }
        at = dir.parent();
    }
    std::fs::create_dir_all(parent)?;
    if std::fs::symlink_metadata(host).is_ok_and(|m| m.is_dir()) {
        std::fs::remove_dir_all(host)?;
    }
    let name = host.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = parent.join(format!(".{name}.outboard-tmp"));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(content)?;
        let when = UNIX_EPOCH + Duration::from_millis(at_ms.max(0) as u64);
        file.set_modified(when)?;
        drop(file);
        set_mode(&tmp, PROJECTION_FILE_MODE);
        std::fs::rename(&tmp, host)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    // Directories made by create_dir_all follow the umask; the sandbox user must read them.
    let mut at = Some(parent);
    while let Some(dir) = at {
        set_mode(dir, PROJECTION_DIR_MODE);
        if dirs.is_root(dir) {
            break;
        }
        at = dir.parent();
    }
    result
}

/// Removes files under `root` that are not in `live`, and then empty directories.
pub(super) fn remove_strays(
    root: &Path,
    live: &std::collections::HashSet<PathBuf>,
) -> std::io::Result<()> {
    let Ok(entries) = std::fs::read_dir(root) else { return Ok(()) };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            remove_strays(&path, live)?;
            let _ = std::fs::remove_dir(&path); // only when empty
        } else if !live.contains(&path) {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}
