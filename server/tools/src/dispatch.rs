//! One tool call, routed: the built-in tools by name, a sandbox host's workspace when the session
//! has one, the org's files by path, external tools by their prefix.

use std::sync::atomic::AtomicBool;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use outboard_vfs::{OrgPath, Route, Workspace};

use crate::blocking::offload;
use crate::catalog::TOOL_NAMES;
use crate::ctx::ToolCtx;
use crate::external::is_external_name;
use crate::input::parse;
use crate::ledger::ReadLedger;
use crate::org::OrgCtx;
use crate::outcome::ToolOutcome;
use crate::{background, bash, file, notebook, org, search, todo, webfetch, websearch};

/// Runs one tool call.
pub async fn run(name: &str, input: &Value, ctx: ToolCtx<'_>) -> ToolOutcome {
    match name {
        "Read" => match parse::<file::ReadParams>(name, input, file::READ_PARAMS) {
            Ok(params) => match routed(&params.file_path, ctx.org) {
                Err(e) => e,
                Ok(Routed::Workspace) if ctx.remote.is_some() => {
                    remote_tool(name, input, ctx).await
                }
                Ok(Routed::Workspace) => {
                    with_ledger(ctx.workspace, ctx.reads, &ctx.cancel, move |ws, ledger| {
                        file::read(params, ws, ledger)
                    })
                    .await
                }
                Ok(Routed::Org(path, org)) => org::read(params, path, org, ctx.reads).await,
            },
            Err(e) => e,
        },
        "Write" => match parse::<file::WriteParams>(name, input, file::WRITE_PARAMS) {
            Ok(params) => match routed(&params.file_path, ctx.org) {
                Err(e) => e,
                Ok(Routed::Workspace) if ctx.remote.is_some() => {
                    remote_tool(name, input, ctx).await
                }
                Ok(Routed::Workspace) => {
                    let workspace = ctx.workspace.clone();
                    let (path, len) = (params.file_path.clone(), params.content.len() as u64);
                    let growth = offload(&ctx.cancel, move |_: &AtomicBool| {
                        len.saturating_sub(current_size(&workspace, &path))
                    });
                    let growth = match growth.await {
                        Ok(growth) => growth,
                        Err(interrupted) => return interrupted,
                    };
                    if let Some(refusal) =
                        workspace_quota(ctx.org, ctx.workspace, growth, &ctx.cancel).await
                    {
                        return refusal;
                    }
                    with_ledger(ctx.workspace, ctx.reads, &ctx.cancel, move |ws, ledger| {
                        file::write(params, ws, ledger)
                    })
                    .await
                }
                Ok(Routed::Org(path, org)) => org::write(params, path, org, ctx.reads).await,
            },
            Err(e) => e,
        },
        "Edit" => match parse::<file::EditParams>(name, input, file::EDIT_PARAMS) {
            Ok(params) => match routed(&params.file_path, ctx.org) {
                Err(e) => e,
                Ok(Routed::Workspace) if ctx.remote.is_some() => {
                    remote_tool(name, input, ctx).await
                }
                Ok(Routed::Workspace) => {
                    let each = (params.new_string.len() as u64)
                        .saturating_sub(params.old_string.len() as u64);
                    let all = params.replace_all == Some(true) && !params.old_string.is_empty();
                    let growth = if each > 0 && all {
                        let workspace = ctx.workspace.clone();
                        let (path, old) = (params.file_path.clone(), params.old_string.clone());
                        let count = offload(&ctx.cancel, move |_: &AtomicBool| {
                            occurrences(&workspace, &path, &old)
                        });
                        match count.await {
                            Ok(count) => each.saturating_mul(count),
                            Err(interrupted) => return interrupted,
                        }
                    } else {
                        each
                    };
                    if let Some(refusal) =
                        workspace_quota(ctx.org, ctx.workspace, growth, &ctx.cancel).await
                    {
                        return refusal;
                    }
                    with_ledger(ctx.workspace, ctx.reads, &ctx.cancel, move |ws, ledger| {
                        file::edit(params, ws, ledger)
                    })
                    .await
                }
                Ok(Routed::Org(path, org)) => org::edit(params, path, org, ctx.reads).await,
            },
            Err(e) => e,
        },
        "NotebookEdit" => notebook_edit(name, input, ctx).await,
        "Glob" | "Grep" if ctx.remote.is_some() => remote_search(name, input, ctx).await,
        "Glob" => match parse::<search::GlobParams>(name, input, search::GLOB_PARAMS) {
            Ok(params) => match scope(params.path.as_deref(), ctx.workspace, ctx.org).await {
                Ok(scope) => search::glob(params, scope, &ctx.cancel).await,
                Err(e) => e,
            },
            Err(e) => e,
        },
        "Grep" => match parse::<search::GrepParams>(name, input, search::GREP_PARAMS) {
            Ok(params) => match scope(params.path.as_deref(), ctx.workspace, ctx.org).await {
                Ok(scope) => search::grep(params, scope, &ctx.cancel).await,
                Err(e) => e,
            },
            Err(e) => e,
        },
        // Background commands live in the host's sandbox: started, read and killed there (the
        // host runs these same tools against its sandbox).
        "Bash" | "BashOutput" | "KillShell"
            if ctx.remote.is_some()
                && (name != "Bash"
                    || input.get("run_in_background") == Some(&Value::Bool(true))) =>
        {
            remote_tool(name, input, ctx).await
        }
        "Bash" => match parse(name, input, bash::PARAMS) {
            Ok(params) => bash::run(params, ctx).await,
            Err(e) => e,
        },
        "BashOutput" => match parse(name, input, background::OUTPUT_PARAMS) {
            Ok(params) => background::output(params, ctx.sandbox).await,
            Err(e) => e,
        },
        "KillShell" => match parse(name, input, background::KILL_PARAMS) {
            Ok(params) => background::kill(params, ctx.sandbox).await,
            Err(e) => e,
        },
        "TodoWrite" => match parse(name, input, todo::PARAMS) {
            Ok(params) => todo::run(params, ctx.events).await,
            Err(e) => e,
        },
        // The session's network comes with its sandbox handle, which it does not wake.
        "WebFetch" => match parse(name, input, webfetch::PARAMS) {
            Ok(params) => webfetch::run(params, ctx.sandbox.egress(), &ctx.cancel).await,
            Err(e) => e,
        },
        "WebSearch" => match parse(name, input, websearch::PARAMS) {
            Ok(params) => websearch::run(params, ctx.org, ctx.sandbox.egress(), &ctx.cancel).await,
            Err(e) => e,
        },
        name if is_external_name(name) => {
            match ctx.org.and_then(|o| o.mcp.as_ref().map(|m| (m, &o.org_id))) {
                Some((mcp, org)) => mcp.call(org, name, input, &ctx.cancel).await,
                None => ToolOutcome::error(format!(
                    "{name}: MCP tools are not available in this session"
                )),
            }
        }
        _ => ToolOutcome::error(format!(
            "Unknown tool \"{name}\". Available tools: {}",
            TOOL_NAMES.join(", ")
        )),
    }
}

