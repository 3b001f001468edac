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
//! The YAML is read by [`outboard_base::frontmatter`] (a YAML parser): plain, quoted and block scalars,
//! block and flow lists, comments, escapes; what is not YAML is named by the file's line, as are
//! the checks below.
//!
//! What is wrong with a file comes in two strengths. A *problem* makes it unusable (not offered
//! to the model, refused by `agents/import`): no front matter, a missing `name` or
//! `description`, a `name` that is not the file's stem, `general-purpose` (built in), a `tools`
//! list of which nothing exists here. A *warning* leaves it usable: a tool that does not exist
//! here (Claude Code's `WebSearch`, `NotebookRead`, `Task`, `TodoWrite`, MCP tools) is left out of
//! its list, a body over [`MAX_AGENT_PROMPT_BYTES`] is cut with a note.
//!
//! This module sits above both [`outboard_org::orgfs`] (the files) and [`outboard_tools`] (the tool set
//! it validates against), so neither imports the other through it.

use std::collections::HashMap;

use outboard_shared::{AgentInfo, AgentsListResponse, OrgId};
use outboard_store::db::params;

use outboard_org::orgfs::{file_version, FsError, OrgFs, FILE_COLUMNS};
use outboard_tools::SUBAGENT_TOOLS;
use outboard_vfs::AGENTS_PREFIX;

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
    /// Who wrote that version, on one line: the user, or the session when there is no user
    /// name (the prompt names it wherever it quotes the file).
    pub author: String,
    /// When that version was written, RFC 3339.
    pub at: String,
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

/// The front matter's entries (each with the line its value starts on, 1-based) and the body.
type FrontMatter = HashMap<String, (usize, Value)>;

fn split_front_matter(text: &str, truncated: bool) -> Result<(FrontMatter, &str), String> {
    use outboard_base::frontmatter::{entries, split, FrontMatterError};
    if text.strip_prefix('\u{feff}').unwrap_or(text).is_empty() {
        return Err("the file is empty: an agent file starts with a `---` front matter".to_owned());
    }
    let (yaml, body) = split(text).map_err(|e| match e {
        FrontMatterError::NotOpened => format!("{e} (Claude Code's agent format)"),
        FrontMatterError::NotClosed if truncated => {
            format!("the front matter is not closed within its first {READ_CHARS} characters")
        }
        e => e.to_string(),
    })?;
    let mut out = FrontMatter::new();
    for (key, entry) in entries(yaml).map_err(|e| e.to_string())? {
        let line = usize::try_from(entry.line).unwrap_or(0);
        out.insert(key.clone(), (line, value(line, &key, entry.value)?));
    }
    Ok((out, body))
}

/// An entry's value as the checks read it: text, or a list of texts.
fn value(line: usize, key: &str, value: serde_json::Value) -> Result<Value, String> {
    use serde_json::Value as Yaml;
    let text = |v: Yaml| match v {
        Yaml::String(s) => Some(s),
        Yaml::Null => Some(String::new()),
        Yaml::Bool(_) | Yaml::Number(_) => Some(v.to_string()),
        Yaml::Array(_) | Yaml::Object(_) => None,
    };
    match value {
        Yaml::Array(items) => items
            .into_iter()
            .map(|item| {
                text(item).ok_or_else(|| {
                    format!("line {line}: `{key}` lists something that is not a single value")
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::List),
        Yaml::Object(_) => {
            Err(format!("line {line}: `{key}` is a mapping; it must be a single value or a list"))
        }
        v => Ok(Value::Str(text(v).unwrap_or_default())),
    }
}

/// One file under `/agents` as a listing reads it.
struct Row {
    file: outboard_shared::FileVersion,
    head: String,
}

/// The org's usable agent types (no problem), sorted by name; `general-purpose` is not
/// among them (it is built in).
pub async fn agent_types(fs: &OrgFs, org: &OrgId) -> Result<Vec<AgentType>, FsError> {
    let (rows, _) = agent_rows(fs, org).await?;
    let mut types: Vec<AgentType> = rows
        .into_iter()
        .filter_map(|(row, parsed)| {
            parsed.problem.is_none().then_some(AgentType {
                name: parsed.name,
                description: parsed.description,
                tools: parsed.tools,
                model: parsed.model,
                prompt: parsed.prompt,
                author: crate::fence::author_label(&row.file),
                at: row.file.at,
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
pub async fn agents(fs: &OrgFs, org: &OrgId) -> Result<AgentsListResponse, FsError> {
    let (rows, omitted) = agent_rows(fs, org).await?;
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
async fn agent_rows(fs: &OrgFs, org: &OrgId) -> Result<(Vec<(Row, Parsed)>, u64), FsError> {
    let org = org.clone();
    let (rows, total): (Vec<(Row, u64)>, u64) = fs
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
#[cfg(test)]
mod tests;
