//! `outboard agents ls|cat|import`: the org's agent types, `/agents/NAME.md` files in Claude
//! Code's agent format, which the model starts as subagents.
//!
//! The server is the one judge of an agent file (its parser names the line of what is wrong);
//! `import` checks locally only what it can say without it (a directory, `*.md` names that can be
//! agent names, UTF-8 text within the size limit), then sends every file in one `agents/import`
//! request, which the server checks whole before writing anything: a bad file means nothing is
//! imported, never half a directory.

use std::io::Write;
use std::path::Path;

use outboard_shared::{AgentInfo, AgentsListResponse, ErrorCode, FileVersion, ImportFile};

use super::{
    columns, finish, json_line, plural, print_content, FilesError, IMPORT_BATCH_BYTES,
    MAX_FILE_BYTES,
};
use crate::args::{AgentsCatArgs, AgentsCommand, AgentsImportArgs, AgentsLsArgs};
use crate::client::{Client, ClientError};
use crate::run::Connection;

/// The built-in agent type, which has no file.
pub const GENERAL_PURPOSE: &str = "general-purpose";

/// The most agent files one import sends: the server's bound on the agents it reads (200).
pub const MAX_IMPORT_AGENTS: usize = 200;

/// Runs `outboard agents …`; returns the exit status. Warnings go to `err`.
pub async fn agents(command: &AgentsCommand, out: &mut impl Write, err: &mut impl Write) -> i32 {
    let result = match command {
        AgentsCommand::Ls(args) => agents_ls(args, out).await,
        AgentsCommand::Cat(args) => agents_cat(args, out).await,
        AgentsCommand::Import(args) => agents_import(args, out, err).await,
    };
    finish(result, out, err)
}

async fn agents_ls(args: &AgentsLsArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let list = connected!(&args.connect, |client| client.list_agents().await)?;
    if args.json {
        json_line(out, &list.agents)?;
    } else {
        out.write_all(agents_lines(&list).as_bytes())?;
    }
    Ok(())
}

async fn agents_cat(args: &AgentsCatArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let name = args.name.strip_suffix(".md").unwrap_or(&args.name);
    if name == GENERAL_PURPOSE {
        return Err(FilesError::Refused(format!(
            "{GENERAL_PURPOSE} is built in and has no file; see the org's own with: outboard \
             agents ls"
        )));
    }
    check_name(name).map_err(FilesError::Usage)?;
    let path = format!("/agents/{name}.md");
    let read = connected!(&args.connect, |client| client.read_file(path, None).await);
    match read {
        Err(ClientError::Server { error, .. }) if error.code == ErrorCode::NotFound => {
            Err(FilesError::Refused(format!(
                "the org has no agent {name:?} ({}) — see: outboard agents ls",
                error.message
            )))
        }
        other => print_content(&other?, out),
    }
}

async fn agents_import(
    args: &AgentsImportArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), FilesError> {
    let walk = walk_agents(&args.dir).map_err(FilesError::Usage)?;
    for warning in &walk.warnings {
        writeln!(err, "outboard: warning: {warning}")?;
    }
    let files = walk.files;
    let (answer, list) = connected!(&args.connect, |client| {
        match client.import_agents(files.clone()).await {
            // What the server thinks of them now, for the warnings; a failure here changes
            // nothing.
            Ok(answer) => Ok((answer, client.list_agents().await.ok())),
            Err(e) => Err(e),
        }
    })?;
    let list = list.unwrap_or(AgentsListResponse { agents: Vec::new(), omitted: 0 });
    out.write_all(import_summary(&files, &answer.written, &list.agents).as_bytes())?;
    for file in &files {
        let name = file.path.trim_end_matches(".md");
        let Some(agent) = list.agents.iter().find(|a| a.name == name) else { continue };
        for warning in &agent.warnings {
            writeln!(err, "outboard: warning: agent {name}: {warning}")?;
        }
    }
    Ok(())
}

/// An agent name as the server accepts it: 1 to 64 of lowercase letters, digits and `-`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not an agent name: agent names are lowercase letters, digits and `-` \
             (see: outboard agents ls)"
        ))
    }
}

/// What [`walk_agents`] found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Walk {
    /// The agent files, `NAME.md` relative to `/agents`, sorted by name.
    pub files: Vec<ImportFile>,
    /// What was skipped, for stderr.
    pub warnings: Vec<String>,
}

