//! `Read`, `Write` and `Edit` on the org's shared files (`/memory/**`, `/skills/**`), which live
//! in the store ([`outboard_org::orgfs`]) rather than on disk.
//!
//! The model sees the same tools and the same answers as for workspace files, with the version
//! added, and the same read-before-write rule made stronger by the store: a `Write` carries the
//! version this session last read as its precondition, so a teammate's change in between is
//! refused (naming who made it) instead of overwritten; an `Edit` is applied to the *current*
//! text in one transaction, so concurrent edits of different parts all land.

use outboard_shared::{FileOp, OrgId};

use crate::external::ExternalTools;
use crate::file::{edited_message, render, replace, EditParams, ReadParams, WriteParams};
use crate::ledger::ReadLedger;
use crate::outcome::ToolOutcome;
use outboard_org::orgfs::{describe, Author, FsError, OrgFs, Precondition};
use outboard_vfs::OrgPath;

/// The org a session's tools act for, and who they act as.
#[derive(Debug, Clone)]
pub struct OrgCtx {
    /// The org files.
    pub fs: OrgFs,
    /// The session's org.
    pub org_id: OrgId,
    /// The user driving the turn, and the session.
    pub author: Author,
    /// The org's MCP servers (`mcp__SERVER__TOOL` calls); `None`: none offered.
    pub mcp: Option<std::sync::Arc<dyn ExternalTools>>,
    /// The org's sealed secrets, for a tool that needs one in the server (`WebSearch`'s Brave
    /// key); `None`: a server without a secret key.
    pub secrets: Option<outboard_org::secrets::Secrets>,
}

/// Where org files are not available (a context without an org).
pub(crate) fn unavailable(path: &OrgPath) -> ToolOutcome {
    ToolOutcome::error(format!("{path}: org files are not available in this session"))
}

fn error(e: FsError) -> ToolOutcome {
    ToolOutcome::error(e.to_string())
}

/// What a directory read should say: org directories are listed with Glob.
async fn directory_hint(org: &OrgCtx, path: &OrgPath) -> Option<ToolOutcome> {
    if !path.is_root() {
        let under = org.fs.list(&org.org_id, Some(path), false).await.ok()?;
        if under.iter().all(|f| f.path == path.as_str()) {
            return None;
        }
    }
    Some(ToolOutcome::error(format!(
        "{path} is a directory, not a file. To list it, use Glob (e.g. pattern \"**/*\" with \
         path \"{path}\")."
    )))
}

pub(crate) async fn read(
    params: ReadParams,
    path: OrgPath,
    org: &OrgCtx,
    reads: &mut ReadLedger,
) -> ToolOutcome {
    if let Some(hint) = directory_hint(org, &path).await {
        return hint;
    }
    match org.fs.read(&org.org_id, &path, None).await {
        Ok((file, content)) => {
            reads.record_org(&file.path, file.version);
            render(content.as_bytes(), params.offset, params.limit)
        }
        Err(FsError::NotFound(msg)) => ToolOutcome::error(format!(
            "File does not exist: {msg}. Use Glob (path \"{}\") to find files, or Write to \
             create it.",
            path.root()
        )),
        Err(e) => error(e),
    }
}

pub(crate) async fn write(
    params: WriteParams,
    path: OrgPath,
    org: &OrgCtx,
    reads: &mut ReadLedger,
) -> ToolOutcome {
    let head = match org.fs.head(&org.org_id, &path).await {
        Ok(head) => head.filter(|h| !h.deleted),
        Err(e) => return error(e),
    };
    let pre = match &head {
        None => Precondition::Version(0),
        Some(current) => match reads.org_stamp(&path.to_string()) {
            None => {
                return ToolOutcome::error(format!(
                    "File has not been read yet. Read it first before writing to it. ({path} is \
                     shared with your org and is now {})",
                    describe(current)
                ))
            }
            Some(stamp) => Precondition::Version(stamp.version),
        },
    };
    match org.fs.write(&org.org_id, &path, params.content, &org.author, FileOp::Write, pre).await {
        Ok(written) => {
            reads.record_org(&written.file.path, written.file.version);
            let v = written.file.version;
            if head.is_some() {
                ToolOutcome::ok(format!(
                    "The file {path} has been updated (v{v}, shared with your org)."
                ))
            } else {
                ToolOutcome::ok(format!(
                    "File created successfully at: {path} (v{v}, shared with your org)"
                ))
            }
        }
        Err(FsError::Conflict(msg)) => ToolOutcome::error(format!(
            "Not written: {msg}. Someone else in your org changed it after you read it."
        )),
        Err(e) => error(e),
    }
}

