//! A bounded bridge from a synchronous progress callback (a model's deltas, a command's output)
//! to the async task that forwards them to the session.
//!
//! The producers call back synchronously from inside their own read loops, so they cannot wait
//! for room. An unbounded channel there (what this replaced) let a stalled session actor grow
//! memory without limit. Here the channel holds [`RELAY_CAPACITY`] items; when it is full, new
//! items are coalesced into a pending queue (text appended to the last item of the same kind),
//! which never holds more than [`RELAY_PENDING_BYTES`]: beyond that, text is dropped and counted.
//! What is dropped is transient only — the durable `assistant_message` and `tool_result` carry the
//! whole text, and a client that missed deltas redraws from them. In practice the pending queue
//! stays small: `Bash` streams at most 30,000 bytes per command to watchers, and a model answer is
//! what the turn holds in memory anyway.

use std::collections::VecDeque;

use outboard_shared::OutputStream;
use tokio::sync::mpsc;

use outboard_llm::StreamDelta;

/// Items in flight between producer and forwarder: deltas arrive a few hundred a second at most
/// and the forwarder only hops them onto the actor's channel, so 64 absorbs any burst that does
/// not mean the actor is stalled.
pub const RELAY_CAPACITY: usize = 64;

/// Bytes of coalesced text held while the channel is full. A 1 MiB answer or output still
/// reaches watchers whole after a stall; past that, deltas are dropped (see the module header).
pub const RELAY_PENDING_BYTES: usize = 1024 * 1024;

/// An item that can absorb the next one when both wait in the pending queue.
pub trait Coalesce: Sized {
    /// Text bytes this item carries (what the pending bound counts).
    fn bytes(&self) -> usize;
    /// Appends `next` to `self` if they are of one kind; hands it back otherwise.
    fn absorb(&mut self, next: Self) -> Result<(), Self>;
}

impl Coalesce for StreamDelta {
    fn bytes(&self) -> usize {
        match self {
            StreamDelta::Text(text) => text.len(),
            StreamDelta::Retry { reason, .. } => reason.len(),
        }
    }

    fn absorb(&mut self, next: Self) -> Result<(), Self> {
        match (self, next) {
            (StreamDelta::Text(text), StreamDelta::Text(more)) => {
                text.push_str(&more);
                Ok(())
            }
            (_, next) => Err(next),
        }
    }
}

impl Coalesce for (OutputStream, String) {
    fn bytes(&self) -> usize {
        self.1.len()
    }

    fn absorb(&mut self, next: Self) -> Result<(), Self> {
        if self.0 == next.0 {
            self.1.push_str(&next.1);
            Ok(())
        } else {
            Err(next)
        }
    }
}

/// The producer's end: [`Relay::push`] never blocks.
pub struct Relay<T> {
    tx: mpsc::Sender<T>,
    pending: VecDeque<T>,
    pending_bytes: usize,
    dropped_bytes: usize,
}

/// A relay and the receiver its forwarder reads.
pub fn relay<T: Coalesce>() -> (Relay<T>, mpsc::Receiver<T>) {
    let (tx, rx) = mpsc::channel(RELAY_CAPACITY);
    (Relay { tx, pending: VecDeque::new(), pending_bytes: 0, dropped_bytes: 0 }, rx)
}

impl<T: Coalesce> Relay<T> {
    /// Hands `item` on at once if there is room (after whatever waits before it), else keeps it
    /// coalesced in the pending queue, within its bound.
    pub fn push(&mut self, item: T) {
        self.drain_pending();
        if self.pending.is_empty() {
            if let Err(mpsc::error::TrySendError::Full(item)) = self.tx.try_send(item) {
                self.hold(item);
            }
        } else {
            self.hold(item);
        }
    }

    /// Sends what is still pending, waiting for room, then closes the relay (the forwarder ends
    /// once it has read everything). Call it when the producer is done.
    pub async fn finish(mut self) -> usize {
        while let Some(item) = self.pending.pop_front() {
            if self.tx.send(item).await.is_err() {
                break;
            }
        }
        self.dropped_bytes
    }

    fn drain_pending(&mut self) {
        while let Some(item) = self.pending.pop_front() {
            let bytes = item.bytes();
            match self.tx.try_send(item) {
                Ok(()) => self.pending_bytes -= bytes,
                Err(mpsc::error::TrySendError::Full(item)) => {
                    self.pending.push_front(item);
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.pending.clear();
                    self.pending_bytes = 0;
                    return;
                }
            }
        }
    }

