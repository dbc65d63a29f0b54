//! The scope check: the caller holds every scope the message needs (a
//! batch: the union of its members'), or is answered 403 with a challenge
//! naming them all.
//!
//! Inside the screen, which decided what the message is and so what it
//! needs; outside the batch, so a batch is refused whole before any member
//! runs.

use super::answer::no_caller;
use super::authn::{Authn, Caller};
use super::screen::{Batch, Message};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

/// The layer.
pub async fn layer(State(authn): State<Arc<Authn>>, request: Request, next: Next) -> Response {
    // A local caller (authentication off) holds every scope.
    if !authn.scoped() {
        return next.run(request).await;
    }
    let Some(caller) = request.extensions().get::<Caller>() else {
        return no_caller();
    };
    let extensions = request.extensions();
    let needs = match (extensions.get::<Message>(), extensions.get::<Batch>()) {
        (Some(message), _) => &message.scopes,
        (None, Some(batch)) => &batch.scopes,
        (None, None) => return next.run(request).await,
    };
    if let Some(missing) = needs.iter().find(|s| !caller.principal.has_scope(s)) {
        return authn.missing_scope(needs, missing);
    }
    next.run(request).await
}
