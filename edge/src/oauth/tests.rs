//! The verifier against an issuer served on loopback by the test itself,
//! with keys it generates: every refusal the issue lists, and the key
//! refreshes.

use super::*;
use axum::Router;
use axum::extract::State;
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::ecdsa::signature::Signer;
use serde_json::json;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const RESOURCE: &str = "https://mcp.example/mcp";
const TENANT: &str = "0f5d2b9e-1c1a-4b8e-9a59-2f3e4d5c6b7a";

struct Known;

impl Tenants for Known {
    fn exists<'a>(&'a self, tenant_id: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move { Ok(tenant_id == TENANT) })
    }
}

#[derive(Default)]
struct Published {
    jwks: Mutex<Value>,
    jwks_gets: AtomicUsize,
    issuer: Mutex<String>,
}

/// A loopback identity provider with one P-256 key (`ec1`).
struct Idp {
    url: String,
    key: p256::ecdsa::SigningKey,
    published: Arc<Published>,
}

fn ec_jwk(key: &p256::ecdsa::SigningKey, kid: &str) -> Value {
    let point = key.verifying_key().to_encoded_point(false);
    json!({
        "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
        "x": URL_SAFE_NO_PAD.encode(point.x().expect("x")),
        "y": URL_SAFE_NO_PAD.encode(point.y().expect("y")),
    })
}

fn new_ec_key() -> p256::ecdsa::SigningKey {
    p256::ecdsa::SigningKey::random(&mut rand_core::OsRng)
}

impl Idp {
    async fn start() -> Idp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let key = new_ec_key();
        let published = Arc::new(Published::default());
        *published.jwks.lock().expect("lock") = json!({"keys": [ec_jwk(&key, "ec1")]});
        *published.issuer.lock().expect("lock") = url.clone();
        let app = Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                get(|State(p): State<Arc<Published>>| async move {
                    let issuer = p.issuer.lock().expect("lock").clone();
                    axum::Json(json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")}))
                }),
            )
            .route(
                "/jwks",
                get(|State(p): State<Arc<Published>>| async move {
                    p.jwks_gets.fetch_add(1, Ordering::SeqCst);
                    axum::Json(p.jwks.lock().expect("lock").clone())
                }),
            )
            .with_state(published.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Idp {
            url,
            key,
            published,
        }
    }

    fn verifier(&self) -> Verifier {
        let config = OAuthConfig {
            issuers: vec![self.url.clone()],
            tenant_claim: DEFAULT_TENANT_CLAIM.to_owned(),
            resource: RESOURCE.to_owned(),
        };
        Verifier::new(config, Arc::new(Known)).expect("config")
    }

    fn claims(&self) -> Value {
        let now = unix_now();
        json!({
            "iss": self.url, "sub": "user-1", "aud": RESOURCE, "client_id": "claude",
            "exp": now + 300, "iat": now, "nbf": now - 5,
            "scope": "data:read runs:write openid profile",
            "ithaca_tenant": TENANT,
        })
    }

    fn es256(&self, kid: &str, claims: &Value) -> String {
        sign_es256(&self.key, kid, claims)
    }

    fn jwks_gets(&self) -> usize {
        self.published.jwks_gets.load(Ordering::SeqCst)
    }
}

