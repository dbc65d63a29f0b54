//! The built-in authorization server's records (the auth service's
//! `oauth_*` tables), driven through the domain service: one named test per
//! behaviour, each on SQLite and on PostgreSQL.

use crate::common;

use ithaca_auth::model::KeyActor;
use ithaca_auth::oauth::{self, CodeSpec, Exchange, OAuthConfig, Tokens};
use ithaca_auth::service::{AuthService, KeySpec};
use ithaca_auth::store::Store;
use ithaca_kit::db::Db;
use ithaca_kit::error::Code;
use ithaca_kit::principal::{Principal, VerifiedKey};

common::on_both_databases!(ithaca_auth::open_db, "oauth" =>
    a_code_becomes_agent_tokens_stored_only_as_hashes,
    a_reused_code_revokes_its_grant,
    an_expired_code_is_refused,
    a_code_is_bound_to_client_redirect_and_verifier,
    refresh_rotates_and_a_replay_revokes_the_grant,
    an_expired_access_token_does_not_verify,
    grants_are_listed_and_revoked_within_their_tenant,
    consent_never_grants_more_than_the_key_holds,
    unused_registrations_lapse,
    a_grant_answers_for_its_token_as_a_key_does,
    a_refresh_narrows_only_its_access_token,
    an_external_agent_answers_as_a_key_while_live,
);

const RESOURCE: &str = "http://127.0.0.1:8080/mcp";
const REDIRECT: &str = "http://127.0.0.1:4711/callback";
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

struct Fixture {
    svc: AuthService,
    store: Store,
    system: Principal,
    /// A person of tenant one (`data:read runs:write approvals:decide`).
    person: Principal,
    /// A person of tenant two.
    stranger: Principal,
    tenant: String,
    client_id: String,
}

