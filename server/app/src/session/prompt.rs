//! A user's message as a turn starts with it: its text and the images sent with it
//! (`session/send`'s `images`, `outboard run --image`), checked and scaled by the same code that
//! serves `Read` of a picture ([`outboard_media::prepare_image`]), so a person's screenshot and
//! the model's own `Read` meet one set of limits.

use outboard_shared::{
    Attachment, AttachmentKind, ErrorBody, ErrorCode, ImageUpload, MAX_MESSAGE_IMAGES,
};

use super::Actor;

/// The message a turn starts with.
#[derive(Debug, Clone, Default)]
pub struct Prompt {
    /// Its text.
    pub text: String,
    /// Its images, prepared.
    pub attachments: Vec<Attachment>,
}

impl Prompt {
    /// A message of text only.
    pub fn text(text: impl Into<String>) -> Self {
        Prompt { text: text.into(), attachments: Vec::new() }
    }

    /// A message with images as a client sent them: each decoded, checked and scaled on a
    /// blocking thread (bounded work: the frame that carried them is at most 4 MiB). An image
    /// that is not one, is damaged or too large is refused with its name and why.
    pub async fn prepare(text: String, images: Vec<ImageUpload>) -> Result<Self, ErrorBody> {
        if images.is_empty() {
            return Ok(Prompt::text(text));
        }
        if images.len() > MAX_MESSAGE_IMAGES {
            return Err(ErrorBody::new(
                ErrorCode::BadRequest,
                format!("a message carries at most {MAX_MESSAGE_IMAGES} images"),
            ));
        }
        let prepared = tokio::task::spawn_blocking(move || {
            images.into_iter().map(|image| prepare_one(&image)).collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| {
            ErrorBody::new(ErrorCode::Internal, format!("cannot prepare the images: {e}"))
        })?;
        Ok(Prompt { text, attachments: prepared? })
    }
}

fn prepare_one(image: &ImageUpload) -> Result<Attachment, ErrorBody> {
    let refuse = |why: String| {
        ErrorBody::new(ErrorCode::BadRequest, format!("the image {}: {why}", image.name))
    };
    let bytes = outboard_media::from_base64(&image.data).map_err(|e| refuse(e.to_string()))?;
    let p = outboard_media::prepare_image(&bytes).map_err(|e| refuse(e.to_string()))?;
    Ok(Attachment {
        kind: AttachmentKind::Image,
        media_type: p.media_type.to_owned(),
        name: image.name.clone(),
        data: outboard_media::base64(&p.bytes),
        width: p.width,
        height: p.height,
        pages: 0,
        text: None,
        tokens: outboard_media::image_tokens(p.width, p.height),
    })
}

impl Actor {
    /// Refuses images for a session whose model takes none (they would only become notes).
    pub(super) fn check_images(&self, prompt: &Prompt) -> Result<(), ErrorBody> {
        if prompt.attachments.is_empty() {
            return Ok(());
        }
        let (entry, _) = self.models.for_session(self.row.model_name.as_deref(), &self.row.model);
        if entry.llm.takes_images() {
            return Ok(());
        }
        Err(ErrorBody::new(
            ErrorCode::BadRequest,
            format!(
                "the model {} takes no images: pick one with vision (/model), or set vision = true \
                 for it in the server's model file",
                entry.label()
            ),
        ))
    }
}