fn encode(header: &Value, claims: &Value) -> String {
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

fn sign_es256(key: &p256::ecdsa::SigningKey, kid: &str, claims: &Value) -> String {
    let input = encode(
        &json!({"alg": "ES256", "typ": "at+jwt", "kid": kid}),
        claims,
    );
    let signature: p256::ecdsa::Signature = key.sign(input.as_bytes());
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
}

fn refused(result: Result<Principal, TokenFailure>) -> String {
    match result {
        Err(TokenFailure::Invalid(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_valid_token_is_an_agent_of_its_tenant_with_known_scopes() {
    let idp = Idp::start().await;
    let verifier = idp.verifier();
    let mut claims = idp.claims();
    // Whatever the provider says, a token is never a person.
    claims["actor"] = json!("human");
    let principal = verifier
        .verify(&idp.es256("ec1", &claims))
        .await
        .expect("verified");
    assert_eq!(principal.tenant_id(), TENANT);
    assert_eq!(principal.actor(), ithaca_kit::principal::Actor::Agent);
    assert_eq!(principal.scopes(), ["data:read", "runs:write"]);
    let agent = agent_id(&idp.url, "user-1", "claude");
    assert_eq!(principal.agent(), agent);
    assert_eq!(principal.key_id(), agent);
    assert_eq!(agent.len(), 32);
    assert!(
        agent
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    // Another client of the same user is another agent; the same triple is
    // the same one.
    assert_ne!(agent, agent_id(&idp.url, "user-1", "cursor"));
    assert_eq!(agent, agent_id(&idp.url, "user-1", "claude"));
    assert_ne!(agent_id("a", "bc", ""), agent_id("ab", "c", ""));
}

/// An edit of a token's claims, one refusal case.
type Change = Box<dyn Fn(&mut Value)>;

#[tokio::test]
async fn claims_that_do_not_fit_are_refused() {
    let idp = Idp::start().await;
    let verifier = idp.verifier();
    let now = unix_now();
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "another audience",
            Box::new(|c| c["aud"] = json!("https://other.example/mcp")),
            "aud",
        ),
        (
            "audience list without us",
            Box::new(|c| c["aud"] = json!(["x", "y"])),
            "aud",
        ),
        (
            "expired",
            Box::new(move |c| c["exp"] = json!(now - 120)),
            "expired",
        ),
        (
            "no expiry",
            Box::new(|c| {
                c.as_object_mut().expect("object").remove("exp");
            }),
            "exp",
        ),
        (
            "not yet valid",
            Box::new(move |c| c["nbf"] = json!(now + 120)),
            "nbf",
        ),
        (
            "untrusted issuer",
            Box::new(|c| c["iss"] = json!("https://evil.example")),
            "issuer",
        ),
        ("no subject", Box::new(|c| c["sub"] = json!("")), "sub"),
        (
            "no tenant",
            Box::new(|c| {
                c.as_object_mut().expect("object").remove("ithaca_tenant");
            }),
            "ithaca_tenant",
        ),
        (
            "unknown tenant",
            Box::new(|c| c["ithaca_tenant"] = json!("9a9a9a9a-0000-4000-8000-000000000000")),
            "no such tenant",
        ),
    ];
    for (case, change, reason) in cases {
        let mut claims = idp.claims();
        change(&mut claims);
        let why = refused(verifier.verify(&idp.es256("ec1", &claims)).await);
        assert!(why.contains(reason), "{case}: {why}");
    }
    // Within the leeway is fine both ways.
    let mut claims = idp.claims();
    claims["exp"] = json!(now - 5);
    claims["nbf"] = json!(now + 5);
    verifier
        .verify(&idp.es256("ec1", &claims))
        .await
        .expect("within the leeway");
}

#[tokio::test]
async fn algorithm_confusion_is_refused() {
    use hmac::{Hmac, Mac};
    let idp = Idp::start().await;
    let verifier = idp.verifier();
    let claims = idp.claims();
    // `none`, with and without a signature.
    let unsigned = encode(&json!({"alg": "none", "kid": "ec1"}), &claims);
    for token in [format!("{unsigned}."), format!("{unsigned}.AAAA")] {
        assert!(refused(verifier.verify(&token).await).contains("\"none\""));
    }
    // HS256 keyed with the public key, as published and as SEC1 bytes.
    let public = idp.key.verifying_key().to_encoded_point(false);
    let jwk = ec_jwk(&idp.key, "ec1").to_string();
    for secret in [jwk.as_bytes(), public.as_bytes()] {
        let input = encode(&json!({"alg": "HS256", "kid": "ec1"}), &claims);
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).expect("any key size");
        mac.update(input.as_bytes());
        let token = format!(
            "{input}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        );
        assert!(refused(verifier.verify(&token).await).contains("HS256"));
    }
    // An ES256 key cannot check an RS256 signature, nor the reverse.
    let forged = encode(&json!({"alg": "RS256", "kid": "ec1"}), &claims);
    let why = refused(verifier.verify(&format!("{forged}.AAAA")).await);
    assert!(why.contains("no key"), "{why}");
    // A critical header extension this server does not know.
    let input = encode(
        &json!({"alg": "ES256", "kid": "ec1", "crit": ["exp"]}),
        &claims,
    );
    let signature: p256::ecdsa::Signature = idp.key.sign(input.as_bytes());
    let token = format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()));
    assert!(refused(verifier.verify(&token).await).contains("critical"));
    // A signature of other claims.
    let good = idp.es256("ec1", &claims);
    let (_, signature) = good.rsplit_once('.').expect("three parts");
    let mut other = claims.clone();
    other["ithaca_tenant"] = json!("another");
    let spliced = format!(
        "{}.{signature}",
        encode(
            &json!({"alg": "ES256", "typ": "at+jwt", "kid": "ec1"}),
            &other
        )
    );
    assert!(refused(verifier.verify(&spliced).await).contains("signature"));
}

#[tokio::test]
async fn an_unknown_kid_refreshes_the_keys_once_per_interval() {
    let idp = Idp::start().await;
    let verifier = idp.verifier();
    let claims = idp.claims();
    verifier
        .verify(&idp.es256("ec1", &claims))
        .await
        .expect("verified");
    assert_eq!(idp.jwks_gets(), 1);
    // A key the issuer never published: fetched again once, then refused.
    let stranger = new_ec_key();
    let why = refused(verifier.verify(&sign_es256(&stranger, "zz", &claims)).await);
    assert!(why.contains("no key"), "{why}");
    assert_eq!(idp.jwks_gets(), 2);
    // More made-up kids within the interval cost the issuer nothing.
    for kid in ["a", "b", "c"] {
        refused(verifier.verify(&sign_es256(&stranger, kid, &claims)).await);
    }
    assert_eq!(idp.jwks_gets(), 2);
    // The stranger's key under a known kid fails on the signature.
    let why = refused(
        verifier
            .verify(&sign_es256(&stranger, "ec1", &claims))
            .await,
    );
    assert!(why.contains("signature"), "{why}");
}

#[tokio::test]
async fn a_rotated_key_is_picked_up() {
    let idp = Idp::start().await;
    let mut verifier = idp.verifier();
    // The interval is what keeps a flood out; here it must not hide the
    // rotation the test makes right after the first fetch.
    let issuer = Arc::get_mut(&mut verifier.issuers[0]).expect("not shared yet");
    issuer.miss_interval = std::time::Duration::ZERO;
    let claims = idp.claims();
    verifier
        .verify(&idp.es256("ec1", &claims))
        .await
        .expect("verified");
    let next = new_ec_key();
    *idp.published.jwks.lock().expect("lock") =
        json!({"keys": [ec_jwk(&idp.key, "ec1"), ec_jwk(&next, "ec2")]});
    let principal = verifier
        .verify(&sign_es256(&next, "ec2", &claims))
        .await
        .expect("the rotated key verifies");
    assert_eq!(principal.tenant_id(), TENANT);
    assert_eq!(idp.jwks_gets(), 2);
}

#[tokio::test]
async fn rs256_and_ps256_tokens_verify_and_small_rsa_keys_do_not() {
    use rsa::signature::{RandomizedSigner, SignatureEncoding, Signer as _};
    use rsa::traits::PublicKeyParts;
    let idp = Idp::start().await;
    let verifier = idp.verifier();
    let rsa_jwk = |key: &rsa::RsaPrivateKey, kid: &str| {
        json!({
            "kty": "RSA", "kid": kid,
            "n": URL_SAFE_NO_PAD.encode(key.n().to_bytes_be()),
            "e": URL_SAFE_NO_PAD.encode(key.e().to_bytes_be()),
        })
    };
    let big = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 2048).expect("rsa key");
    let small = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 1024).expect("rsa key");
    *idp.published.jwks.lock().expect("lock") =
        json!({"keys": [rsa_jwk(&big, "r1"), rsa_jwk(&small, "r0")]});
    let claims = idp.claims();
    let rs256 = |key: &rsa::RsaPrivateKey, kid: &str| {
        let input = encode(&json!({"alg": "RS256", "kid": kid}), &claims);
        let signer = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key.clone());
        let signature = signer.sign(input.as_bytes()).to_bytes();
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature))
    };
    verifier
        .verify(&rs256(&big, "r1"))
        .await
        .expect("RS256 verifies");
    let why = refused(verifier.verify(&rs256(&small, "r0")).await);
    assert!(why.contains("no key"), "{why}");
    let input = encode(&json!({"alg": "PS256", "kid": "r1"}), &claims);
    let signer = rsa::pss::BlindedSigningKey::<sha2::Sha256>::new(big.clone());
    let signature = signer
        .sign_with_rng(&mut rand_core::OsRng, input.as_bytes())
        .to_bytes();
    let token = format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature));
    verifier.verify(&token).await.expect("PS256 verifies");
}

