//! Each layer of the front refuses what it owns on its own: every test
//! builds one layer around an inner service that counts the requests
//! reaching it, and shows that the layer answers its own bad input without
//! reaching inside, and lets good input through. No layer relies on
//! another having refused first (beyond what it reads from the extensions
//! an outer layer leaves, which the tests put there by hand).

use super::authn::{Authn, Caller};
use super::screen::{Batch, Message, Screen};
use super::*;
use crate::auth::Authenticator;
use crate::catalog::Catalog;
use crate::limits::{Limiter, RateLimits, Rule, Store};
use crate::relay::{Asks, owner_of};
use crate::revoked::Revoked;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ithaca_kit::principal::{InternalKey, Principal};
use serde_json::json;
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tower::{Layer, Service, ServiceExt};

/// An inner service that counts what reaches it and says, in headers,
/// what the layers outside left in the request's extensions.
#[derive(Clone, Default)]
struct Inner(Arc<AtomicUsize>);

impl Inner {
    fn reached(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    fn service(
        &self,
    ) -> impl Service<Request, Response = Response, Error = Infallible, Future: Send + 'static>
    + Clone
    + Send
    + Sync
    + 'static {
        let count = self.0.clone();
        tower::service_fn(move |request: Request| {
            count.fetch_add(1, Ordering::SeqCst);
            let mut response = StatusCode::OK.into_response();
            let h = response.headers_mut();
            if let Some(caller) = request.extensions().get::<Caller>() {
                h.insert("x-tenant", header_value(caller.principal.tenant_id()));
            }
            if let Some(message) = request.extensions().get::<Message>() {
                h.insert("x-method", header_value(&message.method));
            }
            if request
                .extensions()
                .get::<crate::mcp::CallerInfo>()
                .is_some()
            {
                h.insert("x-span", HeaderValue::from_static("yes"));
            }
            async move { Ok::<_, Infallible>(response) }
        })
    }
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).expect("a test value is a valid header")
}

/// Send `request` to `service` (a layer around an [`Inner`]).
async fn through<S>(service: S, request: Request) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    match service.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

fn request(method: Method, host: &str, body: &str) -> Request {
    let mut request = Request::new(Body::from(body.to_owned()));
    *request.method_mut() = method;
    request
        .headers_mut()
        .insert(header::HOST, header_value(host));
    request
}

fn post(body: &str) -> Request {
    request(Method::POST, "127.0.0.1:8080", body)
}

fn agent(scopes: &[&str]) -> Principal {
    Principal::local_agent("tenant-a", "agent-a", scopes.iter().copied())
}

fn with_caller(mut request: Request, principal: Principal) -> Request {
    request.extensions_mut().insert(Caller {
        principal,
        revoked: Revoked::default(),
    });
    request
}

fn core() -> Arc<Core> {
    let catalog = Catalog::from_pool(ithaca_proto::annotations::pool()).expect("catalog");
    let key = InternalKey::new(vec![7u8; 32]).expect("a long enough key");
    Arc::new(Core::new(catalog, HashMap::new(), key))
}

fn keys() -> Authn {
    let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
    let key = InternalKey::new(vec![7u8; 32]).expect("a long enough key");
    let auth = Authenticator::new(channel, key, Duration::from_secs(5));
    Authn::new(Callers::Keys(Box::new(auth)), &HttpOptions::default(), None)
}

