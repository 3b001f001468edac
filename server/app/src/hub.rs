//! The hub: the map from session id to its running actor, spawning actors on first use, and the
//! attach roles of each session (its "room": who is attached, which connection drives).
//!
//! Both maps are behind `std::sync::Mutex`es held only for a lookup or a small update (never
//! across an `.await`), which is simpler than a hub actor and cannot deadlock. Roles live here
//! rather than in the session actor because they belong to connections, not to the
//! conversation: the actor's log does not change when someone starts watching. Access checks
//! (org, ownership, who drives) happen here so every caller gets them.
//!
//! The role rules: one connection drives a session at a time. The owner becomes the driver by
//! attaching as `driver` (taking it from whoever had it: the owner can always take it back);
//! the driver may grant it to an attached watcher; when the driver detaches nobody drives until
//! the owner attaches or someone is granted. An owner's connection that is not attached at all
//! may still send turns while nobody drives (headless scripts).
//!
//! A grant also belongs to the grantee's *user* on that session, until the owner takes driving
//! back or it is granted on: the grantee's other connections may attach as `driver` the way the
//! owner does. That is what lets a granted driver's `outboard run` or TUI reconnect (a new
//! connection) and drive again. Rooms are memory, but the grant is in the store
//! (`drive_grants`), so it survives a restart of the server.
//!
//! Actors leave the map when idle (see [`crate::session`]): an actor removes itself through
//! [`Actors`] only while the map still holds that very actor, and a request that meets a stopped
//! actor is retried here on a fresh one ([`Hub::attach`], [`Hub::send`], [`Hub::interrupt`]), so
//! clients never see an eviction.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboard_shared::{
    ErrorBody, ErrorCode, EventKind, PresenceEntry, Role, SessionCompactResponse, SessionId,
    TurnSendResponse, UserId,
};
use outboard_store::db::OptionalExtension as _;
use tokio_util::sync::CancellationToken;

use crate::config::ServerConfig;
use crate::session::{Attached, Evict, SessionHandle};
use outboard_llm::models::Models;
use outboard_org::orgfs::OrgFs;
use outboard_store::{SessionRow, Store, UserRow};

/// What `session/create` asked of a new session's model: which one (by name; `None`: the
/// server's default) and its context window (`None`: the model's).
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelChoice<'a> {
    /// The window in tokens.
    pub context_window: Option<u64>,
    /// The model's name in the catalog.
    pub model: Option<&'a str>,
}

/// All live sessions of the server.
pub struct Hub {
    store: Store,
    org_fs: OrgFs,
    /// The models on offer, a provider client each.
    models: Arc<Models>,
    config: ServerConfig,
    sessions: Arc<Actors>,
    /// The sessions' git state: clones, snapshots, pushes ([`crate::sources`]).
    sources: Arc<crate::sources::Sources>,
    /// The org secrets (credentials for git hosts); none in a hub made without a key.
    secrets: Option<outboard_org::secrets::Secrets>,
    /// The org's MCP servers' connections, shared by every session ([`outboard_mcp`]).
    mcp: outboard_mcp::McpHub,
    /// The sandbox hosts ([`outboard_remote::registry`]); none in a hub made without a key.
    hosts: Option<Arc<outboard_remote::registry::Hosts>>,
    /// Cancelled at shutdown: turns stop at their next checkpoint and new turns are refused.
    shutdown: CancellationToken,
    /// The server's metrics ([`crate::metrics`]).
    metrics: Arc<crate::metrics::Metrics>,
    rooms: Mutex<HashMap<SessionId, Room>>,
}

/// How many times a request is tried on a fresh actor after meeting one that stopped. An actor
/// stops only when idle, and a fresh one is idle for [`crate::config::Limits::session_idle`]
/// before it can stop, so a second attempt always lands; the third is for a panicked actor.
const ACTOR_ATTEMPTS: usize = 3;

/// The running session actors, by session. Actors remove themselves when idle ([`Evict`]).
#[derive(Default)]
pub struct Actors(Mutex<HashMap<SessionId, SessionHandle>>);

