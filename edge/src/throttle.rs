//! The throttle on failed key checks: per key id and per client address.
//!
//! Every door a key opens (`/mcp`, the SSE trace stream, the console's
//! sign-in) asks [`Failures::admit`] before it asks the auth service, and
//! reports the outcome afterwards. Each key id and each client address has a
//! leaky bucket: a failed check adds one, and one leaks away every
//! [`Rule::forgive_every`]; once a bucket holds [`Rule::burst`], checks for
//! that key id or from that address are refused (429 with `Retry-After`)
//! without asking auth, until enough has leaked away.
//!
//! - **Per key id** ([`PER_KEY`]): guessing one key's secret. A success
//!   empties the key's bucket, so a person who mistyped is not held back.
//! - **Per address** ([`PER_ADDRESS`]): spraying many key ids from one
//!   place. IPv6 addresses count by their /64, the block one host is given.
//!   Behind a balancer every client shares the balancer's address, so an
//!   address limit alone would let one sprayer lock everybody out: a key id
//!   that verified within [`KNOWN_GOOD_FOR`] is therefore held only to its
//!   own limit, and active callers keep working while a stranger fails.
//!
//! Memory is bounded: each map holds at most [`MAX_TRACKED`] entries; a full
//! map first drops the entries that have leaked empty, then the emptiest,
//! so random key ids cannot grow it.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A leaky bucket's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Failures in a row that close the door.
    pub burst: u32,
    /// How often one failure is forgiven; the sustained rate of failures
    /// allowed is one per this.
    pub forgive_every: Duration,
}

/// One key id: 10 failures in a row, then one per 6 s (10 a minute).
pub const PER_KEY: Rule = Rule {
    burst: 10,
    forgive_every: Duration::from_secs(6),
};

/// One client address: 30 failures in a row, then one per 2 s (30 a
/// minute), whatever key ids they name.
pub const PER_ADDRESS: Rule = Rule {
    burst: 30,
    forgive_every: Duration::from_secs(2),
};

/// How long a key id that verified is held only to its own limit.
pub const KNOWN_GOOD_FOR: Duration = Duration::from_secs(600);

/// The most entries each map keeps (about 1 MB in all at most).
pub const MAX_TRACKED: usize = 10_000;

/// The failed checks of one process's doors (the edge and its console
/// share one).
#[derive(Debug)]
pub struct Failures {
    inner: Mutex<Inner>,
    per_key: Rule,
    per_address: Rule,
    /// Checks refused so far (`/metrics`).
    refused: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    keys: HashMap<String, Bucket>,
    addresses: HashMap<IpAddr, Bucket>,
    /// Key ids that verified, and when last.
    good: HashMap<String, Instant>,
}

/// A leaky bucket: its level when last touched.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    level: f64,
    at: Instant,
}

impl Bucket {
    fn level(&self, rule: Rule, now: Instant) -> f64 {
        let leaked =
            now.saturating_duration_since(self.at).as_secs_f64() / rule.forgive_every.as_secs_f64();
        (self.level - leaked).max(0.0)
    }

    /// How long until the door opens again; zero when open.
    fn wait(&self, rule: Rule, now: Instant) -> Duration {
        let over = self.level(rule, now) - f64::from(rule.burst) + 1.0;
        if over <= 0.0 {
            return Duration::ZERO;
        }
        rule.forgive_every.mul_f64(over)
    }
}

impl Default for Failures {
    fn default() -> Self {
        Failures::new(PER_KEY, PER_ADDRESS)
    }
}

impl Failures {
    pub fn new(per_key: Rule, per_address: Rule) -> Self {
        Failures {
            inner: Mutex::default(),
            per_key,
            per_address,
            refused: AtomicU64::new(0),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before a check: `Err(wait)` when the key id or the address has
    /// failed too often lately (`wait` in whole seconds, at least one).
    pub fn admit(&self, key_id: Option<&str>, client: Option<IpAddr>) -> Result<(), Duration> {
        let now = Instant::now();
        let inner = self.inner();
        let mut wait = Duration::ZERO;
        if let Some(key) = key_id.and_then(|k| inner.keys.get(k)) {
            wait = wait.max(key.wait(self.per_key, now));
        }
        let known_good = key_id
            .and_then(|k| inner.good.get(k))
            .is_some_and(|at| now.duration_since(*at) < KNOWN_GOOD_FOR);
        if !known_good && let Some(address) = client.and_then(|c| inner.addresses.get(&block(c))) {
            wait = wait.max(address.wait(self.per_address, now));
        }
        if wait.is_zero() {
            return Ok(());
        }
        if self.refused.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(key_id, client = ?client, "failed key checks throttled");
        }
        Err(Duration::from_secs(
            wait.as_secs_f64().ceil().max(1.0) as u64
        ))
    }

    /// After a check that failed: the key had a wrong or revoked secret,
    /// or was no key at all.
    pub fn failed(&self, key_id: Option<&str>, client: Option<IpAddr>) {
        let now = Instant::now();
        let mut inner = self.inner();
        if let Some(key) = key_id {
            add(&mut inner.keys, key.to_owned(), self.per_key, now);
        }
        if let Some(client) = client {
            add(&mut inner.addresses, block(client), self.per_address, now);
        }
    }

    /// After a check that succeeded: the key's failures are forgiven, and
    /// it is known good for [`KNOWN_GOOD_FOR`].
    pub fn succeeded(&self, key_id: Option<&str>) {
        let Some(key) = key_id else {
            return;
        };
        let now = Instant::now();
        let mut inner = self.inner();
        inner.keys.remove(key);
        if !inner.good.contains_key(key) && inner.good.len() >= MAX_TRACKED {
            inner
                .good
                .retain(|_, at| now.duration_since(*at) < KNOWN_GOOD_FOR);
            if inner.good.len() >= MAX_TRACKED
                && let Some(oldest) = inner
                    .good
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(k, _)| k.clone())
            {
                inner.good.remove(&oldest);
            }
        }
        inner.good.insert(key.to_owned(), now);
    }

