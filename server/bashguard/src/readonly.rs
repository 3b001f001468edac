//! Whether a Bash line only reads: what a session in plan mode may run
//! (`outboard_tools::plan`). A line passes when every simple command of it ([`commands`], which
//! sees into lists, pipelines, substitutions, `find -exec`, wrappers) is one of a short list of
//! readers, judged with its arguments (`git log` reads, `git commit` does not; `find` without
//! `-exec`/`-delete`), and no redirection writes a file (`> f`, `>> f`, `&> f`, `<> f`; only
//! `/dev/null` and descriptor copies such as `2>&1` are allowed).
//!
//! What cannot be known before the line runs is refused, not guessed: a command whose name or
//! arguments hold an expansion (`$cmd`, `git $sub`), a shell or `eval` (their scripts are text),
//! an interpreter (`python -c`), a line that does not parse cleanly. The list is an allowlist:
//! a reader not on it is refused with a message that says so, and the model can use `Read`,
//! `Glob` and `Grep` instead. This judges the line; it is not a sandbox (see docs/SECURITY.md,
//! "Plan mode").

use tree_sitter::Node;

use crate::commands::commands;
use crate::guard::{named_children, parse, Walker, MAX_CHECKED_LEN};

/// Commands that only read whatever their arguments (they print to stdout), so an argument
/// known only when the line runs (`ls $dir`) changes nothing. Not here: wrappers (`env`,
/// `nice`: they run their arguments), and readers with an option that writes or runs something
/// (`tree -o`, `rg --pre`, `xxd -r`, `sed -i`, `awk`'s `system`).
const READERS: &[&str] = &[
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "pwd",
    "echo",
    "printf",
    "grep",
    "egrep",
    "fgrep",
    "which",
    "whoami",
    "id",
    "uname",
    "stat",
    "du",
    "df",
    "diff",
    "cmp",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "true",
    "false",
    "test",
    "[",
    "nl",
    "cut",
    "tr",
    "column",
    "jq",
    "cd",
    "type",
    "printenv",
    "md5sum",
    "sha256sum",
    "sha1sum",
    "comm",
    "strings",
    "od",
];

/// `git` subcommands that only read (with `--output` refused: it writes a file).
const GIT_READERS: &[&str] = &[
    "log",
    "diff",
    "status",
    "show",
    "rev-parse",
    "ls-files",
    "ls-tree",
    "blame",
    "grep",
    "describe",
    "shortlog",
    "cat-file",
    "rev-list",
    "whatchanged",
    "merge-base",
    "show-ref",
    "name-rev",
    "count-objects",
    "var",
];

/// `find` actions that run commands, delete or write files.
const FIND_WRITERS: &[&str] =
    &["-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"];

/// Why a line is not judged read-only: one sentence naming the part at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReadOnly(pub String);

impl std::fmt::Display for NotReadOnly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotReadOnly {}

/// Whether `line` only reads (see the module header); the reason when it may not.
pub fn read_only(line: &str) -> Result<(), NotReadOnly> {
    if line.len() > MAX_CHECKED_LEN {
        return Err(NotReadOnly("the command is too long to judge".into()));
    }
    for command in commands(line) {
        judge(&command.text, command.complete)?;
    }
    redirections(line)
}

/// One simple command, as [`commands`] gives it.
fn judge(text: &str, complete: bool) -> Result<(), NotReadOnly> {
    let words: Vec<&str> = text.split(' ').filter(|w| !w.is_empty()).collect();
    let name = words.first().copied();
    if !complete && !name.is_some_and(|name| READERS.contains(&name)) {
        let known = if text.is_empty() { "part of the line" } else { text };
        return Err(NotReadOnly(format!(
            "`{known}…` depends on what only the run knows (an expansion, a substitution, a \
             non-literal script), so it cannot be judged read-only"
        )));
    }
    let Some((&name, args)) = words.split_first() else { return Ok(()) };
    let reads = match name {
        "git" => git_reads(args),
        "find" => !args.iter().any(|a| FIND_WRITERS.contains(a)),
        "sort" => !args.iter().any(|a| *a == "-o" || a.starts_with("--output")),
        // `uniq IN OUT` writes OUT.
        "uniq" => args.iter().filter(|a| !a.starts_with('-')).count() <= 1,
        name => READERS.contains(&name),
    };
    if reads {
        Ok(())
    } else {
        Err(NotReadOnly(format!("`{text}` is not a command judged read-only")))
    }
}

