//! The org's agent types: `/agents/NAME.md` files in Claude Code's agent format, read from the
//! org's files and checked against the tools a subagent may have.
//!
//! CONTRACT (used by `agent` for the `Task` tool, `files_api` for `agents/*`): [`AgentType`],
//! [`OrgFs::agent_types`], [`OrgFs::agents`], [`parse`], [`Parsed`], [`GENERAL_PURPOSE`],
//! [`MAX_AGENTS`], [`MAX_AGENT_PROMPT_BYTES`].
//!
//! The format (Claude Code's `.claude/agents/*.md`):
//! ```text
//! ---
//! name: code-reviewer            # required: lowercase letters, digits, `-`; the file's stem
//! description: Reviews diffs…    # required: when to use it (the Task tool lists it)
//! tools: Read, Grep, Glob        # optional: a comma-separated string or a YAML list
//! model: sonnet                  # optional: sonnet, opus, haiku, inherit or a model id
//! color: red                     # anything else is ignored
//! ---
//! You are a senior code reviewer…  (the body: the agent's system prompt)
//! ```
//! Why not the skills front-matter parser (`orgfs::front_matter`): it keeps only strings, so a
//! YAML list of tools would come out as `- Read - Grep`, and it skips what it cannot read where
//! a person importing agents wants to be told the line. This one reads the YAML that agent files
//! use (plain, quoted and block scalars, block and flow lists, comments) and names the line of
//! anything else.
//!
//! What is wrong with a file comes in two strengths. A *problem* makes it unusable (not offered
//! to the model, refused by `agents/import`): no front matter, a missing `name` or
//! `description`, a `name` that is not the file's stem, `general-purpose` (built in), a `tools`
//! list of which nothing exists here. A *warning* leaves it usable: a tool that does not exist
//! here (Claude Code's `WebSearch`, `NotebookEdit`, `Task`, `TodoWrite`, MCP tools) is left out of
//! its list, a body over [`MAX_AGENT_PROMPT_BYTES`] is cut with a note.
//!
//! This module sits above both [`crate::orgfs`] (the files) and [`crate::tools`] (the tool set
//! it validates against), so neither imports the other through it.

use std::collections::HashMap;

use outboard_shared::{AgentInfo, AgentsListResponse, OrgId};
use rusqlite::params;

use crate::orgfs::{file_version, FsError, OrgFs, FILE_COLUMNS};
use crate::tools::SUBAGENT_TOOLS;
use crate::vfs::AGENTS_PREFIX;

/// The agent type that always exists, built into the harness; a file of that name is refused.
pub const GENERAL_PURPOSE: &str = "general-purpose";

/// The most files under `/agents` read per listing: each one's description goes into the `Task`
/// tool's description, which the model reads every step, so hundreds would crowd the prompt;
/// 200 is far beyond any team's set of specialists, and bounds one listing's read (with
/// [`READ_CHARS`]) to about 40 MiB in the worst case.
pub const MAX_AGENTS: usize = 200;

/// The longest agent system prompt, in bytes: the same budget as `/memory/MEMORY.md` in the
/// main prompt. A longer body is cut (on a character boundary) with a note saying where the rest
/// is.
pub const MAX_AGENT_PROMPT_BYTES: usize = 32 * 1024;

/// The longest agent name, in bytes (Claude Code's names are short identifiers).
pub const MAX_AGENT_NAME_BYTES: usize = 64;

/// How much of each file a listing reads, in characters: the front matter (descriptions of a few
/// KiB are common) plus a whole prompt. What is beyond it would be cut from the prompt anyway,
/// so reading it would only cost memory on the store thread (files can be 1 MiB).
const READ_CHARS: usize = 16 * 1024 + MAX_AGENT_PROMPT_BYTES;

/// One usable agent type, for the `Task` tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentType {
    /// The name the `Task` tool's `subagent_type` gives.
    pub name: String,
    /// When to use it, from the front matter.
    pub description: String,
    /// The tools it may use, each one of [`SUBAGENT_TOOLS`], in the file's order.
    /// None: every SUBAGENT_TOOLS tool.
    pub tools: Option<Vec<String>>,
    /// The front matter's `model`, as written (`sonnet`, `opus`, `haiku`, `inherit`, an id).
    pub model: Option<String>,
    /// The body: the agent's system prompt, cut at [`MAX_AGENT_PROMPT_BYTES`] with a note.
    pub prompt: String,
    /// `/agents/NAME.md`.
    pub path: String,
    /// The file's version this was read from.
    pub version: u64,
}