/// `NotebookEdit`: a workspace notebook, edited here or on the session's sandbox host, under the
/// org's workspace quota as `Edit` is (the growth counted is the new source's size and a cell's
/// frame). The org's shared files are not notebooks: refused.
async fn notebook_edit(name: &str, input: &Value, ctx: ToolCtx<'_>) -> ToolOutcome {
    let params = match parse::<notebook::EditParams>(name, input, notebook::EDIT_PARAMS) {
        Ok(params) => params,
        Err(e) => return e,
    };
    match outboard_vfs::route(&params.notebook_path) {
        Err(e) => ToolOutcome::error(e.to_string()),
        Ok(Route::Org(path)) => ToolOutcome::error(format!(
            "{path} is a shared org file; NotebookEdit edits notebooks under /workspace"
        )),
        Ok(Route::Workspace(_)) if ctx.remote.is_some() => remote_tool(name, input, ctx).await,
        Ok(Route::Workspace(_)) => {
            /// A new cell's JSON around its source, about.
            const CELL_FRAME_BYTES: u64 = 256;
            let deletes = params.edit_mode.as_deref().map(str::trim) == Some("delete");
            let source = params.new_source.as_ref().map_or(0, |s| s.len() as u64);
            let growth = if deletes { 0 } else { source.saturating_add(CELL_FRAME_BYTES) };
            if let Some(refusal) =
                workspace_quota(ctx.org, ctx.workspace, growth, &ctx.cancel).await
            {
                return refusal;
            }
            with_ledger(ctx.workspace, ctx.reads, &ctx.cancel, move |ws, ledger| {
                notebook::edit(params, ws, ledger)
            })
            .await
        }
    }
}

