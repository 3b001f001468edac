//! Command output as it is kept and streamed: a UTF-8 decoder that never splits a multi-byte
//! character across chunks, and a capped buffer that keeps the head and the tail.
//!
//! Design choice: the cap keeps both ends because a build or test run puts its command line and
//! first error at the top and its summary at the bottom; the middle is what the model can most
//! afford to lose. The note says how much was cut so the model can re-run with a filter.

/// Bytes of output kept from the start of a command's output, in its result (and so in the
/// session's log). The model sees less: the harness cuts every tool result to its own cap (30,000
/// characters by default) in the middle, so the log keeps what the model was not shown.
pub const OUTPUT_HEAD_BYTES: usize = 64 * 1024;
/// Bytes of output kept from the end of a command's output.
pub const OUTPUT_TAIL_BYTES: usize = 64 * 1024;

/// Decodes a byte stream into text chunk by chunk. An incomplete character at the end of a chunk
/// waits for the next one; invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Decodes `chunk` after whatever was pending; returns the text that is complete.
    pub fn push(&mut self, chunk: &[u8]) -> String {
        self.pending.extend_from_slice(chunk);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    rest = &[];
                    break;
                }
                Err(err) => {
                    let valid = err.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&rest[..valid]));
                    match err.error_len() {
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &rest[valid + bad..];
                        }
                        // An incomplete sequence at the end: keep it for the next chunk.
                        None => {
                            rest = &rest[valid..];
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Flushes what is left at end of stream (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

/// Output kept up to a cap: the first `head_cap` bytes and the last `tail_cap` bytes, with the
/// count of what was cut in between.
#[derive(Debug)]
pub struct CappedOutput {
    head: String,
    tail: String,
    head_cap: usize,
    tail_cap: usize,
    cut: usize,
}

impl Default for CappedOutput {
    fn default() -> Self {
        CappedOutput::new(OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES)
    }
}

impl CappedOutput {
    /// A buffer keeping `head_cap` bytes from the start and `tail_cap` from the end.
    pub fn new(head_cap: usize, tail_cap: usize) -> Self {
        CappedOutput { head: String::new(), tail: String::new(), head_cap, tail_cap, cut: 0 }
    }

    /// Appends text.
    pub fn push(&mut self, text: &str) {
        let mut text = text;
        if self.head.len() < self.head_cap {
            let room = floor_char_boundary(text, self.head_cap - self.head.len());
            self.head.push_str(&text[..room]);
            text = &text[room..];
            if text.is_empty() {
                return;
            }
            // The head is full (up to a character boundary): the rest goes to the tail.
            self.head_cap = self.head.len();
        }
        self.tail.push_str(text);
        // Trimmed once it holds twice its cap, not at every push: a command printing gigabytes
        // in small chunks would otherwise move the whole tail for each one.
        if self.tail.len() > 2 * self.tail_cap {
            self.trim_tail();
        }
    }

    fn trim_tail(&mut self) {
        if self.tail.len() > self.tail_cap {
            let excess = self.tail.len() - self.tail_cap;
            let drop = ceil_char_boundary(&self.tail, excess);
            self.cut += drop;
            self.tail.drain(..drop);
        }
    }

    /// Bytes dropped from the middle so far.
    pub fn cut_bytes(&self) -> usize {
        self.cut + self.tail.len().saturating_sub(self.tail_cap)
    }

    /// The kept text, with a note where the middle was cut.
    pub fn into_string(mut self) -> String {
        self.trim_tail();
        if self.cut == 0 {
            return self.head + &self.tail;
        }
        let mut out = self.head;
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "\n... [{} bytes of output cut from the middle; re-run with a filter such as \
             `| tail`, `| grep`, or redirect to a file and Read parts of it] ...\n\n",
            self.cut
        ));
        out.push_str(&self.tail);
        out
    }
}

/// The largest index `<= at` that is a char boundary of `s`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    let mut i = at;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest index `>= at` that is a char boundary of `s`.
fn ceil_char_boundary(s: &str, at: usize) -> usize {
    let mut i = at.min(s.len());
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_stream_keeps_split_characters_whole() {
        let bytes = "aé€😀b".as_bytes();
        let mut dec = Utf8Stream::default();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&dec.push(std::slice::from_ref(b)));
        }
        out.push_str(&dec.finish());
        assert_eq!(out, "aé€😀b");
    }

    #[test]
    fn utf8_stream_replaces_invalid_bytes() {
        let mut dec = Utf8Stream::default();
        let out = dec.push(b"a\xffb\xe2\x82");
        assert_eq!(out, "a\u{FFFD}b");
        assert_eq!(dec.finish(), "\u{FFFD}");
    }

    #[test]
    fn capped_output_keeps_head_and_tail() {
        let mut buf = CappedOutput::new(10, 10);
        for i in 0..100 {
            buf.push(&format!("{:02}", i % 100));
        }
        assert_eq!(buf.cut_bytes(), 180);
        let text = buf.into_string();
        assert!(text.starts_with("0001020304\n"), "{text}");
        assert!(text.ends_with("9596979899"), "{text}");
        assert!(text.contains("180 bytes of output cut"), "{text}");
    }

    #[test]
    fn capped_output_under_cap_is_verbatim() {
        let mut buf = CappedOutput::new(10, 10);
        buf.push("hello ");
        buf.push("wörld");
        assert_eq!(buf.into_string(), "hello wörld");
    }

    #[test]
    fn capped_output_cuts_on_char_boundaries() {
        let mut buf = CappedOutput::new(3, 3);
        buf.push("éééééééé");
        let text = buf.into_string();
        assert!(text.starts_with("é\n"), "{text}");
        assert!(text.ends_with('é'), "{text}");
    }
}
