//! Opening one connection to an MCP server with the official SDK (`rmcp`): the secrets of its
//! templates resolved, the transport made (a Streamable HTTP client on rustls with the ring
//! provider, or a child process with only the environment given), the MCP handshake, and the
//! first tool list.
//!
//! Resolved values go to the transport only: into header values marked sensitive, or into the
//! child's environment. Every message this module makes is passed through a scrubber of those
//! values first, since a transport's or a server's error text may echo what it was sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use outboard_shared::OrgId;
use rmcp::model::Tool;
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt as _};
use tokio::io::AsyncReadExt as _;

use crate::config::{parse_template, Part, ServerDef, Transport};
use crate::error::McpError;
use crate::names;
use crate::tool::McpTool;
use outboard_base::scrub::Scrubber;
use outboard_org::secrets::{SecretValue, Secrets};

/// A tool list longer than this is cut (the rest is not offered, and the prompt says so): each
/// tool's schema is sent with every model request.
pub const MAX_TOOLS_PER_SERVER: usize = 128;
/// A tool description longer than this is cut in the spec sent to the model.
pub const MAX_DESCRIPTION_BYTES: usize = 2048;
/// A tool whose input schema is larger than this is left out (and named in the prompt).
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// The last bytes of a stdio server's stderr kept, for the error when it cannot start.
pub const STDERR_TAIL_BYTES: usize = 2048;
/// A Streamable HTTP response body larger than this is refused by the transport: far above
/// what [`crate::limits::MAX_RESULT_BYTES`] keeps, below what would hold the server's memory.
pub const MAX_HTTP_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// Receives the server's notifications: a changed tool list marks the cached one stale.
pub(super) struct Handler {
    pub(super) stale: Arc<AtomicBool>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + rmcp::service::MaybeSendFuture + '_ {
        self.stale.store(true, Ordering::Relaxed);
        std::future::ready(())
    }
}

/// One open connection: the SDK's running client (dropping it closes the transport and, for a
/// stdio server, kills the child), its tools, and the scrubber of the values it was given.
pub(super) struct Live {
    pub(super) service: RunningService<RoleClient, Handler>,
    pub(super) tools: std::sync::RwLock<Arc<Vec<McpTool>>>,
    /// Tools left out (too many, schema too large), for the prompt.
    pub(super) left_out: std::sync::RwLock<Vec<String>>,
    pub(super) stale: Arc<AtomicBool>,
    pub(super) scrub: Scrubber,
    /// What the server calls itself (`serverInfo`), one line.
    pub(super) label: String,
}

impl Live {
    /// Whether the transport is gone (a stdio server exited, an HTTP worker gave up).
    pub(super) fn closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    /// The tools now.
    pub(super) fn tools(&self) -> Arc<Vec<McpTool>> {
        self.tools.read().map(|t| Arc::clone(&t)).unwrap_or_default()
    }

    /// Lists the tools again (after `notifications/tools/list_changed`).
    pub(super) async fn refresh(&self, server: &str) -> Result<(), McpError> {
        let listed = self.service.peer().list_all_tools().await.map_err(|e| McpError::Failed {
            server: server.to_owned(),
            why: self.scrub.scrub_str(&e.to_string()).into_owned(),
        })?;
        let (tools, left_out) = shown_tools(server, listed);
        if let Ok(mut t) = self.tools.write() {
            *t = Arc::new(tools);
        }
        if let Ok(mut l) = self.left_out.write() {
            *l = left_out;
        }
        Ok(())
    }
}

/// The values of a definition's templates, in its order, and the scrubber of every secret used.
pub(super) struct Resolved {
    pub(super) pairs: Vec<(String, SecretValue)>,
    pub(super) scrub: Scrubber,
}

