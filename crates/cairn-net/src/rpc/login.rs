//! The server's side of a login: the failed-login throttle, and the address a peer is counted
//! under. The SCRAM exchange itself is `crate::scram`; `server.rs` runs it inside the handshake:
//!
//! ```text
//!  HELLO{auth = client-first} ──▶  throttle allows the address?  no ─▶ REFUSAL TOO_MANY_FAILED_LOGINS
//!                                  ServerStart::parse, Handler::credentials(user)
//!                        ◀──────  CHALLENGE{server-first}
//!  AUTH{client-final}    ──────▶  ServerFirst::verify_client_final  fails ─▶ Throttle::failed, REFUSAL AUTH_FAILED
//!                                  Handler::open(hello, peer, Some(user))
//!                        ◀──────  WELCOME{auth = server-final}
//! ```
//!
//! **The throttle** is a token bucket per address: [`Limits::login_failures_burst`] failures
//! are allowed at once, and one more each [`Limits::login_failure_refill`]. An address whose
//! bucket is empty is refused before its proof is looked at, so a password cannot be guessed at
//! line speed from one address (an attacker with many addresses gets a burst from each; the
//! connection limits bound them). Success does not refill the bucket, so interleaving a known
//! good login buys nothing. Failures are logged with the peer and user when an address's count
//! of failures is a power of two (1, 2, 4, 8, …): a flood of guesses writes a few dozen log lines,
//! not one per guess. The table is bounded: past [`ADDRESSES_MAX`] addresses, buckets that have
//! refilled are dropped.
//!
//! [`Limits::login_failures_burst`]: super::Limits::login_failures_burst
//! [`Limits::login_failure_refill`]: super::Limits::login_failure_refill

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Addresses the throttle remembers before it forgets those whose buckets are full again.
pub const ADDRESSES_MAX: usize = 65_536;

/// Failed logins per address (see the module docs).
#[derive(Debug)]
pub(crate) struct Throttle {
    burst: u32,
    refill: Duration,
    by_address: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug)]
struct Bucket {
    /// Failures that may still happen now (a fraction refills over time).
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
    /// Failures ever counted for the address (for rate-limited logging).
    failures: u64,
}

impl Throttle {
    pub(crate) fn new(burst: u32, refill: Duration) -> Throttle {
        Throttle {
            burst: burst.max(1),
            refill: refill.max(Duration::from_millis(1)),
            by_address: Mutex::new(HashMap::new()),
        }
    }

    fn refilled(&self, b: &Bucket, now: Instant) -> f64 {
        let gained = now.saturating_duration_since(b.at).as_secs_f64() / self.refill.as_secs_f64();
        (b.tokens + gained).min(f64::from(self.burst))
    }

    /// Whether `address` may try to log in now.
    pub(crate) fn allows(&self, address: &str, now: Instant) -> bool {
        let map = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        map.get(address).is_none_or(|b| self.refilled(b, now) >= 1.0)
    }

    /// Counts a failed login from `address`; returns how many failures it has had in all.
    pub(crate) fn failed(&self, address: &str, now: Instant) -> u64 {
        let mut map = self.by_address.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= ADDRESSES_MAX && !map.contains_key(address) {
            let full = f64::from(self.burst);
            map.retain(|_, b| self.refilled(b, now) < full);
        }
        let burst = f64::from(self.burst);
        let b = map.entry(address.to_string()).or_insert(Bucket {
            tokens: burst,
            at: now,
            failures: 0,
        });
        b.tokens = (self.refilled(b, now) - 1.0).max(0.0);
        b.at = now;
        b.failures += 1;
        b.failures
    }
}

/// The address a peer's failures are counted under: a TCP peer's IP without its port (a new
/// connection gets a new port); anything else (a Unix socket) as it is.
pub fn address_of(peer: &str) -> &str {
    match peer.rsplit_once(':') {
        Some((ip, port)) if !port.is_empty() && port.bytes().all(|c| c.is_ascii_digit()) => ip,
        _ => peer,
    }
}

/// Whether failure number `n` of an address is logged (powers of two).
pub(crate) fn logs_failure(n: u64) -> bool {
    n.is_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_failures_empties_the_bucket_and_time_refills_it() {
        let t = Throttle::new(3, Duration::from_secs(10));
        let now = Instant::now();
        for i in 1..=3 {
            assert!(t.allows("10.0.0.1", now), "attempt {i} is allowed");
            assert_eq!(t.failed("10.0.0.1", now), i);
        }
        assert!(!t.allows("10.0.0.1", now), "the fourth attempt waits");
        assert!(t.allows("10.0.0.2", now), "another address has its own bucket");
        assert!(!t.allows("10.0.0.1", now + Duration::from_secs(9)));
        assert!(
            t.allows("10.0.0.1", now + Duration::from_secs(10)),
            "one failure refilled"
        );
        t.failed("10.0.0.1", now + Duration::from_secs(10));
        assert!(!t.allows("10.0.0.1", now + Duration::from_secs(10)));
    }

    #[test]
    fn the_table_forgets_refilled_addresses_past_its_bound() {
        let t = Throttle::new(1, Duration::from_millis(1));
        let now = Instant::now();
        for i in 0..ADDRESSES_MAX {
            t.failed(&format!("a{i}"), now);
        }
        let later = now + Duration::from_secs(1);
        t.failed("new", later);
        let len = t.by_address.lock().unwrap().len();
        assert_eq!(len, 1, "every refilled bucket was dropped, the new one kept");
    }

    #[test]
    fn addresses_drop_the_port_only() {
        assert_eq!(address_of("127.0.0.1:5432"), "127.0.0.1");
        assert_eq!(address_of("[::1]:80"), "[::1]");
        assert_eq!(address_of("unix:/tmp/s"), "unix:/tmp/s");
        assert_eq!(address_of("/tmp/sock"), "/tmp/sock");
    }

    #[test]
    fn failures_are_logged_at_powers_of_two() {
        let logged: Vec<u64> = (1..=100).filter(|&n| logs_failure(n)).collect();
        assert_eq!(logged, vec![1, 2, 4, 8, 16, 32, 64]);
    }
}
