//! What `WebFetch` makes of a response body: which kind of content it is (from its
//! `Content-Type`, sniffed when there is none), its text (UTF-8, Latin-1), HTML turned into
//! Markdown, and the Markdown bounded. Pure functions, so every rule is tested without a
//! network.
//!
//! Design choices:
//! - HTML goes through `htmd` (html5ever's parser, the browsers' algorithm), with the tags that
//!   carry no reading matter skipped (`<script>`, `<style>`, …).
//! - A hostile page must not hold a thread for minutes or overflow its stack. Both libraries
//!   are fine on real pages but not on every shape of input: html5ever's work per tag grows
//!   with the depth of open elements (a million nested `<div>`s is quadratic), htmd recurses
//!   once per level and merges runs of like inline siblings in quadratic time. So the HTML is
//!   cut where a linear scan ([`nesting_cut`]) sees it nest deeper than [`MAX_DEPTH`], the parsed
//!   tree is cut at that depth again (the scan is an estimate) and every element keeps at most
//!   [`MAX_CHILDREN`] children; each cut is said in the result.
//! - Only text reaches the model: a type that is not text is refused with its name rather than
//!   decoded into noise.

use std::rc::Rc;

use markup5ever_rcdom::{Node, NodeData};

/// How deep the HTML tree may nest before deeper elements are left out: real pages nest a few
/// dozen levels; the converter recurses once per level on a thread with a 2 MiB stack, and 512
/// levels stay far inside it (see the test `a_page_nested_a_million_deep_is_cut`).
pub const MAX_DEPTH: usize = 512;

/// Children one element keeps at most: a long table or list has a few thousand rows, which
/// are far past the Markdown cap anyway; beyond, htmd's merging of like siblings (quadratic in
/// their number) would dominate.
pub const MAX_CHILDREN: usize = 5000;

/// Elements that never hold content (no end tag).
const VOID_TAGS: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr",
];

/// Elements whose end tag may be left out (`<p>a<p>b`): the parser closes them, so they do not
/// make the page deeper when unclosed.
const OPTIONAL_END_TAGS: &[&str] = &[
    "p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup", "thead", "tbody", "tfoot",
    "colgroup", "caption", "rb", "rt", "rp", "rtc",
];

/// Elements whose content is raw text up to their end tag (no tags inside).
const RAW_TEXT_TAGS: &[&str] =
    &["script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes"];

/// Tags whose content is not for reading: code, styling, embedded objects, and `<head>` (its
/// `<title>` is taken separately).
const SKIPPED_TAGS: &[&str] =
    &["script", "style", "noscript", "template", "head", "svg", "canvas", "iframe", "object"];

/// What a response body is, for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// HTML, converted to Markdown.
    Html,
    /// Text given as it is: plain text, Markdown, JSON, XML, CSV, source code.
    Text,
    /// Anything else (images, PDFs, archives…), named by its media type.
    Binary(String),
}

/// The media type of a `Content-Type` value, lower case, without parameters.
fn media_type(content_type: &str) -> String {
    content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

/// The `charset` parameter of a `Content-Type` value, lower case.
pub fn charset(content_type: Option<&str>) -> Option<String> {
    content_type?.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| value.trim().trim_matches(['"', '\'']).to_ascii_lowercase())
    })
}

