//! How a harness node and a sandbox host trust each other.
//!
//! - The host makes an ECDSA P-256 key and a self-signed certificate in its data directory on
//!   first start (`host-key.pem`, `host-cert.pem`) and serves TLS with them. The harness does not
//!   check names or a CA: it pins the SHA-256 of the certificate it saw on its first successful
//!   join and refuses any other certificate afterwards ([`PinnedVerifier`]).
//! - The join token is 32 random bytes (64 hex characters), shown once. The host keeps only its
//!   SHA-256 (`join-token.sha256`); that hash is the HMAC key of the handshake, so the token
//!   itself is never stored on the host nor sent on the wire.
//! - The handshake proves the key both ways and binds it to the TLS certificate: the host sends a
//!   nonce; the harness answers with its own nonce and `HMAC(key, "harness" | host nonce |
//!   harness nonce | certificate SHA-256)`; the host answers with `HMAC(key, "host" | …)`. A
//!   man in the middle with its own certificate cannot produce a proof the real host accepts,
//!   so even the first (trust-on-first-use) join cannot be intercepted by someone without the
//!   token.
//!
//! Secrets (the token, its hash, proofs) never appear in logs or error messages.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ring::hmac;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

/// The name the host's certificate is issued to and the harness asks for; never checked (the
/// certificate is pinned), but TLS needs one.
pub const HOST_CERT_NAME: &str = "outboard-sandbox-host";

const KEY_FILE: &str = "host-key.pem";
const CERT_FILE: &str = "host-cert.pem";
const TOKEN_HASH_FILE: &str = "join-token.sha256";

/// Why the host's identity or join token could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// A file of the data directory could not be read or written.
    #[error(
        "{what} {path}: {reason}; check the permissions of the sandbox host's --data directory"
    )]
    File { what: &'static str, path: String, reason: String },
    /// A stored key or certificate is damaged.
    #[error(
        "the sandbox host's {what} in {path} is damaged ({reason}); move host-key.pem and \
         host-cert.pem away to make new ones, then add the host again on the harness \
         (`outboard-server admin hosts add`), since its pinned certificate changes"
    )]
    Damaged { what: &'static str, path: String, reason: String },
    /// The token given is not one `admin hosts add` prints.
    #[error(
        "the join token is not 64 hex characters; pass the token `outboard-server admin hosts \
         add NAME --url URL` printed"
    )]
    BadToken,
    /// No token was ever given to this host.
    #[error(
        "this sandbox host has no join token yet: start it once with --join-token TOKEN (printed \
         by `outboard-server admin hosts add NAME --url URL` on the harness)"
    )]
    NoToken,
    /// TLS could not be configured.
    #[error("TLS setup failed: {0}")]
    Tls(String),
}

/// The host's TLS key and certificate.
pub struct HostIdentity {
    /// The certificate, DER.
    pub cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl std::fmt::Debug for HostIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostIdentity").field("fingerprint", &self.fingerprint()).finish()
    }
}

impl HostIdentity {
    /// The identity stored in `data`, made there on first use.
    pub fn load_or_create(data: &Path) -> Result<HostIdentity, AuthError> {
        use rustls_pki_types::pem::PemObject as _;
        let (key_path, cert_path) = (data.join(KEY_FILE), data.join(CERT_FILE));
        if !key_path.exists() {
            create_identity(&key_path, &cert_path)?;
        }
        let damaged = |what, path: &PathBuf, reason: String| AuthError::Damaged {
            what,
            path: path.display().to_string(),
            reason,
        };
        let key = PrivateKeyDer::from_pem_file(&key_path)
            .map_err(|e| damaged("key", &key_path, e.to_string()))?;
        let cert = CertificateDer::from_pem_file(&cert_path)
            .map_err(|e| damaged("certificate", &cert_path, e.to_string()))?;
        Ok(HostIdentity { cert, key })
    }

    /// The certificate's SHA-256, hex: what harnesses pin.
    pub fn fingerprint(&self) -> String {
        hex(&Sha256::digest(self.cert.as_ref()))
    }

    /// The TLS configuration the host serves with.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, AuthError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| AuthError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], self.key.clone_key())
            .map_err(|e| AuthError::Tls(e.to_string()))
    }
}

fn create_identity(key_path: &Path, cert_path: &Path) -> Result<(), AuthError> {
    let tls = |e: rcgen::Error| AuthError::Tls(e.to_string());
    let key = rcgen::KeyPair::generate().map_err(tls)?;
    let mut params = rcgen::CertificateParams::new(vec![HOST_CERT_NAME.to_owned()]).map_err(tls)?;
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2045, 1, 1);
    let cert = params.self_signed(&key).map_err(tls)?;
    write_private(key_path, key.serialize_pem().as_bytes(), "key")?;
    write_private(cert_path, cert.pem().as_bytes(), "certificate")
}

fn write_private(path: &Path, bytes: &[u8], what: &'static str) -> Result<(), AuthError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let fail = |e: std::io::Error| AuthError::File {
        what,
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.sync_all().map_err(fail)
}

/// A new join token: 32 random bytes as 64 hex characters. Shown once, never stored.
pub fn new_join_token() -> Result<String, AuthError> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| AuthError::Tls(format!("no randomness: {e}")))?;
    Ok(hex(&bytes))
}

