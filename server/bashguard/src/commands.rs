//! The simple commands of a Bash line, as the org's tool rules judge them (`Bash(git push*)`,
//! see `outboard_org::toolpolicy`).
//!
//! A rule that matched the raw line was beaten by ` git push`, `true; git push`,
//! `/usr/bin/git push` and `c\url`: the shell reads them all as the command the rule names. So the
//! line is parsed with the guard's tree-sitter grammar and each simple command is given as text:
//! its words with quotes and escapes undone, the command name by its basename, joined by single
//! spaces (`"/usr/bin/git" 'push'` is `git push`). Every command of the tree counts: lists,
//! pipelines, subshells, `if`/`case`/loops, function bodies, command and process substitutions,
//! the literal scripts of `bash -c '…'` (and the other shells), `eval '…'` and `alias x='…'`
//! (parsed again, to the guard's depth), and the commands of `find -exec`. A command run through
//! a wrapper (`sudo`, `env X=1`, `command`, `builtin`, `exec`, `nice`, `nohup`, `time`,
//! `timeout`, `xargs`) is given as written and again from each wrapped command on
//! (`timeout 5 git push` also as `git push`).
//!
//! What the tree does not show is not guessed: a word with an expansion or a glob ends the text
//! there and the command is marked incomplete (`git $sub` is `git ` and more); a command whose
//! name is not literal (`$cmd push`), an `eval` or `bash -c` of a non-literal script, a line that
//! does not parse cleanly, one nested too deep or over the guard's length limit give an
//! incomplete empty text: anything may run. A command under `xargs` is incomplete too (its
//! arguments come from stdin). Scripts run from files (`bash x.sh`, `source x`, `make`) and
//! interpreters' own code (`python -c …`) are given as written, their insides unseen.

use tree_sitter::Node;

use crate::guard::{
    basename, named_children, operands, parse, parse_args, unwrap_once, Step, Walker, Word,
    MAX_CHECKED_LEN, MAX_NESTED_SCRIPTS, SHELLS, SHELL_OPTS,
};

/// One simple command of a line, as a rule judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Its words, quotes and escapes undone, the name by its basename, joined by single spaces;
    /// when `complete` is false, only the part known before running (possibly empty).
    pub text: String,
    /// Whether `text` is the whole command; false: more that only run time knows follows.
    pub complete: bool,
    /// The words of `text` (a word may hold spaces); the last is a known prefix when
    /// `complete` is false.
    pub words: Vec<String>,
}

/// The simple commands of `line` (see the module header); never empty for a line that runs
/// anything, and an incomplete empty command when some of it cannot be known.
pub fn commands(line: &str) -> Vec<Command> {
    let mut found = Found::default();
    if line.len() > MAX_CHECKED_LEN {
        found.unknown();
    } else {
        found.script(line, 0);
    }
    found.list
}

#[derive(Default)]
struct Found {
    list: Vec<Command>,
}

impl Found {
    /// Something runs that cannot be known before it does.
    fn unknown(&mut self) {
        self.list.push(Command { text: String::new(), complete: false, words: Vec::new() });
    }

    /// Parses `src` (a line, or a script nested `nesting` deep) and collects its commands.
    fn script(&mut self, src: &str, nesting: usize) {
        if nesting > MAX_NESTED_SCRIPTS {
            return self.unknown();
        }
        let Some(tree) = parse(src) else { return self.unknown() };
        let root = tree.root_node();
        if root.has_error() {
            // Error recovery may read as text what bash runs as a command.
            self.unknown();
        }
        let walker = Walker { src, nesting };
        // An explicit stack: a long `a && b && …` nests as deep as it is long.
        let mut stack = vec![root];
        while let Some(node) = stack.pop() {
            if node.kind() == "command" {
                self.command(&walker, node);
            }
            stack.extend(named_children(node).into_iter().rev());
        }
    }