/// What [`parse`] makes of one file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The front matter's `name` (empty when missing).
    pub name: String,
    /// The front matter's `description` (empty when missing).
    pub description: String,
    /// The usable tools of its `tools` list; None when it has none.
    pub tools: Option<Vec<String>>,
    /// The front matter's `model`.
    pub model: Option<String>,
    /// The body, bounded (see [`MAX_AGENT_PROMPT_BYTES`]).
    pub prompt: String,
    /// What was left out, for people.
    pub warnings: Vec<String>,
    /// Why the file is not a usable agent, if it is not.
    pub problem: Option<String>,
}

/// Parses one agent file. `file` is its name under `/agents` (`reviewer.md`), `text` its
/// content, or its first characters when `truncated` (the prompt is then cut with the note).
pub fn parse(file: &str, text: &str, truncated: bool) -> Parsed {
    let mut out = Parsed::default();
    let problem = check(file, text, truncated, &mut out).err();
    out.problem = problem;
    out
}

fn check(file: &str, text: &str, truncated: bool, out: &mut Parsed) -> Result<(), String> {
    let stem = stem(file)?;
    if stem == GENERAL_PURPOSE {
        return Err(format!(
            "{GENERAL_PURPOSE} is built in and cannot be redefined: give this agent another name \
             (and file name)"
        ));
    }
    let (front, body) = split_front_matter(text, truncated)?;
    let get_str = |key: &str| -> Result<Option<String>, String> {
        match front.get(key) {
            None => Ok(None),
            Some((_, Value::Str(s))) => Ok(Some(s.trim().to_owned()).filter(|s| !s.is_empty())),
            Some((line, Value::List(_))) => {
                Err(format!("line {line}: `{key}` is a list; it must be a single value"))
            }
        }
    };
    out.name = get_str("name")?.unwrap_or_default();
    out.description = get_str("description")?.unwrap_or_default();
    out.model = get_str("model")?;
    if out.name.is_empty() {
        return Err(format!("the front matter has no `name` (it must be `name: {stem}`)"));
    }
    if out.name != stem {
        return Err(format!(
            "the front matter names the agent {:?} but the file is {file}: rename one so that \
             they agree",
            out.name
        ));
    }
    if out.description.is_empty() {
        return Err(
            "the front matter has no `description`: say when the agent should be used".to_owned()
        );
    }
    if let Some(model) = &out.model {
        if model.len() > 128 || !model.chars().all(|c| c.is_ascii_graphic()) {
            return Err(format!(
                "`model` {model:?} is not a model name: use sonnet, opus, haiku, inherit or a \
                 model id"
            ));
        }
    }
    out.tools = tools(front.get("tools"), &mut out.warnings)?;
    out.prompt = prompt(file, body, truncated, &mut out.warnings);
    Ok(())
}

/// The stem of `NAME.md`, checked to be an agent name.
fn stem(file: &str) -> Result<&str, String> {
    let Some(stem) = file.strip_suffix(".md").filter(|s| !s.contains('/')) else {
        return Err(format!(
            "{file} is not an agent file: agent types are files /agents/NAME.md (no \
             subdirectories)"
        ));
    };
    if stem.is_empty()
        || stem.len() > MAX_AGENT_NAME_BYTES
        || !stem.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(format!(
            "{stem:?} is not an agent name: use 1 to {MAX_AGENT_NAME_BYTES} lowercase letters, \
             digits and `-` (e.g. code-reviewer.md)"
        ));
    }
    Ok(stem)
}

