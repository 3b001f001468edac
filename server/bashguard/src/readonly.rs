//! Whether a Bash line only reads: what a session in plan mode may run
//! (`outboard_tools::plan`). A line passes when every simple command of it ([`commands`], which
//! sees into lists, pipelines, substitutions, `find -exec`, wrappers) is one of a short list of
//! readers, judged with its arguments (`git log` reads, `git commit` does not; `find` without
//! `-exec`/`-delete`), and no redirection writes a file (`> f`, `>> f`, `&> f`, `<> f`; only
//! `/dev/null` and descriptor copies such as `2>&1` are allowed).
//!
//! Options are judged in every spelling the program accepts: clustered (`-uo FILE`), with the
//! value attached (`-oFILE`, `--output=FILE`), long names abbreviated (`--out=FILE`, as getopt
//! takes them), and operands after `--` (`uniq -- - -FILE` writes `-FILE`). An option that writes
//! a file or names a program to run is refused: `sort -o`/`-T`/`--compress-program`, `uniq`'s
//! second operand, `git -c`/`--config-env`/`--exec-path`, `git grep -O`/`--open-files-in-pager`,
//! `--ext-diff`, `--textconv`, `--filters`, `--output`, `printf -v`. So is every assignment
//! (`GIT_EXTERNAL_DIFF=… git diff`, `PATH=…; ls`, `export`, `declare`, a `for` loop over an
//! upper-case name, `${X:=…}`): a variable can name the program a later command runs.
//!
//! What cannot be known before the line runs is refused, not guessed: a command whose name or
//! arguments hold an expansion (`$cmd`, `git $sub`), a shell or `eval` (their scripts are text),
//! an interpreter (`python -c`), a line that does not parse cleanly. The list is an allowlist:
//! a reader not on it is refused with a message that says so, and the model can use `Read`,
//! `Glob` and `Grep` instead. This judges the line and explains a refusal early; the guarantee
//! is the sandbox's read-only view, in which every plan-mode command runs (see
//! docs/SECURITY.md, "Plan mode"): a program the line does not show (a repository's
//! `core.fsmonitor`, a textconv driver) may run, and cannot write.

use tree_sitter::Node;

use crate::commands::{commands, Command};
use crate::guard::{
    named_children, operands, parse, parse_args, Arg, Opts, Walker, Word, MAX_CHECKED_LEN,
};

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

/// `git` subcommands that only read (with the options of [`GIT_PROGRAM_OPTS`] refused).
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

/// Long options of git's reading subcommands that write a file or run a program (a driver
/// from the configuration, a pager), refused however abbreviated.
const GIT_PROGRAM_OPTS: &[&str] =
    &["output", "ext-diff", "textconv", "filters", "open-files-in-pager"];

/// `git` options before the subcommand that set configuration or say where git's programs
/// are: configuration can name a program (`diff.external`, `core.pager`, `core.fsmonitor`).
const GIT_GLOBAL_REFUSED: &[&str] = &["config-env", "exec-path"];

/// `git` options before the subcommand that take the next word as their value.
const GIT_GLOBAL_VALUED: &[&str] =
    &["-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--attr-source"];

/// `git grep`'s short options: those with a value, and `-O[PAGER]` (opens the matches in a
/// pager: runs a program).
const GIT_GREP: Opts = Opts { short: "ABCmef", long: &[], optional: "O" };

/// `sort`'s options with a value.
const SORT: Opts = Opts::new(
    "kotST",
    &[
        "key",
        "output",
        "field-separator",
        "temporary-directory",
        "buffer-size",
        "compress-program",
        "files0-from",
        "random-source",
        "batch-size",
        "parallel",
        "sort",
    ],
);

/// `sort` options that write (`-o` the result, `-T` temporary files) or run a program.
const SORT_REFUSED: &[&str] = &["output", "temporary-directory", "compress-program"];

/// `uniq`'s options with a value.
const UNIQ: Opts = Opts::new("fsw", &["skip-fields", "skip-chars", "check-chars"]);

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
        judge(&command)?;
    }
    tree(line)
}

