//! The harness (floor 7): the loop, model → tools → model, until the model ends the turn, the step budget is
//! spent, or the user interrupts.
//!
//! A turn runs as its own task, spawned by the session actor, and owns for its duration the
//! conversation and the session's tool environment (workspace, sandbox, read ledger); it hands
//! them back when it ends. It never touches the log or the clients directly: every event goes
//! through an [`Emitter`] (an [`EventSink`] the session actor implements, so this crate never
//! imports the session), and a durable event is committed to the store before
//! [`Emitter::durable`] returns, so each item the model will see is on disk before the next step
//! starts (docs/ARCHITECTURE.md, "Durability").
//!
//! Modules, lowest first: [`sink`] (events out), [`conversation`] and [`compact`] (what the
//! model sees, and its compaction; [`interrupted`], the mark an interrupted turn leaves), [`rewind`] (checkpoints, and the history a rewind makes current), [`progress`] (deltas to the session, bounded), [`fence`],
//! [`project`] and [`prompt`] (the system prompt), [`hooks`] (Claude Code's hooks, each run where it is safe), [`approvals`] and [`approve`] (the tool
//! policy's gate), [`plan`] (plan mode, `ExitPlanMode`, `AskUserQuestion`), `spans` (what a turn's trace
//! records, below all of these), [`state`] (a turn's state, recovery), [`child`] (subagents, which get the
//! loop as a callback), [`turn`] (the loop), [`agent_types`] (org-defined subagents).
//!
//! It must not know the session actor, the gateway or the server's configuration: it gets
//! [`TurnLimits`], emits through [`EventSink`], counts through [`ToolMetrics`].

pub mod agent_types;
pub mod approvals;
pub mod approve;
pub mod child;
pub mod compact;
pub mod conversation;
pub mod fence;
pub mod hooks;
pub mod interrupted;
pub mod plan;
pub mod progress;
pub mod project;
pub mod prompt;
pub mod rewind;
pub mod sink;
mod spans;
pub mod state;
pub mod turn;

#[cfg(test)]
mod tests;

pub use approvals::Recorded;
pub use compact::{CompactError, Compacted, Window};
pub use conversation::{replay_start, Conversation, REPLAY_KINDS};
pub use prompt::system_prompt;
pub use sink::{EmitAllFuture, EmitError, EmitFuture, Emitter, EventSink};
pub use state::{
    files_touched, org_shown, recover_plan, Ending, FilesTouched, PendingCall, Resume, Role,
    ToolEnv, ToolMetrics, Turn, TurnEnd, TurnLimits, MAX_PARALLEL_CALLS,
};
pub use turn::{run_compaction, run_turn};
