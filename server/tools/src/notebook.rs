//! Jupyter notebooks: `NotebookEdit` (Claude Code's tool: `notebook_path`, `cell_id`,
//! `new_source`, `cell_type`, `edit_mode` replace/insert/delete) and the cells `Read` shows of
//! an `.ipynb` ([`read_cells`], called by `file::read` once it has the file's bytes).
//!
//! Design choices: a notebook is edited as nbformat 4 JSON, never as text: one cell's source
//! is replaced, a cell inserted or deleted, and everything else — other cells, their outputs,
//! unknown fields, the metadata, the keys' order and the file's indentation — is written back
//! as it was ([`json`]). The file is read and written exactly as `Write` and `Edit` do it:
//! located beneath the workspace root's descriptor ([`outboard_vfs::confined`]), read through a
//! limit, and replaced atomically (a temp file, then `renameat`), under the same read-before-
//! write rule ([`ReadLedger`]): the notebook must have been `Read` and unchanged since. Every
//! check — the input, the path, the JSON, the cell — runs before the write, so a refused edit
//! leaves the file as it was.
//!
//! Replacing a code cell's source clears its outputs and sets its `execution_count` to null:
//! they came from the old code, and a notebook showing them under the new one would mislead
//! (Claude Code does the same; Jupyter keeps them until the cell runs again). Its metadata is
//! kept. A `cell_type` that changes a cell converts it: a code cell gains empty outputs, a
//! markdown cell loses them. A new cell of a notebook of nbformat 4.5 or later gets a fresh
//! 8-hex-digit id; older notebooks have no ids, and their cells are named `cell-N`
//! ([`model`]).

pub mod json;
pub mod model;
pub mod render;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

use crate::ledger::ReadLedger;
use crate::outcome::ToolOutcome;
use json::{Json, Object};
use model::{source_lines, Notebook, MAX_NOTEBOOK_BYTES};
use outboard_llm::ToolSpec;
use outboard_vfs::confined::{ConfinedError, Located};
use outboard_vfs::Workspace;

/// The tool's name.
pub const NOTEBOOK_EDIT: &str = "NotebookEdit";

pub const EDIT_PARAMS: &str = "{\"notebook_path\": string (required), \"new_source\": string \
     (required but for delete), \"cell_id\": string (required but for insert), \"cell_type\": \
     \"code\" | \"markdown\" (required for insert), \"edit_mode\": \"replace\" | \"insert\" | \
     \"delete\" (optional, default replace)}";

#[derive(Debug, Deserialize)]
pub struct EditParams {
    pub notebook_path: String,
    #[serde(default)]
    pub new_source: Option<String>,
    #[serde(default, deserialize_with = "cell_name")]
    pub cell_id: Option<String>,
    #[serde(default)]
    pub cell_type: Option<String>,
    #[serde(default)]
    pub edit_mode: Option<String>,
}

/// A `cell_id`: a string, or a number a model sends for an index.
fn cell_name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64().map(|n| n.to_string())),
        Some(v) => Err(serde::de::Error::custom(format!("expected a cell id string, got {v}"))),
    }
}

/// What an edit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Replace,
    Insert,
    Delete,
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: NOTEBOOK_EDIT.into(),
        description: "Replaces, inserts, or deletes a single cell in a Jupyter notebook (.ipynb \
file).\n\n\
Usage:\n\
- You must use the Read tool on the notebook in this conversation before editing — this tool \
will fail otherwise.\n\
- notebook_path must be an absolute path under /workspace (e.g. /workspace/analysis.ipynb) or a \
path relative to /workspace.\n\
- cell_id is the id attribute shown in the Read tool's <cell id=\"...\"> output. It is required \
for replace and delete. Notebooks older than nbformat 4.5 have no cell ids: their cells are shown \
as cell-0, cell-1, … (the 0-based index), and those names work here.\n\
- edit_mode defaults to replace. Use insert to add a new cell after the cell with the given \
cell_id (or at the beginning of the notebook if cell_id is omitted) — cell_type is required when \
inserting. Use delete to remove the cell.\n\
- Replacing the source of a code cell clears its outputs and execution count (they came from the \
old code); its metadata is kept."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "notebook_path": {"type": "string", "description": "The absolute path to the Jupyter notebook file to edit (under /workspace)"},
                "cell_id": {"type": "string", "description": "The ID of the cell to edit. When inserting a new cell, the new cell will be inserted after the cell with this ID, or at the beginning if not specified."},
                "new_source": {"type": "string", "description": "The new source for the cell"},
                "cell_type": {"type": "string", "enum": ["code", "markdown"], "description": "The type of the cell (code or markdown). If not specified, it defaults to the current cell type. If using edit_mode=insert, this is required."},
                "edit_mode": {"type": "string", "enum": ["replace", "insert", "delete"], "description": "The type of edit to make (replace, insert, delete). Defaults to replace."}
            },
            "required": ["notebook_path", "new_source"],
            "additionalProperties": false
        }),
    }
}

