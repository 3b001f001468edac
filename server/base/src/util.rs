//! Small helpers with no better home: random ids and tokens, UTC timestamps.
//!
//! Timestamps are formatted here rather than through a date crate: the server only ever needs
//! "now, as RFC 3339 UTC with milliseconds", which is twenty lines of civil-calendar arithmetic.

use std::time::{SystemTime, UNIX_EPOCH};

/// `n` random bytes as lowercase hex, from the OS's CSPRNG.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    if getrandom::getrandom(&mut bytes).is_err() {
        // The OS CSPRNG does not fail on Linux once booted; fall back to time-derived bytes so an
        // id is still unique rather than panicking. Tokens use `random_token`, which refuses.
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (nanos >> ((i % 16) * 8)) as u8 ^ (i as u8).wrapping_mul(151);
        }
    }
    let mut s = String::with_capacity(n * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A new id with a type prefix (`s_…`, `u_…`): 16 random bytes.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_hex(16))
}

/// A new bearer token: `ob_` + 32 random bytes; fails if the OS has no randomness.
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::getrandom(&mut bytes).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut s = String::from("ob_");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    Ok(s)
}

/// Now, as RFC 3339 UTC with milliseconds (`2026-11-29T07:18:16.123Z`).
pub fn now_rfc3339() -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    rfc3339(d.as_secs() as i64, d.subsec_millis())
}

/// The instant `ago` before now, formatted like [`now_rfc3339`] (so it compares as a string with
/// stored timestamps).
pub fn rfc3339_ago(ago: std::time::Duration) -> String {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().saturating_sub(ago);
    rfc3339(d.as_secs() as i64, d.subsec_millis())
}

fn rfc3339(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_022_296, 123), "2026-11-30T07:04:56.123Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
    }

    #[test]
    fn ids_are_prefixed_and_unique() {
        let a = new_id("s");
        let b = new_id("s");
        assert!(a.starts_with("s_") && a.len() == 34);
        assert_ne!(a, b);
        assert!(random_token().unwrap().starts_with("ob_"));
    }
}
