//! Every service refuses calls without a valid principal assertion, and the
//! auth service answers every malformed token the same way.

use crate::common;

use ithaca_kit::principal::{InternalKey, METADATA_KEY, Principal};
use ithaca_proto::auth::v1 as pb;
use ithaca_proto::auth::v1::auth_service_client::AuthServiceClient;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use tonic::Request;
use tonic::metadata::AsciiMetadataValue;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

fn with_assertion<T>(message: T, assertion: &str) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert(
        METADATA_KEY,
        AsciiMetadataValue::try_from(assertion).expect("ascii"),
    );
    request
}

#[tokio::test]
async fn calls_without_a_valid_assertion_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let auth = common::start_auth(&common::sqlite_path(&dir, "auth"), "unused").await;
    let session = common::start_session(&common::sqlite_path(&dir, "session"), "unused").await;
    let channel = ithaca_kit::client::channel(&auth.url).expect("url");
    let mut raw = AuthServiceClient::new(channel.clone());
    let system = Principal::system("");

    let refused = [
        ("none", Request::new(pb::ListTenantsRequest {})),
        (
            "forged",
            with_assertion(
                pb::ListTenantsRequest {},
                &InternalKey::new(vec![9u8; 32])
                    .expect("key")
                    .mint(&system, 60),
            ),
        ),
        (
            "expired",
            with_assertion(pb::ListTenantsRequest {}, &common::key().mint(&system, -30)),
        ),
        (
            "garbage",
            with_assertion(pb::ListTenantsRequest {}, "v1.bm90.anNvbg"),
        ),
    ];
    for (case, request) in refused {
        let err = raw.list_tenants(request).await.expect_err(case);
        assert_eq!(err.code(), tonic::Code::Unauthenticated, "{case}: {err:?}");
    }
    let ok = raw
        .list_tenants(with_assertion(
            pb::ListTenantsRequest {},
            &common::key().mint(&system, 60),
        ))
        .await;
    assert!(ok.is_ok(), "a valid assertion passes: {ok:?}");

    // The session service applies the same rule.
    let mut raw_session =
        SessionServiceClient::new(ithaca_kit::client::channel(&session.url).expect("url"));
    let err = raw_session
        .get_current_session(spb::GetCurrentSessionRequest {})
        .await
        .expect_err("no assertion");
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    // Health needs no assertion, so probes work.
    let mut health = HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: ithaca_proto::service_names::AUTH.into(),
        })
        .await
        .expect("health")
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);

    auth.stop().await;
    session.stop().await;
}

#[tokio::test]
async fn every_malformed_token_is_unauthenticated_alike() {
    let dir = tempfile::tempdir().expect("tempdir");
    let auth = common::start_auth(&common::sqlite_path(&dir, "auth"), "unused").await;
    let mut client = common::auth_client(&auth.url, Principal::system(""));
    let tenant = client
        .create_tenant(pb::CreateTenantRequest { name: "t".into() })
        .await
        .expect("tenant")
        .into_inner();
    let create = |label: &str| pb::CreateKeyRequest {
        tenant_id: tenant.tenant_id.clone(),
        scopes: vec!["data:read".into()],
        actor: pb::Actor::Agent as i32,
        label: label.into(),
        env: String::new(),
    };
    let good = client
        .create_key(create("good"))
        .await
        .expect("key")
        .into_inner();
    let revoked = client
        .create_key(create("revoked"))
        .await
        .expect("key")
        .into_inner();
    let revoked_id = revoked.key.as_ref().expect("key").key_id.clone();
    client
        .revoke_key(pb::RevokeKeyRequest {
            tenant_id: tenant.tenant_id.clone(),
            key_id: revoked_id,
        })
        .await
        .expect("revoke");

    let token = good.token.clone();
    let parts: Vec<&str> = token.splitn(4, '_').collect();
    let (key_id, secret) = (parts[2], parts[3]);
    let mut wrong_secret = secret.to_owned();
    let last = wrong_secret.pop().expect("non-empty");
    wrong_secret.push(if last == 'A' { 'B' } else { 'A' });

    let cases: Vec<(&str, String)> = vec![
        ("empty", String::new()),
        ("wrong prefix", format!("dmbx_test_{key_id}_{secret}")),
        ("unknown env", format!("dmbg_moon_{key_id}_{secret}")),
        ("other env", format!("dmbg_prod_{key_id}_{secret}")),
        ("too few parts", format!("dmbg_test_{key_id}")),
        ("only prefix", "dmbg".to_owned()),
        (
            "unknown key id",
            format!("dmbg_test_{}_{secret}", uuid::Uuid::new_v4().simple()),
        ),
        ("wrong secret", format!("dmbg_test_{key_id}_{wrong_secret}")),
        ("revoked", revoked.token.clone()),
        ("non-ascii", format!("dmbg_test_{key_id}_{secret}ü")),
        (
            "10 KB long",
            format!("dmbg_test_{key_id}_{}", "a".repeat(10 * 1024)),
        ),
        ("bearer prefix left on", format!("Bearer {token}")),
        ("trailing space", format!("{token} ")),
        (
            "uppercase key id",
            format!("dmbg_test_{}_{secret}", key_id.to_uppercase()),
        ),
    ];
    for (case, bad) in cases {
        let err = client
            .verify_key(pb::VerifyKeyRequest { token: bad })
            .await
            .expect_err(case);
        assert_eq!(err.code(), tonic::Code::Unauthenticated, "{case}");
        assert_eq!(
            err.message(),
            "invalid api key",
            "{case}: the reason is not revealed"
        );
    }

    let ok = client
        .verify_key(pb::VerifyKeyRequest {
            token: good.token.clone(),
        })
        .await
        .expect("the good token verifies")
        .into_inner();
    assert_eq!(ok.tenant_id, tenant.tenant_id);
    assert_eq!(ok.scopes, vec!["data:read"]);
    assert_eq!(ok.actor, pb::Actor::Agent as i32);

    // Listing never carries a secret or hash.
    let listed = client
        .list_keys(pb::ListKeysRequest {
            tenant_id: tenant.tenant_id.clone(),
            include_revoked: true,
        })
        .await
        .expect("list")
        .into_inner();
    let text = format!("{listed:?}");
    assert!(!text.contains(secret), "no secret in listings");
    assert_eq!(listed.keys.len(), 2);
    auth.stop().await;
}

#[tokio::test]
async fn reflection_lists_every_service_without_an_assertion() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let dir = tempfile::tempdir().expect("tempdir");
    let session = common::start_session(&common::sqlite_path(&dir, "session"), "unused").await;
    let mut client =
        ServerReflectionClient::new(ithaca_kit::client::channel(&session.url).expect("url"));
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("reflection answers")
        .into_inner();
    let response = responses
        .message()
        .await
        .expect("stream")
        .expect("one response");
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("expected a service list, got {response:?}");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        ithaca_proto::service_names::SESSION,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    assert!(
        !names.contains(&ithaca_proto::service_names::AUTH),
        "only services this server answers are listed: {names:?}"
    );
    session.stop().await;
}
