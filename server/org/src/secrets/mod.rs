//! Org credentials for git hosts: stored sealed in `org_secrets`, opened only by the server when it
//! talks to that host (`outboard-server admin secret set|ls|rm` manages them).
//!
//! CONTRACT (used by `main` and the server's git code): [`SecretKey::load`], [`Secrets`]
//! (`set`, `list`, `remove`, `for_host`, `org_by_name`), [`SecretValue`] (`expose`,
//! `basic_auth`, `basic_header`), [`host_key`], [`SecretError`].
//!
//! Design choices:
//! - **A copy of the database alone reveals names and hosts, never values.** Each value is sealed
//!   with ChaCha20-Poly1305 (ring) under a 32-byte key that is not in the database: the
//!   `OUTBOARD_SECRET_KEY` environment variable (64 hex characters) when set, else
//!   `<data dir>/secret.key`, created on first use with 0600 and `O_EXCL`. A key file that group
//!   or others may read is refused rather than tightened: whoever could read it may have copied it.
//! - **A sealed value is bound to its row.** The nonce is random (96 bits) per value, and the
//!   associated data is `org_id \0 host \0 name`, so a sealed value copied into another org's row
//!   or another host's does not open.
//! - **One key for every org.** `set` checks that an existing secret opens with the key it has
//!   before adding another, so an `admin` run that forgot the server's `OUTBOARD_SECRET_KEY` (and
//!   so made a `secret.key` of its own) is refused instead of sealing values the server cannot open.
//! - **Values do not linger.** [`SecretValue`] prints `[redacted]` and zeroes its bytes on drop;
//!   buffers that held plaintext while sealing or opening are zeroed too. Copies made before a
//!   value reached us (a pipe buffer, the caller's own `String` growth) are beyond our reach.
//! - **Several names for one host: the most recently set wins** ([`Secrets::for_host`]); `set`
//!   of an existing name replaces its value and counts as newly set.
//! - There is no re-key command yet: to change the key, `rm` every secret, replace the key and
//!   `set` them again.

mod binding;
mod error;
mod limits;
mod outbound;
mod sealed;
#[cfg(test)]
mod tests;

pub use binding::{
    placeholder, Binding, HeaderTemplate, MAX_UPSTREAM_CA_BYTES, PLACEHOLDER_PREFIX,
};
pub use error::SecretError;
pub use limits::{KEY_ENV, KEY_FILE, MAX_NAME_BYTES, MAX_VALUE_BYTES};
pub use outboard_base::secret::{SecretValue, TOKEN_USER};
pub use outbound::Outbound;
pub use sealed::*;
