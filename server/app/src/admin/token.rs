//! `admin token`: bearer tokens.

use crate::admin::command::*;
use crate::args::*;
use outboard_server::store::Store;

pub(crate) async fn admin_token(command: TokenCommand) -> anyhow::Result<()> {
    use outboard_server::auth;
    let open = |data: DataArg| -> anyhow::Result<Store> { Ok(open_data(data)?.1) };
    match command {
        TokenCommand::Ls { org, data } => {
            let tokens = auth::list_tokens(&open(data)?, org.as_deref()).await?;
            println!("{:<8}  {:<16}  {:<16}  {:<20}  CREATED", "ID", "USER", "ORG", "LABEL");
            for t in tokens {
                println!(
                    "{:<8}  {:<16}  {:<16}  {:<20}  {}",
                    t.id, t.user, t.org, t.label, t.created_at
                );
            }
            Ok(())
        }
        TokenCommand::Revoke { id, data } => {
            let t = auth::revoke_by_id(&open(data)?, &id).await?;
            println!("revoked {} ({} in {}, {})", t.id, t.user, t.org, t.label);
            Ok(())
        }
    }
}
