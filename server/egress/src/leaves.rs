//! The org CA's material on the proxy's side: the bundle and variables that make the sandbox
//! trust it, and the leaf certificates minted per intercepted host (bounded, oldest dropped).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rcgen::{
    CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::PrivateKeyDer;
use rustls::ServerConfig;

use crate::ca::OrgCa;

/// Hosts whose leaf certificate one proxy keeps: a session talks to a handful of injected hosts
/// (a git host, a registry, an API); 256 is far beyond that while a sandbox naming endless
/// hosts cannot grow the server's memory (each entry is a key, a certificate and a TLS config,
/// a few KiB). Beyond it the oldest entry is dropped and minted again if asked for.
pub const MAX_LEAVES: usize = 256;

/// How long a leaf is valid: short, since it is minted on demand and never stored.
const LEAF_VALIDITY: Duration = Duration::from_secs(7 * 24 * 3600);

/// How far back a leaf's validity starts: a sandbox clock a little behind still accepts it.
const LEAF_BACKDATE: Duration = Duration::from_secs(3600);

/// Where the CA bundle (system roots plus the org's sandbox CA) appears inside the sandbox.
pub const SANDBOX_CA_BUNDLE: &str = "/run/outboard/ca-bundle.pem";

/// The system's CA bundles, first found wins (Debian and Ubuntu, Fedora and RHEL, Alpine and
/// others); without one the upstream is checked against `webpki-roots`.
pub(crate) const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Variables that point the usual tools (OpenSSL and curl, Python's requests and pip, Node, git)
/// at the sandbox's CA bundle.
const CA_VARIABLES: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];

/// The environment that makes a command's tools trust the org's sandbox CA.
pub fn ca_env() -> Vec<(String, String)> {
    CA_VARIABLES.iter().map(|k| ((*k).to_string(), SANDBOX_CA_BUNDLE.to_string())).collect()
}

/// The CA bundle the sandbox trusts: the system bundle's certificates and the org's sandbox CA
/// certificate (never its key).
pub fn ca_bundle_pem(ca: &OrgCa) -> String {
    let mut bundle = SYSTEM_BUNDLES
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .unwrap_or_default();
    if !bundle.is_empty() && !bundle.ends_with('\n') {
        bundle.push('\n');
    }
    bundle.push_str(ca.cert_pem());
    bundle
}

/// The rustls provider of the whole server (ring).
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The leaf certificates (as ready TLS configurations) of one proxy, per host.
pub(crate) struct Leaves {
    ca: Arc<OrgCa>,
    cache: Mutex<LeafCache>,
}

#[derive(Default)]
struct LeafCache {
    configs: HashMap<String, Arc<ServerConfig>>,
    /// Hosts, oldest first.
    order: VecDeque<String>,
}

impl Leaves {
    pub(crate) fn new(ca: Arc<OrgCa>) -> Leaves {
        Leaves { ca, cache: Mutex::new(LeafCache::default()) }
    }

    /// The TLS configuration presenting `host`'s leaf, minted on first use.
    pub(crate) fn config(&self, host: &str) -> Result<Arc<ServerConfig>, String> {
        if let Some(config) = self.cache.lock().ok().and_then(|c| c.configs.get(host).cloned()) {
            return Ok(config);
        }
        // Minted outside the lock: signing takes a fraction of a millisecond, and two
        // connections racing for one host just mint twice.
        let config = Arc::new(mint(&self.ca, host)?);
        if let Ok(mut cache) = self.cache.lock() {
            if !cache.configs.contains_key(host) {
                while cache.order.len() >= MAX_LEAVES {
                    if let Some(oldest) = cache.order.pop_front() {
                        cache.configs.remove(&oldest);
                    }
                }
                cache.order.push_back(host.to_string());
            }
            cache.configs.insert(host.to_string(), config.clone());
        }
        Ok(config)
    }

    /// Hosts cached now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.configs.len())
    }

    /// Whether `host`'s leaf is cached.
    #[cfg(test)]
    pub(crate) fn has(&self, host: &str) -> bool {
        self.cache.lock().is_ok_and(|c| c.configs.contains_key(host))
    }
}

/// A leaf for `host` (a DNS name or an IP literal), ECDSA P-256, signed by the org's CA.
pub(crate) fn mint(ca: &OrgCa, host: &str) -> Result<ServerConfig, String> {
    let fail = |e: &dyn std::fmt::Display| format!("could not make a certificate for {host}: {e}");
    let key = KeyPair::generate().map_err(|e| fail(&e))?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| fail(&e))?;
    params.distinguished_name.push(DnType::CommonName, host);
    params.subject_alt_names.push(match host.parse::<IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(rcgen::Ia5String::try_from(host).map_err(|e| fail(&e))?),
    });
    let now = SystemTime::now();
    params.not_before = (now - LEAF_BACKDATE).into();
    params.not_after = (now + LEAF_VALIDITY).into();
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let (issuer, issuer_key) = ca.issuer();
    let cert = params.signed_by(&key, issuer, issuer_key).map_err(|e| fail(&e))?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(&e))?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .map_err(|e| fail(&e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
