//! `outboard memory …` and `outboard skills …` (and [`agents`]: `outboard agents …`): the org's
//! shared, versioned text files (`/memory/**`, `/skills/**`, `/agents/**`) from a terminal or a
//! script. Same connection flags and embedded mode as `outboard sessions`.
//!
//! Everything that can go wrong locally (a bad path, an unreadable or binary file, an empty skills
//! directory) is checked before connecting, so a usage error never starts the embedded server.
//! Exit statuses: 0 done; 1 the server refused (`not_found`, `conflict`, `bad_request`,
//! `forbidden`) with its message on stderr; 2 usage; 3 cannot connect or not authorised.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use outboard_shared::{
    ErrorCode, FileOp, FileVersion, FilesChangeResponse, FilesReadResponse, ImportFile, SkillInfo,
};

use crate::args::{
    MemoryCatArgs, MemoryCommand, MemoryHistoryArgs, MemoryLsArgs, MemoryPathArgs,
    MemoryRestoreArgs, MemoryWriteArgs, SkillsCatArgs, SkillsCommand, SkillsImportArgs,
    SkillsLsArgs,
};
use crate::client::{Client, ClientError};
use crate::connect::ExitCode as _;
use crate::exit;
use crate::run::{Connection, RunError};

/// The largest content of one org file the server accepts (1 MiB); larger local files are
/// refused before anything is sent.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The most bytes one `skills/import` request frame may take: a margin under
/// [`outboard_shared::MAX_FRAME_BYTES`] (4 MiB), so a batch is never refused for its size.
pub const IMPORT_BATCH_BYTES: usize = 3 * 1024 * 1024;

/// What the request around a batch's files costs at most: `{"type":"request","id":…,
/// "method":"skills/import","params":{"files":[…]}}` is under 100 bytes; this leaves room.
const BATCH_ENVELOPE_BYTES: usize = 256;

/// The longest absolute path of an org file, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;

/// The directory listed by `outboard memory ls` without a PATH.
pub const MEMORY_ROOT: &str = "/memory";

