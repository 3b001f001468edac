//! Control characters made visible: what the server sends (the model's text, a tool's output, a
//! name, an error) reaches a terminal as text, never as the terminal's commands. ESC, BEL and
//! every other C0 control but `\n` and `\t`, DEL, the C1 controls (U+0080–U+009F) and the bidi
//! controls (U+202A–U+202E, U+2066–U+2069) are written escaped, as `\x1b`, `\u{9b}`,
//! `\u{202e}`: an OSC 52 clipboard write, an OSC 0 title or a screen clear shows as the bytes
//! it is, and no line reads in another order than it is written. Bytes that are not UTF-8 show
//! as `\xNN` too. The client's own styling is not written through it.

use std::io::{self, Write};

/// How a character is written: as it is, or escaped.
pub fn escape_char(c: char, out: &mut String) {
    match c {
        '\n' | '\t' => out.push(c),
        '\u{0}'..='\u{1f}' | '\u{7f}' => out.push_str(&format!("\\x{:02x}", u32::from(c))),
        '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)))
        }
        _ => out.push(c),
    }
}

/// `text` with its control characters escaped (see the module header).
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        escape_char(c, &mut out);
    }
    out
}

/// A writer that escapes what goes through it when `escape` is on (see the module header). A
/// character split across two writes is held until its last byte comes.
pub struct Visible<W: Write> {
    inner: W,
    escape: bool,
    /// The start of a character whose other bytes have not come yet (at most 3 bytes).
    pending: Vec<u8>,
}

impl<W: Write> Visible<W> {
    /// Writes to `inner`, escaping when `escape`.
    pub fn new(inner: W, escape: bool) -> Self {
        Visible { inner, escape, pending: Vec::new() }
    }

    /// The writer inside; a character still pending is dropped.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: Write> Write for Visible<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.escape {
            return self.inner.write(buf);
        }
        self.pending.extend_from_slice(buf);
        let mut out = String::with_capacity(self.pending.len());
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    text.chars().for_each(|c| escape_char(c, &mut out));
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    if let Ok(text) = std::str::from_utf8(good) {
                        text.chars().for_each(|c| escape_char(c, &mut out));
                    }
                    match e.error_len() {
                        // A character cut at the end of the buffer: held for the next write.
                        None => {
                            rest = bad;
                            break;
                        }
                        Some(n) => {
                            for b in &bad[..n] {
                                out.push_str(&format!("\\x{b:02x}"));
                            }
                            rest = &bad[n..];
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        self.inner.write_all(out.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_text_newlines_and_tabs_are_not() {
        let hostile = "a\u{1b}]52;c;aGk=\u{7}b\u{1b}]0;title\u{1b}\\c\u{1b}[2J\u{1b}[H\r\u{9b}31m\
                       \u{202e}evil\u{2066}x\u{2069}\u{7f}\u{0}é中\n\tend";
        assert_eq!(
            visible(hostile),
            "a\\x1b]52;c;aGk=\\x07b\\x1b]0;title\\x1b\\c\\x1b[2J\\x1b[H\\x0d\\u{9b}31m\
             \\u{202e}evil\\u{2066}x\\u{2069}\\x7f\\x00é中\n\tend"
        );
    }

    #[test]
    fn the_writer_escapes_across_split_characters_and_bad_bytes() {
        let mut w = Visible::new(Vec::new(), true);
        let text = "x\u{202e}y\u{1b}[2J";
        let bytes = text.as_bytes();
        // Split inside U+202E's three bytes.
        w.write_all(&bytes[..2]).unwrap();
        w.write_all(&bytes[2..]).unwrap();
        w.write_all(b"\xff!").unwrap();
        assert_eq!(String::from_utf8(w.into_inner()).unwrap(), "x\\u{202e}y\\x1b[2J\\xff!");
        let mut raw = Visible::new(Vec::new(), false);
        raw.write_all(bytes).unwrap();
        assert_eq!(raw.into_inner(), bytes);
    }
}