/// What `body` is, by its `Content-Type` (`None`: the server sent none, and the first bytes
/// decide).
pub fn classify(content_type: Option<&str>, body: &[u8]) -> Kind {
    let Some(content_type) = content_type.filter(|c| !c.trim().is_empty()) else {
        return sniff(body);
    };
    let media = media_type(content_type);
    let (top, sub) = media.split_once('/').unwrap_or((media.as_str(), ""));
    let textual_application = matches!(
        sub,
        "json"
            | "xml"
            | "javascript"
            | "ecmascript"
            | "x-javascript"
            | "yaml"
            | "x-yaml"
            | "toml"
            | "x-sh"
            | "sql"
            | "graphql"
            | "x-ndjson"
            | "ndjson"
    ) || sub.ends_with("+json")
        || sub.ends_with("+xml");
    match (top, sub) {
        ("text", "html") | ("application", "xhtml+xml") => Kind::Html,
        ("text", _) => Kind::Text,
        ("application", _) if textual_application => Kind::Text,
        // What some servers say of anything; the bytes decide.
        ("application", "octet-stream") | ("binary", _) => match sniff(body) {
            Kind::Binary(_) => Kind::Binary(media),
            kind => kind,
        },
        _ => Kind::Binary(media),
    }
}

/// A body without a (useful) type: HTML if it starts like HTML, text if its start is UTF-8
/// without NUL bytes, binary otherwise.
fn sniff(body: &[u8]) -> Kind {
    let start = &body[..body.len().min(1024)];
    let text = String::from_utf8_lossy(start);
    let lead = text.trim_start_matches('\u{feff}').trim_start().to_ascii_lowercase();
    if lead.starts_with("<!doctype html") || lead.starts_with("<html") {
        return Kind::Html;
    }
    // A multi-byte character cut at the 1024th byte is not a reason to call it binary.
    let valid = match std::str::from_utf8(start) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none(),
    };
    if valid && !start.contains(&0) {
        Kind::Text
    } else {
        Kind::Binary("an unnamed type (the server sent no Content-Type)".into())
    }
}

/// The body as text: UTF-8 (invalid sequences replaced) unless the type names Latin-1, whose
/// bytes are the first 256 code points. The second value notes a charset that was not honoured.
pub fn decode(content_type: Option<&str>, body: &[u8]) -> (String, Option<String>) {
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    match charset(content_type).as_deref() {
        None | Some("utf-8" | "utf8" | "us-ascii" | "ascii") => {
            (String::from_utf8_lossy(body).into_owned(), None)
        }
        Some("iso-8859-1" | "latin1" | "latin-1" | "l1" | "iso_8859-1") => {
            (body.iter().map(|&b| char::from(b)).collect(), None)
        }
        Some(other) => (
            String::from_utf8_lossy(body).into_owned(),
            Some(format!(
                "the page declares charset {other}, which WebFetch does not decode; it was read \
                 as UTF-8, so some characters may be wrong"
            )),
        ),
    }
}

/// A page converted: its title (when it has one), its Markdown, and what was left out to keep
/// the conversion bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    pub title: Option<String>,
    pub markdown: String,
    /// Subtrees removed for nesting deeper than [`MAX_DEPTH`] or past [`MAX_CHILDREN`].
    pub pruned: usize,
    /// The byte offset where the HTML was cut for nesting too deep ([`nesting_cut`]).
    pub cut_at: Option<usize>,
}

/// HTML to Markdown (see the module header).
pub fn html_to_markdown(html: &str) -> Converted {
    let cut_at = nesting_cut(html, MAX_DEPTH);
    let html = cut_at.map_or(html, |at| &html[..at]);
    let converter = htmd::HtmlToMarkdown::builder().skip_tags(SKIPPED_TAGS.to_vec()).build();
    let tree = match converter.html_to_tree(html) {
        Ok(tree) => tree,
        // html5ever does not fail on any input; the io::Error is the converter's signature.
        Err(_) => return Converted { title: None, markdown: html.to_owned(), pruned: 0, cut_at },
    };
    let title = title(&tree);
    let pruned = prune(&tree, MAX_DEPTH, MAX_CHILDREN);
    let markdown = converter.tree_to_markdown(&tree);
    Converted { title, markdown, pruned, cut_at }
}

