//! Secrets in memory. [`Secret`] holds a credential the server was configured with (an API key, a
//! token): its `Debug` and `Display` redact, so it cannot reach a log by accident. [`SecretValue`]
//! holds a credential opened from the store for one use: it redacts too, and zeroes its bytes when
//! dropped, as do the buffers ([`Wiped`]) that held plaintext on the way.

/// The user of HTTP Basic when the value is a bare token (GitHub, Gitea and GitLab accept it).
pub const TOKEN_USER: &str = "x-access-token";

/// A secret string (API key, token): its `Debug` and `Display` print `<redacted>`, so it cannot
/// reach a log or an error message by accident. Read it only where it is sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that must send it (an HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Zeroes `bytes` in a way the optimizer may not drop as a dead store: the workspace denies
/// `unsafe` (so no `write_volatile`), and `black_box` makes the zeroed memory observable.
pub fn wipe(bytes: &mut [u8]) {
    bytes.fill(0);
    std::hint::black_box(&mut *bytes);
}

/// Zeroes a `Vec`'s whole allocation (spare capacity included) before it is freed.
pub fn wipe_vec(bytes: &mut Vec<u8>) {
    bytes.clear();
    bytes.resize(bytes.capacity(), 0);
    wipe(bytes);
}

/// A buffer that held or holds plaintext: zeroed when dropped, on every path.
pub struct Wiped(pub Vec<u8>);

impl Drop for Wiped {
    fn drop(&mut self) {
        wipe_vec(&mut self.0);
    }
}

/// A secret's value. Debug/Display print `[redacted]`; the bytes are zeroed on drop.
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps a value as given (validation is the caller's).
    pub fn new(value: String) -> SecretValue {
        SecretValue(value)
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Drops one trailing newline (`\n` or `\r\n`), as a value piped from `echo` ends, in place
    /// (no copy of the value is left behind).
    pub fn drop_line_end(&mut self) {
        if self.0.ends_with('\n') {
            self.0.pop();
            if self.0.ends_with('\r') {
                self.0.pop();
            }
        }
    }

    /// HTTP Basic credentials for git: `user:password` when the value has a ':' (the part before
    /// the first ':' is the user), else (`x-access-token`, value).
    pub fn basic_auth(&self) -> (String, SecretValue) {
        match self.0.split_once(':') {
            Some((user, password)) => (user.to_owned(), SecretValue(password.to_owned())),
            None => (TOKEN_USER.to_owned(), SecretValue(self.0.clone())),
        }
    }

    /// The value of an `Authorization` header for [`SecretValue::basic_auth`]: `Basic <base64>`.
    pub fn basic_header(&self) -> SecretValue {
        let (user, password) = self.basic_auth();
        let mut pair = Wiped(Vec::with_capacity(user.len() + 1 + password.0.len()));
        pair.0.extend_from_slice(user.as_bytes());
        pair.0.push(b':');
        pair.0.extend_from_slice(password.0.as_bytes());
        let mut header = String::with_capacity(6 + pair.0.len().div_ceil(3) * 4);
        header.push_str("Basic ");
        base64_into(&pair.0, &mut header);
        SecretValue(header)
    }
}

impl Drop for SecretValue {
    fn drop(&mut self) {
        wipe_vec(&mut std::mem::take(&mut self.0).into_bytes());
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Display for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Standard base64 with padding (RFC 4648 §4), appended to `out` (which was sized for it, so it
/// does not reallocate and leave a copy behind).
fn base64_into(input: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in input.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> shift & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wiping_zeroes_the_whole_allocation() {
        let mut bytes = Vec::with_capacity(64);
        bytes.extend_from_slice(b"sk-live-0123456789");
        bytes.truncate(4);
        wipe_vec(&mut bytes);
        assert_eq!(bytes.len(), bytes.capacity());
        assert!(bytes.iter().all(|&b| b == 0));
    }

    #[test]
    fn values_redact_and_basic_header_encodes() {
        let v = SecretValue::new("alice:pa55".to_owned());
        assert_eq!(format!("{v} {v:?}"), "[redacted] [redacted]");
        assert_eq!(v.basic_header().expose(), "Basic YWxpY2U6cGE1NQ==");
        let token = SecretValue::new("ghp_x".to_owned());
        assert_eq!(token.basic_auth().0, TOKEN_USER);
        assert_eq!(format!("{}", Secret::new("k")), "<redacted>");
    }
}
