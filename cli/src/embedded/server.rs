//! The embedded server (the `embedded` feature): with no `--server`, `outboard` starts the server
//! library in its own process on a loopback port, mints a token for the local user and then talks
//! to it over a real WebSocket, exactly as it would to a remote server. One code path for both
//! modes means the embedded mode tests the real protocol every time someone uses it.
//!
//! This is the only module of the CLI that depends on `outboard-server`.
//!
//! The token minted for this process is revoked when it exits normally (also after Ctrl-C in
//! `outboard run`, and when the TUI quits). A process that is killed or crashes leaves its token
//! in the database, unusable by anyone who does not hold it; the next embedded start deletes the
//! tokens of embedded processes that no longer run.
//!
//! The data dir is created 0700 and the database files 0600 explicitly: this process's umask is
//! the user's and is left alone.

use outboard_server::config::{default_data_dir, llm_config, ConfigError};
use outboard_server::sandbox::SandboxConfig;
use outboard_server::{LaunchError, Limits, NetConfig, ServerConfig, ServerHandle};

use crate::args::ConnectArgs;

/// The org the local user belongs to in embedded mode.
pub const LOCAL_ORG: &str = "local";

/// Why the embedded server could not start. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// The provider flags or data directory are unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The model file (`--models`) is unusable.
    #[error(transparent)]
    Models(#[from] outboard_server::models::ModelsError),
    /// No API key for a hosted provider.
    #[error(
        "no API key for {provider}: set {var}, or point --base-url/OUTBOARD_BASE_URL at a local model server, or --server at a running outboard-server"
    )]
    MissingKey {
        /// The provider.
        provider: &'static str,
        /// The environment variable to set.
        var: &'static str,
    },
    /// The data directory cannot be created.
    #[error("cannot create the data directory {dir}: {reason} — set --data/OUTBOARD_DATA_DIR to a writable directory")]
    DataDir {
        /// The directory.
        dir: String,
        /// The OS error.
        reason: String,
    },
    /// `--web-search` / `web_search` / `OUTBOARD_WEB_SEARCH` is not a backend.
    #[error("--web-search (web_search, OUTBOARD_WEB_SEARCH): {0}")]
    WebSearch(String),
    /// The server library failed to start or to mint the token.
    #[error("cannot start the embedded server: {0} — check --data/OUTBOARD_DATA_DIR, or use --server with a running outboard-server")]
    Launch(String),
    /// This host or the configuration cannot run the server (bubblewrap missing or unusable, a
    /// data directory of another user): the message says what to install or fix.
    #[error("cannot start the embedded server: {0}")]
    Host(#[source] LaunchError),
}

impl From<LaunchError> for EmbeddedError {
    fn from(e: LaunchError) -> Self {
        if e.is_configuration() {
            EmbeddedError::Host(e)
        } else {
            EmbeddedError::Launch(e.to_string())
        }
    }
}

impl EmbeddedError {
    /// The process exit status (see [`crate::exit`]): configuration (a missing bubblewrap
    /// included) is 2, a failed start is 3.
    pub fn exit_code(&self) -> i32 {
        match self {
            EmbeddedError::Config(_)
            | EmbeddedError::Models(_)
            | EmbeddedError::MissingKey { .. }
            | EmbeddedError::DataDir { .. }
            | EmbeddedError::WebSearch(_)
            | EmbeddedError::Host(_) => crate::exit::USAGE,
            EmbeddedError::Launch(_) => crate::exit::CONNECT,
        }
    }
}

/// A server running inside this process.
pub struct EmbeddedServer {
    handle: ServerHandle,
    token: String,
}

impl std::fmt::Debug for EmbeddedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedServer")
            .field("url", &self.handle.url())
            .field("token", &"<redacted>")
            .finish()
    }
}

/// The model URL of an embedded server that never calls the model (port 9 is "discard").
const NO_MODEL_URL: &str = "http://127.0.0.1:9";