    /// Checks refused since the process started.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Entries held (key ids, addresses, known-good key ids), for tests.
    pub fn tracked(&self) -> (usize, usize, usize) {
        let inner = self.inner();
        (inner.keys.len(), inner.addresses.len(), inner.good.len())
    }
}

/// One more failure in `map`'s bucket for `id`, keeping the map within
/// [`MAX_TRACKED`].
fn add<K: Eq + Hash + Clone>(map: &mut HashMap<K, Bucket>, id: K, rule: Rule, now: Instant) {
    if !map.contains_key(&id) && map.len() >= MAX_TRACKED {
        map.retain(|_, b| b.level(rule, now) > 0.0);
        if map.len() >= MAX_TRACKED
            && let Some(emptiest) = map
                .iter()
                .min_by(|a, b| a.1.level(rule, now).total_cmp(&b.1.level(rule, now)))
                .map(|(k, _)| k.clone())
        {
            map.remove(&emptiest);
        }
    }
    let bucket = map.entry(id).or_insert(Bucket {
        level: 0.0,
        at: now,
    });
    bucket.level = bucket.level(rule, now) + 1.0;
    bucket.at = now;
}

/// The address a client is counted under: an IPv4 address as is (also
/// when mapped into IPv6), an IPv6 address by its /64.
fn block(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V4(_) => client,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(segments.into())
            }
        },
    }
}

/// The key id of a token shaped `dmbg_<env>_<keyid>_<secret>` (32
/// lowercase hex digits), without checking anything else; `None` for any
/// other text, which then counts against its address only.
pub fn key_id_of(token: &str) -> Option<&str> {
    let mut parts = token.splitn(4, '_');
    let (prefix, _env, key_id, _secret) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = key_id.len() == 32
        && key_id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (prefix == "dmbg" && hex).then_some(key_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    fn addr(text: &str) -> Option<IpAddr> {
        Some(text.parse().expect("an address"))
    }

    #[test]
    fn a_key_id_is_throttled_after_its_burst_and_forgiven_on_success() {
        let f = Failures::default();
        for _ in 0..PER_KEY.burst {
            assert_eq!(f.admit(Some(KEY), None), Ok(()));
            f.failed(Some(KEY), None);
        }
        let wait = f.admit(Some(KEY), None).expect_err("throttled");
        assert!(wait >= Duration::from_secs(1) && wait <= PER_KEY.forgive_every);
        // Another key id is not held back.
        assert_eq!(f.admit(Some(&KEY.replace('0', "1")), None), Ok(()));
        f.succeeded(Some(KEY));
        assert_eq!(f.admit(Some(KEY), None), Ok(()));
    }

    #[test]
    fn an_address_is_throttled_but_a_known_good_key_from_it_is_not() {
        let f = Failures::default();
        let client = addr("2001:db8::1");
        f.succeeded(Some(KEY));
        for i in 0..PER_ADDRESS.burst {
            f.failed(None, addr(&format!("2001:db8::{:x}", i + 2)));
        }
        // The whole /64 counts as one.
        assert!(f.admit(None, client).is_err());
        assert!(f.admit(Some(&KEY.replace('0', "2")), client).is_err());
        assert_eq!(f.admit(Some(KEY), client), Ok(()));
        assert_eq!(f.admit(None, addr("2001:db8:0:1::1")), Ok(()));
        assert_eq!(f.admit(None, addr("192.0.2.1")), Ok(()));
    }

    #[test]
    fn random_key_ids_do_not_grow_the_maps_past_their_bound() {
        let f = Failures::default();
        for i in 0..(MAX_TRACKED + 500) {
            let key = format!("{i:032x}");
            f.failed(
                Some(&key),
                addr(&format!("10.{}.{}.1", i / 256 % 256, i % 256)),
            );
        }
        let (keys, addresses, _) = f.tracked();
        assert!(keys <= MAX_TRACKED, "{keys}");
        assert!(addresses <= MAX_TRACKED, "{addresses}");
    }

    #[test]
    fn reads_key_ids_only_from_well_shaped_tokens() {
        assert_eq!(
            key_id_of(&format!("dmbg_test_{KEY}_s_e_c_r_e_t")),
            Some(KEY)
        );
        assert_eq!(key_id_of(&format!("dmbg_test_{KEY}")), None);
        assert_eq!(key_id_of("dmbg_test_XYZ_secret"), None);
        assert_eq!(key_id_of(&format!("oops_test_{KEY}_secret")), None);
    }
}
