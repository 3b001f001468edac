//! `admin hosts`: the sandbox hosts.

use crate::admin::command::*;
use crate::args::*;
use anyhow::Context as _;
use outboard_server::store::Store;
use std::process::ExitCode;
use std::time::Duration;

/// How long `admin hosts repin` waits for the host to answer.
const REPIN_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `admin hosts add|ls|repin|rm`: on the store directly, like `admin secret`; a running server
/// reads a host's row when it first uses the host, and again after the host failed to show its
/// pinned certificate (so a repin applies at its next call to the host).
pub(crate) async fn admin_hosts(command: HostsCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::remote::registry::{self, Hosts, HostsError};
    use outboard_server::secrets::{SecretKey, Secrets};
    let open = |data: DataArg| -> anyhow::Result<(Store, Secrets)> {
        let dir = data_dir(data.clone())?;
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
        let (dir, store) = open_data(data)?;
        let secrets = Secrets::new(store.clone(), SecretKey::load(&dir)?);
        Ok((store, secrets))
    };
    let refused = |e: HostsError| -> anyhow::Result<ExitCode> {
        match e {
            HostsError::Store(_) => Err(e.into()),
            e => {
                eprintln!("outboard-server: {e}");
                Ok(ExitCode::from(1))
            }
        }
    };
    match command {
        HostsCommand::Add { name, url, data } => {
            let (store, secrets) = open(data)?;
            match registry::add(&store, &secrets, &name, &url).await {
                Ok(token) => {
                    eprintln!(
                        "added sandbox host {name} at {url}; start it with \
                         `OUTBOARD_JOIN_TOKEN=<the token> outboard-server sandbox-host --listen \
                         ADDR --data DIR` (the token is shown once):"
                    );
                    println!("{}", token.expose());
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => refused(e),
            }
        }
        HostsCommand::Ls { json, data } => {
            let (store, secrets) = open(data)?;
            let rows = match registry::list(&store).await {
                Ok(rows) => rows,
                Err(e) => return refused(e),
            };
            let hosts = Hosts::with_window(store, secrets, Duration::from_secs(2));
            let probes = rows.iter().map(|row| {
                let hosts = hosts.clone();
                let name = row.name.clone();
                async move {
                    hosts.join(&name, Duration::from_secs(2)).await?;
                    Ok::<_, HostsError>(hosts.client(&name).await?.status().await?)
                }
            });
            let statuses = futures_util::future::join_all(probes).await;
            if !json {
                println!(
                    "{:<16} {:<28} {:>8} {:>8} {:>6} {:<6} PIN",
                    "NAME", "URL", "CAPACITY", "SESSIONS", "LIVE", "STATE"
                );
            }
            for (row, status) in rows.iter().zip(statuses) {
                let (state, live, capacity, reason) = match &status {
                    Ok(s) => ("up", Some(s.live_sandboxes), Some(s.capacity), None),
                    Err(e) => ("down", None, row.capacity, Some(e.to_string())),
                };
                if json {
                    let line = serde_json::json!({
                        "name": row.name, "url": row.url, "capacity": capacity,
                        "sessions": row.sessions, "live_sandboxes": live, "state": state,
                        "error": reason, "pin": row.pin, "added_at": row.added_at,
                        "joined_at": row.joined_at,
                    });
                    println!("{line}");
                } else {
                    let dash = || "-".to_owned();
                    println!(
                        "{:<16} {:<28} {:>8} {:>8} {:>6} {:<6} {}",
                        row.name,
                        row.url,
                        capacity.map_or_else(dash, |c| c.to_string()),
                        row.sessions,
                        live.map_or_else(dash, |l| l.to_string()),
                        state,
                        row.pin.as_deref().map_or_else(dash, |p| p.chars().take(16).collect()),
                    );
                    if let Some(reason) = reason {
                        println!("  {reason}");
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        HostsCommand::Repin { name, yes, data } => {
            let (store, secrets) = open(data)?;
            let hosts = Hosts::with_window(store.clone(), secrets, Duration::ZERO);
            let change = match hosts.probe_key(&name, REPIN_CONNECT_TIMEOUT).await {
                Ok(change) => change,
                Err(e) => return refused(e),
            };
            let old = change.old.as_deref().unwrap_or("(none)");
            println!("sandbox host {name} at {}", change.url);
            println!("  pinned:   {old}");
            println!("  presents: {} (and it proved the join token)", change.new);
            if change.old.as_deref() == Some(change.new.as_str()) {
                println!("the host presents its pinned certificate; nothing to change");
                return Ok(ExitCode::SUCCESS);
            }
            if !yes {
                eprintln!(
                    "outboard-server: not pinned; if the host's key was changed on purpose, run \
                     `outboard-server admin hosts repin {name} --yes`"
                );
                return Ok(ExitCode::from(1));
            }
            match registry::repin(&store, &name, change.old.as_deref(), &change.new).await {
                Ok(()) => {
                    println!("pinned the new certificate of sandbox host {name}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => refused(e),
            }
        }
        HostsCommand::Rm { name, data } => {
            let (store, _) = open(data)?;
            match registry::remove(&store, &name).await {
                Ok(()) => {
                    println!("removed sandbox host {name}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => refused(e),
            }
        }
    }
}
