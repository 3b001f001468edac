//! Why an MCP server could not be defined, reached or called. No message carries a secret.

use crate::limits::{CONNECT_TIMEOUT, MAX_SERVERS_PER_ORG};

/// Why an MCP server could not be defined, reached or used. No message holds a secret's value.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// A server name that cannot be part of a tool name.
    #[error(
        "MCP server name {0:?} is not valid: use 1 to 32 of a-z 0-9 _ -, starting with a letter \
         or digit, without `__`"
    )]
    BadName(String),
    /// Something else in the definition.
    #[error("{0}")]
    BadDefinition(String),
    /// The org has [`MAX_SERVERS_PER_ORG`] already.
    #[error(
        "the org has {MAX_SERVERS_PER_ORG} MCP servers already, the most it may have: remove one \
         first (`admin mcp rm`)"
    )]
    TooMany,
    /// No server of that name in the org.
    #[error("the org has no MCP server {0:?}: `admin mcp ls --org ORG` lists them")]
    NoServer(String),
    /// A template names a secret the org does not have.
    #[error(
        "MCP server {server}: the org has no secret {secret:?}; store it with `outboard-server \
         admin secret set --org ORG --host HOST {secret}`"
    )]
    MissingSecret {
        /// The server.
        server: String,
        /// The secret's name.
        secret: String,
    },
    /// A template names a secret held for several hosts, none the server's.
    #[error(
        "MCP server {server}: the secret {secret:?} exists for several hosts ({hosts}) and none \
         is the server's; keep one, or name the secret uniquely"
    )]
    AmbiguousSecret {
        /// The server.
        server: String,
        /// The secret's name.
        secret: String,
        /// The hosts holding it.
        hosts: String,
    },
    /// This server runs without a secret key, so templates cannot be resolved.
    #[error("MCP server {server} needs the secret {secret:?}, and this server has no secret key")]
    NoSecrets {
        /// The server.
        server: String,
        /// The secret's name.
        secret: String,
    },
    /// The secrets could not be read.
    #[error("cannot read the org's secrets: {0}")]
    Secret(#[source] outboard_org::secrets::SecretError),
    /// Connecting or listing failed.
    #[error("cannot connect to MCP server {server}: {why}")]
    Failed {
        /// The server.
        server: String,
        /// What the transport or the server said (scrubbed of secret values).
        why: String,
    },
    /// Connecting took longer than [`CONNECT_TIMEOUT`].
    #[error("MCP server {0} did not complete its connection within {CONNECT_TIMEOUT:?}")]
    ConnectTimeout(String),
    /// A stored definition does not parse (written by a newer server?).
    #[error("the stored definition of MCP server {name} cannot be read ({why}): add it again")]
    Corrupt {
        /// The server.
        name: String,
        /// The parse error.
        why: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] outboard_store::StoreError),
}
