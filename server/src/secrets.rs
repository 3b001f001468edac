//! Org secrets (placeholder API until the secrets branch lands).

/// A secret's value.
pub struct SecretValue(String);

impl Clone for SecretValue {
    fn clone(&self) -> SecretValue {
        SecretValue(self.0.clone())
    }
}

impl SecretValue {
    /// Wraps a value.
    pub fn new(value: String) -> SecretValue {
        SecretValue(value)
    }
    /// The value.
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// HTTP Basic credentials.
    pub fn basic_auth(&self) -> (String, SecretValue) {
        match self.0.split_once(':') {
            Some((u, p)) => (u.to_owned(), SecretValue(p.to_owned())),
            None => ("x-access-token".to_owned(), self.clone()),
        }
    }
}
