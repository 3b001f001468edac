//! Replacing secret values in text before anyone outside the server sees it: the network proxy
//! scrubs the responses of hosts an org secret is injected into (so an upstream that echoes the
//! request back does not hand the credential to the sandbox), and the harness reuses the same
//! [`Scrubber`] for tool results and events.
//!
//! Design choices:
//! - One `regex::bytes::Regex` of the escaped values, longest first: the regex crate compiles a
//!   literal alternation to a multi-substring search (memchr/Teddy), so a body with no secret in
//!   it is scanned at memory speed, and at any position the longest value wins.
//! - Bytes, not text: response bodies need not be UTF-8. [`Scrubber::scrub_str`] is the same
//!   search on a `&str` (replacing whole UTF-8 values with UTF-8 keeps it valid).
//! - Streaming ([`StreamScrub`]) holds back at most `longest value - 1` bytes between chunks:
//!   exactly what a value split across the boundary can have started with, so a match is never
//!   missed and nothing more is delayed.

use std::borrow::Cow;

/// Values shorter than this are not scrubbed: a short "secret" (a PIN, `true`, a port number)
/// would shred every unrelated occurrence of those bytes in logs and bodies, and a value that
/// short is no credential worth the damage. Eight bytes is shorter than any real token.
pub const MIN_SCRUBBED: usize = 8;

/// Replaces each of a set of values with its replacement.
#[derive(Clone)]
pub struct Scrubber {
    /// `None`: nothing to scrub (no value at least [`MIN_SCRUBBED`] long).
    search: Option<regex::bytes::Regex>,
    /// The values, longest first, and their replacements (the regex's alternatives, in order).
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    longest: usize,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber").field("values", &self.pairs.len()).finish_non_exhaustive()
    }
}

impl Scrubber {
    /// A scrubber of `(value, replacement)` pairs; values shorter than [`MIN_SCRUBBED`] are
    /// left out (see there), duplicates keep their first replacement.
    pub fn new(pairs: Vec<(String, String)>) -> Scrubber {
        let mut kept: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(pairs.len());
        for (value, replacement) in pairs {
            if value.len() >= MIN_SCRUBBED && !kept.iter().any(|(v, _)| v == value.as_bytes()) {
                kept.push((value.into_bytes(), replacement.into_bytes()));
            }
        }
        // Stable: equal lengths keep the caller's order.
        kept.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        let longest = kept.first().map_or(0, |(v, _)| v.len());
        let search = if kept.is_empty() {
            None
        } else {
            let alternation: Vec<String> =
                kept.iter().map(|(v, _)| regex::escape(&String::from_utf8_lossy(v))).collect();
            // Escaped literals always compile; a failure (size limit) leaves the scrubber
            // falling back to the plain search below, never to not scrubbing.
            regex::bytes::Regex::new(&alternation.join("|")).ok()
        };
        Scrubber { search, pairs: kept, longest }
    }

    /// Whether there is anything to scrub at all.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Whether scrubbing can change a text's length (some replacement is not as long as its
    /// value): then a `content-length` cannot be passed on.
    pub fn changes_length(&self) -> bool {
        self.pairs.iter().any(|(v, r)| v.len() != r.len())
    }

