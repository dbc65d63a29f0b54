//! Rate limits and quotas per key and per tenant, enforced at the edge.
//!
//! A [`Rule`] is `N` requests per fixed window (`120/1m`, `50000/1d`); a
//! key and its tenant may each have several (a rate and a daily quota).
//! Every request to `/mcp` takes one unit from each rule of its key and of
//! its tenant before its body is read; when one is spent the request is
//! answered `429 Too Many Requests` with `Retry-After` (the seconds until
//! that window ends) and counted in `/metrics`.
//!
//! **One budget across edge replicas.** The counters live in the auth
//! service (`LeaseQuota`, table `quota_usage`), which every edge already
//! asks to verify keys and which runs on the deployment's PostgreSQL: all
//! edges, and all auth replicas on that database, draw on one budget per
//! window. The hot path stays local: an edge leases a batch of units
//! ([`Rule::batch`], a twentieth of the limit, at most 100) and spends them
//! from memory, so it asks auth about once per batch, not once per request.
//! The price is that units an edge has leased and not spent are lost to the
//! others until the window ends: at most `batch - 1` per edge and rule, so
//! a budget is never exceeded and may fall short by that much.
//!
//! Without keys (authentication off on loopback) the counters are kept in
//! this process ([`Store::Local`]).
//!
//! When auth cannot be asked, the edge admits a batch on its own and asks
//! again a second later (it fails open, and counts it): limits protect the
//! platform, they are not an authorization, and auth being down already
//! stops every caller whose key is not cached.

mod store;

pub use store::Store;

use crate::backend::Backend;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ithaca_kit::principal::Principal;
use std::collections::HashMap;
use std::fmt;
use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// At most `limit` requests per fixed `window` (aligned to the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub limit: u64,
    pub window: Duration,
}

/// A rule could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid rate limit {0:?}: expected N/PERIOD such as 120/1m, 10/s or 50000/1d \
     (N at least 1; PERIOD a count and s, m, h or d, from 1s to 31d)"
)]
pub struct RuleError(String);

/// The longest window a rule may have (the auth service's bound).
const MAX_WINDOW: Duration = Duration::from_secs(31 * 24 * 3600);

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(text: &str) -> Result<Self, RuleError> {
        let bad = || RuleError(text.to_owned());
        let (limit, period) = text.trim().split_once('/').ok_or_else(bad)?;
        let limit: u64 = limit.trim().parse().map_err(|_| bad())?;
        let period = period.trim();
        let unit_at = period.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (count, unit) = period.split_at(unit_at);
        let count: u64 = if count.is_empty() {
            1
        } else {
            count.parse().map_err(|_| bad())?
        };
        let seconds = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(bad()),
        };
        let window = Duration::from_secs(count.checked_mul(seconds).ok_or_else(bad)?);
        if limit == 0 || window.is_zero() || window > MAX_WINDOW {
            return Err(bad());
        }
        Ok(Rule { limit, window })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.window.as_secs();
        let (count, unit) = [(86_400, "d"), (3600, "h"), (60, "m")]
            .into_iter()
            .find(|(n, _)| secs.is_multiple_of(*n))
            .map_or((secs, "s"), |(n, u)| (secs / n, u));
        write!(f, "{}/{count}{unit}", self.limit)
    }
}

impl Rule {
    /// Units leased from the shared counter at a time: a twentieth of the
    /// limit, from 1 to 100. Larger batches mean fewer calls to auth and
    /// more units stranded on an edge when the window ends.
    pub fn batch(&self) -> u64 {
        (self.limit / 20).clamp(1, 100)
    }

    fn window_ms(&self) -> i64 {
        i64::try_from(self.window.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The limits of an edge: rules per key and per tenant. Every replica of
/// an edge should be given the same.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimits {
    pub per_key: Vec<Rule>,
    pub per_tenant: Vec<Rule>,
}

/// What a limit applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    Key,
    Tenant,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Tenant => "tenant",
        }
    }
}

