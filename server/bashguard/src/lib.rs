//! The Bash guard (floor 3, its own crate so its tree-sitter grammar builds once and its tests run
//! alone): refuses, before it runs, a command that would write to `/memory`, `/skills` or
//! `/agents`, with an instructive message. The read-only mount is the guarantee; this only
//! teaches. See [`guard`] for what counts as a write. The same parse gives the org's tool rules
//! the simple commands of a line ([`commands`]), and whether a line only reads ([`readonly`], for
//! plan mode).
//!
//! It must not know anything of Outboard but those roots (from `outboard-vfs`).

pub mod commands;
pub mod guard;
pub mod readonly;

pub use commands::{commands, Command};
pub use guard::{check, Refusal};
pub use readonly::{read_only, NotReadOnly};
