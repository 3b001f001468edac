//! The bottom floor of the server: small things every other crate may use and that know nothing
//! of them. It owns secrets in memory ([`secret`]: redacting and wiping), token and content
//! digests ([`digest`]), scrubbing secret values out of text ([`scrub`]), `SKILL.md`-style front
//! matter ([`frontmatter`]), random ids and UTC timestamps ([`util`]), and the target of the
//! exported spans ([`spans`]).
//!
//! It must not know the store, the protocol, the model providers or the sandbox.

pub mod digest;
pub mod frontmatter;
pub mod scrub;
pub mod secret;
pub mod spans;
pub mod util;

pub use secret::{Secret, SecretValue};
