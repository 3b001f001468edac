//! A small syntax highlighter for code blocks: comments, strings, numbers and keywords, one line
//! at a time. It knows a handful of languages by their fence name and falls back to strings and
//! numbers only. Deliberately not syntect: its grammars and regex engine cost megabytes and
//! milliseconds to load for what is, in a chat transcript, a few colours; a wrong colour here is
//! harmless.

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Span;

use super::theme::Theme;

/// The keyword set and comment syntax of a language.
struct Lang {
    keywords: &'static [&'static str],
    line_comment: &'static [&'static str],
}

const RUST: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while",
];
const PYTHON: &[&str] = &[
    "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del", "elif",
    "else", "except", "False", "finally", "for", "from", "global", "if", "import", "in", "is",
    "lambda", "None", "not", "or", "pass", "raise", "return", "True", "try", "while", "with",
    "yield",
];
const JS: &[&str] = &[
    "async",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "default",
    "else",
    "export",
    "extends",
    "false",
    "for",
    "function",
    "if",
    "import",
    "in",
    "interface",
    "let",
    "new",
    "null",
    "of",
    "return",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "type",
    "typeof",
    "undefined",
    "var",
    "while",
];
const GO: &[&str] = &[
    "break",
    "case",
    "chan",
    "const",
    "continue",
    "default",
    "defer",
    "else",
    "false",
    "for",
    "func",
    "go",
    "if",
    "import",
    "interface",
    "map",
    "nil",
    "package",
    "range",
    "return",
    "select",
    "struct",
    "switch",
    "true",
    "type",
    "var",
];
const SHELL: &[&str] = &[
    "case", "do", "done", "echo", "elif", "else", "esac", "exit", "export", "fi", "for",
    "function", "if", "in", "local", "return", "then", "while",
];
const C: &[&str] = &[
    "break",
    "case",
    "char",
    "class",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "false",
    "float",
    "for",
    "if",
    "int",
    "long",
    "namespace",
    "new",
    "nullptr",
    "public",
    "private",
    "return",
    "short",
    "static",
    "struct",
    "switch",
    "true",
    "typedef",
    "unsigned",
    "void",
    "while",
];

fn lang(name: &str) -> Option<Lang> {
    let slashes: &'static [&'static str] = &["//"];
    let hash: &'static [&'static str] = &["#"];
    Some(match name.trim().to_ascii_lowercase().as_str() {
        "rust" | "rs" => Lang { keywords: RUST, line_comment: slashes },
        "python" | "py" => Lang { keywords: PYTHON, line_comment: hash },
        "js" | "javascript" | "ts" | "typescript" | "tsx" | "jsx" => {
            Lang { keywords: JS, line_comment: slashes }
        }
        "go" => Lang { keywords: GO, line_comment: slashes },
        "sh" | "bash" | "shell" | "zsh" | "console" => Lang { keywords: SHELL, line_comment: hash },
        "c" | "cpp" | "c++" | "h" | "java" | "cs" => Lang { keywords: C, line_comment: slashes },
        "toml" | "yaml" | "yml" => Lang { keywords: &["true", "false"], line_comment: hash },
        "json" => Lang { keywords: &["true", "false", "null"], line_comment: &[] },
        _ => return None,
    })
}

/// Highlights one line of code in language `lang_name` (a fence's info string).
pub fn highlight_line(line: &str, lang_name: &str, theme: &Theme) -> Vec<Span<'static>> {
    let base = theme.code();
    if !theme.color {
        return vec![Span::styled(line.to_owned(), Style::default())];
    }
    let lang = lang(lang_name);
    let (keywords, comments) =
        lang.as_ref().map_or((&[][..], &[][..]), |l| (l.keywords, l.line_comment));
    let keyword = Style::default().fg(Color::Blue).add_modifier(Modifier::BOLD);
    let string = Style::default().fg(Color::Green);
    let number = Style::default().fg(Color::Yellow);
    let comment = Style::default().fg(Color::DarkGray).add_modifier(Modifier::ITALIC);

    let mut spans = Vec::new();
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut i = 0;
    let mut plain_start = 0;
    let flush = |spans: &mut Vec<Span<'static>>, from: usize, to: usize| {
        if to > from {
            spans.push(Span::styled(line[from..to].to_owned(), base));
        }
    };
    while i < chars.len() {
        let (at, c) = chars[i];
        let rest = &line[at..];
        if let Some(_m) = comments.iter().find(|m| rest.starts_with(**m)) {
            flush(&mut spans, plain_start, at);
            spans.push(Span::styled(rest.to_owned(), comment));
            return spans;
        }
        if c == '"' || c == '\'' || c == '`' {
            flush(&mut spans, plain_start, at);
            let mut j = i + 1;
            while j < chars.len() && chars[j].1 != c {
                if chars[j].1 == '\\' {
                    j += 1;
                }
                j += 1;
            }
            let end = chars.get(j + 1).map_or(line.len(), |(e, _)| *e);
            spans.push(Span::styled(line[at..end].to_owned(), string));
            i = j + 1;
            plain_start = end;
            continue;
        }
        if c.is_alphanumeric() || c == '_' {
            let mut j = i;
            while j < chars.len() && (chars[j].1.is_alphanumeric() || chars[j].1 == '_') {
                j += 1;
            }
            let end = chars.get(j).map_or(line.len(), |(e, _)| *e);
            let word = &line[at..end];
            let style = if c.is_ascii_digit() {
                Some(number)
            } else if keywords.contains(&word) {
                Some(keyword)
            } else {
                None
            };
            if let Some(style) = style {
                flush(&mut spans, plain_start, at);
                spans.push(Span::styled(word.to_owned(), style));
                plain_start = end;
            }
            i = j;
            continue;
        }
        i += 1;
    }
    flush(&mut spans, plain_start, line.len());
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn keywords_strings_numbers_comments() {
        let theme = Theme { color: true };
        let spans = highlight_line(r#"let x = "a\"b" + 42; // done"#, "rust", &theme);
        let parts: Vec<(&str, Option<Color>)> =
            spans.iter().map(|s| (s.content.as_ref(), s.style.fg)).collect();
        assert_eq!(
            parts,
            [
                ("let", Some(Color::Blue)),
                (" x = ", Some(Color::Magenta)),
                (r#""a\"b""#, Some(Color::Green)),
                (" + ", Some(Color::Magenta)),
                ("42", Some(Color::Yellow)),
                ("; ", Some(Color::Magenta)),
                ("// done", Some(Color::DarkGray)),
            ]
        );
    }

    #[test]
    fn no_color_is_plain() {
        let spans = highlight_line("fn main() {}", "rust", &Theme { color: false });
        assert_eq!(spans, vec![Span::raw("fn main() {}")]);
    }
}
