//! Following a session: one resumable stream of its events that every front end consumes (the
//! TUI's connection task, headless `outboard run`, the protocol adapters), so that reconnecting
//! and de-duplicating are written once.
//!
//! A [`Follow`] owns the [`Client`] and, for the session it follows, the last durable `seq` it
//! delivered. [`Follow::next`] yields [`Update`]s:
//!
//! - each live event of the session once: a durable event at or below the last `seq` delivered
//!   is a duplicate (it was in a snapshot, or it arrived live while a re-attach was on its way)
//!   and is skipped; events of other sessions are dropped;
//! - after a `lagged` notice (the server dropped events for this slow client), a re-attach after
//!   the last `seq` delivered, whose snapshot holds only what was missed;
//! - when the connection ends, reconnects with [`Backoff`] (the first attempt at once: a dropped
//!   connection is often a restarted server), within the [`Retry`] budget, and re-attaches after
//!   the last `seq` delivered: as the driver, or as a watcher when driving was taken away
//!   meanwhile. When the server answers that another node runs the session, the attempt follows
//!   that node's address once; when that node cannot be reached, attempts go on until the
//!   session is taken over;
//! - an attach (the first, or another session's) waits out a takeover for up to
//!   [`TAKEOVER_WAIT`] and says so once ([`Update::Takeover`]).
//!
//! `next` is cancel-safe: every call in flight (a pause, a dial, an attach) is kept in the
//! `Follow`, so a caller may `select!` it against its own input (keys, Ctrl-C) and lose nothing.
//! While reconnecting, [`Follow::client`] is a disconnected client whose requests fail at once.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use outboard_shared::{
    ErrorCode, EventKind, Role, SessionAttachResponse, SessionEvent, SessionId, Welcome,
};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::conn::{Client, ConnectOptions, TAKEOVER_WAIT};
use crate::error::ClientError;

/// Where and how to connect again.
#[derive(Clone)]
pub struct Dial {
    /// The server's `ws(s)://` URL.
    pub url: String,
    /// The bearer token.
    pub token: String,
    /// Trust and clear-text policy.
    pub options: ConnectOptions,
    /// Ask for room events (`presence`, `drive_requested`, `memory_changed`).
    pub room: bool,
}

impl std::fmt::Debug for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: never in a log line.
        f.debug_struct("Dial").field("url", &self.url).field("room", &self.room).finish()
    }
}

/// How long a lost connection is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Not at all: a lost connection ends the follow (an embedded server died with it).
    Never,
    /// For this long after the connection was lost (`outboard run --reconnect-for`).
    Within(Duration),
    /// Until the caller stops (the TUI).
    Forever,
}

/// What happened next to the followed session or its connection.
#[derive(Debug)]
pub enum Update {
    /// A connection attempt starts. `attempt` is 0 for the first one; `reason` is why the last
    /// connection or attempt failed (none before the first connection).
    Connecting {
        /// Delays handed out by the backoff since the last connection.
        attempt: u32,
        /// The last failure.
        reason: Option<ClientError>,
    },
    /// Connected (again). `lost` is why the previous connection ended, `attempts` how many
    /// attempts it took since.
    Connected {
        /// The server's `welcome`.
        welcome: Box<Welcome>,
        /// Connection attempts since the connection was lost.
        attempts: u32,
        /// Why the previous connection ended.
        lost: Option<ClientError>,
    },
    /// An attach waits for another node to take the session over (at most once per attach).
    Takeover,
    /// The session's snapshot. When `resumed` (after a lag or a reconnect) it holds only the
    /// events not delivered before: those after `after_seq`.
    Attached {
        /// The snapshot, de-duplicated when resumed.
        snapshot: Box<SessionAttachResponse>,
        /// It continues what was delivered before.
        resumed: bool,
        /// The `seq` it was asked after.
        after_seq: Option<u64>,
    },
    /// An attach was refused. The connection goes on; the session is no longer followed unless
    /// the error is fatal (the reconnect then re-attaches it).
    AttachFailed {
        /// Why.
        error: ClientError,
        /// It was a re-attach (after a lag or a reconnect).
        resumed: bool,
    },
    /// A live event of the followed session, delivered once.
    Event(Box<SessionEvent>),
    /// A non-fatal error frame from the server; the connection goes on.
    Warning(ClientError),
}

