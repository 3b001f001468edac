//! What one WebSocket connection can make the server hold, and for how long.
//!
//! - **Outbound bytes.** Frames for the client wait in a queue bounded by count
//!   ([`OUTBOUND_QUEUE`]) and by encoded bytes ([`OUTBOUND_BYTES`]). A live event waits for room
//!   (the session's broadcast then lags, and the client gets a fresh snapshot instead of the
//!   backlog); an answer to a request finds room at once or the connection is cut — a client
//!   that sends requests and never reads their answers gets nothing more. A write that the
//!   client does not take within [`WRITE_STALL`] cuts the connection too (nginx's
//!   `send_timeout`).
//! - **Inbound messages.** A message may be at most [`MAX_FRAME_BYTES`] (no method needs more;
//!   uploads have their own HTTP path), and one whose first bytes arrived must be finished within
//!   `NetConfig::message_timeout` (60 s by default, `--message-timeout`): a fragmented message that never ends would otherwise hold its bytes
//!   for as long as the client pings. The bytes of an unfinished message are what the raw
//!   stream read since the last whole data message, less the control frames read since
//!   ([`MessageWatch`]).
//!
//! Each cut is logged with the peer, the user and the reason, and counted in
//! `outboard_connections_cut_total{reason}`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message as WsMessage, Utf8Bytes};
use futures_util::StreamExt as _;
use outboard_shared::{ServerFrame, MAX_FRAME_BYTES};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::net::PreHello;

/// Frames queued for one connection's writer, at most (a burst of small deltas).
pub(super) const OUTBOUND_QUEUE: usize = 512;

/// Encoded bytes queued for one connection's writer, at most: two of the largest frames and a
/// history page, so a client that reads gets every answer whole.
pub(super) const OUTBOUND_BYTES: usize = 2 * MAX_FRAME_BYTES + outboard_shared::HISTORY_PAGE_BYTES;

/// How long one write may wait for the client to take it.
pub(super) const WRITE_STALL: Duration = Duration::from_secs(60);

/// Bytes read past the last whole message that are not yet a message: what the WebSocket
/// layer reads ahead (its read buffer) and a frame header or two.
const READ_AHEAD_SLACK: u64 = 16 * 1024 + 64;

/// How often the deadline of an unfinished message is checked.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// One frame for the writer: its text, the close frame to send after it (a fatal error), and
/// its share of [`OUTBOUND_BYTES`], given back once it is written.
pub(super) struct Queued {
    /// The frame, encoded.
    pub text: Utf8Bytes,
    /// Send this close frame after it and close the connection.
    pub close: Option<Option<CloseFrame>>,
    _room: OwnedSemaphorePermit,
}

/// Why a connection was cut, for its log line and metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cut {
    /// Answers the client did not read filled [`OUTBOUND_BYTES`].
    UnreadOutput,
    /// One write waited [`WRITE_STALL`].
    WriteStall,
}

impl Cut {
    pub(super) fn reason(self) -> &'static str {
        match self {
            Cut::UnreadOutput => "unread_output",
            Cut::WriteStall => "write_stall",
        }
    }

    pub(super) fn describe(self) -> String {
        match self {
            Cut::UnreadOutput => format!(
                "the client sends requests without reading their answers ({} MiB queued unread)",
                OUTBOUND_BYTES >> 20
            ),
            Cut::WriteStall => {
                format!("the client took nothing of a frame for {} s", WRITE_STALL.as_secs())
            }
        }
    }
}

/// What the writer needs to cut its connection: it holds no sender, so the queue closes when
/// the connection's last sender goes.
pub(super) struct Cutter {
    cut: CancellationToken,
    why: Arc<std::sync::Mutex<Option<Cut>>>,
}

impl Cutter {
    pub(super) fn cut(&self, why: Cut) {
        let mut slot = self.why.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(why);
        }
        drop(slot);
        self.cut.cancel();
    }
}

