//! The hub: the map from session id to its running actor, spawning actors on first use.
//!
//! The map is behind one `std::sync::Mutex` held only to look up or insert a handle (never across
//! an `.await`), which is simpler than a hub actor and cannot deadlock. Access checks (org,
//! ownership) happen here so every caller gets them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use outboard_shared::{ErrorBody, ErrorCode, SessionId};
use tokio_util::sync::CancellationToken;

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
    /// Cancelled at shutdown: turns stop at their next checkpoint and new turns are refused.
    shutdown: CancellationToken,
}

impl Hub {
    /// A hub over `store`.
    pub fn new(store: Store, provider: Arc<Provider>, config: ServerConfig) -> Self {
        Hub {
            store,
            provider,
            config,
            sessions: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
        }
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
                    self.shutdown.clone(),
                )
            })
            .clone()
    }

    /// Starts the actor of every session whose log ends inside a turn; each resumes its turn
    /// without anyone attached. Returns how many there were.
    pub async fn resume_all(&self) -> Result<usize, crate::store::StoreError> {
        let rows = self.store.sessions_with_open_turns().await?;
        for row in &rows {
            self.handle(row);
        }
        Ok(rows.len())
    }

    /// Shuts the sessions down: running turns stop at their next checkpoint (an answer streaming
    /// from the model is dropped and re-requested on restart; a running tool finishes), new turns
    /// are refused, and this returns once every turn has stopped or `deadline` passed. Whatever
    /// is still running then is cut off by the exit and recovered at the next start.
    pub async fn drain(&self, deadline: Duration) -> bool {
        self.shutdown.cancel();
        let handles: Vec<SessionHandle> = match self.sessions.lock() {
            Ok(map) => map.values().cloned().collect(),
            Err(poisoned) => poisoned.into_inner().values().cloned().collect(),
        };
        let all = futures_util::future::join_all(handles.iter().map(|h| h.wait_idle()));
        tokio::time::timeout(deadline, all).await.is_ok()
    }
}
