//! `admin quota`: the org's quotas.

use crate::admin::command::*;
use crate::args::*;

/// `admin quota set|show`: works on the data dir directly, like `admin user add`; a running
/// server reads quotas at each check, so a change applies at once.
pub(crate) async fn admin_quota(command: QuotaCommand) -> anyhow::Result<()> {
    use outboard_server::quota;
    let table = match command {
        QuotaCommand::Set { org, key, value, data } => {
            let store = open_data(data)?.1;
            quota::set(&store, &org, &key, &value).await?
        }
        QuotaCommand::Show { org, data } => {
            let store = open_data(data)?.1;
            quota::show(&store, &org).await?
        }
    };
    print!("{table}");
    Ok(())
}