pub(crate) async fn edit(
    params: EditParams,
    path: OrgPath,
    org: &OrgCtx,
    reads: &mut ReadLedger,
) -> ToolOutcome {
    let shown = path.to_string();
    let stamp = reads.org_stamp(&shown);
    if stamp.is_none() {
        let head = org.fs.head(&org.org_id, &path).await.ok().flatten().filter(|h| !h.deleted);
        match head {
            None if params.old_string.is_empty() => {
                // Claude Code's convention: an empty old_string creates a new file.
                let content = params.new_string;
                let result = org
                    .fs
                    .write(
                        &org.org_id,
                        &path,
                        content,
                        &org.author,
                        FileOp::Edit,
                        Precondition::Version(0),
                    )
                    .await;
                return match result {
                    Ok(w) => {
                        reads.record_org(&w.file.path, w.file.version);
                        ToolOutcome::ok(format!(
                            "File created successfully at: {path} (v{}, shared with your org)",
                            w.file.version
                        ))
                    }
                    Err(e) => error(e),
                };
            }
            None => {
                return ToolOutcome::error(format!(
                    "File does not exist: {path}. Use Write to create it, or Glob (path \"{}\") \
                     to find the right path.",
                    path.root()
                ))
            }
            Some(_) => {
                return ToolOutcome::error(format!(
                    "File has not been read yet. Read it first before editing it. ({path})"
                ))
            }
        }
    }
    let (old, new, all) =
        (params.old_string.clone(), params.new_string.clone(), params.replace_all);
    let closure_shown = shown.clone();
    let result = org
        .fs
        .edit(&org.org_id, &path, &org.author, move |current| {
            let p = EditParams {
                file_path: String::new(),
                old_string: old,
                new_string: new,
                replace_all: all,
            };
            // The text it was applied to comes back for the answer's snippet.
            let replaced = replace(current, &p, &closure_shown)?;
            Ok((replaced.updated.clone(), (current.to_owned(), replaced)))
        })
        .await;
    match result {
        Ok((written, (before, replaced))) => {
            reads.record_org(&written.file.path, written.file.version);
            let suffix = format!(" (v{}, shared with your org)", written.file.version);
            ToolOutcome::ok(edited_message(&shown, &before, &replaced, &params, &suffix))
        }
        Err(FsError::Rejected { message, current }) => {
            let seen = stamp.map_or(0, |s| s.version);
            let mut text = message;
            if current.version != seen {
                text.push_str(&format!(
                    "\n{shown} has changed since you read v{seen}: it is now {}. Read it again \
                     before editing.",
                    describe(&current)
                ));
            }
            ToolOutcome::error(text)
        }
        Err(e) => error(e),
    }
}

/// The org files this session has read that someone else changed since, as a reminder for the
/// model (each change is announced once), or `None`.
pub async fn changed_since_read(org: &OrgCtx, reads: &mut ReadLedger) -> Option<String> {
    let paths = reads.org_paths();
    if paths.is_empty() {
        return None;
    }
    let heads = org.fs.heads(&org.org_id, paths).await.ok()?;
    let mut lines = Vec::new();
    for head in heads {
        let Some(stamp) = reads.org_stamp(&head.path) else { continue };
        if head.version > stamp.announced {
            lines.push(format!(
                "- {} (you read v{}; now {})",
                head.path,
                stamp.version,
                describe(&head)
            ));
            reads.announced_org(&head.path, head.version);
        }
    }
    if lines.is_empty() {
        return None;
    }
    Some(format!(
        "<system-reminder>Org files you read were changed by someone else in your org since:\n{}\n\
         Read them again before relying on them or changing them.</system-reminder>",
        lines.join("\n")
    ))
}
