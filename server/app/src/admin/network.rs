//! `admin network`: the org's network policy and audit.

use crate::admin::command::*;
use crate::admin::secret::open_secrets;
use crate::args::*;

/// `admin network set|show|log`: on the data dir directly; a running server reads the policy
/// again within `netpolicy::REFRESH`.
pub(crate) async fn admin_network(command: NetworkCommand) -> anyhow::Result<()> {
    use outboard_server::netpolicy;
    match command {
        NetworkCommand::Set { org, mode, hosts, data } => {
            let policy = netpolicy::Policy::parse(&mode, &hosts)?;
            let store = open_data(data)?.1;
            print!("{}", netpolicy::set(&store, &org, policy).await?);
        }
        NetworkCommand::Show { org, data } => {
            let store = open_data(data)?.1;
            print!("{}", netpolicy::show(&store, &org).await?);
        }
        NetworkCommand::Log { org, json, limit, data } => {
            let store = open_data(data)?.1;
            let rows = netpolicy::log(&store, &org, limit).await?;
            if json {
                for row in rows {
                    println!("{}", serde_json::to_string(&row)?);
                }
            } else {
                print!("{}", netpolicy::log_table(&rows));
            }
        }
        NetworkCommand::Ca { command } => {
            let (org, data) = match &command {
                CaCommand::Show { org, data } | CaCommand::Rm { org, data } => (org, data),
            };
            let secrets = open_secrets(data.clone())?;
            let org_id = secrets.org_by_name(org).await?;
            match command {
                CaCommand::Show { .. } => print!("{}", secrets.org_ca(&org_id).await?.cert_pem()),
                CaCommand::Rm { .. } => {
                    if secrets.remove_ca(&org_id).await? {
                        println!(
                            "removed the sandbox CA of org {org}; new sandboxes get a new one"
                        );
                    } else {
                        println!("org {org} has no sandbox CA yet");
                    }
                }
            }
        }
    }
    Ok(())
}