/// A tool run on the session's sandbox host (its workspace files, its background commands).
async fn remote_tool(name: &str, input: &Value, ctx: ToolCtx<'_>) -> ToolOutcome {
    match ctx.remote {
        Some(remote) => remote.tool(name, input, ctx.reads, ctx.cancel.clone()).await,
        None => ToolOutcome::error(format!("{name}: this session has no sandbox host")),
    }
}

/// `Glob`/`Grep` of a session on a sandbox host: the workspace is searched there, the org's
/// files here (`/` searches both, the host's matches first).
async fn remote_search(name: &str, input: &Value, ctx: ToolCtx<'_>) -> ToolOutcome {
    let Some(remote) = ctx.remote else {
        return ToolOutcome::error(format!("{name}: this session has no sandbox host"));
    };
    let path = input.get("path").and_then(Value::as_str);
    let path = path.filter(|p| !p.trim().is_empty() && *p != "undefined" && *p != "null");
    let everything =
        path.is_some_and(|p| p.starts_with('/') && p.split('/').all(|c| c.is_empty() || c == "."));
    let org_only = match path {
        Some(p) if !everything => match routed(p, ctx.org) {
            Ok(Routed::Workspace) => false,
            Ok(Routed::Org(..)) => true,
            Err(e) => return e,
        },
        _ => false,
    };
    if org_only {
        let local = ToolCtx { remote: None, ..ctx };
        return Box::pin(run(name, input, local)).await;
    }
    if !everything || ctx.org.is_none() {
        let mut input = input.clone();
        if everything {
            if let Some(object) = input.as_object_mut() {
                object.remove("path");
            }
        }
        return remote.tool(name, &input, ctx.reads, ctx.cancel.clone()).await;
    }
    // `/`: the workspace there, then each org root here.
    let mut input = input.clone();
    if let Some(object) = input.as_object_mut() {
        object.remove("path");
    }
    let hosted = remote.tool(name, &input, ctx.reads, ctx.cancel.clone()).await;
    if hosted.is_error {
        return hosted;
    }
    let mut parts = vec![hosted.output];
    for root in outboard_vfs::ORG_ROOTS {
        if let Some(object) = input.as_object_mut() {
            object.insert("path".into(), Value::String(root.to_owned()));
        }
        let local = ToolCtx {
            workspace: ctx.workspace,
            sandbox: ctx.sandbox,
            on_output: &mut |_, _| {},
            cancel: ctx.cancel.clone(),
            default_timeout: ctx.default_timeout,
            reads: &mut *ctx.reads,
            org: ctx.org,
            events: None,
            remote: None,
            read_only: ctx.read_only,
        };
        let outcome = Box::pin(run(name, &input, local)).await;
        if !outcome.is_error {
            parts.push(outcome.output);
        }
    }
    let found: Vec<String> = parts.into_iter().filter(|p| !is_nothing_found(p)).collect();
    match found.is_empty() {
        true => ToolOutcome::ok(if name == "Glob" { "No files found" } else { "No matches found" }),
        false => ToolOutcome::ok(found.join("\n")),
    }
}

/// Whether a search's output says it found nothing.
fn is_nothing_found(output: &str) -> bool {
    output.starts_with("No files found") || output.starts_with("No matches found")
}

/// Runs a workspace file tool on the blocking pool (see [`offload`]) with a copy of the read
/// ledger, which replaces the session's when the tool finishes (an abandoned tool changes none).
async fn with_ledger(
    workspace: &Workspace,
    reads: &mut ReadLedger,
    cancel: &CancellationToken,
    tool: impl FnOnce(&Workspace, &mut ReadLedger) -> ToolOutcome + Send + 'static,
) -> ToolOutcome {
    let workspace = workspace.clone();
    let mut ledger = reads.clone();
    let work = move |_: &AtomicBool| {
        let outcome = tool(&workspace, &mut ledger);
        (outcome, ledger)
    };
    match offload(cancel, work).await {
        Ok((outcome, ledger)) => {
            *reads = ledger;
            outcome
        }
        Err(interrupted) => interrupted,
    }
}