/// Why a follow ended.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The server refused to go on in a way that waiting does not heal (the token, the protocol
    /// version, TLS).
    #[error(transparent)]
    Refused(ClientError),
    /// The connection ended and this follow does not reconnect ([`Retry::Never`]).
    #[error(transparent)]
    Lost(ClientError),
    /// The server was not back within the [`Retry::Within`] budget.
    #[error("reconnecting failed for {budget:?} ({attempts} attempts; last: {last})")]
    GaveUp {
        /// The budget.
        budget: Duration,
        /// Connection attempts made.
        attempts: u32,
        /// The last attempt's error.
        #[source]
        last: ClientError,
    },
}

/// Whether a failed attempt to connect or re-attach is worth another try: the server is not
/// (fully) back yet. A refused token or session, another protocol version or a TLS failure will
/// not heal by waiting.
pub fn heals(err: &ClientError) -> bool {
    match err {
        ClientError::Connect { .. }
        | ClientError::Handshake { .. }
        | ClientError::Closed { .. } => true,
        ClientError::Connection { fatal, .. } => *fatal,
        ClientError::Server { error, .. } => {
            // `unavailable`: the session is moving between server nodes (a drain, a takeover).
            matches!(
                error.code,
                ErrorCode::ShuttingDown | ErrorCode::Internal | ErrorCode::Unavailable
            )
        }
        _ => false,
    }
}

/// The session followed.
#[derive(Debug, Clone)]
struct Target {
    id: SessionId,
    role: Role,
    /// The last durable `seq` delivered.
    last_seq: u64,
}

type Call<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A connection made, and the re-attach of the followed session on it.
struct Joined {
    client: Client,
    attached: Option<Result<SessionAttachResponse, ClientError>>,
}

enum DialError {
    Failed(ClientError),
    TimedOut,
}

enum Phase {
    /// Connected: events flow.
    Live,
    /// Waiting before the next attempt.
    Pause(Pin<Box<tokio::time::Sleep>>),
    /// Connecting (and re-attaching).
    Dial(Call<Result<Joined, DialError>>),
    /// Over: [`Follow::next`] returned its error.
    Ended,
}

/// An attach on the live connection.
struct Attaching {
    call: Call<Result<SessionAttachResponse, ClientError>>,
    role: Role,
    after: Option<u64>,
    resumed: bool,
    /// Fires when the attach starts waiting for a takeover.
    waiting: Option<oneshot::Receiver<()>>,
}

/// Since the connection was lost (or before the first one).
struct Outage {
    lost: Option<ClientError>,
    last: Option<ClientError>,
    attempts: u32,
    deadline: Option<Instant>,
}

/// Updates queued inside one [`Follow::next`] step: at most a connection, an attach and a
/// refusal come out of one step.
const QUEUED_UPDATES: usize = 4;