/// The agent files in `dir` (not its subdirectories, like Claude Code's `.claude/agents/`):
/// every `*.md`, each UTF-8 text of at most [`MAX_FILE_BYTES`] named like an agent. Anything
/// else that is not hidden is skipped with a warning; a bad `*.md` is an error, so that a
/// directory is imported whole or not at all.
pub fn walk_agents(dir: &Path) -> Result<Walk, String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!(
            "{} is not a directory: give the directory that holds the agent files (NAME.md), \
             e.g. .claude/agents",
            dir.display()
        ));
    }
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut walk = Walk::default();
    let mut budget = IMPORT_BATCH_BYTES;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if file_name.starts_with('.') {
            continue;
        }
        let Some(stem) = file_name.strip_suffix(".md") else {
            walk.warnings.push(format!("skipped {}: agent files are NAME.md", path.display()));
            continue;
        };
        if std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
            walk.warnings.push(format!("skipped {}/: subdirectories are not read", path.display()));
            continue;
        }
        if stem == GENERAL_PURPOSE {
            return Err(format!(
                "{}: {GENERAL_PURPOSE} is built in and cannot be redefined — rename the agent \
                 (its file and its `name`)",
                path.display()
            ));
        }
        check_name(stem).map_err(|e| format!("{}: {e}", path.display()))?;
        let bytes =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(format!("{} is over the 1 MiB limit of an org file", path.display()));
        }
        let content = String::from_utf8(bytes)
            .map_err(|_| format!("{} is not UTF-8 text; agent files are text", path.display()))?;
        // JSON escaping at most doubles most text; a margin the frame limit never meets.
        budget = budget.checked_sub(2 * content.len() + file_name.len() + 64).ok_or_else(|| {
            format!(
                "the agent files of {} are too large to import in one request — import them \
                 from smaller directories",
                dir.display()
            )
        })?;
        walk.files.push(ImportFile { path: file_name, content });
    }
    if walk.files.is_empty() {
        return Err(format!(
            "no agent files in {} — an agent is a NAME.md with `---` front matter (name, \
             description)",
            dir.display()
        ));
    }
    if walk.files.len() > MAX_IMPORT_AGENTS {
        return Err(format!(
            "{} agent files in {}; an org has at most {MAX_IMPORT_AGENTS}",
            walk.files.len(),
            dir.display()
        ));
    }
    walk.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(walk)
}

/// `imported 2 agents: explorer v1, reviewer v3 (unchanged)`.
pub fn import_summary(files: &[ImportFile], written: &[FileVersion], now: &[AgentInfo]) -> String {
    let parts: Vec<String> = files
        .iter()
        .map(|f| {
            let name = f.path.trim_end_matches(".md");
            let path = format!("/agents/{}", f.path);
            match written.iter().find(|v| v.path == path) {
                Some(v) => format!("{name} v{}", v.version),
                None => match now.iter().find(|a| a.name == name) {
                    Some(a) => format!("{name} v{} (unchanged)", a.version),
                    None => format!("{name} (unchanged)"),
                },
            }
        })
        .collect();
    format!("imported {}: {}\n", plural(files.len() as u64, "agent", "agents"), parts.join(", "))
}

