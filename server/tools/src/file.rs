//! `Read`, `Write` and `Edit` on workspace files.
//!
//! Design choices: every access goes through [`outboard_vfs::confined`]: the path is located
//! beneath the workspace root's descriptor (confinement, symlinks inside followed), the file is
//! opened without blocking and checked on its descriptor (a regular file, at most
//! [`MAX_FILE_BYTES`], read through that limit), and shown back as `/workspace/…`. Writes are
//! atomic — a temp file in the same directory's descriptor, then a `renameat` — so a crash or a
//! concurrent reader never sees half a file, and the file's permissions are kept. `Write`/`Edit`
//! of an existing file obey the [`ReadLedger`] rule. These functions block (bounded work); the
//! caller runs them on the blocking pool and stops waiting on an interrupt (`tools::offload`).

use serde::Deserialize;
use serde_json::json;

use crate::input::lenient;
use crate::ledger::ReadLedger;
use crate::outcome::ToolOutcome;
use outboard_llm::ToolSpec;
use outboard_vfs::confined::{ConfinedError, Located};
use outboard_vfs::Workspace;

/// Lines `Read` returns when the model gives no limit.
pub const DEFAULT_READ_LINES: usize = 2000;
/// Characters kept of one line; the rest is cut.
pub const MAX_LINE_CHARS: usize = 2000;
/// Bytes of text one `Read` returns at most; past it the answer says which offset to continue at.
pub const MAX_READ_OUTPUT_BYTES: usize = 256 * 1024;
/// Largest file `Read`/`Edit` load.
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Lines of context around an edit in `Edit`'s answer.
const SNIPPET_CONTEXT: usize = 4;

pub const READ_PARAMS: &str =
    "{\"file_path\": string (required), \"offset\": integer (optional, 1-based line), \
     \"limit\": integer (optional, number of lines), \"pages\": string (optional, a PDF's pages: \"3\", \"1-5\")}";
pub const WRITE_PARAMS: &str = "{\"file_path\": string (required), \"content\": string (required)}";
pub const EDIT_PARAMS: &str =
    "{\"file_path\": string (required), \"old_string\": string (required), \"new_string\": \
     string (required), \"replace_all\": boolean (optional, default false)}";

#[derive(Debug, Deserialize)]
pub struct ReadParams {
    pub file_path: String,
    #[serde(default, deserialize_with = "lenient::opt_count")]
    pub offset: Option<u64>,
    #[serde(default, deserialize_with = "lenient::opt_count")]
    pub limit: Option<u64>,
    /// A PDF's pages (`"3"`, `"1-5"`).
    #[serde(default, deserialize_with = "lenient::opt_string")]
    pub pages: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct WriteParams {
    pub file_path: String,
    pub content: String,
}

#[derive(Debug, Deserialize)]
pub struct EditParams {
    pub file_path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default, deserialize_with = "lenient::opt_bool")]
    pub replace_all: Option<bool>,
}

pub fn read_spec() -> ToolSpec {
    ToolSpec {
        name: "Read".into(),
        description: "Reads a file from the local filesystem. You can access any file in the \
workspace directly by using this tool.\n\
Assume this tool is able to read all files in the workspace. If the User provides a path to a \
file assume that path is valid. It is okay to read a file that does not exist; an error will be \
returned.\n\n\
Usage:\n\
- The file_path parameter must be an absolute path under /workspace (e.g. /workspace/src/main.rs) \
or a path relative to /workspace, or a shared org file under /memory, /skills or /agents (e.g. \
/memory/MEMORY.md, /skills/deploy/SKILL.md, /agents/reviewer.md)\n\
- By default, it reads up to 2000 lines starting from the beginning of the file\n\
- You can optionally specify a line offset and limit (especially handy for long files), but it's \
recommended to read the whole file by not providing these parameters\n\
- Any lines longer than 2000 characters will be truncated\n\
- Results are returned using cat -n format, with line numbers starting at 1\n\
- This tool can only read files, not directories. To list a directory, use Glob or `ls` via \
the Bash tool.\n\
- You have the capability to call multiple tools in a single response. It is always better to \
speculatively read multiple files as a batch that are potentially useful.\n\
- If you read a file that exists but has empty contents you will receive a warning in place of \
file contents.\n\
- This tool allows you to read images (PNG, JPG, GIF, WebP). When reading an image file the \
contents are presented visually to you. Large images are scaled down.\n\
- This tool can read PDF files (.pdf). For large PDFs (more than 10 pages), you MUST provide the \
pages parameter to read specific page ranges (e.g., pages: \"1-5\"). Maximum 20 pages per \
request.\n\
- Jupyter notebooks (.ipynb) are shown as their cells with their outputs."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "The absolute path to the file to read (under /workspace, /memory, /skills or /agents)"},
                "offset": {"type": "number", "description": "The line number to start reading from. Only provide if the file is too large to read at once"},
                "limit": {"type": "number", "description": "The number of lines to read. Only provide if the file is too large to read at once."},
                "pages": {"type": "string", "description": "Page range for PDF files (e.g., \"1-5\", \"3\", \"10-20\"). Only applicable to PDF files. Maximum 20 pages per request."}
            },
            "required": ["file_path"],
            "additionalProperties": false
        }),
    }
}