/// One session followed across lags and reconnects; see the module header.
pub struct Follow {
    dial: Dial,
    retry: Retry,
    client: Client,
    phase: Phase,
    target: Option<Target>,
    attaching: Option<Attaching>,
    queue: VecDeque<Update>,
    backoff: Backoff,
    outage: Option<Outage>,
}

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follow")
            .field("dial", &self.dial)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Follow {
    /// Connects to `dial` (the first [`Update`] is [`Update::Connecting`]); follows nothing
    /// until [`Follow::attach`].
    pub fn connect(dial: Dial, retry: Retry) -> Follow {
        let down = ClientError::Closed { reason: Some("not connected yet".into()) };
        let mut follow = Follow {
            client: Client::disconnected(&dial.url, down),
            dial,
            retry,
            phase: Phase::Ended,
            target: None,
            attaching: None,
            queue: VecDeque::with_capacity(QUEUED_UPDATES),
            backoff: Backoff::new(),
            outage: Some(Outage { lost: None, last: None, attempts: 0, deadline: None }),
        };
        follow.start_dial();
        follow
    }

    /// Follows `session` on `client`, already attached up to `last_seq` (a run attaches before
    /// it sends its turn); reconnects to `dial` as `retry` says.
    pub fn attached(
        client: Client,
        dial: Dial,
        retry: Retry,
        session: SessionId,
        role: Role,
        last_seq: u64,
    ) -> Follow {
        Follow {
            client,
            dial,
            retry,
            phase: Phase::Live,
            target: Some(Target { id: session, role, last_seq }),
            attaching: None,
            queue: VecDeque::with_capacity(QUEUED_UPDATES),
            backoff: Backoff::new(),
            outage: None,
        }
    }

    /// The client: for requests on the live connection. While reconnecting it is a
    /// disconnected one whose requests fail at once.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        matches!(self.phase, Phase::Live)
    }

    /// The session followed and the role asked for (the role follows `presence`).
    pub fn session(&self) -> Option<(&SessionId, Role)> {
        self.target.as_ref().map(|t| (&t.id, t.role))
    }

    /// The last durable `seq` delivered.
    pub fn last_seq(&self) -> u64 {
        self.target.as_ref().map_or(0, |t| t.last_seq)
    }

    /// The client, once the follow is done with it.
    pub fn into_client(self) -> Client {
        self.client
    }

    /// Follows `session` from its start: attaches as `role` (a driver refused falls back to
    /// watching). Replaces the session followed so far.
    pub fn attach(&mut self, session: SessionId, role: Role) {
        self.target = Some(Target { id: session, role, last_seq: 0 });
        self.attaching = None;
        if self.is_connected() {
            self.start_attach(role, None, false);
        }
    }

    /// Stops following the session (its events are dropped from now on); returns it.
    pub fn forget(&mut self) -> Option<SessionId> {
        self.attaching = None;
        self.target.take().map(|t| t.id)
    }

    /// The next update; see [`Update`]. After an `Err` the follow is over and `next` never
    /// resolves again. Cancel-safe.
    pub async fn next(&mut self) -> Result<Update, FollowError> {
        loop {
            if let Some(update) = self.queue.pop_front() {
                return Ok(update);
            }
            match &mut self.phase {
                Phase::Ended => std::future::pending::<()>().await,
                Phase::Pause(sleep) => {
                    sleep.as_mut().await;
                    self.start_dial();
                }
                Phase::Dial(call) => {
                    let dialed = call.as_mut().await;
                    self.dialed(dialed)?;
                }
                Phase::Live => {
                    if let Some(update) = self.live().await? {
                        return Ok(update);
                    }
                }
            }
        }
    }

    /// One step on the live connection: an event, an attach's answer or its takeover notice.
    async fn live(&mut self) -> Result<Option<Update>, FollowError> {
        // A step lives for one match, on the stack: not worth a box per event.
        #[allow(clippy::large_enum_variant)]
        enum Step {
            Event(Result<SessionEvent, ClientError>),
            Attach(Box<Result<SessionAttachResponse, ClientError>>),
            Waiting,
        }
        let client = &mut self.client;
        let attaching = &mut self.attaching;
        // The attach first: the server answers it before it sends the events that follow its
        // snapshot, so when both are ready the snapshot must be delivered first.
        let step = tokio::select! {
            biased;
            step = async {
                let Some(a) = attaching.as_mut() else { return std::future::pending().await };
                match a.waiting.as_mut() {
                    Some(waiting) => tokio::select! {
                        answer = a.call.as_mut() => Step::Attach(Box::new(answer)),
                        Ok(()) = waiting => Step::Waiting,
                    },
                    None => Step::Attach(Box::new(a.call.as_mut().await)),
                }
            } => step,
            event = client.next_event() => Step::Event(event),
        };
        match step {
            Step::Event(Ok(event)) => Ok(self.event(event)),
            Step::Event(Err(err)) if err.code() == Some(ErrorCode::Lagged) && !err.is_fatal() => {
                // The server dropped events for us: fetch the durable ones we missed.
                if let Some(t) = &self.target {
                    tracing::debug!(last_seq = t.last_seq, "lagged; re-attaching");
                    let (role, after) = (t.role, Some(t.last_seq));
                    self.start_attach(role, after, true);
                }
                Ok(None)
            }
            Step::Event(Err(err)) if !err.is_fatal() => Ok(Some(Update::Warning(err))),
            Step::Event(Err(err)) => self.lost(err).map(|()| None),
            Step::Attach(answer) => Ok(self.answered(*answer)),
            Step::Waiting => {
                if let Some(a) = &mut self.attaching {
                    a.waiting = None;
                }
                Ok(Some(Update::Takeover))
            }
        }
    }

    /// A live event: delivered once, when it is the followed session's.
    fn event(&mut self, event: SessionEvent) -> Option<Update> {
        let me = self.client.welcome().connection_id;
        let t = self.target.as_mut().filter(|t| t.id == event.session_id)?;
        if event.kind.is_durable() {
            if event.seq <= t.last_seq {
                return None;
            }
            t.last_seq = event.seq;
        }
        if let EventKind::Presence { attached } = &event.kind {
            let driving = attached.iter().any(|p| p.role == Role::Driver && p.connection_id == me);
            t.role = if driving { Role::Driver } else { Role::Watcher };
        }
        Some(Update::Event(Box::new(event)))
    }

    fn start_attach(&mut self, role: Role, after: Option<u64>, resumed: bool) {
        let Some(t) = &self.target else { return };
        let (started, waiting) = oneshot::channel();
        let call = self.client.attach_through_takeover(t.id.clone(), role, after, TAKEOVER_WAIT, {
            move || {
                let _ = started.send(());
            }
        });
        self.attaching =
            Some(Attaching { call: Box::pin(call), role, after, resumed, waiting: Some(waiting) });
    }

    /// An attach on the live connection was answered.
    fn answered(&mut self, answer: Result<SessionAttachResponse, ClientError>) -> Option<Update> {
        let Attaching { role, after, resumed, .. } = self.attaching.take()?;
        match answer {
            Ok(snapshot) => Some(self.snapshot(snapshot, resumed, after)),
            Err(err) if role == Role::Driver && err.code() == Some(ErrorCode::Forbidden) => {
                // Not the owner: watch instead.
                let after = if resumed { Some(self.last_seq()) } else { after };
                self.start_attach(Role::Watcher, after, resumed);
                None
            }
            Err(error) => {
                // A lost connection keeps the session: the reconnect re-attaches it.
                if !error.is_fatal() {
                    self.target = None;
                }
                Some(Update::AttachFailed { error, resumed })
            }
        }
    }

    /// A snapshot: the events already delivered are dropped from a resumed one.
    fn snapshot(
        &mut self,
        mut snapshot: SessionAttachResponse,
        resumed: bool,
        after_seq: Option<u64>,
    ) -> Update {
        let last = self.last_seq();
        if resumed {
            snapshot.events.retain(|e| !e.kind.is_durable() || e.seq > last);
        }
        let newest = snapshot.events.iter().map(|e| e.seq).max().unwrap_or(0);
        let t = Target {
            id: snapshot.session.id.clone(),
            role: snapshot.role,
            last_seq: last.max(newest),
        };
        self.target = Some(t);
        Update::Attached { snapshot: Box::new(snapshot), resumed, after_seq }
    }

    /// The connection ended: reconnect, or end the follow.
    fn lost(&mut self, err: ClientError) -> Result<(), FollowError> {
        self.attaching = None;
        let deadline = match self.retry {
            Retry::Never => {
                self.phase = Phase::Ended;
                return Err(FollowError::Lost(err));
            }
            Retry::Within(budget) => Some(Instant::now() + budget),
            Retry::Forever => None,
        };
        tracing::debug!(error = %err, "connection lost; reconnecting");
        self.client = Client::disconnected(&self.dial.url, err.clone());
        self.backoff.reset();
        self.outage =
            Some(Outage { lost: Some(err.clone()), last: Some(err), attempts: 0, deadline });
        // The first retry comes at once: a dropped connection is often a restarted server.
        self.start_dial();
        Ok(())
    }

    fn start_dial(&mut self) {
        let Some(outage) = &mut self.outage else { return };
        outage.attempts += 1;
        self.queue.push_back(Update::Connecting {
            attempt: self.backoff.attempt(),
            reason: outage.last.clone(),
        });
        let dial = self.dial.clone();
        let target = self.target.clone();
        let joining = async move {
            let client = Client::connect_with(&dial.url, &dial.token, dial.room, &dial.options)
                .await
                .map_err(DialError::Failed)?;
            let Some(t) = target else { return Ok(Joined { client, attached: None }) };
            rejoin(client, &dial, t).await.map_err(DialError::Failed)
        };
        let deadline = outage.deadline;
        self.phase = Phase::Dial(Box::pin(async move {
            match deadline {
                Some(at) => {
                    tokio::time::timeout_at(at, joining).await.unwrap_or(Err(DialError::TimedOut))
                }
                None => joining.await,
            }
        }));
    }

    /// An attempt ended: go live, try again later, or give up.
    fn dialed(&mut self, dialed: Result<Joined, DialError>) -> Result<(), FollowError> {
        let outage = self.outage.take();
        let (lost, attempts) = outage.as_ref().map_or((None, 0), |o| (o.lost.clone(), o.attempts));
        match dialed {
            Ok(Joined { client, attached }) => {
                self.backoff.reset();
                self.phase = Phase::Live;
                let welcome = Box::new(client.welcome().clone());
                self.client = client;
                self.queue.push_back(Update::Connected { welcome, attempts, lost });
                let after = Some(self.last_seq());
                match attached {
                    None => {}
                    Some(Ok(snapshot)) => {
                        let update = self.snapshot(snapshot, true, after);
                        self.queue.push_back(update);
                    }
                    Some(Err(error)) => {
                        self.target = None;
                        self.queue.push_back(Update::AttachFailed { error, resumed: true });
                    }
                }
                Ok(())
            }
            Err(failure) => {
                let Some(mut outage) = outage else { return Ok(()) };
                let budget = match self.retry {
                    Retry::Within(budget) => budget,
                    Retry::Never | Retry::Forever => Duration::ZERO,
                };
                let give_up = |outage: Outage, last: ClientError| FollowError::GaveUp {
                    budget,
                    attempts: outage.attempts,
                    last,
                };
                let err = match failure {
                    DialError::TimedOut => {
                        let last =
                            outage.last.clone().unwrap_or(ClientError::Closed { reason: None });
                        self.phase = Phase::Ended;
                        return Err(give_up(outage, last));
                    }
                    DialError::Failed(err) if !heals(&err) => {
                        self.phase = Phase::Ended;
                        return Err(FollowError::Refused(err));
                    }
                    DialError::Failed(err) => err,
                };
                tracing::debug!(attempt = outage.attempts, error = %err, "connecting failed; retrying");
                let now = Instant::now();
                let delay = self.backoff.next_delay();
                if let Some(deadline) = outage.deadline {
                    if now >= deadline {
                        self.phase = Phase::Ended;
                        return Err(give_up(outage, err));
                    }
                }
                let until = match outage.deadline {
                    Some(deadline) => (now + delay).min(deadline),
                    None => now + delay,
                };
                outage.last = Some(err);
                self.outage = Some(outage);
                self.phase = Phase::Pause(Box::pin(tokio::time::sleep_until(until)));
                Ok(())
            }
        }
    }
}

