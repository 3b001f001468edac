//! `Glob` and `Grep` over the workspace, with ripgrep's own parts: the `ignore` walker (so
//! `.gitignore`, `.ignore` and `.git/info/exclude` are respected as ripgrep does, and `.git` is
//! skipped), `globset` and the `regex` engine.
//!
//! Design choices: the walk starts at a path resolved by [`Workspace::resolve`] and does not
//! follow symlinks, so a link planted by a command cannot lead the search out of the workspace.
//! `.gitignore` files apply even outside a git repository (`require_git(false)`), and none above
//! the search root is read (`parents(false)`): those would be the host's, outside the workspace.
//! Walks run on the blocking pool; the number of entries visited and the answer's size are
//! capped, and the answer says so when a cap is hit.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use globset::GlobBuilder;
use ignore::overrides::OverrideBuilder;
use ignore::types::TypesBuilder;
use ignore::WalkBuilder;
use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use serde_json::json;

use super::{lenient, ToolOutcome};
use crate::llm::ToolSpec;
use crate::vfs::Workspace;

/// What one `Glob`/`Grep` searches.
pub(super) enum Scope {
    /// One tree (the workspace, or an org root's projection) from the given path (its root when
    /// `None`).
    One(Workspace, Option<String>),
    /// Every tree, from `/`: one merged answer.
    All(Vec<Workspace>),
}

/// A tree to walk: its space (for the model's names), where to start, and what the pattern of
/// a search from `/` sees before the path relative to the start (`memory/`).
struct Target {
    space: Workspace,
    base: PathBuf,
    prefix: String,
}

impl Scope {
    fn all_targets(spaces: Vec<Workspace>) -> Vec<Target> {
        spaces
            .into_iter()
            .map(|space| Target {
                base: space.canonical_root().to_path_buf(),
                prefix: format!("{}/", space.prefix().trim_start_matches('/')),
                space,
            })
            .collect()
    }
}

/// Paths `Glob` returns at most.
pub const MAX_GLOB_RESULTS: usize = 100;
/// Entries a walk visits at most.
pub const MAX_WALK_ENTRIES: usize = 200_000;
/// Bytes of text `Grep` answers at most.
pub const MAX_GREP_OUTPUT_BYTES: usize = 30_000;
/// Files larger than this are not searched by `Grep`.
pub const MAX_GREP_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Characters kept of one matching line in `Grep`'s content mode.
const MAX_GREP_LINE_CHARS: usize = 500;

pub(super) const GLOB_PARAMS: &str =
    "{\"pattern\": string (required, e.g. \"**/*.rs\"), \"path\": string (optional directory, \
     default /workspace)}";
pub(super) const GREP_PARAMS: &str =
    "{\"pattern\": string (required regex), \"path\": string (optional file or directory), \
     \"glob\": string, \"type\": string, \"output_mode\": \"content\" | \"files_with_matches\" | \
     \"count\", \"-i\": boolean, \"-n\": boolean, \"-A\": integer, \"-B\": integer, \"-C\": \
     integer, \"head_limit\": integer, \"multiline\": boolean (all optional but pattern)}";

#[derive(Debug, Deserialize)]
pub(super) struct GlobParams {
    pattern: String,
    #[serde(default)]
    pub(super) path: Option<String>,
}

#[derive(Debug, Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum OutputMode {
    Content,
    #[default]
    FilesWithMatches,
    Count,
}

#[derive(Debug, Deserialize)]
pub(super) struct GrepParams {
    pattern: String,
    #[serde(default)]
    pub(super) path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default, rename = "type")]
    file_type: Option<String>,
    #[serde(default)]
    output_mode: Option<OutputMode>,
    #[serde(default, rename = "-i", deserialize_with = "lenient::opt_bool")]
    case_insensitive: Option<bool>,
    #[serde(default, rename = "-n", deserialize_with = "lenient::opt_bool")]
    line_numbers: Option<bool>,
    #[serde(default, rename = "-A", deserialize_with = "lenient::opt_count")]
    after: Option<u64>,
    #[serde(default, rename = "-B", deserialize_with = "lenient::opt_count")]
    before: Option<u64>,
    #[serde(default, rename = "-C", deserialize_with = "lenient::opt_count")]
    context: Option<u64>,
    #[serde(default, deserialize_with = "lenient::opt_count")]
    head_limit: Option<u64>,
    #[serde(default, deserialize_with = "lenient::opt_bool")]
    multiline: Option<bool>,
}