pub fn write_spec() -> ToolSpec {
    ToolSpec {
        name: "Write".into(),
        description: "Writes a file to the local filesystem.\n\n\
Usage:\n\
- This tool will overwrite the existing file if there is one at the provided path.\n\
- If this is an existing file, you MUST use the Read tool first to read the file's contents. \
This tool will fail if you did not read the file first.\n\
- ALWAYS prefer editing existing files in the codebase. NEVER write new files unless explicitly \
required.\n\
- NEVER proactively create documentation files (*.md) or README files. Only create \
documentation files if explicitly requested by the User.\n\
- Parent directories are created as needed.\n\
- Files under /memory, /skills and /agents are shared with your whole org and versioned: a Write of one \
that someone changed since you read it is refused; Read it again and redo your change."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "The absolute path to the file to write (under /workspace, /memory, /skills or /agents; must be absolute, not relative)"},
                "content": {"type": "string", "description": "The content to write to the file"}
            },
            "required": ["file_path", "content"],
            "additionalProperties": false
        }),
    }
}

pub fn edit_spec() -> ToolSpec {
    ToolSpec {
        name: "Edit".into(),
        description: "Performs exact string replacements in files.\n\n\
Usage:\n\
- You must use your `Read` tool at least once in the conversation before editing. This tool \
will error if you attempt an edit without reading the file.\n\
- When editing text from Read tool output, ensure you preserve the exact indentation (tabs/spaces) \
as it appears AFTER the line number prefix. The line number prefix format is: spaces + line \
number + tab. Everything after that tab is the actual file content to match. Never include any \
part of the line number prefix in the old_string or new_string.\n\
- ALWAYS prefer editing existing files in the codebase. NEVER write new files unless explicitly \
required.\n\
- The edit will FAIL if `old_string` is not unique in the file. Either provide a larger string \
with more surrounding context to make it unique or use `replace_all` to change every instance of \
`old_string`.\n\
- Use `replace_all` for replacing and renaming strings across the file. This parameter is \
useful if you want to rename a variable for instance.\n\
- On shared files (/memory, /skills, /agents) the replacement is applied to the current version, so it \
merges with teammates' concurrent edits of other parts."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "The absolute path to the file to modify (under /workspace, /memory, /skills or /agents)"},
                "old_string": {"type": "string", "description": "The text to replace"},
                "new_string": {"type": "string", "description": "The text to replace it with (must be different from old_string)"},
                "replace_all": {"type": "boolean", "default": false, "description": "Replace all occurences of old_string (default false)"}
            },
            "required": ["file_path", "old_string", "new_string"],
            "additionalProperties": false
        }),
    }
}

/// A workspace file located beneath the root, with its content if it exists.
struct Loaded {
    /// Where it is (`None`: a parent directory is missing, so it does not exist either).
    at: Option<Located>,
    /// The model's name for it.
    shown: String,
    /// Its content (`None`: absent).
    bytes: Option<Vec<u8>>,
}

/// Locates and loads a regular file, or explains why not. With `create_parents` (a write),
/// missing parent directories are made.
fn load(workspace: &Workspace, file_path: &str, create_parents: bool) -> Result<Loaded, String> {
    let relative = workspace.relative(file_path).map_err(|e| e.to_string())?;
    // The name for messages before anything is open: where the path leads now, as far as it
    // exists (never opened).
    let named = || {
        workspace
            .resolve(file_path)
            .map_or_else(|_| workspace.display(&relative), |host| workspace.model_path(&host))
    };
    let root = workspace.confined();
    let at = match root.locate(&relative, false) {
        Ok(at) => at,
        Err(ConfinedError::NotFound) if create_parents => match root.locate(&relative, true) {
            Ok(at) => at,
            Err(e) => return Err(workspace.refusal(&relative, e).to_string()),
        },
        Err(ConfinedError::NotFound) => {
            return Ok(Loaded { at: None, shown: named(), bytes: None })
        }
        Err(e @ (ConfinedError::Escapes | ConfinedError::DanglingLink)) => {
            return Err(workspace.refusal(&relative, e).to_string())
        }
        Err(e) => return Err(e.describe(&named())),
    };
    let shown = workspace.model_path(&at.host);
    let bytes = at.read(MAX_FILE_BYTES).map_err(|e| e.describe(&shown))?;
    Ok(Loaded { at: Some(at), shown, bytes })
}

