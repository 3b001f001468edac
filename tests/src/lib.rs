//! Outboard's test support: the mock LLM server ([`mock_llm`], its Responses API dialect in
//! [`mock_responses`], the scripted steps both stream in [`mock_step`]) shared by the end-to-end
//! suites and the `mock-llm` binary, and the process harness ([`harness`]) that starts real
//! servers and runs the real CLI, with the suites' shared setup on top of it ([`fixture`]), the
//! crash harness ([`crash`]), a mock model answering several conversations at once
//! ([`conversations`]), and a real git smart-HTTP host with test repositories ([`git_http`]),
//! HTTPS upstreams with throwaway CAs ([`tls`]), and a long scripted turn answered from each
//! request ([`long_turn`]), and sandbox hosts as separate processes in their own network
//! namespaces ([`hosts`]), and server nodes sharing one PostgreSQL store ([`nodes`]), and the TUI
//! in tmux ([`tmux`]).

pub mod bench;
pub mod conversations;
pub mod crash;
pub mod fixture;
pub mod git;
pub mod git_http;
pub mod harness;
pub mod hosts;
pub mod long_session;
pub mod long_turn;
pub mod mock_llm;
pub mod mock_responses;
pub mod mock_step;
pub mod mock_window;
pub mod nodes;
pub mod scripted;
pub mod speed;
pub mod tls;
pub mod tmux;