pub(super) fn glob_spec() -> ToolSpec {
    ToolSpec {
        name: "Glob".into(),
        description: "- Fast file pattern matching tool that works with any codebase size\n\
- Supports glob patterns like \"**/*.js\" or \"src/**/*.ts\"\n\
- Returns matching file paths sorted by modification time (newest first)\n\
- Respects .gitignore; at most 100 results\n\
- Use this tool when you need to find files by name patterns\n\
- You have the capability to call multiple tools in a single response. It is always better to \
speculatively perform multiple searches as a batch that are potentially useful."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "The glob pattern to match files against"},
                "path": {"type": "string", "description": "The directory to search in. If not specified, /workspace is used; /memory or /skills search your org's shared files, / searches all three. IMPORTANT: Omit this field to use the default directory. DO NOT enter \"undefined\" or \"null\" - simply omit it for the default behavior. Must be a valid directory path if provided."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        }),
    }
}

pub(super) fn grep_spec() -> ToolSpec {
    ToolSpec {
        name: "Grep".into(),
        description: "A powerful search tool built on ripgrep's engine\n\n\
Usage:\n\
- ALWAYS use Grep for search tasks. NEVER invoke `grep` or `rg` as a Bash command.\n\
- Supports full regex syntax (e.g., \"log.*Error\", \"function\\\\s+\\\\w+\")\n\
- Filter files with glob parameter (e.g., \"*.js\", \"**/*.tsx\") or type parameter (e.g., \"js\", \
\"py\", \"rust\")\n\
- Output modes: \"content\" shows matching lines, \"files_with_matches\" shows only file paths \
(default), \"count\" shows match counts\n\
- Pattern syntax: Uses Rust regex syntax (like ripgrep) - literal braces need escaping (use \
`interface\\\\{\\\\}` to find `interface{}` in Go code)\n\
- Multiline matching: By default patterns match within single lines only. For cross-line \
patterns like `struct \\\\{[\\\\s\\\\S]*?field`, use `multiline: true`"
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "The regular expression pattern to search for in file contents"},
                "path": {"type": "string", "description": "File or directory to search in. Defaults to /workspace; /memory or /skills search your org's shared files, / searches all three."},
                "glob": {"type": "string", "description": "Glob pattern to filter files (e.g. \"*.js\", \"*.{ts,tsx}\")"},
                "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"], "description": "Output mode: \"content\" shows matching lines (supports -A/-B/-C context, -n line numbers, head_limit), \"files_with_matches\" shows file paths (supports head_limit), \"count\" shows match counts (supports head_limit). Defaults to \"files_with_matches\"."},
                "-B": {"type": "number", "description": "Number of lines to show before each match. Requires output_mode: \"content\", ignored otherwise."},
                "-A": {"type": "number", "description": "Number of lines to show after each match. Requires output_mode: \"content\", ignored otherwise."},
                "-C": {"type": "number", "description": "Number of lines to show before and after each match. Requires output_mode: \"content\", ignored otherwise."},
                "-n": {"type": "boolean", "description": "Show line numbers in output. Requires output_mode: \"content\", ignored otherwise. Defaults to true."},
                "-i": {"type": "boolean", "description": "Case insensitive search"},
                "type": {"type": "string", "description": "File type to search (ripgrep type names, e.g. js, py, rust, go, java). More efficient than glob for standard file types."},
                "head_limit": {"type": "number", "description": "Limit output to first N lines/entries. Works across all output modes. Defaults to no limit beyond a size cap."},
                "multiline": {"type": "boolean", "description": "Enable multiline mode where . matches newlines and patterns can span lines. Default: false."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        }),
    }
}

/// A directory or file to search, resolved.
fn resolve_base(workspace: &Workspace, path: Option<&str>) -> Result<PathBuf, String> {
    let path = path.filter(|p| !p.trim().is_empty() && *p != "undefined" && *p != "null");
    let base = workspace.resolve(path.unwrap_or(workspace.prefix())).map_err(|e| e.to_string())?;
    if !base.exists() {
        return Err(format!(
            "Path does not exist: {}. Use Glob with a broader pattern to find it.",
            workspace.model_path(&base)
        ));
    }
    Ok(base)
}