async fn person(svc: &AuthService, tenant: &str, scopes: &[&str]) -> Principal {
    let created = svc
        .create_key(
            &Principal::system(""),
            KeySpec {
                tenant_id: tenant.to_owned(),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
                actor: Some(KeyActor::Human),
                label: "person".to_owned(),
                env: String::new(),
            },
        )
        .await
        .expect("human key");
    Principal::verified(VerifiedKey {
        tenant_id: tenant.to_owned(),
        key_id: created.row.key_id.to_string(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        human: true,
    })
}

async fn fixture_with(db: Db, config: OAuthConfig) -> Fixture {
    let svc = ithaca_auth::service(db.clone()).with_oauth(config);
    let system = Principal::system("");
    let one = svc.create_tenant(&system, "one").await.expect("tenant one");
    let two = svc.create_tenant(&system, "two").await.expect("tenant two");
    let person = person(
        &svc,
        one.tenant_id.as_str(),
        &["data:read", "runs:write", "approvals:decide"],
    )
    .await;
    let stranger = person_of(&svc, two.tenant_id.as_str()).await;
    let client = svc
        .register_client(&system, "Claude <b>", &[REDIRECT.to_owned()])
        .await
        .expect("register");
    Fixture {
        svc,
        store: Store::new(db),
        system,
        person,
        stranger,
        tenant: one.tenant_id.to_string(),
        client_id: client.client_id,
    }
}

async fn person_of(svc: &AuthService, tenant: &str) -> Principal {
    person(svc, tenant, &["data:read"]).await
}

async fn fixture(db: Db) -> Fixture {
    fixture_with(db, OAuthConfig::default()).await
}

fn spec(f: &Fixture, scopes: &[&str]) -> CodeSpec {
    CodeSpec {
        client_id: f.client_id.clone(),
        redirect_uri: REDIRECT.to_owned(),
        code_challenge: oauth::s256(VERIFIER),
        resource: RESOURCE.to_owned(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
    }
}

fn exchange(f: &Fixture, code: &str) -> Exchange {
    Exchange {
        code: code.to_owned(),
        client_id: f.client_id.clone(),
        redirect_uri: REDIRECT.to_owned(),
        code_verifier: VERIFIER.to_owned(),
        resource: RESOURCE.to_owned(),
    }
}

async fn code(f: &Fixture) -> String {
    f.svc
        .issue_code(&f.person, spec(f, &["data:read", "runs:write"]))
        .await
        .expect("consent issues a code")
        .code
}

async fn tokens(f: &Fixture) -> Tokens {
    let code = code(f).await;
    f.svc
        .exchange_code(&f.system, exchange(f, &code))
        .await
        .expect("exchange")
}

async fn verifies(f: &Fixture, token: &str) -> bool {
    f.svc.verify(&f.system, token).await.is_ok()
}

async fn a_code_becomes_agent_tokens_stored_only_as_hashes(db: Db) {
    let f = fixture(db).await;
    let code = code(&f).await;
    let t = f
        .svc
        .exchange_code(&f.system, exchange(&f, &code))
        .await
        .expect("exchange");
    assert!(
        t.access_token.starts_with("ithaca_at_"),
        "{}",
        t.access_token
    );
    assert!(t.refresh_token.starts_with("ithaca_rt_"));
    assert_eq!(t.expires_in_secs, 600);
    let v = f
        .svc
        .verify(&f.system, &t.access_token)
        .await
        .expect("verifies");
    assert_eq!(v.actor, KeyActor::Agent, "a token never acts as the person");
    assert_eq!(v.tenant_id.as_str(), f.tenant);
    assert_eq!(v.key_id.as_str(), t.grant_id, "its agent id is the grant");
    assert_eq!(v.scopes, vec!["data:read", "runs:write"]);
    assert_eq!(v.resource, RESOURCE);
    // A refresh token is no access token.
    assert!(!verifies(&f, &t.refresh_token).await);

    let stored = f.store.token_hashes().await.expect("read");
    assert_eq!(stored.len(), 3, "one code and two tokens: {stored:?}");
    for secret in [&code, &t.access_token, &t.refresh_token] {
        assert!(stored.contains(&oauth::hash(secret)));
        assert!(stored.iter().all(|h| !h.contains(secret.as_str())));
    }
}

async fn a_reused_code_revokes_its_grant(db: Db) {
    let f = fixture(db).await;
    let code = code(&f).await;
    let t = f
        .svc
        .exchange_code(&f.system, exchange(&f, &code))
        .await
        .expect("first exchange");
    assert!(verifies(&f, &t.access_token).await);
    let err = f
        .svc
        .exchange_code(&f.system, exchange(&f, &code))
        .await
        .expect_err("a code is single use");
    assert_eq!(err.code, Code::FailedPrecondition);
    assert!(err.message.contains("already used"), "{}", err.message);
    assert!(
        !verifies(&f, &t.access_token).await,
        "the grant's tokens are revoked"
    );
    let refresh = f
        .svc
        .refresh(&f.system, &t.refresh_token, &f.client_id, &[])
        .await;
    assert!(refresh.is_err(), "its refresh token too");
}

async fn an_expired_code_is_refused(db: Db) {
    let config = OAuthConfig {
        code_ttl_ms: 1,
        ..OAuthConfig::default()
    };
    let f = fixture_with(db, config).await;
    let code = code(&f).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let err = f
        .svc
        .exchange_code(&f.system, exchange(&f, &code))
        .await
        .expect_err("expired");
    assert!(err.message.contains("expired"), "{}", err.message);
}

async fn a_code_is_bound_to_client_redirect_and_verifier(db: Db) {
    let f = fixture(db).await;
    let other = f
        .svc
        .register_client(&f.system, "other", &[REDIRECT.to_owned()])
        .await
        .expect("register another");
    let code = code(&f).await;
    let cases: Vec<(Exchange, &str)> = vec![
        (
            Exchange {
                client_id: other.client_id.clone(),
                ..exchange(&f, &code)
            },
            "another client",
        ),
        (
            Exchange {
                redirect_uri: "http://127.0.0.1:4712/callback".to_owned(),
                ..exchange(&f, &code)
            },
            "redirect_uri",
        ),
        (
            Exchange {
                code_verifier: String::new(),
                ..exchange(&f, &code)
            },
            "code_verifier",
        ),
        (
            Exchange {
                code_verifier: format!("{VERIFIER}x"),
                ..exchange(&f, &code)
            },
            "does not match",
        ),
        (
            Exchange {
                resource: "https://elsewhere.example/mcp".to_owned(),
                ..exchange(&f, &code)
            },
            "resource",
        ),
    ];
    for (ex, why) in cases {
        let err = f.svc.exchange_code(&f.system, ex).await.expect_err(why);
        assert!(err.message.contains(why), "{why}: {}", err.message);
    }
    // None of the refusals spent the code for its rightful client.
    f.svc
        .exchange_code(&f.system, exchange(&f, &code))
        .await
        .expect("the right client still exchanges it");
    // A plain challenge (the verifier itself) is no S256 challenge.
    let plain = CodeSpec {
        code_challenge: "short-plain-challenge".to_owned(),
        ..spec(&f, &["data:read"])
    };
    let err = f.svc.issue_code(&f.person, plain).await.expect_err("plain");
    assert!(err.message.contains("code_challenge"), "{}", err.message);
}

async fn refresh_rotates_and_a_replay_revokes_the_grant(db: Db) {
    let f = fixture(db).await;
    let first = tokens(&f).await;
    let second = f
        .svc
        .refresh(&f.system, &first.refresh_token, &f.client_id, &[])
        .await
        .expect("refresh");
    assert_ne!(second.refresh_token, first.refresh_token, "rotated");
    assert_eq!(second.grant_id, first.grant_id);
    assert!(verifies(&f, &second.access_token).await);
    let err = f
        .svc
        .refresh(&f.system, &first.refresh_token, &f.client_id, &[])
        .await
        .expect_err("a rotated refresh token is refused");
    assert!(err.message.contains("grant is revoked"), "{}", err.message);
    assert!(!verifies(&f, &second.access_token).await);
    assert!(!verifies(&f, &first.access_token).await);
    assert!(
        f.svc
            .refresh(&f.system, &second.refresh_token, &f.client_id, &[])
            .await
            .is_err(),
        "the newest refresh token dies with the grant"
    );
}

async fn an_expired_access_token_does_not_verify(db: Db) {
    let config = OAuthConfig {
        access_ttl_ms: 1,
        ..OAuthConfig::default()
    };
    let f = fixture_with(db, config).await;
    let t = tokens(&f).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let err = f
        .svc
        .verify(&f.system, &t.access_token)
        .await
        .expect_err("expired");
    assert_eq!(err.code, Code::Unauthenticated);
    // The refresh token still works, and its new access token too, until it
    // expires as well.
    f.svc
        .refresh(&f.system, &t.refresh_token, &f.client_id, &[])
        .await
        .expect("refresh after expiry");
}

async fn grants_are_listed_and_revoked_within_their_tenant(db: Db) {
    let f = fixture(db).await;
    let t = tokens(&f).await;
    let grants = f.svc.list_grants(&f.person, "", false).await.expect("list");
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].row.grant_id, t.grant_id);
    assert_eq!(grants[0].client_name, "Claude <b>");
    assert_eq!(grants[0].row.scopes, "data:read runs:write");
    let theirs = f
        .svc
        .list_grants(&f.stranger, "", true)
        .await
        .expect("list");
    assert!(theirs.is_empty(), "another tenant sees none");
    let err = f
        .svc
        .revoke_grant(&f.stranger, &t.grant_id)
        .await
        .expect_err("another tenant cannot revoke");
    assert_eq!(err.code, Code::NotFound);
    assert!(verifies(&f, &t.access_token).await);
    let agent = common::agent(&f.tenant, &t.grant_id);
    assert!(f.svc.revoke_grant(&agent, &t.grant_id).await.is_err());
    let revoked = f
        .svc
        .revoke_grant(&f.person, &t.grant_id)
        .await
        .expect("revoke");
    assert!(revoked.row.revoked_at_ms.is_some());
    assert!(!verifies(&f, &t.access_token).await);
    assert!(
        f.svc
            .list_grants(&f.person, "", false)
            .await
            .expect("list")
            .is_empty()
    );
}