/// `{:>6}\t{line}` with the line cut at [`MAX_LINE_CHARS`].
fn numbered(out: &mut String, number: usize, line: &str) {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let cut = match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((i, _)) => &line[..i],
        None => line,
    };
    out.push_str(&format!("{number:>6}\t{cut}\n"));
}

pub fn read(params: ReadParams, workspace: &Workspace, reads: &mut ReadLedger) -> ToolOutcome {
    let Loaded { at, shown, bytes } = match load(workspace, &params.file_path, false) {
        Ok(loaded) => loaded,
        Err(msg) => return ToolOutcome::error(msg),
    };
    let (Some(at), Some(bytes)) = (at, bytes) else {
        return ToolOutcome::error(format!(
            "File does not exist: {shown}. Use Glob to find files, or Write to create it."
        ));
    };
    if let Some(outcome) = crate::media::read(&shown, &bytes, params.pages.as_deref()) {
        reads.record(&at.host, &bytes);
        return outcome;
    }
    if bytes.contains(&0) {
        return ToolOutcome::error(format!(
            "{shown} is a binary file (it contains NUL bytes) and cannot be shown as text. \
             Inspect it with Bash (e.g. `file`, `xxd | head`)."
        ));
    }
    reads.record(&at.host, &bytes);
    if let Some(cells) = crate::notebook::read_cells(&shown, &bytes, params.offset, params.limit) {
        return cells;
    }
    render(&bytes, params.offset, params.limit)
}

/// A file's text as `Read` answers it: `cat -n` lines from `offset`, at most `limit` of them.
pub fn render(bytes: &[u8], offset: Option<u64>, limit: Option<u64>) -> ToolOutcome {
    if bytes.is_empty() {
        return ToolOutcome::ok(
            "<system-reminder>Warning: the file exists but the contents are empty.</system-reminder>",
        );
    }
    let text = String::from_utf8_lossy(bytes);
    let body = text.strip_suffix('\n').unwrap_or(&text);
    let lines: Vec<&str> = body.split('\n').collect();
    let start = offset.map_or(1, |o| o.max(1) as usize);
    let limit = limit.map_or(DEFAULT_READ_LINES, |l| l as usize);
    if start > lines.len() {
        return ToolOutcome::ok(format!(
            "<system-reminder>Warning: the file exists but is shorter than the provided offset \
             ({start}). The file has {} lines.</system-reminder>",
            lines.len()
        ));
    }
    let mut out = String::new();
    let mut next = start;
    for (i, line) in lines.iter().enumerate().skip(start - 1).take(limit) {
        if out.len() > MAX_READ_OUTPUT_BYTES {
            break;
        }
        numbered(&mut out, i + 1, line);
        next = i + 2;
    }
    if next <= lines.len() {
        out.push_str(&format!(
            "\n(Showing lines {start}-{} of {}. Read with offset {next} to continue.)\n",
            next - 1,
            lines.len()
        ));
    }
    ToolOutcome::ok(out)
}

pub fn write(params: WriteParams, workspace: &Workspace, reads: &mut ReadLedger) -> ToolOutcome {
    let Loaded { at, shown, bytes: existing } = match load(workspace, &params.file_path, true) {
        Ok(loaded) => loaded,
        Err(msg) => return ToolOutcome::error(msg),
    };
    let Some(at) = at else {
        return ToolOutcome::error(format!("Could not write {shown}: its directory is missing"));
    };
    if let Some(current) = &existing {
        if let Err(msg) = reads.check_unchanged(&at.host, current) {
            return ToolOutcome::error(format!("{msg} ({shown})"));
        }
    }
    if let Err(e) = at.write_atomic(params.content.as_bytes()) {
        return ToolOutcome::error(format!("Could not write {shown}: {e}"));
    }
    reads.record(&at.host, params.content.as_bytes());
    if existing.is_some() {
        ToolOutcome::ok(format!("The file {shown} has been updated."))
    } else {
        ToolOutcome::ok(format!("File created successfully at: {shown}"))
    }
}

