//! Server configuration: what `outboard-server serve` and the CLI's embedded mode pass to
//! [`crate::launch`]. Every field has a flag and an environment variable in `main.rs`; the LLM key
//! comes only from the environment and is held as a [`Secret`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::llm::LlmConfig;
use crate::sandbox::SandboxConfig;

/// Everything the server needs to run.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Directory holding `outboard.db` and the session workspaces.
    pub data_dir: PathBuf,
    /// The model provider every new session uses.
    pub llm: LlmConfig,
    /// How Bash commands are sandboxed.
    pub sandbox: SandboxConfig,
    /// The harness's limits.
    pub limits: Limits,
}

/// Limits of the harness loop.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Model calls per turn before the turn stops with `step_limit`.
    pub max_steps: u32,
    /// Default timeout of a Bash command when the model gives none.
    pub bash_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_steps: 50, bash_timeout: Duration::from_secs(120) }
    }
}

impl ServerConfig {
    /// Where the SQLite file lives.
    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("outboard.db")
    }

    /// The root under which each session gets `workspaces/<session_id>`.
    pub fn workspaces_dir(&self) -> PathBuf {
        self.data_dir.join("workspaces")
    }
}

/// A secret string (API key, token): its `Debug` and `Display` print `<redacted>`, so it cannot
/// reach a log or an error message by accident. Read it only where it is sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that must send it (an HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The address `serve` listens on by default.
pub fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7700))
}

/// Why the configuration cannot be used. Each message says what to set.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// An unknown provider name.
    #[error("unknown provider {0:?}: use --provider anthropic or --provider openai")]
    UnknownProvider(String),
    /// No data directory could be found.
    #[error("no data directory: set --data or OUTBOARD_DATA_DIR (HOME is not set either)")]
    NoDataDir,
}

/// The provider settings shared by `outboard-server serve` and the CLI's embedded mode: flags (or
/// their `OUTBOARD_*` variables) plus the key from `ANTHROPIC_API_KEY` / `OPENAI_API_KEY`.
///
/// With no `--provider`, Anthropic is used unless only `OPENAI_API_KEY` is set.
pub fn llm_config(
    provider: Option<&str>,
    base_url: Option<&str>,
    model: Option<&str>,
) -> Result<LlmConfig, ConfigError> {
    use crate::llm::{ProviderKind, RetryPolicy};
    let env_key = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let kind = match provider.map(str::trim) {
        Some("anthropic") => ProviderKind::Anthropic,
        Some("openai") => ProviderKind::OpenAi,
        Some(other) => return Err(ConfigError::UnknownProvider(other.to_owned())),
        None if env_key("ANTHROPIC_API_KEY").is_none() && env_key("OPENAI_API_KEY").is_some() => {
            ProviderKind::OpenAi
        }
        None => ProviderKind::Anthropic,
    };
    let (default_base, default_model, key_var) = match kind {
        ProviderKind::Anthropic => {
            ("https://api.anthropic.com", "claude-sonnet-4-5", "ANTHROPIC_API_KEY")
        }
        ProviderKind::OpenAi => ("https://api.openai.com/v1", "gpt-4.1", "OPENAI_API_KEY"),
    };
    Ok(LlmConfig {
        kind,
        base_url: base_url.unwrap_or(default_base).trim_end_matches('/').to_owned(),
        model: model.unwrap_or(default_model).to_owned(),
        api_key: env_key(key_var).map(Secret::new),
        max_tokens: 8192,
        retry: RetryPolicy::default(),
    })
}

/// The platform data directory: `$XDG_DATA_HOME/outboard`, else `~/.local/share/outboard`.
pub fn default_data_dir() -> Result<PathBuf, ConfigError> {
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(xdg).join("outboard"));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).ok_or(ConfigError::NoDataDir)?;
    Ok(PathBuf::from(home).join(".local/share/outboard"))
}
