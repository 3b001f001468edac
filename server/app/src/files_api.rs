//! The `files/*`, `skills/*` and `agents/*` methods: people's access to their org's shared files
//! over the WebSocket (`outboard memory …`, `outboard skills …`, `outboard agents …`), and the
//! forwarding of every change to the org's live sessions as `memory_changed`.
//!
//! Every call is scoped to the caller's org, taken from the authenticated token: another org's
//! files are indistinguishable from missing ones. Changes made here are authored by the user,
//! with no session.

use outboard_shared::{
    AgentsImportResponse, ErrorBody, ErrorCode, EventKind, FileOp, FilesChangeResponse,
    FilesHistoryResponse, FilesListResponse, FilesReadResponse, ImportFile, Method, RequestId,
    Response, SkillsImportResponse, SkillsListResponse,
};
use tokio::sync::broadcast;

use crate::hub::Hub;
use outboard_org::orgfs::{Author, FsError, OrgChange, Precondition, Written};
use outboard_store::UserRow;
use outboard_vfs::OrgPath;

fn error(e: FsError) -> ErrorBody {
    let code = match &e {
        FsError::NotFound(_) => ErrorCode::NotFound,
        FsError::Conflict(_) | FsError::Rejected { .. } => ErrorCode::Conflict,
        FsError::Invalid(_) => ErrorCode::BadRequest,
        FsError::Quota(_) => ErrorCode::QuotaExceeded,
        FsError::Store(_) => ErrorCode::Internal,
    };
    ErrorBody::new(code, e.to_string())
}

fn path(raw: &str) -> Result<OrgPath, ErrorBody> {
    OrgPath::parse(raw).map_err(|e| ErrorBody::new(ErrorCode::BadRequest, e.to_string()))
}

fn changed(id: RequestId, w: Written) -> Response {
    Response::ok(id, &FilesChangeResponse { file: w.file, changed: w.changed })
}

/// Answers one `files/*`, `skills/*` or `agents/*` request for `user`.
pub async fn handle(
    hub: &Hub,
    user: &UserRow,
    id: RequestId,
    method: Method,
) -> Result<Response, ErrorBody> {
    let fs = hub.org_fs();
    let org = &user.org_id;
    let author = Author { user: user.name.clone(), session: None };
    match method {
        Method::FilesList(p) => {
            let under = match p.path.trim() {
                "/" | "" => None,
                raw => Some(path(raw)?),
            };
            let files = fs.list(org, under.as_ref(), p.include_deleted).await.map_err(error)?;
            Ok(Response::ok(id, &FilesListResponse { files }))
        }
        Method::FilesRead(p) => {
            let (file, content) = fs.read(org, &path(&p.path)?, p.version).await.map_err(error)?;
            Ok(Response::ok(id, &FilesReadResponse { file, content }))
        }
        Method::FilesHistory(p) => {
            let versions = fs.history(org, &path(&p.path)?).await.map_err(error)?;
            Ok(Response::ok(id, &FilesHistoryResponse { versions }))
        }
        Method::FilesWrite(p) => {
            let pre = p.base_version.map_or(Precondition::Any, Precondition::Version);
            let w = fs
                .write(org, &path(&p.path)?, p.content, &author, FileOp::Write, pre)
                .await
                .map_err(error)?;
            Ok(changed(id, w))
        }
        Method::FilesDelete(p) => {
            let pre = p.base_version.map_or(Precondition::Any, Precondition::Version);
            let w = fs.delete(org, &path(&p.path)?, &author, pre).await.map_err(error)?;
            Ok(changed(id, w))
        }
        Method::FilesRestore(p) => {
            let w = fs.restore(org, &path(&p.path)?, p.version, &author).await.map_err(error)?;
            Ok(changed(id, w))
        }
        Method::SkillsList(_) => {
            let skills = fs.skills(org).await.map_err(error)?;
            Ok(Response::ok(id, &SkillsListResponse { skills }))
        }
        Method::SkillsImport(p) => {
            let mut files = Vec::with_capacity(p.files.len());
            for f in p.files {
                let full = path(&format!("/skills/{}", f.path.trim_start_matches('/')))?;
                if full.relative().split('/').count() < 2 {
                    return Err(ErrorBody::new(
                        ErrorCode::BadRequest,
                        format!(
                            "{}: a skill is a directory: import NAME/SKILL.md and its files",
                            f.path
                        ),
                    ));
                }
                files.push((full, f.content));
            }
            let (written, unchanged) = fs.import(org, files, &author).await.map_err(error)?;
            Ok(Response::ok(id, &SkillsImportResponse { written, unchanged }))
        }
        Method::AgentsList(_) => Ok(Response::ok(
            id,
            &outboard_harness::agent_types::agents(fs, org).await.map_err(error)?,
        )),
        Method::AgentsImport(p) => {
            let files = agent_files(p.files)?;
            let (written, unchanged) = fs.import(org, files, &author).await.map_err(error)?;
            Ok(Response::ok(id, &AgentsImportResponse { written, unchanged }))
        }
        other => Err(ErrorBody::new(
            ErrorCode::UnknownMethod,
            format!("{} is not an org files method", other.name()),
        )),
    }
}

/// The files of an `agents/import`, each checked to be a usable agent before anything is
/// written: a bad one refuses the whole request, naming it and what is wrong.
fn agent_files(files: Vec<ImportFile>) -> Result<Vec<(OrgPath, String)>, ErrorBody> {
    use outboard_harness::agent_types::{parse, MAX_AGENTS};
    let bad = |message: String| ErrorBody::new(ErrorCode::BadRequest, message);
    if files.len() > MAX_AGENTS {
        return Err(bad(format!(
            "{} agent files in one import; an org has at most {MAX_AGENTS} agents",
            files.len()
        )));
    }
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let name = f.path.trim_start_matches('/');
        if let Some(problem) = parse(name, &f.content, false).problem {
            return Err(bad(format!("{name}: {problem}; nothing was imported")));
        }
        out.push((path(&format!("{}/{name}", outboard_vfs::AGENTS_PREFIX))?, f.content));
    }
    Ok(out)
}

/// Sends every committed org file change to the live sessions of its org as a transient
/// `memory_changed` event, until `stop` is cancelled (the server stops).
pub async fn forward_changes(
    hub: std::sync::Arc<Hub>,
    mut changes: broadcast::Receiver<OrgChange>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let received = tokio::select! {
            r = changes.recv() => r,
            _ = stop.cancelled() => return,
        };
        let change = match received {
            Ok(change) => change,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "memory_changed notices were dropped (burst of writes)");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        for session in hub.live_sessions_of(&change.org_id) {
            let kind = EventKind::MemoryChanged {
                path: change.file.path.clone(),
                version: change.file.version,
                op: change.file.op,
                author: change.file.author.clone(),
                session: change.file.session.clone(),
            };
            // A session closing meanwhile is fine.
            let _ = session.transient(kind).await;
        }
    }
}