/// The usable tools of a `tools` entry: a comma-separated string (Claude Code's own) or a list.
/// Unknown names are left out with a warning; a list of which nothing is left is a problem.
fn tools(
    entry: Option<&(usize, Value)>,
    warnings: &mut Vec<String>,
) -> Result<Option<Vec<String>>, String> {
    let names: Vec<String> = match entry {
        None => return Ok(None),
        // `tools:` with nothing after it is YAML's null: not given.
        Some((_, Value::Str(s))) if s.trim().is_empty() => return Ok(None),
        Some((_, Value::Str(s))) => s.split(',').map(|t| t.trim().to_owned()).collect(),
        Some((_, Value::List(items))) => items.iter().map(|t| t.trim().to_owned()).collect(),
    };
    let line = entry.map_or(0, |(l, _)| *l);
    let mut kept: Vec<String> = Vec::new();
    let mut dropped: Vec<String> = Vec::new();
    for name in names.into_iter().filter(|n| !n.is_empty()) {
        match SUBAGENT_TOOLS.iter().find(|t| t.eq_ignore_ascii_case(&name)) {
            Some(tool) if !kept.iter().any(|k| k == tool) => kept.push((*tool).to_owned()),
            Some(_) => {}
            None => dropped.push(name),
        }
    }
    let available = SUBAGENT_TOOLS.join(", ");
    if kept.is_empty() {
        let given = if dropped.is_empty() { "none".to_owned() } else { dropped.join(", ") };
        return Err(format!(
            "line {line}: none of its tools ({given}) is available to agents here: list some of \
             {available}, or leave `tools` out to give it all of them"
        ));
    }
    for name in dropped {
        warnings.push(format!(
            "tool {name:?} is not available to agents here, so the agent runs without it \
             (available: {available})"
        ));
    }
    Ok(Some(kept))
}

/// The body as a prompt: trimmed, cut at [`MAX_AGENT_PROMPT_BYTES`] with a note.
fn prompt(file: &str, body: &str, truncated: bool, warnings: &mut Vec<String>) -> String {
    let body = body.trim();
    if body.is_empty() {
        warnings.push(
            "the body is empty, so the agent gets no system prompt of its own: write its \
             instructions after the closing `---`"
                .to_owned(),
        );
    }
    let cut = body
        .char_indices()
        .find(|(i, c)| i + c.len_utf8() > MAX_AGENT_PROMPT_BYTES)
        .map(|(i, _)| i)
        .or(truncated.then_some(body.len()));
    let Some(at) = cut else { return body.to_owned() };
    warnings.push(if at < body.len() || !truncated {
        format!("the body is over {MAX_AGENT_PROMPT_BYTES} bytes: the agent's prompt is cut there")
    } else {
        format!(
            "the file is longer than the {READ_CHARS} characters read of it: the agent's prompt \
             is cut at {at} bytes; shorten the front matter or the body"
        )
    });
    format!(
        "{}\n\n[This prompt was cut at {at} bytes; Read {AGENTS_PREFIX}/{file} for the rest]",
        &body[..at]
    )
}

/// A front matter value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Str(String),
    List(Vec<String>),
}

/// The front matter's entries (each with the line it starts on, 1-based) and the body.
type FrontMatter = HashMap<String, (usize, Value)>;

fn split_front_matter(text: &str, truncated: bool) -> Result<(FrontMatter, &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines: Vec<(usize, &str)> = Vec::new();
    let mut body_at = None;
    let mut offset = 0;
    for (i, raw) in text.split_inclusive('\n').enumerate() {
        let line = raw.trim_end_matches(['\n', '\r']);
        offset += raw.len();
        if i == 0 {
            if line.trim_end() != "---" {
                return Err("line 1: the file does not start with a `---` front matter line \
                            (Claude Code's agent format)"
                    .to_owned());
            }
            continue;
        }
        if line.trim_end() == "---" {
            body_at = Some(offset);
            break;
        }
        lines.push((i + 1, line));
    }
    if text.is_empty() {
        return Err("the file is empty: an agent file starts with a `---` front matter".to_owned());
    }
    let Some(body_at) = body_at else {
        return Err(if truncated {
            format!("the front matter is not closed within its first {READ_CHARS} characters")
        } else {
            "the front matter that starts on line 1 has no closing `---` line".to_owned()
        });
    };
    Ok((front_matter(&lines)?, &text[body_at..]))
}

