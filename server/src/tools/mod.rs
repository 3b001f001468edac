//! The model's tools, with Claude Code's names and parameters: `Read`, `Write`, `Edit`, `Glob`,
//! `Grep` act on the session's workspace through [`outboard_vfs`]; `Bash` runs in the session's
//! [`outboard_sandbox::Sandbox`], in the foreground or, with `run_in_background`, as a job that
//! `BashOutput` reads and `KillShell` stops ([`background`]); `TodoWrite` keeps the model's todo
//! list as session state ([`todo`]); `WebFetch` fetches a page in the server itself, under the
//! session's network policy and audit ([`webfetch`]).
//!
//! CONTRACT (used by `agent`): [`specs`], [`run`], [`ToolCtx`], [`ToolOutcome`], [`ReadLedger`].
//! A tool never panics and never returns a Rust error: every failure, including invalid input
//! from the model, is a [`ToolOutcome`] with `is_error` set and a message that tells the model
//! what to do.
//!
//! File work (workspace `Read`/`Write`/`Edit`, `Glob`, `Grep`) runs on the blocking pool through
//! [`offload`]: every such call is bounded (non-blocking opens, capped reads, walks with an entry
//! cap that check a cancel flag), and the tool's future answers an interrupt at once even while
//! the blocking thread finishes, so neither a runtime thread nor a turn can be held by the
//! filesystem.
//!
//! Design choice: the surface copies Claude Code's (names, parameters, output formats such as
//! `cat -n` lines and the read-before-write rule) because that is what models are trained on;
//! a model that calls these tools as it would in Claude Code gets the answers it expects. Each
//! tool deserialises its input into a typed struct, so a malformed call is answered with the
//! exact field at fault and the expected parameters rather than with a guess.

pub mod background;
mod bash;
pub mod bashguard;
mod file;
mod ledger;
mod org;
mod search;
pub mod todo;
mod webfetch;

#[cfg(test)]
pub(crate) mod confinement;
#[cfg(test)]
mod race_tests;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use outboard_shared::OutputStream;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use outboard_llm::ToolSpec;
use outboard_sandbox::Sandbox;
use outboard_vfs::{OrgPath, Route, Workspace};

pub use file::MAX_FILE_BYTES;
pub use ledger::{OrgStamp, ReadLedger, ReadStamp};
pub use org::{changed_since_read, OrgCtx};

/// Where a tool records a durable event of the session (`TodoWrite`'s list): the turn's
/// emitter, behind a small trait so `tools` never imports `agent`.
pub trait ToolEvents: Send + Sync {
    /// Commits `kind` to the session's log and sends it to everyone attached; the error says why
    /// it could not be.
    fn durable(
        &self,
        kind: outboard_shared::EventKind,
    ) -> futures_util::future::BoxFuture<'_, Result<(), String>>;
}

/// A session's workspace and sandbox on a sandbox host ([`crate::remote`]): the file tools on
/// `/workspace`, `Bash` and the background commands' tools run there, checked there (confinement where the files
/// are); the read ledger stays with the session and travels with each call. A small trait so
/// `tools` never imports `remote`. Errors are whole messages for the model (they name the host
/// and say what to do).
pub trait HostedWorkspace: Send + Sync {
    /// The host's name on this harness.
    fn host(&self) -> &str;
    /// Runs the workspace file tool `name` there with the session's ledger `reads`.
    fn tool<'a>(
        &'a self,
        name: &'a str,
        input: &'a Value,
        reads: &'a mut ReadLedger,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, ToolOutcome>;
    /// Runs a foreground command in the sandbox there, its output streamed to `on_output`.
    fn exec<'a>(
        &'a self,
        command: &'a str,
        timeout: Duration,
        on_output: &'a mut (dyn FnMut(OutputStream, &str) + Send),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<outboard_sandbox::ExecResult, String>>;
    /// The `target_before` digest of a workspace file there (`None`: it cannot be read).
    fn digest<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Option<String>>;
    /// The ledger entries of `paths` as they are there now.
    fn stamps(&self, paths: Vec<String>) -> BoxFuture<'_, Result<ReadLedger, String>>;
}

impl std::fmt::Debug for dyn HostedWorkspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedWorkspace").field("host", &self.host()).finish_non_exhaustive()
    }
}

/// What a tool call may use.
pub struct ToolCtx<'a> {
    /// The session's workspace (`/workspace`).
    pub workspace: &'a Workspace,
    /// The session's sandbox, for `Bash`.
    pub sandbox: &'a Sandbox,
    /// Receives output as it is produced (Bash's stdout/stderr).
    pub on_output: &'a mut (dyn FnMut(OutputStream, &str) + Send),
    /// Cancelled when the turn is interrupted; a running command is killed.
    pub cancel: CancellationToken,
    /// Bash timeout when the model gives none.
    pub default_timeout: Duration,
    /// The files this session has Read and their state then; `Write` and `Edit` of an existing
    /// file require an entry that still matches. One ledger per session, kept across turns.
    pub reads: &'a mut ReadLedger,
    /// The org's shared files (`/memory`, `/skills`); `None` where there is no org (unit tests).
    pub org: Option<&'a OrgCtx>,
    /// The session's log, for tools whose effect is an event (`TodoWrite`); `None` in unit tests.
    pub events: Option<&'a dyn ToolEvents>,
    /// Where `/workspace` and `Bash` really are when the session lives on a sandbox host;
    /// `None`: here (`workspace` and `sandbox`).
    pub remote: Option<&'a dyn HostedWorkspace>,
}

