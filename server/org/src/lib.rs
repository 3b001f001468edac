//! What belongs to an org (floor 4, above the Bash guard whose parse its tool rules use):
//! bearer tokens ([`tokens`]), quotas ([`quota`]), tool and network policy ([`toolpolicy`],
//! [`netpolicy`]), the web search backend ([`search`]), the org's webhooks ([`hooks`]), sealed credentials and how they reach the sandbox's outbound HTTP
//! ([`secrets`]), and the org's shared files — memory, skills, agents —
//! versioned in the store ([`orgfs`]).
//!
//! It must not know the tools, the harness or the session: they ask it, never the reverse.

pub mod hooks;
pub mod netpolicy;
pub mod orgfs;
pub mod quota;
pub mod search;
pub mod secrets;
pub mod tokens;
pub mod toolpolicy;
