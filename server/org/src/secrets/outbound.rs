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

use outboard_base::util::now_rfc3339;
use outboard_egress::ca::OrgCa;
use outboard_egress::Injection;
use outboard_shared::OrgId;
use outboard_store::db::{params, OptionalExtension};
use outboard_store::org_name;
use std::sync::Arc;

use outboard_base::SecretValue;

use super::binding::{placeholder, Binding};
use super::error::SecretError;
use super::sealed::{host_key, Secrets};

/// The subject's name of the CA's sealed key row (see the module header).
const CA_ROW: &str = "org-ca";

/// What a session's sandbox gets from its org's secrets. `Debug` shows no value.
#[derive(Default)]
pub struct Outbound {
    /// The injections by host key (`host` or `host:port`, as [`host_key`] writes it for
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
        let key = host_key("https", host, Some(port));
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
