//! `admin secret`: the org's sealed credentials.

use crate::admin::command::*;
use crate::admin::input::*;
use crate::args::*;
use std::process::ExitCode;

/// The org secrets of a data dir, for the admin commands.
pub(crate) fn open_secrets(data: DataArg) -> anyhow::Result<outboard_server::secrets::Secrets> {
    use outboard_server::secrets::{SecretKey, Secrets};
    let (dir, store) = open_data(data)?;
    Ok(Secrets::new(store, SecretKey::load(&dir)?))
}

/// `admin secret set|ls|rm`: works on the data dir directly, like `admin quota`; the server
/// reads a credential when it talks to the host, so a change applies at the next clone or push.
pub(crate) async fn admin_secret(command: SecretCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::secrets::SecretError;
    match admin_secret_inner(command).await {
        Ok(code) => Ok(code),
        Err(e) => match e.downcast_ref::<SecretError>() {
            // Refusals of what the admin asked (org, host, name, value): exit 1.
            Some(
                SecretError::NoOrg(_)
                | SecretError::BadHost { .. }
                | SecretError::HostWithCredential
                | SecretError::BadName { .. }
                | SecretError::NameIsToken
                | SecretError::BadValue(_)
                | SecretError::BadBinding(_)
                | SecretError::KeyMismatch { .. },
            ) => {
                eprintln!("outboard-server: {e:#}");
                Ok(ExitCode::from(1))
            }
            _ => Err(e),
        },
    }
}

pub(crate) async fn admin_secret_inner(command: SecretCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::secrets::{self, Binding, HeaderTemplate};
    let open = open_secrets;
    match command {
        SecretCommand::Set { org, host, name, inject_header, placeholder, upstream_ca, data } => {
            // Everything named on the command line is checked before the value is asked for.
            let host = secrets::validate_host(&host)?;
            secrets::validate_name(&name)?;
            let upstream_ca = match upstream_ca {
                Some(path) => Some(read_roots(&path)?),
                None => None,
            };
            let binding = Binding {
                inject_header: inject_header.as_deref().map(HeaderTemplate::parse).transpose()?,
                placeholders: placeholder,
                upstream_ca,
            };
            let secrets = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            let value = read_secret_value(&host, &name)?;
            secrets.set_with(&org_id, &host, &name, value, &binding).await?;
            match &binding.inject_header {
                Some(header) => println!(
                    "set {host}/{name} for org {org}; the sandbox's HTTPS requests to {host}                      carry `{}: …`",
                    header.name()
                ),
                None => println!("set {host}/{name} for org {org}"),
            }
            for var in &binding.placeholders {
                println!("  the sandbox's {var} holds {}", secrets::placeholder(var));
            }
            Ok(ExitCode::SUCCESS)
        }
        SecretCommand::Ls { org, data } => {
            let secrets = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            let list = secrets.list(&org_id).await?;
            println!("{:<32}  {:<24}  {:<24}  OUTBOUND", "HOST", "NAME", "SET AT");
            for s in list {
                println!(
                    "{:<32}  {:<24}  {:<24}  {}",
                    s.host,
                    s.name,
                    s.created_at,
                    s.binding.describe()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SecretCommand::Rm { org, host, name, data } => {
            let host = secrets::validate_host(&host)?;
            secrets::validate_name(&name)?;
            let secrets = open(data)?;
            let org_id = secrets.org_by_name(&org).await?;
            if secrets.remove(&org_id, &host, &name).await? {
                println!("removed {host}/{name} from org {org}");
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!(
                    "outboard-server: org {org} has no secret {name} for {host}: \
                     `outboard-server admin secret ls --org {org}` lists them"
                );
                Ok(ExitCode::from(1))
            }
        }
    }
}
