//! The Outboard server as a library (the app, floor 8): `main.rs` parses flags and calls
//! [`launch`]; tests and the CLI's embedded mode call [`launch`] with a listener on
//! `127.0.0.1:0`.
//!
//! It owns what only the assembled server knows: [`config`] (assembly of every crate's own
//! configuration), [`net`] and [`gateway`] (the network edge, WebSocket, handshake,
//! per-connection tasks, the relay between nodes), [`hub`] and [`session`] (one actor per
//! session, implementing the harness's event sink), the HTTP API ([`http_api`], [`http_common`],
//! [`files_api`], [`uploads`], [`workspace_api`]), [`sources`] and [`fork`], [`git`] and [`repo_hosts`]
//! (workspaces from repositories and their changes going out; where the server's git may go),
//! [`netsession`] (a session's network: policy, injected credentials, audit), [`paging`],
//! [`metrics`] (Prometheus; it implements the lower crates' observer traits), [`telemetry`]
//! (the OTLP export of the loop's spans) and [`manual`]. The crates below are re-exported under the module
//! names they had when they were modules of this crate (`store`, `tools`, `agent` for the
//! harness…), for the CLI's embedded mode and the tests. See `docs/ARCHITECTURE.md`, "Floors".

pub use outboard_harness as agent;
pub use outboard_harness::agent_types;
pub use outboard_harness::approvals;
pub use outboard_org::tokens as auth;
pub mod config;
pub mod files_api;
pub mod fork;
pub mod gateway;
pub mod git;
pub mod http_api;
pub mod http_common;
pub mod hub;
pub use outboard_cmdline::manual;
pub use outboard_llm as llm;
pub use outboard_mcp as mcp;
pub mod metrics;
pub use outboard_llm::models;
pub mod net;
pub use outboard_egress as netproxy;
pub use outboard_org::netpolicy;
pub mod netsession;
pub use outboard_org::orgfs;
pub mod paging;
pub use outboard_org::hooks;
pub use outboard_org::quota;
pub use outboard_org::search;
pub use outboard_org::secrets;
pub use outboard_remote as remote;
pub mod repo_hosts;
pub use outboard_sandbox as sandbox;
pub mod session;
pub mod sources;
pub mod telemetry;
pub use outboard_org::toolpolicy;
pub use outboard_store as store;
pub use outboard_tools as tools;
pub mod uploads;
pub use outboard_vfs as vfs;
pub mod workspace_api;

pub use config::{Limits, NetConfig, ServerConfig, TlsFiles};
pub use gateway::{launch, launch_with, LaunchError, ServerHandle};
pub use outboard_base::Secret;
