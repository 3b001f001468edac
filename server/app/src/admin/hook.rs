//! `admin hook`: the org's webhooks (`outboard_org::hooks`).

use crate::admin::command::*;
use crate::args::*;
use std::process::ExitCode;
use std::time::Duration;

/// `admin hook add|list|remove`: on the data dir directly; a running server reads the org's
/// hooks at the start of each turn. Exits 1 when it refuses what it was asked.
pub(crate) async fn admin_hook(command: HookCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::hooks::{self, HookError};
    let outcome = match command {
        HookCommand::Add { org, event, matcher, timeout, url, data } => {
            let store = open_data(data)?.1;
            let timeout = timeout.map(Duration::from_secs);
            match hooks::add(&store, &org, &event, &matcher, &url, timeout).await {
                Ok(id) => {
                    let host = hooks::key_host(&url).unwrap_or_default();
                    Ok(format!(
                        "{id}\nits calls are signed with the org secret for {host}: set it with \
                         `outboard-server admin secret set --org {org} --host {host} NAME` (until \
                         then the hook blocks)\n"
                    ))
                }
                Err(e) => Err(e),
            }
        }
        HookCommand::List { org, data } => hooks::list(&open_data(data)?.1, &org).await,
        HookCommand::Remove { org, id, data } => {
            match hooks::remove(&open_data(data)?.1, &org, &id).await {
                Ok(true) => Ok(format!("removed hook {id} of org {org}\n")),
                Ok(false) => Err(HookError::Invalid(format!("org {org} has no hook {id}"))),
                Err(e) => Err(e),
            }
        }
    };
    match outcome {
        Ok(text) => {
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(HookError::Store(e)) => Err(e.into()),
        Err(e) => {
            eprintln!("outboard-server: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
