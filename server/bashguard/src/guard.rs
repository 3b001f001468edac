//! The Bash guard: refuses, before it runs, a command that would write to `/memory`, `/skills`
//! or `/agents`.
//!
//! `/memory/**`, `/skills/**` and `/agents/**` are virtual: org-shared files kept in the database and mounted
//! read-only in the sandbox. The read-only mount is the guarantee (a write fails with EROFS);
//! this guard exists only to instruct. A model that runs `echo x >> /memory/notes.md` should
//! learn at once, with nothing half-done, that those files change through the Write and Edit
//! tools (which version every change), rather than read a bare "Read-only file system" in the
//! middle of a script. So the guard must never refuse an ordinary read (`cat /memory/a`,
//! `grep -r x /skills`, `cp /memory/a /workspace/b`, `echo /memory/a`), and may let through
//! what it cannot see: the mount still stops it.
//!
//! Design choice: the command is parsed with tree-sitter-bash rather than matched with regexes.
//! A regex cannot tell `echo x > /memory/a` from `echo "x > /memory/a"`, nor `cd /memory && touch
//! b` from `(cd /memory) && touch b`, nor see through quoting (`/mem"ory"/a`, `\/memory/a`). The
//! tree gives the commands, their words and their redirections; each word is then evaluated to
//! its literal value when that value is fully known.
//!
//! What counts as a write to a virtual path (a path equal to an org root or under
//! them, after resolving relative words against the tracked working directory and normalising
//! `.`, `..` and repeated slashes lexically; `/memoryx` is not virtual):
//! - an output redirection (`>`, `>>`, `>|`, `&>`, `&>>`, `<>`, `N>`, `>&FILE`) to it; `<` reads;
//! - `tee`, `touch`, `rm`, `rmdir`, `mkdir`, `truncate`, `shred`, `unlink`, `chmod`, `chown`,
//!   `chgrp`, `mv`, `mkfifo`, `mknod`, `setfacl`, `chattr` with any operand on it;
//! - `cp`, `ln`, `install`, `rsync`, `scp` with their destination on it (`-t DIR` or the last
//!   operand); `install -d` with any operand on it;
//! - `sed`/`perl`/`ruby` in place (`-i`, `-i.bak`, `--in-place`, `-pi`) on a file there;
//! - `dd of=`, `tar` extracting into it or creating an archive there, `unzip` extracting into it,
//!   `git clone`/`git init` into it and git's writing subcommands run in it (`-C` or the cwd),
//!   `find` with `-delete` from a start there, and the commands of `find -exec` (with `{}`
//!   standing for the start).
//!
//! The command name is taken by its basename (`/bin/rm`), after wrappers (`sudo`, `env`,
//! `command`, `builtin`, `exec`, `nice`, `nohup`, `timeout`, `time`, `xargs`) and assignments.
//! The whole tree is walked: lists, pipelines, `if`/`case`/loops, functions, subshells, command
//! and process substitutions, heredocs, and the literal scripts of `bash -c '…'`, `sh -c '…'` and
//! `eval '…'` (parsed again, to a small depth). `cd`/`pushd` move the tracked directory for the
//! commands that follow in the same shell; a subshell, a pipeline element or a substitution keeps
//! its `cd` to itself, and a branch that may or may not have run a `cd` leaves the directory
//! unknown.
//!
//! A word is literal when all its parts are: plain text (backslash escapes undone), `'…'`, `"…"`
//! without expansions, `$'…'` with simple escapes, and concatenations of these; `~` and `~/`
//! expand to `/workspace`. A word with an expansion or a glob counts as virtual only when its
//! literal part already names a directory that is virtual (`/memory/$f`, `/memory/*`); anything
//! else is unknown and let through.
//!
//! Limits: interpreters' own file APIs (`python -c "open(…,'w')"`), scripts run from files or
//! fed on stdin (`bash <<EOF`), variables' values, a `cd` inside a function that is called
//! later, aliases, redirections the grammar reads as something else (`[ a > f ]`) and anything
//! else the tree does not show are not seen; the mount catches them. A command that does not
//! parse cleanly is checked as far as the tree goes and is never refused for the parse error
//! alone. Commands over 1 MiB are not checked; below that the work is linear in the command's
//! length (the tracked directory is capped at 4 KiB, nested scripts at 4 levels, the walk at 200
//! levels of nesting).

use std::cell::RefCell;
use std::rc::Rc;

use tree_sitter::{Node, Parser, Tree};

mod args;
mod word;

use args::{is_assignment, is_option, skip_options, NO_OPTS};
pub(crate) use args::{operands, parse_args, Arg, Opts};
pub(crate) use word::Word;
use word::{unescape_ansi_c, unescape_double_quoted, WordBuf};

/// The virtual roots, as the model names them.
pub const VIRTUAL_ROOTS: &[&str] = &outboard_vfs::ORG_ROOTS;

