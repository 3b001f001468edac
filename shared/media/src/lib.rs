//! Images and PDFs made fit for a model: what `Read` returns for a picture or a PDF in the
//! workspace, and what `outboard run --image` sends. One path for both, so a person's image and
//! the model's own `Read` meet the same limits.
//!
//! - [`prepare_image`]: decoded with limits (no decompression bomb gets memory: dimensions are
//!   read from the header first, the decoder's allocation is capped), scaled so the long edge is
//!   at most [`MAX_EDGE`], re-encoded when scaled or too big, so the result is an image every API
//!   takes (PNG, JPEG, GIF or WebP, at most [`MAX_IMAGE_BYTES`]).
//! - [`prepare_pdf`]: the page count, a range of pages as a PDF of its own (the document block the
//!   Anthropic and Responses APIs take), and the pages' text with page numbers (for an API that
//!   takes no documents).
//! - [`image_tokens`], [`pdf_tokens`]: what the providers count for them, for the context
//!   estimate.
//!
//! These functions block (bounded CPU work): callers run them on a blocking thread.

mod image;
#[cfg(feature = "pdf")]
mod pdf;

pub use crate::image::{
    image_media_type, image_tokens, prepare_image, PreparedImage, MAX_DECODE_BYTES, MAX_EDGE,
    MAX_IMAGE_BYTES, MAX_SOURCE_EDGE,
};
#[cfg(feature = "pdf")]
pub use crate::pdf::{
    parse_pages, pdf_tokens, prepare_pdf, sample_pdf, PreparedPdf, MAX_PDF_BYTES,
    MAX_PDF_TEXT_BYTES, MAX_RANGE_PAGES, PAGES_WITHOUT_RANGE, PDF_PAGE_TOKENS,
};

/// Base64 (standard alphabet, padded), as every API takes media.
pub fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Bytes from base64 (standard alphabet, padded).
pub fn from_base64(text: &str) -> Result<Vec<u8>, MediaError> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| MediaError::Corrupt(format!("not base64: {e}")))
}

/// Why a file cannot be shown to a model. Each message says what it is and, where there is one,
/// what to do instead.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MediaError {
    /// Not an image of a format this crate reads.
    #[error("not an image in a format models take (PNG, JPEG, GIF or WebP){0}")]
    NotAnImage(String),
    /// An image larger than any model is shown, or than is decoded safely.
    #[error(
        "the image is {width}×{height} pixels, over the {max}-pixel edge that is decoded: \
         crop or scale it first"
    )]
    TooLarge { width: u32, height: u32, max: u32 },
    /// The file is damaged.
    #[error("the file is damaged: {0}")]
    Corrupt(String),
    /// A PDF that cannot be opened without a password.
    #[error("the PDF is encrypted: decrypt it first (qpdf --decrypt)")]
    Encrypted,
    /// A `pages` value that is not a range of this document's pages.
    #[error("{0}")]
    Pages(String),
}
