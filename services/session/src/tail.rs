//! Live delivery of new trace events.
//!
//! The database is the only source of events; notifications only say "session
//! S has events up to seq N". A tail reads from the database after the last
//! seq it sent whenever it hears of something newer, so it can neither skip
//! nor repeat an event, even when notifications are lost, lag or arrive twice.
//!
//! Appends in this process publish directly. On PostgreSQL every append also
//! sends `NOTIFY` in its transaction, and a listener task forwards what other
//! replicas append.

use ithaca_kit::db::{Db, Pool};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

/// How many notifications may queue before slow tails are told they lagged
/// (and then catch up from the database).
const CAPACITY: usize = 4096;

/// Fan-out of "session S now has seq N".
#[derive(Clone, Debug)]
pub struct Notifier {
    tx: broadcast::Sender<(Arc<str>, i64)>,
}

impl Default for Notifier {
    fn default() -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        Notifier { tx }
    }
}

impl Notifier {
    pub fn publish(&self, session_id: &str, seq: i64) {
        // No subscribers is normal: nobody is watching.
        let _ = self.tx.send((Arc::from(session_id), seq));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<(Arc<str>, i64)> {
        self.tx.subscribe()
    }
}

/// On PostgreSQL, forward other replicas' appends into `notifier` until
/// `shutdown`. A no-op on SQLite, where only this process writes.
pub fn spawn_listener(db: &Db, notifier: Notifier, shutdown: CancellationToken) {
    let Pool::Postgres(pool) = db.pool() else {
        return;
    };
    let pool = pool.clone();
    let channel = crate::store::notify_channel(db.schema());
    tokio::spawn(async move {
        while !shutdown.is_cancelled() {
            let mut listener = match sqlx::postgres::PgListener::connect_with(&pool).await {
                Ok(l) => l,
                Err(err) => {
                    tracing::warn!(error = %err, "trace listener cannot connect; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if let Err(err) = listener.listen(&channel).await {
                tracing::warn!(error = %err, "trace listener cannot listen; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    received = listener.recv() => match received {
                        Ok(n) => {
                            let parsed = n
                                .payload()
                                .split_once(' ')
                                .and_then(|(sid, seq)| seq.parse().ok().map(|seq| (sid, seq)));
                            if let Some((sid, seq)) = parsed {
                                notifier.publish(sid, seq);
                            }
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "trace listener lost its connection; reconnecting");
                            break;
                        }
                    }
                }
            }
        }
    });
}
