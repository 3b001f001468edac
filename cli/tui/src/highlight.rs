//! Syntax highlighting of code blocks with syntect: Sublime Text's grammars (dozens of languages,
//! found by a fence's info string, a language's name or its file extension: `rust`, `rs`), each block parsed line by line with its
//! state carried across lines, so a multi-line string or comment is coloured as one.
//!
//! Why syntect and not tree-sitter-highlight: tree-sitter needs one grammar crate (a C parser
//! compiled at build time) per language, so a few languages cost minutes of build and every new
//! one a dependency; syntect brings all of its default grammars in one bundled dump, and with
//! `regex-fancy` its regex engine is pure Rust (no oniguruma C build). Its price is a one-off
//! load of that dump (~140 ms in the release build under load, done lazily on the first coloured
//! code block, [`syntaxes`]) and a parser much slower than a hand-written tokenizer (~200 µs a
//! short line), which the bounds below and the block cache ([`BlockCache`]) keep off the frame
//! path of a streaming answer; a long transcript's first render (an attach) pays it in full. It replaces a tokenizer that knew no grammar (it
//! coloured a Rust lifetime `'a` as the start of a string).
//!
//! Colours: syntect's themes are RGB; the TUI uses only the terminal's named colours
//! ([`super::theme`]), so instead of a theme each token's scope (`keyword`, `string.quoted`, …)
//! is mapped onto that palette ([`style_for`]) and the screen follows a light or dark terminal.

use std::sync::{Mutex, OnceLock};

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Span;
use syntect::parsing::{ParseState, Scope, ScopeStack, SyntaxReference, SyntaxSet};

use super::theme::Theme;

/// Lines of a block highlighted at most; the rest is shown plain. syntect with fancy-regex is
/// slow: about 5,000 short lines a second on this shared 2-core machine (`scripts/bench.sh tui`:
/// 2,000 lines of Rust cost ~350 ms), so 200 lines is a one-off of ~40 ms for a block (then
/// cached, [`BlockCache`]) — two or three frames, not a stall.
pub const MAX_HIGHLIGHT_LINES: usize = 200;

/// Bytes of a block highlighted at most (the lines up to the one that would pass it); the rest is
/// shown plain. Bounds what [`MAX_HIGHLIGHT_LINES`] cannot: a few minified lines of megabytes,
/// on which a backtracking regex can take seconds.
pub const MAX_HIGHLIGHT_BYTES: usize = 16 * 1024;

/// Blocks whose highlighting is remembered. An answer is re-rendered on every streamed delta and
/// the whole transcript on a resize; with the cache, a block that did not change costs a lookup
/// and one growing at its end (a streaming block) only its new lines. 256 blocks covers the
/// code of a long session's recent answers; beyond it the least recently used is dropped. Each
/// entry holds at most a capped block, so the worst case is 256 × 16 KiB of text and its spans
/// (some megabytes, for a session of 256 maximal blocks); a chat's blocks are a few KiB.
pub const HIGHLIGHT_CACHE_BLOCKS: usize = 256;

/// The bundled grammars, loaded on first use.
fn syntaxes() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(SyntaxSet::load_defaults_newlines)
}

/// The grammar for a fence's info string (`rust`, `py`, `C++`) or a file extension, if any.
/// Aliases cover common fence names the bundled set lacks (TypeScript reads well as JavaScript).
fn syntax_for(token: &str) -> Option<&'static SyntaxReference> {
    let token = token.trim().to_ascii_lowercase();
    let token = match token.as_str() {
        "" | "text" | "txt" | "plain" | "plaintext" => return None,
        "shell" | "console" | "zsh" | "sh" | "shellscript" => "bash",
        "ts" | "typescript" | "tsx" | "jsx" | "mjs" | "cjs" => "js",
        "c++" | "hpp" | "cxx" => "cpp",
        "golang" => "go",
        "yml" => "yaml",
        other => other,
    };
    let set = syntaxes();
    set.find_syntax_by_token(token).filter(|s| s.name != "Plain Text").or_else(|| {
        if token == "bash" {
            set.find_syntax_by_token("sh")
        } else {
            None
        }
    })
}