/// The refusal of a workspace write that would add `growth` bytes past the org's
/// `workspace_bytes` quota (see [`outboard_org::quota`]); `None` to go ahead.
async fn workspace_quota(
    org: Option<&OrgCtx>,
    workspace: &Workspace,
    growth: u64,
    cancel: &CancellationToken,
) -> Option<ToolOutcome> {
    let org = org.filter(|_| workspace.metered())?;
    let root = workspace.root();
    outboard_org::quota::workspace_write_refusal(org.fs.store(), &org.org_id, root, growth, cancel)
        .await
        .map(ToolOutcome::error)
}

/// The size of the regular file at `path` now (0 when there is none), through the confined
/// open: never a path lookup of its own, never a blocking open.
fn current_size(workspace: &Workspace, path: &str) -> u64 {
    workspace
        .relative(path)
        .ok()
        .and_then(|rel| workspace.confined().open_read(&rel).ok())
        .filter(|o| o.file.metadata().map(|m| m.is_file()).unwrap_or(false))
        .map_or(0, |o| o.file.metadata().map_or(0, |m| m.len()))
}

/// How many times `old` occurs in the file at `path` now (at least 1), read through the
/// confined open and its hard limit.
fn occurrences(workspace: &Workspace, path: &str, old: &str) -> u64 {
    let count = workspace
        .relative(path)
        .ok()
        .and_then(|rel| workspace.confined().open_read(&rel).ok())
        .and_then(|o| {
            outboard_vfs::confined::read_capped(o.file, &o.stat, file::MAX_FILE_BYTES).ok()
        })
        .map_or(1, |bytes| String::from_utf8_lossy(&bytes).matches(old).count());
    (count as u64).max(1)
}

/// Where a file tool's path leads.
enum Routed<'a> {
    Workspace,
    Org(OrgPath, &'a OrgCtx),
}

fn routed<'a>(path: &str, org: Option<&'a OrgCtx>) -> Result<Routed<'a>, ToolOutcome> {
    match outboard_vfs::route(path) {
        Ok(Route::Workspace(_)) => Ok(Routed::Workspace),
        Ok(Route::Org(path)) => match org {
            Some(org) => Ok(Routed::Org(path, org)),
            None => Err(org::unavailable(&path)),
        },
        Err(e) => Err(ToolOutcome::error(e.to_string())),
    }
}

/// The org's projected roots as searchable trees (`/memory`, `/skills`, `/agents`), brought up
/// to date first.
async fn org_mounts(org: &OrgCtx) -> Result<Vec<Workspace>, ToolOutcome> {
    let failed = |e: String| ToolOutcome::error(format!("The org files cannot be searched: {e}"));
    let (dirs, _) = org.fs.project(&org.org_id).await.map_err(|e| failed(e.to_string()))?;
    dirs.mounts()
        .into_iter()
        .map(|(dir, prefix)| Workspace::mount(dir.to_path_buf(), prefix))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failed(e.to_string()))
}

/// What `Glob`/`Grep` search: the workspace by default, an org root's projection (brought up to
/// date first) for a path under `/memory`, `/skills` or `/agents`, all of them for `/`.
async fn scope(
    path: Option<&str>,
    workspace: &Workspace,
    org: Option<&OrgCtx>,
) -> Result<search::Scope, ToolOutcome> {
    let path = path.filter(|p| !p.trim().is_empty() && *p != "undefined" && *p != "null");
    let Some(path) = path else {
        return Ok(search::Scope::One(workspace.clone(), None));
    };
    if path.split('/').all(|c| c.is_empty() || c == ".") && path.starts_with('/') {
        let mut spaces = vec![workspace.clone()];
        if let Some(org) = org {
            spaces.extend(org_mounts(org).await?);
        }
        return Ok(search::Scope::All(spaces));
    }
    match routed(path, org)? {
        Routed::Workspace => Ok(search::Scope::One(workspace.clone(), Some(path.to_owned()))),
        Routed::Org(org_path, org) => {
            let roots = outboard_vfs::ORG_ROOTS.iter();
            let space = roots
                .zip(org_mounts(org).await?)
                .find_map(|(root, space)| (*root == org_path.root()).then_some(space))
                .ok_or_else(|| ToolOutcome::error(format!("{org_path} has no projection")))?;
            Ok(search::Scope::One(space, Some(org_path.to_string())))
        }
    }
}
