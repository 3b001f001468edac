//! An incremental Server-Sent Events parser: both providers stream their answers as SSE.
//!
//! Network chunks split the stream anywhere — mid-line, even mid-UTF-8 character — so the parser
//! buffers raw bytes and decodes a line only once its `\n` has arrived (a `\n` byte can never sit
//! inside a multi-byte UTF-8 sequence, so a complete line is always complete UTF-8). Lines end in
//! `\n` or `\r\n`; a lone `\r` is not treated as a line end (no provider we speak to sends one).
//! Fields follow the WHATWG rules: `data:` lines accumulate joined by `\n`, `event:` names the
//! event, lines starting with `:` are comments (keep-alives), `id:`/`retry:` are ignored, and a
//! blank line dispatches the event. At end of stream [`SseParser::finish`] is lenient and
//! dispatches a final event that lacks its closing blank line, since some local servers end that
//! way.

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when one was given.
    pub event: Option<String>,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

/// Incremental SSE parser: feed it byte chunks as they arrive.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// `event:` of the event being built.
    event: Option<String>,
    /// `data:` of the event being built, each line followed by `\n`.
    data: String,
    /// Whether any `data:` field was seen for the event being built.
    has_data: bool,
    /// Whether the start of the stream (and a possible BOM) is behind us.
    started: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        SseParser::default()
    }

    /// Consumes a chunk and returns the events it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&rest[..pos]);
            rest = &rest[pos + 1..];
            let mut line = std::mem::take(&mut self.line);
            if !self.started {
                self.started = true;
                if line.starts_with(BOM) {
                    line.drain(..BOM.len());
                }
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(event) = self.process_line(&line) {
                out.push(event);
            }
        }
        self.line.extend_from_slice(rest);
        if !self.started && self.line.len() >= BOM.len() {
            self.started = true;
            if self.line.starts_with(BOM) {
                self.line.drain(..BOM.len());
            }
        }
        out
    }

    /// Ends the stream: processes an unterminated last line and dispatches a pending event.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if !line.is_empty() {
            if let Some(event) = self.process_line(&line) {
                return Some(event);
            }
        }
        self.dispatch()
    }

    fn process_line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.find(':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&line[..], ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        Some(SseEvent { event, data })
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent { event: event.map(str::to_owned), data: data.to_owned() }
    }

    /// Feeds `input` split at every possible pair of points and checks each split gives `want`.
    fn check_all_splits(input: &[u8], want: &[SseEvent]) {
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let mut p = SseParser::new();
                let mut got = p.feed(&input[..i]);
                got.extend(p.feed(&input[i..j]));
                got.extend(p.feed(&input[j..]));
                got.extend(p.finish());
                assert_eq!(got, want, "split at {i}, {j}");
            }
        }
    }

    #[test]
    fn events_with_names_and_data() {
        let input = b"event: message_start\ndata: {\"a\":1}\n\nevent: ping\ndata: {}\n\n";
        check_all_splits(input, &[ev(Some("message_start"), "{\"a\":1}"), ev(Some("ping"), "{}")]);
    }

    #[test]
    fn crlf_line_endings() {
        let input = b"event: x\r\ndata: one\r\n\r\ndata: two\r\n\r\n";
        check_all_splits(input, &[ev(Some("x"), "one"), ev(None, "two")]);
    }

    #[test]
    fn multi_line_data_is_joined_with_newlines() {
        let input = b"data: first\ndata:second\ndata\ndata:  indented\n\n";
        check_all_splits(input, &[ev(None, "first\nsecond\n\n indented")]);
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let input = b": keep-alive\nid: 7\nretry: 100\ndata: x\n: another\n\n:\n\n";
        check_all_splits(input, &[ev(None, "x")]);
    }

    #[test]
    fn blank_line_without_data_dispatches_nothing_and_resets_event() {
        let input = b"event: lonely\n\ndata: y\n\n";
        check_all_splits(input, &[ev(None, "y")]);
    }

    #[test]
    fn utf8_split_mid_character() {
        let input = "data: héllo — 世界 🎉\n\n".as_bytes();
        check_all_splits(input, &[ev(None, "héllo — 世界 🎉")]);
    }

    #[test]
    fn byte_by_byte_feed() {
        let input = "event: a\r\ndata: 世\r\n\r\ndata: [DONE]\n\n".as_bytes();
        let mut p = SseParser::new();
        let mut got = Vec::new();
        for b in input {
            got.extend(p.feed(std::slice::from_ref(b)));
        }
        got.extend(p.finish());
        assert_eq!(got, vec![ev(Some("a"), "世"), ev(None, "[DONE]")]);
    }

    #[test]
    fn unterminated_last_event_is_dispatched_at_finish() {
        check_all_splits(b"data: one\n\ndata: [DONE]", &[ev(None, "one"), ev(None, "[DONE]")]);
        check_all_splits(b"data: one\n\ndata: two\n", &[ev(None, "one"), ev(None, "two")]);
    }

    #[test]
    fn leading_bom_is_skipped() {
        check_all_splits(b"\xEF\xBB\xBFdata: x\n\n", &[ev(None, "x")]);
    }

    #[test]
    fn value_without_space_after_colon() {
        check_all_splits(b"event:e\ndata:d\n\n", &[ev(Some("e"), "d")]);
    }
}
