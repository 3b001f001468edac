//! Who may start a join on a sandbox host, and how often the host says it refused someone.
//!
//! A connection that has not joined yet is reachable without the token. The host bounds them
//! overall (the host's `MAX_PENDING_JOINS`) and, here, per source
//! ([`MAX_PENDING_JOINS_PER_SOURCE`]): with the overall bound only, 16 idle TCP connections from
//! one peer, reopened as the host closed them, kept every slot taken and a restarted harness
//! could not reach the host. A source is an IPv4 address or an IPv6 /64 (what one machine is
//! usually given), so one peer cannot take the slots of everyone else.
//!
//! Refusals and pre-join failures are logged through [`RefusalLog`], at most one line a
//! [`REFUSAL_LOG_EVERY`] saying how many were left out: a fast reconnect loop once wrote 566,000
//! warnings (108 MB) in 40 s.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections not yet joined from one source at once. A harness node reconnects with one
/// connection at a time; four leave room for a few nodes behind one address (NAT) while a
/// peer without the token holds at most a quarter of the host's `MAX_PENDING_JOINS`.
pub const MAX_PENDING_JOINS_PER_SOURCE: usize = 4;

/// At most one refusal line this often; the next one says how many were left out.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(1);

/// Where a connection comes from, for [`MAX_PENDING_JOINS_PER_SOURCE`]: an IPv4 address (a
/// mapped one as itself) or the /64 of an IPv6 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source(IpAddr);

impl Source {
    /// The source of a peer at `ip`.
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source(IpAddr::V4(v4)),
                None => {
                    let bits = u128::from(v6) & !((1u128 << 64) - 1);
                    Source(IpAddr::V6(bits.into()))
                }
            },
        }
    }
}

/// Why a connection was not admitted to join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// [`PendingJoins`]' overall bound is reached.
    Full,
    /// This source holds [`MAX_PENDING_JOINS_PER_SOURCE`] already.
    SourceFull,
}

impl Refused {
    /// For the log line.
    pub fn describe(self) -> &'static str {
        match self {
            Refused::Full => "too many connections joining",
            Refused::SourceFull => "too many connections joining from one source",
        }
    }
}

/// The connections that have not joined yet, overall and per source. At most `total` entries
/// (one per source at worst).
#[derive(Debug)]
pub struct PendingJoins {
    total: usize,
    per_source: usize,
    held: Mutex<(usize, HashMap<Source, usize>)>,
}

/// One admitted connection's place until it joins or ends (dropping it gives the place back).
#[derive(Debug)]
pub struct Joining {
    pending: Arc<PendingJoins>,
    source: Source,
}

impl Drop for Joining {
    fn drop(&mut self) {
        if let Ok(mut held) = self.pending.held.lock() {
            held.0 = held.0.saturating_sub(1);
            if let Some(n) = held.1.get_mut(&self.source) {
                *n -= 1;
                if *n == 0 {
                    held.1.remove(&self.source);
                }
            }
        }
    }
}

impl PendingJoins {
    /// At most `total` at once, `per_source` of them from one source.
    pub fn new(total: usize, per_source: usize) -> Arc<PendingJoins> {
        Arc::new(PendingJoins { total, per_source, held: Mutex::new((0, HashMap::new())) })
    }

    /// A place for a connection from `ip`, unless a bound is reached.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Joining, Refused> {
        let source = Source::of(ip);
        let mut held = self.held.lock().map_err(|_| Refused::Full)?;
        if held.0 >= self.total {
            return Err(Refused::Full);
        }
        let from_source = held.1.entry(source).or_insert(0);
        if *from_source >= self.per_source {
            return Err(Refused::SourceFull);
        }
        *from_source += 1;
        held.0 += 1;
        Ok(Joining { pending: self.clone(), source })
    }
}

/// Refusals counted since the last line, logged at most once a [`REFUSAL_LOG_EVERY`].
#[derive(Debug, Default)]
pub struct RefusalLog {
    state: Mutex<LogState>,
}

#[derive(Debug, Default)]
struct LogState {
    last: Option<Instant>,
    left_out: u64,
}

impl RefusalLog {
    /// Logs `what` (about `peer`) unless a line went out less than [`REFUSAL_LOG_EVERY`] ago;
    /// then it only counts.
    pub fn note(&self, peer: std::net::SocketAddr, what: &str) {
        if let Some(left_out) = self.admit_line(Instant::now()) {
            tracing::warn!(%peer, left_out, "sandbox host: {what} (lines like this are at most one a second; left_out counts the others since the last)");
        }
    }

    /// Whether a line may go out at `now`, and how many were left out before it.
    fn admit_line(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().ok()?;
        let due = state.last.is_none_or(|last| now.duration_since(last) >= REFUSAL_LOG_EVERY);
        if !due {
            state.left_out += 1;
            return None;
        }
        state.last = Some(now);
        Some(std::mem::take(&mut state.left_out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn one_source_gets_its_share_and_the_others_still_get_in() {
        let pending = PendingJoins::new(6, 2);
        let a: Vec<Joining> = (0..2).map(|_| pending.admit(v4(1)).unwrap()).collect();
        assert_eq!(pending.admit(v4(1)).unwrap_err(), Refused::SourceFull);
        let b = pending.admit(v4(2)).unwrap();
        let c: Vec<Joining> = (3..6).map(|i| pending.admit(v4(i)).unwrap()).collect();
        assert_eq!(pending.admit(v4(9)).unwrap_err(), Refused::Full);
        drop(a);
        assert!(pending.admit(v4(1)).is_ok());
        drop((b, c));
        assert_eq!(pending.held.lock().unwrap().0, 0);
        assert!(pending.held.lock().unwrap().1.is_empty());
    }

    #[test]
    fn an_ipv6_64_is_one_source_and_a_mapped_address_is_its_ipv4() {
        let one: Ipv6Addr = "2001:db8:1:2::1".parse().unwrap();
        let two: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Source::of(one.into()), Source::of(two.into()));
        assert_ne!(Source::of(one.into()), Source::of(other.into()));
        let mapped: Ipv6Addr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(Source::of(mapped.into()), Source::of(v4(1)));
    }

    #[test]
    fn refusal_lines_are_one_a_second_and_count_the_others() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(log.admit_line(t0), Some(0));
        for ms in [1, 10, 500, 999] {
            assert_eq!(log.admit_line(t0 + Duration::from_millis(ms)), None);
        }
        assert_eq!(log.admit_line(t0 + Duration::from_millis(1000)), Some(4));
        assert_eq!(log.admit_line(t0 + Duration::from_millis(1001)), None);
    }
}