/// Commands longer than this (bytes) are let through unchecked: the read-only mount still holds.
pub(crate) const MAX_CHECKED_LEN: usize = 1 << 20;

/// The sandbox's `HOME` and default working directory.
const HOME: &str = "/workspace";
/// How deep the walk follows the tree; deeper nesting is let through (no stack overflow).
const MAX_DEPTH: usize = 200;
/// How many `bash -c '…'`/`eval '…'` levels are parsed again.
pub(crate) const MAX_NESTED_SCRIPTS: usize = 4;
/// A tracked working directory longer than this becomes unknown (bounds the work per word).
const MAX_CWD_LEN: usize = 4096;

/// Why a command was refused, for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The normalised virtual path written to, e.g. `/memory/a` (or `/memory/$f` when only a
    /// literal prefix is known).
    pub path: String,
    /// The whole message for the model: which path, why, and what to do instead.
    pub message: String,
}

/// Refuses a command that writes to an org root (/memory, /skills, /agents). `cwd` is the sandbox's working directory
/// before the command (the sandbox keeps `cd` between commands; None = /workspace).
pub fn check(command: &str, cwd: Option<&str>) -> Result<(), Refusal> {
    if command.len() > MAX_CHECKED_LEN {
        return Ok(());
    }
    let start = cwd.unwrap_or(HOME);
    let mut cwd: Cwd = resolve(start, Some(HOME)).map(Rc::from);
    check_script(command, &mut cwd, 0).map_err(Hit::refusal)
}

/// The tracked working directory; None when unknown.
type Cwd = Option<Rc<str>>;

/// A write found: the virtual path and how it is written (completes "writes to PATH (WHY)").
#[derive(Debug)]
struct Hit {
    path: String,
    why: String,
}

impl Hit {
    fn new(path: String, why: impl Into<String>) -> Self {
        Hit { path, why: why.into() }
    }

    fn refusal(self) -> Refusal {
        let Hit { path, why } = self;
        let message = format!(
            "Refused before running: this command writes to {path} ({why}). /memory, /skills and \
             /agents are shared with your whole org and are read-only in Bash; use the Write or Edit tool \
             on {path} instead (every change is versioned). Nothing was run."
        );
        Refusal { path, message }
    }
}

type Checked = Result<(), Hit>;

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

/// Parses with this thread's parser (created on first use); None if tree-sitter fails.
pub(crate) fn parse(src: &str) -> Option<Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            let mut parser = Parser::new();
            parser.set_language(&tree_sitter_bash::LANGUAGE.into()).ok()?;
            *slot = Some(parser);
        }
        slot.as_mut()?.parse(src, None)
    })
}

/// Parses `src` and walks it; `nesting` counts the enclosing `bash -c`/`eval` scripts.
fn check_script(src: &str, cwd: &mut Cwd, nesting: usize) -> Checked {
    let Some(tree) = parse(src) else { return Ok(()) };
    let walker = Walker { src, nesting };
    walker.children(tree.root_node(), cwd, 0)
}

pub(crate) fn named_children(node: Node<'_>) -> Vec<Node<'_>> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor).collect()
}

