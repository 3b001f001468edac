//! `Read` of a picture or a PDF: the file becomes an [`Attachment`] the model is shown (an image
//! block, a document block, or a PDF's text where the API takes no documents: the dialects
//! choose), with a line of text saying what it is. The bytes are checked and prepared by
//! [`outboard_media`] (decoded with limits, scaled, pages picked), so what goes to the provider is
//! always something it takes; a damaged file or one over the limits is a tool error that says
//! what to do.

use outboard_media::{image_media_type, MediaError};
use outboard_shared::{Attachment, AttachmentKind};

use crate::outcome::ToolOutcome;

/// `Read`'s answer for `shown` when it is an image or a PDF (by its extension, or a PDF by its
/// header); `None` for any other file, which `Read` shows as text.
pub(crate) fn read(shown: &str, bytes: &[u8], pages: Option<&str>) -> Option<ToolOutcome> {
    if image_media_type(shown).is_some() {
        return Some(image(shown, bytes));
    }
    let pdf = shown.to_ascii_lowercase().ends_with(".pdf") || bytes.starts_with(b"%PDF-");
    if pdf {
        return Some(document(shown, bytes, pages));
    }
    if pages.is_some() {
        return Some(ToolOutcome::error(format!(
            "pages is for PDF files; {shown} is not one. Use offset and limit for text files."
        )));
    }
    None
}

fn image(shown: &str, bytes: &[u8]) -> ToolOutcome {
    let prepared = match outboard_media::prepare_image(bytes) {
        Ok(p) => p,
        Err(e) => return ToolOutcome::error(failed(shown, &e)),
    };
    let (sw, sh, sbytes) = prepared.source;
    let mut line = format!(
        "Image {shown}: {}×{} {}, {}",
        prepared.width,
        prepared.height,
        prepared.media_type.trim_start_matches("image/").to_uppercase(),
        size(prepared.bytes.len())
    );
    if prepared.converted {
        line.push_str(&format!(" (scaled down from {sw}×{sh}, {})", size(sbytes)));
    }
    line.push('.');
    let attachment = Attachment {
        kind: AttachmentKind::Image,
        media_type: prepared.media_type.to_owned(),
        name: shown.to_owned(),
        data: outboard_media::base64(&prepared.bytes),
        width: prepared.width,
        height: prepared.height,
        pages: 0,
        text: None,
        tokens: outboard_media::image_tokens(prepared.width, prepared.height),
    };
    ToolOutcome { output: line, is_error: false, attachments: vec![attachment] }
}

fn document(shown: &str, bytes: &[u8], pages: Option<&str>) -> ToolOutcome {
    let prepared = match outboard_media::prepare_pdf(bytes, pages) {
        Ok(p) => p,
        Err(e) => return ToolOutcome::error(failed(shown, &e)),
    };
    let picked = prepared.last - prepared.first + 1;
    let range = if picked == prepared.page_count {
        format!("{} page{}", picked, if picked == 1 { "" } else { "s" })
    } else {
        format!("pages {}-{} of {}", prepared.first, prepared.last, prepared.page_count)
    };
    let mut line = format!("PDF {shown}: {range}, {}.", size(bytes.len()));
    let data = match &prepared.document {
        Some(doc) => outboard_media::base64(doc),
        None => {
            line.push_str(&format!(
                " The pages are over {} as a document, so only their text is shown; read fewer \
                 pages to see them whole.",
                size(outboard_media::MAX_PDF_BYTES)
            ));
            String::new()
        }
    };
    let tokens = if data.is_empty() {
        prepared.text.len().div_ceil(4) as u64
    } else {
        outboard_media::pdf_tokens(picked, prepared.text.len())
    };
    let attachment = Attachment {
        kind: AttachmentKind::Document,
        media_type: "application/pdf".into(),
        name: shown.to_owned(),
        data,
        width: 0,
        height: 0,
        pages: picked,
        text: Some(prepared.text),
        tokens,
    };
    ToolOutcome { output: line, is_error: false, attachments: vec![attachment] }
}

fn failed(shown: &str, e: &MediaError) -> String {
    match e {
        MediaError::Pages(_) => format!("{shown}: {e}"),
        _ => format!("Cannot show {shown}: {e}"),
    }
}

/// `812 KB`, `3.1 MB`.
fn size(bytes: usize) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
    } else {
        format!("{} KB", bytes.div_ceil(1024))
    }
}
