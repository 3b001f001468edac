//! What a tool call answers: text for the model, whether it is an error, and the pictures or
//! documents it shows the model (a `Read` of an image or a PDF).

use outboard_shared::Attachment;

/// The result of a tool call, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// The text for the model.
    pub output: String,
    /// The call failed.
    pub is_error: bool,
    /// Images and documents shown with the text.
    pub attachments: Vec<Attachment>,
}

impl ToolOutcome {
    /// A successful result.
    pub fn ok(output: impl Into<String>) -> Self {
        ToolOutcome { output: output.into(), is_error: false, attachments: Vec::new() }
    }

    /// A failed result whose text tells the model what to do.
    pub fn error(output: impl Into<String>) -> Self {
        ToolOutcome { output: output.into(), is_error: true, attachments: Vec::new() }
    }
}