/// Why a memory or skills command failed. Each message is one line and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// No connection (bad flags, embedded server failed, cannot connect, wrong token).
    #[error(transparent)]
    Connect(#[from] RunError),
    /// The server refused the request, or the connection broke during it.
    #[error("{}", crate::connect::Hinted(.0))]
    Client(#[from] ClientError),
    /// A bad argument or local file.
    #[error("{0}")]
    Usage(String),
    /// The operation cannot be done as asked (a deleted file has no content to print).
    #[error("{0}")]
    Refused(String),
    /// Stdout could not be written (a closed pipe).
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl FilesError {
    /// The process exit status (see [`crate::exit`] and the module header).
    pub fn exit_code(&self) -> i32 {
        match self {
            FilesError::Connect(e) => e.exit_code(),
            FilesError::Client(e) => client_exit_code(e),
            FilesError::Usage(_) => exit::USAGE,
            FilesError::Refused(_) | FilesError::Output(_) => exit::FAILED,
        }
    }
}

/// A server error about the operation itself is 1 here (the command ran, the server said no);
/// everything else maps as for every other command.
fn client_exit_code(err: &ClientError) -> i32 {
    match err {
        ClientError::Server { error, .. }
            if matches!(
                error.code,
                ErrorCode::NotFound
                    | ErrorCode::Conflict
                    | ErrorCode::BadRequest
                    | ErrorCode::Forbidden
                    | ErrorCode::TooLarge
            ) =>
        {
            exit::FAILED
        }
        other => other.exit_code(),
    }
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// Runs `outboard memory …`; returns the exit status. `stdin` feeds `write` without a FILE.
pub async fn memory(
    command: &MemoryCommand,
    stdin: impl Read,
    out: &mut impl Write,
    err: &mut impl Write,
) -> i32 {
    let result = match command {
        MemoryCommand::Ls(args) => memory_ls(args, out).await,
        MemoryCommand::Cat(args) => memory_cat(args, out).await,
        MemoryCommand::History(args) => memory_history(args, out).await,
        MemoryCommand::Restore(args) => memory_restore(args, out).await,
        MemoryCommand::Rm(args) => memory_rm(args, out).await,
        MemoryCommand::Write(args) => memory_write(args, stdin, out).await,
    };
    finish(result, out, err)
}

/// Runs `outboard skills …`; returns the exit status. Warnings go to `err`.
pub async fn skills(command: &SkillsCommand, out: &mut impl Write, err: &mut impl Write) -> i32 {
    let result = match command {
        SkillsCommand::Ls(args) => skills_ls(args, out).await,
        SkillsCommand::Cat(args) => skills_cat(args, out).await,
        SkillsCommand::Import(args) => skills_import(args, out, err).await,
    };
    finish(result, out, err)
}

pub(crate) fn finish(
    result: Result<(), FilesError>,
    out: &mut impl Write,
    err: &mut impl Write,
) -> i32 {
    match result.and_then(|()| out.flush().map_err(FilesError::from)) {
        Ok(()) => exit::OK,
        Err(e) => {
            let _ = writeln!(err, "outboard: {e}");
            e.exit_code()
        }
    }
}

/// Opens the connection, evaluates the body with the client bound to the given name, and closes
/// the connection (stopping an embedded server) whatever the body returned.
macro_rules! connected {
    ($connect:expr, |$client:ident| $body:expr) => {{
        let conn = Connection::open_for($connect, false).await?;
        let result = {
            let $client: &Client = &conn.client;
            $body
        };
        conn.close().await;
        result
    }};
}

async fn memory_ls(args: &MemoryLsArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let path = memory_path(args.path.as_deref().unwrap_or(MEMORY_ROOT))?;
    let files: Vec<FileVersion> =
        connected!(&args.connect, |client| client.list_files(path.clone(), args.all).await)?;
    if args.json {
        json_line(out, &files)
    } else if files.is_empty() {
        writeln!(out, "no files under {path} — add one with: outboard memory write PATH FILE")?;
        Ok(())
    } else {
        out.write_all(list_lines(&files).as_bytes())?;
        Ok(())
    }
}

async fn memory_cat(args: &MemoryCatArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let path = memory_path(&args.path)?;
    let read = connected!(&args.connect, |client| client.read_file(path, args.version).await)?;
    print_content(&read, out)
}

async fn memory_history(args: &MemoryHistoryArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let path = memory_path(&args.path)?;
    let versions = connected!(&args.connect, |client| client.file_history(path).await)?;
    if args.json {
        json_line(out, &versions)
    } else {
        out.write_all(history_lines(&versions).as_bytes())?;
        Ok(())
    }
}

async fn memory_restore(args: &MemoryRestoreArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let path = memory_path(&args.path)?;
    let change =
        connected!(&args.connect, |client| client.restore_file(path.clone(), args.version).await)?;
    let current = &change.file;
    if change.changed {
        writeln!(out, "restored {path} to v{} as v{}", args.version, current.version)?;
    } else {
        writeln!(
            out,
            "{path} already has the content of v{} (current: v{}); nothing changed",
            args.version, current.version
        )?;
    }
    Ok(())
}

async fn memory_rm(args: &MemoryPathArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let path = memory_path(&args.path)?;
    let change = connected!(&args.connect, |client| client.delete_file(path.clone(), None).await)?;
    out.write_all(delete_line(&path, &change).as_bytes())?;
    Ok(())
}

async fn memory_write(
    args: &MemoryWriteArgs,
    stdin: impl Read,
    out: &mut impl Write,
) -> Result<(), FilesError> {
    let path = memory_path(&args.path)?;
    let content = read_content(args.file.as_deref(), stdin)?;
    let change = connected!(&args.connect, |client| client
        .write_file(path.clone(), content, args.base_version)
        .await)?;
    let file = &change.file;
    if change.changed {
        writeln!(out, "wrote {path} v{} ({})", file.version, human_size(file.size))?;
    } else {
        writeln!(out, "{path} is unchanged: v{} already has this content", file.version)?;
    }
    Ok(())
}

async fn skills_ls(args: &SkillsLsArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let skills = connected!(&args.connect, |client| client.list_skills().await)?;
    if args.json {
        json_line(out, &skills)
    } else if skills.is_empty() {
        writeln!(out, "no skills yet — import some with: outboard skills import DIR")?;
        Ok(())
    } else {
        out.write_all(skills_lines(&skills).as_bytes())?;
        Ok(())
    }
}

async fn skills_cat(args: &SkillsCatArgs, out: &mut impl Write) -> Result<(), FilesError> {
    let path = skill_file_path(&args.name, args.file.as_deref())?;
    let read = connected!(&args.connect, |client| client.read_file(path, None).await)?;
    print_content(&read, out)
}

async fn skills_import(
    args: &SkillsImportArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<(), FilesError> {
    let walk = walk_skills(&args.dir).map_err(FilesError::Usage)?;
    for warning in &walk.warnings {
        writeln!(err, "outboard: warning: {warning}")?;
    }
    if walk.skills.is_empty() {
        return Err(FilesError::Usage(format!(
            "no skills to import from {} — a skill is a directory with a SKILL.md",
            args.dir.display()
        )));
    }
    let batches = batches(&walk.skills, IMPORT_BATCH_BYTES);
    let total = batches.len();
    let (imported, problems) = connected!(&args.connect, |client| {
        let mut imported = Imported::default();
        let mut failed = None;
        for (i, batch) in batches.into_iter().enumerate() {
            match client.import_skills(batch).await {
                Ok(answer) => {
                    imported.written.extend(answer.written);
                    imported.unchanged += answer.unchanged;
                }
                Err(e) => {
                    failed = Some((i, e));
                    break;
                }
            }
        }
        match failed {
            Some((0, e)) => Err(FilesError::Client(e)),
            Some((i, e)) => {
                let _ = writeln!(
                    err,
                    "outboard: the import was sent in {total} parts; the first {i} were imported"
                );
                Err(FilesError::Client(e))
            }
            // What the server thinks of the imported skills; a failure here changes nothing.
            None => Ok((imported, client.list_skills().await.unwrap_or_default())),
        }
    })?;
    out.write_all(import_summary(&walk.skills, &imported).as_bytes())?;
    for skill in &walk.skills {
        if let Some(problem) = problems.iter().find(|p| p.name == skill.name) {
            if let Some(problem) = &problem.problem {
                writeln!(
                    err,
                    "outboard: warning: skill {}: {problem} — it is not offered to the model",
                    skill.name
                )?;
            }
        }
    }
    Ok(())
}

/// What the import batches answered, together.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Imported {
    /// The versions made.
    pub written: Vec<FileVersion>,
    /// Files that were already current.
    pub unchanged: u64,
}

pub(crate) fn print_content(
    read: &FilesReadResponse,
    out: &mut impl Write,
) -> Result<(), FilesError> {
    let file = &read.file;
    if file.deleted {
        return Err(FilesError::Refused(format!(
            "{} is deleted (v{} by {}) — see: outboard memory history {}",
            file.path, file.version, file.author, file.path
        )));
    }
    out.write_all(read.content.as_bytes())?;
    Ok(())
}

pub(crate) fn json_line(
    out: &mut impl Write,
    value: &impl serde::Serialize,
) -> Result<(), FilesError> {
    serde_json::to_writer(&mut *out, value).map_err(std::io::Error::from)?;
    writeln!(out)?;
    Ok(())
}

/// The content for `memory write`: FILE, or stdin when it is absent or `-`. Must be UTF-8 text
/// of at most [`MAX_FILE_BYTES`].
pub fn read_content(file: Option<&Path>, stdin: impl Read) -> Result<String, FilesError> {
    let (bytes, name) = match file {
        Some(path) if path != Path::new("-") => {
            let bytes = std::fs::read(path)
                .map_err(|e| FilesError::Usage(format!("cannot read {}: {e}", path.display())))?;
            (bytes, path.display().to_string())
        }
        _ => {
            let mut bytes = Vec::new();
            // One byte over the limit is enough to know it is too large.
            stdin
                .take(MAX_FILE_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| FilesError::Usage(format!("cannot read stdin: {e}")))?;
            (bytes, "stdin".to_owned())
        }
    };
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FilesError::Usage(format!(
            "{name} is over the 1 MiB limit of an org file — split it, or keep it in the workspace"
        )));
    }
    String::from_utf8(bytes)
        .map_err(|_| FilesError::Usage(format!("{name} is not UTF-8 text; org files hold text")))
}

// ---------------------------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------------------------

/// The absolute org path for a memory command's PATH: relative paths are under `/memory`
/// (`deploys.md`, `./deploys.md`, `memory/deploys.md` → `/memory/deploys.md`); absolute ones must
/// be `/`, or under `/memory`, `/skills` or `/agents`. Empty and `.` components and a trailing `/` are
/// dropped; `..` is refused. The server checks the rest (length, characters).
pub fn memory_path(arg: &str) -> Result<String, FilesError> {
    let usage = |why: &str| FilesError::Usage(format!("{arg:?} is not an org file path: {why}"));
    if arg.is_empty() {
        return Err(usage("it is empty"));
    }
    if arg.contains('\0') {
        return Err(usage("it contains NUL"));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in arg.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(usage("`..` is not allowed")),
            part => parts.push(part),
        }
    }
    if !arg.starts_with('/') && parts.first() != Some(&"memory") {
        parts.insert(0, "memory");
    }
    match parts.first() {
        None => Ok("/".to_owned()),
        Some(&("memory" | "skills" | "agents")) => Ok(format!("/{}", parts.join("/"))),
        Some(_) => Err(usage("org files live under /memory, /skills or /agents")),
    }
}

