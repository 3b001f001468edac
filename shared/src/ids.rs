//! Newtype ids, so a session id cannot be passed where a user id is meant. On the wire each is a
//! plain string (or number, for [`RequestId`]); the server generates them with a type prefix
//! (`s_`, `u_`, `o_`, `t_`) so a stray id in a log says what it names.

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_owned())
            }
        }
    };
}

string_id!(
    /// A session (`s_…`).
    SessionId
);
string_id!(
    /// A user (`u_…`).
    UserId
);
string_id!(
    /// An organisation (`o_…`).
    OrgId
);
string_id!(
    /// A turn of a session (`t_…`).
    TurnId
);

/// A request id chosen by the client, echoed in the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub u64);

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
