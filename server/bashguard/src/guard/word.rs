//! A shell word as the guard reads it: its literal text after quote removal and escapes, or
//! nothing when an expansion makes it unknown.

/// A shell word as far as it is known: `lit` is its literal value, or the literal prefix before
/// the first expansion or glob, in which case `rest` holds the source text from there on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) lit: String,
    pub(crate) rest: Option<String>,
}

impl Word {
    pub(super) fn literal(lit: impl Into<String>) -> Self {
        Word { lit: lit.into(), rest: None }
    }

    /// The value when fully known.
    pub(crate) fn complete(&self) -> Option<&str> {
        self.rest.is_none().then_some(self.lit.as_str())
    }

    /// `{}` as `find -exec` uses it, quoted or not.
    pub(crate) fn is_braces(&self) -> bool {
        self.complete() == Some("{}") || (self.lit.is_empty() && self.rest.as_deref() == Some("{}"))
    }

    /// The part after `prefix`, keeping what is unknown (`of=/memory/$x` → `/memory/$x`).
    pub(super) fn strip_prefix(&self, prefix: &str) -> Option<Word> {
        let lit = self.lit.strip_prefix(prefix)?;
        Some(Word { lit: lit.to_string(), rest: self.rest.clone() })
    }
}

/// Accumulates a word's literal value until the first part that is not literal.
pub(super) struct WordBuf {
    pub(super) lit: String,
    pub(super) stop: Option<usize>,
}

/// Undoes the escapes of a double-quoted string's text.
pub(super) fn unescape_double_quoted(text: &str, out: &mut String) {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\n') => {}
            Some(n @ ('$' | '`' | '"' | '\\')) => out.push(n),
            Some(n) => {
                out.push('\\');
                out.push(n);
            }
            None => out.push('\\'),
        }
    }
}

/// Decodes the inside of `$'…'`; None for escapes beyond the simple ones.
pub(super) fn unescape_ansi_c(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let decoded = match chars.next()? {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'a' => '\x07',
            'b' => '\x08',
            'e' | 'E' => '\x1b',
            'f' => '\x0c',
            'v' => '\x0b',
            c @ ('\\' | '\'' | '"' | '?') => c,
            _ => return None,
        };
        out.push(decoded);
    }
    Some(out)
}
