//! A tower layer that turns a panic in a request handler into an INTERNAL
//! answer.
//!
//! Without it a handler that panics tears down the HTTP/2 stream: the caller
//! sees `h2 protocol error` instead of a gRPC status, and whatever the handler
//! had half done stays as it was. With it the caller gets INTERNAL with no
//! details (the panic message may name internals), the panic is logged once at
//! ERROR with the method, and the server goes on serving.

use futures::FutureExt;
use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// What the caller of a panicking handler is told.
pub const PANIC_MESSAGE: &str = "internal error";

/// Wraps a service in [`CatchPanic`].
#[derive(Clone, Copy, Debug, Default)]
pub struct CatchPanicLayer;

impl<S> Layer<S> for CatchPanicLayer {
    type Service = CatchPanic<S>;

    fn layer(&self, inner: S) -> CatchPanic<S> {
        CatchPanic { inner }
    }
}

/// A service whose panics become INTERNAL responses.
#[derive(Clone, Debug)]
pub struct CatchPanic<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, ResBody> Service<http::Request<B>> for CatchPanic<S>
where
    S: Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The gRPC method is the path: `/package.Service/Method`.
        let method = request.uri().path().to_owned();
        // A handler may panic while building its future as well as while it
        // runs; both are caught.
        let inner = &mut self.inner;
        let future = match std::panic::catch_unwind(AssertUnwindSafe(|| inner.call(request))) {
            Ok(future) => future,
            Err(payload) => {
                let response = panicked(&method, payload.as_ref());
                return Box::pin(async move { Ok(response) });
            }
        };
        Box::pin(async move {
            match AssertUnwindSafe(future).catch_unwind().await {
                Ok(result) => result,
                Err(payload) => Ok(panicked(&method, payload.as_ref())),
            }
        })
    }
}

/// Log the panic and build the INTERNAL answer.
fn panicked<B: Default>(method: &str, payload: &(dyn Any + Send)) -> http::Response<B> {
    tracing::error!(
        method,
        panic = panic_message(payload),
        "request handler panicked"
    );
    tonic::Status::internal(PANIC_MESSAGE).into_http()
}

/// The text a panic was raised with, when it has one.
pub fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(text) = payload.downcast_ref::<&'static str>() {
        text
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text
    } else {
        "a panic without a message"
    }
}
