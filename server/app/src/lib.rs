//! The Outboard server as a library: `main.rs` parses flags and calls [`launch`]; tests and the
//! CLI's embedded mode call [`launch`] with a listener on `127.0.0.1:0`.
//!
//! Module map (one room each, see `docs/ARCHITECTURE.md`): [`gateway`] (WebSocket, handshake,
//! per-connection tasks), [`hub`] (the session map), [`session`] (one actor per session),
//! [`agent`] (the harness loop), [`llm`] (providers), [`tools`] (the model's tools), [`vfs`] (path
//! routing and confinement), [`sandbox`] (where commands run), [`netproxy`] (the sandbox's one
//! way out), [`netpolicy`] (where it may lead) and [`netsession`] (both, with the org's
//! injected credentials, for one session), [`store`] (SQLite), [`secrets`] (org credentials), [`sources`] and
//! [`workspace_api`] (workspaces from repositories and uploads, and their changes going out),
//! [`uploads`] (working trees sent by clients), [`auth`], [`metrics`] (Prometheus).

pub use outboard_harness as agent;
pub use outboard_harness::agent_types;
pub use outboard_harness::approvals;
pub use outboard_org::tokens as auth;
pub mod config;
pub mod files_api;
pub mod gateway;
pub mod git;
pub mod http_api;
pub mod http_common;
pub mod hub;
pub use outboard_llm as llm;
pub mod manual;
pub use outboard_mcp as mcp;
pub mod metrics;
pub use outboard_llm::models;
pub mod net;
pub use outboard_egress as netproxy;
pub use outboard_org::netpolicy;
pub mod netsession;
pub use outboard_org::orgfs;
pub mod paging;
pub use outboard_org::quota;
pub use outboard_org::secrets;
pub use outboard_remote as remote;
pub use outboard_sandbox as sandbox;
pub mod session;
pub mod sources;
pub use outboard_org::toolpolicy;
pub use outboard_store as store;
pub use outboard_tools as tools;
pub mod uploads;
pub use outboard_vfs as vfs;
pub mod workspace_api;

pub use config::{Limits, NetConfig, ServerConfig, TlsFiles};
pub use gateway::{launch, launch_with, LaunchError, ServerHandle};
pub use outboard_base::Secret;
