//! Where the sealing key comes from, and the limits of names, hosts and values.

/// The environment variable that carries the key instead of the key file.
pub const KEY_ENV: &str = "OUTBOARD_SECRET_KEY";

/// The key file's name in the data directory.
pub const KEY_FILE: &str = "secret.key";

/// Bytes of the key (ChaCha20's key size).
pub const KEY_BYTES: usize = 32;

/// A value's size at most: a token or a `user:password` pair is far shorter; the cap keeps a
/// mistaken `< some-file` from being stored as a credential.
pub const MAX_VALUE_BYTES: usize = 4096;

/// A name's length at most (names are labels like `ci-token`).
pub const MAX_NAME_BYTES: usize = 64;

/// A host's length at most (a DNS name is at most 253 characters, plus `:65535`).
pub const MAX_HOST_BYTES: usize = 260;

/// Prefixes of well-known token formats: a NAME starting so is a value typed on the command line.
pub const TOKEN_PREFIXES: &[&str] =
    &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "gldt-", "xoxb-"];