/// The walker both tools use, rooted at `base`.
fn walker(base: &Path) -> WalkBuilder {
    let mut builder = WalkBuilder::new(base);
    builder
        .hidden(false)
        .parents(false)
        .require_git(false)
        .git_global(false)
        .follow_links(false)
        .filter_entry(|entry| entry.file_name() != ".git");
    builder
}

fn mtime(path: &Path) -> SystemTime {
    std::fs::symlink_metadata(path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH)
}

pub(super) async fn glob(params: GlobParams, scope: Scope) -> ToolOutcome {
    tokio::task::spawn_blocking(move || glob_blocking(params, scope))
        .await
        .unwrap_or_else(|e| ToolOutcome::error(format!("Glob failed unexpectedly: {e}")))
}

/// The trees a `Glob` walks and the pattern relative to them.
fn glob_targets(params: &GlobParams, scope: Scope) -> Result<(Vec<Target>, String), String> {
    let workspace = match scope {
        Scope::All(spaces) => {
            let pattern = params.pattern.trim_start_matches('/').to_string();
            return Ok((Scope::all_targets(spaces), pattern));
        }
        Scope::One(workspace, path) => (workspace, path),
    };
    let (space, path) = workspace;
    let base = match resolve_base(&space, path.as_deref()) {
        Ok(base) if base.is_dir() => base,
        Ok(base) => {
            return Err(format!(
                "{} is a file, not a directory: give Glob a directory as path",
                space.model_path(&base)
            ))
        }
        Err(msg) => return Err(msg),
    };
    // An absolute pattern under the tree's root is matched from the root.
    let (base, pattern) = match params.pattern.strip_prefix(space.prefix()) {
        Some(rest) if rest.starts_with('/') => {
            (space.canonical_root().to_path_buf(), rest.trim_start_matches('/').to_string())
        }
        _ if params.pattern.starts_with('/') => {
            return Err(format!(
                "The pattern {} is outside {}: give a pattern relative to path (e.g. \
                 \"**/*.rs\") or starting with {}/, or search from path \"/\" to cover \
                 /workspace, /memory and /skills at once",
                params.pattern,
                space.prefix(),
                space.prefix()
            ))
        }
        _ => (base, params.pattern.trim_start_matches("./").to_string()),
    };
    Ok((vec![Target { space, base, prefix: String::new() }], pattern))
}