/// Scope prefixes and their palette entry, innermost scope first: the first scope of a token's
/// stack that matches one of these decides (so an escape inside a string is not the string's
/// colour, and punctuation inside a comment is the comment's).
fn rules() -> &'static [(Scope, Option<Class>)] {
    static RULES: OnceLock<Vec<(Scope, Option<Class>)>> = OnceLock::new();
    RULES.get_or_init(|| {
        [
            ("comment", Some(Class::Comment)),
            ("constant.character.escape", Some(Class::Escape)),
            ("string", Some(Class::Str)),
            ("constant", Some(Class::Constant)),
            // Operators are punctuation, not words: the code's own colour.
            ("keyword.operator", None),
            ("keyword", Some(Class::Keyword)),
            ("storage", Some(Class::Keyword)),
            ("entity.name.function", Some(Class::Function)),
            ("support.function", Some(Class::Function)),
            ("variable.function", Some(Class::Function)),
            ("entity.name", Some(Class::Type)),
            ("support.type", Some(Class::Type)),
            ("support.class", Some(Class::Type)),
            ("entity.other.inherited-class", Some(Class::Type)),
        ]
        .into_iter()
        .filter_map(|(s, c)| Scope::new(s).ok().map(|s| (s, c)))
        .collect()
    })
}

/// What a token is, as far as colour goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Comment,
    Str,
    Escape,
    Constant,
    Keyword,
    Function,
    Type,
}

/// A token's style from its scope stack; `base` (the code colour) for anything unmapped.
fn style_for(stack: &[Scope], base: Style) -> Style {
    let class = stack.iter().rev().find_map(|scope| {
        rules().iter().find(|(prefix, _)| prefix.is_prefix_of(*scope)).map(|(_, class)| *class)
    });
    match class.flatten() {
        None => base,
        Some(Class::Comment) => Style::default().fg(Color::DarkGray).add_modifier(Modifier::ITALIC),
        Some(Class::Str) => Style::default().fg(Color::Green),
        Some(Class::Escape) => Style::default().fg(Color::Cyan),
        Some(Class::Constant) => Style::default().fg(Color::Yellow),
        Some(Class::Keyword) => Style::default().fg(Color::Blue).add_modifier(Modifier::BOLD),
        Some(Class::Function) => Style::default().fg(Color::Cyan),
        Some(Class::Type) => Style::default().fg(Color::Cyan).add_modifier(Modifier::BOLD),
    }
}

/// The lines of `body` (a code block without its fences), each as styled spans, in the language
/// named by `lang`. Plain (the code colour) for an unknown language, without colour, and past
/// [`MAX_HIGHLIGHT_LINES`]/[`MAX_HIGHLIGHT_BYTES`].
pub fn highlight_block(body: &str, lang: &str, theme: &Theme) -> Vec<Vec<Span<'static>>> {
    let base = theme.code();
    let lines: Vec<&str> = body.trim_end_matches('\n').split('\n').collect();
    let plain = |l: &str| vec![Span::styled(l.to_owned(), base)];
    let syntax = if theme.color { syntax_for(lang) } else { None };
    let Some(syntax) = syntax else {
        return lines.into_iter().map(plain).collect();
    };
    // The highlighted part: whole lines, within both bounds.
    let mut bytes = 0usize;
    let coloured = lines
        .iter()
        .take(MAX_HIGHLIGHT_LINES)
        .take_while(|l| {
            bytes += l.len() + 1;
            bytes <= MAX_HIGHLIGHT_BYTES
        })
        .count();
    // A streaming block's last line is still being written: it is not remembered.
    let complete = if body.ends_with('\n') { coloured } else { coloured.min(lines.len() - 1) };
    let mut out = cache().lock().map_or_else(
        // A panic while holding the lock cannot leave a wrong answer behind, only a lost memo.
        |_| highlight_lines(syntax, &lines[..coloured], base, None),
        |mut cache| cache.highlight(syntax, lang, &lines[..coloured], complete, base),
    );
    out.extend(lines[coloured..].iter().map(|l| plain(l)));
    out
}