    fn command(&mut self, walker: &Walker<'_>, node: Node<'_>) {
        let mut words = Vec::new();
        if let Some(name) = node.child_by_field_name("name") {
            words.push(walker.word(name));
        }
        let mut cursor = node.walk();
        words.extend(node.children_by_field_name("argument", &mut cursor).map(|n| walker.word(n)));
        self.words(&words, walker.nesting, false);
    }

    /// A simple command given as words (name first); `more` when arguments are added at run
    /// time (`xargs`).
    fn words(&mut self, words: &[Word], nesting: usize, mut more: bool) {
        if words.is_empty() {
            return;
        }
        self.push(words, more);
        let mut i = 0;
        let name = loop {
            match unwrap_once(words, i) {
                // Not literal: `push` already gave what is known.
                None => return,
                Some(Step::NotRun) => return,
                Some(Step::Command) => break words.get(i).and_then(Word::complete).map(basename),
                Some(Step::Wrapper(next)) => {
                    more |= words.get(i).and_then(Word::complete).map(basename) == Some("xargs");
                    i = next;
                    if let Some(wrapped) = words.get(i..).filter(|rest| !rest.is_empty()) {
                        self.push(wrapped, more);
                    }
                }
            }
        };
        let args = words.get(i + 1..).unwrap_or(&[]);
        match name {
            Some("eval") => self.eval(args, nesting),
            Some("alias") => self.alias(args, nesting),
            Some("find") => self.find_exec(args, nesting),
            Some(shell) if SHELLS.contains(&shell) => self.shell(args, nesting),
            _ => {}
        }
    }

    /// The command's text as far as it is known.
    fn push(&mut self, words: &[Word], more: bool) {
        let mut known = Vec::with_capacity(words.len());
        let mut complete = !more;
        for (at, word) in words.iter().enumerate() {
            match (at, word.complete()) {
                (0, Some(name)) => known.push(basename(name).to_owned()),
                (_, Some(value)) => known.push(value.to_owned()),
                (0, None) => return self.unknown(),
                (_, None) => {
                    known.push(word.lit.clone());
                    complete = false;
                    break;
                }
            }
        }
        let text = known.join(" ");
        self.list.push(Command { text, complete, words: known });
    }

    /// `eval 'script'`: the words joined, parsed again.
    fn eval(&mut self, args: &[Word], nesting: usize) {
        let parts: Option<Vec<&str>> = args.iter().map(Word::complete).collect();
        match parts {
            Some(parts) => self.script(&parts.join(" "), nesting + 1),
            None => self.unknown(),
        }
    }

    /// `bash -c 'script'`: the literal script, parsed again.
    fn shell(&mut self, args: &[Word], nesting: usize) {
        let parsed = parse_args(args, &SHELL_OPTS);
        if !parsed.iter().any(|arg| arg.is(&["c"])) {
            return;
        }
        match operands(&parsed).first().map(|word| word.complete()) {
            Some(Some(script)) => self.script(script, nesting + 1),
            Some(None) => self.unknown(),
            None => {}
        }
    }

    /// `alias x='git push'`: what the alias will run.
    fn alias(&mut self, args: &[Word], nesting: usize) {
        for arg in args {
            match arg.complete() {
                Some(definition) => {
                    if let Some((_, body)) = definition.split_once('=') {
                        self.script(body, nesting + 1);
                    }
                }
                None => self.unknown(),
            }
        }
    }

