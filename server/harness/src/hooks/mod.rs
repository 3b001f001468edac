//! Hooks (Claude Code's contract, `outboard_hooks`), each run where it is safe: a
//! repository's in the session's sandbox ([`repo`]), the org's as signed HTTP calls from the
//! server (`outboard_org::hooks`). The seams the loop calls are in [`seams`].
//!
//! The set is read at the start of each turn of the session's loop (a subagent uses its
//! parent's): the org's from the store, the repository's from the workspace. The hooks that
//! match an event run in parallel; their answers combine ([`outboard_hooks::Answer::merge`]).
//! What went wrong (a file that does not parse, a hook that hung, crashed, printed too much or
//! answered nonsense) becomes a line of a `system_reminder` in the session's log at the next
//! point where the conversation may take one, and a warning in the server's log; a hook never
//! stops the server or the turn by failing, unless it is set to block.

pub mod repo;
pub mod run;
pub mod seams;
pub mod set;

pub use set::Hooks;