#[tokio::test]
async fn origin_refuses_foreign_hosts_and_origins_alone() {
    let origins = Arc::new(origin::Origins::new(&HttpOptions::default()));
    let layer = || from_fn_with_state(origins.clone(), origin::layer);
    let inner = Inner::default();

    let foreign = request(Method::POST, "evil.example", "");
    assert_eq!(
        through(layer().layer(inner.service()), foreign)
            .await
            .status(),
        403
    );
    let mut cross = post("");
    cross
        .headers_mut()
        .insert(header::ORIGIN, header_value("http://evil.example"));
    assert_eq!(
        through(layer().layer(inner.service()), cross)
            .await
            .status(),
        403
    );
    let mut preflight = request(Method::OPTIONS, "127.0.0.1:8080", "");
    preflight
        .headers_mut()
        .insert(header::ORIGIN, header_value("http://evil.example"));
    assert_eq!(
        through(layer().layer(inner.service()), preflight)
            .await
            .status(),
        403
    );
    assert_eq!(inner.reached(), 0, "a refused request reached inside");

    assert_eq!(
        through(layer().layer(inner.service()), post(""))
            .await
            .status(),
        200
    );
    assert_eq!(inner.reached(), 1);
}

#[tokio::test]
async fn authn_refuses_a_missing_key_alone_and_names_the_caller_inside() {
    let inner = Inner::default();
    let layer = from_fn_with_state(Arc::new(keys()), authn::layer);
    let refused = through(layer.layer(inner.service()), post("")).await;
    assert_eq!(refused.status(), 401);
    assert!(refused.headers().contains_key(header::WWW_AUTHENTICATE));
    assert_eq!(inner.reached(), 0);

    let local = Authn::new(Callers::Local(agent(&[])), &HttpOptions::default(), None);
    let layer = from_fn_with_state(Arc::new(local), authn::layer);
    let passed = through(layer.layer(inner.service()), post("")).await;
    assert_eq!(passed.status(), 200);
    assert_eq!(passed.headers()["x-tenant"], "tenant-a");
    assert_eq!(inner.reached(), 1);
}

#[tokio::test]
async fn limits_refuse_a_spent_rule_alone() {
    let rules = RateLimits {
        per_key: Vec::new(),
        per_tenant: vec![Rule {
            limit: 1,
            window: Duration::from_secs(31 * 86_400),
        }],
    };
    let limiter = Arc::new(Limiter::new(rules, Store::local()));
    let layer = || from_fn_with_state(limiter.clone(), limits::layer);
    let inner = Inner::default();
    let first = with_caller(post(""), agent(&[]));
    assert_eq!(
        through(layer().layer(inner.service()), first)
            .await
            .status(),
        200
    );
    let second = with_caller(post(""), agent(&[]));
    let refused = through(layer().layer(inner.service()), second).await;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key(header::RETRY_AFTER));
    // Without a caller (a mis-assembled stack) nothing passes either.
    assert_eq!(
        through(layer().layer(inner.service()), post(""))
            .await
            .status(),
        500
    );
    assert_eq!(inner.reached(), 1);
}

#[tokio::test]
async fn screen_refuses_bodies_alone_and_leaves_the_parsed_message() {
    let screen = Arc::new(Screen {
        core: core(),
        body_limit: 200,
    });
    let layer = || from_fn_with_state(screen.clone(), screen::layer);
    let inner = Inner::default();
    for (body, status) in [
        ("not json", 400),
        (r#"{"jsonrpc":"2.0","id":1,"method":7}"#, 400),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
            200,
        ),
        (&"x".repeat(300), 413),
    ] {
        let response = through(layer().layer(inner.service()), post(body)).await;
        assert_eq!(response.status(), status, "{body}");
        // A 200 here is the screen's own refusal (invalid params), not inner.
        assert!(!response.headers().contains_key("x-method"), "{body}");
    }
    assert_eq!(inner.reached(), 0);

    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let passed = through(layer().layer(inner.service()), post(list)).await;
    assert_eq!(passed.headers()["x-method"], "tools/list");
    assert_eq!(inner.reached(), 1);
}