/// A request over a limit: answered 429 with `Retry-After`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limited {
    pub scope: Scope,
    pub rule: Rule,
    /// Until the window ends.
    pub retry_after: Duration,
}

impl Limited {
    /// Whole seconds to wait, rounded up, at least one.
    pub fn retry_after_secs(&self) -> u64 {
        let d = self.retry_after;
        (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
    }

    /// The `429` answer.
    pub fn response(&self) -> Response {
        let secs = self.retry_after_secs();
        let text = format!(
            "rate limit exceeded: this {} may make {} requests per {}; retry after {secs} s\n",
            self.scope.as_str(),
            self.rule.limit,
            window_text(self.rule.window),
        );
        let mut response = (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            text,
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        response
    }
}

fn window_text(window: Duration) -> String {
    let rule = Rule { limit: 1, window };
    let text = rule.to_string();
    text.trim_start_matches("1/").to_owned()
}

/// Units of one rule for one key or tenant that this edge holds.
#[derive(Debug)]
struct Lease {
    /// Units leased and not spent yet.
    tokens: u64,
    /// When the window they belong to ends.
    resets_at: Instant,
    /// The shared budget had no more when last asked: refuse until the
    /// window ends instead of asking again.
    drained: bool,
}

/// Leases kept before those of ended windows are swept.
const LEASE_SWEEP_AT: usize = 10_000;

/// How long an edge that could not reach the shared counters admits a
/// batch on its own before asking again.
const FAIL_OPEN_FOR: Duration = Duration::from_secs(1);

/// The leases of one rule (scope and rule index), by key or tenant id.
type RuleLeases = HashMap<String, Arc<tokio::sync::Mutex<Lease>>>;

/// The limiter of one edge.
pub struct Limiter {
    limits: RateLimits,
    store: Store,
    /// One async lock per lease, so concurrent requests of one key wait
    /// for a single refill instead of each leasing a batch.
    leases: Mutex<HashMap<(Scope, usize), RuleLeases>>,
    refused_key: AtomicU64,
    refused_tenant: AtomicU64,
    /// Leases that could not be taken from the shared store (and were
    /// admitted locally instead).
    store_errors: AtomicU64,
}

impl Limiter {
    pub fn new(limits: RateLimits, store: Store) -> Self {
        Limiter {
            limits,
            store,
            leases: Mutex::new(HashMap::new()),
            refused_key: AtomicU64::new(0),
            refused_tenant: AtomicU64::new(0),
            store_errors: AtomicU64::new(0),
        }
    }

    /// Take one unit from every rule of `caller`'s tenant and key, or say
    /// which limit is spent. Callers without a key (local ones) are
    /// limited by their tenant's rules only.
    pub async fn admit(&self, caller: &Principal) -> Result<(), Limited> {
        let scopes = [
            (Scope::Tenant, caller.tenant_id(), &self.limits.per_tenant),
            (Scope::Key, caller.key_id(), &self.limits.per_key),
        ];
        for (scope, id, rules) in scopes {
            if id.is_empty() {
                continue;
            }
            for (index, rule) in rules.iter().enumerate() {
                if let Err(limited) = self.take(scope, id, index, rule).await {
                    let counter = match scope {
                        Scope::Key => &self.refused_key,
                        Scope::Tenant => &self.refused_tenant,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    return Err(limited);
                }
            }
        }
        Ok(())
    }

    async fn take(&self, scope: Scope, id: &str, index: usize, rule: &Rule) -> Result<(), Limited> {
        let cell = self.lease_of(scope, id, index);
        let mut lease = cell.lock().await;
        let now = Instant::now();
        if now >= lease.resets_at {
            // Units of an ended window are worth nothing in the next.
            lease.tokens = 0;
            lease.drained = false;
        }
        if lease.tokens > 0 {
            lease.tokens -= 1;
            return Ok(());
        }
        let limited = |resets_at: Instant| Limited {
            scope,
            rule: *rule,
            retry_after: resets_at.saturating_duration_since(now),
        };
        if lease.drained {
            return Err(limited(lease.resets_at));
        }
        let want = rule.batch();
        let subject = format!("{}:{id}", scope.as_str());
        match self.store.lease(&subject, rule, want).await {
            Ok(grant) => {
                lease.resets_at = now + grant.resets_in;
                lease.drained = grant.granted < want;
                if grant.granted == 0 {
                    return Err(limited(lease.resets_at));
                }
                lease.tokens = grant.granted - 1;
                Ok(())
            }
            Err(error) => {
                self.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    %error,
                    scope = scope.as_str(),
                    "the shared rate-limit counters are unavailable; admitting a batch locally"
                );
                lease.tokens = want - 1;
                lease.resets_at = now + FAIL_OPEN_FOR.min(rule.window);
                lease.drained = false;
                Ok(())
            }
        }
    }

    fn lease_of(&self, scope: Scope, id: &str, index: usize) -> Arc<tokio::sync::Mutex<Lease>> {
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        let of_rule = leases.entry((scope, index)).or_default();
        // The hot path: a known id, found without allocating.
        if let Some(lease) = of_rule.get(id) {
            return lease.clone();
        }
        if of_rule.len() >= LEASE_SWEEP_AT {
            // Leases of ended windows that no request holds are worth
            // nothing: the next request of their id starts afresh.
            let now = Instant::now();
            of_rule.retain(|_, lease| {
                Arc::strong_count(lease) > 1 || lease.try_lock().map_or(true, |l| l.resets_at > now)
            });
        }
        let lease = Arc::new(tokio::sync::Mutex::new(Lease {
            tokens: 0,
            resets_at: Instant::now(),
            drained: false,
        }));
        of_rule.insert(id.to_owned(), lease.clone());
        lease
    }

    /// The limiter's and the backends' metrics, in the Prometheus text
    /// format.
    pub fn render(&self, backends: &[Backend]) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP ithaca_edge_rate_limited_total Requests refused with 429 because a rate limit or quota was spent.\n\
             # TYPE ithaca_edge_rate_limited_total counter\n",
        );
        for (scope, n) in [
            (Scope::Key, &self.refused_key),
            (Scope::Tenant, &self.refused_tenant),
        ] {
            let _ = writeln!(
                out,
                "ithaca_edge_rate_limited_total{{scope=\"{}\"}} {}",
                scope.as_str(),
                n.load(Ordering::Relaxed)
            );
        }
        out.push_str(
            "# HELP ithaca_edge_rate_limit_store_errors_total Leases the shared counters could not grant (admitted locally).\n\
             # TYPE ithaca_edge_rate_limit_store_errors_total counter\n",
        );
        let _ = writeln!(
            out,
            "ithaca_edge_rate_limit_store_errors_total {}",
            self.store_errors.load(Ordering::Relaxed)
        );
        out.push_str(
            "# HELP ithaca_edge_backend_in_flight Calls in flight to each backend.\n\
             # TYPE ithaca_edge_backend_in_flight gauge\n",
        );
        for b in backends {
            let _ = writeln!(
                out,
                "ithaca_edge_backend_in_flight{{backend=\"{}\"}} {}",
                label(&b.url),
                b.in_flight()
            );
        }
        out.push_str(
            "# HELP ithaca_edge_backend_refused_total Calls refused because their backend had its maximum in flight.\n\
             # TYPE ithaca_edge_backend_refused_total counter\n",
        );
        for b in backends {
            let _ = writeln!(
                out,
                "ithaca_edge_backend_refused_total{{backend=\"{}\"}} {}",
                label(&b.url),
                b.refused()
            );
        }
        out
    }
}

/// A backend URL as a label value (configured by the operator, so the set
/// is bounded; escaped all the same).
fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests;
