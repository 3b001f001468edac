//! Reading a command's arguments the way its program does: short option clusters, long options
//! with `=` or a separate value, `--`, and which options take a value (`Opts`).

use super::word::Word;

/// How a command's options take values.
pub(crate) struct Opts {
    /// Short options that take a value: the rest of the cluster or the next word.
    pub(crate) short: &'static str,
    /// Long options that take a value: after `=` or the next word.
    pub(crate) long: &'static [&'static str],
    /// Short options whose value, if any, is the rest of the cluster (`-i.bak`).
    pub(crate) optional: &'static str,
}

impl Opts {
    pub(crate) const fn new(short: &'static str, long: &'static [&'static str]) -> Self {
        Opts { short, long, optional: "" }
    }
}

pub(super) const NO_OPTS: Opts = Opts::new("", &[]);

/// A parsed argument: an option (short as its letter, long without dashes) or an operand.
#[derive(Debug)]
pub(crate) enum Arg {
    Opt(String, Option<Word>),
    Operand(Word),
}

impl Arg {
    pub(crate) fn is(&self, names: &[&str]) -> bool {
        matches!(self, Arg::Opt(name, _) if names.contains(&name.as_str()))
    }

    pub(super) fn value_of(&self, names: &[&str]) -> Option<&Word> {
        match self {
            Arg::Opt(name, value) if names.contains(&name.as_str()) => value.as_ref(),
            _ => None,
        }
    }
}

pub(crate) fn operands(args: &[Arg]) -> Vec<&Word> {
    args.iter()
        .filter_map(|arg| match arg {
            Arg::Operand(word) => Some(word),
            Arg::Opt(..) => None,
        })
        .collect()
}

/// Whether a word is an option (GNU style: options may follow operands, until `--`).
pub(super) fn is_option(word: &Word) -> bool {
    word.lit.starts_with('-') && (word.lit.len() > 1 || word.rest.is_some())
}

/// Parses `words` as GNU-style arguments.
pub(crate) fn parse_args(words: &[Word], opts: &Opts) -> Vec<Arg> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut ended = false;
    while let Some(word) = words.get(i) {
        i += 1;
        if ended || !is_option(word) {
            out.push(Arg::Operand(word.clone()));
        } else if word.complete() == Some("--") {
            ended = true;
        } else if let Some(long) = word.lit.strip_prefix("--") {
            out.push(parse_long(word, long, opts, words, &mut i));
        } else {
            parse_short(word, opts, words, &mut i, &mut out);
        }
    }
    out
}

pub(super) fn parse_long(
    word: &Word,
    long: &str,
    opts: &Opts,
    words: &[Word],
    i: &mut usize,
) -> Arg {
    if let Some((name, value)) = long.split_once('=') {
        let value = Word { lit: value.to_string(), rest: word.rest.clone() };
        return Arg::Opt(name.to_string(), Some(value));
    }
    if word.rest.is_none() && opts.long.contains(&long) {
        let value = words.get(*i).cloned();
        *i += 1;
        return Arg::Opt(long.to_string(), value);
    }
    Arg::Opt(long.to_string(), None)
}

pub(super) fn parse_short(
    word: &Word,
    opts: &Opts,
    words: &[Word],
    i: &mut usize,
    out: &mut Vec<Arg>,
) {
    let cluster = word.lit.get(1..).unwrap_or("");
    for (at, c) in cluster.char_indices() {
        let tail = cluster.get(at + c.len_utf8()..).unwrap_or("");
        let attached = Word { lit: tail.to_string(), rest: word.rest.clone() };
        let has_attached = !tail.is_empty() || word.rest.is_some();
        if opts.short.contains(c) {
            let value = if has_attached {
                Some(attached)
            } else {
                *i += 1;
                words.get(*i - 1).cloned()
            };
            out.push(Arg::Opt(c.to_string(), value));
            return;
        }
        if opts.optional.contains(c) {
            out.push(Arg::Opt(c.to_string(), has_attached.then_some(attached)));
            return;
        }
        out.push(Arg::Opt(c.to_string(), None));
    }
}

/// The index of the first operand from `from` on, skipping options (and their values).
pub(super) fn skip_options(words: &[Word], from: usize, opts: &Opts) -> usize {
    let mut i = from;
    while let Some(word) = words.get(i) {
        if !is_option(word) {
            return i;
        }
        i += 1;
        if word.complete() == Some("--") {
            return i;
        }
        if let Some(long) = word.lit.strip_prefix("--") {
            if word.rest.is_none() && opts.long.contains(&long) {
                i += 1;
            }
            continue;
        }
        let cluster = word.lit.get(1..).unwrap_or("");
        for (at, c) in cluster.char_indices() {
            if opts.optional.contains(c) {
                break;
            }
            if opts.short.contains(c) {
                if at + c.len_utf8() == cluster.len() && word.rest.is_none() {
                    i += 1;
                }
                break;
            }
        }
    }
    i
}

/// `NAME=value`, as `env` and `sudo` take before the command.
pub(super) fn is_assignment(word: &Word) -> bool {
    let Some((name, _)) = word.lit.split_once('=') else { return false };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