#[tokio::test]
async fn scopes_refuse_a_caller_without_them_alone() {
    let authn = Arc::new(keys());
    let layer = || from_fn_with_state(authn.clone(), scopes::layer);
    let inner = Inner::default();
    let message = |request: Request| {
        let mut request = request;
        request.extensions_mut().insert(Message {
            message: json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}),
            scopes: vec!["data:read".to_owned()],
            method: "resources/list".to_owned(),
        });
        request
    };
    let refused = through(
        layer().layer(inner.service()),
        message(with_caller(post(""), agent(&[]))),
    )
    .await;
    assert_eq!(refused.status(), 403);
    assert!(
        refused.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .is_ok_and(|c| c.contains("insufficient_scope") && c.contains("data:read"))
    );
    assert_eq!(inner.reached(), 0);

    let holder = with_caller(post(""), agent(&["data:read"]));
    assert_eq!(
        through(layer().layer(inner.service()), message(holder))
            .await
            .status(),
        200
    );
    assert_eq!(inner.reached(), 1);
}

#[tokio::test]
async fn batch_refuses_a_batch_of_a_later_revision_alone_and_serves_members() {
    let screen = Arc::new(Screen {
        core: core(),
        body_limit: 1024,
    });
    let layer = || from_fn_with_state(screen.clone(), batch::layer);
    let inner = Inner::default();
    let ping = |id: i64| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    let batch = |mut request: Request| {
        request.extensions_mut().insert(Batch {
            scopes: Vec::new(),
            members: vec![ping(1), ping(2)],
        });
        request
    };
    let mut later = batch(post(""));
    later.headers_mut().insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2025-06-18"),
    );
    assert_eq!(
        through(layer().layer(inner.service()), later)
            .await
            .status(),
        400
    );
    assert_eq!(inner.reached(), 0);

    // Each member reaches inside on its own, screened.
    let served = through(layer().layer(inner.service()), batch(post(""))).await;
    assert_eq!(served.status(), 200);
    assert_eq!(inner.reached(), 2);
}

#[tokio::test]
async fn forward_takes_an_awaited_answer_alone_and_passes_requests() {
    let asks = Arc::new(Asks::default());
    let forward = Arc::new(forward::Forward::new(
        asks.clone(),
        Arc::new(Metrics::default()),
    ));
    let layer = || from_fn_with_state(forward.clone(), forward::layer);
    let inner = Inner::default();
    let principal = agent(&[]);
    let (id, receiver) = asks
        .register(owner_of(&principal))
        .expect("room for one ask");
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"action": "accept"}});
    let mut request = with_caller(post(""), principal.clone());
    request.extensions_mut().insert(Message {
        message: answer.clone(),
        scopes: Vec::new(),
        method: "response".to_owned(),
    });
    assert_eq!(
        through(layer().layer(inner.service()), request)
            .await
            .status(),
        202
    );
    assert_eq!(receiver.await.ok(), Some(answer));
    assert_eq!(inner.reached(), 0);

    let mut request = with_caller(post(""), principal);
    request.extensions_mut().insert(Message {
        message: json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        scopes: Vec::new(),
        method: "ping".to_owned(),
    });
    assert_eq!(
        through(layer().layer(inner.service()), request)
            .await
            .status(),
        200
    );
    assert_eq!(inner.reached(), 1);
}

#[tokio::test]
async fn span_hands_the_handler_its_caller_and_counts_the_operation() {
    let metrics = Arc::new(Metrics::default());
    let layer = from_fn_with_state(metrics.clone(), span::layer);
    let inner = Inner::default();
    let mut request = with_caller(post(""), agent(&[]));
    request.extensions_mut().insert(Message {
        message: json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        scopes: Vec::new(),
        method: "tools/list".to_owned(),
    });
    let passed = through(layer.layer(inner.service()), request).await;
    assert_eq!(passed.headers()["x-span"], "yes");
    assert!(metrics.render().contains("mcp_method_name=\"tools/list\""));

    // Without a caller it refuses rather than serve an anonymous handler.
    let layer = from_fn_with_state(metrics.clone(), span::layer);
    assert_eq!(
        through(layer.layer(inner.service()), post(""))
            .await
            .status(),
        500
    );
    assert_eq!(inner.reached(), 1);
}