/// The result of a tool call, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// The text for the model.
    pub output: String,
    /// The call failed.
    pub is_error: bool,
}

impl ToolOutcome {
    /// A successful result.
    pub fn ok(output: impl Into<String>) -> Self {
        ToolOutcome { output: output.into(), is_error: false }
    }

    /// A failed result whose text tells the model what to do.
    pub fn error(output: impl Into<String>) -> Self {
        ToolOutcome { output: output.into(), is_error: true }
    }
}

/// The names of the tools [`run`] knows, in the order [`specs`] lists them.
pub const TOOL_NAMES: &[&str] = &[
    "Bash",
    "BashOutput",
    "KillShell",
    "Glob",
    "Grep",
    "Read",
    "Edit",
    "Write",
    "TodoWrite",
    "WebFetch",
];

/// The tools a subagent (`Task`) may be given: all but `Task` itself (a subagent does not
/// start subagents, so the tree stays one level deep) and `TodoWrite` (the todo list is the
/// session's, kept by its main loop). An org agent's `tools` list picks among these.
pub const SUBAGENT_TOOLS: &[&str] =
    &["Bash", "BashOutput", "KillShell", "Glob", "Grep", "Read", "Edit", "Write", "WebFetch"];

/// The tools offered to the model.
pub fn specs() -> Vec<ToolSpec> {
    vec![
        bash::spec(),
        background::output_spec(),
        background::kill_spec(),
        search::glob_spec(),
        search::grep_spec(),
        file::read_spec(),
        file::edit_spec(),
        file::write_spec(),
        todo::spec(),
        webfetch::spec(),
    ]
}

/// Whether a tool only reads (safe to re-run after a restart; a `WebFetch` is one GET).
pub fn is_read_only(name: &str) -> bool {
    matches!(name, "Read" | "Glob" | "Grep" | "WebFetch")
}

/// Whether calls of this tool may run at the same time as the other such calls of one
/// assistant message: they change nothing the others see (a `BashOutput` reads a job's new
/// output, which no other call reads).
pub fn runs_concurrently(name: &str) -> bool {
    is_read_only(name) || name == "BashOutput"
}

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
        name if crate::mcp::is_mcp_name(name) => {
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

/// Sets its flag when dropped: the blocking work learns that nobody waits for it any more.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs bounded blocking file work on the blocking pool. The work gets a flag that is set when
/// the turn is interrupted or this future is dropped (walks check it between entries); an
/// interrupt answers at once with "Interrupted by the user", as `Bash` does, even if the
/// blocking thread is still finishing its current step.
pub(crate) async fn offload<T: Send + 'static>(
    cancel: &CancellationToken,
    work: impl FnOnce(&AtomicBool) -> T + Send + 'static,
) -> Result<T, ToolOutcome> {
    let flag = Arc::new(AtomicBool::new(false));
    let _guard = CancelOnDrop(flag.clone());
    let handle = tokio::task::spawn_blocking(move || work(&flag));
    tokio::select! {
        joined = handle => joined
            .map_err(|e| ToolOutcome::error(format!("The tool failed unexpectedly: {e}"))),
        _ = cancel.cancelled() => Err(ToolOutcome::error("Interrupted by the user")),
    }
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

/// Deserialises a tool's input, or answers with what is wrong and what `expected` looks like.
pub(crate) fn parse<T: DeserializeOwned>(
    tool: &str,
    input: &Value,
    expected: &str,
) -> Result<T, ToolOutcome> {
    match input {
        Value::String(raw) => {
            let head: String = raw.chars().take(200).collect();
            let more = if raw.chars().count() > 200 { "…" } else { "" };
            Err(ToolOutcome::error(format!(
                "The tool arguments were not valid JSON: {head}{more}; send a JSON object"
            )))
        }
        Value::Object(_) => T::deserialize(input).map_err(|e| {
            ToolOutcome::error(format!(
                "Invalid input for {tool}: {e}. Expected parameters: {expected}"
            ))
        }),
        other => Err(ToolOutcome::error(format!(
            "Invalid input for {tool}: expected a JSON object, got {}. Expected parameters: \
             {expected}",
            json_kind(other)
        ))),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Serde helpers for lenient numbers: models send `10`, `10.0` or `"10"` for a count.
mod lenient {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    fn to_count(value: &Value) -> Option<u64> {
        match value {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64().filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 1e15).map(|f| f as u64)
            }),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// An optional non-negative integer.
    pub fn opt_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        match Option::<Value>::deserialize(d)? {
            None | Some(Value::Null) => Ok(None),
            Some(v) => to_count(&v).map(Some).ok_or_else(|| {
                serde::de::Error::custom(format!("expected a non-negative integer, got {v}"))
            }),
        }
    }

    /// An optional boolean, also accepting `"true"`/`"false"`.
    pub fn opt_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
        match Option::<Value>::deserialize(d)? {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(Value::String(s)) if s == "true" => Ok(Some(true)),
            Some(Value::String(s)) if s == "false" => Ok(Some(false)),
            Some(v) => Err(serde::de::Error::custom(format!("expected true or false, got {v}"))),
        }
    }
}
