//! The model's tools, with Claude Code's names and parameters: `Read`, `Write`, `Edit`, `Glob`,
//! `Grep` act on the session's workspace through [`outboard_vfs`], and `NotebookEdit` on its
//! Jupyter notebooks ([`notebook`]); `Bash` runs in the session's
//! [`outboard_sandbox::Sandbox`], in the foreground or, with `run_in_background`, as a job that
//! `BashOutput` reads and `KillShell` stops ([`background`]); `TodoWrite` keeps the model's todo
//! list as session state ([`todo`]); `WebFetch` fetches a page in the server itself, under the
//! session's network policy and audit ([`webfetch`]); `WebSearch`, when the org turned it on,
//! asks the org's search service or hands the provider its own ([`websearch`]). Plan mode's judgement of a call, and the
//! inputs and plan files of `ExitPlanMode` and `AskUserQuestion`, are in [`plan`].
//!
//! CONTRACT (used by `agent`): [`specs`], [`run`], [`ToolCtx`], [`ToolOutcome`], [`ReadLedger`].
//! A tool never panics and never returns a Rust error: every failure, including invalid input
//! from the model, is a [`ToolOutcome`] with `is_error` set and a message that tells the model
//! what to do.
//!
//! File work (workspace `Read`/`Write`/`Edit`, `Glob`, `Grep`) runs on the blocking pool through
//! [`blocking::offload`]: every such call is bounded (non-blocking opens, capped reads, walks with an entry
//! cap that check a cancel flag), and the tool's future answers an interrupt at once even while
//! the blocking thread finishes, so neither a runtime thread nor a turn can be held by the
//! filesystem.
//!
//! Design choice: the surface copies Claude Code's (names, parameters, output formats such as
//! `cat -n` lines and the read-before-write rule) because that is what models are trained on;
//! a model that calls these tools as it would in Claude Code gets the answers it expects. Each
//! tool deserialises its input into a typed struct, so a malformed call is answered with the
//! exact field at fault and the expected parameters rather than with a guess.
//!
//! Floor 5: it must not know the MCP client ([`ExternalTools`] is its seam), the harness or the
//! session; the Bash guard is its own crate below.

pub mod background;
pub mod bash;
pub mod blocking;
pub mod catalog;
pub mod confinement;
pub mod ctx;
pub mod dispatch;
pub mod external;
pub mod file;
pub mod input;
pub mod ledger;
mod media;
pub mod notebook;
pub mod org;
pub mod outcome;
pub mod plan;
pub mod recovery;
pub mod search;
pub mod todo;
pub mod webfetch;
pub mod websearch;

#[cfg(test)]
mod race_tests;
#[cfg(test)]
mod tests;

pub use catalog::{is_read_only, runs_concurrently, specs, SUBAGENT_TOOLS, TOOL_NAMES};
pub use ctx::{HostedWorkspace, ToolCtx, ToolEvents};
pub use dispatch::run;
pub use external::{is_external_name, ExternalSet, ExternalTools, EXTERNAL_PREFIX};
pub use file::MAX_FILE_BYTES;
pub use ledger::{OrgStamp, ReadLedger, ReadStamp};
pub use org::{changed_since_read, OrgCtx};
pub use outcome::ToolOutcome;
