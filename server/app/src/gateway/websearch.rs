//! Embedded mode's web search setting (`web_search`, `OUTBOARD_WEB_SEARCH`): the client that
//! starts the server in its own process writes it as the local org's backend at each start.

use super::ServerHandle;

impl ServerHandle {
    /// Sets `org`'s web search backend (see [`outboard_org::search`]) to `backend`, or turns
    /// it off for `off` / an empty text. The error says what is wrong with the text.
    pub async fn set_web_search(
        &self,
        org: &str,
        backend: &str,
    ) -> Result<(), outboard_org::search::SearchError> {
        use outboard_org::search::{self, Backend};
        let store = self.state.hub.store();
        let wanted = match backend.trim() {
            "" | "off" | "none" => None,
            text => Some(Backend::parse(text)?),
        };
        // Most starts change nothing: one read instead of a write.
        let name = org.to_owned();
        let id = store.call(move |c| outboard_store::org_id_by_name(c, &name)).await?;
        let now = match &id {
            Some(id) => search::load(store, id).await?,
            None => None,
        };
        if now == wanted {
            return Ok(());
        }
        match wanted {
            None => search::clear(store, org).await.map(|_| ()),
            Some(backend) => search::set(store, org, &backend).await.map(|_| ()),
        }
    }
}
