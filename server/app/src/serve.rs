//! `serve` and `sandbox-host`: assemble the configuration from the flags, start, stop on a signal.

use crate::args::*;
use anyhow::Context as _;
use outboard_flagfile::FlagFile;
use outboard_server::config::llm_config;
use outboard_server::models::ModelCatalog;
use outboard_server::netproxy::NetLimits;
use outboard_server::sandbox::{Backend, SandboxConfig};
use outboard_server::{Limits, ServerConfig};
use std::time::Duration;

/// Raises the soft limit of open files to the hard limit (the connection caps are meaningless
/// if `accept` fails first), and warns when it is still below the caps.
pub(crate) fn raise_nofile_limit(max_connections: usize) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
    let effective = match setrlimit(Resource::Nofile, raised) {
        Ok(()) => limit.maximum,
        Err(_) => limit.current,
    };
    // Descriptors besides client connections: the database, sandboxes' pipes, model calls.
    const RESERVED: u64 = 256;
    if let Some(n) = effective {
        if n < max_connections as u64 + RESERVED {
            tracing::warn!(
                open_files = n,
                max_connections,
                "the open-file limit is below --max-connections plus {RESERVED}; accept may fail \
                 before the cap answers 503: raise `ulimit -n` or lower --max-connections"
            );
        }
    }
}

/// `args`' models: `--models FILE`, else the configuration file's `[[models]]` tables, else the
/// one model of `--provider`, `--base-url` and `--model`.
fn models(args: &ServeArgs, file: Option<&FlagFile>) -> anyhow::Result<ModelCatalog> {
    if let Some(path) = &args.models {
        return Ok(ModelCatalog::from_file(path, args.model.as_deref())?);
    }
    if let Some(catalog) = crate::configfile::inline_models(file, args.model.as_deref()) {
        if args.provider.is_some() || args.base_url.is_some() {
            anyhow::bail!(
                "the configuration file has [[models]] tables, which name each model's provider \
                 and base URL: drop --provider and --base-url (and their variables and keys)"
            );
        }
        return Ok(catalog?);
    }
    let llm =
        llm_config(args.provider.as_deref(), args.base_url.as_deref(), args.model.as_deref())?;
    Ok(llm.into())
}

/// Runs the server of `args`; `file` is the configuration file they were read with.
pub(crate) async fn serve(args: ServeArgs, file: Option<&FlagFile>) -> anyhow::Result<()> {
    let models = models(&args, file)?;
    let models = models.with_thinking(args.thinking_budget).map_err(anyhow::Error::msg)?;
    let store = args.data.spec(&data_dir(args.data.clone())?);
    let lease = Duration::from_secs(args.lease_secs.max(1));
    let config = ServerConfig {
        data_dir: data_dir(args.data)?,
        store: Some(store),
        workspaces: args.workspaces.clone(),
        models,
        sandbox: SandboxConfig {
            backend: match args.sandbox {
                ServeSandbox::Local(backend) => backend,
                ServeSandbox::Remote => Backend::Bwrap,
            },
            idle_freeze: std::time::Duration::from_secs(args.sandbox_freeze_after),
            idle_stop: std::time::Duration::from_secs(args.sandbox_stop_after),
            ..SandboxConfig::Bwrap
        },
        limits: Limits {
            max_steps: args.max_steps,
            task_max_steps: args.task_max_steps.max(1),
            max_upload_bytes: args.max_upload_bytes,
            upload_deadline: Duration::from_secs(args.upload_deadline_secs.max(1)),
            network: NetLimits {
                max_connections: args.net_max_connections.max(1),
                idle_timeout: Duration::from_secs(args.net_idle_timeout.max(1)),
                session_bytes: args.net_session_bytes,
            },
            context_window: args.context_window,
            compact_percent: args.compact_at,
            result_chars: usize::try_from(args.tool_result_chars).unwrap_or(usize::MAX),
            lease,
            span_content: args.otlp_content,
            host_link: outboard_remote::client::Liveness {
                ping_interval: Duration::from_secs(args.host_ping_secs.max(1)),
                ping_timeout: Duration::from_secs(args.host_ping_timeout_secs.max(1)),
                call_grace: Duration::from_secs(args.host_call_grace_secs),
                cancel_wait: Duration::from_secs(args.host_cancel_wait_secs),
            },
            ..Limits::default()
        },
        net: args.net.config(args.listen)?,
        // Remote clients: none may name a directory of this host.
        allow_client_workspaces: false,
        place_on_hosts: matches!(args.sandbox, ServeSandbox::Remote),
    };
    raise_nofile_limit(config.net.max_connections);
    // Loaded before the listener so a key that cannot be used (a key file others may read, a bad
    // OUTBOARD_SECRET_KEY) stops the start with its fix instead of failing the first clone.
    outboard_server::config::secure_data_dir(&config.data_dir)?;
    let secret_key = outboard_server::secrets::SecretKey::load(&config.data_dir)?;
    tracing::info!(key = %secret_key.source(), "org secrets are sealed with this key");
    for (i, entry) in config.models.entries().iter().enumerate() {
        tracing::info!(
            name = %entry.name,
            provider = entry.llm.kind.as_str(),
            base_url = %entry.llm.base_url,
            model = %entry.llm.model,
            key = if entry.llm.api_key.is_some() { "set" } else { "none" },
            default = i == 0,
            "model"
        );
    }
    tracing::info!(data = %config.data_dir.display(), "starting");
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    // Bound before the start, so a taken address stops it before it resumes any turn.
    let metrics = match args.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (--metrics-listen)"))?,
        ),
        None => None,
    };
    let mut config = config;
    if let Some(port) = metrics.as_ref().and_then(|m| m.local_addr().ok()).map(|a| a.port()) {
        // Neither a sandbox's proxy nor the server's git may reach the metrics port either.
        config.sandbox.server_ports.push(port);
    }
    let handle = outboard_server::launch(listener, config).await?;
    if let Err(e) = handle.sandbox_checked().await {
        handle.shutdown().await;
        return Err(e.into());
    }
    println!("outboard-server listening on {}", handle.url());
    if let Some(listener) = metrics {
        let addr = handle.serve_metrics(listener)?;
        println!("outboard-server metrics on http://{addr}/metrics");
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}

pub(crate) async fn sandbox_host(args: SandboxHostArgs) -> anyhow::Result<()> {
    use outboard_server::remote::host::{Host, HostOptions};
    let sandbox = SandboxConfig {
        backend: args.sandbox,
        idle_freeze: Duration::from_secs(args.sandbox_freeze_after),
        idle_stop: Duration::from_secs(args.sandbox_stop_after),
        scratch_dir: Some(args.data.clone()),
        ..SandboxConfig::Bwrap
    };
    std::fs::create_dir_all(&args.data)
        .with_context(|| format!("cannot create the data directory {}", args.data.display()))?;
    outboard_server::config::secure_data_dir(&args.data)?;
    let mut options = HostOptions::new(args.data.clone(), sandbox.clone());
    if let Some(capacity) = args.capacity {
        options.capacity = capacity;
    }
    let host = Host::new(options, args.join_token.as_deref())?;
    outboard_server::sandbox::Sandbox::check(&sandbox).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = listener.local_addr()?;
    tracing::info!(listen = %local, fingerprint = host.fingerprint(), "sandbox host ready");
    println!("sandbox host listening on {local} (certificate {})", host.fingerprint());
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        stop.cancel();
    });
    host.serve(listener, shutdown).await;
    Ok(())
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
