//! How a secret reaches the sandbox's outbound HTTP: the header template it is injected as
//! (`--inject-header`), the placeholders the sandbox may see instead of it (`--placeholder`), the
//! CA its upstream is verified against (`--upstream-ca`).

use outboard_base::SecretValue;

use super::error::SecretError;

/// What a placeholder variable's value starts with: `outboard-placeholder-GH_TOKEN`. Not a
/// secret: it only marks where the proxy puts the value.
pub const PLACEHOLDER_PREFIX: &str = "outboard-placeholder-";

/// An `--upstream-ca` file's size at most: a few roots are a few KiB.
pub const MAX_UPSTREAM_CA_BYTES: usize = 64 * 1024;

/// Placeholder variables of one secret at most (one per tool that reads its own variable).
const MAX_PLACEHOLDERS: usize = 8;

/// The length of a header template at most (the header's value before the secret goes in).
const MAX_TEMPLATE_BYTES: usize = 1024;

/// Headers the proxy will not set: they frame the request or route it, and a secret has no
/// business in them.
const FORBIDDEN_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
];

/// Variables a placeholder may not take: the sandbox's own environment.
const RESERVED_VARS: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "TERM",
    "SHELL",
    "USER",
    "PWD",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];

/// `Name: value with {}`: the header the proxy sets on requests to the secret's host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderTemplate {
    /// Lowercase.
    name: String,
    template: String,
}

impl HeaderTemplate {
    /// Parses `Name: template`; the template holds `{}` at least once, where the value goes.
    pub fn parse(text: &str) -> Result<HeaderTemplate, SecretError> {
        let bad = |why: String| SecretError::BadBinding(format!("--inject-header: {why}"));
        let (name, template) = text.split_once(':').ok_or_else(|| {
            bad("give `Name: value`, with {} where the secret goes, e.g. \
                 'Authorization: Bearer {}'"
                .into())
        })?;
        let (name, template) = (name.trim(), template.trim());
        let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(tchar) {
            return Err(bad(format!("{name:?} is not a header name")));
        }
        let name = name.to_ascii_lowercase();
        if FORBIDDEN_HEADERS.contains(&name.as_str()) || name.starts_with("proxy-") {
            return Err(bad(format!(
                "the proxy does not set {name}: it frames or routes the request; pick the header \
                 the host reads credentials from (Authorization, Private-Token, X-Api-Key…)"
            )));
        }
        if !template.contains("{}") {
            return Err(bad("the value has no {} where the secret goes".into()));
        }
        if template.len() > MAX_TEMPLATE_BYTES {
            return Err(bad(format!("the value is longer than {MAX_TEMPLATE_BYTES} bytes")));
        }
        if template.chars().any(|c| c.is_control() && c != '\t') {
            return Err(bad("the value holds a control character".into()));
        }
        Ok(HeaderTemplate { name, template: template.to_owned() })
    }

    /// The header's name, lowercase.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The value with `value` in place of every `{}`.
    pub fn render(&self, value: &str) -> String {
        self.template.replace("{}", value)
    }

    /// As an admin writes it: `name: template`.
    pub fn text(&self) -> String {
        format!("{}: {}", self.name, self.template)
    }
}

/// How a secret is bound to the sandbox's outbound HTTP for its host; the default: not at all
/// (a git credential the server uses itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Binding {
    /// The header the proxy sets (`--inject-header`).
    pub inject_header: Option<HeaderTemplate>,
    /// Variables the sandbox gets whose values are placeholders (`--placeholder`).
    pub placeholders: Vec<String>,
    /// Roots (PEM) that verify the host's certificate besides the system's (`--upstream-ca`).
    pub upstream_ca: Option<String>,
}

impl Binding {
    /// Whether the proxy intercepts the host for this secret.
    pub fn is_bound(&self) -> bool {
        self.inject_header.is_some()
    }

    /// One line for `admin secret ls`.
    pub fn describe(&self) -> String {
        let Some(header) = &self.inject_header else { return "-".into() };
        let mut text = format!("injects `{}`", header.text());
        if !self.placeholders.is_empty() {
            text.push_str(&format!("; placeholders {}", self.placeholders.join(", ")));
        }
        if self.upstream_ca.is_some() {
            text.push_str("; upstream CA");
        }
        text
    }

    /// Checks the binding with the value it is for.
    pub(crate) fn check(&self, value: &SecretValue) -> Result<(), SecretError> {
        let bad = |why: String| Err(SecretError::BadBinding(why));
        if self.inject_header.is_none()
            && (!self.placeholders.is_empty() || self.upstream_ca.is_some())
        {
            return bad("--placeholder and --upstream-ca bind a secret to its host's HTTP: give \
                        --inject-header too (e.g. 'Authorization: Bearer {}')"
                .into());
        }
        if self.placeholders.len() > MAX_PLACEHOLDERS {
            return bad(format!("at most {MAX_PLACEHOLDERS} --placeholder variables per secret"));
        }
        for var in &self.placeholders {
            let mut bytes = var.bytes();
            let first_ok = bytes.next().is_some_and(|b| b.is_ascii_uppercase() || b == b'_');
            if !first_ok
                || !bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
            {
                return bad(format!(
                    "--placeholder {var:?}: give an environment variable's name (A-Z, 0-9, _), \
                     e.g. GH_TOKEN"
                ));
            }
            if RESERVED_VARS.contains(&var.as_str()) {
                return bad(format!("--placeholder {var}: the sandbox sets that variable itself"));
            }
        }
        if let Some(pem) = &self.upstream_ca {
            check_roots(pem)?;
        }
        if value.expose().contains(PLACEHOLDER_PREFIX) {
            return bad("the value holds a placeholder: give the real credential".into());
        }
        Ok(())
    }

    /// The columns `inject_header`, `placeholders` (JSON), `upstream_ca`.
    pub(crate) fn columns(&self) -> (Option<String>, Option<String>, Option<String>) {
        let placeholders = (!self.placeholders.is_empty())
            .then(|| serde_json::to_string(&self.placeholders).unwrap_or_default());
        (
            self.inject_header.as_ref().map(HeaderTemplate::text),
            placeholders,
            self.upstream_ca.clone(),
        )
    }

    /// The binding of a stored row. A template this build cannot read binds nothing: the host
    /// is then tunnelled and the credential never sent.
    pub(crate) fn from_columns(
        inject_header: Option<String>,
        placeholders: Option<String>,
        upstream_ca: Option<String>,
    ) -> Binding {
        Binding {
            inject_header: inject_header.and_then(|t| HeaderTemplate::parse(&t).ok()),
            placeholders: placeholders
                .and_then(|json| serde_json::from_str(&json).ok())
                .unwrap_or_default(),
            upstream_ca,
        }
    }
}

/// Checks that `pem` holds at least one certificate and nothing unreadable.
fn check_roots(pem: &str) -> Result<(), SecretError> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::CertificateDer;
    if pem.len() > MAX_UPSTREAM_CA_BYTES {
        return Err(SecretError::BadBinding(format!(
            "--upstream-ca: the file is larger than {} KiB; give the roots only",
            MAX_UPSTREAM_CA_BYTES / 1024
        )));
    }
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        cert.map_err(|e| SecretError::BadBinding(format!("--upstream-ca: {e}")))?;
        count += 1;
    }
    if count == 0 {
        return Err(SecretError::BadBinding(
            "--upstream-ca: the file holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(())
}

/// A placeholder variable's value.
pub fn placeholder(var: &str) -> String {
    format!("{PLACEHOLDER_PREFIX}{var}")
}