/// `/skills/NAME/SKILL.md`, or `/skills/NAME/FILE` (FILE relative to the skill's directory).
pub fn skill_file_path(name: &str, file: Option<&str>) -> Result<String, FilesError> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(FilesError::Usage(format!(
            "{name:?} is not a skill name: use a directory name under /skills (see: outboard skills ls)"
        )));
    }
    let file = file.unwrap_or("SKILL.md");
    let mut parts = Vec::new();
    for part in file.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(FilesError::Usage(format!(
                    "{file:?} leaves the skill's directory: `..` is not allowed"
                )))
            }
            part if part.contains('\0') => {
                return Err(FilesError::Usage(format!("{file:?} contains NUL")))
            }
            part => parts.push(part),
        }
    }
    if parts.is_empty() {
        return Err(FilesError::Usage(format!("{file:?} names no file")));
    }
    Ok(format!("/skills/{name}/{}", parts.join("/")))
}

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/// `123 B`, `4.2 KiB`, `1.0 MiB`.
pub fn human_size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    if bytes < KIB {
        format!("{bytes} B")
    } else if bytes < KIB * KIB {
        format!("{:.1} KiB", bytes as f64 / KIB as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / (KIB * KIB) as f64)
    }
}

/// An RFC 3339 time without its fraction of a second: `2026-11-29T07:18:16.123Z` →
/// `2026-11-29T07:18:16Z`. Anything else is returned as is.
pub fn short_time(at: &str) -> String {
    let Some(dot) = at.find('.') else { return at.to_owned() };
    let digits = at[dot + 1..].bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return at.to_owned();
    }
    format!("{}{}", &at[..dot], &at[dot + 1 + digits..])
}