/// Resolves every `{secret:NAME}` of `def` from the org's secrets. A name held for several
/// hosts is taken from the HTTP server's own host when it is one of them, else refused as
/// ambiguous; a name held nowhere is refused as missing.
pub(super) async fn resolve(
    secrets: Option<&Secrets>,
    org: &OrgId,
    def: &ServerDef,
) -> Result<Resolved, McpError> {
    let url_host = match &def.transport {
        Transport::Http { url, .. } => url_host(url),
        Transport::Stdio { .. } => None,
    };
    let mut values: Vec<(String, SecretValue)> = Vec::new();
    for name in def.secret_names() {
        let Some(secrets) = secrets else {
            return Err(McpError::NoSecrets { server: def.name.clone(), secret: name });
        };
        let mut found = secrets.named(org, &name).await.map_err(McpError::Secret)?;
        let at = match found.len() {
            0 => return Err(McpError::MissingSecret { server: def.name.clone(), secret: name }),
            1 => 0,
            _ => match found.iter().position(|(h, _)| Some(h) == url_host.as_ref()) {
                Some(at) => at,
                None => {
                    let hosts = found.iter().map(|(h, _)| h.clone()).collect::<Vec<_>>();
                    return Err(McpError::AmbiguousSecret {
                        server: def.name.clone(),
                        secret: name,
                        hosts: hosts.join(", "),
                    });
                }
            },
        };
        let (_, value) = found.swap_remove(at);
        values.push((name, value));
    }
    let scrub = Scrubber::new(
        values.iter().map(|(n, v)| (v.expose().to_owned(), format!("[secret {n}]"))).collect(),
    );
    let mut pairs = Vec::new();
    for (key, template) in def.templates() {
        let mut rendered = String::new();
        for part in parse_template(template)? {
            match part {
                Part::Text(t) => rendered.push_str(&t),
                Part::Secret(n) => {
                    if let Some((_, v)) = values.iter().find(|(name, _)| *name == n) {
                        rendered.push_str(v.expose());
                    }
                }
            }
        }
        pairs.push((key.clone(), SecretValue::new(rendered)));
    }
    Ok(Resolved { pairs, scrub })
}

/// The key under which the secrets of an HTTP server's host are stored (`host[:port]`).
fn url_host(url: &str) -> Option<String> {
    let parsed = reqwest013::Url::parse(url).ok()?;
    Some(outboard_org::secrets::host_key(parsed.scheme(), parsed.host_str()?, parsed.port()))
}