impl Actors {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, SessionHandle>> {
        match self.0.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Evict for Actors {
    fn evict(&self, session: &SessionId, epoch: u64) -> bool {
        let mut map = self.lock();
        if map.get(session).is_some_and(|h| h.epoch() == epoch) {
            map.remove(session);
            true
        } else {
            false
        }
    }
}

/// Identifies one WebSocket connection for the life of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId(pub u64);

/// One attached connection.
#[derive(Debug, Clone)]
pub struct Member {
    /// The connection.
    pub conn: ConnId,
    /// Its user.
    pub user_id: UserId,
    /// The user's name.
    pub user: String,
    /// The client name from `hello`.
    pub client: String,
}

/// Who is attached to one session and which connection drives it.
#[derive(Debug, Default)]
struct Room {
    /// In attach order.
    members: Vec<Member>,
    driver: Option<ConnId>,
}

impl Room {
    fn presence(&self) -> Vec<PresenceEntry> {
        let entry = |m: &Member, role| PresenceEntry {
            user: m.user.clone(),
            role,
            client: m.client.clone(),
            connection_id: m.conn.0,
        };
        let driver = self.members.iter().filter(|m| Some(m.conn) == self.driver);
        let watchers = self.members.iter().filter(|m| Some(m.conn) != self.driver);
        driver
            .map(|m| entry(m, Role::Driver))
            .chain(watchers.map(|m| entry(m, Role::Watcher)))
            .collect()
    }
}

impl Hub {
    /// A hub over `store`.
    pub fn new(store: Store, models: Arc<Models>, config: ServerConfig) -> Self {
        Hub {
            org_fs: OrgFs::new(store.clone(), config.data_dir.join("orgs")),
            mcp: outboard_mcp::McpHub::new(store.clone(), None),
            store,
            models,
            sources: Arc::new(crate::sources::Sources::new(
                &config.data_dir,
                config.workspaces.as_deref(),
            )),
            secrets: None,
            hosts: None,
            config,
            sessions: Arc::new(Actors::default()),
            shutdown: CancellationToken::new(),
            metrics: Arc::default(),
            rooms: Mutex::new(HashMap::new()),
        }
    }

    /// This hub counting into `metrics` (the ones its store, provider and sandboxes count into).
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The server's metrics.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// The configuration the server was launched with.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The sessions' git state.
    pub fn sources(&self) -> &Arc<crate::sources::Sources> {
        &self.sources
    }

    /// This hub with the org secrets to authenticate to git hosts with.
    pub fn with_secrets(mut self, secrets: outboard_org::secrets::Secrets) -> Self {
        self.mcp = outboard_mcp::McpHub::new(self.store.clone(), Some(secrets.clone()));
        self.hosts = Some(outboard_remote::registry::Hosts::with_liveness(
            self.store.clone(),
            secrets.clone(),
            self.config.limits.host_link,
        ));
        self.secrets = Some(secrets);
        self
    }

    /// The sandbox hosts, if this hub has a key to join them with.
    pub fn hosts(&self) -> Option<&Arc<outboard_remote::registry::Hosts>> {
        self.hosts.as_ref()
    }

    /// Places a new session's workspace: on the sandbox host with the most free capacity when
    /// this server places sessions on hosts (`serve --sandbox remote`), else here (`None`).
    pub async fn place(&self) -> Result<Option<String>, ErrorBody> {
        if !self.config.place_on_hosts {
            return Ok(None);
        }
        let Some(hosts) = &self.hosts else {
            return Err(ErrorBody::new(
                ErrorCode::Internal,
                "this server places sessions on sandbox hosts but has no secret key to join them",
            ));
        };
        match hosts.place(None).await {
            Ok(host) => Ok(Some(host)),
            Err(e) => {
                tracing::warn!("no sandbox host for a new session: {e}");
                Err(ErrorBody::new(ErrorCode::Unavailable, e.to_string()))
            }
        }
    }

    /// The org secrets, if this hub has them.
    pub fn secrets(&self) -> Option<&outboard_org::secrets::Secrets> {
        self.secrets.as_ref()
    }

