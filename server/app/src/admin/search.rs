//! `admin search`: the org's web search backend (`WebSearch`; off until set).

use crate::admin::command::*;
use crate::args::*;
use std::process::ExitCode;

/// `admin search set|show|clear`: on the data dir directly; a running server offers the
/// change from each session's next turn. Exits 1 when it refuses what it was asked (an unknown
/// org, a backend it does not understand).
pub(crate) async fn admin_search(command: SearchCommand) -> anyhow::Result<ExitCode> {
    use outboard_server::search::{self, Backend, SearchError};
    let outcome = match command {
        SearchCommand::Set { org, backend, data } => match Backend::parse(&backend) {
            Ok(backend) => search::set(&open_data(data)?.1, &org, &backend).await,
            Err(e) => Err(e),
        },
        SearchCommand::Show { org, data } => search::show(&open_data(data)?.1, &org).await,
        SearchCommand::Clear { org, data } => {
            match search::clear(&open_data(data)?.1, &org).await {
                Ok(true) => Ok(format!("web search is off for org {org}\n")),
                Ok(false) => Ok(format!("web search was already off for org {org}\n")),
                Err(e) => Err(e),
            }
        }
    };
    match outcome {
        Ok(text) => {
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Err(SearchError::Store(e)) => Err(e.into()),
        Err(e) => {
            eprintln!("outboard-server: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
