//! Claude Code's `stream-json` protocol (`outboard --input-format stream-json --output-format
//! stream-json`, and `outboard run` with the same flags): the Claude Agent SDKs drive Outboard
//! through it as they drive `claude`. The wire and every difference from Claude Code are in
//! docs/STREAM_JSON.md.
//!
//! Module map: [`options`] (Claude Code's flags, checked: taken, refused or ignored by name),
//! [`input`] (stdin, bounded line by line), [`wire`] (the messages both ways), [`translate`]
//! (session events → Claude Code's messages), [`permissions`] (who answers an approval request:
//! the flags, the program's `can_use_tool`, or nobody), `session` (the loop that owns the
//! connection and stdout). It consumes the client library's `Follow` stream, as `outboard run`
//! does, so reconnecting and de-duplicating are the library's.

pub mod input;
pub mod options;
pub mod permissions;
mod session;
pub mod translate;
pub mod wire;

pub use session::{run, MAX_QUEUED_PROMPTS};