/// `agents ls`: name, description (on one line), tools or `all`, model or `-`, version, the
/// problem if any, then one indented line per warning; a last line about the built-in type.
pub fn agents_lines(list: &AgentsListResponse) -> String {
    let mut text = String::new();
    if list.agents.is_empty() {
        text.push_str("no agents yet — import some with: outboard agents import DIR\n");
    }
    let rows: Vec<Vec<String>> = list
        .agents
        .iter()
        .map(|a| {
            let description = a.description.split_whitespace().collect::<Vec<_>>().join(" ");
            vec![
                a.name.clone(),
                if description.is_empty() { "-".to_owned() } else { description },
                match &a.tools {
                    Some(tools) => tools.join(","),
                    None => "all".to_owned(),
                },
                a.model.clone().unwrap_or_else(|| "-".to_owned()),
                format!("v{}", a.version),
                a.problem.as_ref().map(|p| format!("problem: {p}")).unwrap_or_default(),
            ]
        })
        .collect();
    for (line, agent) in columns(&rows).lines().zip(&list.agents) {
        text.push_str(line);
        text.push('\n');
        for warning in &agent.warnings {
            text.push_str(&format!("    warning: {warning}\n"));
        }
    }
    if list.omitted > 0 {
        text.push_str(&format!(
            "… and {} more files under /agents, not read (at most {MAX_IMPORT_AGENTS} are)\n",
            list.omitted
        ));
    }
    text.push_str(&format!("{GENERAL_PURPOSE} is built in and always available\n"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboard_shared::FileOp;
    use pretty_assertions::assert_eq;

    fn agent(
        name: &str,
        tools: Option<&[&str]>,
        warnings: &[&str],
        problem: Option<&str>,
    ) -> AgentInfo {
        AgentInfo {
            name: name.into(),
            description: format!("Does\n  {name} things"),
            tools: tools.map(|t| t.iter().map(|s| (*s).to_owned()).collect()),
            model: tools.map(|_| "haiku".to_owned()),
            path: format!("/agents/{name}.md"),
            version: 2,
            author: "alice".into(),
            warnings: warnings.iter().map(|w| (*w).to_owned()).collect(),
            problem: problem.map(str::to_owned),
        }
    }

    #[test]
    fn ls_shows_tools_or_all_the_model_the_version_and_what_is_wrong() {
        let list = AgentsListResponse {
            agents: vec![
                agent("broken", None, &[], Some("no description")),
                agent("explorer", None, &[], None),
                agent(
                    "reviewer",
                    Some(&["Read", "Grep"]),
                    &["tool \"WebSearch\" is left out"],
                    None,
                ),
            ],
            omitted: 3,
        };
        assert_eq!(
            agents_lines(&list),
            "broken    Does broken things    all        -      v2  problem: no description\n\
             explorer  Does explorer things  all        -      v2\n\
             reviewer  Does reviewer things  Read,Grep  haiku  v2\n    \
             warning: tool \"WebSearch\" is left out\n\
             … and 3 more files under /agents, not read (at most 200 are)\n\
             general-purpose is built in and always available\n"
        );
        let empty = agents_lines(&AgentsListResponse { agents: vec![], omitted: 0 });
        assert!(empty.starts_with("no agents yet"), "{empty}");
    }

    #[test]
    fn the_import_summary_gives_each_agents_version() {
        let files = vec![
            ImportFile { path: "explorer.md".into(), content: String::new() },
            ImportFile { path: "reviewer.md".into(), content: String::new() },
        ];
        let written = vec![FileVersion {
            path: "/agents/reviewer.md".into(),
            version: 3,
            op: FileOp::Import,
            size: 1,
            sha256: String::new(),
            author: "alice".into(),
            session: None,
            at: String::new(),
            deleted: false,
            restored_from: None,
        }];
        let now = vec![agent("explorer", None, &[], None)];
        assert_eq!(
            import_summary(&files, &written, &now),
            "imported 2 agents: explorer v2 (unchanged), reviewer v3\n"
        );
    }

    #[test]
    fn the_walk_takes_md_files_and_refuses_what_cannot_be_an_agent() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("reviewer.md"), "---\nname: reviewer\n---\n").unwrap();
        std::fs::write(d.join("explorer.md"), "---\nname: explorer\n---\n").unwrap();
        std::fs::write(d.join("notes.txt"), "x").unwrap();
        std::fs::write(d.join(".hidden.md"), "x").unwrap();
        std::fs::create_dir(d.join("more")).unwrap();
        let walk = walk_agents(d).unwrap();
        let names: Vec<&str> = walk.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(names, ["explorer.md", "reviewer.md"]);
        assert_eq!(walk.warnings.len(), 2, "{:?}", walk.warnings);

        let err = walk_agents(&d.join("reviewer.md")).unwrap_err();
        assert!(err.contains("is not a directory"), "{err}");
        let err = walk_agents(&d.join("missing")).unwrap_err();
        assert!(err.contains("cannot read"), "{err}");
        std::fs::write(d.join("Bad Name.md"), "x").unwrap();
        let err = walk_agents(d).unwrap_err();
        assert!(err.contains("Bad Name.md") && err.contains("not an agent name"), "{err}");
        std::fs::remove_file(d.join("Bad Name.md")).unwrap();
        std::fs::write(d.join("general-purpose.md"), "x").unwrap();
        assert!(walk_agents(d).unwrap_err().contains("built in"));
        std::fs::remove_file(d.join("general-purpose.md")).unwrap();
        std::fs::write(d.join("bin.md"), [0xff, 0xfe]).unwrap();
        assert!(walk_agents(d).unwrap_err().contains("not UTF-8"));

        let empty = tempfile::tempdir().unwrap();
        assert!(walk_agents(empty.path()).unwrap_err().contains("no agent files"));
    }

    #[test]
    fn the_walk_stops_at_the_most_agents_an_org_has() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..=MAX_IMPORT_AGENTS {
            std::fs::write(dir.path().join(format!("a{i}.md")), "x").unwrap();
        }
        let err = walk_agents(dir.path()).unwrap_err();
        assert!(err.contains("201 agent files") && err.contains("at most 200"), "{err}");
    }
}