fn glob_blocking(params: GlobParams, scope: Scope) -> ToolOutcome {
    let (targets, pattern) = match glob_targets(&params, scope) {
        Ok(found) => found,
        Err(msg) => return ToolOutcome::error(msg),
    };
    let matcher = match GlobBuilder::new(&pattern).literal_separator(true).build() {
        Ok(glob) => glob.compile_matcher(),
        Err(e) => return ToolOutcome::error(format!("Invalid glob pattern {pattern:?}: {e}")),
    };
    let mut found: Vec<(SystemTime, String)> = Vec::new();
    let mut capped = false;
    let mut visited = 0usize;
    for target in &targets {
        for entry in walker(&target.base).build().flatten() {
            visited += 1;
            if visited > MAX_WALK_ENTRIES {
                capped = true;
                break;
            }
            if entry.file_type().is_none_or(|t| t.is_dir()) {
                continue;
            }
            let Ok(relative) = entry.path().strip_prefix(&target.base) else { continue };
            let matched = if target.prefix.is_empty() {
                matcher.is_match(relative)
            } else {
                matcher.is_match(Path::new(&target.prefix).join(relative))
            };
            if matched {
                found.push((mtime(entry.path()), target.space.model_path(entry.path())));
            }
        }
    }
    if found.is_empty() {
        return ToolOutcome::ok("No files found");
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let total = found.len();
    let mut out: Vec<String> = found.into_iter().take(MAX_GLOB_RESULTS).map(|(_, p)| p).collect();
    if total > MAX_GLOB_RESULTS {
        out.push(format!(
            "(Results are truncated: showing {MAX_GLOB_RESULTS} of {total}. Consider using a \
             more specific path or pattern.)"
        ));
    }
    if capped {
        out.push(format!(
            "(The search stopped after {MAX_WALK_ENTRIES} entries; narrow it with path.)"
        ));
    }
    ToolOutcome::ok(out.join("\n"))
}

pub(super) async fn grep(params: GrepParams, scope: Scope) -> ToolOutcome {
    tokio::task::spawn_blocking(move || grep_blocking(params, scope))
        .await
        .unwrap_or_else(|e| ToolOutcome::error(format!("Grep failed unexpectedly: {e}")))
}

/// The files to search under `base`, with the `glob`/`type` filters.
fn grep_files(base: &Path, params: &GrepParams) -> Result<(Vec<PathBuf>, bool), String> {
    if base.is_file() {
        return Ok((vec![base.to_path_buf()], false));
    }
    let mut builder = walker(base);
    if let Some(glob) = params.glob.as_deref().filter(|g| !g.is_empty()) {
        let mut overrides = OverrideBuilder::new(base);
        // ripgrep's `--glob "*.{ts,tsx}"`: brace alternatives in one glob.
        let added = overrides.add(glob).map_err(|e| format!("Invalid glob {glob:?}: {e}"))?;
        let built = added.build().map_err(|e| format!("Invalid glob {glob:?}: {e}"))?;
        builder.overrides(built);
    }
    if let Some(file_type) = params.file_type.as_deref().filter(|t| !t.is_empty()) {
        let mut types = TypesBuilder::new();
        types.add_defaults();
        types.select(file_type);
        let built = types.build().map_err(|_| {
            format!(
                "Unknown file type {file_type:?} for Grep's type: use a ripgrep type name such \
                 as rust, py, js, ts, go, java, c, cpp, md, json, yaml, or use glob instead"
            )
        })?;
        builder.types(built);
    }
    let mut files = Vec::new();
    let mut capped = false;
    for (visited, entry) in builder.build().flatten().enumerate() {
        if visited >= MAX_WALK_ENTRIES {
            capped = true;
            break;
        }
        if entry.file_type().is_some_and(|t| t.is_file()) {
            files.push(entry.into_path());
        }
    }
    Ok((files, capped))
}

/// The 0-based indices of the lines of `text` that hold a match, and the lines.
fn matching_lines<'t>(re: &Regex, text: &'t str, multiline: bool) -> (Vec<&'t str>, Vec<usize>) {
    let body = text.strip_suffix('\n').unwrap_or(text);
    let lines: Vec<&str> = body.split('\n').collect();
    let mut hits = Vec::new();
    if multiline {
        let mut starts = Vec::with_capacity(lines.len());
        let mut offset = 0;
        for line in &lines {
            starts.push(offset);
            offset += line.len() + 1;
        }
        let line_of = |pos: usize| starts.partition_point(|&s| s <= pos).saturating_sub(1);
        for m in re.find_iter(body) {
            let first = line_of(m.start());
            let last = line_of(m.end().saturating_sub(1).max(m.start()));
            hits.extend(first..=last);
        }
        hits.dedup();
    } else {
        hits.extend(lines.iter().enumerate().filter(|(_, l)| re.is_match(l)).map(|(i, _)| i));
    }
    (lines, hits)
}

fn cut_line(line: &str) -> &str {
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.char_indices().nth(MAX_GREP_LINE_CHARS) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}

