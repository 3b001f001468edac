//! What a tool call answers: text for the model, and whether it is an error.

/// The result of a tool call, as the model will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// The text for the model.
    pub output: String,
    /// The call failed.
    pub is_error: bool,
}

impl ToolOutcome {
    /// A successful result.
    pub fn ok(output: impl Into<String>) -> Self {
        ToolOutcome { output: output.into(), is_error: false }
    }

    /// A failed result whose text tells the model what to do.
    pub fn error(output: impl Into<String>) -> Self {
        ToolOutcome { output: output.into(), is_error: true }
    }
}