/// Rows as columns separated by two spaces, each as wide as its widest cell; no trailing blanks.
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(width) => *width = (*width).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> =
            row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// `memory ls`: `path  v3  123 B  alice  2026-11-29T07:18:16Z`, and `deleted` after a deleted
/// file's line.
pub fn list_lines(files: &[FileVersion]) -> String {
    let rows: Vec<Vec<String>> = files
        .iter()
        .map(|f| {
            vec![
                f.path.clone(),
                format!("v{}", f.version),
                if f.deleted { "-".to_owned() } else { human_size(f.size) },
                f.author.clone(),
                short_time(&f.at),
                if f.deleted { "deleted".to_owned() } else { String::new() },
            ]
        })
        .collect();
    columns(&rows)
}

/// What made a version, for `memory history`: `write`, `delete`, `restore (from v2)`, ….
pub fn op_text(v: &FileVersion) -> String {
    if v.deleted {
        return "delete".to_owned();
    }
    match (v.op, v.restored_from) {
        (FileOp::Restore, Some(from)) => format!("restore (from v{from})"),
        (op, _) => op.as_str().to_owned(),
    }
}

/// `memory history`: `v1  write  alice (session s_…)  2026-11-29T07:18:16Z  123 B`, one line per
/// version, oldest first; a tombstone's size is `-`.
pub fn history_lines(versions: &[FileVersion]) -> String {
    let rows: Vec<Vec<String>> = versions
        .iter()
        .map(|v| {
            vec![
                format!("v{}", v.version),
                op_text(v),
                match &v.session {
                    Some(session) => format!("{} (session {session})", v.author),
                    None => v.author.clone(),
                },
                short_time(&v.at),
                if v.deleted { "-".to_owned() } else { human_size(v.size) },
            ]
        })
        .collect();
    columns(&rows)
}

