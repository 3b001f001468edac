//! An org's MCP servers as an admin defines them (`admin mcp add|ls|rm`): the definition, its
//! checks, the `{secret:NAME}` templates in headers and environment values, and the rows of
//! `org_mcp_servers` (migration 13) that hold them.
//!
//! A definition is stored as written, templates included: a secret's value is looked up only
//! when the server connects (the `connect` module), so rotating a secret needs no change here and
//! the table never holds a credential.

use outboard_shared::OrgId;
use outboard_store::db::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use crate::error::McpError;
use outboard_base::util::now_rfc3339;
use outboard_store::Store;

/// The longest server name: it is part of every tool name the model sees (`mcp__NAME__TOOL`,
/// at most 64 characters for Anthropic and OpenAI), so it leaves room for the tool's.
pub const MAX_SERVER_NAME: usize = 32;
/// Headers or environment variables of one server, at most: a handful in practice; the cap keeps
/// a mistaken script from storing thousands.
pub const MAX_PAIRS: usize = 32;
/// The longest header value, environment value, URL, command or argument as written.
pub const MAX_VALUE_BYTES: usize = 4096;
/// Arguments of a stdio server's command, at most.
pub const MAX_ARGS: usize = 64;

/// How the server reaches an MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum Transport {
    /// Streamable HTTP at `url`, with these headers on every request.
    Http {
        /// `http://` or `https://`.
        url: String,
        /// `(name, value template)`, the name lowercase.
        headers: Vec<(String, String)>,
    },
    /// A child process of the server speaking MCP on its stdin/stdout.
    Stdio {
        /// The program (a path, or a name looked up in the server's `PATH`).
        command: String,
        /// Its arguments, as given (no templates: argv is visible to every local user).
        args: Vec<String>,
        /// `(KEY, value template)`: the child's whole environment besides `PATH`.
        env: Vec<(String, String)>,
    },
}

/// One MCP server of an org.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerDef {
    /// `[a-z0-9][a-z0-9_-]*`, without `__`, at most [`MAX_SERVER_NAME`].
    pub name: String,
    /// Where it is.
    pub transport: Transport,
}

