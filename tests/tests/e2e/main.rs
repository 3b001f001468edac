//! The end-to-end suites, one module a suite, linked into one test binary (`cargo test -p
//! outboard-tests --test e2e`; one suite: `-- approvals::`). Each suite starts its own real
//! processes (servers, the mock model, sandboxes, git hosts) on fresh data dirs and loopback
//! ports, with the shared setup of `outboard_tests::fixture`; nothing a suite does to this
//! process (its environment, its current directory) is left for another to see.

mod admin_network;
mod admin_secrets;
mod approvals;
mod attach_paging;
mod attach_reconnect;
mod attach_roles;
mod background_tasks;
mod compaction;
mod config_files;
mod connection_bounds;
mod context_probe;
mod crash;
mod e2e_run;
mod git_http_fixture;
mod hooks;
mod hostile_host;
mod launch_errors;
mod llm_providers;
mod long_load;
mod manual;
mod mcp;
mod metrics;
mod models;
mod network_sessions;
mod nodes;
mod notebook;
mod org_agents;
mod org_memory;
mod org_memory_cli;
mod org_voice;
mod otlp;
mod plan;
mod protocol_errors;
mod read_media;
mod recovery;
mod remote_hosts;
mod remote_liveness;
mod remote_sessions;
mod repo_sessions;
mod responses;
mod rewind;
mod run_reconnect;
mod sandbox_intercept;
mod sandbox_network;
mod sandbox_orphans;
mod sandbox_session;
mod secret_injection;
mod security_files;
mod security_net;
mod security_quota;
mod security_sandbox;
mod session_lifecycle;
mod store_outage;
mod subagents;
mod tui_tmux;
mod turn_control;
mod upload;
mod upload_limits;
mod usage;
mod web_search;
mod webfetch;
mod workspace_in_place;
