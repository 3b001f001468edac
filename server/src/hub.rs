//! The hub: the map from session id to its running actor, spawning actors on first use.
//!
//! The map is behind one `std::sync::Mutex` held only to look up or insert a handle (never across
//! an `.await`), which is simpler than a hub actor and cannot deadlock. Access checks (org,
//! ownership) happen here so every caller gets them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use outboard_shared::{ErrorBody, ErrorCode, SessionId};

use crate::config::ServerConfig;
use crate::llm::Provider;
use crate::session::SessionHandle;
use crate::store::{SessionRow, Store, UserRow};

/// All live sessions of the server.
pub struct Hub {
    store: Store,
    provider: Arc<Provider>,
    config: ServerConfig,
    sessions: Mutex<HashMap<SessionId, SessionHandle>>,
}

impl Hub {
    /// A hub over `store`.
    pub fn new(store: Store, provider: Arc<Provider>, config: ServerConfig) -> Self {
        Hub { store, provider, config, sessions: Mutex::new(HashMap::new()) }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The model label new sessions get.
    pub fn model_label(&self) -> String {
        self.provider.label()
    }

    /// The session `id` as `user` may see it: not found unless it belongs to the user's org
    /// (another org's session is indistinguishable from a missing one).
    pub async fn visible_session(
        &self,
        user: &UserRow,
        id: &SessionId,
    ) -> Result<SessionRow, ErrorBody> {
        match self.store.session(id).await {
            Ok(Some(row)) if row.org_id == user.org_id => Ok(row),
            Ok(_) => Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!("no session {id} in your org; `outboard sessions` lists them"),
            )),
            Err(e) => Err(ErrorBody::new(ErrorCode::Internal, e.to_string())),
        }
    }

    /// The actor of a session, started if it is not running.
    pub fn handle(&self, row: &SessionRow) -> SessionHandle {
        let mut map = match self.sessions.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.entry(row.id.clone())
            .or_insert_with(|| {
                SessionHandle::spawn(
                    row.clone(),
                    self.store.clone(),
                    self.provider.clone(),
                    &self.config,
                )
            })
            .clone()
    }
}
