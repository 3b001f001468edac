//! Org secrets bound to the sandbox's outbound HTTP (`admin secret set --inject-header`), and the
//! org's sandbox CA, sealed beside them.
//!
//! A bound secret is what the network proxy injects into requests to its host: the header
//! template with the value in place of `{}`, the placeholders (values of variables the sandbox
//! holds instead of the secret) replaced by the value, the value scrubbed from the responses.
//! [`Outbound`] is everything a session's sandbox gets from its org's secrets: the injections
//! by host, the placeholder variables, and every value of the org to scrub from tool results.
//!
//! The CA's key is sealed like a secret's value, under the row `(org, "", "org-ca")`: no secret
//! has an empty host, so the sealed key cannot be swapped with a secret's.

use std::sync::Arc;

use outboard_shared::OrgId;
use outboard_store::db::{params, OptionalExtension};

use super::{SecretError, SecretValue, Secrets};
use outboard_base::util::now_rfc3339;
use outboard_egress::ca::OrgCa;
use outboard_egress::Injection;
use outboard_store::org_name;

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

/// The subject's name of the CA's sealed key row (see the module header).
const CA_ROW: &str = "org-ca";

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
    pub(super) fn check(&self, value: &SecretValue) -> Result<(), SecretError> {
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
    pub(super) fn columns(&self) -> (Option<String>, Option<String>, Option<String>) {
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
    pub(super) fn from_columns(
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

/// What a session's sandbox gets from its org's secrets. `Debug` shows no value.
#[derive(Default)]
pub struct Outbound {
    /// The injections by host key (`host` or `host:port`, as [`super::host_key`] writes it for
    /// https), most recently set first.
    pub injections: Vec<(String, Arc<Injection>)>,
    /// The placeholder variables and their values.
    pub env: Vec<(String, String)>,
    /// Every value of the org's secrets that opened, and what replaces it in tool results and
    /// events (`[secret NAME]`).
    pub scrub: Vec<(String, String)>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("injections", &self.injections.iter().map(|(h, _)| h).collect::<Vec<_>>())
            .field("env", &self.env)
            .field("scrub", &self.scrub.len())
            .finish()
    }
}

impl Outbound {
    /// The injections for `host:port` (as the sandbox's client named it, reached over https).
    pub fn for_host(&self, host: &str, port: u16) -> Vec<Arc<Injection>> {
        let key = super::host_key("https", host, Some(port));
        self.injections.iter().filter(|(h, _)| *h == key).map(|(_, i)| i.clone()).collect()
    }
}

/// One stored row as selected for [`Secrets::outbound`].
type OutboundRow =
    (String, String, Vec<u8>, Vec<u8>, Option<String>, Option<String>, Option<String>);

impl Secrets {
    /// Opens every secret of `org` for a session's sandbox. A secret that does not open with
    /// this key is left out (and logged by name): it can be neither sent nor leaked.
    pub async fn outbound(&self, org: &OrgId) -> Result<Outbound, SecretError> {
        let id = org.clone();
        let rows: Vec<OutboundRow> = self
            .store
            .call(move |c| {
                let mut stmt = c.prepare(
                    "SELECT host, name, nonce, sealed, inject_header, placeholders, upstream_ca
                     FROM org_secrets WHERE org_id = ?1 AND host <> ''
                     ORDER BY created_at DESC, name DESC",
                )?;
                let rows = stmt
                    .query_map([&id.0], |r| {
                        Ok((
                            r.get(0)?,
                            r.get(1)?,
                            r.get(2)?,
                            r.get(3)?,
                            r.get(4)?,
                            r.get(5)?,
                            r.get(6)?,
                        ))
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await?;
        let mut out = Outbound::default();
        for (host, name, nonce, sealed, header, placeholders, upstream_ca) in rows {
            let Some(value) = self.key.open(org, &host, &name, &nonce, sealed) else {
                tracing::warn!(%org, %host, %name, "a secret does not open with this server's key; left out of the sandbox's network");
                continue;
            };
            out.scrub.push((value.expose().to_owned(), format!("[secret {name}]")));
            let binding = Binding::from_columns(header, placeholders, upstream_ca);
            let Some(template) = &binding.inject_header else { continue };
            let placeholders: Vec<String> =
                binding.placeholders.iter().map(|v| placeholder(v)).collect();
            for (var, value) in binding.placeholders.iter().zip(&placeholders) {
                if !out.env.iter().any(|(v, _)| v == var) {
                    out.env.push((var.clone(), value.clone()));
                }
            }
            out.injections.push((
                host,
                Arc::new(Injection {
                    name,
                    header: template.name().to_owned(),
                    header_value: template.render(value.expose()),
                    value: value.expose().to_owned(),
                    placeholders,
                    upstream_ca: binding.upstream_ca,
                }),
            ));
        }
        Ok(out)
    }

    /// The org's sandbox CA, made (and stored) on first use.
    pub async fn org_ca(&self, org: &OrgId) -> Result<OrgCa, SecretError> {
        if let Some(ca) = self.read_ca(org).await? {
            return Ok(ca);
        }
        let id = org.clone();
        let name = self.store.call(move |c| Ok(org_name(c, &id))).await?;
        let ca = OrgCa::generate(&name)?;
        let (nonce, sealed) = self.key.seal(org, "", CA_ROW, &SecretValue::new(ca.key_pem()))?;
        let (id, subject, cert) = (org.clone(), ca.subject().to_owned(), ca.cert_pem().to_owned());
        // Two sessions starting at once may both make one: the first stored wins, and both use it.
        self.store
            .call(move |c| {
                c.execute(
                    "INSERT INTO org_ca (org_id, subject, cert_pem, nonce, sealed_key, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (org_id) DO NOTHING",
                    params![id.0, subject, cert, nonce.as_slice(), sealed, now_rfc3339()],
                )?;
                Ok(())
            })
            .await?;
        self.read_ca(org).await?.ok_or_else(|| {
            SecretError::BadBinding(
                "the org's sandbox CA vanished while it was stored; retry".into(),
            )
        })
    }

    /// The org's stored CA, if any.
    pub async fn read_ca(&self, org: &OrgId) -> Result<Option<OrgCa>, SecretError> {
        let id = org.clone();
        let row: Option<(String, String, Vec<u8>, Vec<u8>)> = self
            .store
            .call(move |c| {
                c.query_row(
                    "SELECT subject, cert_pem, nonce, sealed_key FROM org_ca WHERE org_id = ?1",
                    [&id.0],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()
            })
            .await?;
        let Some((subject, cert, nonce, sealed)) = row else { return Ok(None) };
        let key = self.key.open(org, "", CA_ROW, &nonce, sealed).ok_or_else(|| {
            outboard_egress::ca::CaError::Damaged(
                "its key does not open with this server's key".into(),
            )
        })?;
        Ok(Some(OrgCa::from_parts(&subject, &cert, key.expose())?))
    }

    /// Forgets the org's CA (a new one is made for the next sandbox); `false` when there was none.
    pub async fn remove_ca(&self, org: &OrgId) -> Result<bool, SecretError> {
        let id = org.clone();
        Ok(self
            .store
            .call(move |c| Ok(c.execute("DELETE FROM org_ca WHERE org_id = ?1", [&id.0])? > 0))
            .await?)
    }
}
