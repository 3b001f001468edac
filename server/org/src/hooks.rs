//! The org's hooks: webhooks an admin adds (`outboard-server admin hook add|list|remove`), run
//! by the server for every session of the org, as a signed HTTP POST with a deadline.
//!
//! Design choices:
//! - **The server calls them, never a sandbox.** The body is the hook's JSON input (Claude
//!   Code's); the answer is read as a command hook's stdout after exit 0 (docs/HOOKS.md).
//! - **Signed with an org secret, never a new kind of credential.** The HMAC-SHA256 key is the
//!   org secret stored for the URL's host (`admin secret set --org ORG --host HOST NAME`),
//!   sealed like the others and opened only to sign; the signature goes in
//!   `X-Outboard-Signature: sha256=<hex>` (see `outboard_hooks::sign`). Neither the key nor the
//!   signature is ever logged or put in an error; an error names the hook by id and host.
//! - **They fail closed.** No key, no answer within the deadline, a refused connection, a
//!   status other than 2xx, an answer over [`MAX_ANSWER_BYTES`] or not JSON: the hook blocks
//!   (a `PreToolUse` call is refused). A repository cannot turn them off: they are not in any
//!   file of the workspace.
//! - The URL is the admin's choice (a service on the private network is the usual setup), so it
//!   is reached where it is, outside the sessions' network policy, as the web search backend
//!   is; redirects are not followed.

use std::time::Duration;

use outboard_base::util::{now_rfc3339, random_hex};
use outboard_hooks::{HookEvent, HookSpec, Matcher, RunResult, Source};
use outboard_shared::OrgId;
use outboard_store::db::params;
use outboard_store::{org_id_by_name, Store, StoreError};

use crate::secrets::{host_key, Secrets};

/// The deadline of a call when the admin gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest deadline an admin may set.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// The most of an answer read; a longer one is a failure.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Hooks one org may have.
pub const MAX_HOOKS_PER_ORG: usize = 32;

/// A problem with an `admin hook` command, with what to do.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("no org named {0:?}: create it with `outboard-server admin user add NAME --org ORG`")]
    NoOrg(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A stored hook, as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrgHook {
    pub id: String,
    pub event: String,
    pub matcher: String,
    pub url: String,
    pub timeout_ms: u64,
}

impl OrgHook {
    /// The hook as the harness runs it; `None` when the stored row is no longer valid.
    pub fn spec(&self) -> Option<HookSpec> {
        Some(HookSpec {
            event: HookEvent::parse(&self.event)?,
            matcher: Matcher::parse(&self.matcher).ok()?,
            matcher_text: self.matcher.clone(),
            handler: outboard_hooks::Handler::Http(self.url.clone()),
            timeout: Duration::from_millis(self.timeout_ms),
            block_on_failure: true,
            source: Source::Org(self.id.clone()),
        })
    }
}

fn check_url(text: &str) -> Result<reqwest::Url, HookError> {
    let bad = |why: &str| HookError::Invalid(format!("the hook URL {text:?}: {why}"));
    let url = reqwest::Url::parse(text).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("give an http:// or https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it names no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "it carries credentials; the signing key is the org secret for the URL's host \
             (admin secret set --org ORG --host HOST NAME)",
        ));
    }
    Ok(url)
}

/// The `host[:port]` under which the signing key of `url` is stored.
pub fn key_host(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    Some(host_key(url.scheme(), url.host_str()?, url.port()))
}

async fn org_id(store: &Store, org: &str) -> Result<OrgId, HookError> {
    let name = org.to_owned();
    store.call(move |c| org_id_by_name(c, &name)).await?.ok_or_else(|| HookError::NoOrg(org.into()))
}

/// `admin hook add --org ORG --event EVENT [--matcher M] [--timeout S] URL`: its id.
pub async fn add(
    store: &Store,
    org: &str,
    event: &str,
    matcher: &str,
    url: &str,
    timeout: Option<Duration>,
) -> Result<String, HookError> {
    let id = org_id(store, org).await?;
    let Some(parsed) = HookEvent::parse(event) else {
        return Err(HookError::Invalid(format!(
            "{event:?} is not a hook event; give one of {}",
            HookEvent::FIRED.map(HookEvent::name).join(", ")
        )));
    };
    if !parsed.fired() {
        return Err(HookError::Invalid(format!(
            "Outboard does not fire {event} yet; give one of {}",
            HookEvent::FIRED.map(HookEvent::name).join(", ")
        )));
    }
    Matcher::parse(matcher).map_err(HookError::Invalid)?;
    let url = check_url(url)?.to_string();
    let timeout = timeout.unwrap_or(DEFAULT_TIMEOUT);
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(HookError::Invalid(format!(
            "the timeout must be between 1 and {} seconds",
            MAX_TIMEOUT.as_secs()
        )));
    }
    let hook_id = format!("hook-{}", random_hex(4));
    let (row_id, event, matcher) = (hook_id.clone(), event.to_owned(), matcher.to_owned());
    let count = list_of(store, &id).await?.len();
    if count >= MAX_HOOKS_PER_ORG {
        return Err(HookError::Invalid(format!(
            "org {org} has {count} hooks, the most it may have; remove one first"
        )));
    }
    store
        .call(move |c| {
            c.execute(
                "INSERT INTO org_hooks (id, org_id, event, matcher, url, timeout_ms, added_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    row_id,
                    id.0,
                    event,
                    matcher,
                    url,
                    timeout.as_millis() as i64,
                    now_rfc3339()
                ],
            )?;
            Ok(())
        })
        .await?;
    Ok(hook_id)
}

