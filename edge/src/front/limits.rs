//! Rate limits and quotas per key and per tenant (`crate::limits` holds the
//! rules and the counters).
//!
//! Inside authentication, because limits are counted per key and tenant;
//! outside everything that reads the body, so a caller over its limit costs
//! no more than its key check.

use super::answer::no_caller;
use super::authn::Caller;
use crate::limits::Limiter;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

/// The layer: one unit from each of the caller's rules, or the 429 of the
/// rule that is spent.
pub async fn layer(State(limiter): State<Arc<Limiter>>, request: Request, next: Next) -> Response {
    let Some(caller) = request.extensions().get::<Caller>() else {
        return no_caller();
    };
    if let Err(limited) = limiter.admit(&caller.principal).await {
        return limited.response();
    }
    next.run(request).await
}