#[tokio::test]
async fn an_issuer_that_is_down_is_unavailable_then_retried() {
    let idp = Idp::start().await;
    // The metadata names another issuer: a mix-up, refused at load.
    *idp.published.issuer.lock().expect("lock") = "https://elsewhere.example".to_owned();
    let verifier = idp.verifier();
    let token = idp.es256("ec1", &idp.claims());
    match verifier.verify(&token).await {
        Err(TokenFailure::Unavailable(why)) => assert!(why.contains("another issuer"), "{why}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
    // Within the retry pause the issuer is not asked again.
    match verifier.verify(&token).await {
        Err(TokenFailure::Unavailable(why)) => assert!(why.contains("retrying"), "{why}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
    *idp.published.issuer.lock().expect("lock") = idp.url.clone();
    tokio::time::sleep(jwks::RETRY_AFTER).await;
    verifier
        .verify(&token)
        .await
        .expect("verified once the issuer is back");
}

#[test]
fn scopes_map_from_scope_or_scp() {
    let map = |v: Value| scopes(v.as_object().expect("object"));
    assert_eq!(
        map(json!({"scope": "openid data:read  approvals:decide x"})),
        ["data:read", "approvals:decide"]
    );
    assert_eq!(map(json!({"scp": "runs:write"})), ["runs:write"]);
    assert_eq!(map(json!({"scp": ["runs:cancel", "zzz"]})), ["runs:cancel"]);
    assert!(map(json!({"scope": 7})).is_empty());
    assert!(map(json!({})).is_empty());
}

#[test]
fn only_jwt_shaped_tokens_take_the_jwt_path() {
    assert!(looks_like_jwt("eyJhbGciOiJFUzI1NiJ9.eyJ9.c2ln"));
    assert!(!looks_like_jwt(
        "dmbg_test_0123456789abcdef0123456789abcdef_secret"
    ));
    assert!(!looks_like_jwt("eyJ.a.b.c"));
    assert!(!looks_like_jwt("eyJ.a+b.c"));
    assert!(!looks_like_jwt("opaque-token"));
}

#[test]
fn configuration_is_checked() {
    let config = |issuer: &str, claim: &str| OAuthConfig {
        issuers: vec![issuer.to_owned()],
        tenant_claim: claim.to_owned(),
        resource: RESOURCE.to_owned(),
    };
    assert!(Verifier::new(config("https://id.example", "t"), Arc::new(Known)).is_ok());
    assert!(Verifier::new(config("http://id.example", "t"), Arc::new(Known)).is_err());
    assert!(Verifier::new(config("https://id.example?x=1", "t"), Arc::new(Known)).is_err());
    assert!(Verifier::new(config("https://id.example", " "), Arc::new(Known)).is_err());
}