async fn consent_never_grants_more_than_the_key_holds(db: Db) {
    let f = fixture(db).await;
    let err = f
        .svc
        .issue_code(&f.person, spec(&f, &["approvals:decide"]))
        .await
        .expect_err("approvals:decide is never an app's");
    assert!(err.message.contains("approvals:decide"), "{}", err.message);
    let err = f
        .svc
        .issue_code(&f.person, spec(&f, &["filters:write"]))
        .await
        .expect_err("a scope the key lacks");
    assert_eq!(err.code, Code::PermissionDenied);
    let agent = common::agent(&f.tenant, &f.client_id);
    assert!(
        f.svc
            .issue_code(&agent, spec(&f, &["data:read"]))
            .await
            .is_err(),
        "only a person consents"
    );
    // The stranger's consent is for the stranger's tenant, whatever it asks.
    let code = f
        .svc
        .issue_code(&f.stranger, spec(&f, &["data:read"]))
        .await
        .expect("consent");
    let t = f
        .svc
        .exchange_code(&f.system, exchange(&f, &code.code))
        .await
        .expect("exchange");
    let v = f.svc.verify(&f.system, &t.access_token).await.expect("ok");
    assert_ne!(v.tenant_id.as_str(), f.tenant);
    assert_eq!(v.tenant_id.as_str(), f.stranger.tenant_id());
}

