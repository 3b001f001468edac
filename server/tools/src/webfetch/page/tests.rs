#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic

use super::*;

#[test]
fn content_types_are_classified() {
    let cases: &[(Option<&str>, &[u8], Kind)] = &[
        (Some("text/html; charset=utf-8"), b"<p>x</p>", Kind::Html),
        (Some("TEXT/HTML"), b"", Kind::Html),
        (Some("application/xhtml+xml"), b"", Kind::Html),
        (Some("text/plain"), b"hello", Kind::Text),
        (Some("text/markdown; charset=UTF-8"), b"# x", Kind::Text),
        (Some("text/csv"), b"a,b", Kind::Text),
        (Some("application/json"), b"{}", Kind::Text),
        (Some("application/problem+json"), b"{}", Kind::Text),
        (Some("application/atom+xml"), b"<feed/>", Kind::Text),
        (Some("application/javascript"), b"let x", Kind::Text),
        (Some("image/png"), b"\x89PNG", Kind::Binary("image/png".into())),
        (Some("application/pdf"), b"%PDF-1.7", Kind::Binary("application/pdf".into())),
        (Some("application/zip"), b"PK", Kind::Binary("application/zip".into())),
        // octet-stream and no type at all: the bytes decide.
        (Some("application/octet-stream"), b"plain words", Kind::Text),
        (
            Some("application/octet-stream"),
            b"\x00\x01\x02",
            Kind::Binary("application/octet-stream".into()),
        ),
        (None, b"  <!DOCTYPE html><html></html>", Kind::Html),
        (None, b"<HTML><body>x", Kind::Html),
        (None, b"just text", Kind::Text),
        (Some(""), b"just text", Kind::Text),
    ];
    for (content_type, body, want) in cases {
        assert_eq!(&classify(*content_type, body), want, "{content_type:?} {body:?}");
    }
    assert!(matches!(classify(None, b"\x00\xffbinary"), Kind::Binary(_)));
}

#[test]
fn a_multibyte_character_cut_by_the_sniff_window_is_still_text() {
    let mut body = "a".repeat(1023).into_bytes();
    body.extend_from_slice("é and more".as_bytes());
    assert_eq!(classify(None, &body), Kind::Text);
}

#[test]
fn charsets_are_read_and_decoded() {
    assert_eq!(charset(Some("text/html; charset=\"ISO-8859-1\"")), Some("iso-8859-1".into()));
    assert_eq!(charset(Some("text/html;Charset=utf-8 ")), Some("utf-8".into()));
    assert_eq!(charset(Some("text/html")), None);
    assert_eq!(charset(None), None);

    assert_eq!(decode(Some("text/plain"), "héllo".as_bytes()), ("héllo".into(), None));
    // A BOM is not text; invalid UTF-8 is replaced, not fatal.
    assert_eq!(decode(None, b"\xef\xbb\xbfhi\xff"), ("hi\u{fffd}".into(), None));
    assert_eq!(decode(Some("text/plain; charset=iso-8859-1"), b"caf\xe9"), ("café".into(), None));
    let (text, note) = decode(Some("text/plain; charset=shift_jis"), b"abc");
    assert_eq!(text, "abc");
    assert!(note.unwrap().contains("shift_jis"));
}

#[test]
fn html_becomes_markdown_without_scripts_or_styles() {
    let html = r#"<!doctype html><html><head><title> The  Page </title>
        <style>body { color: red }</style><script>var secret = "in-head";</script></head>
        <body><h1>Main heading</h1><p>Some <b>bold</b> text and
        <a href="https://example.com/docs">a link</a>.</p>
        <script>alert("dropped")</script>
        <h2>Second</h2><ul><li>one</li><li>two</li></ul>
        <noscript>enable js</noscript></body></html>"#;
    let converted = html_to_markdown(html);
    let md = &converted.markdown;
    assert_eq!(converted.title.as_deref(), Some("The Page"));
    assert!(md.contains("# Main heading"), "{md}");
    assert!(md.contains("## Second"), "{md}");
    assert!(md.contains("**bold**"), "{md}");
    assert!(md.contains("[a link](https://example.com/docs)"), "{md}");
    assert!(md.contains("*   one") || md.contains("- one") || md.contains("* one"), "{md}");
    for gone in ["alert", "in-head", "color: red", "enable js", "The  Page"] {
        assert!(!md.contains(gone), "{gone:?} left in: {md}");
    }
    assert_eq!(converted.pruned, 0);
}

