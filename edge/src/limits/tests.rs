//! The limiter's own tests: rules, windows and leases.
use super::*;

#[test]
fn rules_read_and_print() {
    let rule: Rule = "120/1m".parse().expect("rule");
    assert_eq!(rule.limit, 120);
    assert_eq!(rule.window, Duration::from_secs(60));
    assert_eq!(rule.to_string(), "120/1m");
    assert_eq!("10/s".parse::<Rule>().expect("rule").to_string(), "10/1s");
    assert_eq!("5/90s".parse::<Rule>().expect("rule").to_string(), "5/90s");
    assert_eq!(
        "50000/1d".parse::<Rule>().expect("rule").window,
        Duration::from_secs(86_400)
    );
    for bad in [
        "", "10", "0/1m", "10/0s", "10/1w", "x/1m", "10/m1", "10/32d",
    ] {
        assert!(bad.parse::<Rule>().is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn batches_are_a_twentieth_within_bounds() {
    let rule = |limit| Rule {
        limit,
        window: Duration::from_secs(60),
    };
    assert_eq!(rule(5).batch(), 1);
    assert_eq!(rule(200).batch(), 10);
    assert_eq!(rule(1_000_000).batch(), 100);
}

#[tokio::test]
async fn a_local_budget_is_spent_then_refused_with_the_time_left() {
    let limits = RateLimits {
        per_key: vec![],
        per_tenant: vec!["3/1h".parse().expect("rule")],
    };
    let limiter = Limiter::new(limits, Store::local());
    let caller = Principal::local_agent("t1", "a", ["data:read"]);
    for _ in 0..3 {
        limiter.admit(&caller).await.expect("within the limit");
    }
    let limited = limiter.admit(&caller).await.expect_err("over the limit");
    assert_eq!(limited.scope, Scope::Tenant);
    assert!(limited.retry_after <= Duration::from_secs(3600));
    assert!(limited.retry_after_secs() >= 1);
    let other = Principal::local_agent("t2", "a", ["data:read"]);
    limiter
        .admit(&other)
        .await
        .expect("another tenant has its own budget");
    assert!(
        limiter
            .render(&[])
            .contains("ithaca_edge_rate_limited_total{scope=\"tenant\"} 1")
    );
}

/// What the limiter adds to a request whose units are already leased
/// (the hot path): printed, not asserted, since the machine is shared.
#[tokio::test]
async fn the_cost_of_an_admitted_request_is_printed() {
    let rule: Rule = "10000000/31d".parse().expect("rule");
    let limits = RateLimits {
        per_key: vec![rule],
        per_tenant: vec![rule],
    };
    let limiter = Limiter::new(limits, Store::local());
    let caller = Principal::verified(ithaca_kit::principal::VerifiedKey {
        human: false,
        tenant_id: "t".into(),
        key_id: "k".into(),
        scopes: vec!["data:read".into()],
    });
    const N: u32 = 200_000;
    let started = Instant::now();
    for _ in 0..N {
        limiter.admit(&caller).await.expect("within the limit");
    }
    let per = started.elapsed() / N;
    eprintln!(
        "limiter: {} ns per admitted request (one key rule and one tenant rule, \
         batches of {})",
        per.as_nanos(),
        rule.batch()
    );
}
