//! Images and documents shown to the model: [`Attachment`], carried by a tool result (`Read` of
//! a picture or a PDF) or a user's message (`outboard run --image`), and [`ImageUpload`], what a
//! client sends with a message.

use serde::{Deserialize, Serialize};

/// What an attachment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentKind {
    /// A picture: PNG, JPEG, GIF or WebP.
    Image,
    /// A PDF.
    Document,
}

/// An image or a document the model is shown, as the server prepared it (scaled, re-encoded,
/// pages picked): the bytes sent to the provider, so a replay of the log sends the same.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// Image or document.
    pub kind: AttachmentKind,
    /// `image/png`, `image/jpeg`, `image/gif`, `image/webp` or `application/pdf`.
    pub media_type: String,
    /// Where it came from, for a person (`/workspace/docs/mock.png`, `screenshot.png`).
    pub name: String,
    /// The bytes, base64 (standard alphabet, padded). Empty for a document too large to send
    /// whole, which goes as its [`Attachment::text`].
    pub data: String,
    /// An image's width in pixels (0 for a document).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub width: u32,
    /// An image's height in pixels.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub height: u32,
    /// A document's pages in `data`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pages: u32,
    /// A document's text, page by page: sent instead of the document to an API that takes no
    /// documents (Chat Completions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The tokens the provider is estimated to count for it.
    #[serde(default)]
    pub tokens: u64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// An image a client sends with a message (`session/send`), before the server prepares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageUpload {
    /// Its file name, for a person.
    pub name: String,
    /// Its bytes, base64.
    pub data: String,
}

/// Images one message carries at most.
pub const MAX_MESSAGE_IMAGES: usize = 8;