/// Re-attaches `t` on a new connection after its last `seq`. When the server answers that
/// another node runs the session now, follows that node's address once. A refusal that waiting
/// does not heal comes back inside [`Joined`] (the connection is fine); one that heals fails the
/// attempt.
async fn rejoin(client: Client, dial: &Dial, t: Target) -> Result<Joined, ClientError> {
    let attached = attach_as(&client, &t).await;
    let attached = match attached {
        Err(ClientError::Server { error, .. })
            if error.code == ErrorCode::Unavailable
                && error.node_url.as_ref().is_some_and(|u| *u != dial.url) =>
        {
            let owner = error.node_url.unwrap_or_default();
            tracing::debug!(node = %owner, "the session runs on another node; following it");
            let client =
                Client::connect_with(&owner, &dial.token, dial.room, &dial.options).await?;
            let attached = attach_as(&client, &t).await;
            return settle(client, attached);
        }
        other => other,
    };
    settle(client, attached)
}

fn settle(
    client: Client,
    attached: Result<SessionAttachResponse, ClientError>,
) -> Result<Joined, ClientError> {
    match attached {
        Err(err) if heals(&err) => Err(err),
        attached => Ok(Joined { client, attached: Some(attached) }),
    }
}

/// Attaches after `t.last_seq` as `t.role`; a driver refused (driving was taken away while we
/// were gone) watches instead.
async fn attach_as(client: &Client, t: &Target) -> Result<SessionAttachResponse, ClientError> {
    let after = Some(t.last_seq);
    match client.attach(t.id.clone(), t.role, after).await {
        Err(err) if t.role == Role::Driver && err.code() == Some(ErrorCode::Forbidden) => {
            client.attach(t.id.clone(), Role::Watcher, after).await
        }
        other => other,
    }
}

#[cfg(test)]
mod tests;
