//! The handshake that opens a connection: the client's [`Hello`] with its [`PROTOCOL_VERSION`]
//! and token, and the server's [`Welcome`] saying who the token belongs to ([`UserInfo`]).

use serde::{Deserialize, Serialize};

use crate::ids::{OrgId, UserId};

/// The protocol version a client announces in [`Hello`]; the server refuses a different one.
pub const PROTOCOL_VERSION: u32 = 1;

/// The handshake's first frame.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// Must equal [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// The user's bearer token (from `outboard-server admin user add`).
    pub token: String,
    /// Free-form client name and version, for logs and presence (`outboard-cli/0.1.0`).
    #[serde(default)]
    pub client: String,
}

impl std::fmt::Debug for Hello {
    // The token is a credential: never print it, not even in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hello")
            .field("protocol_version", &self.protocol_version)
            .field("token", &"<redacted>")
            .field("client", &self.client)
            .finish()
    }
}

/// The server's answer to [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The server's protocol version (equal to the client's, or the handshake fails).
    pub protocol_version: u32,
    /// Server name and version.
    pub server: String,
    /// Who the token belongs to.
    pub user: UserInfo,
    /// This connection's id, unique for the life of the server process; `presence` entries
    /// carry the same id, so a client knows which entry is itself even when its user is
    /// attached from several terminals. 0 from a server that predates it.
    #[serde(default)]
    pub connection_id: u64,
}

/// A user as clients see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// The user's id.
    pub id: UserId,
    /// The user's name, unique within the org.
    pub name: String,
    /// The org's id.
    pub org_id: OrgId,
    /// The org's name.
    pub org: String,
}
