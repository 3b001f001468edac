//! `outboard-server admin …`: one module a command group.

pub(crate) mod command;
pub(crate) mod hook;
pub(crate) mod hosts;
pub(crate) mod input;
pub(crate) mod mcp;
pub(crate) mod network;
pub(crate) mod policy;
pub(crate) mod quota;
pub(crate) mod search;
pub(crate) mod secret;
pub(crate) mod token;

pub(crate) use command::{AdminCommand, UserCommand};
pub(crate) use hook::admin_hook;
pub(crate) use hosts::admin_hosts;
pub(crate) use mcp::admin_mcp;
pub(crate) use network::admin_network;
pub(crate) use policy::admin_policy;
pub(crate) use quota::admin_quota;
pub(crate) use search::admin_search;
pub(crate) use secret::admin_secret;
pub(crate) use token::admin_token;