pub fn edit(params: EditParams, workspace: &Workspace, reads: &mut ReadLedger) -> ToolOutcome {
    // Claude Code's convention: an empty old_string creates a new file.
    let create = params.old_string.is_empty();
    let Loaded { at, shown, bytes: existing } = match load(workspace, &params.file_path, create) {
        Ok(loaded) => loaded,
        Err(msg) => return ToolOutcome::error(msg),
    };
    let Some(at) = at else {
        return ToolOutcome::error(format!(
            "File does not exist: {shown}. Use Write to create it, or Glob to find the right path."
        ));
    };
    let Some(bytes) = existing else {
        if create {
            if let Err(e) = at.write_atomic(params.new_string.as_bytes()) {
                return ToolOutcome::error(format!("Could not write {shown}: {e}"));
            }
            reads.record(&at.host, params.new_string.as_bytes());
            return ToolOutcome::ok(format!("File created successfully at: {shown}"));
        }
        return ToolOutcome::error(format!(
            "File does not exist: {shown}. Use Write to create it, or Glob to find the right path."
        ));
    };
    if let Err(msg) = reads.check_unchanged(&at.host, &bytes) {
        return ToolOutcome::error(format!("{msg} ({shown})"));
    }
    let Ok(content) = String::from_utf8(bytes) else {
        return ToolOutcome::error(format!(
            "{shown} is not valid UTF-8 text; Edit only changes text files. Use Bash for it."
        ));
    };
    let replaced = match replace(&content, &params, &shown) {
        Ok(replaced) => replaced,
        Err(msg) => return ToolOutcome::error(msg),
    };
    let Replaced { updated, .. } = &replaced;
    if let Err(e) = at.write_atomic(updated.as_bytes()) {
        return ToolOutcome::error(format!("Could not write {shown}: {e}"));
    }
    reads.record(&at.host, updated.as_bytes());
    ToolOutcome::ok(edited_message(&shown, &content, &replaced, &params, ""))
}

/// An edit applied to a file's text.
pub struct Replaced {
    /// The new text.
    pub updated: String,
    /// Occurrences replaced.
    pub matches: usize,
    /// Byte offset of the first occurrence in the old text.
    pub first: usize,
}

/// Applies `Edit`'s replacement to `content`, or says why it cannot (the message for the model).
pub fn replace(content: &str, params: &EditParams, shown: &str) -> Result<Replaced, String> {
    if params.old_string == params.new_string {
        return Err("No changes to make: old_string and new_string are exactly the same.".into());
    }
    if params.old_string.is_empty() {
        return Err(format!(
            "old_string is empty but {shown} already exists. Give the exact text to replace, \
             or use Write to replace the whole file."
        ));
    }
    let matches = content.matches(&params.old_string).count();
    let replace_all = params.replace_all.unwrap_or(false);
    if matches == 0 {
        return Err(format!(
            "String to replace not found in file {shown}. Check whitespace and indentation \
             (copy the text exactly as it appears after the line-number tab in Read's output), \
             or Read the file again.\nString: {}",
            params.old_string
        ));
    }
    if matches > 1 && !replace_all {
        return Err(format!(
            "Found {matches} matches of the string to replace, but replace_all is false. To \
             replace all occurrences, set replace_all to true. To replace only one occurrence, \
             please provide more context to uniquely identify the instance.\nString: {}",
            params.old_string
        ));
    }
    let Some(first) = content.find(&params.old_string) else {
        return Err("String to replace not found in file.".into());
    };
    let updated = if replace_all {
        content.replace(&params.old_string, &params.new_string)
    } else {
        content.replacen(&params.old_string, &params.new_string, 1)
    };
    Ok(Replaced { updated, matches, first })
}

/// `Edit`'s answer: what changed and a `cat -n` snippet around it; `suffix` ends the first line.
pub fn edited_message(
    shown: &str,
    content: &str,
    replaced: &Replaced,
    params: &EditParams,
    suffix: &str,
) -> String {
    let Replaced { updated, matches, first } = replaced;
    let first_line = content[..*first].matches('\n').count();
    let new_text = params.new_string.strip_suffix('\n').unwrap_or(&params.new_string);
    let new_lines = new_text.matches('\n').count();
    let from = first_line.saturating_sub(SNIPPET_CONTEXT);
    let to = first_line + new_lines + SNIPPET_CONTEXT;
    let mut snippet = String::new();
    let body = updated.strip_suffix('\n').unwrap_or(updated);
    for (i, line) in body.split('\n').enumerate().skip(from).take(to + 1 - from) {
        numbered(&mut snippet, i + 1, line);
    }
    let what = if params.replace_all.unwrap_or(false) {
        format!(" All {matches} occurrences of old_string were replaced.")
    } else {
        String::new()
    };
    // Where one replacement landed (1-based): clients number their diff of old_string →
    // new_string with it; several replacements have no one line.
    let at = if *matches == 1 { format!(" at line {}", first_line + 1) } else { String::new() };
    format!(
        "The file {shown} has been updated{at}{suffix}.{what} Here's the result of running \
         `cat -n` on a snippet of the edited file:\n{snippet}"
    )
}
