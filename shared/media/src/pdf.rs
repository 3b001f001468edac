//! PDFs: page count, a range of pages as a PDF of its own, the pages' text, token estimate.
//!
//! Claude Code's `Read` takes a `pages` range for PDFs and asks for one on a document of more
//! than ten pages; the same rules here ([`PAGES_WITHOUT_RANGE`], [`MAX_RANGE_PAGES`]).

use std::panic::{catch_unwind, AssertUnwindSafe};

use lopdf::content::{Content, Operation};
use lopdf::{dictionary, Document, Object, Stream};

use crate::MediaError;

/// A PDF of at most this many pages is read whole without a `pages` range.
pub const PAGES_WITHOUT_RANGE: u32 = 10;

/// The most pages one read returns.
pub const MAX_RANGE_PAGES: u32 = 20;

/// The bytes of a document block sent at most (the pages picked, as a PDF of their own): past it
/// only the pages' text is sent, with a note. Keeps the tool result one frame of the client
/// protocol; the APIs take up to 32 MB.
pub const MAX_PDF_BYTES: usize = 2 * 1024 * 1024;

/// The bytes of extracted text kept at most.
pub const MAX_PDF_TEXT_BYTES: usize = 256 * 1024;

/// The tokens a PDF page is estimated at besides its text: the providers show the model each page
/// as an image too (Anthropic's PDF page: 1,500–3,000 tokens a page in all).
pub const PDF_PAGE_TOKENS: u64 = 1_600;

/// A range of a PDF's pages, ready for a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedPdf {
    /// The document's page count.
    pub page_count: u32,
    /// The pages picked, 1-based and inclusive.
    pub first: u32,
    /// The last page picked.
    pub last: u32,
    /// Those pages as a PDF of their own (the whole source when all are picked); `None` when it
    /// is over [`MAX_PDF_BYTES`].
    pub document: Option<Vec<u8>>,
    /// The pages' text, each under a `--- page N ---` line, cut at [`MAX_PDF_TEXT_BYTES`].
    pub text: String,
}

/// A `pages` value: `3`, `1-5` or `10-` (to the end, within [`MAX_RANGE_PAGES`]), of a document
/// of `count` pages; 1-based and inclusive.
pub fn parse_pages(spec: &str, count: u32) -> Result<(u32, u32), MediaError> {
    let bad = || {
        MediaError::Pages(format!(
            "pages \"{spec}\" is not a page range: use a page (\"3\") or a range (\"1-5\")"
        ))
    };
    let spec = spec.trim();
    let number = |s: &str| s.trim().parse::<u32>().map_err(|_| bad());
    let (first, last) = match spec.split_once('-') {
        Some((a, "")) => {
            let a = number(a)?;
            (a, count.min(a.saturating_add(MAX_RANGE_PAGES - 1)))
        }
        Some((a, b)) => (number(a)?, number(b)?),
        None => {
            let a = number(spec)?;
            (a, a)
        }
    };
    if first == 0 || last < first {
        return Err(bad());
    }
    if first > count {
        return Err(MediaError::Pages(format!(
            "pages \"{spec}\": the document has {count} page{}",
            if count == 1 { "" } else { "s" }
        )));
    }
    let last = last.min(count);
    if last - first + 1 > MAX_RANGE_PAGES {
        return Err(MediaError::Pages(format!(
            "pages \"{spec}\" is {} pages; read at most {MAX_RANGE_PAGES} at a time",
            last - first + 1
        )));
    }
    Ok((first, last))
}

/// Opens `bytes` as a PDF and prepares `pages` (all when `None`, which a document of more than
/// [`PAGES_WITHOUT_RANGE`] pages refuses with its page count).
pub fn prepare_pdf(bytes: &[u8], pages: Option<&str>) -> Result<PreparedPdf, MediaError> {
    // The parser works on untrusted bytes: a panic in it is a damaged file, not a crash.
    catch_unwind(AssertUnwindSafe(|| prepare(bytes, pages)))
        .unwrap_or_else(|_| Err(MediaError::Corrupt("the PDF cannot be parsed".into())))
}

