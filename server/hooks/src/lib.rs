//! The hooks contract (floor 1, no I/O): Claude Code's hooks as Outboard reads them.
//!
//! Modules, lowest first: [`event`] (the events and which take a matcher), [`matcher`] (a
//! tool name against `Bash`, `Edit|Write`, `*`, `mcp__*`), [`settings`] (a `settings.json`'s
//! `hooks` read from bytes, with limits), [`input`] (the JSON a hook reads), [`answer`] (what a
//! hook's exit code, stdout and stderr mean for its event), [`sign`] (the webhook signature).
//!
//! Who runs a hook is not this crate's business: the harness runs a repository's hooks in the
//! session's sandbox and the org's as signed HTTP calls (docs/HOOKS.md).

pub mod answer;
pub mod event;
pub mod input;
pub mod matcher;
pub mod settings;
pub mod sign;

pub use answer::{interpret, Answer, Decision, Failure, RunResult};
pub use event::HookEvent;
pub use matcher::Matcher;
pub use settings::{parse, Handler, HookSpec, Parsed, Source};