fn delete_line(path: &str, change: &FilesChangeResponse) -> String {
    let version = change.file.version;
    if !change.changed {
        return format!("{path} was already deleted (v{version})\n");
    }
    match version.checked_sub(1).filter(|v| *v > 0) {
        Some(before) => format!(
            "deleted {path} (v{version}); bring it back with: outboard memory restore {path} v{before}\n"
        ),
        None => format!("deleted {path} (v{version})\n"),
    }
}

/// `skills ls`: name, description (on one line), file count, and the problem if any.
pub fn skills_lines(skills: &[SkillInfo]) -> String {
    let rows: Vec<Vec<String>> = skills
        .iter()
        .map(|s| {
            let description = s.description.split_whitespace().collect::<Vec<_>>().join(" ");
            vec![
                s.name.clone(),
                if description.is_empty() { "-".to_owned() } else { description },
                plural(s.files, "file", "files"),
                s.problem.as_ref().map(|p| format!("problem: {p}")).unwrap_or_default(),
            ]
        })
        .collect();
    columns(&rows)
}

pub(crate) fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `imported 2 skills: deploy (2 files, 1 new version), review (1 file, 0 new versions); 2 files
/// unchanged`.
pub fn import_summary(skills: &[Skill], imported: &Imported) -> String {
    let parts: Vec<String> = skills
        .iter()
        .map(|s| {
            let prefix = format!("/skills/{}/", s.name);
            let new = imported.written.iter().filter(|v| v.path.starts_with(&prefix)).count();
            format!(
                "{} ({}, {})",
                s.name,
                plural(s.files.len() as u64, "file", "files"),
                plural(new as u64, "new version", "new versions")
            )
        })
        .collect();
    format!(
        "imported {}: {}; {} unchanged\n",
        plural(skills.len() as u64, "skill", "skills"),
        parts.join(", "),
        plural(imported.unchanged, "file", "files")
    )
}

// ---------------------------------------------------------------------------------------------
// The skills directory walker
// ---------------------------------------------------------------------------------------------

/// One local skill ready to import: its name and its files (paths relative to `/skills`, the
/// skill's `SKILL.md` among them).
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    /// The directory name.
    pub name: String,
    /// Its files, sorted by path.
    pub files: Vec<ImportFile>,
}

/// What [`walk_skills`] found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Walk {
    /// The skills, sorted by name.
    pub skills: Vec<Skill>,
    /// What was skipped and why, one line each, for stderr.
    pub warnings: Vec<String>,
}

