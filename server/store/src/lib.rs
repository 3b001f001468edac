//! The store (floor 2): one SQLite file (`outboard.db` in the data dir, WAL mode) owned by one thread.
//!
//! Every other part of the server talks to it through [`Store`], a cloneable handle that sends a
//! closure to the owning thread over a bounded channel and awaits the answer. One owner means no
//! connection pool, no `SQLITE_BUSY` between our own writers, and a natural order of commits.
//!
//! Schema (append-only migrations in [`MIGRATIONS`]; a migration once shipped is never edited):
//! - `orgs`, `users` (unique name per org), `tokens` (SHA-256 of each bearer token, never the
//!   token itself; several per user so the embedded mode can mint one per process);
//! - `sessions` (owner, title, status, model label, `last_seq`, and `workspace_path`: the host
//!   directory an embedded session works in, in place; NULL for a directory under the data dir);
//! - `events`: the per-session log, the source of truth for a session. Primary key
//!   `(session_id, seq)`, so a duplicate `seq` is impossible, and [`Store::append_event`]
//!   checks in the same transaction that `seq` is exactly `last_seq + 1`, so a gap is impossible
//!   too. Each row holds the whole [`EventKind`] as JSON plus its `kind` and `turn_id` in columns,
//!   so recovery can find unfinished turns with an index instead of parsing every payload.
//! - `org_files`, `org_heads`, `org_file_changes`: the org's shared `/memory`, `/skills`, `/agents`
//!   files, every version kept; the queries live in [`crate::orgfs`], which runs them here
//!   through [`Store::call`]; `org_file_usage` counts their versions and bytes per org.
//! - `org_quotas`: per-org overrides of the quotas' defaults ([`crate::quota`]).
//! - `drive_grants`: the user a session's driving was granted to, if not its owner
//!   ([`crate::hub`]).
//! - `model_usage`: every model call's tokens, with the session's totals in `sessions.usage_*`
//!   and its `context_window` (written with the `assistant_message` or `compaction` that
//!   carries the usage);
//! - `sessions.source` (where the workspace came from), `org_secrets` (sealed credentials,
//!   [`crate::secrets`]), `session_pushes` (branches `session/push` created) and `uploads`
//!   (working trees waiting for their session, [`crate::uploads`]).
//! - `org_mcp_servers`: the org's MCP servers as defined, templates and all ([`crate::mcp`]).
//! - `org_tool_policies`: per org and tool pattern, `allow`, `ask` or `deny`
//!   ([`crate::toolpolicy`]).
//!
//! Durability: WAL with `synchronous = NORMAL` by default: a commit survives a crash of the
//! process (the WAL is written before `COMMIT` returns) but the last commits may be lost on power
//! loss. `FULL` (fsync per commit) is available through [`Durability::Full`];
//! `scripts/bench.sh` prints what each costs.
//!
//! It must not know the server above it: sessions' actors, org files, quotas and metrics use it
//! through [`Store::call`] and [`JobObserver`], never the other way round.

mod checkpoint;
pub mod db;
pub mod error;
pub mod events;
pub mod handle;
pub mod lease;
pub mod orgs;
pub mod pg;
pub mod pgtest;
mod retry;
pub mod rows;
pub mod schema;
pub mod sessions;
pub mod spec;
pub mod usage;

#[cfg(test)]
mod tests;

pub use error::StoreError;
pub use events::{already_appended, append_event, append_events};
pub use handle::{JobObserver, Store, DEFAULT_RETRY_BOUND};
pub use orgs::{org_id_by_name, org_name};
pub use rows::{derived_title, todo_progress, SessionRow, UserRow, TITLE_CHARS};
pub use sessions::{insert_session, move_session_host};
pub use spec::{Durability, StoreSpec, DEFAULT_PG_POOL};
pub use usage::usage_report;