#[test]
fn a_page_nested_a_million_deep_is_cut() {
    // Without the cut, html5ever's work grows with the square of the depth (minutes here) and
    // the converter's recursion overflows the thread's stack.
    let depth = 1_000_000;
    let html = format!("<p>top</p>{}deep text{}", "<div>".repeat(depth), "</div>".repeat(depth));
    let converted = html_to_markdown(&html);
    assert!(converted.markdown.contains("top"), "{}", &converted.markdown);
    assert!(!converted.markdown.contains("deep text"));
    assert_eq!(converted.cut_at, Some("<p>top</p>".len() + MAX_DEPTH * "<div>".len()));
}

#[test]
fn a_page_just_within_the_depth_is_whole() {
    // html, body and the divs: the text sits at depth MAX_DEPTH - 1.
    let divs = MAX_DEPTH - 4;
    let html = format!("{}deep text{}", "<div>".repeat(divs), "</div>".repeat(divs));
    let converted = html_to_markdown(&html);
    assert_eq!((converted.pruned, converted.cut_at), (0, None));
    assert!(converted.markdown.contains("deep text"), "{}", converted.markdown);
}

#[test]
fn the_nesting_scan_counts_what_the_parser_nests() {
    let deep = |inner: &str, n: usize| inner.repeat(n);
    // Unclosed paragraphs and list items, void and self-closed tags add no depth.
    assert_eq!(nesting_cut(&deep("<p>para", 10_000), 8), None);
    assert_eq!(nesting_cut(&deep("<li>item", 10_000), 8), None);
    assert_eq!(nesting_cut(&deep("<br><img src=x><hr/><span/>", 1000), 8), None);
    // Closed elements side by side stay shallow.
    assert_eq!(nesting_cut(&deep("<div><b>x</b></div>", 1000), 8), None);
    // Tags inside comments, scripts and quoted attributes are not tags.
    assert_eq!(nesting_cut(&format!("<!--{}-->", deep("<div>", 100)), 8), None);
    assert_eq!(nesting_cut(&format!("<script>{}</script>", deep("<div>", 100)), 8), None);
    assert_eq!(nesting_cut(&format!("<SCRIPT>{}</script >x", deep("<div>", 100)), 8), None);
    assert_eq!(nesting_cut(&deep("<a title='>'>x</a>", 100), 8), None);
    assert_eq!(nesting_cut("a < b and 1<2", 0), None);
    // Nine open divs go one past 8: cut at the ninth.
    assert_eq!(nesting_cut(&deep("<div>", 9), 8), Some(8 * 5));
    assert_eq!(nesting_cut(&deep("<DIV class=\"a>b\">", 9), 8), Some(8 * 17));
}

#[test]
fn the_tree_is_cut_at_its_depth_and_breadth() {
    let converter = htmd::HtmlToMarkdown::builder().build();
    let tree = converter.html_to_tree(&format!("{}x", "<div>".repeat(50))).unwrap();
    // document > html > body > 50 divs > text: below depth 10, one subtree goes.
    assert_eq!(prune(&tree, 10, MAX_CHILDREN), 1);
    assert!(!converter.tree_to_markdown(&tree).contains('x'));

    // A run of like inline siblings: htmd merges them in time quadratic in their number.
    let html = "<b>x</b>".repeat(MAX_CHILDREN * 4);
    let converted = html_to_markdown(&html);
    assert_eq!(converted.pruned, MAX_CHILDREN * 3, "the body keeps MAX_CHILDREN children");
    assert_eq!(converted.markdown.matches('x').count(), MAX_CHILDREN);
}

#[test]
fn bounded_cuts_on_a_character_boundary() {
    assert_eq!(bounded("short".into(), 10), ("short".into(), false));
    assert_eq!(bounded("abcdef".into(), 3), ("abc".into(), true));
    // "é" is two bytes: a cut at 2 would split it.
    assert_eq!(bounded("aéb".into(), 2), ("a".into(), true));
}