/// The sending side of a connection's outbound queue (cheap to clone).
#[derive(Clone)]
pub(super) struct Out {
    tx: mpsc::Sender<Queued>,
    room: Arc<Semaphore>,
    cut: CancellationToken,
    why: Arc<std::sync::Mutex<Option<Cut>>>,
}

impl Out {
    /// A queue and the receiver its writer drains.
    pub(super) fn new() -> (Out, mpsc::Receiver<Queued>) {
        let (tx, rx) = mpsc::channel(OUTBOUND_QUEUE);
        let out = Out {
            tx,
            room: Arc::new(Semaphore::new(OUTBOUND_BYTES)),
            cut: CancellationToken::new(),
            why: Arc::default(),
        };
        (out, rx)
    }

    fn encode(frame: &ServerFrame) -> Option<(Utf8Bytes, u32)> {
        let Some(text) = crate::paging::bounded_frame(frame) else {
            tracing::error!("cannot encode a frame");
            return None;
        };
        let cost = text.len().clamp(1, OUTBOUND_BYTES) as u32;
        Some((Utf8Bytes::from(text), cost))
    }

    /// Queues `frame` (then, with `close`, that close frame), waiting for room: for live events
    /// and progress a reader will take. False once the connection is gone or cut.
    pub(super) async fn send(&self, frame: ServerFrame, close: Option<Option<CloseFrame>>) -> bool {
        let Some((text, cost)) = Self::encode(&frame) else { return true };
        let room = tokio::select! {
            room = self.room.clone().acquire_many_owned(cost) => room,
            () = self.cut.cancelled() => return false,
        };
        let Ok(room) = room else { return false };
        self.tx.send(Queued { text, close, _room: room }).await.is_ok()
    }

    /// Queues `frame` if there is room now; drops it otherwise (advisory progress).
    pub(super) fn try_send(&self, frame: ServerFrame) {
        let Some((text, cost)) = Self::encode(&frame) else { return };
        if let Ok(room) = self.room.clone().try_acquire_many_owned(cost) {
            let _ = self.tx.try_send(Queued { text, close: None, _room: room });
        }
    }

    /// Queues an answer to a request: there is room now, or the client is not reading what it
    /// asks for and the connection is cut ([`Cut::UnreadOutput`]). False when it was not
    /// queued.
    pub(super) async fn answer(&self, frame: ServerFrame) -> bool {
        let Some((text, cost)) = Self::encode(&frame) else { return true };
        match self.room.clone().try_acquire_many_owned(cost) {
            Ok(room) => self.tx.send(Queued { text, close: None, _room: room }).await.is_ok(),
            Err(_) => {
                self.cut(Cut::UnreadOutput);
                false
            }
        }
    }

    /// Ends the connection for `why` (the first reason is kept).
    pub(super) fn cut(&self, why: Cut) {
        self.clone_cutter().cut(why)
    }

    /// The writer's way to cut the connection.
    pub(super) fn clone_cutter(&self) -> Cutter {
        Cutter { cut: self.cut.clone(), why: self.why.clone() }
    }

    /// Why the connection was cut, once it was.
    pub(super) fn cut_for(&self) -> Option<Cut> {
        *self.why.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fires once the connection is cut.
    pub(super) async fn cut_done(&self) {
        self.cut.cancelled().await
    }

    /// Bytes queued now.
    pub(super) fn queued_bytes(&self) -> usize {
        OUTBOUND_BYTES - self.room.available_permits()
    }
}

/// The bytes of a message the client has begun and not finished (see the module header).
pub(super) struct MessageWatch {
    raw: Arc<PreHello>,
    /// What the raw stream had read when the last whole message was taken, plus the control
    /// frames taken since.
    baseline: u64,
    /// When the bytes past the baseline first passed the slack.
    since: Option<Instant>,
    /// How long a message may take.
    deadline: Duration,
}

/// What reading the next frame gave.
pub(super) enum Next {
    /// A text message.
    Text(String),
    /// A message the protocol does not have (binary): answered, the connection kept.
    Bad(String),
    /// Nothing for the idle timeout.
    Idle,
    /// A message begun `message_timeout` ago is still not finished: this many bytes.
    Unfinished(u64),
    /// A message over [`MAX_FRAME_BYTES`].
    TooLarge,
    /// The connection ended.
    Closed,
}

impl MessageWatch {
    pub(super) fn new(raw: Arc<PreHello>, deadline: Duration) -> MessageWatch {
        let baseline = raw.bytes_read();
        MessageWatch { raw, baseline, since: None, deadline }
    }

