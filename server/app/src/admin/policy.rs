//! `admin policy`: the org's tool policies.

use crate::admin::command::*;
use crate::args::*;
use outboard_server::store::Store;
use std::process::ExitCode;

/// `admin policy set|ls|rm`: on the data dir directly; a running server applies the rules from
/// each session's next turn. Exits 1 when it refuses what it was asked (an unknown org, a bad
/// pattern or decision, a missing rule, too many rules).
pub(crate) async fn admin_policy(command: PolicyCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::toolpolicy::{self, Decision, PolicyError};
    let open = |data: DataArg| -> anyhow::Result<Store> { Ok(open_data(data)?.1) };
    let outcome = match command {
        PolicyCommand::Set { org, pattern, decision, data } => {
            let store = open(data)?;
            match Decision::parse(&decision) {
                Ok(decision) => toolpolicy::set(&store, &org, &pattern, decision)
                    .await
                    .map(|()| format!("org {org}: {} {decision}\n", pattern.trim())),
                Err(e) => Err(e),
            }
        }
        PolicyCommand::Ls { org, data } => toolpolicy::show(&open(data)?, &org).await,
        PolicyCommand::Rm { org, pattern, data } => {
            match toolpolicy::remove(&open(data)?, &org, &pattern).await {
                Ok(true) => Ok(format!("org {org}: removed the rule for {}\n", pattern.trim())),
                Ok(false) => Err(PolicyError::Invalid(format!(
                    "org {org} has no rule for {:?} (see `admin policy ls --org {org}`)",
                    pattern.trim()
                ))),
                Err(e) => Err(e),
            }
        }
    };
    match outcome {
        Ok(text) => {
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(PolicyError::Store(e)) => Err(e.into()),
        Err(e) => {
            eprintln!("outboard-server: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