/// Reads `key: value` lines (see the module header for what YAML is understood).
fn front_matter(lines: &[(usize, &str)]) -> Result<FrontMatter, String> {
    let mut out = FrontMatter::new();
    let mut i = 0;
    while i < lines.len() {
        let (no, line) = lines[i];
        i += 1;
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            return Err(format!(
                "line {no}: an indented line outside any entry: {:?}",
                shorten(line.trim())
            ));
        }
        let Some((key, rest)) = line.split_once(':').filter(|(k, _)| is_key(k)) else {
            return Err(format!(
                "line {no}: expected `key: value` in the front matter, found {:?}",
                shorten(line)
            ));
        };
        // The lines that belong to this entry: indented ones (and blank ones between them).
        let mut block: Vec<(usize, &str)> = Vec::new();
        while i < lines.len() {
            let (n, l) = lines[i];
            if l.starts_with([' ', '\t']) || (l.trim().is_empty() && continues(&lines[i..])) {
                block.push((n, l));
                i += 1;
            } else {
                break;
            }
        }
        let value = value(no, rest.trim(), &block)?;
        if out.insert(key.to_owned(), (no, value)).is_some() {
            return Err(format!("line {no}: `{key}` is given twice"));
        }
    }
    Ok(out)
}

/// Whether the blank lines at the start of `rest` are followed by an indented line.
fn continues(rest: &[(usize, &str)]) -> bool {
    rest.iter().find(|(_, l)| !l.trim().is_empty()).is_some_and(|(_, l)| l.starts_with([' ', '\t']))
}

fn is_key(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// One entry's value: `rest` is what follows the colon, `block` its indented lines.
fn value(no: usize, rest: &str, block: &[(usize, &str)]) -> Result<Value, String> {
    let rest = strip_comment(rest);
    let inner = || block.iter().map(|(_, l)| l.trim()).collect::<Vec<_>>();
    if rest.is_empty() {
        let items = inner();
        let listed =
            items.iter().filter(|l| !l.is_empty() && !l.starts_with('#')).collect::<Vec<_>>();
        if !listed.is_empty() && listed.iter().all(|l| l.starts_with('-')) {
            return listed
                .iter()
                .map(|l| scalar(no, strip_comment(l.trim_start_matches('-').trim())))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::List);
        }
        return Ok(Value::Str(fold(&items)));
    }
    if let Some(style) = rest.strip_prefix(['|', '>']) {
        if !style.is_empty() && !matches!(style, "-" | "+") {
            return Err(format!("line {no}: block scalar indicator {rest:?} is not supported"));
        }
        let items = inner();
        let text = if rest.starts_with('|') { items.join("\n") } else { fold(&items) };
        return Ok(Value::Str(text.trim_end().to_owned()));
    }
    if let Some(list) = rest.strip_prefix('[') {
        let Some(list) = list.strip_suffix(']') else {
            return Err(format!("line {no}: the list opened with `[` is not closed on that line"));
        };
        return list
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(|t| scalar(no, t))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::List);
    }
    let first = scalar(no, rest)?;
    if block.is_empty() || rest.starts_with(['"', '\'']) {
        return Ok(Value::Str(first));
    }
    // A plain scalar continued on indented lines is folded into one line.
    let mut items = vec![first.as_str()];
    items.extend(inner());
    Ok(Value::Str(fold(&items)))
}

/// Lines folded YAML's way: joined by spaces, a blank line making a newline.
fn fold(lines: &[&str]) -> String {
    let mut out = String::new();
    let mut pending_break = false;
    for line in lines {
        if line.is_empty() {
            pending_break = true;
            continue;
        }
        if !out.is_empty() {
            out.push(if pending_break { '\n' } else { ' ' });
        }
        pending_break = false;
        out.push_str(line);
    }
    out
}

/// A scalar on one line: plain, `'single'` (`''` is a quote) or `"double"` (with escapes).
fn scalar(no: usize, raw: &str) -> Result<String, String> {
    if let Some(inner) = raw.strip_prefix('\'') {
        let Some(inner) = inner.strip_suffix('\'') else {
            return Err(format!("line {no}: the quote ' is not closed on that line"));
        };
        return Ok(inner.replace("''", "'"));
    }
    if let Some(inner) = raw.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => {
                    let after = chars.as_str().trim();
                    if !after.is_empty() && !after.starts_with('#') {
                        return Err(format!(
                            "line {no}: text after the closing quote: {:?}",
                            shorten(after)
                        ));
                    }
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some('0') => out.push('\0'),
                    Some(e @ ('"' | '\\' | '/' | ' ')) => out.push(e),
                    Some(other) => {
                        return Err(format!(
                            "line {no}: unknown escape \\{other} in a quoted value"
                        ))
                    }
                    None => break,
                },
                c => out.push(c),
            }
        }
        return Err(format!("line {no}: the quote \" is not closed on that line"));
    }
    Ok(raw.to_owned())
}