    /// `find … -exec CMD {} ;`: CMD, with `{}` unknown.
    fn find_exec(&mut self, args: &[Word], nesting: usize) {
        let mut j = 0;
        while let Some(word) = args.get(j) {
            j += 1;
            if !matches!(word.complete(), Some("-exec" | "-execdir" | "-ok" | "-okdir")) {
                continue;
            }
            let rest = args.get(j..).unwrap_or(&[]);
            let len = rest
                .iter()
                .position(|w| matches!(w.complete(), Some(";" | "+")))
                .unwrap_or(rest.len());
            let command: Vec<Word> = rest
                .get(..len)
                .unwrap_or(&[])
                .iter()
                .map(|word| match word.is_braces() {
                    true => Word { lit: String::new(), rest: Some("{}".into()) },
                    false => word.clone(),
                })
                .collect();
            self.words(&command, nesting, false);
            j += len + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// The commands as `text` for complete ones and `text…` for incomplete ones.
    fn seen(line: &str) -> Vec<String> {
        commands(line)
            .into_iter()
            .map(|c| if c.complete { c.text } else { format!("{}…", c.text) })
            .collect()
    }

    #[test]
    fn names_are_normalised_and_every_command_of_a_list_counts() {
        assert_eq!(seen(" git push"), ["git push"]);
        assert_eq!(seen("true; git push"), ["true", "git push"]);
        assert_eq!(seen("/usr/bin/git push"), ["git push"]);
        assert_eq!(seen(r"c\url --version"), ["curl --version"]);
        assert_eq!(seen(r#""git" 'push' "origin""#), ["git push origin"]);
        assert_eq!(seen("a && b || c\nd & e"), ["a", "b", "c", "d", "e"]);
        assert_eq!(seen("X=1 git push"), ["git push"]);
    }

    #[test]
    fn pipelines_subshells_and_substitutions_are_walked() {
        assert_eq!(seen("ls | grep x | git push"), ["ls", "grep x", "git push"]);
        assert_eq!(seen("(cd a && git push)"), ["cd a", "git push"]);
        // The substitution's value is unknown, so `echo`'s argument is.
        assert_eq!(seen("echo $(git push)"), ["echo …", "git push"]);
        assert_eq!(seen("diff <(curl a) b"), ["diff …", "curl a"]);
        assert_eq!(seen("if true; then git push; fi"), ["true", "git push"]);
        assert_eq!(seen("f() { git push; }; f"), ["git push", "f"]);
    }

    #[test]
    fn wrappers_give_the_command_they_run() {
        assert_eq!(seen("env X=1 git push"), ["env X=1 git push", "git push"]);
        assert_eq!(
            seen("timeout -s KILL 5 nice -n 2 git push"),
            ["timeout -s KILL 5 nice -n 2 git push", "nice -n 2 git push", "git push"]
        );
        assert_eq!(seen("sudo -u x /usr/bin/curl a"), ["sudo -u x /usr/bin/curl a", "curl a"]);
        // xargs adds arguments from stdin.
        assert_eq!(seen("echo a | xargs git push"), ["echo a", "xargs git push", "git push…"]);
        assert_eq!(seen("command -v git"), ["command -v git"]);
    }

    #[test]
    fn nested_scripts_are_parsed_again() {
        assert_eq!(seen("bash -c 'git push'"), ["bash -c git push", "git push"]);
        assert_eq!(seen("sh -xc \"true; curl a\""), ["sh -xc true; curl a", "true", "curl a"]);
        assert_eq!(seen("eval 'git push'"), ["eval git push", "git push"]);
        assert_eq!(seen("alias p='git push'"), ["alias p=git push", "git push"]);
        assert_eq!(seen("find . -exec git push {} \\;"), ["find . -exec git push …", "git push …"]);
    }

    #[test]
    fn what_only_run_time_knows_is_marked_incomplete() {
        assert_eq!(seen("$cmd push"), ["…"]);
        assert_eq!(seen("git $sub"), ["git …"]);
        assert_eq!(seen("eval \"$x\""), ["eval …", "…"]);
        assert_eq!(seen("bash -c \"$x\""), ["bash -c …", "…"]);
        assert_eq!(seen("env $X git push"), ["env …", "…"]);
        // A line that does not parse cleanly may run what the tree does not show.
        assert!(seen("git push (").contains(&"…".to_owned()));
        let deep = format!("{}git push", "eval ".repeat(MAX_NESTED_SCRIPTS + 2));
        assert_eq!(seen(&deep).last().map(String::as_str), Some("…"));
        let long = "a".repeat(MAX_CHECKED_LEN + 1);
        assert_eq!(seen(&long), ["…"]);
    }
}
