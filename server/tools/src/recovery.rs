//! What a turn resumed after a restart needs of the workspace: a read ledger rebuilt from the
//! files the log shows touched, and a write target's digest to tell whether a write happened.
//! Blocking, bounded reads through the confined root; a sandbox host runs them on its own disk.

use outboard_vfs::confined::ConfinedError;
use outboard_vfs::{Route, Workspace};

use crate::file::MAX_FILE_BYTES;
use crate::ledger::ReadLedger;

/// A read ledger holding the current content of the last [`LEDGER_REBUILD_FILES`] of `files`
/// (the files the session's log shows touched). Blocking: call it off the async workers.
pub fn rebuilt_ledger(workspace: &Workspace, files: &[String]) -> ReadLedger {
    let mut ledger = ReadLedger::default();
    let recent = &files[files.len().saturating_sub(LEDGER_REBUILD_FILES)..];
    for file in recent {
        if matches!(outboard_vfs::route(file), Ok(Route::Org(_))) {
            continue; // looked up in the store when the turn starts (`org_touched`)
        }
        // Bounded (non-blocking open, capped read) through the confined root.
        let Ok(relative) = workspace.relative(file) else { continue };
        if let Ok(located) = workspace.confined().locate(&relative, false) {
            if let Ok(Some(content)) = located.read(MAX_FILE_BYTES) {
                ledger.record(&located.host, &content);
            }
        }
    }
    ledger
}

/// The `target_before` digest of the workspace file `path` now: its hex SHA-256, `absent`, or
/// `None` when it cannot be read (a FIFO, a symlink out). Blocking: a sandbox host computes it
/// on its own disk for a remote workspace, the server for a local one.
pub fn workspace_target_digest(workspace: &Workspace, path: &str) -> Option<String> {
    let relative = workspace.relative(path).ok()?;
    let located = match workspace.confined().locate(&relative, false) {
        Ok(located) => located,
        Err(ConfinedError::NotFound) => return Some("absent".to_owned()),
        Err(_) => return None,
    };
    match located.read(MAX_FILE_BYTES) {
        Ok(Some(bytes)) => Some(outboard_base::digest::hex_sha256(&bytes)),
        Ok(None) => Some("absent".to_owned()),
        Err(_) => None,
    }
}

/// Workspace files whose content a rebuilt ledger takes, at most: the most recently touched
/// ones. Each costs a capped read (at most the Read tool's limit) at the first turn after a
/// restart; an older file simply needs a fresh `Read` before it is edited.
pub const LEDGER_REBUILD_FILES: usize = 256;