/// One simple command, as [`commands`] gives it.
fn judge(command: &Command) -> Result<(), NotReadOnly> {
    let text = &command.text;
    let name = command.words.first().map(String::as_str);
    if !command.complete && !name.is_some_and(|name| READERS.contains(&name)) {
        let known = if text.is_empty() { "part of the line" } else { text };
        return Err(NotReadOnly(format!(
            "`{known}…` depends on what only the run knows (an expansion, a substitution, a \
             non-literal script), so it cannot be judged read-only"
        )));
    }
    let Some((name, rest)) = command.words.split_first() else { return Ok(()) };
    let last = rest.len().saturating_sub(1);
    let args: Vec<Word> = rest
        .iter()
        .enumerate()
        .map(|(at, word)| Word {
            lit: word.clone(),
            rest: (!command.complete && at == last).then(|| "…".to_owned()),
        })
        .collect();
    let verdict = match name.as_str() {
        "git" => git(&args),
        "find" => match args.iter().find(|a| FIND_WRITERS.contains(&a.lit.as_str())) {
            Some(action) => Err(format!("runs or writes (`{}`)", action.lit)),
            None => Ok(()),
        },
        "sort" => sort(&args),
        "uniq" => match operands(&parse_args(&args, &UNIQ)).get(1) {
            Some(output) => Err(format!("writes its second operand (`{}`)", output.lit)),
            None => Ok(()),
        },
        "printf" if args.first().is_some_and(|a| a.lit.starts_with("-v")) => {
            Err("assigns a variable (`-v`)".to_owned())
        }
        name if READERS.contains(&name) => Ok(()),
        _ => Err("is not a command judged read-only".to_owned()),
    };
    verdict.map_err(|why| NotReadOnly(format!("`{text}` {why}")))
}

/// `sort`: no output file, temporary directory or compression program.
fn sort(args: &[Word]) -> Result<(), String> {
    for arg in parse_args(args, &SORT) {
        let Arg::Opt(name, _) = &arg else { continue };
        let refused = match name.as_str() {
            "o" | "T" => true,
            long if long.len() > 1 => long_names(long, SORT_REFUSED).is_some(),
            _ => false,
        };
        if refused {
            return Err(format!("writes a file or runs a program (its option `{}`)", dashed(name)));
        }
    }
    Ok(())
}