/// Whether `path` names a notebook (by its extension, as Jupyter knows one).
pub fn is_notebook(path: &str) -> bool {
    path.rsplit('/').next().is_some_and(|name| {
        name.len() > ".ipynb".len() && name.to_ascii_lowercase().ends_with(".ipynb")
    })
}

/// `Read`'s answer for the file `shown` holding `bytes` when it is a notebook: its cells from
/// the 1-based cell `offset`, at most `limit` of them. `None` when it is not a notebook or
/// does not parse as nbformat 4: `Read` then shows its text, which is what a broken notebook
/// needs to be fixed.
pub fn read_cells(
    shown: &str,
    bytes: &[u8],
    offset: Option<u64>,
    limit: Option<u64>,
) -> Option<ToolOutcome> {
    if !is_notebook(shown) {
        return None;
    }
    let notebook = Notebook::parse(bytes).ok()?;
    let mut images = Vec::new();
    let text = render::render(&notebook, shown, offset, limit, &mut images);
    Some(ToolOutcome { output: text, is_error: false, attachments: images })
}

/// `NotebookEdit` on a workspace notebook. Blocking (bounded work), like `file::edit`.
pub fn edit(params: EditParams, workspace: &Workspace, reads: &mut ReadLedger) -> ToolOutcome {
    let checked = check_input(&params);
    let (mode, cell_type) = match checked {
        Ok(checked) => checked,
        Err(msg) => return ToolOutcome::error(format!("Invalid input for NotebookEdit: {msg}")),
    };
    let (at, shown, bytes) = match load(workspace, &params.notebook_path) {
        Ok(loaded) => loaded,
        Err(msg) => return ToolOutcome::error(msg),
    };
    if let Err(msg) = reads.check_unchanged(&at.host, &bytes) {
        return ToolOutcome::error(format!("{msg} ({shown})"));
    }
    let mut notebook = match Notebook::parse(&bytes) {
        Ok(notebook) => notebook,
        Err(why) => return ToolOutcome::error(format!("The notebook {shown} {why}")),
    };
    let done = match apply(&mut notebook, mode, &params, cell_type, &shown) {
        Ok(done) => done,
        Err(msg) => return ToolOutcome::error(format!("{msg} ({shown})")),
    };
    let content = notebook.to_bytes();
    if content.len() as u64 > MAX_NOTEBOOK_BYTES {
        return ToolOutcome::error(format!(
            "Not edited: {shown} would be {} bytes, over the {MAX_NOTEBOOK_BYTES}-byte limit for \
             notebooks. Clear large outputs first (e.g. `jupyter nbconvert --clear-output \
             --inplace` via Bash) or split the notebook.",
            content.len()
        ));
    }
    if let Err(e) = at.write_atomic(&content) {
        return ToolOutcome::error(format!("Could not write {shown}: {e}"));
    }
    reads.record(&at.host, &content);
    ToolOutcome::ok(format!("{done} The notebook has {} cells.", notebook.cells().len()))
}

/// The edit mode and the new cell type, or what is wrong with the input.
fn check_input(params: &EditParams) -> Result<(Mode, Option<&'static str>), String> {
    if !is_notebook(&params.notebook_path) {
        return Err(format!(
            "{} is not a Jupyter notebook (.ipynb file); edit other files with Edit",
            params.notebook_path
        ));
    }
    let mode = match params.edit_mode.as_deref().map(str::trim) {
        None | Some("") => Mode::Replace,
        Some(m) if m.eq_ignore_ascii_case("replace") => Mode::Replace,
        Some(m) if m.eq_ignore_ascii_case("insert") => Mode::Insert,
        Some(m) if m.eq_ignore_ascii_case("delete") => Mode::Delete,
        Some(m) => return Err(format!("edit_mode {m:?} is not one of replace, insert, delete")),
    };
    let cell_type = match params.cell_type.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(t) if t.eq_ignore_ascii_case("code") => Some("code"),
        Some(t) if t.eq_ignore_ascii_case("markdown") => Some("markdown"),
        Some(t) => return Err(format!("cell_type {t:?} is not one of code, markdown")),
    };
    match mode {
        Mode::Insert if cell_type.is_none() => {
            return Err("cell_type (code or markdown) is required when inserting a cell".into())
        }
        Mode::Insert | Mode::Replace if params.new_source.is_none() => {
            return Err("new_source is required to replace or insert a cell".into())
        }
        Mode::Replace | Mode::Delete if params.cell_id.is_none() => {
            return Err(format!(
                "cell_id is required to {} a cell; Read the notebook to see its cells' ids",
                if mode == Mode::Replace { "replace" } else { "delete" }
            ))
        }
        _ => {}
    }
    Ok((mode, cell_type))
}

