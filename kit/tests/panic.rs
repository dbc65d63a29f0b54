//! A handler that panics answers INTERNAL, with no details, and the server
//! keeps serving: the same connection carries the next calls.

use http::uri::PathAndQuery;
use ithaca_kit::server::{ServeOptions, serve};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::service::Routes;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// A gRPC service with two methods: `Panic` panics while it runs, `Fine`
/// answers NOT_FOUND (any proper status proves the call was served).
#[derive(Clone)]
struct Boom;

impl NamedService for Boom {
    const NAME: &'static str = "test.v1.Boom";
}

impl tower::Service<http::Request<Body>> for Boom {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let path = request.uri().path().to_owned();
        Box::pin(async move {
            tokio::task::yield_now().await;
            if path.ends_with("/Panic") {
                panic!("the handler broke an invariant: secret detail");
            }
            Ok(tonic::Status::not_found("fine").into_http())
        })
    }
}

async fn call(channel: tonic::transport::Channel, method: &'static str) -> tonic::Status {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    grpc.unary::<(), (), _>(
        tonic::Request::new(()),
        PathAndQuery::from_static(method),
        tonic_prost::ProstCodec::default(),
    )
    .await
    .expect_err("both methods answer with a status")
}

#[tokio::test]
async fn a_panicking_handler_answers_internal_and_the_server_keeps_serving() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve(
        listener,
        ServeOptions::new(vec![Boom::NAME], Routes::new(Boom)),
        shutdown.clone(),
    ));
    let channel = ithaca_kit::client::channel(&url).expect("url");

    for _ in 0..3 {
        let status = call(channel.clone(), "/test.v1.Boom/Panic").await;
        assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
        assert_eq!(status.message(), "internal error", "no details leak");
        // The same connection still serves the other methods.
        let fine = call(channel.clone(), "/test.v1.Boom/Fine").await;
        assert_eq!(
            (fine.code(), fine.message()),
            (tonic::Code::NotFound, "fine")
        );
    }
    let health = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: Boom::NAME.to_owned(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(health.status(), ServingStatus::Serving);

    shutdown.cancel();
    server.await.expect("join").expect("clean stop");
}