/// The refused name `given` abbreviates, if any.
fn long_names(given: &str, names: &[&'static str]) -> Option<&'static str> {
    names.iter().copied().find(|full| !given.is_empty() && full.starts_with(given))
}

/// An option's name as written: `-o`, `--output`.
fn dashed(name: &str) -> String {
    if name.chars().count() == 1 {
        format!("-{name}")
    } else {
        format!("--{name}")
    }
}

/// `git [-C dir] [--no-pager] … SUBCOMMAND …` with a reading subcommand and none of the
/// options that configure git, write a file or run a program.
fn git(args: &[Word]) -> Result<(), String> {
    let mut rest = args.iter();
    let sub = loop {
        let Some(word) = rest.next() else { return Ok(()) };
        let arg = word.lit.as_str();
        if GIT_GLOBAL_VALUED.contains(&arg) {
            rest.next();
            continue;
        }
        if arg.starts_with("-c") {
            return Err(format!("sets git configuration, which can name a program (`{arg}`)"));
        }
        if let Some(long) = arg.strip_prefix("--") {
            let name = long.split_once('=').map_or(long, |(name, _)| name);
            if long_names(name, GIT_GLOBAL_REFUSED).is_some() {
                return Err(format!("configures git or its programs (`--{name}`)"));
            }
            continue;
        }
        if arg.starts_with('-') {
            continue;
        }
        break arg;
    };
    if !GIT_READERS.contains(&sub) {
        return Err("is not a command judged read-only".to_owned());
    }
    let args = rest.as_slice();
    for word in args {
        let arg = word.lit.as_str();
        if arg == "--" {
            break;
        }
        let Some(long) = arg.strip_prefix("--") else { continue };
        let name = long.split_once('=').map_or(long, |(name, _)| name);
        // `--text` is an option of its own, not an abbreviation of `--textconv`.
        if name == "text" {
            continue;
        }
        if let Some(full) = long_names(name, GIT_PROGRAM_OPTS) {
            return Err(format!("writes a file or runs a program (`--{name}`, `--{full}`)"));
        }
    }
    if sub == "grep" && parse_args(args, &GIT_GREP).iter().any(|arg| arg.is(&["O"])) {
        return Err("runs a program (`-O`, the pager that opens the matches)".to_owned());
    }
    Ok(())
}

/// What the line's tree shows beyond its commands: a redirection that writes a file, an
/// assignment.
fn tree(line: &str) -> Result<(), NotReadOnly> {
    let Some(tree) = parse(line) else {
        return Err(NotReadOnly("the line does not parse".into()));
    };
    let walker = Walker { src: line, nesting: 0 };
    let mut stack = vec![tree.root_node()];
    while let Some(node) = stack.pop() {
        match node.kind() {
            "file_redirect" => writes(&walker, node)?,
            "variable_assignment" | "declaration_command" => {
                let text = node.utf8_text(line.as_bytes()).unwrap_or_default();
                return Err(NotReadOnly(format!(
                    "the assignment `{}` may change what a command runs (`PATH`, `GIT_*`, \
                     `LD_PRELOAD`), so it is not judged read-only",
                    text.chars().take(80).collect::<String>()
                )));
            }
            "for_statement" | "select_statement" => loop_variable(line, node)?,
            "expansion" => assigning_expansion(line, node)?,
            _ => {}
        }
        stack.extend(named_children(node));
    }
    Ok(())
}

/// A `for` (or `select`) loop assigns its variable; an upper-case one may be `PATH`.
fn loop_variable(line: &str, node: Node<'_>) -> Result<(), NotReadOnly> {
    let Some(variable) = node.child_by_field_name("variable") else { return Ok(()) };
    let name = variable.utf8_text(line.as_bytes()).unwrap_or_default();
    if name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Ok(());
    }
    Err(NotReadOnly(format!(
        "the loop assigns `{name}`, which may change what a command runs; use a lower-case name"
    )))
}

/// `${X:=value}` and `${X=value}` assign `X`.
fn assigning_expansion(line: &str, node: Node<'_>) -> Result<(), NotReadOnly> {
    let text = node.utf8_text(line.as_bytes()).unwrap_or_default();
    let inner = text.strip_prefix("${").unwrap_or_default();
    let after = inner.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
    if after.starts_with(":=") || after.starts_with('=') {
        return Err(NotReadOnly(format!("the expansion `{text}` assigns a variable")));
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
            // Options with values are not operands, nor taken for what their values spell.
            "uniq -f 1 in",
            "uniq -c -- in",
            "sort -u -k2 -t, names.txt",
            "sort -rn --key=2 names.txt",
            "git diff --text HEAD",
            "git grep -n -e -O foo",
            "git log --output-indicator-new=+ -p",
            "git diff --no-ext-diff --no-textconv",
            "for f in a b; do cat $f; done",
            "echo ${x:-default}",
            "printf '%s\\n' a",
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

    /// The third hostile round's lines, judged read-only before, and a corpus of writers and
    /// program launchers in the spellings their programs accept.
    #[test]
    fn writers_and_program_launchers_in_every_spelling_are_refused() {
        for line in [
            // The hostile round.
            "sort -o/workspace/x in",
            "sort -oFILE in",
            "uniq -- - -FILE",
            "git grep -O'touch /workspace/x' foo",
            "GIT_EXTERNAL_DIFF=/workspace/x.sh git diff --no-index a b",
            "git -c 'diff.external=/workspace/x.sh' diff",
            // Output files in every spelling.
            "sort -uo out in",
            "sort -uoout in",
            "sort --output=out in",
            "sort --output out in",
            "sort --out=out in",
            "sort --o=out in",
            "sort -T /workspace/tmp in",
            "sort --temporary-directory=/workspace/tmp in",
            "uniq in out",
            "uniq -c in out",
            "uniq -f 1 in out",
            "uniq -- in -out",
            "git diff --output=patch.diff",
            "git log -p --output patch.diff",
            "git show --outp=patch.diff",
            // Options that name a program.
            "sort --compress-program=/workspace/x.sh in",
            "sort --compress-prog /workspace/x.sh in",
            "git grep --open-files-in-pager=/workspace/x.sh foo",
            "git grep --open-files foo",
            "git grep -nO/workspace/x.sh foo",
            "git grep -iOvim foo",
            "git diff --ext-diff",
            "git log -p --ext-diff",
            "git diff --textconv",
            "git show --textc HEAD:a",
            "git cat-file --textconv HEAD:a",
            "git cat-file --filters HEAD:a",
            "git -c core.pager=/workspace/x.sh log",
            "git -ccore.fsmonitor=/workspace/x.sh status",
            "git --config-env=diff.external=X diff",
            "git --config-env diff.external=X diff",
            "git --exec-path=/workspace/bin status",
            "git --exec-path status",
            "git -C sub -c alias.x=!sh x",
            // Assignments: before a command, bare, exported, by a loop, by an expansion.
            "GIT_PAGER=/workspace/x.sh git log",
            "PATH=/workspace/bin:$PATH ls",
            "PATH=/workspace/bin; ls",
            "export GIT_EXTERNAL_DIFF=/workspace/x.sh; git diff",
            "declare -x LD_PRELOAD=/workspace/x.so; ls",
            "readonly PATH=/workspace/bin",
            "for PATH in /workspace/bin; do ls; done",
            "echo ${PATH:=/workspace/bin}",
            "printf -v PATH /workspace/bin",
            // Writers behind the readers.
            "ls > >(tee /workspace/x)",
            "cat a | tee /workspace/x",
            "find . -fprint /workspace/x",
        ] {
            assert!(read_only(line).is_err(), "judged read-only: {line}");
        }
    }

    #[test]
    fn a_refusal_names_the_option_at_fault() {
        for (line, part) in [
            ("sort -uoout in", "`-o`"),
            ("sort --out=x in", "`--out`"),
            ("uniq -- - -FILE", "`-FILE`"),
            ("git grep -O'x' foo", "`-O`"),
            ("git -c diff.external=x diff", "`-c`"),
            ("X=1 git diff", "`X=1`"),
            ("git show --textc HEAD:a", "`--textconv`"),
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