/// Applies the edit to `notebook` (the file `shown`); what was done, for the answer.
fn apply(
    notebook: &mut Notebook,
    mode: Mode,
    params: &EditParams,
    cell_type: Option<&'static str>,
    shown: &str,
) -> Result<String, String> {
    let target = match params.cell_id.as_deref() {
        Some(id) => Some(notebook.find(id).ok_or_else(|| {
            format!(
                "Cell {id:?} was not found in the notebook; {}. Read the notebook again to see \
                 its cells",
                notebook.names(20)
            )
        })?),
        None => None,
    };
    let source = params.new_source.clone().unwrap_or_default();
    let has_ids = notebook.has_ids();
    match (mode, target) {
        (Mode::Replace, Some(index)) => {
            let name = notebook.cell_id(index);
            let Some(Json::Object(cell)) = notebook.cells_mut().get_mut(index) else {
                return Err(format!("Cell {name} is not an object"));
            };
            let kind = replace(cell, &source, cell_type);
            let cleared = match kind.as_str() {
                "code" => " Its outputs and execution count were cleared.",
                _ => "",
            };
            Ok(format!("Updated {kind} cell {name} of {shown}.{cleared}"))
        }
        (Mode::Insert, after) => {
            let at = after.map_or(0, |i| i + 1);
            let kind = cell_type.unwrap_or("code");
            let lines = notebook
                .cells()
                .first()
                .and_then(|c| c.get("source"))
                .is_none_or(|s| matches!(s, Json::Array(_)));
            let id = has_ids.then(|| notebook.new_id());
            let cell = new_cell(kind, &source, id, lines);
            notebook.cells_mut().insert(at, cell);
            let place = match after {
                Some(i) => format!("after cell {}", notebook.cell_id(i)),
                None => "at the start".to_owned(),
            };
            Ok(format!(
                "Inserted a {kind} cell with id {} {place} in {shown}.",
                notebook.cell_id(at)
            ))
        }
        (Mode::Delete, Some(index)) => {
            let name = notebook.cell_id(index);
            notebook.cells_mut().remove(index);
            let renumbered = match has_ids {
                true => "",
                false => " The cells after it are now numbered one lower.",
            };
            Ok(format!("Deleted cell {name} from {shown}.{renumbered}"))
        }
        (Mode::Replace | Mode::Delete, None) => Err("cell_id is required".into()),
    }
}

/// Replaces `cell`'s source with `source` (in the spelling the cell had: a string or a list of
/// lines) and converts it to `cell_type` if given; its type after.
fn replace(cell: &mut Object, source: &str, cell_type: Option<&'static str>) -> String {
    let as_text = matches!(cell.get("source"), Some(Json::String(_)));
    cell.set(
        "source",
        if as_text { Json::String(source.to_owned()) } else { source_lines(source) },
    );
    let kind = match cell_type {
        Some(kind) => {
            cell.set("cell_type", Json::String(kind.to_owned()));
            kind.to_owned()
        }
        None => cell.get("cell_type").and_then(Json::as_str).unwrap_or("code").to_owned(),
    };
    match kind.as_str() {
        "code" => {
            cell.set_sorted("execution_count", Json::Null);
            cell.set_sorted("outputs", Json::Array(Vec::new()));
            // Only markdown and raw cells may have attachments.
            cell.remove("attachments");
        }
        _ => {
            cell.remove("execution_count");
            cell.remove("outputs");
        }
    }
    kind
}

/// A new cell as Jupyter writes one: keys sorted, empty metadata, a code cell with no outputs.
fn new_cell(kind: &str, source: &str, id: Option<String>, lines: bool) -> Json {
    let mut cell = Object::default();
    cell.set("cell_type", Json::String(kind.to_owned()));
    if kind == "code" {
        cell.set("execution_count", Json::Null);
    }
    if let Some(id) = id {
        cell.set("id", Json::String(id));
    }
    cell.set("metadata", Json::Object(Object::default()));
    if kind == "code" {
        cell.set("outputs", Json::Array(Vec::new()));
    }
    cell.set("source", if lines { source_lines(source) } else { Json::String(source.to_owned()) });
    Json::Object(cell)
}

/// Locates the notebook beneath the workspace root and reads it through
/// [`MAX_NOTEBOOK_BYTES`]: where it is, its `/workspace/…` name, its bytes; or why not.
fn load(workspace: &Workspace, path: &str) -> Result<(Located, String, Vec<u8>), String> {
    let relative = workspace.relative(path).map_err(|e| e.to_string())?;
    let named = || {
        workspace
            .resolve(path)
            .map_or_else(|_| workspace.display(&relative), |host| workspace.model_path(&host))
    };
    let missing = |shown: String| {
        format!(
            "Notebook file does not exist: {shown}. NotebookEdit edits existing notebooks; \
             create one with Write (nbformat 4 JSON) or find it with Glob."
        )
    };
    let at = match workspace.confined().locate(&relative, false) {
        Ok(at) => at,
        Err(ConfinedError::NotFound) => return Err(missing(named())),
        Err(e @ (ConfinedError::Escapes | ConfinedError::DanglingLink)) => {
            return Err(workspace.refusal(&relative, e).to_string())
        }
        Err(e) => return Err(e.describe(&named())),
    };
    let shown = workspace.model_path(&at.host);
    match at.read(MAX_NOTEBOOK_BYTES) {
        Ok(Some(bytes)) => Ok((at, shown, bytes)),
        Ok(None) => Err(missing(shown)),
        Err(e) => Err(e.describe(&shown)),
    }
}