/// The process-wide [`BlockCache`] (a memo: results never depend on what it holds).
fn cache() -> &'static Mutex<BlockCache> {
    static CACHE: OnceLock<Mutex<BlockCache>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(BlockCache::default()))
}

/// A parse resumed after some lines: the parser's and the scopes' state at that point.
#[derive(Clone)]
struct Resume {
    parse: ParseState,
    scopes: ScopeStack,
}

/// Highlights `lines`, resuming from `from` (the state after the lines before them) or from the
/// grammar's start; returns the spans and the state after the last line.
fn highlight_from(
    syntax: &SyntaxReference,
    lines: &[&str],
    base: Style,
    from: Option<Resume>,
) -> (Vec<Vec<Span<'static>>>, Resume) {
    let set = syntaxes();
    let mut state = from
        .unwrap_or_else(|| Resume { parse: ParseState::new(syntax), scopes: ScopeStack::new() });
    let mut out = Vec::with_capacity(lines.len());
    let mut text = String::new();
    for line in lines {
        // The "newlines" grammars match each line with its `\n`.
        text.clear();
        text.push_str(line);
        text.push('\n');
        let Ok(ops) = state.parse.parse_line(&text, set) else {
            // A grammar the parser cannot run here: this line plain, the next from a fresh state.
            out.push(vec![Span::styled((*line).to_owned(), base)]);
            state = Resume { parse: ParseState::new(syntax), scopes: ScopeStack::new() };
            continue;
        };
        let mut spans: Vec<Span<'static>> = Vec::new();
        let mut at = 0;
        let mut push = |spans: &mut Vec<Span<'static>>, to: usize, style: Style| {
            let to = to.min(line.len());
            if to > at {
                match spans.last_mut() {
                    Some(last) if last.style == style => {
                        last.content.to_mut().push_str(&line[at..to])
                    }
                    _ => spans.push(Span::styled(line[at..to].to_owned(), style)),
                }
                at = to;
            }
        };
        for (pos, op) in ops {
            let style = style_for(state.scopes.as_slice(), base);
            push(&mut spans, pos, style);
            // A malformed pop leaves the stack as it was: at worst a wrong colour.
            let _ = state.scopes.apply(&op);
        }
        let style = style_for(state.scopes.as_slice(), base);
        push(&mut spans, line.len(), style);
        out.push(spans);
    }
    (out, state)
}

fn highlight_lines(
    syntax: &SyntaxReference,
    lines: &[&str],
    base: Style,
    from: Option<Resume>,
) -> Vec<Vec<Span<'static>>> {
    highlight_from(syntax, lines, base, from).0
}

/// A highlighted block: its language, its lines, their spans and the parser's state after them.
struct Entry {
    lang: String,
    base: Style,
    lines: Vec<String>,
    spans: Vec<Vec<Span<'static>>>,
    end: Resume,
    used: u64,
}

/// Highlighted blocks, at most [`HIGHLIGHT_CACHE_BLOCKS`], the least recently used dropped first.
/// A block whose first lines are an entry's lines resumes from that entry's state: a streaming
/// block re-rendered on each delta parses only its new lines.
#[derive(Default)]
pub struct BlockCache {
    entries: Vec<Entry>,
    clock: u64,
}