async fn list_of(store: &Store, org: &OrgId) -> Result<Vec<OrgHook>, StoreError> {
    let org = org.clone();
    store
        .call(move |c| {
            let mut stmt = c.prepare(
                "SELECT id, event, matcher, url, timeout_ms FROM org_hooks WHERE org_id = ?1
                 ORDER BY added_at, id",
            )?;
            let rows = stmt
                .query_map([&org.0], |r| {
                    Ok(OrgHook {
                        id: r.get(0)?,
                        event: r.get(1)?,
                        matcher: r.get(2)?,
                        url: r.get(3)?,
                        timeout_ms: r.get::<_, i64>(4)?.max(1) as u64,
                    })
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
}

/// `admin hook list --org ORG`: one line a hook.
pub async fn list(store: &Store, org: &str) -> Result<String, HookError> {
    let id = org_id(store, org).await?;
    let hooks = list_of(store, &id).await?;
    if hooks.is_empty() {
        return Ok(format!("org {org} has no hooks\n"));
    }
    let mut out = String::from(
        "ID\tEVENT\tMATCHER\tTIMEOUT\tURL (signing key: the org secret for its host)\n",
    );
    for h in hooks {
        let matcher = if h.matcher.is_empty() { "*" } else { &h.matcher };
        out.push_str(&format!(
            "{}\t{}\t{}\t{}s\t{}\n",
            h.id,
            h.event,
            matcher,
            h.timeout_ms as f64 / 1000.0,
            h.url
        ));
    }
    Ok(out)
}

/// `admin hook remove --org ORG ID`: whether it was there.
pub async fn remove(store: &Store, org: &str, hook: &str) -> Result<bool, HookError> {
    let id = org_id(store, org).await?;
    let hook = hook.to_owned();
    let n = store
        .call(move |c| {
            c.execute("DELETE FROM org_hooks WHERE org_id = ?1 AND id = ?2", params![id.0, hook])
        })
        .await?;
    Ok(n > 0)
}

/// The org's hooks as the harness runs them (rows no longer valid are logged and left out).
pub async fn load(store: &Store, org: &OrgId) -> Result<Vec<HookSpec>, StoreError> {
    let rows = list_of(store, org).await?;
    Ok(rows
        .iter()
        .filter_map(|h| {
            let spec = h.spec();
            if spec.is_none() {
                tracing::warn!(org = %org.0, hook = %h.id, "ignoring a stored hook that is no longer valid");
            }
            spec
        })
        .collect())
}

fn client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(MAX_TIMEOUT)
            .build()
            .unwrap_or_default()
    })
}

/// Calls the webhook `spec` (an [`outboard_hooks::Handler::Http`]) with `body`, signed with the
/// org secret for its host: a 2xx answer is a run that exited 0 with the answer as stdout;
/// anything else is a failure whose sentence names no secret.
pub async fn call(
    secrets: Option<&Secrets>,
    org: &OrgId,
    spec: &HookSpec,
    body: Vec<u8>,
) -> RunResult {
    let outboard_hooks::Handler::Http(url) = &spec.handler else {
        return failed("is not a webhook");
    };
    let Some(host) = key_host(url) else { return failed("has no valid URL") };
    let Some(secrets) = secrets else {
        return failed("cannot be signed: this server has no secret key to open org secrets with");
    };
    let key = match secrets.for_host(org, &host).await {
        Ok(Some(key)) => key,
        Ok(None) => {
            return failed(&format!(
                "cannot be signed: the org has no secret for {host} (admin secret set --org ORG \
                 --host {host} NAME)"
            ))
        }
        Err(_) => {
            return failed(&format!("cannot be signed: the org secret for {host} does not open"))
        }
    };
    let signature = outboard_hooks::sign::signature(key.expose().as_bytes(), &body);
    drop(key);
    let deadline = spec.timeout;
    let request = client()
        .post(url.as_str())
        .header("content-type", "application/json")
        .header(outboard_hooks::sign::HEADER, signature)
        .header("x-outboard-hook-id", hook_id(spec))
        .timeout(deadline)
        .body(body);
    let work = async {
        let mut response = match request.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => return failed(&timed_out(deadline, &host)),
            Err(e) if e.is_connect() => return failed(&format!("could not connect to {host}")),
            Err(_) => return failed(&format!("the request to {host} failed")),
        };
        let status = response.status();
        let mut answer = Vec::new();
        loop {
            match response.chunk().await {
                Ok(Some(chunk)) => {
                    if answer.len() + chunk.len() > MAX_ANSWER_BYTES {
                        return failed(&format!("answered more than {MAX_ANSWER_BYTES} bytes"));
                    }
                    answer.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) if e.is_timeout() => return failed(&timed_out(deadline, &host)),
                Err(_) => return failed(&format!("the answer from {host} broke off")),
            }
        }
        if !status.is_success() {
            return failed(&format!("answered HTTP {}", status.as_u16()));
        }
        let stdout = String::from_utf8_lossy(&answer).into_owned();
        if !stdout.trim().is_empty() && !stdout.trim_start().starts_with('{') {
            return failed("answered something other than a JSON object");
        }
        RunResult { exit_code: Some(0), stdout, ..RunResult::default() }
    };
    // The client's own timeout covers the whole exchange; this one is the backstop.
    match tokio::time::timeout(deadline + Duration::from_millis(250), work).await {
        Ok(result) => result,
        Err(_) => failed(&timed_out(deadline, &host)),
    }
}

fn hook_id(spec: &HookSpec) -> String {
    match &spec.source {
        Source::Org(id) => id.clone(),
        Source::Repository(file) => file.clone(),
    }
}

fn timed_out(deadline: Duration, host: &str) -> String {
    format!("{host} did not answer within {:.1}s", deadline.as_secs_f64())
}

fn failed(why: &str) -> RunResult {
    RunResult { failure: Some(why.to_owned()), ..RunResult::default() }
}