    /// The directory a session works in: its recorded host directory, or its own.
    pub fn workspace_dir(&self, row: &SessionRow) -> std::path::PathBuf {
        match &row.workspace {
            Some(path) => std::path::PathBuf::from(path),
            None => self.config.workspaces_dir().join(row.id.as_str()),
        }
    }

    /// Stops a session's actor for good (before the session is deleted); `conflict` while a
    /// turn runs.
    pub async fn close_actor(&self, session: &SessionId) -> Result<(), ErrorBody> {
        let handle = self.sessions.lock().get(session).cloned();
        match handle {
            Some(h) => h.close().await,
            None => Ok(()),
        }
    }

    /// The org files of every org.
    pub fn org_fs(&self) -> &OrgFs {
        &self.org_fs
    }

    /// The live sessions of `org` (those with a running actor).
    pub fn live_sessions_of(&self, org: &outboard_shared::OrgId) -> Vec<SessionHandle> {
        let map = self.sessions.lock();
        map.values().filter(|h| h.org_id() == org).cloned().collect()
    }

    /// How many session actors run now (idle ones stop, see the module header).
    pub fn live_actors(&self) -> usize {
        self.sessions.lock().values().filter(|h| !h.is_stopped()).count()
    }

    /// The directory `requested` by `session/create`, checked and made canonical: refused unless
    /// this server takes client workspaces ([`ServerConfig::allow_client_workspaces`]), and
    /// unless it is an absolute path to an existing directory.
    pub async fn client_workspace(&self, requested: &str) -> Result<String, ErrorBody> {
        if !self.config.allow_client_workspaces {
            return Err(ErrorBody::new(
                ErrorCode::BadRequest,
                "this server does not take a workspace from its clients: a remote client must \
                 not name a directory of the server's host; create the session without \
                 `workspace` (it gets a fresh directory), or run `outboard` without --server to \
                 work in a local directory",
            ));
        }
        let path = std::path::Path::new(requested);
        let bad = |why: String| ErrorBody::new(ErrorCode::BadRequest, why);
        if !path.is_absolute() {
            return Err(bad(format!("workspace {requested:?} is not an absolute path")));
        }
        let canonical = tokio::fs::canonicalize(path)
            .await
            .map_err(|e| bad(format!("workspace {requested}: {e}: name an existing directory")))?;
        let meta = tokio::fs::metadata(&canonical)
            .await
            .map_err(|e| bad(format!("workspace {requested}: {e}")))?;
        if !meta.is_dir() {
            return Err(bad(format!("workspace {requested} is not a directory")));
        }
        canonical.into_os_string().into_string().map_err(|p| {
            bad(format!("workspace {} is not valid UTF-8: rename it", p.to_string_lossy()))
        })
    }

    /// The models on offer.
    pub fn models(&self) -> &Arc<Models> {
        &self.models
    }

    /// `row` as `session/create` and `session/attach` answer it: with where its context window
    /// came from ([`crate::session::window::session_info`]).
    pub fn session_info(&self, row: &SessionRow) -> outboard_shared::SessionInfo {
        crate::session::window::session_info(&self.models, row)
    }