/// Connects to `def` (no timeout here: the hub bounds it).
pub(super) async fn open(
    secrets: Option<&Secrets>,
    org: &OrgId,
    def: &ServerDef,
) -> Result<Live, McpError> {
    let resolved = resolve(secrets, org, def).await?;
    let stale = Arc::new(AtomicBool::new(false));
    let handler = Handler { stale: Arc::clone(&stale) };
    let failed = |why: String, scrub: &Scrubber| McpError::Failed {
        server: def.name.clone(),
        why: scrub.scrub_str(&why).into_owned(),
    };
    let service = match &def.transport {
        Transport::Http { url, .. } => {
            let client = http_client().map_err(|e| failed(e, &resolved.scrub))?;
            let mut headers = std::collections::HashMap::new();
            for (name, value) in &resolved.pairs {
                let name = reqwest013::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| failed(format!("header {name}: {e}"), &resolved.scrub))?;
                let mut value =
                    reqwest013::header::HeaderValue::from_str(value.expose()).map_err(|_| {
                        failed(format!("header {name}: not a valid value"), &resolved.scrub)
                    })?;
                value.set_sensitive(true);
                headers.insert(name, value);
            }
            let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(headers)
                .reinit_on_expired_session(true)
                .max_json_response_size(MAX_HTTP_RESPONSE_BYTES)
                .max_sse_event_size(MAX_HTTP_RESPONSE_BYTES);
            let transport =
                rmcp::transport::StreamableHttpClientTransport::with_client(client, config);
            handler.serve(transport).await.map_err(|e| failed(e.to_string(), &resolved.scrub))?
        }
        Transport::Stdio { command, args, .. } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).env_clear().kill_on_drop(true);
            // Only PATH is inherited, so a bare command name (`npx`, `python3`) is found as the
            // admin would find it; everything else the server has (its own secrets, the model's
            // API key) stays out unless given with --env.
            if let Some(path) = std::env::var_os("PATH") {
                cmd.env("PATH", path);
            }
            for (key, value) in &resolved.pairs {
                cmd.env(key, value.expose());
            }
            let (process, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| failed(format!("cannot start {command}: {e}"), &resolved.scrub))?;
            let tail = Arc::new(Mutex::new(Vec::new()));
            if let Some(mut stderr) = stderr {
                let tail = Arc::clone(&tail);
                // Drained to its end so the child never blocks on a full pipe; the last bytes
                // are kept for the error below.
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = stderr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        if let Ok(mut t) = tail.lock() {
                            t.extend_from_slice(&buf[..n]);
                            let excess = t.len().saturating_sub(STDERR_TAIL_BYTES);
                            t.drain(..excess);
                        }
                    }
                });
            }
            match handler.serve(process).await {
                Ok(service) => service,
                Err(e) => {
                    // Give the reader a moment to collect what the child said as it died.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    let said = tail
                        .lock()
                        .map(|t| String::from_utf8_lossy(&t).trim().to_owned())
                        .unwrap_or_default();
                    let why = if said.is_empty() {
                        e.to_string()
                    } else {
                        format!("{e}; its stderr ends with: {said}")
                    };
                    return Err(failed(why, &resolved.scrub));
                }
            }
        }
    };
    let label = service
        .peer_info()
        .and_then(|info| {
            let i = info.server_info.as_ref()?;
            Some(one_line(&format!("{} {}", i.name, i.version), 80))
        })
        .unwrap_or_default();
    let listed = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| failed(format!("cannot list its tools: {e}"), &resolved.scrub))?;
    let (tools, left_out) = shown_tools(&def.name, listed);
    Ok(Live {
        service,
        tools: std::sync::RwLock::new(Arc::new(tools)),
        left_out: std::sync::RwLock::new(left_out),
        stale,
        scrub: resolved.scrub,
        label,
    })
}

/// The HTTP client of the Streamable HTTP transport: rustls on the ring provider with the
/// webpki roots, no redirects (a redirect would carry the headers, credentials included,
/// elsewhere).
fn http_client() -> Result<reqwest013::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest013::Client::builder()
        .use_preconfigured_tls(tls)
        .redirect(reqwest013::redirect::Policy::none())
        .build()
        .map_err(|e| format!("HTTP client setup: {e}"))
}

/// The tools as the model sees them, capped, and the names of those left out with why.
pub(super) fn shown_tools(server: &str, listed: Vec<Tool>) -> (Vec<McpTool>, Vec<String>) {
    let mut tools = Vec::new();
    let mut left_out = Vec::new();
    for tool in listed {
        if tools.len() >= MAX_TOOLS_PER_SERVER {
            left_out.push(format!("{} (over {MAX_TOOLS_PER_SERVER} tools)", tool.name));
            continue;
        }
        let schema = serde_json::Value::Object((*tool.input_schema).clone());
        if schema.to_string().len() > MAX_SCHEMA_BYTES {
            left_out.push(format!("{} (input schema over 16 KiB)", tool.name));
            continue;
        }
        let description = tool.description.as_deref().unwrap_or_default();
        tools.push(McpTool {
            shown: names::shown(server, &tool.name),
            remote: tool.name.to_string(),
            description: cut(description, MAX_DESCRIPTION_BYTES),
            schema,
        });
    }
    (tools, left_out)
}

/// `text` cut at `max` bytes (on a character boundary) with an ellipsis.
pub(super) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().find(|(i, _)| *i >= max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// `text` on one line, cut at `max` bytes.
pub(super) fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    cut(flat.trim(), max)
}
