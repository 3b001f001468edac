//! Digests: a bearer token is stored only as its SHA-256 (a copy of the database does not let
//! anyone log in); content digests name workspace states and org file versions.

use sha2::{Digest, Sha256};

/// The hex SHA-256 of a token, as stored.
pub fn hash_token(token: &str) -> String {
    hex_sha256(token.as_bytes())
}

/// The hex SHA-256 of some bytes.
pub fn hex_sha256(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn hash_is_stable_hex() {
        assert_eq!(
            super::hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