/// A fresh random nonce for the handshake, hex.
pub fn nonce() -> Result<String, AuthError> {
    new_join_token()
}

/// The handshake key both ends derive from a join token: its SHA-256.
#[derive(Clone)]
pub struct JoinKey([u8; 32]);

impl std::fmt::Debug for JoinKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JoinKey(…)")
    }
}

impl JoinKey {
    /// The key of `token` (as `admin hosts add` printed it).
    pub fn from_token(token: &str) -> Result<JoinKey, AuthError> {
        let token = token.trim();
        if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(AuthError::BadToken);
        }
        Ok(JoinKey(Sha256::digest(token.to_ascii_lowercase().as_bytes()).into()))
    }

    /// Stores the key (never the token) in the host's `data` directory.
    pub fn store(&self, data: &Path) -> Result<(), AuthError> {
        write_private(&data.join(TOKEN_HASH_FILE), hex(&self.0).as_bytes(), "join token hash")
    }

    /// The key stored in `data` by an earlier start.
    pub fn load(data: &Path) -> Result<JoinKey, AuthError> {
        let path = data.join(TOKEN_HASH_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(AuthError::NoToken),
            Err(e) => {
                return Err(AuthError::File {
                    what: "join token hash",
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })
            }
        };
        let bytes =
            unhex(text.trim()).filter(|b| b.len() == 32).ok_or_else(|| AuthError::Damaged {
                what: "join token hash",
                path: path.display().to_string(),
                reason: "not 64 hex characters".into(),
            })?;
        let mut key = [0u8; 32];
        key.copy_from_slice(&bytes);
        Ok(JoinKey(key))
    }

    fn tag(&self, role: &str, first: &str, second: &str, fingerprint: &str) -> hmac::Tag {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.0);
        let message = format!("outboard-sandbox-host/1|{role}|{first}|{second}|{fingerprint}");
        hmac::sign(&key, message.as_bytes())
    }

    /// The harness's proof for the host's nonce, its own nonce and the certificate it saw.
    pub fn harness_proof(
        &self,
        host_nonce: &str,
        harness_nonce: &str,
        fingerprint: &str,
    ) -> String {
        hex(self.tag("harness", host_nonce, harness_nonce, fingerprint).as_ref())
    }

    /// The host's proof back.
    pub fn host_proof(&self, host_nonce: &str, harness_nonce: &str, fingerprint: &str) -> String {
        hex(self.tag("host", host_nonce, harness_nonce, fingerprint).as_ref())
    }

    /// Whether `proof` is the harness's proof, compared in constant time.
    pub fn verify_harness(
        &self,
        proof: &str,
        host_nonce: &str,
        harness_nonce: &str,
        fingerprint: &str,
    ) -> bool {
        self.verify("harness", proof, host_nonce, harness_nonce, fingerprint)
    }

    /// Whether `proof` is the host's proof, compared in constant time.
    pub fn verify_host(
        &self,
        proof: &str,
        host_nonce: &str,
        harness_nonce: &str,
        fingerprint: &str,
    ) -> bool {
        self.verify("host", proof, host_nonce, harness_nonce, fingerprint)
    }

    fn verify(&self, role: &str, proof: &str, a: &str, b: &str, fingerprint: &str) -> bool {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.0);
        let message = format!("outboard-sandbox-host/1|{role}|{a}|{b}|{fingerprint}");
        unhex(proof).is_some_and(|tag| hmac::verify(&key, message.as_bytes(), &tag).is_ok())
    }
}

/// Accepts exactly one certificate: the pinned one, or on the first join any certificate,
/// whose fingerprint it keeps for the handshake's proof and for the harness to pin. Handshake
/// signatures are verified as usual, so the peer holds the certificate's key.
#[derive(Debug)]
pub struct PinnedVerifier {
    pin: Option<String>,
    seen: Mutex<Option<String>>,
    provider: Arc<CryptoProvider>,
}

impl PinnedVerifier {
    /// A verifier for `pin` (hex SHA-256), or trust on first use when `None`.
    pub fn new(pin: Option<String>) -> Arc<PinnedVerifier> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(PinnedVerifier { pin, seen: Mutex::new(None), provider })
    }

    /// The fingerprint of the certificate the last handshake presented.
    pub fn seen(&self) -> Option<String> {
        self.seen.lock().ok().and_then(|s| s.clone())
    }

    /// The client TLS configuration using this verifier.
    pub fn client_config(self: &Arc<Self>) -> Result<rustls::ClientConfig, AuthError> {
        Ok(rustls::ClientConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| AuthError::Tls(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(self.clone())
            .with_no_client_auth())
    }
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let fingerprint = hex(&Sha256::digest(end_entity.as_ref()));
        if let Some(pin) = &self.pin {
            if !pin.eq_ignore_ascii_case(&fingerprint) {
                return Err(rustls::Error::General(format!(
                    "the host's certificate {fingerprint} is not the pinned {pin}"
                )));
            }
        }
        if let Ok(mut seen) = self.seen.lock() {
            *seen = Some(fingerprint);
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| text.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect()
}