async fn unused_registrations_lapse(db: Db) {
    let config = OAuthConfig {
        registration_ttl_ms: 500,
        ..OAuthConfig::default()
    };
    let f = fixture_with(db, config).await;
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let err = f
        .svc
        .get_client(&f.system, &f.client_id)
        .await
        .expect_err("lapsed");
    assert_eq!(err.code, Code::NotFound);
    // A registration a person consented to is kept.
    let kept = f
        .svc
        .register_client(&f.system, "kept", &[REDIRECT.to_owned()])
        .await
        .expect("register");
    let spec = CodeSpec {
        client_id: kept.client_id.clone(),
        ..spec(&f, &["data:read"])
    };
    f.svc.issue_code(&f.person, spec).await.expect("consent");
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    f.svc
        .get_client(&f.system, &kept.client_id)
        .await
        .expect("consented registrations stay");
}

/// An approved call runs as its requester only while the requester's key
/// is good (the approvals service asks `GetKey`). A token's key id is its
/// grant, so the grant answers: an agent key of the tenant with the
/// grant's scopes, revoked when the grant is; unknown to another tenant.
async fn a_grant_answers_for_its_token_as_a_key_does(db: Db) {
    let f = fixture(db).await;
    let t = tokens(&f).await;
    let key = f
        .svc
        .get_key(&f.system, &f.tenant, &t.grant_id)
        .await
        .expect("the grant answers as a key");
    assert_eq!(key.key_id.as_str(), t.grant_id);
    assert_eq!(key.actor, KeyActor::Agent);
    assert_eq!(key.scopes, "data:read runs:write");
    assert!(key.revoked_at_ms.is_none());
    assert!(key.secret_hash.is_empty() && key.salt.is_empty());
    let elsewhere = f
        .svc
        .get_key(&f.system, f.stranger.tenant_id(), &t.grant_id)
        .await
        .expect_err("another tenant's grant is no key of this one");
    assert_eq!(elsewhere.code, Code::NotFound);
    f.svc
        .revoke_grant(&f.person, &t.grant_id)
        .await
        .expect("revoke");
    let key = f
        .svc
        .get_key(&f.system, &f.tenant, &t.grant_id)
        .await
        .expect("a revoked grant is still found");
    assert!(key.revoked_at_ms.is_some(), "and says it was revoked");
}

