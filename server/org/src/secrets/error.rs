//! Why a secret could not be stored, listed or opened. No message ever contains a value.

use std::path::PathBuf;

use outboard_store::StoreError;

use super::limits::*;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// `OUTBOARD_SECRET_KEY` is set but is not 64 hex characters.
    #[error(
        "{KEY_ENV} is set but is not a key: give 64 hex characters (32 bytes), e.g. the output of \
         `openssl rand -hex 32`, or unset it to use the key file in the data directory"
    )]
    BadEnvKey,
    /// The key file grants group or others some access.
    #[error(
        "refusing the secret key file {path}: its mode {mode:03o} lets group or others read it; \
         run `chmod 600 {path}` (and consider the key exposed: set the secrets again with a new key)"
    )]
    KeyFileMode {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The key file is not a regular file of exactly 32 bytes.
    #[error(
        "the secret key file {path} is not a {KEY_BYTES}-byte key ({what}): restore it from a \
         backup, or, if no secret was ever set with it, remove it so a new one is made"
    )]
    KeyFileBad {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// The key file cannot be read or created.
    #[error(
        "cannot read or create the secret key file {path}: {source}; check that the data \
         directory exists and belongs to this user, or set {KEY_ENV}"
    )]
    KeyFileIo {
        /// The key file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The OS gave no randomness (a key or a nonce).
    #[error("cannot get random bytes from the OS: {0}; try again")]
    Random(String),
    /// The host is not `host` or `host:port`.
    #[error(
        "invalid host {host:?}: {why}; give the host as in the repository's URL, without scheme \
         or path: `github.com`, `git.example.com:8443` or `[2001:db8::1]:3000`"
    )]
    BadHost {
        /// What was given (never when it might hold a credential).
        host: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The host holds userinfo (`user:token@host`): the credential would be in argv and logs.
    #[error(
        "the host must not hold a credential (it contains '@'): give the host alone; the value \
         is read from stdin by `outboard-server admin secret set`"
    )]
    HostWithCredential,
    /// The name is not 1..=64 of `[A-Za-z0-9_.-]`.
    #[error("invalid secret name {name:?}: use 1 to {MAX_NAME_BYTES} of A-Z a-z 0-9 _ . -")]
    BadName {
        /// What was given.
        name: String,
    },
    /// The name looks like a token: the value was typed where the name goes.
    #[error(
        "the secret name looks like a token: the value is read from stdin, never from the command \
         line; pick a name such as `ci-token` (and revoke the token if this command line was \
         logged)"
    )]
    NameIsToken,
    /// The value is empty, too long or holds control characters.
    #[error("invalid secret value: {0}")]
    BadValue(&'static str),
    /// A sealed value does not open with this server's key.
    #[error(
        "the secret {host}/{name} of org {org} does not open with this server's key: was the key \
         file replaced? set it again with `outboard-server admin secret set`"
    )]
    WrongKey {
        /// The org's name.
        org: String,
        /// The secret's host.
        host: String,
        /// The secret's name.
        name: String,
    },
    /// Existing secrets do not open with the key this process loaded.
    #[error(
        "the stored secrets do not open with this key (the secret {host}/{name} of org {org} \
         does not): run with the same {KEY_ENV} or data directory as the server, or `rm` the \
         old secrets first"
    )]
    KeyMismatch {
        /// The org of the secret that failed.
        org: String,
        /// Its host.
        host: String,
        /// Its name.
        name: String,
    },
    /// The org does not exist.
    #[error(
        "no org named {0:?}: orgs are created by `outboard-server admin user add NAME --org ORG`"
    )]
    NoOrg(String),
    /// An `--inject-header`, `--placeholder` or `--upstream-ca` is not usable.
    #[error("{0}")]
    BadBinding(String),
    /// The org's sandbox CA cannot be made or read.
    #[error(transparent)]
    Ca(#[from] outboard_egress::ca::CaError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}