fn prepare(bytes: &[u8], pages: Option<&str>) -> Result<PreparedPdf, MediaError> {
    if !bytes.starts_with(b"%PDF-") {
        return Err(MediaError::Corrupt("not a PDF (no %PDF- header)".into()));
    }
    let mut doc = Document::load_mem(bytes).map_err(|e| MediaError::Corrupt(e.to_string()))?;
    if doc.is_encrypted() {
        return Err(MediaError::Encrypted);
    }
    let numbers: Vec<u32> = doc.get_pages().keys().copied().collect();
    let count = numbers.len() as u32;
    if count == 0 {
        return Err(MediaError::Corrupt("the PDF has no pages".into()));
    }
    let (first, last) = match pages {
        Some(spec) => parse_pages(spec, count)?,
        None if count > PAGES_WITHOUT_RANGE => {
            return Err(MediaError::Pages(format!(
            "the PDF has {count} pages: read it in parts with pages (\"1-{PAGES_WITHOUT_RANGE}\", \
                 at most {MAX_RANGE_PAGES} pages at a time)"
        )))
        }
        None => (1, count),
    };
    let mut text = String::new();
    for page in first..=last {
        if text.len() >= MAX_PDF_TEXT_BYTES {
            text.push_str(&format!("\n[text cut at {MAX_PDF_TEXT_BYTES} bytes]\n"));
            break;
        }
        text.push_str(&format!("--- page {page} ---\n"));
        match doc.extract_text(&[page]) {
            Ok(t) => text.push_str(t.trim_end()),
            Err(_) => text.push_str("[no text could be extracted from this page]"),
        }
        text.push('\n');
    }
    if text.len() > MAX_PDF_TEXT_BYTES {
        let mut cut = MAX_PDF_TEXT_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    let document = if first == 1 && last == count {
        (bytes.len() <= MAX_PDF_BYTES).then(|| bytes.to_vec())
    } else {
        let others: Vec<u32> = numbers.into_iter().filter(|n| *n < first || *n > last).collect();
        doc.delete_pages(&others);
        doc.prune_objects();
        doc.compress();
        let mut out = Vec::new();
        doc.save_to(&mut out).map_err(|e| MediaError::Corrupt(e.to_string()))?;
        (out.len() <= MAX_PDF_BYTES).then_some(out)
    };
    Ok(PreparedPdf { page_count: count, first, last, document, text })
}

/// The tokens `pages` pages with `text_bytes` bytes of text are estimated at.
pub fn pdf_tokens(pages: u32, text_bytes: usize) -> u64 {
    u64::from(pages) * PDF_PAGE_TOKENS + text_bytes.div_ceil(4) as u64
}

/// A PDF of one page per entry of `pages`, each showing its text in Courier: for tests and
/// benches (no PDF file needs to be checked in).
pub fn sample_pdf(pages: &[&str]) -> Vec<u8> {
    let mut doc = Document::with_version("1.5");
    let pages_id = doc.new_object_id();
    let font_id = doc.add_object(dictionary! {
        "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Courier",
    });
    let resources_id = doc.add_object(dictionary! { "Font" => dictionary! { "F1" => font_id } });
    let mut kids = Vec::new();
    for text in pages {
        let content = Content {
            operations: vec![
                Operation::new("BT", vec![]),
                Operation::new("Tf", vec!["F1".into(), 12.into()]),
                Operation::new("Td", vec![72.into(), 720.into()]),
                Operation::new("Tj", vec![Object::string_literal(*text)]),
                Operation::new("ET", vec![]),
            ],
        };
        let encoded = content.encode().unwrap_or_default();
        let content_id = doc.add_object(Stream::new(dictionary! {}, encoded));
        let page_id = doc.add_object(dictionary! {
            "Type" => "Page", "Parent" => pages_id, "Contents" => content_id,
        });
        kids.push(page_id.into());
    }
    let count = kids.len() as i64;
    doc.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages", "Kids" => kids, "Count" => count, "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
        }),
    );
    let catalog_id = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
    doc.trailer.set("Root", catalog_id);
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = doc.save_to(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_pdf_is_read_whole_with_its_text() {
        let bytes = sample_pdf(&["alpha page", "beta page"]);
        let got = prepare_pdf(&bytes, None).unwrap();
        assert_eq!((got.page_count, got.first, got.last), (2, 1, 2));
        assert_eq!(got.document.as_deref(), Some(&bytes[..]));
        assert!(got.text.contains("--- page 1 ---\nalpha page"), "{}", got.text);
        assert!(got.text.contains("--- page 2 ---\nbeta page"), "{}", got.text);
    }

    #[test]
    fn a_long_pdf_needs_a_range_and_a_range_is_a_pdf_of_its_own() {
        let texts: Vec<String> = (1..=30).map(|i| format!("text of page {i}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let bytes = sample_pdf(&refs);
        let err = prepare_pdf(&bytes, None).unwrap_err();
        assert!(err.to_string().contains("30 pages"), "{err}");
        let got = prepare_pdf(&bytes, Some("12-14")).unwrap();
        assert_eq!((got.first, got.last), (12, 14));
        assert!(got.text.contains("text of page 13") && !got.text.contains("page 15\n"));
        let sub = prepare_pdf(got.document.as_deref().unwrap(), None).unwrap();
        assert_eq!(sub.page_count, 3);
        assert!(sub.text.contains("text of page 12"), "{}", sub.text);
    }

    #[test]
    fn page_ranges() {
        assert_eq!(parse_pages("3", 10), Ok((3, 3)));
        assert_eq!(parse_pages(" 2 - 4 ", 10), Ok((2, 4)));
        assert_eq!(parse_pages("5-", 100), Ok((5, 24)));
        assert_eq!(parse_pages("8-12", 10), Ok((8, 10)));
        assert!(parse_pages("0", 10).is_err());
        assert!(parse_pages("4-2", 10).is_err());
        assert!(parse_pages("x", 10).is_err());
        assert!(parse_pages("11", 10).unwrap_err().to_string().contains("10 pages"));
        assert!(parse_pages("1-50", 100).unwrap_err().to_string().contains("at most 20"));
    }

    #[test]
    fn damaged_input_gets_an_error() {
        assert!(matches!(prepare_pdf(b"not a pdf", None), Err(MediaError::Corrupt(_))));
        let mut bytes = sample_pdf(&["x"]);
        bytes.truncate(bytes.len() / 3);
        assert!(prepare_pdf(&bytes, None).is_err());
        assert!(prepare_pdf(b"%PDF-1.5\n\x00\xff garbage", None).is_err());
    }
}