/// `git [-C dir] [-c k=v] [--no-pager] SUBCOMMAND …` with a reading subcommand.
fn git_reads(args: &[&str]) -> bool {
    let mut rest = args.iter();
    let sub = loop {
        match rest.next() {
            Some(&"-C") | Some(&"-c") => {
                rest.next();
            }
            Some(opt) if opt.starts_with('-') => {}
            Some(sub) => break *sub,
            None => return true,
        }
    };
    GIT_READERS.contains(&sub) && !rest.any(|a| a.starts_with("--output"))
}

/// Refuses a redirection that writes a file.
fn redirections(line: &str) -> Result<(), NotReadOnly> {
    let Some(tree) = parse(line) else {
        return Err(NotReadOnly("the line does not parse".into()));
    };
    let walker = Walker { src: line, nesting: 0 };
    let mut stack = vec![tree.root_node()];
    while let Some(node) = stack.pop() {
        if node.kind() == "file_redirect" {
            writes(&walker, node)?;
        }
        stack.extend(named_children(node));
    }
    Ok(())
}

fn writes(walker: &Walker<'_>, node: Node<'_>) -> Result<(), NotReadOnly> {
    let mut operator = "";
    let mut cursor = node.walk();
    for child in node.children(&mut cursor) {
        if !child.is_named() && operator.is_empty() {
            operator = child.kind();
        }
        // `<>` parses as `<` followed by an error holding `>`.
        if child.kind() == "ERROR" {
            operator = "<>";
        }
    }
    if !matches!(operator, ">" | ">>" | ">|" | "&>" | "&>>" | ">&" | "<>") {
        return Ok(());
    }
    let Some(destination) = node.child_by_field_name("destination") else { return Ok(()) };
    if destination.kind() == "number" {
        return Ok(());
    }
    let word = walker.word(destination);
    match word.complete() {
        Some("/dev/null") => Ok(()),
        Some("-") if operator == ">&" => Ok(()),
        Some(path) => {
            Err(NotReadOnly(format!("the redirection `{operator} {path}` writes a file")))
        }
        None => {
            Err(NotReadOnly(format!("the redirection `{operator} {}…` writes a file", word.lit)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_pass() {
        for line in [
            "ls -la",
            "git status",
            "git log --oneline -5 && git diff HEAD~1",
            "git -C sub --no-pager show HEAD",
            "cat a.txt | grep -n foo | head -3",
            "find . -name '*.rs' -type f",
            "grep -r TODO src 2>/dev/null",
            "ls 2>&1 | wc -l",
            "cd src && ls",
            "sort -u names.txt",
            "echo $(git rev-parse HEAD)",
            "ls $dir",
        ] {
            assert_eq!(read_only(line), Ok(()), "{line}");
        }
    }

    #[test]
    fn writers_are_refused_with_the_part_at_fault() {
        for (line, part) in [
            ("rm -rf build", "`rm -rf build`"),
            ("touch x", "`touch x`"),
            ("echo hi > notes.txt", "`> notes.txt`"),
            ("cat a >> b", "`>> b`"),
            ("ls &> out.log", "`&> out.log`"),
            ("git commit -m x", "`git commit -m x`"),
            ("git push", "`git push`"),
            ("git diff --output=patch.diff", "`git diff --output=patch.diff`"),
            ("find . -name x -delete", "-delete"),
            ("find . -exec rm {} ;", "-exec"),
            ("ls && mkdir d", "`mkdir d`"),
            ("echo $(touch x)", "`touch x`"),
            ("sed -i s/a/b/ f", "`sed -i s/a/b/ f`"),
            ("bash -c 'ls'", "`bash -c ls`"),
            ("$cmd x", "cannot be judged"),
            ("git log $range", "cannot be judged"),
            ("env X=1 rm f", "`env X=1 rm f`"),
            ("sort -o out in", "`sort -o out in`"),
            ("uniq in out", "`uniq in out`"),
            ("python3 -c 'open(\"x\",\"w\")'", "python3"),
            ("echo x > $f", "writes a file"),
            ("sudo ls", "`sudo ls`"),
        ] {
            let err = read_only(line).expect_err(line);
            assert!(err.0.contains(part), "{line}: {err}");
        }
    }

    #[test]
    fn a_line_too_long_to_judge_is_refused() {
        let line = "ls ".repeat(MAX_CHECKED_LEN / 3 + 1);
        assert!(read_only(&line).is_err());
    }
}