    /// A new session row of `user` (not stored yet) with its model (`model` by name, else the
    /// server's default) and the context window it runs with: the one `session/create` asked
    /// for, else the model's (its entry's, the server's `--context-window`, its family's, else
    /// what the model's server says: asked once per base URL and model, see
    /// [`outboard_llm::window`]).
    pub async fn new_session_row(
        &self,
        user: &UserRow,
        title: &str,
        choice: ModelChoice<'_>,
    ) -> Result<SessionRow, ErrorBody> {
        let ModelChoice { context_window, model } = choice;
        if context_window == Some(0) {
            return Err(ErrorBody::new(
                ErrorCode::BadRequest,
                "context_window must be a number of tokens above 0; leave it out for the \
                 model's window",
            ));
        }
        let (entry, _) = match model {
            Some(name) => {
                self.models.pick(name).map_err(|e| ErrorBody::new(ErrorCode::BadRequest, e))?
            }
            None => self.models.default_model(),
        };
        let mut row = SessionRow::new(user, title, &entry.label());
        row.model_name = Some(entry.name.clone());
        row.context_window = Some(match context_window {
            Some(asked) => asked,
            None => self.models.resolve_window(entry).await.tokens,
        });
        Ok(row)
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

    /// The actor of a session, started if it is not running (or has stopped).
    pub fn handle(&self, row: &SessionRow) -> SessionHandle {
        let mut map = self.sessions.lock();
        if let Some(handle) = map.get(&row.id).filter(|h| !h.is_stopped()) {
            return handle.clone();
        }
        let evict: Arc<dyn Evict> = self.sessions.clone();
        let services = crate::session::Services {
            store: self.store.clone(),
            org_fs: self.org_fs.clone(),
            models: self.models.clone(),
            secrets: self.secrets.clone(),
            mcp: Some(self.mcp.clone()),
            metrics: self.metrics.clone(),
            hosts: self.hosts.clone(),
            sources: self.sources.clone(),
        };
        let handle =
            SessionHandle::spawn(row.clone(), services, &self.config, self.shutdown.clone(), evict);
        map.insert(row.id.clone(), handle.clone());
        handle
    }

    /// Runs `op` on the session's actor; when the actor turns out to have stopped (evicted while
    /// the request was on its way), runs it again on a fresh one.
    async fn with_actor<T, F, Fut>(&self, row: &SessionRow, op: F) -> Result<T, ErrorBody>
    where
        F: Fn(SessionHandle) -> Fut,
        Fut: Future<Output = Result<T, ErrorBody>>,
    {
        let mut attempt = 1;
        loop {
            let handle = self.handle(row);
            match op(handle.clone()).await {
                Err(e) if handle.is_stopped() => {
                    // An actor that would not run the session here says why (another node runs
                    // it); one that stopped otherwise is tried again.
                    if let Some(refusal) = handle.refusal() {
                        return Err(refusal);
                    }
                    if attempt >= ACTOR_ATTEMPTS {
                        return Err(e);
                    }
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// Attaches to the session's actor: its handle and the snapshot with live events.
    pub async fn attach(
        &self,
        row: &SessionRow,
        after_seq: Option<u64>,
    ) -> Result<(SessionHandle, Attached), ErrorBody> {
        self.with_actor(row, |h| async move {
            let attached = h.attach(after_seq).await?;
            Ok((h, attached))
        })
        .await
    }

    /// Starts a turn in the session; returns once the user message is durable.
    pub async fn send(
        &self,
        row: &SessionRow,
        text: String,
        images: Vec<outboard_shared::ImageUpload>,
        by: &str,
    ) -> Result<TurnSendResponse, ErrorBody> {
        let prompt = crate::session::Prompt::prepare(text, images).await?;
        self.with_actor(row, |h| {
            let (prompt, by) = (prompt.clone(), by.to_owned());
            async move { h.send(prompt, by).await }
        })
        .await
    }

    /// Compacts the session's conversation now (see [`SessionHandle::compact`]).
    pub async fn compact(
        &self,
        row: &SessionRow,
        focus: Option<String>,
    ) -> Result<SessionCompactResponse, ErrorBody> {
        self.with_actor(row, |h| {
            let focus = focus.clone();
            async move { h.compact(focus).await }
        })
        .await
    }

    /// Interrupts the session's turn in flight; false when there is none.
    pub async fn interrupt(&self, row: &SessionRow) -> Result<bool, ErrorBody> {
        self.with_actor(row, |h| async move { h.interrupt().await }).await
    }

    /// Kills one of the session's background commands.
    pub async fn kill_task(&self, row: &SessionRow, shell_id: String) -> Result<(), ErrorBody> {
        self.with_actor(row, |h| {
            let shell_id = shell_id.clone();
            async move { h.kill_task(shell_id).await }
        })
        .await
    }

    /// Switches the session to another model for its next turn.
    pub async fn set_model(
        &self,
        row: &SessionRow,
        model: String,
        by: &str,
    ) -> Result<outboard_shared::SessionInfo, ErrorBody> {
        self.with_actor(row, |h| {
            let (model, by) = (model.clone(), by.to_owned());
            async move { h.set_model(model, by).await }
        })
        .await
    }

    /// The session's checkpoints (see [`SessionHandle::checkpoints`]).
    pub async fn checkpoints(
        &self,
        row: &SessionRow,
    ) -> Result<Vec<outboard_shared::CheckpointInfo>, ErrorBody> {
        self.with_actor(row, |h| async move { h.checkpoints().await }).await
    }

    /// Takes the session back to a checkpoint (see [`SessionHandle::rewind`]).
    pub async fn rewind(
        &self,
        row: &SessionRow,
        params: outboard_shared::SessionRewindParams,
        by: &str,
    ) -> Result<outboard_shared::SessionRewindResponse, ErrorBody> {
        self.with_actor(row, |h| {
            let (params, by) = (params.clone(), by.to_owned());
            async move { h.rewind(params, by).await }
        })
        .await
    }

    /// Switches the session's mode (`plan`, `default`), at once.
    pub async fn set_mode(
        &self,
        row: &SessionRow,
        mode: outboard_shared::SessionMode,
        by: &str,
    ) -> Result<outboard_shared::SessionSetModeResponse, ErrorBody> {
        self.with_actor(row, |h| {
            let by = by.to_owned();
            async move { h.set_mode(mode, by).await }
        })
        .await
    }

    /// Answers a call of the session waiting for approval.
    pub async fn answer(
        &self,
        row: &SessionRow,
        call_id: String,
        answer: outboard_harness::approvals::Answer,
    ) -> Result<(), ErrorBody> {
        self.with_actor(row, |h| {
            let (call_id, answer) = (call_id.clone(), answer.clone());
            async move { h.answer(call_id, answer).await }
        })
        .await
    }

    /// Broadcasts a transient event to everyone attached to the session.
    pub async fn transient(&self, row: &SessionRow, kind: EventKind) -> Result<(), ErrorBody> {
        self.with_actor(row, |h| {
            let kind = kind.clone();
            async move { h.transient(kind).await }
        })
        .await
    }

    /// Starts the actor of every session whose log ends inside a turn; each resumes its turn
    /// without anyone attached. Returns how many there were. The actors of sessions whose
    /// rewind a crash interrupted start too, and finish it (see `session::rewind`).
    pub async fn resume_all(&self) -> Result<usize, outboard_store::StoreError> {
        let rows = self.store.sessions_with_open_turns().await?;
        for row in &rows {
            self.handle(row);
        }
        for id in self.sources.pending_rewinds() {
            if let Some(row) = self.store.session(&id).await? {
                self.handle(&row);
            }
        }
        Ok(rows.len())
    }

    /// Stops the actors of sessions whose lease this node lost (see
    /// [`SessionHandle::lease_lost`]).
    pub fn leases_lost(&self, sessions: &[SessionId]) {
        let map = self.sessions.lock();
        for session in sessions {
            if let Some(handle) = map.get(session) {
                handle.lease_lost();
            }
        }
    }

    /// Takes over the sessions with an open turn that no node runs (their node died, drained,
    /// or lost its leases) and resumes their turns here; returns how many. Sessions another
    /// node takes first are refused by their lease, and their actors stop at once.
    pub async fn take_over(&self) -> Result<usize, outboard_store::StoreError> {
        if self.shutdown.is_cancelled() {
            return Ok(0);
        }
        // After a store outage every node's leases look expired, their owners alive and about
        // to renew them: taking them now would cut the owners' running commands ("outcome
        // unknown") for nothing. A lease time is what an owner needs to renew.
        if self.store.recovered_within(self.store.node().lease) {
            return Ok(0);
        }
        let orphans = self.store.orphaned_sessions().await?;
        let mut taken = 0;
        for id in orphans {
            let running = self.sessions.lock().get(&id).is_some_and(|h| !h.is_stopped());
            if running {
                continue;
            }
            if let Some(row) = self.store.session(&id).await? {
                tracing::info!(session = %id, "taking over a turn no node runs");
                self.handle(&row);
                taken += 1;
            }
        }
        Ok(taken)
    }

    /// Shuts the sessions down: running turns stop at their next checkpoint (an answer streaming
    /// from the model is dropped and re-requested on restart; a running tool finishes), new turns
    /// are refused, and this returns once every turn has stopped or `deadline` passed. Whatever
    /// is still running then is cut off by the exit and recovered at the next start.
    pub async fn drain(&self, deadline: Duration) -> bool {
        self.shutdown.cancel();
        let handles: Vec<SessionHandle> = self.sessions.lock().values().cloned().collect();
        let all = futures_util::future::join_all(handles.iter().map(|h| h.wait_idle()));
        tokio::time::timeout(deadline, all).await.is_ok()
    }

    fn rooms(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Room>> {
        match self.rooms.lock() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Who is attached to `session` now, the driver first.
    pub fn presence(&self, session: &SessionId) -> Vec<PresenceEntry> {
        self.rooms().get(session).map(Room::presence).unwrap_or_default()
    }

    /// Records `member` as attached to `session` in `role` (a driver takes driving from whoever
    /// had it; the caller has checked it is the owner). Returns the new presence list.
    pub fn join(&self, session: &SessionId, member: Member, role: Role) -> Vec<PresenceEntry> {
        let mut rooms = self.rooms();
        let room = rooms.entry(session.clone()).or_default();
        let conn = member.conn;
        room.members.retain(|m| m.conn != conn);
        room.members.push(member);
        if role == Role::Driver {
            room.driver = Some(conn);
        } else if room.driver == Some(conn) {
            room.driver = None;
        }
        room.presence()
    }

    /// Forgets `conn` in `session`; `None` when it was not attached, else the new presence.
    pub fn leave(&self, session: &SessionId, conn: ConnId) -> Option<Vec<PresenceEntry>> {
        let mut rooms = self.rooms();
        let room = rooms.get_mut(session)?;
        let before = room.members.len();
        room.members.retain(|m| m.conn != conn);
        if room.driver == Some(conn) {
            room.driver = None;
        }
        if room.members.len() == before {
            return None;
        }
        let presence = room.presence();
        if room.members.is_empty() {
            rooms.remove(session);
        }
        Some(presence)
    }

    /// The role of `conn` in `session`, when attached.
    pub fn role(&self, session: &SessionId, conn: ConnId) -> Option<Role> {
        let rooms = self.rooms();
        let room = rooms.get(session)?;
        room.members.iter().any(|m| m.conn == conn).then(|| {
            if room.driver == Some(conn) {
                Role::Driver
            } else {
                Role::Watcher
            }
        })
    }

    /// Whether `conn` (of `user`) may send turns and interrupts to `row`: it drives, or it is
    /// the owner's unattached connection and nobody drives.
    pub fn may_drive(
        &self,
        row: &SessionRow,
        user: &UserRow,
        conn: ConnId,
    ) -> Result<(), ErrorBody> {
        let rooms = self.rooms();
        let room = rooms.get(&row.id);
        let driver = room.and_then(|r| r.driver);
        if driver == Some(conn) {
            return Ok(());
        }
        let attached = room.is_some_and(|r| r.members.iter().any(|m| m.conn == conn));
        if !attached && driver.is_none() && row.owner_id == user.id {
            return Ok(());
        }
        let who = room
            .and_then(|r| r.members.iter().find(|m| Some(m.conn) == driver))
            .map_or_else(|| "nobody".to_owned(), |m| m.user.clone());
        Err(ErrorBody::new(
            ErrorCode::Forbidden,
            format!(
                "you are watching this session; only its driver ({who}) can send messages or \
                 interrupt — ask with /drive"
            ),
        ))
    }

    /// Whether `user` may answer `row`'s approvals, plans and questions (`approval/answer`), from
    /// any connection: the session's owner, and its driver's user (the user of the connection
    /// that drives, or the user driving was granted to). Rights, not connections: a member of
    /// the org who neither owns nor drives the session is refused, attached or not.
    pub async fn may_answer(&self, row: &SessionRow, user: &UserRow) -> Result<(), ErrorBody> {
        if row.owner_id == user.id {
            return Ok(());
        }
        let driver = {
            let rooms = self.rooms();
            rooms.get(&row.id).and_then(|r| {
                let conn = r.driver?;
                r.members
                    .iter()
                    .find(|m| m.conn == conn)
                    .map(|m| (m.user_id.clone(), m.user.clone()))
            })
        };
        if driver.as_ref().is_some_and(|(id, _)| *id == user.id)
            || self.granted_to(&row.id).await?.is_some_and(|id| id == user.id)
        {
            return Ok(());
        }
        let who = match driver {
            Some((_, name)) if name != row.owner => {
                format!("its owner ({}) and its driver ({name})", row.owner)
            }
            _ => format!("its owner ({})", row.owner),
        };
        Err(ErrorBody::new(
            ErrorCode::Forbidden,
            format!(
                "you may not answer this session's approvals, plans or questions: only {who} \
                 may; ask them, or ask to drive (/drive)"
            ),
        ))
    }

    /// The driver of `session` hands driving to the attached watcher named `to`. Fails unless
    /// `conn` drives and `to` is attached; a user attached twice gets it on the connection
    /// attached last. Returns the new presence and the grantee's user id; the caller records
    /// the grant with [`Hub::remember_grant`].
    pub fn grant(
        &self,
        session: &SessionId,
        conn: ConnId,
        to: &str,
    ) -> Result<(Vec<PresenceEntry>, UserId), ErrorBody> {
        let mut rooms = self.rooms();
        let Some(room) = rooms.get_mut(session).filter(|r| r.driver == Some(conn)) else {
            return Err(ErrorBody::new(
                ErrorCode::Forbidden,
                "only the session's current driver can hand driving over",
            ));
        };
        let Some(target) = room.members.iter().rev().find(|m| m.user == to && m.conn != conn)
        else {
            return Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!("{to} is not attached to this session; they must attach first"),
            ));
        };
        let user_id = target.user_id.clone();
        room.driver = Some(target.conn);
        Ok((room.presence(), user_id))
    }

    /// The user `session`'s driving was granted to, when it is not the owner's (see the module
    /// header): that user may attach as driver.
    pub async fn granted_to(&self, session: &SessionId) -> Result<Option<UserId>, ErrorBody> {
        let session = session.0.clone();
        self.store
            .call(move |c| {
                let user = c
                    .query_row(
                        "SELECT user_id FROM drive_grants WHERE session_id = ?1",
                        [&session],
                        |r| r.get::<_, String>(0),
                    )
                    .optional()?;
                Ok(user.map(UserId))
            })
            .await
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))
    }

    /// Records who `session`'s driving is granted to; `None` (the owner took it back, or it was
    /// handed to the owner) forgets the grant.
    pub async fn remember_grant(
        &self,
        session: &SessionId,
        to: Option<UserId>,
    ) -> Result<(), ErrorBody> {
        let session = session.0.clone();
        self.store
            .call(move |c| {
                match &to {
                    Some(user) => c.execute(
                        "INSERT INTO drive_grants (session_id, user_id, granted_at)
                         VALUES (?1, ?2, ?3)
                         ON CONFLICT (session_id) DO UPDATE SET
                             user_id = excluded.user_id, granted_at = excluded.granted_at",
                        outboard_store::params![
                            session,
                            user.0,
                            outboard_base::util::now_rfc3339()
                        ],
                    )?,
                    None => {
                        c.execute("DELETE FROM drive_grants WHERE session_id = ?1", [&session])?
                    }
                };
                Ok(())
            })
            .await
            .map_err(|e| ErrorBody::new(ErrorCode::Internal, e.to_string()))
    }

    /// The owner's attached connection `conn` takes driving (always allowed to the owner).
    pub fn take(
        &self,
        row: &SessionRow,
        user: &UserRow,
        conn: ConnId,
    ) -> Result<Vec<PresenceEntry>, ErrorBody> {
        if row.owner_id != user.id {
            return Err(ErrorBody::new(
                ErrorCode::Forbidden,
                format!(
                    "only the session's owner ({}) can take driving; ask with /drive",
                    row.owner
                ),
            ));
        }
        let mut rooms = self.rooms();
        let Some(room) =
            rooms.get_mut(&row.id).filter(|r| r.members.iter().any(|m| m.conn == conn))
        else {
            return Err(ErrorBody::new(ErrorCode::BadRequest, "attach to the session first"));
        };
        room.driver = Some(conn);
        Ok(room.presence())
    }
}
