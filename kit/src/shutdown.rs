//! One shutdown signal for a whole process.
//!
//! A [`CancellationToken`] is cancelled on SIGTERM or ctrl-c; servers stop
//! accepting, long-lived streams end, and in-flight unary calls finish.

pub use tokio_util::sync::CancellationToken;

/// A token that is cancelled when the process receives SIGTERM or ctrl-c.
pub fn on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received");
        trigger.cancel();
    });
    token
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM; ctrl-c only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
