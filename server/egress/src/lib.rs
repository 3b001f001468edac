//! The sandbox's only way out (floor 2): an HTTP/1.1 forward proxy per sandbox on a Unix socket
//! ([`proxy`]), refusing what the session's policy refuses and every address that leads back
//! into the host ([`ranges`]); TLS interception with a per-org CA for hosts that get an org
//! credential injected ([`intercept`], [`ca`], [`leaves`]); the zero-copy pump both directions
//! use ([`splice`], metered by [`meter`]); and the proxy's half that runs inside the sandbox
//! ([`relay`]).
//!
//! It must not know the store, the org's policy tables or the session: the policy and the audit
//! sink come in through the [`Decide`] and [`Audit`] traits of [`SessionNet`].

pub mod ca;
pub mod conn;
pub mod contract;
pub mod intercept;
pub mod leaves;
pub mod meter;
pub mod proxy;
pub mod ranges;
pub mod relay;
pub mod splice;
pub mod target;

pub use contract::{
    proxy_env, Audit, AuditEntry, Decide, Egress, Injection, NetLimits, RefusedBy, SessionNet,
    Verdict, MAX_HEAD, NO_PROXY, PROXY_PORT, PROXY_URL, SANDBOX_SOCKET,
};
pub use leaves::{ca_bundle_pem, ca_env, MAX_LEAVES, SANDBOX_CA_BUNDLE};
pub use proxy::{admit_destination, serve, Admission, ProxyError, ProxyHandle};
pub use ranges::forbidden_range;