/// The statements of a `list` (`a && b || c`, nested to the left), in order, without recursion.
fn list_items(node: Node<'_>) -> Vec<Node<'_>> {
    let mut pending = Vec::new();
    let mut first = node;
    while first.kind() == "list" {
        let children = named_children(first);
        let Some((head, tail)) = children.split_first() else { break };
        pending.extend(tail.iter().rev().copied());
        first = *head;
    }
    let mut items = Vec::with_capacity(pending.len() + 1);
    if first.kind() != "list" {
        items.push(first);
    }
    items.extend(pending.into_iter().rev());
    items
}

// ---------------------------------------------------------------------------------------------
// Paths

/// Lexical normalisation of an absolute path: no `.`, `..` or repeated slashes.
fn normalise(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            _ => parts.push(part),
        }
    }
    let mut out = String::with_capacity(path.len() + 1);
    for part in &parts {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// The absolute, normalised form of `path`; relative paths need a known `base`.
fn resolve(path: &str, base: Option<&str>) -> Option<String> {
    if path.starts_with('/') {
        return Some(normalise(path));
    }
    let base = base?;
    Some(normalise(&format!("{base}/{path}")))
}

/// Whether a normalised absolute path is a virtual root or under one.
fn is_virtual(path: &str) -> bool {
    VIRTUAL_ROOTS.iter().any(|root| {
        path.strip_prefix(root).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Whether a normalised directory is virtual or holds a virtual root.
fn may_hold_virtual(dir: &str) -> bool {
    is_virtual(dir)
        || VIRTUAL_ROOTS.iter().any(|root| {
            root.strip_prefix(dir).is_some_and(|rest| dir.ends_with('/') || rest.starts_with('/'))
        })
}

/// `path` resolved and normalised, if it is virtual.
fn virtual_abs(path: &str, base: Option<&str>) -> Option<String> {
    // Cheap exit for the common case: a relative path with no `..` stays under its base, so it
    // is virtual only when the base is, or is an ancestor of a root (`/`).
    let relative_safe = !path.starts_with('/') && !path.split('/').any(|part| part == "..");
    if relative_safe && !base.is_some_and(may_hold_virtual) {
        return None;
    }
    let path = resolve(path, base)?;
    is_virtual(&path).then_some(path)
}

/// The virtual path a word names, if it names one for sure (see the module doc for partly known
/// words).
fn virtual_path(word: &Word, base: Option<&str>) -> Option<String> {
    let Some(rest) = &word.rest else { return virtual_abs(&word.lit, base) };
    if word.lit.is_empty() {
        return None;
    }
    let (dir, tail) = match word.lit.rfind('/') {
        Some(i) => word.lit.split_at(i + 1),
        None => ("", word.lit.as_str()),
    };
    let dir = if dir.is_empty() { base?.to_string() } else { virtual_abs(dir, base)? };
    is_virtual(&dir).then(|| format!("{dir}/{tail}{rest}"))
}

pub(crate) fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

// ---------------------------------------------------------------------------------------------
// Words

// ---------------------------------------------------------------------------------------------
// Options

// ---------------------------------------------------------------------------------------------
// Command tables

const SUDO: Opts = Opts::new("ugpCrtUDRTh", &["user", "group", "prompt", "chdir", "host"]);
const ENV: Opts = Opts::new("uCS", &["unset", "chdir", "split-string"]);
const NICE: Opts = Opts::new("n", &["adjustment"]);
const TIMEOUT: Opts = Opts::new("sk", &["signal", "kill-after"]);
const EXEC: Opts = Opts::new("a", &[]);
const XARGS: Opts = Opts {
    short: "ILnPsdEa",
    long: &["max-lines", "max-args", "max-procs", "max-chars", "delimiter", "arg-file"],
    optional: "ile",
};

/// Commands that write to every operand, with their options that take values.
const ANY_OPERAND: &[(&str, Opts)] = &[
    ("tee", NO_OPTS),
    ("touch", Opts::new("rdt", &["reference", "date", "time"])),
    ("rm", NO_OPTS),
    ("rmdir", NO_OPTS),
    ("mkdir", Opts::new("m", &["mode"])),
    ("truncate", Opts::new("sr", &["size", "reference"])),
    ("shred", Opts::new("ns", &["iterations", "size", "random-source"])),
    ("unlink", NO_OPTS),
    ("chmod", Opts::new("", &["reference"])),
    ("chown", Opts::new("", &["reference", "from"])),
    ("chgrp", Opts::new("", &["reference"])),
    ("mv", Opts::new("tS", &["target-directory", "suffix"])),
    ("mkfifo", Opts::new("m", &["mode"])),
    ("mknod", Opts::new("m", &["mode"])),
    ("setfacl", Opts::new("mMxX", &["modify", "modify-file", "remove", "remove-file", "set"])),
    ("chattr", Opts::new("pv", &[])),
];

/// Commands that write to their destination (`-t DIR` or the last operand).
const DESTINATION: &[(&str, Opts)] = &[
    ("cp", Opts::new("tS", &["target-directory", "suffix"])),
    ("ln", Opts::new("tS", &["target-directory", "suffix"])),
    ("install", Opts::new("tSmog", &["target-directory", "suffix", "mode", "owner", "group"])),
    ("rsync", Opts::new("efBTM", &["rsh", "exclude", "include", "filter", "files-from"])),
    ("scp", Opts::new("iPoFclSJD", &[])),
];

/// Interpreters with an in-place edit flag; `script` are the options that give the script
/// (without one, the first operand is the script).
const IN_PLACE: &[(&str, Opts, &[&str])] = &[
    (
        "sed",
        Opts { short: "efl", long: &["expression", "file", "line-length"], optional: "i" },
        &["e", "f", "expression", "file"],
    ),
    ("perl", Opts { short: "eEIMm", long: &[], optional: "il0xdDC" }, &["e", "E"]),
    ("ruby", Opts { short: "eIrCEFK", long: &[], optional: "i0lWTx" }, &["e"]),
];

pub(crate) const SHELLS: &[&str] = &["bash", "sh", "dash", "zsh", "ksh", "ash", "mksh"];
pub(crate) const SHELL_OPTS: Opts = Opts::new("oO", &["rcfile", "init-file"]);

const TAR: Opts = Opts::new(
    "fCTXbKNgLVHI",
    &[
        "file",
        "directory",
        "files-from",
        "exclude",
        "exclude-from",
        "transform",
        "use-compress-program",
        "format",
        "label",
        "newer",
        "owner",
        "group",
        "mode",
        "blocking-factor",
    ],
);
const UNZIP: Opts = Opts::new("dPx", &[]);

const GIT_CLONE: Opts = Opts::new(
    "bouj",
    &[
        "branch",
        "origin",
        "upload-pack",
        "reference",
        "reference-if-able",
        "separate-git-dir",
        "template",
        "depth",
        "shallow-since",
        "shallow-exclude",
        "config",
        "jobs",
        "filter",
        "server-option",
    ],
);
const GIT_INIT: Opts = Opts::new("b", &["template", "separate-git-dir", "initial-branch"]);
/// Git's global options that take the next word.
const GIT_GLOBAL_WITH_VALUE: &[&str] =
    &["-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"];
/// Git subcommands that write in the repository they run in.
const GIT_WRITES: &[&str] = &[
    "add",
    "am",
    "apply",
    "checkout",
    "cherry-pick",
    "clean",
    "commit",
    "merge",
    "mv",
    "pull",
    "rebase",
    "reset",
    "restore",
    "revert",
    "rm",
    "stash",
    "switch",
];

fn lookup<T>(table: &'static [(&'static str, T)], name: &str) -> Option<&'static T> {
    table.iter().find(|(n, _)| *n == name).map(|(_, value)| value)
}

// ---------------------------------------------------------------------------------------------
// The walk

pub(crate) struct Walker<'s> {
    pub(crate) src: &'s str,
    pub(crate) nesting: usize,
}