/// The skills under `dir`: when `dir` holds a `SKILL.md` it is one skill named after the
/// directory; otherwise each subdirectory with a `SKILL.md` is a skill (one without is skipped
/// with a warning). Hidden files and directories (`.git`) are skipped; so are symlinks that point
/// outside `dir`, files over [`MAX_FILE_BYTES`], and files that are not UTF-8 text (binary).
/// Fails (with a message for a person) only when `dir` itself is unusable.
pub fn walk_skills(dir: &Path) -> Result<Walk, String> {
    let root =
        std::fs::canonicalize(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    if !root.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let mut walker = Walker { root: root.clone(), ..Walker::default() };
    if root.join("SKILL.md").is_file() {
        let Some(name) = root.file_name().and_then(|n| n.to_str()) else {
            return Err(format!("{} has no name a skill can take", dir.display()));
        };
        walker.skill(name, &root);
        return Ok(walker.finish());
    }
    let mut loose = Vec::new();
    for entry in walker.entries(&root) {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            walker.warn(format!("skipped {:?}: the name is not UTF-8", entry.file_name()));
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        match walker.resolve(&entry.path(), &name) {
            Some(Kind::Dir(real)) => {
                if real.join("SKILL.md").is_file() {
                    walker.skill(&name, &real);
                } else {
                    walker.warn(format!("skipped {name}/: no SKILL.md in it"));
                }
            }
            Some(Kind::File(_)) => loose.push(name),
            None => {}
        }
    }
    if !loose.is_empty() {
        walker.warn(format!(
            "ignored {} outside any skill directory: {}",
            plural(loose.len() as u64, "file", "files"),
            loose.join(", ")
        ));
    }
    Ok(walker.finish())
}

/// What an entry is, symlinks resolved.
enum Kind {
    Dir(PathBuf),
    File(PathBuf),
}

#[derive(Default)]
struct Walker {
    /// The canonical directory given; symlinks may not leave it.
    root: PathBuf,
    skills: Vec<Skill>,
    warnings: Vec<String>,
    /// Files skipped for being binary or not UTF-8, relative to `/skills`.
    binary: Vec<String>,
    /// Canonical directories already walked (symlink loops).
    visited: BTreeSet<PathBuf>,
}

impl Walker {
    fn warn(&mut self, warning: String) {
        self.warnings.push(warning);
    }

    fn finish(mut self) -> Walk {
        if !self.binary.is_empty() {
            let list = self.binary.join(", ");
            let count = plural(self.binary.len() as u64, "file", "files");
            self.warn(format!("skipped {count} (binary or not UTF-8): {list}"));
        }
        self.skills.sort_by(|a, b| a.name.cmp(&b.name));
        Walk { skills: self.skills, warnings: self.warnings }
    }

    /// The entries of `dir`, sorted by name (a warning when it cannot be read).
    fn entries(&mut self, dir: &Path) -> Vec<std::fs::DirEntry> {
        match std::fs::read_dir(dir) {
            Ok(entries) => {
                let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
                entries.sort_by_key(|e| e.file_name());
                entries
            }
            Err(e) => {
                self.warn(format!("cannot read {}: {e}", dir.display()));
                Vec::new()
            }
        }
    }

    /// A directory or regular file, following a symlink only when it stays inside the root;
    /// `None` (with a warning for a symlink) for anything else. `shown` names it in warnings.
    fn resolve(&mut self, path: &Path, shown: &str) -> Option<Kind> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        if !meta.file_type().is_symlink() {
            return if meta.is_dir() {
                Some(Kind::Dir(path.to_owned()))
            } else if meta.is_file() {
                Some(Kind::File(path.to_owned()))
            } else {
                None
            };
        }
        let target = match std::fs::canonicalize(path) {
            Ok(target) => target,
            Err(_) => {
                self.warn(format!("skipped {shown}: a broken symlink"));
                return None;
            }
        };
        if !target.starts_with(&self.root) {
            self.warn(format!("skipped {shown}: a symlink to {} (outside)", target.display()));
            return None;
        }
        if target.is_dir() {
            Some(Kind::Dir(target))
        } else if target.is_file() {
            Some(Kind::File(target))
        } else {
            None
        }
    }

    /// Walks one skill's directory.
    fn skill(&mut self, name: &str, dir: &Path) {
        let mut files = Vec::new();
        self.visit(dir, name, &mut files);
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let skill_md = format!("{name}/SKILL.md");
        if files.iter().any(|f| f.path == skill_md) {
            self.skills.push(Skill { name: name.to_owned(), files });
        } else {
            self.warn(format!("skipped {name}/: its SKILL.md could not be imported"));
        }
    }

    /// Adds the files under `dir` to `files`, with paths starting with `prefix` (`deploy/x`).
    fn visit(&mut self, dir: &Path, prefix: &str, files: &mut Vec<ImportFile>) {
        let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_owned());
        if !self.visited.insert(canonical) {
            return;
        }
        for entry in self.entries(dir) {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                self.warn(format!(
                    "skipped {prefix}/{:?}: the name is not UTF-8",
                    entry.file_name()
                ));
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let rel = format!("{prefix}/{name}");
            match self.resolve(&entry.path(), &rel) {
                Some(Kind::Dir(real)) => self.visit(&real, &rel, files),
                Some(Kind::File(real)) => {
                    if let Some(file) = self.read(&real, rel) {
                        files.push(file);
                    }
                }
                None => {}
            }
        }
    }

    /// One file, or `None` with a warning when it cannot be imported.
    fn read(&mut self, path: &Path, rel: String) -> Option<ImportFile> {
        if "/skills/".len() + rel.len() > MAX_PATH_BYTES {
            self.warn(format!("skipped {rel}: the path is over {MAX_PATH_BYTES} bytes"));
            return None;
        }
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if size > MAX_FILE_BYTES {
            self.warn(format!(
                "skipped {rel}: {} is over the 1 MiB limit of an org file",
                human_size(size)
            ));
            return None;
        }
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.warn(format!("skipped {rel}: {e}"));
                return None;
            }
        };
        let content = match String::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => text,
            _ => {
                self.binary.push(rel);
                return None;
            }
        };
        let file = ImportFile { path: rel, content };
        if encoded_len(&file) + BATCH_ENVELOPE_BYTES > IMPORT_BATCH_BYTES {
            // Only control characters expand this much when escaped: binary in disguise.
            self.binary.push(file.path);
            return None;
        }
        Some(file)
    }
}

