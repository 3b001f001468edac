//! An org's sandbox CA: the certificate authority whose certificates the proxy presents to the
//! sandbox for the hosts it intercepts (those an org secret is injected into).
//!
//! The server creates one per org on first use and keeps it sealed with the org secrets (see
//! `crate::secrets`); the sandbox only ever sees its certificate, in the CA bundle bound
//! read-only into it. A CA of one org is never trusted by another org's sandboxes.
//!
//! Design choices:
//! - ECDSA P-256 keys (rcgen's default, ring underneath): fast to sign a leaf per host, which
//!   happens on the first intercepted connection to it.
//! - `pathlen:0`: the CA signs leaves only, never another CA.
//! - rcgen 0.13 cannot read a certificate back without an X.509 parser, and signing a leaf only
//!   needs the issuer's name and key, so the issuer is rebuilt from the stored subject and key
//!   ([`OrgCa::from_parts`]); the stored certificate is what the sandbox trusts, byte for byte.

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// Why a CA could not be made or read back.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Key generation or signing failed (ring's own error, which carries no detail).
    #[error("could not make the org's sandbox CA: {0}")]
    Make(String),
    /// The stored key or certificate does not parse.
    #[error(
        "the stored sandbox CA of this org is damaged ({0}); remove it with \
         `outboard-server admin network ca rm --org ORG` so a new one is made (sandboxes then \
         trust the new one)"
    )]
    Damaged(String),
}

/// An org's sandbox CA. `Debug` shows the subject only.
pub struct OrgCa {
    subject: String,
    cert_pem: String,
    key: KeyPair,
    issuer: Certificate,
}

impl std::fmt::Debug for OrgCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrgCa").field("subject", &self.subject).finish_non_exhaustive()
    }
}

impl OrgCa {
    /// A new CA whose subject names `org`.
    pub fn generate(org: &str) -> Result<OrgCa, CaError> {
        let subject = format!("Outboard sandbox CA ({org})");
        let key = KeyPair::generate().map_err(|e| CaError::Make(e.to_string()))?;
        let issuer = ca_params(&subject)
            .and_then(|p| p.self_signed(&key))
            .map_err(|e| CaError::Make(e.to_string()))?;
        Ok(OrgCa { cert_pem: issuer.pem(), subject, key, issuer })
    }

    /// The CA as stored: its subject's common name, its certificate and its key (PEM).
    pub fn from_parts(subject: &str, cert_pem: &str, key_pem: &str) -> Result<OrgCa, CaError> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| CaError::Damaged(e.to_string()))?;
        let issuer = ca_params(subject)
            .and_then(|p| p.self_signed(&key))
            .map_err(|e| CaError::Damaged(e.to_string()))?;
        if !cert_pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(CaError::Damaged("the certificate is not PEM".into()));
        }
        Ok(OrgCa { subject: subject.to_owned(), cert_pem: cert_pem.to_owned(), key, issuer })
    }

    /// The subject's common name (stored beside the certificate).
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The certificate (PEM): what the sandbox's CA bundle adds.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key (PEM), for sealing only: it never leaves the server.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// The issuer to sign leaves with (`CertificateParams::signed_by(leaf_key, issuer, key)`).
    pub fn issuer(&self) -> (&Certificate, &KeyPair) {
        (&self.issuer, &self.key)
    }
}

/// The CA's parameters: deterministic for a subject, so the rebuilt issuer names exactly the
/// stored certificate's subject.
fn ca_params(subject: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "Outboard");
    dn.push(DnType::CommonName, subject);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2045, 1, 1);
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_ca_reads_back_with_its_subject_and_certificate() {
        let ca = OrgCa::generate("acme").unwrap();
        let back = OrgCa::from_parts(ca.subject(), ca.cert_pem(), &ca.key_pem()).unwrap();
        assert_eq!(back.cert_pem(), ca.cert_pem());
        assert_eq!(back.subject(), "Outboard sandbox CA (acme)");
        assert_eq!(back.issuer().0.key_identifier(), ca.issuer().0.key_identifier());
        assert!(!format!("{back:?}").contains("PRIVATE"));
    }

    #[test]
    fn a_damaged_key_is_an_error_that_says_what_to_do() {
        let ca = OrgCa::generate("acme").unwrap();
        let e = OrgCa::from_parts(ca.subject(), ca.cert_pem(), "not a key").unwrap_err();
        assert!(e.to_string().contains("admin network ca rm"), "{e}");
    }
}