impl Walker<'_> {
    fn text(&self, node: Node<'_>) -> &str {
        self.src.get(node.byte_range()).unwrap_or("")
    }

    /// Walks a node's named children in order, in the same shell.
    fn children(&self, node: Node<'_>, cwd: &mut Cwd, depth: usize) -> Checked {
        for child in named_children(node) {
            self.walk(child, cwd, depth + 1)?;
        }
        Ok(())
    }

    fn walk(&self, node: Node<'_>, cwd: &mut Cwd, depth: usize) -> Checked {
        if depth > MAX_DEPTH {
            return Ok(());
        }
        match node.kind() {
            "command" => self.command(node, cwd, depth),
            "redirected_statement" => self.redirected(node, cwd, depth),
            "file_redirect" => {
                self.redirect(node, cwd)?;
                self.children(node, &mut cwd.clone(), depth)
            }
            "list" => self.list(node, cwd, depth),
            "pipeline" => {
                for child in named_children(node) {
                    self.walk(child, &mut cwd.clone(), depth + 1)?;
                }
                Ok(())
            }
            "subshell"
            | "command_substitution"
            | "process_substitution"
            | "function_definition" => self.children(node, &mut cwd.clone(), depth),
            "if_statement"
            | "elif_clause"
            | "else_clause"
            | "case_item"
            | "while_statement"
            | "for_statement"
            | "c_style_for_statement" => {
                let mut inner = cwd.clone();
                self.children(node, &mut inner, depth)?;
                if inner != *cwd {
                    *cwd = None;
                }
                Ok(())
            }
            "word" | "raw_string" | "number" | "comment" | "variable_name" | "string_content"
            | "heredoc_content" | "heredoc_start" | "heredoc_end" => Ok(()),
            _ => self.children(node, cwd, depth),
        }
    }

    /// `a && b || c` nests to the left; walked as a flat sequence so long chains stay shallow.
    fn list(&self, node: Node<'_>, cwd: &mut Cwd, depth: usize) -> Checked {
        for item in list_items(node) {
            self.walk(item, cwd, depth + 1)?;
        }
        Ok(())
    }

    /// Redirections open before the body runs (so before a `cd` in it); heredocs' trailing
    /// pipelines and statements come after. The grammar hangs the redirections of `a && b > f`
    /// on the whole list, where bash applies them to `b` alone, after `a` ran.
    fn redirected(&self, node: Node<'_>, cwd: &mut Cwd, depth: usize) -> Checked {
        let children = named_children(node);
        let body = node.child_by_field_name("body");
        let mut target = body;
        if let Some(list) = body.filter(|body| body.kind() == "list") {
            let items = list_items(list);
            if let Some((last, before)) = items.split_last() {
                for item in before {
                    self.walk(*item, cwd, depth + 1)?;
                }
                target = Some(*last);
            }
        }
        let is_redirect =
            |child: &Node<'_>| matches!(child.kind(), "file_redirect" | "herestring_redirect");
        for child in children.iter().filter(|child| is_redirect(child)) {
            self.walk(*child, cwd, depth + 1)?;
        }
        if let Some(target) = target {
            self.walk(target, cwd, depth + 1)?;
        }
        for child in children.iter().filter(|child| !is_redirect(child) && Some(**child) != body) {
            self.walk(*child, cwd, depth + 1)?;
        }
        Ok(())
    }

    fn redirect(&self, node: Node<'_>, cwd: &Cwd) -> Checked {
        let mut operator = "";
        let mut read_write = false;
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            if !child.is_named() && operator.is_empty() {
                operator = child.kind();
            }
            // `<>` parses as `<` followed by an error holding `>`.
            if child.kind() == "ERROR" && self.text(child).trim() == ">" {
                read_write = true;
            }
        }
        let writes = matches!(operator, ">" | ">>" | ">|" | "&>" | "&>>" | ">&" | "<>")
            || (operator == "<" && read_write);
        // Only the first destination: the grammar may misparse what follows as more of them.
        let Some(destination) = node.child_by_field_name("destination") else { return Ok(()) };
        if !writes || destination.kind() == "number" {
            return Ok(());
        }
        let word = self.word(destination);
        if operator == ">&" && word.complete() == Some("-") {
            return Ok(());
        }
        match virtual_path(&word, cwd.as_deref()) {
            Some(path) => Err(Hit::new(path, "a redirection")),
            None => Ok(()),
        }
    }

    fn command(&self, node: Node<'_>, cwd: &mut Cwd, depth: usize) -> Checked {
        let children = named_children(node);
        for child in children.iter().filter(|child| child.kind() == "file_redirect") {
            self.walk(*child, cwd, depth + 1)?;
        }
        for child in children.iter().filter(|child| child.kind() != "file_redirect") {
            self.walk(*child, &mut cwd.clone(), depth + 1)?;
        }
        let mut words = Vec::new();
        if let Some(name) = node.child_by_field_name("name") {
            words.push(self.word(name));
        }
        let mut cursor = node.walk();
        words.extend(node.children_by_field_name("argument", &mut cursor).map(|n| self.word(n)));
        self.words(&words, cwd)
    }

    // -- Word evaluation ------------------------------------------------------------------------

    pub(crate) fn word(&self, node: Node<'_>) -> Word {
        let mut buf = WordBuf { lit: String::new(), stop: None };
        let node = match node.kind() {
            "command_name" => node.named_child(0).unwrap_or(node),
            _ => node,
        };
        self.part(node, &mut buf, Some(true));
        let rest = buf.stop.map(|at| self.src.get(at..node.end_byte()).unwrap_or("").to_string());
        Word { lit: buf.lit, rest }
    }

    /// Adds one part of a word; `tilde` is Some(whole word?) when the part starts the word.
    fn part(&self, node: Node<'_>, buf: &mut WordBuf, tilde: Option<bool>) {
        if buf.stop.is_some() {
            return;
        }
        let text = self.text(node);
        match node.kind() {
            "word" => self.plain(node, buf, tilde),
            "raw_string" => {
                let inner = text.strip_prefix('\'').unwrap_or(text);
                buf.lit.push_str(inner.strip_suffix('\'').unwrap_or(inner));
            }
            "string" => self.double_quoted(node, buf),
            "ansi_c_string" => {
                let inner = text.strip_prefix("$'").unwrap_or(text);
                match unescape_ansi_c(inner.strip_suffix('\'').unwrap_or(inner)) {
                    Some(value) => buf.lit.push_str(&value),
                    None => buf.stop = Some(node.start_byte()),
                }
            }
            "number" => buf.lit.push_str(text),
            "concatenation" => {
                let mut cursor = node.walk();
                for (i, child) in node.children(&mut cursor).enumerate() {
                    self.part(child, buf, tilde.and((i == 0).then_some(false)));
                }
            }
            _ if !node.is_named() => buf.lit.push_str(text),
            _ => buf.stop = Some(node.start_byte()),
        }
    }

    /// An unquoted word: escapes undone, a leading `~`/`~/` expanded, stopped at a glob or brace.
    fn plain(&self, node: Node<'_>, buf: &mut WordBuf, tilde: Option<bool>) {
        let start = node.start_byte();
        let mut text = self.text(node);
        if let (Some(whole), Some(after)) = (tilde, text.strip_prefix('~')) {
            if !(after.starts_with('/') || (after.is_empty() && whole)) {
                buf.stop = Some(start);
                return;
            }
            buf.lit.push_str(HOME);
            text = after;
        }
        let offset = start + self.text(node).len() - text.len();
        let mut chars = text.char_indices();
        while let Some((at, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, '\n')) => {}
                    Some((_, escaped)) => buf.lit.push(escaped),
                    None => buf.lit.push('\\'),
                },
                '*' | '?' | '[' | '{' => {
                    buf.stop = Some(offset + at);
                    return;
                }
                _ => buf.lit.push(c),
            }
        }
    }

    /// `"…"`: the text between expansions, unescaped; stops at the first expansion.
    fn double_quoted(&self, node: Node<'_>, buf: &mut WordBuf) {
        let (start, end) = (node.start_byte() + 1, node.end_byte());
        let end = if self.text(node).len() >= 2 && self.text(node).ends_with('"') {
            end - 1
        } else {
            end
        };
        let mut at = start;
        for child in named_children(node) {
            let gap = self.src.get(at..child.start_byte()).unwrap_or("");
            unescape_double_quoted(gap, &mut buf.lit);
            if child.kind() != "string_content" {
                buf.stop = Some(child.start_byte());
                return;
            }
            unescape_double_quoted(self.text(child), &mut buf.lit);
            at = child.end_byte();
        }
        unescape_double_quoted(self.src.get(at..end).unwrap_or(""), &mut buf.lit);
    }

    // -- Commands -------------------------------------------------------------------------------

    /// Checks a simple command given as words (name first).
    fn words(&self, words: &[Word], cwd: &mut Cwd) -> Checked {
        let Some(start) = skip_wrappers(words) else { return Ok(()) };
        let Some(name) = words.get(start).and_then(Word::complete).map(basename) else {
            return Ok(());
        };
        let args = words.get(start + 1..).unwrap_or(&[]);
        let base = cwd.clone();
        let base = base.as_deref();
        let found = match name {
            "cd" | "pushd" | "popd" => {
                *cwd = change_dir(name, args, base);
                None
            }
            "eval" => return self.eval(args, cwd),
            "dd" => dd(args, base),
            "tar" => tar(args, base),
            "unzip" => unzip(args, base),
            "git" => git(args, base),
            "find" => return self.find(args, cwd),
            _ if SHELLS.contains(&name) => return self.shell(args, cwd),
            _ => simple(name, args, base),
        };
        found.map_or(Ok(()), Err)
    }

    /// `bash -c 'script'`: the literal script, parsed again in a child shell.
    fn shell(&self, args: &[Word], cwd: &Cwd) -> Checked {
        let parsed = parse_args(args, &SHELL_OPTS);
        if !parsed.iter().any(|arg| arg.is(&["c"])) {
            return Ok(());
        }
        match operands(&parsed).first().and_then(|word| word.complete()) {
            Some(script) => self.nested(script, &mut cwd.clone()),
            None => Ok(()),
        }
    }

    /// `eval 'script'`: the words joined, parsed again in this shell.
    fn eval(&self, args: &[Word], cwd: &mut Cwd) -> Checked {
        let parts: Option<Vec<&str>> = args.iter().map(Word::complete).collect();
        match parts {
            Some(parts) => self.nested(&parts.join(" "), cwd),
            None => Ok(()),
        }
    }

    fn nested(&self, script: &str, cwd: &mut Cwd) -> Checked {
        if self.nesting >= MAX_NESTED_SCRIPTS {
            return Ok(());
        }
        check_script(script, cwd, self.nesting + 1)
    }

    /// `find START… EXPR`: `-delete` from a virtual start, and the commands of `-exec`/`-ok`
    /// with `{}` standing for the start.
    fn find(&self, args: &[Word], cwd: &Cwd) -> Checked {
        let mut i = 0;
        while let Some(word) = args.get(i).and_then(Word::complete) {
            match word {
                "-H" | "-L" | "-P" => i += 1,
                "-D" => i += 2,
                _ if word.starts_with("-O") => i += 1,
                _ => break,
            }
        }
        let is_expression =
            |word: &Word| is_option(word) || matches!(word.complete(), Some("(" | ")" | "!" | ","));
        let starts_at = i;
        while args.get(i).is_some_and(|word| !is_expression(word)) {
            i += 1;
        }
        let starts = args.get(starts_at..i).unwrap_or(&[]);
        let start = match starts {
            [] => cwd.as_deref().filter(|dir| is_virtual(dir)).map(str::to_string),
            _ => starts.iter().find_map(|word| virtual_path(word, cwd.as_deref())),
        };
        let expression = args.get(i..).unwrap_or(&[]);
        let mut j = 0;
        while let Some(word) = expression.get(j) {
            j += 1;
            match word.complete() {
                Some("-delete") => {
                    if let Some(path) = &start {
                        return Err(Hit::new(path.clone(), "`find -delete`"));
                    }
                }
                Some(action @ ("-exec" | "-execdir" | "-ok" | "-okdir")) => {
                    let rest = expression.get(j..).unwrap_or(&[]);
                    let len = rest
                        .iter()
                        .position(|w| matches!(w.complete(), Some(";" | "+")))
                        .unwrap_or(rest.len());
                    let in_dir = action.ends_with("dir");
                    self.find_exec(rest.get(..len).unwrap_or(&[]), start.as_deref(), in_dir, cwd)?;
                    j += len + 1;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn find_exec(&self, command: &[Word], start: Option<&str>, in_dir: bool, cwd: &Cwd) -> Checked {
        let found = match start {
            Some(path) => Word::literal(path),
            None => Word { lit: String::new(), rest: Some("{}".into()) },
        };
        let words: Vec<Word> = command
            .iter()
            .map(|word| if word.is_braces() { found.clone() } else { word.clone() })
            .collect();
        let mut sub_cwd = match in_dir {
            true => start.map(Rc::from),
            false => cwd.clone(),
        };
        self.words(&words, &mut sub_cwd)
    }
}

/// The index of the command run through wrappers (`sudo`, `env`, `xargs`, …); None when there
/// is none or it is not run (`command -v`).
fn skip_wrappers(words: &[Word]) -> Option<usize> {
    let mut i = 0;
    loop {
        match unwrap_once(words, i)? {
            Step::Command => return Some(i),
            Step::Wrapper(next) => i = next,
            Step::NotRun => return None,
        }
    }
}

/// What the word at an index of a simple command is, seen as a possible wrapper.
pub(crate) enum Step {
    /// Not a wrapper: the command itself.
    Command,
    /// A wrapper (`env X=1`, `timeout 5`, `xargs -n1`, …) whose command starts at this index.
    Wrapper(usize),
    /// A wrapper that runs no command (`command -v`).
    NotRun,
}

/// One wrapper peeled off `words[i]`; None when that word is missing or not fully known.
pub(crate) fn unwrap_once(words: &[Word], i: usize) -> Option<Step> {
    let name = basename(words.get(i)?.complete()?);
    let opts = match name {
        "sudo" | "doas" => &SUDO,
        "env" => &ENV,
        "command" | "builtin" | "nohup" | "time" => &NO_OPTS,
        "exec" => &EXEC,
        "nice" => &NICE,
        "timeout" => &TIMEOUT,
        "xargs" => &XARGS,
        _ => return Some(Step::Command),
    };
    let mut next = skip_options(words, i + 1, opts);
    if name == "command" {
        let flags = words.get(i + 1..next).unwrap_or(&[]);
        if flags.iter().any(|w| w.lit.starts_with('-') && w.lit.contains(['v', 'V'])) {
            return Some(Step::NotRun);
        }
    }
    if matches!(name, "sudo" | "doas" | "env") {
        while words.get(next).is_some_and(is_assignment) {
            next += 1;
        }
    }
    if name == "timeout" {
        next += 1;
    }
    Some(Step::Wrapper(next))
}

/// The directory after `cd`/`pushd`/`popd` (None when unknown).
fn change_dir(name: &str, args: &[Word], base: Option<&str>) -> Cwd {
    if name == "popd" {
        return None;
    }
    let parsed = parse_args(args, &NO_OPTS);
    let target = match operands(&parsed).first() {
        None if name == "cd" => Some(HOME.to_string()),
        None => None,
        Some(word) => match word.complete() {
            Some("-") | None => None,
            Some(dir) if name == "pushd" && dir.starts_with(['+', '-']) => None,
            Some(dir) => resolve(dir, base),
        },
    };
    target.filter(|dir| dir.len() <= MAX_CWD_LEN).map(Rc::from)
}

/// The table-driven commands: any operand, destination, in place.
fn simple(name: &str, args: &[Word], base: Option<&str>) -> Option<Hit> {
    if let Some(opts) = lookup(ANY_OPERAND, name) {
        return any_operand(name, &parse_args(args, opts), base);
    }
    if let Some(opts) = lookup(DESTINATION, name) {
        let parsed = parse_args(args, opts);
        if name == "install" && parsed.iter().any(|arg| arg.is(&["d", "directory"])) {
            return any_operand(name, &parsed, base);
        }
        return destination(name, &parsed, base);
    }
    let (_, opts, script) = IN_PLACE.iter().find(|(n, _, _)| *n == name)?;
    in_place(name, &parse_args(args, opts), script, base)
}

fn any_operand(name: &str, args: &[Arg], base: Option<&str>) -> Option<Hit> {
    let mut targets = args.iter().filter_map(|arg| match arg {
        Arg::Operand(word) => Some(word),
        _ => arg.value_of(&["t", "target-directory"]).filter(|_| name == "mv"),
    });
    let path = targets.find_map(|word| virtual_path(word, base))?;
    Some(Hit::new(path, format!("`{name}`")))
}

fn destination(name: &str, args: &[Arg], base: Option<&str>) -> Option<Hit> {
    let target = args.iter().rev().find_map(|arg| arg.value_of(&["t", "target-directory"]));
    let ops = operands(args);
    let here = Word::literal(".");
    let dest = match (target, ops.as_slice()) {
        (Some(dir), _) => dir,
        (None, [_, .., last]) => *last,
        (None, [_]) if name == "ln" => &here,
        _ => return None,
    };
    let path = virtual_path(dest, base)?;
    Some(Hit::new(path, format!("the destination of `{name}`")))
}

fn in_place(name: &str, args: &[Arg], script: &[&str], base: Option<&str>) -> Option<Hit> {
    if !args.iter().any(|arg| arg.is(&["i", "in-place"])) {
        return None;
    }
    let ops = operands(args);
    let has_script = args.iter().any(|arg| arg.is(script));
    let files = if has_script { &ops[..] } else { ops.get(1..).unwrap_or(&[]) };
    let path = files.iter().find_map(|word| virtual_path(word, base))?;
    Some(Hit::new(path, format!("`{name} -i`")))
}

fn dd(args: &[Word], base: Option<&str>) -> Option<Hit> {
    let path = args
        .iter()
        .filter_map(|word| word.strip_prefix("of="))
        .find_map(|word| virtual_path(&word, base))?;
    Some(Hit::new(path, "`dd of=`"))
}

/// Old-style `tar xzf a.tar` → `-x -z -f a.tar`.
fn tar_words(args: &[Word]) -> Vec<Word> {
    let Some((first, rest)) = args.split_first() else { return Vec::new() };
    let old_style = first
        .complete()
        .is_some_and(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphabetic()));
    if !old_style {
        return args.to_vec();
    }
    let mut out = Vec::with_capacity(args.len() + first.lit.len());
    let mut values = rest.iter();
    for c in first.lit.chars() {
        out.push(Word::literal(format!("-{c}")));
        if TAR.short.contains(c) {
            out.extend(values.next().cloned());
        }
    }
    out.extend(values.cloned());
    out
}

fn tar(args: &[Word], base: Option<&str>) -> Option<Hit> {
    let parsed = parse_args(&tar_words(args), &TAR);
    let has = |names: &[&str]| parsed.iter().any(|arg| arg.is(names));
    if has(&["c", "create", "r", "append", "u", "update", "A", "catenate", "concatenate", "delete"])
    {
        let mut archives = parsed.iter().filter_map(|arg| arg.value_of(&["f", "file"]));
        let path = archives.find_map(|word| virtual_path(word, base))?;
        return Some(Hit::new(path, "`tar` archive"));
    }
    if !has(&["x", "extract", "get"]) || has(&["O", "to-stdout"]) {
        return None;
    }
    // Each `-C` is relative to the one before; members land in the last.
    let mut dir = base.map(str::to_string);
    for value in parsed.iter().filter_map(|arg| arg.value_of(&["C", "directory"])) {
        if let Some(path) = virtual_path(value, dir.as_deref()) {
            return Some(Hit::new(path, "`tar` extraction"));
        }
        dir = value.complete().and_then(|d| resolve(d, dir.as_deref()));
    }
    let path = dir.filter(|dir| is_virtual(dir))?;
    Some(Hit::new(path, "`tar` extraction"))
}

fn unzip(args: &[Word], base: Option<&str>) -> Option<Hit> {
    let parsed = parse_args(args, &UNZIP);
    let reads = ["l", "p", "t", "v", "Z", "z", "c"];
    if parsed.iter().any(|arg| arg.is(&reads)) || operands(&parsed).is_empty() {
        return None;
    }
    let path = match parsed.iter().rev().find_map(|arg| arg.value_of(&["d"])) {
        Some(dir) => virtual_path(dir, base)?,
        None => base.filter(|dir| is_virtual(dir))?.to_string(),
    };
    Some(Hit::new(path, "`unzip` extraction"))
}

fn git(args: &[Word], base: Option<&str>) -> Option<Hit> {
    let mut dir = base.map(str::to_string);
    let mut i = 0;
    loop {
        let word = args.get(i)?.complete()?;
        match word {
            "-C" => {
                let target = args.get(i + 1).and_then(Word::complete);
                dir = target.and_then(|target| resolve(target, dir.as_deref()));
                i += 2;
            }
            _ if GIT_GLOBAL_WITH_VALUE.contains(&word) => i += 2,
            _ if word.starts_with('-') => i += 1,
            _ => break,
        }
    }
    let sub = args.get(i)?.complete()?;
    let rest = args.get(i + 1..).unwrap_or(&[]);
    let in_dir = |why: String| dir.clone().filter(|d| is_virtual(d)).map(|d| Hit::new(d, why));
    match sub {
        "clone" => {
            let parsed = parse_args(rest, &GIT_CLONE);
            match operands(&parsed).as_slice() {
                [_, target, ..] => {
                    virtual_path(target, dir.as_deref()).map(|p| Hit::new(p, "`git clone`"))
                }
                [_] => in_dir("`git clone`".into()),
                [] => None,
            }
        }
        "init" => {
            let parsed = parse_args(rest, &GIT_INIT);
            match operands(&parsed).first() {
                Some(target) => {
                    virtual_path(target, dir.as_deref()).map(|p| Hit::new(p, "`git init`"))
                }
                None => in_dir("`git init`".into()),
            }
        }
        _ if GIT_WRITES.contains(&sub) => in_dir(format!("`git {sub}`")),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