/// The bytes `file` takes in a request frame.
fn encoded_len(file: &ImportFile) -> usize {
    serde_json::to_string(file).map_or(usize::MAX / 2, |text| text.len())
}

/// The skills' files in `skills/import` batches whose frames stay under `budget` bytes. A skill
/// goes whole into one batch whenever it fits in one, so that each skill is written in one
/// transaction; a skill larger than a batch is split across several.
pub fn batches(skills: &[Skill], budget: usize) -> Vec<Vec<ImportFile>> {
    let mut batches: Vec<Vec<ImportFile>> = Vec::new();
    let mut batch: Vec<ImportFile> = Vec::new();
    let mut used = BATCH_ENVELOPE_BYTES;
    for skill in skills {
        let sizes: Vec<usize> = skill.files.iter().map(|f| encoded_len(f) + 1).collect();
        let whole: usize = sizes.iter().sum();
        if used + whole > budget && !batch.is_empty() && BATCH_ENVELOPE_BYTES + whole <= budget {
            batches.push(std::mem::take(&mut batch));
            used = BATCH_ENVELOPE_BYTES;
        }
        for (file, size) in skill.files.iter().zip(sizes) {
            if used + size > budget && !batch.is_empty() {
                batches.push(std::mem::take(&mut batch));
                used = BATCH_ENVELOPE_BYTES;
            }
            batch.push(file.clone());
            used += size;
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

pub mod agents;
pub mod plans;

#[cfg(test)]
mod tests;
