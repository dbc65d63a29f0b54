//! What ends a caller's long-lived work (a listen, a legacy subscription)
//! once its credentials stop verifying.

use std::sync::Arc;

/// A future, made on demand, that resolves once a caller's credentials stop
/// verifying (the HTTP layer re-checks them as often as a verified key may
/// be cached). Never resolves for a caller with nothing to re-check: stdio,
/// or authentication off.
#[derive(Clone, Default)]
pub struct Revoked(Option<Arc<RevokedFn>>);

type RevokedFn = dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync;

impl Revoked {
    pub fn new(
        watch: impl Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync + 'static,
    ) -> Self {
        Revoked(Some(Arc::new(watch)))
    }

    /// Resolves once the caller no longer verifies.
    pub fn wait(&self) -> futures::future::BoxFuture<'static, ()> {
        match &self.0 {
            Some(watch) => watch(),
            None => Box::pin(std::future::pending()),
        }
    }
}

impl std::fmt::Debug for Revoked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Revoked(re-checked)"
        } else {
            "Revoked(never)"
        })
    }
}