impl EmbeddedServer {
    /// Starts the server on `127.0.0.1:0` with the provider and data directory of `args`, and
    /// mints a token for the local user (`$USER`, else `local`, in org `local`). Without
    /// `needs_model` a missing API key is not an error (nothing will call the model).
    pub async fn start(
        args: &ConnectArgs,
        needs_model: bool,
    ) -> Result<EmbeddedServer, EmbeddedError> {
        if let Some(file) = &args.models {
            // A model file names its own base URLs and key variables: nothing to default here.
            let models =
                outboard_server::models::ModelCatalog::from_file(file, args.model.as_deref())?;
            return Self::launch(args, models, needs_model).await;
        }
        let mut llm =
            llm_config(args.provider.as_deref(), args.base_url.as_deref(), args.model.as_deref())?;
        if !needs_model && llm.api_key.is_none() && args.base_url.is_none() {
            // Nothing will call the model (no turn is sent, none is resumed): point the provider
            // at a closed loopback port instead of requiring a key for a hosted API.
            llm.base_url = NO_MODEL_URL.to_owned();
        }
        if needs_model && llm.api_key.is_none() && args.base_url.is_none() {
            // A hosted provider with no key fails on the first model call; say so before the run.
            let (provider, var) = if llm.base_url.contains("openai.com") {
                ("OpenAI", "OPENAI_API_KEY")
            } else {
                ("Anthropic", "ANTHROPIC_API_KEY")
            };
            return Err(EmbeddedError::MissingKey { provider, var });
        }
        Self::launch(args, llm.into(), needs_model).await
    }

    async fn launch(
        args: &ConnectArgs,
        models: outboard_server::models::ModelCatalog,
        needs_model: bool,
    ) -> Result<EmbeddedServer, EmbeddedError> {
        let data_dir = match &args.data_dir {
            Some(dir) => dir.clone(),
            None => default_data_dir()?,
        };
        create_dir(&data_dir)?;
        let config = ServerConfig {
            data_dir,
            models,
            sandbox: SandboxConfig::Bwrap,
            limits: Limits::default(),
            net: NetConfig::default(),
            // The one client is this process, on this host, as the user who owns the files.
            allow_client_workspaces: true,
            place_on_hosts: false,
            store: None,
            workspaces: None,
        };

        let launch_error = |e: &dyn std::fmt::Display| EmbeddedError::Launch(e.to_string());
        let listener =
            tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| launch_error(&e))?;
        let handle = outboard_server::launch_with(listener, config, needs_model).await?;
        match handle.revoke_stale_tokens().await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(tokens = n, "revoked the tokens of dead embedded processes"),
            Err(e) => tracing::warn!("cannot clean up stale embedded tokens: {e}"),
        }
        let token = match handle.mint_token(LOCAL_ORG, &local_user()).await {
            Ok(token) => token,
            Err(e) => {
                handle.shutdown().await;
                return Err(launch_error(&e));
            }
        };
        // The setting decides at each start: absent is off.
        let search = args.web_search.as_deref().unwrap_or("off");
        if let Err(e) = handle.set_web_search(LOCAL_ORG, search).await {
            handle.shutdown().await;
            return Err(EmbeddedError::WebSearch(e.to_string()));
        }
        tracing::debug!(url = %handle.url(), "embedded server started");
        Ok(EmbeddedServer { handle, token })
    }

    /// `ws://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.handle.url()
    }

    /// The local user's token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Revokes this process's token (it is useless once the process exits).
    pub async fn revoke_token(&self) {
        if let Err(e) = self.handle.revoke_token(&self.token).await {
            tracing::warn!("cannot revoke the embedded token: {e}");
        }
    }

    /// Revokes the token, stops the server and waits for its sessions to reach a checkpoint.
    pub async fn shutdown(self) {
        self.revoke_token().await;
        self.handle.shutdown().await;
    }
}

/// The local user's name: `$USER`, else `local`.
pub fn local_user() -> String {
    std::env::var("USER").ok().filter(|u| !u.trim().is_empty()).unwrap_or_else(|| "local".into())
}

/// Creates the data dir 0700 (its database files 0600), tightening looser existing ones.
fn create_dir(dir: &std::path::Path) -> Result<(), EmbeddedError> {
    outboard_server::config::secure_data_dir(dir).map_err(|e| EmbeddedError::DataDir {
        dir: dir.display().to_string(),
        reason: e.source.to_string(),
    })
}