    /// The longest value scrubbed (0 when none).
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// `text` with every value replaced.
    pub fn scrub_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match self.scrub_bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // Whole UTF-8 values replaced by UTF-8 replacements: still UTF-8.
            Cow::Owned(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
        }
    }

    /// `bytes` with every value replaced.
    pub fn scrub_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        if self.find(bytes, 0).is_none() {
            return Cow::Borrowed(bytes);
        }
        let mut out = Vec::with_capacity(bytes.len());
        self.scrub_into(bytes, bytes.len(), &mut out);
        Cow::Owned(out)
    }

    /// The leftmost match at or after `from`, longest value first: `(start, end, pair index)`.
    fn find(&self, bytes: &[u8], from: usize) -> Option<(usize, usize, usize)> {
        if self.pairs.is_empty() || from > bytes.len() {
            return None;
        }
        match &self.search {
            Some(re) => {
                let m = re.find_at(bytes, from)?;
                let found = &bytes[m.start()..m.end()];
                let index = self.pairs.iter().position(|(v, _)| v == found)?;
                Some((m.start(), m.end(), index))
            }
            None => {
                let mut best: Option<(usize, usize, usize)> = None;
                for (i, (v, _)) in self.pairs.iter().enumerate() {
                    let hit = bytes[from..].windows(v.len()).position(|w| w == v.as_slice());
                    if let Some(at) = hit.map(|p| p + from) {
                        if best.is_none_or(|(s, _, _)| at < s) {
                            best = Some((at, at + v.len(), i));
                        }
                    }
                }
                best
            }
        }
    }

    /// Appends to `out` the scrubbed text of `bytes` from the start up to the first position
    /// at or after `upto` that no match straddles, processing only matches that start before
    /// `upto`; returns that position (the caller keeps the rest).
    fn scrub_into(&self, bytes: &[u8], upto: usize, out: &mut Vec<u8>) -> usize {
        let mut at = 0;
        while let Some((start, end, i)) = self.find(bytes, at) {
            if start >= upto {
                break;
            }
            out.extend_from_slice(&bytes[at..start]);
            out.extend_from_slice(&self.pairs[i].1);
            at = end;
        }
        let cut = upto.max(at);
        out.extend_from_slice(&bytes[at..cut]);
        cut
    }
}

/// A scrubber over a stream of chunks: a value split across chunks is replaced too.
#[derive(Debug)]
pub struct StreamScrub {
    scrubber: std::sync::Arc<Scrubber>,
    /// The tail of what came so far that a value may continue from (< the longest value).
    held: Vec<u8>,
}

impl StreamScrub {
    pub fn new(scrubber: std::sync::Arc<Scrubber>) -> StreamScrub {
        StreamScrub { scrubber, held: Vec::new() }
    }

    /// The scrubbed text that is certain after `chunk`; at most `longest - 1` bytes stay held.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.scrubber.is_empty() {
            return chunk.to_vec();
        }
        let mut all = std::mem::take(&mut self.held);
        all.extend_from_slice(chunk);
        // A match starting before `safe` fits in `all` whole (even the longest value), so
        // everything before it is decided; a match from `safe` on may still grow.
        let safe = all.len().saturating_sub(self.scrubber.longest - 1);
        let mut out = Vec::with_capacity(all.len());
        let cut = self.scrubber.scrub_into(&all, safe, &mut out);
        self.held = all.split_off(cut);
        out
    }

    /// Bytes held back now (for tests of the bound).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The rest, at the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        self.scrubber.scrub_bytes(&held).into_owned()
    }
}

/// [`StreamScrub`] over text chunks (a command's output as it streams): what it hands back is
/// always whole characters, a character cut by the hold-back waiting for its other bytes.
#[derive(Debug)]
pub struct TextStream {
    bytes: StreamScrub,
    /// The start of a character the last output ended inside (at most 3 bytes).
    partial: Vec<u8>,
}

impl TextStream {
    pub fn new(scrubber: std::sync::Arc<Scrubber>) -> TextStream {
        TextStream { bytes: StreamScrub::new(scrubber), partial: Vec::new() }
    }