/// Where `html` first nests deeper than `max` elements, by a linear scan of its tags: the byte
/// offset of the tag that goes too deep, or `None`. An estimate of what the parser will build
/// (void elements, elements whose end tag is optional and self-closed tags add no depth;
/// comments and raw-text content are skipped), erring towards a shallower count.
pub fn nesting_cut(html: &str, max: usize) -> Option<usize> {
    let bytes = html.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(found) = bytes[i..].iter().position(|&b| b == b'<') {
        let start = i + found;
        let rest = &bytes[start + 1..];
        if rest.starts_with(b"!--") {
            i = find(bytes, start + 4, b"-->").map_or(bytes.len(), |end| end + 3);
            continue;
        }
        let closing = rest.first() == Some(&b'/');
        let name_start = start + 1 + usize::from(closing);
        let name_len = bytes[name_start..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-')
            .count();
        if name_len == 0 || !bytes[name_start].is_ascii_alphabetic() {
            i = start + 1;
            continue;
        }
        let name = html[name_start..name_start + name_len].to_ascii_lowercase();
        let end = tag_end(bytes, name_start + name_len);
        let counted =
            !VOID_TAGS.contains(&name.as_str()) && !OPTIONAL_END_TAGS.contains(&name.as_str());
        if closing {
            if counted {
                depth = depth.saturating_sub(1);
            }
            i = end;
            continue;
        }
        let self_closed = end >= 2 && bytes[end - 2] == b'/';
        if RAW_TEXT_TAGS.contains(&name.as_str()) {
            // Up to its end tag (whose own `>` the loop then passes by).
            let close = format!("</{name}");
            i = find_ascii_ci(bytes, end, close.as_bytes()).unwrap_or(bytes.len());
            continue;
        }
        if counted && !self_closed {
            depth += 1;
            if depth > max {
                return Some(start);
            }
        }
        i = end;
    }
    None
}

/// Just past the `>` that ends the tag whose name ends at `from` (quoted attribute values may
/// hold `>`), or the end of the text.
fn tag_end(bytes: &[u8], from: usize) -> usize {
    let mut quote = None;
    for (at, &b) in bytes.iter().enumerate().skip(from) {
        match (quote, b) {
            (None, b'"' | b'\'') => quote = Some(b),
            (Some(q), b) if b == q => quote = None,
            (None, b'>') => return at + 1,
            _ => {}
        }
    }
    bytes.len()
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| from + p)
}

fn find_ascii_ci(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
        .map(|p| from + p)
}

/// The text of the first `<title>`, whitespace collapsed.
fn title(tree: &Rc<Node>) -> Option<String> {
    let mut stack = vec![tree.clone()];
    while let Some(node) = stack.pop() {
        if let NodeData::Element { name, .. } = &node.data {
            if name.local.as_ref() == "title" {
                let mut text = String::new();
                for child in node.children.borrow().iter() {
                    if let NodeData::Text { contents } = &child.data {
                        text.push_str(&contents.borrow());
                    }
                }
                let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
                return (!text.is_empty()).then_some(text);
            }
        }
        stack.extend(node.children.borrow().iter().rev().cloned());
    }
    None
}

/// Removes every node deeper than `max_depth` and every child past the first `max_children`
/// of its parent (iteratively: the tree may be too deep to recurse into); returns how many
/// subtrees were removed.
fn prune(tree: &Rc<Node>, max_depth: usize, max_children: usize) -> usize {
    let mut removed = 0;
    let mut stack = vec![(tree.clone(), 0usize)];
    while let Some((node, depth)) = stack.pop() {
        let mut children = node.children.borrow_mut();
        let keep = if depth >= max_depth { 0 } else { max_children };
        if children.len() > keep {
            removed += children.len() - keep;
            // Dropped here, by rcdom's iterative `Drop`.
            children.truncate(keep);
        }
        stack.extend(children.iter().map(|c| (c.clone(), depth + 1)));
    }
    removed
}

/// `text` cut to at most `max` bytes on a character boundary; whether it was cut.
pub fn bounded(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

#[cfg(test)]
mod tests;
