//! The signature of an org webhook's body: `X-Outboard-Signature: sha256=<hex HMAC-SHA256 of
//! the body under the org secret>`, GitHub's scheme, so receivers' existing checks work.

/// The header that carries it.
pub const HEADER: &str = "x-outboard-signature";

/// `sha256=` and the lowercase hex HMAC-SHA256 of `body` under `key`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let tag = ring::hmac::sign(&key, body);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in tag.as_ref() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Whether `header` is `body`'s signature under `key` (checked by ring in constant time).
pub fn verify(key: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex) = header.strip_prefix("sha256=") else { return false };
    if hex.len() != 64 || !hex.is_ascii() {
        return false;
    }
    let tag: Option<Vec<u8>> =
        (0..32).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()).collect();
    let Some(tag) = tag else { return false };
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    ring::hmac::verify(&key, body, &tag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_case_2() {
        let sig = signature(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(sig, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        assert!(verify(b"Jefe", b"what do ya want for nothing?", &sig));
        assert!(!verify(b"Jefe", b"what do ya want for nothing!", &sig));
    }
}
