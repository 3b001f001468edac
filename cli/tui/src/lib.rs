//! The terminal client: `outboard` with no subcommand, and `outboard attach ID [--drive]`.
//!
//! Elm-style: [`app::App`] is the state machine ([`app::App::handle`]: events and keys in, state
//! and effects out, no I/O), [`render::draw`] a pure view. [`runtime`] drives them against a
//! terminal; [`net`] is the connection task that turns effects into requests and the session's
//! events into app events. The binary (`outboard`) reads the flags, starts the embedded server
//! when there is no `--server`, and hands this crate a [`runtime::Config`]: nothing here knows
//! the command line, exit codes or the server.
//!
//! Modules: the state ([`app`], [`state`], [`composer`], [`approvals`], [`rewind`], [`subagents`],
//! [`tasks`]), the view ([`render`], [`markdown`], [`highlight`], [`diff`], [`table`], [`wrap`],
//! [`theme`], [`format`]), the effects ([`net`]) and the [`runtime`].

pub mod app;
pub mod approvals;
pub mod cells;
pub mod composer;
pub mod diff;
pub mod format;
pub mod highlight;
pub mod markdown;
pub mod net;
pub mod render;
pub mod rewind;
pub mod runtime;
pub mod state;
pub mod subagents;
pub mod table;
pub mod tasks;
pub mod theme;
pub mod tool_view;
pub mod wrap;

#[cfg(test)]
mod keys_tests;
#[cfg(test)]
mod subagents_tests;
#[cfg(test)]
mod tasks_tests;
#[cfg(test)]
mod tests;

pub use runtime::{run, Config, Ended, Notify, APP_QUEUE, EFFECT_QUEUE, FRAME};
