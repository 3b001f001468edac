//! `Glob` and `Grep` over the workspace and the org projections, with ripgrep's own matchers:
//! `.gitignore`/`.ignore`/`.git/info/exclude` rules through the `ignore` crate's gitignore
//! matcher (so they behave as ripgrep's), `globset`, ripgrep's file types and the `regex` engine.
//!
//! Design choices: the walk is [`Root::walk`](outboard_vfs::confined::Root::walk) over directory
//! descriptors, not the `ignore` crate's path-based walker: a command running concurrently can
//! swap a directory for a symlink at any moment, and a walker that re-opens paths would follow
//! it out of the workspace (or open a FIFO and block). Each directory is opened relative to its
//! parent's descriptor without following symlinks, each file is opened the same way without
//! blocking, checked on its descriptor (a regular file, at most [`MAX_GREP_FILE_BYTES`]) and read
//! through that limit; ignore files are read the same way. Rules mirror the `ignore` walker we
//! used before (`hidden(false)`, `parents(false)`, `require_git(false)`, `.git` skipped): a
//! deeper rule wins, `.ignore` beats `.gitignore` beats `.git/info/exclude`, rules above a `.git`
//! do not apply inside it, and a `glob` given to `Grep` overrides them all, as in ripgrep. None
//! above the search root is read: those would be the host's. Walks run on the blocking pool,
//! stop when the turn is interrupted, and cap the entries visited and the answer's size; the
//! answer says so when a cap is hit.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::SystemTime;

use globset::{GlobBuilder, GlobMatcher};
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::overrides::{Override, OverrideBuilder};
use ignore::types::{Types, TypesBuilder};
use ignore::Match;
use regex::{Regex, RegexBuilder};
use rustix::fs::FileType;
use serde::Deserialize;
use serde_json::json;

use crate::blocking::offload;
use crate::input::lenient;
use crate::outcome::ToolOutcome;
use outboard_llm::ToolSpec;
use outboard_vfs::confined::{self, ConfinedError, Visit, WalkEnd, WalkEntry, Walker};
use outboard_vfs::Workspace;

/// What one `Glob`/`Grep` searches.
pub enum Scope {
    /// One tree (the workspace, or an org root's projection) from the given path (its root when
    /// `None`).
    One(Workspace, Option<String>),
    /// Every tree, from `/`: one merged answer.
    All(Vec<Workspace>),
}

/// A tree to walk: its space (for the model's names), where to start (a directory or, for
/// `Grep`, a file, opened beneath the space's root) and its path relative to the root, and what
/// the pattern of a search from `/` sees before the path relative to the start (`memory/`).
struct Target {
    space: Workspace,
    base: Base,
    base_rel: PathBuf,
    prefix: String,
}

/// Where a search starts, opened.
enum Base {
    Dir(OwnedFd),
    File(confined::Opened),
}