    fn hold(&mut self, item: T) {
        let bytes = item.bytes();
        if self.pending_bytes + bytes > RELAY_PENDING_BYTES {
            if self.dropped_bytes == 0 {
                tracing::warn!(
                    "the session is not reading progress events; dropping them past {} bytes \
                     (the durable result keeps everything)",
                    RELAY_PENDING_BYTES
                );
            }
            self.dropped_bytes += bytes;
            return;
        }
        self.pending_bytes += bytes;
        let item = match self.pending.back_mut() {
            Some(last) => match last.absorb(item) {
                Ok(()) => return,
                Err(item) => item,
            },
            None => item,
        };
        self.pending.push_back(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> StreamDelta {
        StreamDelta::Text(s.to_owned())
    }

    #[tokio::test]
    async fn a_full_channel_coalesces_and_loses_nothing_under_the_bound() {
        let (mut relay, mut rx) = relay::<StreamDelta>();
        // Nobody reads until the producer is done: the channel fills, the rest is coalesced.
        let mut expected = String::new();
        for i in 0..10 * RELAY_CAPACITY {
            let chunk = format!("{i} ");
            expected.push_str(&chunk);
            relay.push(text(&chunk));
        }
        relay.push(StreamDelta::Retry {
            attempt: 2,
            delay: std::time::Duration::from_millis(5),
            reason: "overloaded".into(),
        });
        relay.push(text("after"));
        assert_eq!(rx.len(), RELAY_CAPACITY, "the channel is at its bound");
        // Text, then the retry, then text: three pending items, not 10×64.
        assert_eq!(relay.pending.len(), 3);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(d) = rx.recv().await {
                got.push(d);
            }
            got
        });
        assert_eq!(relay.finish().await, 0);
        let got = reader.await.unwrap();
        let mut streamed = String::new();
        let mut after_retry = String::new();
        let mut retries = 0;
        for d in got {
            match d {
                StreamDelta::Text(t) if retries == 0 => streamed.push_str(&t),
                StreamDelta::Text(t) => after_retry.push_str(&t),
                StreamDelta::Retry { .. } => retries += 1,
            }
        }
        assert_eq!((streamed, retries, after_retry.as_str()), (expected, 1, "after"));
    }

    #[tokio::test]
    async fn a_stalled_reader_bounds_what_is_held() {
        let (mut relay, rx) = relay::<(OutputStream, String)>();
        let chunk = "x".repeat(64 * 1024);
        for i in 0..100 {
            let stream = if i % 2 == 0 { OutputStream::Stdout } else { OutputStream::Stderr };
            relay.push((stream, chunk.clone()));
        }
        assert_eq!(rx.len(), RELAY_CAPACITY);
        assert!(relay.pending_bytes <= RELAY_PENDING_BYTES, "{}", relay.pending_bytes);
        let held = (100 - RELAY_CAPACITY) * chunk.len();
        let kept = RELAY_PENDING_BYTES / chunk.len() * chunk.len();
        assert_eq!(relay.pending_bytes, kept);
        assert_eq!(relay.dropped_bytes, held - kept);
        drop(rx);
        // A closed forwarder ends the relay at once.
        assert_eq!(relay.finish().await, held - kept);
    }

    #[tokio::test]
    async fn once_the_reader_catches_up_order_is_kept() {
        let (mut relay, mut rx) = relay::<(OutputStream, String)>();
        for i in 0..RELAY_CAPACITY + 3 {
            relay.push((OutputStream::Stdout, format!("{i},")));
        }
        // The reader frees room; the next push sends what was pending first.
        let mut got = String::new();
        for _ in 0..RELAY_CAPACITY {
            got.push_str(&rx.recv().await.unwrap().1);
        }
        relay.push((OutputStream::Stdout, "last".into()));
        assert_eq!(relay.pending.len(), 0);
        drop(relay);
        while let Some((_, t)) = rx.recv().await {
            got.push_str(&t);
        }
        let expected: String =
            (0..RELAY_CAPACITY + 3).map(|i| format!("{i},")).chain(["last".into()]).collect();
        assert_eq!(got, expected);
    }
}