impl BlockCache {
    /// How many blocks are remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The spans of `lines`, of which the first `complete` are final (remembered) and the rest
    /// still growing (parsed from the remembered state, not kept).
    fn highlight(
        &mut self,
        syntax: &SyntaxReference,
        lang: &str,
        lines: &[&str],
        complete: usize,
        base: Style,
    ) -> Vec<Vec<Span<'static>>> {
        let complete = complete.min(lines.len());
        if complete == 0 {
            return highlight_lines(syntax, lines, base, None);
        }
        self.clock += 1;
        let is_prefix = |e: &Entry| {
            e.lang == lang
                && e.base == base
                && e.lines.len() <= complete
                && e.lines.iter().zip(lines).all(|(a, b)| a == b)
        };
        let best = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| is_prefix(e))
            .max_by_key(|(_, e)| e.lines.len())
            .map(|(i, _)| i);
        let i = match best {
            Some(i) => i,
            None => {
                let (spans, end) = highlight_from(syntax, &lines[..complete], base, None);
                self.insert(Entry {
                    lang: lang.to_owned(),
                    base,
                    lines: lines[..complete].iter().map(|l| (*l).to_owned()).collect(),
                    spans,
                    end,
                    used: self.clock,
                })
            }
        };
        let clock = self.clock;
        let entry = &mut self.entries[i];
        entry.used = clock;
        let known = entry.lines.len();
        if known < complete {
            // The block grew: parse the new lines and remember the longer block in its place.
            let (more, end) =
                highlight_from(syntax, &lines[known..complete], base, Some(entry.end.clone()));
            entry.lines.extend(lines[known..complete].iter().map(|l| (*l).to_owned()));
            entry.spans.extend(more);
            entry.end = end;
        }
        let mut out = entry.spans.clone();
        if complete < lines.len() {
            out.extend(highlight_lines(syntax, &lines[complete..], base, Some(entry.end.clone())));
        }
        out
    }

    /// Adds `entry` (dropping the least recently used one when full); returns its index.
    fn insert(&mut self, entry: Entry) -> usize {
        if self.entries.len() >= HIGHLIGHT_CACHE_BLOCKS {
            if let Some((i, _)) = self.entries.iter().enumerate().min_by_key(|(_, e)| e.used) {
                self.entries.swap_remove(i);
            }
        }
        self.entries.push(entry);
        self.entries.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const COLOR: Theme = Theme { color: true };

    /// Each span's text and foreground colour, the block's lines joined.
    fn parts(body: &str, lang: &str) -> Vec<(String, Option<Color>)> {
        highlight_block(body, lang, &COLOR)
            .into_iter()
            .flatten()
            .map(|s| (s.content.into_owned(), s.style.fg))
            .collect()
    }

    fn colour_of(parts: &[(String, Option<Color>)], text: &str) -> Option<Color> {
        parts.iter().find(|(t, _)| t.contains(text)).and_then(|(_, c)| *c)
    }

    #[test]
    fn a_rust_lifetime_is_not_a_string() {
        let p = parts("fn first<'a>(x: &'a str) -> &'a str { x }", "rust");
        let lifetimes: Vec<_> = p.iter().filter(|(t, _)| t.contains("'a")).collect();
        assert!(!lifetimes.is_empty(), "{p:?}");
        for (text, colour) in lifetimes {
            assert_ne!(*colour, Some(Color::Green), "{text:?} coloured as a string in {p:?}");
        }
        // The code after the lifetimes is not swallowed by a string either.
        assert_eq!(p.last(), Some(&(" { x }".to_owned(), Some(Color::Magenta))), "{p:?}");
    }

    #[test]
    fn strings_keywords_numbers_and_comments_are_coloured() {
        let p = parts("let x = \"a\\\"b\" + 42; // done", "rs");
        assert_eq!(colour_of(&p, "let"), Some(Color::Blue), "{p:?}");
        assert_eq!(colour_of(&p, "\"a"), Some(Color::Green), "{p:?}");
        assert_eq!(colour_of(&p, "42"), Some(Color::Yellow), "{p:?}");
        assert_eq!(colour_of(&p, "done"), Some(Color::DarkGray), "{p:?}");
        let py = parts("def f():\n    return 'x'", "python");
        assert_eq!(colour_of(&py, "def"), Some(Color::Blue), "{py:?}");
        assert_eq!(colour_of(&py, "return"), Some(Color::Blue), "{py:?}");
        assert_eq!(colour_of(&py, "x"), Some(Color::Green), "{py:?}");
    }

    #[test]
    fn a_comment_spanning_lines_is_one_comment() {
        let p = parts("/* one\nlet two = 2;\n*/ let three = 3;", "c");
        assert_eq!(colour_of(&p, "let two"), Some(Color::DarkGray), "{p:?}");
        assert_eq!(colour_of(&p, "3"), Some(Color::Yellow), "{p:?}");
    }

    #[test]
    fn an_unknown_language_and_no_colour_are_plain() {
        let body = "let x = \"s\"; // c\nfn y() {}";
        let plain: Vec<Vec<Span<'static>>> =
            body.split('\n').map(|l| vec![Span::styled(l.to_owned(), COLOR.code())]).collect();
        assert_eq!(highlight_block(body, "no-such-language", &COLOR), plain);
        assert_eq!(highlight_block(body, "", &COLOR), plain);
        let none = Theme { color: false };
        let bare: Vec<Vec<Span<'static>>> =
            body.split('\n').map(|l| vec![Span::raw(l.to_owned())]).collect();
        assert_eq!(highlight_block(body, "rust", &none), bare);
    }

    #[test]
    fn lines_past_the_caps_are_plain() {
        let line = "let s = \"x\";";
        let body = vec![line; MAX_HIGHLIGHT_LINES + 3].join("\n");
        let out = highlight_block(&body, "rust", &COLOR);
        assert_eq!(out.len(), MAX_HIGHLIGHT_LINES + 3);
        assert!(out[MAX_HIGHLIGHT_LINES - 1].len() > 1, "{:?}", out[MAX_HIGHLIGHT_LINES - 1]);
        for l in &out[MAX_HIGHLIGHT_LINES..] {
            assert_eq!(*l, vec![Span::styled(line.to_owned(), COLOR.code())]);
        }
        // One line over the byte cap: nothing of the block is coloured.
        let long = format!("let s = \"{}\";\nlet t = 1;", "y".repeat(MAX_HIGHLIGHT_BYTES));
        let out = highlight_block(&long, "rust", &COLOR);
        assert!(out.iter().all(|l| l.len() == 1 && l[0].style == COLOR.code()), "{out:?}");
    }

    #[test]
    fn a_growing_block_resumes_and_matches_a_fresh_parse() {
        let Some(rust) = syntax_for("rust") else { panic!("no rust grammar") };
        let base = COLOR.code();
        let full = ["/* a", "still comment */", "let x = 1;", "let s = \"q\";"];
        let fresh = highlight_lines(rust, &full, base, None);
        let mut cache = BlockCache::default();
        // Streaming: the third line is half written, then whole, then the block ends.
        let partial = ["/* a", "still comment */", "let x"];
        let first = cache.highlight(rust, "rust", &partial, 2, base);
        assert_eq!(&first[..2], &fresh[..2]);
        assert_eq!(cache.entries[0].lines.len(), 2, "a growing last line is not remembered");
        let grown = cache.highlight(rust, "rust", &full, full.len(), base);
        assert_eq!(cache.len(), 1, "the grown block replaces its prefix");
        assert_eq!(grown, fresh);
        assert_eq!(cache.highlight(rust, "rust", &full, full.len(), base), fresh);
    }

    #[test]
    fn the_cache_keeps_at_most_its_bound() {
        let Some(rust) = syntax_for("rust") else { panic!("no rust grammar") };
        let base = COLOR.code();
        let mut cache = BlockCache::default();
        let blocks: Vec<String> =
            (0..HIGHLIGHT_CACHE_BLOCKS + 10).map(|i| format!("let v{i} = {i};")).collect();
        for b in &blocks {
            cache.highlight(rust, "rust", &[b.as_str()], 1, base);
        }
        assert_eq!(cache.len(), HIGHLIGHT_CACHE_BLOCKS);
        // The oldest went first; the newest is still there (a hit adds nothing).
        let newest = blocks[blocks.len() - 1].as_str();
        cache.highlight(rust, "rust", &[newest], 1, base);
        assert_eq!(cache.len(), HIGHLIGHT_CACHE_BLOCKS);
        assert!(!cache.entries.iter().any(|e| e.lines[0] == blocks[0]));
    }
}