impl Scope {
    fn all_targets(spaces: Vec<Workspace>) -> Result<Vec<Target>, String> {
        spaces
            .into_iter()
            .map(|space| {
                let dir = space
                    .confined()
                    .open_dir(Path::new(""))
                    .map_err(|e| e.describe(space.prefix()))?;
                Ok(Target {
                    base: Base::Dir(dir),
                    base_rel: PathBuf::new(),
                    prefix: format!("{}/", space.prefix().trim_start_matches('/')),
                    space,
                })
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
/// Bytes of an ignore file read at most.
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;
/// Characters kept of one matching line in `Grep`'s content mode.
const MAX_GREP_LINE_CHARS: usize = 500;

pub const GLOB_PARAMS: &str =
    "{\"pattern\": string (required, e.g. \"**/*.rs\"), \"path\": string (optional directory, \
     default /workspace)}";
pub const GREP_PARAMS: &str =
    "{\"pattern\": string (required regex), \"path\": string (optional file or directory), \
     \"glob\": string, \"type\": string, \"output_mode\": \"content\" | \"files_with_matches\" | \
     \"count\", \"-i\": boolean, \"-n\": boolean, \"-A\": integer, \"-B\": integer, \"-C\": \
     integer, \"head_limit\": integer, \"multiline\": boolean (all optional but pattern)}";

#[derive(Debug, Deserialize)]
pub struct GlobParams {
    pattern: String,
    #[serde(default)]
    pub path: Option<String>,
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
pub struct GrepParams {
    pattern: String,
    #[serde(default)]
    pub path: Option<String>,
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

pub fn glob_spec() -> ToolSpec {
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
                "path": {"type": "string", "description": "The directory to search in. If not specified, /workspace is used; /memory, /skills or /agents search your org's shared files, / searches all of them. IMPORTANT: Omit this field to use the default directory. DO NOT enter \"undefined\" or \"null\" - simply omit it for the default behavior. Must be a valid directory path if provided."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        }),
    }
}

pub fn grep_spec() -> ToolSpec {
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
                "path": {"type": "string", "description": "File or directory to search in. Defaults to /workspace; /memory, /skills or /agents search your org's shared files, / searches all of them."},
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

/// Opens where a search starts: the path given (a directory or file) or the tree's root.
fn open_base(space: &Workspace, path: Option<&str>) -> Result<(Base, PathBuf), String> {
    let path = path.filter(|p| !p.trim().is_empty() && *p != "undefined" && *p != "null");
    let relative = space.relative(path.unwrap_or(space.prefix())).map_err(|e| e.to_string())?;
    let opened = match space.confined().open_read(&relative) {
        Ok(opened) => opened,
        Err(ConfinedError::NotFound) => {
            return Err(format!(
                "Path does not exist: {}. Use Glob with a broader pattern to find it.",
                space.display(&relative)
            ))
        }
        Err(e) => return Err(space.refusal(&relative, e).to_string()),
    };
    let base_rel =
        opened.host.strip_prefix(space.canonical_root()).map(Path::to_path_buf).unwrap_or(relative);
    if confined::file_type(&opened.stat) == FileType::Directory {
        Ok((Base::Dir(opened.file.into()), base_rel))
    } else {
        Ok((Base::File(opened), base_rel))
    }
}

/// The ignore rules one directory holds.
struct Rules {
    ignore: Option<Gitignore>,
    gitignore: Option<Gitignore>,
    exclude: Option<Gitignore>,
    has_git: bool,
}

/// The path matchers see for `rel` (relative to the walk's start): rooted at a virtual `/`, so
/// rules of a directory apply beneath it and nothing of the host's layout is involved.
fn virtual_path(rel: &Path) -> PathBuf {
    Path::new("/").join(rel)
}

impl Rules {
    /// Reads a directory's ignore files through its descriptor.
    fn load(dir: BorrowedFd<'_>, rel: &Path) -> Rules {
        let root = virtual_path(rel);
        let build = |file: &str| -> Option<Gitignore> {
            let bytes = confined::read_child(dir, Path::new(file), MAX_IGNORE_FILE_BYTES).ok()?;
            let text = String::from_utf8_lossy(&bytes);
            let mut builder = GitignoreBuilder::new(&root);
            for line in text.lines() {
                // A malformed line is skipped, as git and ripgrep do.
                let _ = builder.add_line(None, line);
            }
            builder.build().ok().filter(|g| !g.is_empty())
        };
        let has_git =
            rustix::fs::statat(dir, ".git", rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok();
        Rules {
            ignore: build(".ignore"),
            gitignore: build(".gitignore"),
            exclude: if has_git { build(".git/info/exclude") } else { None },
            has_git,
        }
    }

    /// Whether the rules of `scopes` (outermost first) ignore `path`: the deepest match of each
    /// kind, `.ignore` over `.gitignore` over the exclude file, git rules not crossing a `.git`.
    fn ignored(scopes: &[&Rules], path: &Path, is_dir: bool) -> bool {
        let (mut m_ignore, mut m_git, mut m_exclude) = (Match::None, Match::None, Match::None);
        let mut saw_git = false;
        for rules in scopes.iter().rev() {
            let matched = |g: &Option<Gitignore>| match g {
                Some(g) => g.matched(path, is_dir).map(|_| ()),
                None => Match::None,
            };
            if m_ignore.is_none() {
                m_ignore = matched(&rules.ignore);
            }
            if !saw_git {
                if m_git.is_none() {
                    m_git = matched(&rules.gitignore);
                }
                if m_exclude.is_none() {
                    m_exclude = matched(&rules.exclude);
                }
            }
            saw_git = saw_git || rules.has_git;
        }
        m_ignore.or(m_git).or(m_exclude).is_ignore()
    }
}

/// The entry filter both tools share: `.git`, ignore rules, `Grep`'s `glob` and `type`.
#[derive(Default)]
struct Filter {
    overrides: Option<Override>,
    types: Option<Types>,
}

impl Filter {
    /// Whether a walk keeps `entry` (and descends into it when it is a directory).
    fn keeps(&self, entry: &WalkEntry<'_>, scopes: &[&Rules]) -> bool {
        if entry.name == ".git" {
            return false;
        }
        let path = virtual_path(entry.rel);
        let is_dir = entry.file_type() == FileType::Directory;
        if let Some(overrides) = &self.overrides {
            match overrides.matched(&path, is_dir) {
                Match::Ignore(_) => return false,
                Match::Whitelist(_) => return true,
                Match::None => {}
            }
        }
        if Rules::ignored(scopes, &path, is_dir) {
            return false;
        }
        match &self.types {
            Some(types) => !types.matched(&path, is_dir).is_ignore(),
            None => true,
        }
    }
}

/// The name a test plants to make a walk wait at it until cancelled.
#[cfg(test)]
pub const TEST_STALL_NAME: &str = ".outboard-test-stall";

/// Runs a walk from the directory `dir` (at `base_rel` in `space`) with `visit` for each entry the [`Filter`] keeps.
fn walk_target(
    space: &Workspace,
    base_rel: &Path,
    dir: OwnedFd,
    filter: &Filter,
    cancel: &AtomicBool,
    visit: &mut dyn FnMut(&WalkEntry<'_>),
) -> Result<WalkEnd, String> {
    struct Visitor<'a> {
        filter: &'a Filter,
        visit: &'a mut dyn FnMut(&WalkEntry<'_>),
        #[cfg(test)]
        cancel: &'a AtomicBool,
    }
    impl Walker for Visitor<'_> {
        type Scope = Rules;
        fn enter(&mut self, dir: BorrowedFd<'_>, rel: &Path) -> Rules {
            Rules::load(dir, rel)
        }
        fn entry(&mut self, entry: &WalkEntry<'_>, scopes: &[&Rules]) -> Visit {
            // A test plants this name to make a walk wait at it until cancelled (a walk that
            // would never end on its own, to test that an interrupt ends it).
            #[cfg(test)]
            if entry.name == TEST_STALL_NAME {
                while !self.cancel.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                return Visit::Skip;
            }
            if !self.filter.keeps(entry, scopes) {
                return Visit::Skip;
            }
            (self.visit)(entry);
            Visit::Descend
        }
    }
    let mut visitor = Visitor {
        filter,
        visit,
        #[cfg(test)]
        cancel,
    };
    space
        .confined()
        .walk(dir, &mut visitor, MAX_WALK_ENTRIES, cancel)
        .map_err(|e| e.describe(&space.display(base_rel)))
}

/// The answer of a search the user interrupted (the turn has moved on; nobody reads it).
fn interrupted() -> ToolOutcome {
    ToolOutcome::error("Interrupted by the user")
}

pub async fn glob(
    params: GlobParams,
    scope: Scope,
    cancel: &tokio_util::sync::CancellationToken,
) -> ToolOutcome {
    offload(cancel, move |cancel| glob_blocking(params, scope, cancel)).await.unwrap_or_else(|e| e)
}

/// The trees a `Glob` walks and the pattern relative to them.
fn glob_targets(params: &GlobParams, scope: Scope) -> Result<(Vec<Target>, String), String> {
    let workspace = match scope {
        Scope::All(spaces) => {
            let pattern = params.pattern.trim_start_matches('/').to_string();
            return Ok((Scope::all_targets(spaces)?, pattern));
        }
        Scope::One(workspace, path) => (workspace, path),
    };
    let (space, path) = workspace;
    let (base, base_rel) = match open_base(&space, path.as_deref())? {
        (Base::Dir(dir), rel) => (dir, rel),
        (Base::File(_), rel) => {
            return Err(format!(
                "{} is a file, not a directory: give Glob a directory as path",
                space.display(&rel)
            ))
        }
    };
    // An absolute pattern under the tree's root is matched from the root.
    let (base, base_rel, pattern) = match params.pattern.strip_prefix(space.prefix()) {
        Some(rest) if rest.starts_with('/') => {
            let root =
                space.confined().open_dir(Path::new("")).map_err(|e| e.describe(space.prefix()))?;
            (root, PathBuf::new(), rest.trim_start_matches('/').to_string())
        }
        _ if params.pattern.starts_with('/') => {
            return Err(format!(
                "The pattern {} is outside {}: give a pattern relative to path (e.g. \
                 \"**/*.rs\") or starting with {}/, or search from path \"/\" to cover \
                 /workspace, /memory, /skills and /agents at once",
                params.pattern,
                space.prefix(),
                space.prefix()
            ))
        }
        _ => (base, base_rel, params.pattern.trim_start_matches("./").to_string()),
    };
    Ok((vec![Target { space, base: Base::Dir(base), base_rel, prefix: String::new() }], pattern))
}

fn glob_blocking(params: GlobParams, scope: Scope, cancel: &AtomicBool) -> ToolOutcome {
    let (targets, pattern) = match glob_targets(&params, scope) {
        Ok(found) => found,
        Err(msg) => return ToolOutcome::error(msg),
    };
    let matcher: GlobMatcher = match GlobBuilder::new(&pattern).literal_separator(true).build() {
        Ok(glob) => glob.compile_matcher(),
        Err(e) => return ToolOutcome::error(format!("Invalid glob pattern {pattern:?}: {e}")),
    };
    let mut found: Vec<(SystemTime, String)> = Vec::new();
    let mut capped = false;
    let filter = Filter::default();
    for Target { space, base, base_rel, prefix } in targets {
        let Base::Dir(dir) = base else { continue };
        let mut visit = |entry: &WalkEntry<'_>| {
            // Everything but directories is listed (symlinks too, as names: never followed).
            if entry.file_type() == FileType::Directory {
                return;
            }
            let matched = if prefix.is_empty() {
                matcher.is_match(entry.rel)
            } else {
                matcher.is_match(Path::new(&prefix).join(entry.rel))
            };
            if matched {
                let shown = space.display(&base_rel.join(entry.rel));
                found.push((confined::mtime(&entry.stat), shown));
            }
        };
        match walk_target(&space, &base_rel, dir, &filter, cancel, &mut visit) {
            Ok(end) if end.cancelled => return interrupted(),
            Ok(end) => capped |= end.capped,
            Err(msg) => return ToolOutcome::error(msg),
        }
        if capped {
            break;
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

pub async fn grep(
    params: GrepParams,
    scope: Scope,
    cancel: &tokio_util::sync::CancellationToken,
) -> ToolOutcome {
    offload(cancel, move |cancel| grep_blocking(params, scope, cancel)).await.unwrap_or_else(|e| e)
}

/// `Grep`'s `glob` and `type` filters.
fn grep_filter(params: &GrepParams) -> Result<Filter, String> {
    let mut filter = Filter::default();
    if let Some(glob) = params.glob.as_deref().filter(|g| !g.is_empty()) {
        let mut overrides = OverrideBuilder::new("/");
        // ripgrep's `--glob "*.{ts,tsx}"`: brace alternatives in one glob.
        let added = overrides.add(glob).map_err(|e| format!("Invalid glob {glob:?}: {e}"))?;
        let built = added.build().map_err(|e| format!("Invalid glob {glob:?}: {e}"))?;
        filter.overrides = Some(built);
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
        filter.types = Some(built);
    }
    Ok(filter)
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

/// How `Grep` searches one file's bytes and words its lines.
struct Search<'a> {
    re: &'a Regex,
    multiline: bool,
    mode: OutputMode,
    numbers: bool,
    before: usize,
    after: usize,
}

impl Search<'_> {
    /// The output lines for one file shown as `shown`; `None` when it has no match or is binary.
    fn file(&self, bytes: &[u8], shown: &str) -> Option<Vec<String>> {
        if bytes.contains(&0) {
            return None;
        }
        let text = String::from_utf8_lossy(bytes);
        let (lines, hits) = matching_lines(self.re, &text, self.multiline);
        if hits.is_empty() {
            return None;
        }
        let shown = shown.to_owned();
        let out = match self.mode {
            OutputMode::FilesWithMatches => vec![shown.clone()],
            OutputMode::Count => vec![format!("{shown}:{}", hits.len())],
            OutputMode::Content => {
                let mut out = Vec::new();
                let mut printed_to: Option<usize> = None;
                let mut i = 0;
                while i < hits.len() {
                    let from = hits[i].saturating_sub(self.before);
                    let from = printed_to.map_or(from, |p| from.max(p + 1));
                    if printed_to.is_some_and(|p| from > p + 1)
                        && (self.before > 0 || self.after > 0)
                    {
                        out.push("--".to_string());
                    }
                    let mut to = (hits[i] + self.after).min(lines.len() - 1);
                    // Merge following hits whose context touches this one.
                    while i + 1 < hits.len() && hits[i + 1] <= to + 1 {
                        i += 1;
                        to = to.max((hits[i] + self.after).min(lines.len() - 1));
                    }
                    for (n, line) in lines.iter().enumerate().take(to + 1).skip(from) {
                        let sep = if hits.binary_search(&n).is_ok() { ':' } else { '-' };
                        let line = cut_line(line);
                        out.push(if self.numbers {
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
        Some(out)
    }
}

fn grep_blocking(params: GrepParams, scope: Scope, cancel: &AtomicBool) -> ToolOutcome {
    let targets = match scope {
        Scope::All(spaces) => match Scope::all_targets(spaces) {
            Ok(targets) => targets,
            Err(msg) => return ToolOutcome::error(msg),
        },
        Scope::One(space, path) => match open_base(&space, path.as_deref()) {
            Ok((base, base_rel)) => vec![Target { space, base, base_rel, prefix: String::new() }],
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
    let filter = match grep_filter(&params) {
        Ok(filter) => filter,
        Err(msg) => return ToolOutcome::error(msg),
    };
    let search = Search {
        re: &re,
        multiline,
        mode: params.output_mode.unwrap_or_default(),
        numbers: params.line_numbers.unwrap_or(true),
        before: params.before.or(params.context).unwrap_or(0) as usize,
        after: params.after.or(params.context).unwrap_or(0) as usize,
    };
    let (mode, before, after) = (search.mode, search.before, search.after);
    let head_limit = params.head_limit.filter(|&n| n > 0).map(|n| n as usize);

    // Each entry: (file, mtime, lines of output for it).
    let mut results: Vec<(String, SystemTime, Vec<String>)> = Vec::new();
    let mut walk_capped = false;
    for Target { space, base, base_rel, .. } in targets {
        match base {
            Base::File(opened) => {
                let shown = space.display(&base_rel);
                // Too large or unreadable: not searched, as in a walk.
                let Ok(bytes) =
                    confined::read_capped(opened.file, &opened.stat, MAX_GREP_FILE_BYTES)
                else {
                    continue;
                };
                if let Some(out) = search.file(&bytes, &shown) {
                    results.push((shown, confined::mtime(&opened.stat), out));
                }
            }
            Base::Dir(dir) => {
                let mut visit = |entry: &WalkEntry<'_>| {
                    if entry.file_type() != FileType::RegularFile {
                        return;
                    }
                    // Opened without following a link and checked again on the descriptor;
                    // too large, swapped or unreadable files are not searched.
                    let Ok(bytes) = entry.read(MAX_GREP_FILE_BYTES) else { return };
                    let shown = space.display(&base_rel.join(entry.rel));
                    if let Some(out) = search.file(&bytes, &shown) {
                        results.push((shown, confined::mtime(&entry.stat), out));
                    }
                };
                match walk_target(&space, &base_rel, dir, &filter, cancel, &mut visit) {
                    Ok(end) if end.cancelled => return interrupted(),
                    Ok(end) => walk_capped |= end.capped,
                    Err(msg) => return ToolOutcome::error(msg),
                }
            }
        }
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
