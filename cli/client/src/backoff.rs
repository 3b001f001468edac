//! [`Backoff`]: the pacing of reconnects.

use std::time::Duration;

/// Reconnect pacing: exponential from [`Backoff::BASE`] to [`Backoff::MAX`], with a little
/// jitter so that clients cut off together by a server restart do not come back in lockstep.
#[derive(Debug, Clone)]
pub struct Backoff {
    attempt: u32,
}

impl Backoff {
    /// The first delay. A restarting server on the same host is usually back within a second.
    pub const BASE: Duration = Duration::from_millis(200);
    /// The longest delay: a user staring at "reconnecting" should not wait longer than this.
    pub const MAX: Duration = Duration::from_secs(5);

    /// A fresh backoff (the next delay is [`Backoff::BASE`]).
    pub fn new() -> Self {
        Backoff { attempt: 0 }
    }

    /// The number of delays handed out since the last reset.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The delay before the next attempt; each call doubles it up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let exp = self.attempt.min(16);
        self.attempt = self.attempt.saturating_add(1);
        let base = Self::BASE.saturating_mul(1u32 << exp).min(Self::MAX);
        // Up to 10 % jitter from the clock's low bits: no RNG dependency for a few milliseconds.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let jitter = base.as_millis() as u64 / 10;
        let extra = if jitter == 0 { 0 } else { u64::from(nanos) % jitter };
        (base + Duration::from_millis(extra)).min(Self::MAX)
    }

    /// Back to the first delay (after a successful connection).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}