/// A plain value without its trailing ` # comment` (quoted values keep their `#`).
fn strip_comment(raw: &str) -> &str {
    if raw.starts_with(['"', '\'']) {
        return raw;
    }
    match raw.find(" #") {
        Some(i) => raw[..i].trim_end(),
        None if raw.starts_with('#') => "",
        None => raw,
    }
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// One file under `/agents` as a listing reads it.
struct Row {
    file: outboard_shared::FileVersion,
    head: String,
}

impl OrgFs {
    /// The org's usable agent types (no problem), sorted by name; `general-purpose` is not
    /// among them (it is built in).
    pub async fn agent_types(&self, org: &OrgId) -> Result<Vec<AgentType>, FsError> {
        let (rows, _) = self.agent_rows(org).await?;
        let mut types: Vec<AgentType> = rows
            .into_iter()
            .filter_map(|(row, parsed)| {
                parsed.problem.is_none().then_some(AgentType {
                    name: parsed.name,
                    description: parsed.description,
                    tools: parsed.tools,
                    model: parsed.model,
                    prompt: parsed.prompt,
                    path: row.file.path,
                    version: row.file.version,
                })
            })
            .collect();
        types.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(types)
    }

    /// Every file under `/agents` as an agent, usable or not, with its warnings and problem,
    /// sorted by name: what `agents/list` answers (people's `outboard agents ls`).
    pub async fn agents(&self, org: &OrgId) -> Result<AgentsListResponse, FsError> {
        let (rows, omitted) = self.agent_rows(org).await?;
        let mut agents: Vec<AgentInfo> = rows
            .into_iter()
            .map(|(row, parsed)| {
                let file = row.file.path.strip_prefix("/agents/").unwrap_or(&row.file.path);
                AgentInfo {
                    name: file.strip_suffix(".md").unwrap_or(file).to_owned(),
                    description: parsed.description,
                    tools: parsed.tools,
                    model: parsed.model,
                    path: row.file.path.clone(),
                    version: row.file.version,
                    author: row.file.author,
                    warnings: parsed.warnings,
                    problem: parsed.problem,
                }
            })
            .collect();
        agents.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(AgentsListResponse { agents, omitted })
    }

    /// The first [`MAX_AGENTS`] live files under `/agents` by path, parsed, and how many more
    /// there are.
    async fn agent_rows(&self, org: &OrgId) -> Result<(Vec<(Row, Parsed)>, u64), FsError> {
        let org = org.clone();
        let (rows, total): (Vec<(Row, u64)>, u64) = self
            .store()
            .call(move |c| {
                let mut stmt = c.prepare_cached(&format!(
                    "SELECT {FILE_COLUMNS}, substr(f.content, 1, ?2)
                     FROM org_heads h JOIN org_files f ON f.id = h.file_id
                     WHERE h.org_id = ?1 AND h.path >= '/agents/' AND h.path < '/agents0'
                       AND h.deleted = 0
                     ORDER BY h.path LIMIT ?3"
                ))?;
                let rows =
                    stmt.query_map(params![org.0, READ_CHARS as i64, MAX_AGENTS as i64], |r| {
                        let file = file_version(r)?;
                        let size = file.size;
                        Ok((
                            Row { file, head: r.get::<_, Option<String>>(10)?.unwrap_or_default() },
                            size,
                        ))
                    })?;
                let rows = rows.collect::<Result<Vec<_>, _>>()?;
                let total: i64 = c
                    .prepare_cached(
                        "SELECT count(*) FROM org_heads WHERE org_id = ?1
                         AND path >= '/agents/' AND path < '/agents0' AND deleted = 0",
                    )?
                    .query_row([&org.0], |r| r.get(0))?;
                Ok((rows, total as u64))
            })
            .await?;
        let omitted = total.saturating_sub(rows.len() as u64);
        if omitted > 0 {
            tracing::warn!(
                omitted,
                "more than {MAX_AGENTS} files under /agents; the rest are not read"
            );
        }
        let parsed = rows
            .into_iter()
            .map(|(row, size)| {
                let file = row.file.path.strip_prefix("/agents/").unwrap_or(&row.file.path);
                let parsed = parse(file, &row.head, (row.head.len() as u64) < size);
                (row, parsed)
            })
            .collect();
        Ok((parsed, omitted))
    }
}

#[cfg(test)]
mod tests;
