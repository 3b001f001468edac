//! `admin mcp`: the org's MCP servers.

use crate::admin::command::*;
use crate::args::*;
use outboard_server::store::Store;
use std::process::ExitCode;

pub(crate) async fn admin_mcp(command: McpCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::mcp::McpError;
    use outboard_server::secrets::SecretError;
    match admin_mcp_inner(command).await {
        Ok(code) => Ok(code),
        Err(e) => {
            let refused = match e.downcast_ref::<McpError>() {
                Some(McpError::Store(_)) => false,
                Some(_) => true,
                None => matches!(e.downcast_ref::<SecretError>(), Some(SecretError::NoOrg(_))),
            };
            if refused {
                eprintln!("outboard-server: {e:#}");
                Ok(ExitCode::from(1))
            } else {
                Err(e)
            }
        }
    }
}

pub(crate) async fn admin_mcp_inner(command: McpCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::mcp::config::{self, ServerDef, Transport};
    use outboard_server::mcp::McpHub;
    use outboard_server::secrets::{SecretKey, Secrets};
    let open = |data: DataArg| -> anyhow::Result<(Store, Secrets, McpHub)> {
        let (dir, store) = open_data(data)?;
        let secrets = Secrets::new(store.clone(), SecretKey::load(&dir)?);
        let hub = McpHub::new(store.clone(), Some(secrets.clone()));
        Ok((store, secrets, hub))
    };
    match command {
        McpCommand::Add { org, name, url, header, command, env, rest, data } => {
            let transport = match (url, command) {
                (Some(url), _) => Transport::Http {
                    url,
                    headers: header
                        .iter()
                        .map(|h| config::parse_header(h))
                        .collect::<Result<_, _>>()?,
                },
                (None, Some(mut command)) => {
                    command.extend(rest);
                    let program = command.remove(0);
                    Transport::Stdio {
                        command: program,
                        args: command,
                        env: env.iter().map(|e| config::parse_env(e)).collect::<Result<_, _>>()?,
                    }
                }
                (None, None) => anyhow::bail!(outboard_server::mcp::McpError::BadDefinition(
                    "give --url URL or --command CMD".into()
                )),
            };
            let def = ServerDef { name, transport };
            def.validate()?;
            let (store, secrets, hub) = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            hub.check_secrets(&org_id, &def).await?;
            let replaced = config::put(&store, &org_id, &def).await?;
            println!(
                "{} MCP server {} ({} {}) for org {org}; `outboard-server admin mcp test --org                  {org} {}` connects to it",
                if replaced { "replaced" } else { "added" },
                def.name,
                def.kind(),
                def.target(),
                def.name
            );
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Ls { org, data } => {
            let (store, secrets, _) = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            println!("{:<32}  {:<9}  URL / COMMAND", "NAME", "TRANSPORT");
            for def in config::list(&store, &org_id).await? {
                println!("{:<32}  {:<9}  {}", def.name, def.kind(), def.target());
                for setting in def.settings() {
                    println!("{:<32}  {:<9}    {setting}", "", "");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Rm { org, name, data } => {
            let (store, secrets, _) = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            if config::remove(&store, &org_id, &name).await? {
                println!("removed MCP server {name} from org {org}");
                Ok(ExitCode::SUCCESS)
            } else {
                anyhow::bail!(outboard_server::mcp::McpError::NoServer(name))
            }
        }
        McpCommand::Test { org, name, data } => {
            let (_, secrets, hub) = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            let tools = hub.test(&org_id, &name).await?;
            println!("MCP server {name} of org {org}: connected, {} tools", tools.len());
            for tool in tools {
                let line = tool.description.lines().next().unwrap_or_default().to_owned();
                println!("  {:<40}  {line}", tool.shown);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
