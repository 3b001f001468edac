//! What the benchmark binaries share: percentiles, unit conversion, and the sandbox settings of
//! in-process servers.

use std::time::Duration;

/// The `p` quantile (0.0–1.0) of `sorted` samples (nearest rank; zero when empty).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Microseconds, for tables.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The release `outboard-server` beside the running bench (the sandbox agent, or a sandbox
/// host); `case` is the `scripts/bench.sh` case that builds it, named in the error.
pub fn server_exe(case: &str) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context as _;
    let exe = std::env::current_exe()?;
    let path = exe.parent().context("no parent dir")?.join("outboard-server");
    if !path.exists() {
        anyhow::bail!(
            "{} is missing: build it first (scripts/bench.sh {case} does)",
            path.display()
        );
    }
    Ok(path)
}

/// The sandbox of in-process servers: a benchmark binary does not carry the sandbox agent, so
/// point at the `outboard-server` built beside it (`scripts/bench.sh` builds it).
pub fn sandbox_config() -> outboard_server::sandbox::SandboxConfig {
    let agent_exe = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("outboard-server")));
    outboard_server::sandbox::SandboxConfig {
        agent_exe,
        ..outboard_server::sandbox::SandboxConfig::default()
    }
}

/// An in-process server for a benchmark talking to `mock` in the `api` dialect, with one
/// session its driver is attached to.
pub struct BenchSession {
    /// The server.
    pub server: outboard_server::ServerHandle,
    /// The driver's connection.
    pub client: crate::harness::WsClient,
    /// The session's id.
    pub session: String,
    _data: tempfile::TempDir,
}

impl BenchSession {
    /// Starts the server (data in a fresh temp dir, the sandbox agent beside the bench) with
    /// `limits`, creates a session and attaches to it as its driver.
    pub async fn start(
        api: &str,
        mock: &crate::mock_llm::MockLlm,
        limits: outboard_server::Limits,
    ) -> anyhow::Result<BenchSession> {
        use anyhow::Context as _;
        let data = tempfile::tempdir_in(std::env::temp_dir())?;
        let base =
            if api == "anthropic" { mock.anthropic_base_url() } else { mock.openai_base_url() };
        let mut llm = outboard_server::config::llm_config(Some(api), Some(&base), Some("bench"))?;
        llm.api_key = Some(outboard_server::Secret::new("bench-key"));
        let config = outboard_server::ServerConfig {
            data_dir: data.path().to_path_buf(),
            models: llm.into(),
            sandbox: sandbox_config(),
            limits,
            net: outboard_server::NetConfig::default(),
            allow_client_workspaces: false,
            place_on_hosts: false,
            store: None,
            workspaces: None,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let server = outboard_server::launch(listener, config).await?;
        let token = server.mint_token("bench", "bench").await?;
        let mut client = crate::harness::WsClient::connect(&server.url(), &token).await?;
        let created = client
            .request("session/create", serde_json::json!({}))
            .await?
            .map_err(anyhow::Error::msg)?;
        let session = created["session"]["id"].as_str().context("no id")?.to_owned();
        client
            .request("session/attach", serde_json::json!({"session_id": session, "role": "driver"}))
            .await?
            .map_err(anyhow::Error::msg)?;
        Ok(BenchSession { server, client, session, _data: data })
    }
}
