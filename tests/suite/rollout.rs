//! A migration-safe rollout (issue 15, item 6; deploy/README.md):
//! `ithaca migrate <service>` applies a service's migrations and exits (the
//! init container), and a serving replica reports NOT_SERVING while the
//! database's migrations are not exactly its own, so a replica of the old
//! version leaves rotation once the new version has migrated.
//!
//! Waits are bounded by [`PATIENCE`], never measured.

use crate::common;

use ithaca_kit::shutdown::CancellationToken;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Long enough for a few schema checks (every 5 s) on a busy machine.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn migrate_applies_a_services_migrations_and_exits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = common::sqlite_path(&dir, "auth");
    let run = || {
        common::ithaca()
            .args(["migrate", "auth", "--database-url", &path])
            .output()
            .expect("run ithaca migrate")
    };
    let first = run();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(String::from_utf8_lossy(&first.stdout).contains("auth schema is current"));
    // A second run finds the schema current and changes nothing.
    assert!(run().status.success());

    // The edge has no database.
    let edge = common::ithaca()
        .args(["migrate", "edge", "--database-url", &path])
        .output()
        .expect("run ithaca migrate");
    assert!(!edge.status.success());
    assert!(String::from_utf8_lossy(&edge.stderr).contains("no database"));
}

async fn status(url: &str) -> Option<i32> {
    let channel = ithaca_kit::client::channel(url).expect("url");
    let mut health = HealthClient::new(channel);
    let reply = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: ithaca_proto::service_names::AUTH.to_owned(),
        })
        .await
        .ok()?;
    Some(reply.into_inner().status)
}

async fn wait_for(url: &str, wanted: ServingStatus) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = status(url).await;
        if now == Some(wanted as i32) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "health stayed {now:?}, expected {wanted:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stops_serving_while_the_schema_is_another_versions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = ithaca_auth::open_db(&common::sqlite_path(&dir, "auth"), "unused")
        .await
        .expect("open");
    let mut options = ithaca_auth::serve_options(db.clone(), common::key());
    options.schema = Some(db.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let shutdown = CancellationToken::new();
    tokio::spawn(ithaca_kit::server::serve(
        listener,
        options,
        shutdown.clone(),
    ));
    wait_for(&url, ServingStatus::Serving).await;

    // A newer version migrates: the database now has a migration this
    // binary does not know.
    let ithaca_kit::db::Pool::Sqlite(pool) = db.pool() else {
        panic!("a SQLite database");
    };
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99990101000000, 'a later version', TRUE, X'00', 0)",
    )
    .execute(pool)
    .await
    .expect("record a later migration");
    assert!(matches!(
        db.schema_state().await.expect("state"),
        ithaca_kit::db::SchemaState::Ahead { .. }
    ));
    wait_for(&url, ServingStatus::NotServing).await;

    // Rolled back (the later migration gone): serving again.
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = 99990101000000")
        .execute(pool)
        .await
        .expect("forget it");
    wait_for(&url, ServingStatus::Serving).await;
    shutdown.cancel();
}