impl ServerDef {
    /// `http` or `stdio`.
    pub fn kind(&self) -> &'static str {
        match self.transport {
            Transport::Http { .. } => "http",
            Transport::Stdio { .. } => "stdio",
        }
    }

    /// Where it is, for a listing: the URL, or the command line.
    pub fn target(&self) -> String {
        match &self.transport {
            Transport::Http { url, .. } => url.clone(),
            Transport::Stdio { command, args, .. } => {
                let mut line = command.clone();
                for a in args {
                    line.push(' ');
                    line.push_str(a);
                }
                line
            }
        }
    }

    /// The headers (`name: template`) or environment (`KEY=template`) as written: templates,
    /// never values.
    pub fn settings(&self) -> Vec<String> {
        match &self.transport {
            Transport::Http { headers, .. } => {
                headers.iter().map(|(n, v)| format!("{n}: {v}")).collect()
            }
            Transport::Stdio { env, .. } => env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        }
    }

    /// The pairs whose values are templates.
    pub fn templates(&self) -> &[(String, String)] {
        match &self.transport {
            Transport::Http { headers, .. } => headers,
            Transport::Stdio { env, .. } => env,
        }
    }

    /// Every secret name its templates use, once each, in order.
    pub fn secret_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for (_, template) in self.templates() {
            for part in parse_template(template).unwrap_or_default() {
                if let Part::Secret(name) = part {
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
            }
        }
        names
    }

    /// Checks everything an admin typed; the error names what is wrong and how to write it.
    pub fn validate(&self) -> Result<(), McpError> {
        validate_name(&self.name)?;
        let bad = |why: String| McpError::BadDefinition(why);
        match &self.transport {
            Transport::Http { url, headers } => {
                let lower = url.to_ascii_lowercase();
                if !(lower.starts_with("http://") || lower.starts_with("https://")) {
                    return Err(bad(format!("--url {url}: give an http:// or https:// URL")));
                }
                if url.len() > MAX_VALUE_BYTES {
                    return Err(bad("--url is longer than 4 KiB".into()));
                }
                if url.contains("{secret:") {
                    return Err(bad(
                        "--url holds a {secret:…}: a URL is logged and listed; put the \
                         credential in a --header"
                            .into(),
                    ));
                }
                let (_, authority) = url.split_once("://").unwrap_or_default();
                if authority.split('/').next().unwrap_or_default().contains('@') {
                    return Err(bad(
                        "--url holds a user or password: put the credential in a --header with \
                         {secret:NAME}"
                            .into(),
                    ));
                }
                check_pairs(headers, "--header")?;
                for (name, _) in headers {
                    let valid = !name.is_empty()
                        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
                    if !valid {
                        return Err(bad(format!(
                            "--header {name:?}: a header name has only letters, digits, '-' \
                             and '_'"
                        )));
                    }
                    if RESERVED_HEADERS.contains(&name.as_str()) {
                        return Err(bad(format!(
                            "--header {name}: the MCP transport sets this header itself"
                        )));
                    }
                }
            }
            Transport::Stdio { command, args, env } => {
                if command.trim().is_empty() {
                    return Err(bad("--command is empty".into()));
                }
                if args.len() > MAX_ARGS {
                    return Err(bad(format!("more than {MAX_ARGS} arguments")));
                }
                for a in std::iter::once(command).chain(args) {
                    if a.len() > MAX_VALUE_BYTES {
                        return Err(bad("an argument is longer than 4 KiB".into()));
                    }
                    if a.contains("{secret:") {
                        return Err(bad(format!(
                            "{a:?}: a command line is visible to every local user (ps); pass \
                             the secret with --env KEY={{secret:NAME}}"
                        )));
                    }
                }
                check_pairs(env, "--env")?;
                for (key, _) in env {
                    let valid = !key.is_empty()
                        && !key.starts_with(|c: char| c.is_ascii_digit())
                        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                    if !valid {
                        return Err(bad(format!(
                            "--env {key:?}: a variable name has only letters, digits and '_'"
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Headers the Streamable HTTP transport sets itself (rmcp refuses them as custom headers).
const RESERVED_HEADERS: &[&str] =
    &["accept", "mcp-session-id", "mcp-protocol-version", "last-event-id"];

fn check_pairs(pairs: &[(String, String)], flag: &str) -> Result<(), McpError> {
    if pairs.len() > MAX_PAIRS {
        return Err(McpError::BadDefinition(format!("more than {MAX_PAIRS} {flag} values")));
    }
    for (i, (key, value)) in pairs.iter().enumerate() {
        if value.len() > MAX_VALUE_BYTES {
            return Err(McpError::BadDefinition(format!("{flag} {key}: longer than 4 KiB")));
        }
        if value.chars().any(char::is_control) {
            return Err(McpError::BadDefinition(format!(
                "{flag} {key}: the value holds a control character"
            )));
        }
        if pairs[..i].iter().any(|(k, _)| k == key) {
            return Err(McpError::BadDefinition(format!("{flag} {key} is given twice")));
        }
        parse_template(value)?;
    }
    Ok(())
}

/// Checks a server's name: 1 to [`MAX_SERVER_NAME`] of `a-z 0-9 _ -`, starting with a letter or
/// digit, without `__` (which separates it from the tool's name in `mcp__NAME__TOOL`).
pub fn validate_name(name: &str) -> Result<(), McpError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_SERVER_NAME
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && !name.contains("__")
        && !name.ends_with('_');
    if ok {
        Ok(())
    } else {
        Err(McpError::BadName(name.chars().take(40).collect()))
    }
}

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text as written.
    Text(String),
    /// `{secret:NAME}`.
    Secret(String),
}

/// Splits a header or environment value into text and `{secret:NAME}` references. A `{` that
/// does not start `{secret:` is text; an unclosed `{secret:` or a bad name is an error.
pub fn parse_template(template: &str) -> Result<Vec<Part>, McpError> {
    const OPEN: &str = "{secret:";
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find(OPEN) {
        if at > 0 {
            parts.push(Part::Text(rest[..at].to_owned()));
        }
        let after = &rest[at + OPEN.len()..];
        let Some(end) = after.find('}') else {
            return Err(McpError::BadDefinition(format!(
                "{template:?}: `{{secret:` is not closed; write {{secret:NAME}}"
            )));
        };
        let name = &after[..end];
        outboard_org::secrets::validate_name(name).map_err(|e| {
            McpError::BadDefinition(format!("{template:?}: {{secret:{name}}}: {e}"))
        })?;
        parts.push(Part::Secret(name.to_owned()));
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Text(rest.to_owned()));
    }
    Ok(parts)
}

/// Parses `--header 'Name: value'`.
pub fn parse_header(arg: &str) -> Result<(String, String), McpError> {
    let Some((name, value)) = arg.split_once(':') else {
        return Err(McpError::BadDefinition(format!(
            "--header {arg:?}: write 'Name: value', e.g. 'Authorization: Bearer {{secret:NAME}}'"
        )));
    };
    Ok((name.trim().to_ascii_lowercase(), value.trim().to_owned()))
}

/// Parses `--env KEY=value`.
pub fn parse_env(arg: &str) -> Result<(String, String), McpError> {
    match arg.split_once('=') {
        Some((key, value)) => Ok((key.to_owned(), value.to_owned())),
        None => Err(McpError::BadDefinition(format!(
            "--env {arg:?}: write KEY=value, e.g. API_TOKEN={{secret:NAME}}"
        ))),
    }
}

/// The org's servers, by name.
pub async fn list(store: &Store, org: &OrgId) -> Result<Vec<ServerDef>, McpError> {
    let org = org.clone();
    let rows: Vec<(String, String)> = store
        .call(move |c| {
            let mut stmt = c.prepare(
                "SELECT name, spec FROM org_mcp_servers WHERE org_id = ?1 ORDER BY name",
            )?;
            let rows = stmt
                .query_map([&org.0], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await?;
    rows.into_iter()
        .map(|(name, spec)| {
            let transport = serde_json::from_str(&spec)
                .map_err(|e| McpError::Corrupt { name: name.clone(), why: e.to_string() })?;
            Ok(ServerDef { name, transport })
        })
        .collect()
}

/// Adds or replaces a server; refused past [`crate::limits::MAX_SERVERS_PER_ORG`]. `true` when it
/// replaced one of that name.
pub async fn put(store: &Store, org: &OrgId, def: &ServerDef) -> Result<bool, McpError> {
    def.validate()?;
    let spec = serde_json::to_string(&def.transport)
        .map_err(|e| McpError::Corrupt { name: def.name.clone(), why: e.to_string() })?;
    let (org, name) = (org.clone(), def.name.clone());
    store
        .call(move |c| {
            let tx = c.transaction()?;
            let existed: bool = tx
                .query_row(
                    "SELECT 1 FROM org_mcp_servers WHERE org_id = ?1 AND name = ?2",
                    params![org.0, name],
                    |_| Ok(()),
                )
                .optional()?
                .is_some();
            let count: i64 = tx.query_row(
                "SELECT COUNT(*) FROM org_mcp_servers WHERE org_id = ?1",
                [&org.0],
                |r| r.get(0),
            )?;
            if !existed && count as usize >= crate::limits::MAX_SERVERS_PER_ORG {
                return Ok(Err(McpError::TooMany));
            }
            tx.execute(
                "INSERT INTO org_mcp_servers (org_id, name, spec, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (org_id, name) DO UPDATE SET spec = excluded.spec,
                     created_at = excluded.created_at",
                params![org.0, name, spec, now_rfc3339()],
            )?;
            tx.commit()?;
            Ok(Ok(existed))
        })
        .await?
}

/// Removes a server; `false` when the org had none of that name.
pub async fn remove(store: &Store, org: &OrgId, name: &str) -> Result<bool, McpError> {
    let (org, name) = (org.clone(), name.to_owned());
    Ok(store
        .call(move |c| {
            Ok(c.execute(
                "DELETE FROM org_mcp_servers WHERE org_id = ?1 AND name = ?2",
                params![org.0, name],
            )? > 0)
        })
        .await?)
}