async fn a_refresh_narrows_only_its_access_token(db: Db) {
    let f = fixture(db).await;
    let t = tokens(&f).await;
    let wider = f
        .svc
        .refresh(
            &f.system,
            &t.refresh_token,
            &f.client_id,
            &["data:read".to_owned(), "approvals:decide".to_owned()],
        )
        .await
        .expect_err("a wider scope");
    assert!(wider.message.contains("invalid_scope"), "{}", wider.message);
    let narrow = f
        .svc
        .refresh(
            &f.system,
            &t.refresh_token,
            &f.client_id,
            &["runs:write".to_owned()],
        )
        .await
        .expect("a narrower scope");
    assert_eq!(narrow.scope, "runs:write");
    let verified = f
        .svc
        .verify(&f.system, &narrow.access_token)
        .await
        .expect("the narrowed token verifies");
    assert_eq!(verified.scopes, vec!["runs:write".to_owned()]);
    let full = f
        .svc
        .refresh(&f.system, &narrow.refresh_token, &f.client_id, &[])
        .await
        .expect("the refresh token kept the grant's scope");
    assert_eq!(full.scope, "data:read runs:write");
    // Stored as hashes, the narrowed ones too.
    let stored = f.store.token_hashes().await.expect("read");
    for secret in [
        &narrow.access_token,
        &narrow.refresh_token,
        &full.access_token,
    ] {
        assert!(!stored.contains(secret));
        assert!(stored.contains(&oauth::hash(secret)));
    }
}

async fn an_external_agent_answers_as_a_key_while_live(db: Db) {
    use ithaca_auth::oauth_external::ExternalAgent;
    let f = fixture(db).await;
    let agent_id = "0123456789abcdef0123456789abcdef";
    let now = ithaca_kit::clock::now_ms();
    let seen = |expires_at_ms: i64| ExternalAgent {
        tenant_id: f.tenant.clone(),
        agent_id: agent_id.to_owned(),
        issuer: "https://id.example".to_owned(),
        subject: "erin".to_owned(),
        client_id: "app".to_owned(),
        scopes: vec!["data:read".to_owned()],
        expires_at_ms,
    };
    // Unknown until an edge records it; only the system records.
    let unknown = f
        .svc
        .get_key(&f.system, &f.tenant, agent_id)
        .await
        .expect_err("unknown");
    assert_eq!(unknown.code, Code::NotFound);
    assert!(
        f.svc
            .record_external_agent(&f.person, seen(now + 60_000))
            .await
            .is_err()
    );
    // An expired token alone: found, and lapsed.
    let revoked = f
        .svc
        .record_external_agent(&f.system, seen(now - 1_000))
        .await
        .expect("record");
    assert!(!revoked);
    let key = f
        .svc
        .get_key(&f.system, &f.tenant, agent_id)
        .await
        .expect("found");
    assert_eq!(key.revoked_at_ms, Some(now - 1_000));
    assert_eq!(key.actor, KeyActor::Agent);
    // A newer token makes it live; an older one seen later changes nothing.
    f.svc
        .record_external_agent(&f.system, seen(now + 60_000))
        .await
        .expect("record");
    f.svc
        .record_external_agent(&f.system, seen(now - 5_000))
        .await
        .expect("record");
    let key = f
        .svc
        .get_key(&f.system, &f.tenant, agent_id)
        .await
        .expect("found");
    assert!(key.revoked_at_ms.is_none(), "{key:?}");
    // Another tenant's agent is no key of this one.
    let elsewhere = f
        .svc
        .get_key(&f.system, f.stranger.tenant_id(), agent_id)
        .await
        .expect_err("another tenant");
    assert_eq!(elsewhere.code, Code::NotFound);
    // Revoked here: GetKey says so, and the next record answers revoked.
    f.svc
        .revoke_key(&f.system, &f.tenant, agent_id)
        .await
        .expect("revoke the agent");
    let key = f
        .svc
        .get_key(&f.system, &f.tenant, agent_id)
        .await
        .expect("found");
    assert!(key.revoked_at_ms.is_some());
    assert!(
        f.svc
            .record_external_agent(&f.system, seen(now + 120_000))
            .await
            .expect("record")
    );
    let key = f
        .svc
        .get_key(&f.system, &f.tenant, agent_id)
        .await
        .expect("found");
    assert!(
        key.revoked_at_ms.is_some(),
        "a newer token does not undo it"
    );
}