    fn whole_message(&mut self) {
        self.baseline = self.raw.bytes_read();
        self.since = None;
    }

    fn control(&mut self, payload: usize) {
        // A client's control frame: 2 bytes of header, a 4-byte mask, at most 125 of payload.
        self.baseline += 6 + payload as u64;
    }

    /// The bytes of an unfinished message once it is past its deadline.
    fn overdue(&mut self, now: Instant) -> Option<u64> {
        let pending = self.raw.bytes_read().saturating_sub(self.baseline);
        if pending <= READ_AHEAD_SLACK {
            self.since = None;
            return None;
        }
        let since = *self.since.get_or_insert(now);
        (now.duration_since(since) >= self.deadline).then_some(pending)
    }
}

/// The next message of `stream`, pings included in the idle timeout's reset, and with `watch`
/// the deadline of an unfinished message.
pub(super) async fn next_frame(
    stream: &mut super::WsStream,
    idle: Option<Duration>,
    mut watch: Option<&mut MessageWatch>,
) -> Next {
    let mut idle_at = idle.map(|d| tokio::time::Instant::now() + d);
    // On a schedule of its own: the messages that arrive (pings) must not put it off.
    let mut check_at = tokio::time::Instant::now() + WATCH_EVERY;
    loop {
        let far = tokio::time::Instant::now() + Duration::from_secs(86_400);
        let tick = match watch.is_some() {
            true => check_at,
            false => far,
        };
        let message = tokio::select! {
            message = stream.next() => message,
            () = tokio::time::sleep_until(idle_at.unwrap_or(far)) => return Next::Idle,
            () = tokio::time::sleep_until(tick) => {
                check_at = tokio::time::Instant::now() + WATCH_EVERY;
                if let Some(bytes) = watch.as_deref_mut().and_then(|w| w.overdue(Instant::now())) {
                    return Next::Unfinished(bytes);
                }
                continue;
            }
        };
        let Some(message) = message else { return Next::Closed };
        idle_at = idle.map(|d| tokio::time::Instant::now() + d);
        match message {
            Ok(WsMessage::Text(t)) => {
                if let Some(w) = watch.as_deref_mut() {
                    w.whole_message();
                }
                return Next::Text(t.to_string());
            }
            Ok(WsMessage::Binary(_)) => {
                if let Some(w) = watch.as_deref_mut() {
                    w.whole_message();
                }
                return Next::Bad(
                    "binary frames are not part of the protocol; send JSON text".into(),
                );
            }
            Ok(WsMessage::Close(_)) => return Next::Closed,
            Ok(WsMessage::Ping(p)) | Ok(WsMessage::Pong(p)) => {
                if let Some(w) = watch.as_deref_mut() {
                    w.control(p.len());
                }
            }
            Err(e) => {
                if is_too_large(&e) {
                    return Next::TooLarge;
                }
                tracing::debug!("connection error: {e}");
                return Next::Closed;
            }
        }
    }
}

/// Whether the WebSocket layer refused a message or frame over its size.
fn is_too_large(e: &axum::Error) -> bool {
    use tokio_tungstenite::tungstenite::Error as WsError;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(ws) = err.downcast_ref::<WsError>() {
            return matches!(ws, WsError::Capacity(_));
        }
        source = err.source();
    }
    // axum's own tungstenite, when it is another version than ours.
    let text = e.to_string();
    text.contains("Space limit exceeded") || text.contains("too long")
}