fn grep_blocking(params: GrepParams, scope: Scope) -> ToolOutcome {
    let targets = match scope {
        Scope::All(spaces) => Scope::all_targets(spaces),
        Scope::One(space, path) => match resolve_base(&space, path.as_deref()) {
            Ok(base) => vec![Target { space, base, prefix: String::new() }],
            Err(msg) => return ToolOutcome::error(msg),
        },
    };
    let multiline = params.multiline.unwrap_or(false);
    let re = match RegexBuilder::new(&params.pattern)
        .case_insensitive(params.case_insensitive.unwrap_or(false))
        .multi_line(true)
        .dot_matches_new_line(multiline)
        .size_limit(64 * 1024 * 1024)
        .build()
    {
        Ok(re) => re,
        Err(e) => {
            return ToolOutcome::error(format!(
                "Invalid regex {:?}: {e}. Grep uses Rust regex syntax: escape literal braces, \
                 parentheses and dots (e.g. \"interface\\\\{{\\\\}}\").",
                params.pattern
            ))
        }
    };
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    let mut walk_capped = false;
    for target in &targets {
        match grep_files(&target.base, &params) {
            Ok((found, capped)) => {
                walk_capped |= capped;
                files.extend(found.into_iter().map(|f| {
                    let shown = target.space.model_path(&f);
                    (f, shown)
                }));
            }
            Err(msg) => return ToolOutcome::error(msg),
        }
    }
    let mode = params.output_mode.unwrap_or_default();
    let numbers = params.line_numbers.unwrap_or(true);
    let before = params.before.or(params.context).unwrap_or(0) as usize;
    let after = params.after.or(params.context).unwrap_or(0) as usize;
    let head_limit = params.head_limit.filter(|&n| n > 0).map(|n| n as usize);

    // Each entry: (file, mtime, lines of output for it).
    let mut results: Vec<(String, SystemTime, Vec<String>)> = Vec::new();
    for (file, shown) in files {
        if std::fs::metadata(&file).map(|m| m.len() > MAX_GREP_FILE_BYTES).unwrap_or(true) {
            continue;
        }
        let Ok(bytes) = std::fs::read(&file) else { continue };
        if bytes.contains(&0) {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        let (lines, hits) = matching_lines(&re, &text, multiline);
        if hits.is_empty() {
            continue;
        }
        let out = match mode {
            OutputMode::FilesWithMatches => vec![shown.clone()],
            OutputMode::Count => vec![format!("{shown}:{}", hits.len())],
            OutputMode::Content => {
                let mut out = Vec::new();
                let mut printed_to: Option<usize> = None;
                let mut i = 0;
                while i < hits.len() {
                    let from = hits[i].saturating_sub(before);
                    let from = printed_to.map_or(from, |p| from.max(p + 1));
                    if printed_to.is_some_and(|p| from > p + 1) && (before > 0 || after > 0) {
                        out.push("--".to_string());
                    }
                    let mut to = (hits[i] + after).min(lines.len() - 1);
                    // Merge following hits whose context touches this one.
                    while i + 1 < hits.len() && hits[i + 1] <= to + 1 {
                        i += 1;
                        to = to.max((hits[i] + after).min(lines.len() - 1));
                    }
                    for (n, line) in lines.iter().enumerate().take(to + 1).skip(from) {
                        let sep = if hits.binary_search(&n).is_ok() { ':' } else { '-' };
                        let line = cut_line(line);
                        out.push(if numbers {
                            format!("{shown}{sep}{}{sep}{line}", n + 1)
                        } else {
                            format!("{shown}{sep}{line}")
                        });
                    }
                    printed_to = Some(to);
                    i += 1;
                }
                out
            }
        };
        results.push((shown, mtime(&file), out));
    }
    if results.is_empty() {
        return ToolOutcome::ok(match mode {
            OutputMode::FilesWithMatches => "No files found",
            _ => "No matches found",
        });
    }
    match mode {
        OutputMode::FilesWithMatches => {
            results.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)))
        }
        _ => results.sort_by(|a, b| a.0.cmp(&b.0)),
    }
    let total_files = results.len();
    let mut lines: Vec<String> = Vec::new();
    for (_, _, out) in results {
        if mode == OutputMode::Content && !lines.is_empty() && (before > 0 || after > 0) {
            lines.push("--".to_string());
        }
        lines.extend(out);
    }
    let mut notes = Vec::new();
    if let Some(limit) = head_limit {
        if lines.len() > limit {
            notes.push(format!(
                "(Showing the first {limit} of {} entries: head_limit.)",
                lines.len()
            ));
            lines.truncate(limit);
        }
    }
    let mut text = String::new();
    for (shown, line) in lines.iter().enumerate() {
        if text.len() + line.len() > MAX_GREP_OUTPUT_BYTES {
            notes.push(format!(
                "(Output truncated at {MAX_GREP_OUTPUT_BYTES} bytes after {shown} of {} \
                 entries: narrow the search with path, glob, type or head_limit.)",
                lines.len()
            ));
            break;
        }
        text.push_str(line);
        text.push('\n');
    }
    if mode == OutputMode::FilesWithMatches {
        text.insert_str(
            0,
            &format!("Found {total_files} file{}\n", if total_files == 1 { "" } else { "s" }),
        );
    }
    if walk_capped {
        notes.push(format!(
            "(The search stopped after {MAX_WALK_ENTRIES} entries; narrow it with path.)"
        ));
    }
    for note in notes {
        text.push_str(&note);
        text.push('\n');
    }
    ToolOutcome::ok(text.trim_end().to_string())
}