    /// The scrubbed text that is certain after `chunk` (may be empty).
    pub fn push(&mut self, chunk: &str) -> String {
        let mut out = std::mem::take(&mut self.partial);
        out.extend(self.bytes.push(chunk.as_bytes()));
        if let Err(e) = std::str::from_utf8(&out) {
            if e.error_len().is_none() {
                self.partial = out.split_off(e.valid_up_to());
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The rest, at the end of the stream.
    pub fn finish(&mut self) -> String {
        let mut out = std::mem::take(&mut self.partial);
        out.extend(self.bytes.finish());
        String::from_utf8_lossy(&out).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn scrubber() -> Scrubber {
        Scrubber::new(vec![
            ("s3cr3t-value-123".into(), "[secret API]".into()),
            ("s3cr3t-value".into(), "[secret SHORTER]".into()),
            ("ghp_abcdefgh".into(), "[secret GH]".into()),
            ("short".into(), "[secret SHORT]".into()),
        ])
    }

    #[test]
    fn values_are_replaced_longest_first_and_short_ones_are_left() {
        let s = scrubber();
        assert_eq!(
            s.scrub_str("a s3cr3t-value-123 b s3cr3t-value c ghp_abcdefghghp_abcdefgh short"),
            "a [secret API] b [secret SHORTER] c [secret GH][secret GH] short"
        );
        assert!(matches!(s.scrub_str("nothing here"), Cow::Borrowed(_)));
        assert_eq!(s.scrub_str(""), "");
        assert!(s.changes_length());
        assert_eq!(s.longest(), 16);
        let none = Scrubber::new(vec![("1234".into(), "[secret PIN]".into())]);
        assert!(none.is_empty());
        assert_eq!(none.scrub_str("1234"), "1234");
    }

    #[test]
    fn non_utf8_bodies_are_scrubbed_as_bytes() {
        let s = scrubber();
        let body = b"\xff\xfeghp_abcdefgh\x00";
        assert_eq!(&*s.scrub_bytes(body), b"\xff\xfe[secret GH]\x00");
    }

    /// Every way of cutting a text in two (and in three) gives what the whole text gives.
    #[test]
    fn streaming_matches_the_whole_text_at_every_split_point() {
        let s = Arc::new(scrubber());
        let text =
            b"xs3cr3t-value-123s3cr3t-valueghp_abcdefghs3cr3t-value-12ghp_abcdefg!ghp_abcdefgh";
        let whole = s.scrub_bytes(text).into_owned();
        assert!(whole.windows(11).filter(|w| w.starts_with(b"[secret")).count() >= 4);
        for i in 0..=text.len() {
            for j in i..=text.len() {
                let mut stream = StreamScrub::new(s.clone());
                let mut out = stream.push(&text[..i]);
                assert!(stream.held() < s.longest(), "held {} at {i}", stream.held());
                out.extend(stream.push(&text[i..j]));
                assert!(stream.held() < s.longest(), "held {} at {i},{j}", stream.held());
                out.extend(stream.push(&text[j..]));
                out.extend(stream.finish());
                assert_eq!(
                    String::from_utf8_lossy(&out),
                    String::from_utf8_lossy(&whole),
                    "split at {i} and {j}"
                );
            }
        }
    }

    #[test]
    fn byte_by_byte_streaming_holds_back_less_than_the_longest_value() {
        let s = Arc::new(scrubber());
        let text = b"aaaa s3cr3t-value-123 bbbb";
        let mut stream = StreamScrub::new(s.clone());
        let mut out = Vec::new();
        let mut most = 0;
        for b in text {
            out.extend(stream.push(std::slice::from_ref(b)));
            most = most.max(stream.held());
        }
        out.extend(stream.finish());
        assert_eq!(out, b"aaaa [secret API] bbbb");
        assert_eq!(most, s.longest() - 1, "the bound is reached and not passed");
    }

    #[test]
    fn a_text_stream_hands_back_whole_characters_and_scrubs_across_chunks() {
        let s = Arc::new(scrubber());
        let text = "é s3cr3t-value-123 ü ghp_abcdefgh ✓";
        // Every split of the text into two chunks at a byte that is a char boundary, and
        // chunks of one character: the result is always the scrubbed whole.
        let want = "é [secret API] ü [secret GH] ✓";
        for cut in (0..=text.len()).filter(|i| text.is_char_boundary(*i)) {
            let mut stream = TextStream::new(s.clone());
            let mut got = stream.push(&text[..cut]);
            got.push_str(&stream.push(&text[cut..]));
            got.push_str(&stream.finish());
            assert_eq!(got, want, "cut at {cut}");
        }
        let mut stream = TextStream::new(s.clone());
        let mut got = String::new();
        for c in text.chars() {
            got.push_str(&stream.push(&c.to_string()));
        }
        got.push_str(&stream.finish());
        assert_eq!(got, want);
    }
}
