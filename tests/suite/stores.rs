//! The auth, session and broker stores, driven through their domain
//! services: one named test per behaviour, each run on SQLite and on
//! PostgreSQL (as Quickwit runs one metastore suite on every backend).
//!
//! [`common::on_both_databases!`] turns each behaviour `b` (an `async fn b(db: Db)`)
//! into `b::sqlite`, on a fresh SQLite file, and `b::postgres`, on a fresh
//! schema of the database at `ITHACA_TEST_POSTGRES_URL` (skipped, loudly,
//! when it is not set). Every behaviour starts from an empty database.

use crate::common;

use ithaca_auth::model::KeyActor;
use ithaca_auth::service::{KeySpec, NewKey};
use ithaca_kit::db::Db;
use ithaca_kit::error::Code;
use ithaca_kit::principal::Principal;
use ithaca_kit::shutdown::CancellationToken;
use ithaca_proto::session::v1::EventType;
use serde_json::json;

fn human(tenant: &str) -> Principal {
    common::human(tenant, "person")
}

#[tokio::test]
async fn migrations_are_idempotent_on_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = common::sqlite_path(&dir, "session");
    for _ in 0..2 {
        let db = ithaca_session::open_db(&path, "unused")
            .await
            .expect("open twice");
        db.close().await;
    }
}

/// The session service on a fresh SQLite file, an agent to call it as, and
/// a session that agent opened (the SQLite log tests below watch the file
/// itself).
struct SqliteSession {
    _dir: tempfile::TempDir,
    path: String,
    db: Db,
    svc: ithaca_session::service::SessionService,
    alice: Principal,
    session_id: String,
}

impl SqliteSession {
    async fn open(title: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = common::sqlite_path(&dir, "session");
        Self::open_at(dir, path, title).await
    }

    /// The session service on the SQLite file at `path` (in `dir`), and a
    /// session opened in it.
    async fn open_at(dir: tempfile::TempDir, path: String, title: &str) -> Self {
        let db = ithaca_session::open_db(&path, "unused")
            .await
            .expect("open");
        let svc = ithaca_session::service(
            db.clone(),
            ithaca_session::Config::default(),
            CancellationToken::new(),
        );
        let alice = common::agent("tenant-a", "agent-a");
        let session_id = svc
            .session_context(&alice, title, None, None)
            .await
            .expect("open a session")
            .session_id
            .to_string();
        SqliteSession {
            _dir: dir,
            path,
            db,
            svc,
            alice,
            session_id,
        }
    }
}

/// A SQLite service's write-ahead log is copied back into its database by
/// a checkpointer of its own, off the writers' path: the database file
/// takes the new pages within seconds, though far fewer than the 1,000 log
/// pages after which SQLite's default would make a committing writer do it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_log_is_checkpointed_beside_the_writers() {
    let f = SqliteSession::open("checkpoints").await;
    let (db, svc, alice) = (&f.db, &f.svc, &f.alice);
    let size = || std::fs::metadata(&f.path).expect("database file").len();
    // The migrations' and the session's pages are far fewer than the
    // appends' below.
    let settled = size();
    let filler = "x".repeat(2_000);
    for n in 0..200 {
        svc.append(
            alice,
            &f.session_id,
            EventType::ToolCall,
            json!({"n": n, "filler": filler}),
        )
        .await
        .expect("append");
    }
    let grown = |now: u64| now >= settled + 200 * 2_000;
    let mut waited = 0;
    while !grown(size()) && waited < 100 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        waited += 1;
    }
    assert!(
        grown(size()),
        "the database file stayed at {} bytes ({settled} before 200 appends of 2 kB): \
         nothing checkpointed the log",
        size()
    );
    let (events, last) = svc.read(alice, &f.session_id, 0, 1000).await.expect("read");
    assert_eq!(events.len() as i64, last, "every event readable");
    db.close().await;
}

/// When a checkpoint has copied the whole write-ahead log, the next write
/// starts the log over, and that write syncs the log's header. The
/// database says so once, to the writer whose turn at the write gate comes
/// next (`Db::write_turn`), so the committer, which runs its statements on
/// the runtime, hands that one write to the pool's thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_that_copied_the_whole_log_is_reported_once() {
    let f = SqliteSession::open("log restart").await;
    let (db, svc, alice) = (&f.db, &f.svc, &f.alice);
    svc.append(alice, &f.session_id, EventType::ToolCall, json!({"n": 1}))
        .await
        .expect("append");
    // The checkpointer runs every 25 ms while there are writes, and
    // doubles its wait up to a second when there are none.
    let mut reported = false;
    for _ in 0..100 {
        if db.write_turn().await.is_some_and(|turn| turn.restarts_log) {
            reported = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(reported, "no checkpoint reported the whole log copied");
    assert!(
        !db.write_turn().await.is_some_and(|turn| turn.restarts_log),
        "reported twice for one checkpoint"
    );
    // Appends go on, numbered without a gap.
    let next = svc
        .append(alice, &f.session_id, EventType::ToolCall, json!({"n": 2}))
        .await
        .expect("append after the restart");
    let (events, last) = svc.read(alice, &f.session_id, 0, 1000).await.expect("read");
    assert_eq!(next.seq, last);
    assert_eq!(events.len() as i64, last, "seqs 1..{last} without a gap");
    db.close().await;
}

/// The committer writes on a SQLite connection of its own, behind the
/// write gate every writer of the process holds. A writer of another
/// process that holds the database makes an append wait a bounded time
/// (`inline::BUSY_TIMEOUT`, not the pool's 30 s) and then fail as
/// retryable; nothing of it is written, no seq is spent, and the next append
/// after the other writer lets go takes the next seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_blocked_by_another_process_fails_clearly_and_spends_no_seq() {
    use sqlx::Connection;
    let f = SqliteSession::open("a foreign writer").await;
    let (db, svc, alice, path) = (&f.db, &f.svc, &f.alice, &f.path);
    let before = svc
        .append(alice, &f.session_id, EventType::ToolCall, json!({"n": 1}))
        .await
        .expect("append")
        .seq;

    // Another process's writer: a connection outside this service's pool,
    // holding the write lock.
    let mut foreign = sqlx::SqliteConnection::connect(&format!("sqlite://{path}"))
        .await
        .expect("connect");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut foreign)
        .await
        .expect("take the write lock");
    let blocked = svc
        .append(alice, &f.session_id, EventType::ToolCall, json!({"n": 2}))
        .await
        .expect_err("the database is held");
    // Retryable, as a database that is away is; the lock itself is in the
    // service's log, not in the answer.
    assert_eq!(blocked.code, Code::Unavailable, "{blocked:?}");
    assert!(
        blocked.message.contains("retry later"),
        "{}",
        blocked.message
    );
    sqlx::query("ROLLBACK")
        .execute(&mut foreign)
        .await
        .expect("let go");
    foreign.close().await.expect("close");

    let after = svc
        .append(alice, &f.session_id, EventType::ToolCall, json!({"n": 3}))
        .await
        .expect("append after");
    assert_eq!(after.seq, before + 1, "the failed append spent no seq");
    let (events, _) = svc.read(alice, &f.session_id, 0, 1000).await.expect("read");
    assert!(
        events.iter().all(|e| !e.payload.contains("\"n\":2")),
        "the failed append was written: {events:?}"
    );
    db.close().await;
}

/// The write-ahead log starts over while writes never stop. A checkpoint
/// that runs only beside the writer can copy every frame but never end
/// the log (a new frame is always written before it finishes), so the
/// log grew by every page every commit wrote. The checkpointer's last pass
/// holds the writers back, and the next write starts the log from its
/// beginning: the checkpoint sequence number in the log's header (bytes
/// 12–15) counts those starts, about one every 200 ms while writes
/// arrive, where checkpoints beside the writer alone made one in about
/// half a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_log_starts_over_while_writes_never_stop() {
    let f = SqliteSession::open("log restarts").await;
    let (db, svc, alice, path) = (&f.db, &f.svc, &f.alice, &f.path);
    let wal = format!("{path}-wal");
    let starts = || -> u32 {
        use std::io::Read;
        let mut header = [0u8; 16];
        std::fs::File::open(&wal)
            .and_then(|mut f| f.read_exact(&mut header))
            .map_or(0, |()| {
                u32::from_be_bytes([header[12], header[13], header[14], header[15]])
            })
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..8 {
        let (svc, alice, id, stop) = (
            svc.clone(),
            alice.clone(),
            f.session_id.clone(),
            stop.clone(),
        );
        writers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                svc.append(&alice, &id, EventType::ToolCall, json!({"w": w, "n": n}))
                    .await
                    .expect("append");
                n += 1;
            }
            n
        }));
    }
    // Wait, while the appends go on, for the log to start over five times,
    // at most ten seconds. The count is the header's, so a start the
    // sampling missed still counts. Five take about a second here; a busy
    // machine (the whole suite beside it on two cores) once made it two
    // in two seconds, so the bound is wide. A log that never ends would
    // need two to three minutes for five.
    while std::fs::metadata(&wal).map_or(0, |m| m.len()) < 32 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let before = starts();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while starts().wrapping_sub(before) < 5 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let after = starts();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut appended = 0;
    for w in writers {
        appended += w.await.expect("writer");
    }
    assert!(
        after.wrapping_sub(before) >= 5,
        "the log started over {} times in 10 s of continuous appends ({appended} in all): \
         it grows by every page each commit writes",
        after.wrapping_sub(before)
    );
    // Nothing was lost or doubled across the log's starts: the events read
    // back page by page are numbered 1, 2, 3, … without a gap.
    let mut next = 1;
    loop {
        let (events, last) = svc
            .read(alice, &f.session_id, next - 1, 1000)
            .await
            .expect("read");
        for e in &events {
            assert_eq!(e.seq, next, "the events' seq has a gap");
            next += 1;
        }
        if events.is_empty() {
            assert_eq!(next - 1, last, "every event up to the last seq is readable");
            assert!(
                last >= appended as i64,
                "{last} events for {appended} appends"
            );
            break;
        }
    }
    db.close().await;
}

/// `PRAGMA page_size` of an open SQLite database.
async fn page_size(db: &Db) -> i64 {
    match db.pool() {
        ithaca_kit::db::Pool::Sqlite(pool) => sqlx::query_scalar("PRAGMA page_size")
            .fetch_one(pool)
            .await
            .expect("page_size"),
        ithaca_kit::db::Pool::Postgres(_) => panic!("a file path opened PostgreSQL"),
    }
}

/// A new session database is made with 1 KiB pages, so that each append
/// writes a third of the log bytes it wrote with SQLite's 4 KiB
/// (docs/perf/edge-rebuild.md, stop 51); the other services keep SQLite's
/// pages. A session
/// database made before, with 4 KiB pages, keeps them: it opens, takes
/// appends without a gap and reads back.
#[tokio::test]
async fn a_new_session_database_has_small_pages_and_an_old_one_keeps_its_own() {
    let fresh = SqliteSession::open("small pages").await;
    assert_eq!(
        page_size(&fresh.db).await,
        i64::from(ithaca_session::store::SESSION_PAGE_SIZE)
    );
    assert_eq!(ithaca_session::store::SESSION_PAGE_SIZE, 1024);
    fresh.db.close().await;

    let dir = tempfile::tempdir().expect("tempdir");
    let auth = ithaca_auth::open_db(&common::sqlite_path(&dir, "auth"), "unused")
        .await
        .expect("open auth");
    assert_eq!(page_size(&auth).await, 4096, "auth keeps SQLite's pages");
    auth.close().await;

    // A session file as a release before this one made it: 4 KiB pages.
    let path = common::sqlite_path(&dir, "old-session");
    {
        use sqlx::Connection;
        let made = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .page_size(4096)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
        let mut conn = sqlx::SqliteConnection::connect_with(&made)
            .await
            .expect("make the old file");
        sqlx::query("CREATE TABLE made_before (x INTEGER)")
            .execute(&mut conn)
            .await
            .expect("a first table fixes the page size");
        conn.close().await.expect("close");
    }
    let old = SqliteSession::open_at(dir, path, "old pages").await;
    assert_eq!(
        page_size(&old.db).await,
        4096,
        "a file keeps the pages it was made with"
    );
    for n in 0..50 {
        old.svc
            .append(
                &old.alice,
                &old.session_id,
                EventType::ToolCall,
                json!({ "n": n }),
            )
            .await
            .expect("append");
    }
    let (events, last) = old
        .svc
        .read(&old.alice, &old.session_id, 0, 1000)
        .await
        .expect("read");
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=last).collect::<Vec<_>>(), "gap-free");
    assert!(last >= 50, "{last} events for 50 appends");
    old.db.close().await;
}

/// A SQLite pool hands out connections without pinging them first: the
/// ping is a round trip to the connection's thread, and a file handle
/// cannot have hung up. A PostgreSQL pool still pings (a server can).
#[tokio::test]
async fn sqlite_connections_are_handed_out_without_a_ping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = ithaca_session::open_db(&common::sqlite_path(&dir, "session"), "unused")
        .await
        .expect("open");
    match db.pool() {
        ithaca_kit::db::Pool::Sqlite(pool) => assert!(
            !pool.options().get_test_before_acquire(),
            "the SQLite pool pings each connection it hands out"
        ),
        ithaca_kit::db::Pool::Postgres(_) => panic!("a file path opened PostgreSQL"),
    }
    db.close().await;
}

mod auth {
    use super::*;
    use ithaca_auth::service::AuthService;
    use ithaca_auth::store::{Store, TenantRow};

    common::on_both_databases!(ithaca_auth::open_db, "store" =>
        tenants_are_created_and_listed,
        keys_keep_only_a_salted_hash,
        a_token_verifies_and_records_last_use,
        tenants_do_not_see_each_others_keys,
        only_people_and_the_system_administer_keys,
        revoked_keys_no_longer_verify,
        bad_key_specs_name_the_field,
        console_sign_ins_end_at_sign_out_and_with_their_key,
        a_key_is_looked_up_by_id_within_its_tenant,
    );

    /// Two tenants and an agent key (`runs:write`, `data:read`) in the first.
    struct Fixture {
        svc: AuthService,
        store: Store,
        system: Principal,
        one: TenantRow,
        two: TenantRow,
        created: NewKey,
    }

    fn spec(tenant: &str, scopes: &[&str], actor: KeyActor) -> KeySpec {
        KeySpec {
            tenant_id: tenant.to_owned(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            actor: Some(actor),
            label: "bot".to_owned(),
            env: String::new(),
        }
    }

    async fn fixture(db: Db) -> Fixture {
        let svc = ithaca_auth::service(db.clone());
        let store = Store::new(db);
        let system = Principal::system("");
        let one = svc.create_tenant(&system, "one").await.expect("tenant one");
        let two = svc.create_tenant(&system, "two").await.expect("tenant two");
        let created = svc
            .create_key(
                &system,
                spec(
                    &one.tenant_id,
                    &["runs:write", "data:read"],
                    KeyActor::Agent,
                ),
            )
            .await
            .expect("create key");
        Fixture {
            svc,
            store,
            system,
            one,
            two,
            created,
        }
    }

    async fn tenants_are_created_and_listed(db: Db) {
        let f = fixture(db).await;
        let tenants = f.svc.list_tenants(&f.system).await.expect("list tenants");
        assert_eq!(tenants.len(), 2);
    }

    async fn keys_keep_only_a_salted_hash(db: Db) {
        let f = fixture(db).await;
        let key_id = f.created.row.key_id.clone();
        let prefix = format!("dmbg_test_{key_id}_");
        assert!(f.created.token.starts_with(&prefix), "{}", f.created.token);
        let secret = &f.created.token[prefix.len()..];
        assert!(secret.len() >= 43, "high-entropy secret");
        assert_eq!(key_id.len(), 32);

        // Only the salted hash is persisted.
        let row = f
            .store
            .find_key(&key_id)
            .await
            .expect("read")
            .expect("row exists");
        assert_eq!(row.secret_hash.len(), 64);
        assert!(!row.secret_hash.contains(secret) && !row.salt.contains(secret));
        assert_eq!(row.scopes, "data:read runs:write");
    }

    async fn a_token_verifies_and_records_last_use(db: Db) {
        let f = fixture(db).await;
        let key_id = f.created.row.key_id.clone();
        let verified = f
            .svc
            .verify(&f.system, &f.created.token)
            .await
            .expect("verifies");
        assert_eq!(verified.tenant_id, f.one.tenant_id);
        assert_eq!(verified.key_id, key_id);
        assert_eq!(verified.scopes, vec!["data:read", "runs:write"]);
        let row = f.store.find_key(&key_id).await.expect("read").expect("row");
        let first = row.last_used_at_ms.expect("verification records last use");
        // A use recorded long ago is rewritten by the next check.
        f.store
            .touch_last_used(&key_id, 1_000, -1_000_000_000_000_000)
            .await
            .expect("set an old last use");
        f.svc
            .verify(&f.system, &f.created.token)
            .await
            .expect("verifies again");
        let row = f.store.find_key(&key_id).await.expect("read").expect("row");
        assert!(
            row.last_used_at_ms.is_some_and(|at| at >= first),
            "a stale last use is rewritten: {:?}",
            row.last_used_at_ms
        );
    }

    async fn tenants_do_not_see_each_others_keys(db: Db) {
        let f = fixture(db).await;
        let key_id = f.created.row.key_id.clone();
        let listed = f
            .svc
            .list_keys(&f.system, &f.one.tenant_id, false)
            .await
            .expect("list");
        assert_eq!(listed.len(), 1);
        assert!(
            f.svc
                .list_keys(&f.system, &f.two.tenant_id, false)
                .await
                .expect("list")
                .is_empty()
        );
        let err = f
            .svc
            .revoke_key(&human(&f.two.tenant_id), &f.one.tenant_id, &key_id)
            .await
            .expect_err("other tenant");
        assert_eq!(err.code, Code::NotFound);
        let err = f
            .svc
            .revoke_key(&human(&f.two.tenant_id), "", &key_id)
            .await
            .expect_err("key of another tenant");
        assert_eq!(err.code, Code::NotFound);
    }

    async fn only_people_and_the_system_administer_keys(db: Db) {
        let f = fixture(db).await;
        let err = f
            .svc
            .list_keys(&common::agent(&f.one.tenant_id, "a"), "", false)
            .await
            .expect_err("agents cannot administer keys");
        assert_eq!(err.code, Code::PermissionDenied);
        let err = f
            .svc
            .verify(&human(&f.one.tenant_id), &f.created.token)
            .await
            .expect_err("only the system verifies");
        assert_eq!(err.code, Code::PermissionDenied);

        // A human manages keys of its own tenant.
        let own = f
            .svc
            .create_key(
                &human(&f.one.tenant_id),
                spec("", &["data:read"], KeyActor::Human),
            )
            .await
            .expect("human creates a key in its tenant");
        assert_eq!(own.row.tenant_id, f.one.tenant_id);
    }

    async fn revoked_keys_no_longer_verify(db: Db) {
        let f = fixture(db).await;
        let key_id = f.created.row.key_id.clone();
        let revoked = f
            .svc
            .revoke_key(&f.system, &f.one.tenant_id, &key_id)
            .await
            .expect("revoke");
        assert!(revoked.revoked_at_ms.is_some());
        let err = f
            .svc
            .verify(&f.system, &f.created.token)
            .await
            .expect_err("revoked");
        assert_eq!(err.code, Code::Unauthenticated);
        let active = f
            .svc
            .list_keys(&f.system, &f.one.tenant_id, false)
            .await
            .expect("list");
        assert!(active.iter().all(|k| k.key_id != key_id));
        let all = f
            .svc
            .list_keys(&f.system, &f.one.tenant_id, true)
            .await
            .expect("list");
        assert!(
            all.iter()
                .any(|k| k.key_id == key_id && k.revoked_at_ms.is_some())
        );
    }

    /// The principal the edge makes of a verified key.
    fn principal_of(key: &NewKey) -> Principal {
        Principal::verified(ithaca_kit::principal::VerifiedKey {
            tenant_id: key.row.tenant_id.to_string(),
            key_id: key.row.key_id.to_string(),
            scopes: key.row.scopes.split(' ').map(str::to_owned).collect(),
            human: key.row.actor == KeyActor::Human,
        })
    }

    /// Issue 28, item 10: a console sign-in is a record here. The token
    /// verifies with its sign-in only while the record is open: sign-out
    /// ends it, revoking the key ends all of the key's, and another key's
    /// record, an unknown id or a malformed one never pass.
    async fn console_sign_ins_end_at_sign_out_and_with_their_key(db: Db) {
        let f = fixture(db).await;
        let person_key = f
            .svc
            .create_key(
                &f.system,
                spec(&f.one.tenant_id, &["data:read"], KeyActor::Human),
            )
            .await
            .expect("human key");
        let person = principal_of(&person_key);
        let token = &person_key.token;
        let first = f.svc.open_sign_in(&person, 3600).await.expect("open");
        let second = f.svc.open_sign_in(&person, 3600).await.expect("open");
        assert_ne!(first.sign_in_id, second.sign_in_id);
        assert!(first.ended_at_ms.is_none());
        let verified = f
            .svc
            .verify_sign_in(&f.system, token, &first.sign_in_id)
            .await
            .expect("an open sign-in verifies");
        assert_eq!(verified.key_id, person_key.row.key_id);

        // Who may open one, and for how long.
        let agent = principal_of(&f.created);
        let err = f.svc.open_sign_in(&agent, 3600).await.expect_err("agent");
        assert_eq!(err.code, Code::PermissionDenied);
        for ttl in [0, 59, 86_401, -1] {
            let err = f.svc.open_sign_in(&person, ttl).await.expect_err("ttl");
            assert_eq!(err.code, Code::InvalidArgument, "{ttl}");
            assert!(err.message.starts_with("ttl_secs"), "{}", err.message);
        }
        let err = f
            .svc
            .verify_sign_in(&person, token, &first.sign_in_id)
            .await
            .expect_err("only the system verifies");
        assert_eq!(err.code, Code::PermissionDenied);

        // Another key's token with this sign-in, or junk ids: the one
        // refusal of every failed verification.
        let other_person = f
            .svc
            .create_key(
                &f.system,
                spec(&f.one.tenant_id, &["data:read"], KeyActor::Human),
            )
            .await
            .expect("human key");
        let long = "a".repeat(10_000);
        for (token, id) in [
            (other_person.token.as_str(), first.sign_in_id.as_str()),
            (token.as_str(), "0123456789abcdef0123456789abcdef"),
            (token.as_str(), ""),
            (token.as_str(), "not an id'; --"),
            (token.as_str(), long.as_str()),
        ] {
            let err = f
                .svc
                .verify_sign_in(&f.system, token, id)
                .await
                .expect_err("refused");
            assert_eq!(err.code, Code::Unauthenticated);
            assert_eq!(err.message, ithaca_auth::service::INVALID_KEY);
        }
        // Another person cannot end it.
        let err = f
            .svc
            .end_sign_in(&principal_of(&other_person), &first.sign_in_id)
            .await
            .expect_err("not theirs");
        assert_eq!(err.code, Code::NotFound);

        // Sign-out ends it (twice is fine); the other sign-in goes on.
        let ended = f
            .svc
            .end_sign_in(&person, &first.sign_in_id)
            .await
            .expect("end");
        assert!(ended.ended_at_ms.is_some());
        f.svc
            .end_sign_in(&person, &first.sign_in_id)
            .await
            .expect("end again");
        let err = f
            .svc
            .verify_sign_in(&f.system, token, &first.sign_in_id)
            .await
            .expect_err("ended");
        assert_eq!(err.code, Code::Unauthenticated);
        f.svc
            .verify_sign_in(&f.system, token, &second.sign_in_id)
            .await
            .expect("the other sign-in is open");

        // Revoking the key ends every sign-in of it, in the record too.
        f.svc
            .revoke_key(&f.system, &f.one.tenant_id, &person_key.row.key_id)
            .await
            .expect("revoke");
        let err = f
            .svc
            .verify_sign_in(&f.system, token, &second.sign_in_id)
            .await
            .expect_err("revoked");
        assert_eq!(err.code, Code::Unauthenticated);
        let row = f
            .store
            .find_sign_in(&second.sign_in_id)
            .await
            .expect("read")
            .expect("row");
        assert!(row.ended_at_ms.is_some(), "revocation ended it: {row:?}");
    }

    /// Issue 28, item 8: the approvals service asks whether a requester's
    /// key is still active.
    async fn a_key_is_looked_up_by_id_within_its_tenant(db: Db) {
        let f = fixture(db).await;
        let key_id = f.created.row.key_id.to_string();
        let found = f
            .svc
            .get_key(&f.system, &f.one.tenant_id, &key_id)
            .await
            .expect("found");
        assert!(found.revoked_at_ms.is_none());
        let err = f
            .svc
            .get_key(&f.system, &f.two.tenant_id, &key_id)
            .await
            .expect_err("another tenant's key");
        assert_eq!(err.code, Code::NotFound);
        let err = f
            .svc
            .get_key(&common::agent(&f.one.tenant_id, "a"), "", &key_id)
            .await
            .expect_err("agents may not");
        assert_eq!(err.code, Code::PermissionDenied);
        let err = f
            .svc
            .get_key(&f.system, &f.one.tenant_id, "nope")
            .await
            .expect_err("bad id");
        assert_eq!(err.code, Code::InvalidArgument);
        f.svc
            .revoke_key(&f.system, &f.one.tenant_id, &key_id)
            .await
            .expect("revoke");
        let revoked = f
            .svc
            .get_key(&f.system, &f.one.tenant_id, &key_id)
            .await
            .expect("still found");
        assert!(revoked.revoked_at_ms.is_some());
    }

    async fn bad_key_specs_name_the_field(db: Db) {
        let f = fixture(db).await;
        let one = &f.one.tenant_id;
        for (bad, field) in [
            (spec(one, &["root"], KeyActor::Agent), "scopes"),
            (spec(one, &[], KeyActor::Agent), "scopes"),
            (spec(one, &["approvals:decide"], KeyActor::Agent), "scopes"),
            (
                KeySpec {
                    env: "moon".into(),
                    ..spec(one, &["data:read"], KeyActor::Agent)
                },
                "env",
            ),
            (
                KeySpec {
                    actor: None,
                    ..spec(one, &["data:read"], KeyActor::Agent)
                },
                "actor",
            ),
            (spec("", &["data:read"], KeyActor::Agent), "tenant_id"),
        ] {
            let err = f
                .svc
                .create_key(&f.system, bad)
                .await
                .expect_err("bad input");
            assert_eq!(err.code, Code::InvalidArgument, "{}", err.message);
            assert!(
                err.message.starts_with(field),
                "{} names {field}",
                err.message
            );
        }
        let err = f
            .svc
            .create_key(
                &f.system,
                spec("no-such-tenant", &["data:read"], KeyActor::Agent),
            )
            .await
            .expect_err("unknown tenant");
        assert_eq!(err.code, Code::NotFound);
    }
}

mod session {
    use super::*;
    use ithaca_session::service::SessionService;
    use ithaca_session::store::SessionRow;

    common::on_both_databases!(ithaca_session::open_db, "store" =>
        there_is_no_current_session_before_session_context,
        session_context_opens_a_titled_session_with_its_prompt,
        the_current_session_belongs_to_tenant_and_agent,
        resuming_appends_the_prompt_and_continues_the_trace,
        another_tenant_sees_nothing,
        a_closed_session_takes_only_in_flight_results,
        concurrent_appends_keep_each_rule_and_no_gap,
        archived_sessions_stay_readable,
        bad_input_names_the_field,
        sessions_are_listed_newest_first_a_page_at_a_time,
        a_person_opens_a_session_on_a_subject_and_an_agent_joins_it,
        idle_sessions_close_and_old_ones_are_archived_with_their_trace_readable,
        agents_close_only_their_own_sessions_and_people_close_any,
        a_call_follows_the_current_session_another_replica_changed,
        no_index_of_sessions_holds_what_an_append_changes,
    );

    /// The `n` of each `tool_call` in `session`'s trace, in seq order.
    async fn calls_in(svc: &SessionService, session: &SessionRow) -> Vec<u64> {
        let (events, _) = svc
            .read(&alice(), &session.session_id, 0, 1000)
            .await
            .expect("read the trace");
        events
            .iter()
            .filter(|e| e.event_type == "tool_call")
            .map(|e| {
                let payload: serde_json::Value =
                    serde_json::from_str(&e.payload).expect("payload JSON");
                assert_eq!(payload["name"], "probe_tool", "{payload}");
                payload["arguments"]["n"].as_u64().expect("n")
            })
            .collect()
    }

    /// `BeginCall` remembers each agent's current session; the append it
    /// makes checks that session is still the current one. A second
    /// service on the same database (another replica) switches the agent
    /// to a new session, closes it, and resumes the first: each next call
    /// on the first service lands where the agent is now, or is refused,
    /// and never in the session it remembered.
    async fn a_call_follows_the_current_session_another_replica_changed(db: Db) {
        let (a, b) = (service(db.clone()), service(db));
        let alice = alice();
        let call = |svc: &SessionService, n: u64| {
            let (svc, alice) = (svc.clone(), alice.clone());
            async move {
                svc.begin_call(&alice, None, "probe_tool", format!("{{\"n\": {n}}}"), "")
                    .await
            }
        };
        let first = open(&a).await;
        for n in [1, 2] {
            let (session, _) = call(&a, n).await.expect("a call in the first session");
            assert_eq!(session.session_id, first.session_id);
        }
        let second = b
            .session_context(&alice, "another question", None, None)
            .await
            .expect("open a second session on the other replica");
        assert_ne!(second.session_id, first.session_id);
        let (session, event) = call(&a, 3).await.expect("a call after the switch");
        assert_eq!(
            session.session_id, second.session_id,
            "the call follows the switch"
        );
        b.close(&alice, None)
            .await
            .expect("close the second session");
        let refused = call(&a, 4).await.expect_err("no current session");
        assert_eq!(refused.domain, Some("NO_ACTIVE_SESSION"), "{refused:?}");
        b.session_context(
            &alice,
            "back to the first",
            None,
            Some(first.session_id.as_str()),
        )
        .await
        .expect("resume the first session on the other replica");
        let (session, _) = call(&a, 5).await.expect("a call after the resume");
        assert_eq!(session.session_id, first.session_id);
        assert_eq!(calls_in(&a, &first).await, vec![1, 2, 5]);
        assert_eq!(calls_in(&a, &second).await, vec![3]);
        let (events, _) = a
            .read(&alice, &second.session_id, 0, 1000)
            .await
            .expect("read the second trace");
        assert!(
            events
                .iter()
                .any(|e| e.seq == event.seq && e.event_type == "tool_call")
        );
    }

    const PROMPT: &str = "Research NVDA momentum\n\nPull prices, then backtest.";

    fn service(db: Db) -> SessionService {
        ithaca_session::service(
            db,
            ithaca_session::Config::default(),
            CancellationToken::new(),
        )
    }

    fn alice() -> Principal {
        common::agent("tenant-a", "agent-a")
    }

    /// Alice's session, opened with [`PROMPT`].
    async fn open(svc: &SessionService) -> SessionRow {
        svc.session_context(&alice(), PROMPT, None, None)
            .await
            .expect("open a session")
    }

    /// The console's list: newest first, a page at a time, filtered by
    /// status and agent, never another tenant's.
    async fn sessions_are_listed_newest_first_a_page_at_a_time(db: Db) {
        use ithaca_session::service::ListFilter;
        let svc = service(db);
        let alice = alice();
        let other_agent = common::agent("tenant-a", "agent-b");
        let bob = common::agent("tenant-b", "agent-a");
        let first = open(&svc).await;
        svc.close(&alice, None).await.expect("close");
        for n in 0..3 {
            svc.session_context(&alice, &format!("alice {n}"), None, None)
                .await
                .expect("open");
        }
        svc.session_context(&other_agent, "agent b", None, None)
            .await
            .expect("open");
        svc.session_context(&bob, "bob's", None, None)
            .await
            .expect("open");
        let everything = ListFilter {
            limit: 100,
            ..Default::default()
        };
        let (all, next) = svc.list(&alice, &everything).await.expect("list");
        assert_eq!((all.len(), next.as_str()), (5, ""));
        assert!(all.iter().all(|r| r.tenant_id == "tenant-a"));
        assert!(
            all.windows(2)
                .all(|w| (w[0].created_at_ms, w[0].session_id.as_str())
                    > (w[1].created_at_ms, w[1].session_id.as_str())),
            "newest first"
        );
        let mut seen = Vec::new();
        let mut token = String::new();
        loop {
            let page = ListFilter {
                limit: 2,
                page_token: &token,
                ..Default::default()
            };
            let (rows, next) = svc.list(&alice, &page).await.expect("page");
            assert!(rows.len() <= 2);
            seen.extend(rows.into_iter().map(|r| r.session_id.as_str().to_owned()));
            if next.is_empty() {
                break;
            }
            token = next;
        }
        let ids: Vec<String> = all
            .iter()
            .map(|r| r.session_id.as_str().to_owned())
            .collect();
        assert_eq!(seen, ids, "pages cover the list once, in order");
        let open_only = ListFilter {
            status: Some("open"),
            limit: 100,
            ..Default::default()
        };
        assert_eq!(svc.list(&alice, &open_only).await.expect("open").0.len(), 4);
        let closed = ListFilter {
            status: Some("closed"),
            agent_id: Some("agent-a"),
            ..Default::default()
        };
        let (rows, _) = svc.list(&alice, &closed).await.expect("closed");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].session_id, first.session_id);
        let by_b = ListFilter {
            agent_id: Some("agent-b"),
            ..Default::default()
        };
        assert_eq!(svc.list(&alice, &by_b).await.expect("agent b").0.len(), 1);
        assert_eq!(svc.list(&bob, &everything).await.expect("bob").0.len(), 1);
        let bad_status = ListFilter {
            status: Some("sleeping"),
            ..Default::default()
        };
        let err = svc.list(&alice, &bad_status).await.expect_err("bad status");
        assert!(err.message.starts_with("status"));
        let bad_token = ListFilter {
            page_token: "nope",
            ..Default::default()
        };
        let err = svc.list(&alice, &bad_token).await.expect_err("bad token");
        assert!(err.message.starts_with("page_token"));
    }

    async fn there_is_no_current_session_before_session_context(db: Db) {
        let svc = service(db);
        let err = svc.current(&alice()).await.expect_err("no session yet");
        assert_eq!(err.domain, Some("NO_ACTIVE_SESSION"));
    }

    async fn session_context_opens_a_titled_session_with_its_prompt(db: Db) {
        let svc = service(db);
        let s = open(&svc).await;
        assert_eq!(s.title, "Research NVDA momentum");
        assert_eq!(s.status, "open");
        assert_eq!(s.tenant_id, "tenant-a");
        assert!(uuid::Uuid::parse_str(&s.session_id).is_ok());
        let (events, last) = svc.read(&alice(), &s.session_id, 0, 0).await.expect("read");
        assert_eq!(last, 2);
        let kinds: Vec<_> = events
            .iter()
            .map(|e| (e.seq, e.event_type.as_str()))
            .collect();
        assert_eq!(kinds, vec![(1, "session_open"), (2, "reasoning")]);
        let payload: serde_json::Value = serde_json::from_str(&events[1].payload).expect("json");
        assert_eq!(payload["prompt"], PROMPT, "the prompt is stored verbatim");
    }

    async fn the_current_session_belongs_to_tenant_and_agent(db: Db) {
        let svc = service(db);
        let s = open(&svc).await;
        assert_eq!(
            svc.current(&alice()).await.expect("current").session_id,
            s.session_id
        );
        assert!(
            svc.current(&common::agent("tenant-a", "agent-b"))
                .await
                .is_err()
        );
        assert!(
            svc.current(&common::agent("tenant-b", "agent-a"))
                .await
                .is_err()
        );
    }

    async fn resuming_appends_the_prompt_and_continues_the_trace(db: Db) {
        let svc = service(db);
        let s = open(&svc).await;
        let other_agent = common::agent("tenant-a", "agent-b");
        let titled = svc
            .session_context(
                &other_agent,
                "Now compare with AMD.",
                Some("ignored on resume"),
                Some(&s.session_id),
            )
            .await
            .expect("resume");
        assert_eq!(titled.session_id, s.session_id);
        assert_eq!(titled.title, "Research NVDA momentum");
        assert_eq!(
            svc.current(&other_agent).await.expect("joined").session_id,
            s.session_id
        );
        let prompts = svc.prompts(&alice(), &s.session_id).await.expect("prompts");
        let texts: Vec<_> = prompts
            .iter()
            .map(|p| (p.position, p.text.as_str()))
            .collect();
        assert_eq!(texts, vec![(1, PROMPT), (2, "Now compare with AMD.")]);

        // Resuming without a prompt joins the session and adds nothing to
        // its prompts or its trace; opening a new one still needs a prompt.
        let third = common::agent("tenant-a", "agent-c");
        let joined = svc
            .session_context(&third, "", None, Some(&s.session_id))
            .await
            .expect("resume without a prompt");
        assert_eq!(joined.prompt_count, 2);
        assert_eq!(
            svc.current(&third).await.expect("joined").session_id,
            s.session_id
        );
        assert_eq!(
            svc.prompts(&alice(), &s.session_id)
                .await
                .expect("prompts")
                .len(),
            2
        );
        let err = svc
            .session_context(&third, " ", None, None)
            .await
            .expect_err("a new session needs a prompt");
        assert!(err.message.starts_with("prompt"), "{}", err.message);

        let e = svc
            .append(
                &alice(),
                &s.session_id,
                EventType::ToolCall,
                json!({"name": "get_price_history"}),
            )
            .await
            .expect("append");
        assert_eq!(e.seq, 4);
        let (page, _) = svc.read(&alice(), &s.session_id, 1, 2).await.expect("page");
        assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
    }

    async fn another_tenant_sees_nothing(db: Db) {
        let svc = service(db);
        let s = open(&svc).await;
        let bob = common::agent("tenant-b", "agent-a");
        for result in [
            svc.get(&bob, &s.session_id).await.map(|_| ()),
            svc.read(&bob, &s.session_id, 0, 10).await.map(|_| ()),
            svc.append(&bob, &s.session_id, EventType::ToolCall, json!({}))
                .await
                .map(|_| ()),
            svc.session_context(&bob, "hi", None, Some(&s.session_id))
                .await
                .map(|_| ()),
            svc.close(&bob, Some(&s.session_id)).await.map(|_| ()),
            svc.prompts(&bob, &s.session_id).await.map(|_| ()),
        ] {
            assert_eq!(result.expect_err("hidden").code, Code::NotFound);
        }
        assert!(svc.tail(&bob, &s.session_id, 0).await.is_err());
    }

    /// The sweeper: an idle open session closes with reason `idle_timeout`;
    /// a session closed longer than the retention is archived, its trace
    /// moved out of the hot table and still readable.
    async fn idle_sessions_close_and_old_ones_are_archived_with_their_trace_readable(db: Db) {
        let config = ithaca_session::Config {
            idle_timeout: std::time::Duration::from_secs(3600),
            archive_after: std::time::Duration::from_secs(7 * 24 * 3600),
            // Swept by hand below, as of chosen instants.
            sweep_every: std::time::Duration::ZERO,
            ..ithaca_session::Config::default()
        };
        let svc = ithaca_session::service(db.clone(), config, CancellationToken::new());
        let s = open(&svc).await;
        svc.session_context(&common::agent("tenant-a", "agent-b"), "another", None, None)
            .await
            .expect("open");
        let now = ithaca_kit::clock::now_ms();
        let hour = 3_600_000;
        // Nothing is idle yet.
        let none = svc.sweep(now + hour / 2).await.expect("sweep");
        assert_eq!(none, ithaca_session::service::Swept::default());
        // Past the idle timeout, both close.
        let later = svc.sweep(now + hour + 1000).await.expect("sweep");
        assert_eq!(later.closed, 2, "both were idle past the timeout");
        let closed = svc.get(&alice(), &s.session_id).await.expect("row");
        assert_eq!(closed.status, ithaca_session::model::Status::Closed);
        let (events, _) = svc
            .read(&alice(), &s.session_id, 0, 100)
            .await
            .expect("read");
        let last = events.last().expect("events");
        assert_eq!(last.event_type, "session_closed");
        let payload: serde_json::Value = serde_json::from_str(&last.payload).expect("json");
        assert_eq!(payload["reason"], "idle_timeout");
        assert!(
            svc.current(&alice()).await.is_err(),
            "no current session any more"
        );

        // A week after closing: archived, trace moved and readable.
        let archived = svc.sweep(now + 8 * 24 * hour).await.expect("sweep");
        assert_eq!(archived.archived, 2);
        let row = svc.get(&alice(), &s.session_id).await.expect("row");
        assert_eq!(row.status, ithaca_session::model::Status::Archived);
        let (again, last_seq) = svc
            .read(&alice(), &s.session_id, 0, 100)
            .await
            .expect("read");
        assert_eq!(again, events, "the same events, from the archive");
        assert_eq!(last_seq, events.len() as i64);
        let hot: i64 = ithaca_kit::with_pool!(db, pool => sqlx::query_scalar(
            "SELECT COUNT(*) FROM trace_events WHERE session_id = $1")
            .bind(s.session_id.as_str())
            .fetch_one(pool)
            .await)
        .expect("count");
        assert_eq!(hot, 0, "the hot table no longer holds them");
        // Sweeping again changes nothing.
        let idle = svc.sweep(now + 9 * 24 * hour).await.expect("sweep");
        assert_eq!(idle, ithaca_session::service::Swept::default());
    }

    async fn agents_close_only_their_own_sessions_and_people_close_any(db: Db) {
        let svc = service(db);
        let s = open(&svc).await;
        let other = common::agent("tenant-a", "agent-b");
        let err = svc
            .close(&other, Some(&s.session_id))
            .await
            .expect_err("another agent's");
        assert_eq!(err.code, Code::PermissionDenied);
        assert_eq!(err.domain, Some("HUMAN_REQUIRED"));
        // The other agent narrates in its own session only.
        assert!(
            svc.record_reasoning(&other, "thinking").await.is_err(),
            "no session yet"
        );
        let mine = svc
            .session_context(&other, "mine", None, None)
            .await
            .expect("open");
        let note = svc
            .record_reasoning(&other, "thinking")
            .await
            .expect("narrate");
        assert_eq!(
            (note.session_id.clone(), note.event_type.as_str()),
            (mine.session_id.clone(), "reasoning")
        );
        // Joining alice's session moves agent-b there, and says from where.
        let (joined, previous) = svc
            .open_noting_takeover(
                &other,
                &ithaca_session::service::OpenRequest {
                    prompt: "join",
                    session_id: Some(&s.session_id),
                    ..Default::default()
                },
            )
            .await
            .expect("join");
        assert_eq!(joined.session_id, s.session_id);
        assert_eq!(previous, Some(mine.session_id));
        // Having joined it, agent-b may close it; a person may close any.
        let person = common::human("tenant-a", "person-a");
        let other_session = svc
            .session_context(&common::agent("tenant-a", "agent-c"), "c", None, None)
            .await
            .expect("open");
        let closed = svc
            .close(&person, Some(&other_session.session_id))
            .await
            .expect("a person closes any");
        assert_eq!(closed.status, ithaca_session::model::Status::Closed);
        svc.close(&other, Some(&s.session_id))
            .await
            .expect("joined, so may close");
    }

    /// A broker serving on loopback (its own SQLite file) with one filter
    /// of tenant-a, which a session may be opened on: (url, filter id).
    async fn broker_with_a_filter(dir: &tempfile::TempDir) -> (String, String) {
        use ithaca_proto::broker::v1 as bpb;
        use ithaca_proto::broker::v1::filter_service_client::FilterServiceClient;
        let db = ithaca_broker::open_db(&common::sqlite_path(dir, "broker"), "unused")
            .await
            .expect("broker db");
        let url = common::serve_grpc(ithaca_broker::serve_options(db, common::key())).await;
        let client = |p: Principal| {
            FilterServiceClient::with_interceptor(
                ithaca_kit::client::channel(&url).expect("url"),
                ithaca_kit::client::Outbound::new(common::key(), p),
            )
        };
        let group = client(Principal::system("tenant-a"))
            .add_filter_group(bpb::AddFilterGroupRequest {
                tenant_id: "tenant-a".into(),
                name: "g".into(),
                stream_ids: vec!["ztf-public".into()],
            })
            .await
            .expect("group")
            .into_inner()
            .group_id;
        let writer = Principal::verified(ithaca_kit::principal::VerifiedKey {
            tenant_id: "tenant-a".into(),
            key_id: "person-a".into(),
            scopes: vec!["data:read".into(), "filters:write".into()],
            human: true,
        });
        let filter = client(writer)
            .post_filter(bpb::PostFilterRequest {
                name: "counterparts".into(),
                group_id: group,
                stream_id: "ztf-public".into(),
                ..Default::default()
            })
            .await
            .expect("filter")
            .into_inner()
            .filter_id;
        (url, filter)
    }

    /// Only a person sets a subject, and only one the broker knows in
    /// their tenant; the agent that joins by id works in it.
    async fn a_person_opens_a_session_on_a_subject_and_an_agent_joins_it(db: Db) {
        use ithaca_session::service::OpenRequest;
        let dir = tempfile::tempdir().expect("tempdir");
        let (broker, filter) = broker_with_a_filter(&dir).await;
        let svc = service(db.clone())
            .with_broker(&broker, common::key())
            .expect("broker url");
        let person = common::human("tenant-a", "person-a");
        let on_filter = OpenRequest {
            prompt: "Tighten the GRB counterpart filter.",
            subject_kind: Some("filter"),
            subject_id: Some(&filter),
            ..OpenRequest::default()
        };
        let opened = svc.open(&person, &on_filter).await.expect("a person may");
        assert_eq!(opened.subject_kind.as_deref(), Some("filter"));
        assert_eq!(opened.subject_id.as_deref(), Some(filter.as_str()));

        // Issue 28, item 11: the subject must exist for this person. Another
        // tenant's filter is as missing as no filter; a malformed id and
        // an unknown event are refused too, each naming the subject.
        for (who, kind, id, code) in [
            (
                common::human("tenant-b", "person-b"),
                "filter",
                filter.as_str(),
                Code::NotFound,
            ),
            (
                person.clone(),
                "filter",
                "not-a-filter",
                Code::InvalidArgument,
            ),
            (
                person.clone(),
                "filter",
                "0191d2a4-0000-7000-8000-000000000000",
                Code::NotFound,
            ),
            (person.clone(), "gcn_event", "GRB 990101A", Code::NotFound),
        ] {
            let request = OpenRequest {
                prompt: "p",
                subject_kind: Some(kind),
                subject_id: Some(id),
                ..OpenRequest::default()
            };
            let err = svc.open(&who, &request).await.expect_err("no such subject");
            assert_eq!(err.code, code, "{kind} {id}: {}", err.message);
            assert!(err.message.starts_with("subject_id"), "{}", err.message);
            assert!(err.message.contains(id), "{}", err.message);
        }
        // Without a broker to ask, no subject is taken on trust.
        let unchecked = service(db).open(&person, &on_filter).await;
        assert_eq!(
            unchecked.expect_err("unchecked").code,
            Code::Unavailable,
            "refused, not accepted"
        );

        // An agent may not open one, and says why.
        let err = svc.open(&alice(), &on_filter).await.expect_err("agent");
        assert_eq!(err.code, Code::PermissionDenied);
        assert!(err.message.contains("only a person"), "{}", err.message);

        // The agent joins by id and its current session carries the subject.
        svc.session_context(&alice(), "joining", None, Some(&opened.session_id))
            .await
            .expect("join");
        let current = svc.current(&alice()).await.expect("current");
        assert_eq!(current.session_id, opened.session_id);
        assert_eq!(current.subject_kind.as_deref(), Some("filter"));
        assert_eq!(current.subject_id.as_deref(), Some(filter.as_str()));

        // The sessions opened on one object (the console's filter page).
        open(&svc).await;
        fn on(id: &str) -> ithaca_session::service::ListFilter<'_> {
            ithaca_session::service::ListFilter {
                subject_kind: Some("filter"),
                subject_id: Some(id),
                ..Default::default()
            }
        }
        let (listed, _) = svc.list(&person, &on(&filter)).await.expect("list");
        let ids: Vec<_> = listed.iter().map(|r| r.session_id.clone()).collect();
        assert_eq!(ids, vec![opened.session_id.clone()]);
        let (none, _) = svc.list(&person, &on("flt_2")).await.expect("list");
        assert!(none.is_empty());

        // Bad subjects name the field; a subject cannot be added on resume.
        for (kind, id, field) in [
            (Some("strategy"), Some("x"), "subject_kind"),
            (Some("filter"), None, "subject_id"),
            (None, Some("flt_1"), "subject_kind"),
            (Some("filter"), Some("bad\u{0}id"), "subject_id"),
        ] {
            let bad = OpenRequest {
                prompt: "p",
                subject_kind: kind,
                subject_id: id,
                ..OpenRequest::default()
            };
            let err = svc.open(&person, &bad).await.expect_err("bad subject");
            assert_eq!(err.code, Code::InvalidArgument);
            assert!(err.message.starts_with(field), "{}", err.message);
        }
        let resume_with_subject = OpenRequest {
            session_id: Some(&opened.session_id),
            ..on_filter
        };
        let err = svc
            .open(&person, &resume_with_subject)
            .await
            .expect_err("resume");
        assert_eq!(err.code, Code::InvalidArgument);
    }

    /// Closing: no new tool calls, in-flight results still land (grace).
    async fn a_closed_session_takes_only_in_flight_results(db: Db) {
        let svc = service(db);
        let s = open(&svc).await;
        let alice = alice();
        let closed = svc.close(&alice, None).await.expect("close current");
        assert_eq!(closed.status, "closed");
        assert!(svc.current(&alice).await.is_err());
        let err = svc
            .append(&alice, &s.session_id, EventType::ToolCall, json!({}))
            .await
            .expect_err("closed");
        assert_eq!(
            (err.code, err.domain),
            (Code::FailedPrecondition, Some("SESSION_NOT_OPEN"))
        );
        let late = svc
            .append(
                &alice,
                &s.session_id,
                EventType::ToolResult,
                json!({"outcome": "ok"}),
            )
            .await
            .expect("an in-flight result still lands");
        // After session_open, reasoning and session_closed, with no gap left
        // by the refusal.
        assert_eq!(late.seq, 4);
        let (events, _) = svc.read(&alice, &s.session_id, 0, 10).await.expect("read");
        let kinds: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(
            kinds,
            ["session_open", "reasoning", "session_closed", "tool_result"]
        );
        let err = svc
            .session_context(&alice, "again", None, Some(&s.session_id))
            .await
            .expect_err("closed sessions are not resumed");
        assert_eq!(err.code, Code::FailedPrecondition);
    }

    /// Appends that arrive together are committed together, a run of one
    /// session in one reservation of seqs; each append still gets its own
    /// rule. Into a closed session, in-flight results land and new calls do
    /// not; another tenant's appends to it are refused; an open session
    /// takes more appends than one batch or one insert holds, with no gap.
    async fn concurrent_appends_keep_each_rule_and_no_gap(db: Db) {
        const MIXED: usize = 40;
        const MANY: usize = 300;
        let svc = service(db);
        let alice = alice();
        let closed = open(&svc).await;
        svc.close(&alice, None).await.expect("close");
        let busy = svc
            .session_context(&alice, "the busy one", None, None)
            .await
            .expect("open another");
        let bob = common::agent("tenant-b", "agent-a");
        let mut appends = tokio::task::JoinSet::new();
        for n in 0..MIXED.max(MANY) {
            let mut send = |who: &Principal, session: &SessionRow, kind: EventType, tag: &str| {
                let (svc, who, id) = (svc.clone(), who.clone(), session.session_id.clone());
                let tag = tag.to_owned();
                appends.spawn(async move {
                    let payload = json!({"n": n, "tag": &tag});
                    (tag, n, svc.append(&who, &id, kind, payload).await)
                });
            };
            if n < MIXED {
                send(&alice, &closed, EventType::ToolCall, "late call");
                send(&alice, &closed, EventType::ToolResult, "late result");
                send(&bob, &closed, EventType::ToolResult, "foreign");
            }
            if n < MANY {
                send(&alice, &busy, EventType::ToolCall, "busy");
            }
        }
        let mut landed: std::collections::BTreeMap<String, Vec<usize>> = Default::default();
        while let Some(joined) = appends.join_next().await {
            let (tag, n, outcome) = joined.expect("append task");
            match (tag.as_str(), outcome) {
                ("late result" | "busy", Ok(_)) => landed.entry(tag).or_default().push(n),
                ("late call", Err(e)) => assert_eq!(e.domain, Some("SESSION_NOT_OPEN"), "{e:?}"),
                ("foreign", Err(e)) => assert_eq!(e.code, Code::NotFound, "{e:?}"),
                (tag, outcome) => panic!("{tag} #{n}: unexpected {outcome:?}"),
            }
        }
        for (session, tag, count, first_seq) in
            [(&closed, "late result", MIXED, 4), (&busy, "busy", MANY, 3)]
        {
            let mut events = Vec::new();
            let mut after = 0;
            loop {
                let (page, last) = svc
                    .read(&alice, &session.session_id, after, 100)
                    .await
                    .expect("read");
                after = page.last().map_or(after, |e| e.seq);
                events.extend(page);
                if after >= last {
                    break;
                }
            }
            let tail: Vec<_> = events.iter().filter(|e| e.seq >= first_seq).collect();
            let seqs: Vec<i64> = tail.iter().map(|e| e.seq).collect();
            let expected: Vec<i64> = (first_seq..first_seq + count as i64).collect();
            assert_eq!(seqs, expected, "{tag}: every seq once, no gap");
            let mut ns: Vec<usize> = tail
                .iter()
                .map(|e| {
                    let payload: serde_json::Value =
                        serde_json::from_str(&e.payload).expect("payload JSON");
                    assert_eq!(payload["tag"], tag, "{e:?}");
                    payload["n"].as_u64().expect("n") as usize
                })
                .collect();
            ns.sort_unstable();
            assert_eq!(
                ns,
                (0..count).collect::<Vec<_>>(),
                "{tag}: each append once"
            );
            assert_eq!(landed[tag].len(), count, "{tag}: each one acknowledged");
        }
    }

    /// The session's whole trace, checked to hold every seq once from 1.
    async fn gap_free_trace(
        svc: &SessionService,
        caller: &Principal,
        session_id: &str,
    ) -> Vec<ithaca_session::store::EventRow> {
        let (events, last) = svc.read(caller, session_id, 0, 100).await.expect("read");
        let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=last).collect::<Vec<_>>(), "every seq once");
        events
    }

    /// A service's database on `url` whose connections, and only those,
    /// carry `schema`'s name, so [`end_connections`] ends them and no other
    /// test's.
    async fn tagged_db(url: &str, schema: &str) -> Db {
        let sep = if url.contains('?') { '&' } else { '?' };
        let tagged = format!("{url}{sep}application_name={schema}");
        ithaca_session::open_db(&tagged, schema)
            .await
            .expect("open")
    }

    /// End every connection [`tagged_db`] opened for `schema`, as a server
    /// restart or an operator would.
    async fn end_connections(admin: &sqlx::PgPool, schema: &str) {
        let ended: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(schema)
        .fetch_all(admin)
        .await
        .expect("end the service's connections");
        assert!(
            ended.contains(&true),
            "no connection of the service was ended"
        );
    }

    /// The append committer keeps its connection between batches. When the
    /// server ends that connection while it is kept (a restart, an idle
    /// timeout, an operator's `pg_terminate_backend`), the next append still
    /// lands, once and without a gap: the batch's one statement failed, and
    /// sent again on a fresh connection it lands once (it can land only on
    /// top of the `last_seq` the committer last saw).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn appends_land_after_the_committers_connection_is_ended_postgres() {
        let Some(url) = common::postgres(module_path!()) else {
            return;
        };
        let schema = common::unique_schema("store");
        let db = tagged_db(&url, &schema).await;
        let svc = service(db.clone());
        let alice = alice();
        let s = open(&svc).await;
        let admin = sqlx::PgPool::connect(&url).await.expect("admin connection");
        for round in 0..3 {
            let before = svc
                .append(
                    &alice,
                    &s.session_id,
                    EventType::ToolCall,
                    json!({"round": round}),
                )
                .await
                .expect("append before the connection ends");
            // At once, well inside the second the committer keeps its
            // connection after a batch.
            end_connections(&admin, &schema).await;
            let after = svc
                .append(
                    &alice,
                    &s.session_id,
                    EventType::ToolResult,
                    json!({"round": round}),
                )
                .await
                .expect("an append after the committer's connection was ended");
            assert_eq!(
                after.seq,
                before.seq + 1,
                "round {round}: the next seq, no gap"
            );
        }
        gap_free_trace(&svc, &alice, &s.session_id).await;
        admin.close().await;
        db.close().await;
        common::drop_schema(&url, &schema).await;
    }

    /// On PostgreSQL the committer sends a batch of one session's appends
    /// as one statement, its own transaction. When that statement fails
    /// (here: the server ended the committer's connection) after another
    /// replica appended to the session, the second attempt finds the
    /// session moved and cannot tell whether the first one moved it: the
    /// append is reported as failed and not sent a third time, so nothing
    /// is ever written twice. It wrote nothing, and the next append lands
    /// right after the other replica's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_that_may_have_landed_is_reported_not_retried_postgres() {
        let Some(url) = common::postgres(module_path!()) else {
            return;
        };
        let schema = common::unique_schema("store");
        let db = tagged_db(&url, &schema).await;
        let other_db = ithaca_session::open_db(&url, &schema)
            .await
            .expect("open the other replica");
        let (svc, other) = (service(db.clone()), service(other_db.clone()));
        let alice = alice();
        let s = open(&svc).await;
        let append = |svc: &SessionService, n: i64| {
            let (alice, session_id, svc) = (alice.clone(), s.session_id.clone(), svc.clone());
            async move {
                svc.append(&alice, &session_id, EventType::ToolCall, json!({ "n": n }))
                    .await
            }
        };
        let first = append(&svc, 1).await.expect("the first append");
        let by_other = append(&other, 2).await.expect("the other replica's append");
        assert_eq!(by_other.seq, first.seq + 1);
        let admin = sqlx::PgPool::connect(&url).await.expect("admin connection");
        end_connections(&admin, &schema).await;
        let failed = append(&svc, 3).await;
        assert!(
            failed.is_err(),
            "an append whose outcome the committer could not know was reported as landed: {failed:?}"
        );
        let next = append(&svc, 4).await.expect("the next append");
        assert_eq!(
            next.seq,
            by_other.seq + 1,
            "the failed append wrote nothing"
        );
        let events = gap_free_trace(&svc, &alice, &s.session_id).await;
        let ns: Vec<i64> = events
            .iter()
            .filter_map(|e| {
                serde_json::from_str::<serde_json::Value>(&e.payload).ok()?["n"].as_i64()
            })
            .collect();
        assert_eq!(ns, vec![1, 2, 4], "each append that was acknowledged, once");
        admin.close().await;
        db.close().await;
        other_db.close().await;
        common::drop_schema(&url, &schema).await;
    }

    /// An append sets its session's `last_seq` and `updated_at_ms`. No
    /// index of `sessions` may hold either: on SQLite each commit would
    /// rewrite a page of that index too (a quarter of an append's log
    /// pages), and on PostgreSQL no such update could be heap-only.
    async fn no_index_of_sessions_holds_what_an_append_changes(db: Db) {
        let svc = service(db.clone());
        let s = open(&svc).await;
        let before = svc.get(&alice(), &s.session_id).await.expect("row");
        svc.append(
            &alice(),
            &s.session_id,
            EventType::Reasoning,
            json!({"step": 1}),
        )
        .await
        .expect("append");
        let after = svc.get(&alice(), &s.session_id).await.expect("row");
        assert!(after.last_seq > before.last_seq, "the append took a seq");
        let columns: Vec<(String, String)> = match db.pool() {
            ithaca_kit::db::Pool::Sqlite(pool) => {
                sqlx::query_as(
                    "SELECT l.name, i.name FROM pragma_index_list('sessions') AS l, \
                 pragma_index_info(l.name) AS i",
                )
                .fetch_all(pool)
                .await
            }
            ithaca_kit::db::Pool::Postgres(pool) => {
                sqlx::query_as(
                    "SELECT c.relname::text, a.attname::text FROM pg_index AS x \
                 JOIN pg_class AS c ON c.oid = x.indexrelid \
                 JOIN pg_attribute AS a ON a.attrelid = x.indrelid AND a.attnum = ANY (x.indkey) \
                 WHERE x.indrelid = 'sessions'::regclass",
                )
                .fetch_all(pool)
                .await
            }
        }
        .expect("the indexes of sessions");
        assert!(
            columns.iter().any(|(_, column)| column == "status"),
            "the sweeper's index is there: {columns:?}"
        );
        for (index, column) in &columns {
            assert!(
                column != "last_seq" && column != "updated_at_ms",
                "index {index} holds {column}, which every append changes"
            );
        }
    }

    async fn archived_sessions_stay_readable(db: Db) {
        let svc = service(db);
        let s = open(&svc).await;
        let alice = alice();
        svc.close(&alice, None).await.expect("close current");
        let archived = svc.archive(&alice, &s.session_id).await.expect("archive");
        assert_eq!(archived.status, "archived");
        assert!(
            svc.append(&alice, &s.session_id, EventType::ToolResult, json!({}))
                .await
                .is_err()
        );
        let (all, last) = svc
            .read(&alice, &s.session_id, 0, 1000)
            .await
            .expect("still readable");
        // session_open, reasoning and session_closed.
        assert_eq!((all.len(), last), (3, 3));
    }

    async fn bad_input_names_the_field(db: Db) {
        let svc = service(db);
        let s = open(&svc).await;
        let alice = alice();
        let err = svc
            .session_context(&alice, "  \n", None, None)
            .await
            .expect_err("blank");
        assert!(err.message.starts_with("prompt"));
        let err = svc.get(&alice, "sess_01HQ").await.expect_err("not a uuid");
        assert!(err.message.starts_with("session_id"));
        let err = svc
            .append(&alice, &s.session_id, EventType::Unspecified, json!({}))
            .await
            .expect_err("no type");
        assert!(err.message.starts_with("type"));
        let err = svc
            .read(&alice, &s.session_id, -1, 10)
            .await
            .expect_err("negative");
        assert!(err.message.starts_with("after_seq"));
    }
}

mod broker {
    use super::*;
    use ithaca_broker::accounts::service::NewAccount;
    use ithaca_broker::market::MarketService;
    use ithaca_broker::market::service::{HistoryQuery, IngestRow};

    common::on_both_databases!(ithaca_broker::open_db, "store" =>
        a_malformed_file_stores_nothing,
        ingest_is_for_the_system_and_idempotent,
        history_reads_the_ingested_bars,
        history_refusals_name_the_problem,
        provider_credentials_are_sealed_at_rest,
    );

    const DEMO: &[u8] = include_bytes!("../../data/demo/stocks_daily_ohlcv_2000-2013.csv.gz");

    fn ingest_rows(file: ithaca_broker::market::csv::BarsFile) -> Vec<IngestRow> {
        file.rows.into_iter().map(Into::into).collect()
    }

    fn agent() -> Principal {
        common::agent("tenant-a", "agent-a")
    }

    fn q(symbol: &str) -> HistoryQuery {
        HistoryQuery {
            symbol: symbol.into(),
            ..Default::default()
        }
    }

    /// The service over a database holding the demo file.
    async fn with_demo(db: Db) -> MarketService {
        let svc = ithaca_broker::market_service(db);
        let demo = ithaca_broker::market::csv::parse_bars("demo.csv", DEMO).expect("demo parses");
        let checksum = demo.checksum.clone();
        svc.ingest(
            &Principal::system(""),
            "demo.csv",
            &checksum,
            ingest_rows(demo),
        )
        .await
        .expect("ingest");
        svc
    }

    async fn a_malformed_file_stores_nothing(db: Db) {
        let svc = ithaca_broker::market_service(db);
        // A malformed row: reported with its line, nothing stored.
        let bad = "Ticker,Date,Open,High,Low,Close,Volume,Adj Close\nAAPL,2000-03-01,10,11,9,10.5,100,1.0\nAAPL,2000-03-02,10,9,11,10,100,1.0\n";
        let parsed =
            ithaca_broker::market::csv::parse_bars("bad.csv", bad.as_bytes()).expect("parses");
        let err = svc
            .ingest(
                &Principal::system(""),
                "bad.csv",
                &parsed.checksum.clone(),
                ingest_rows(parsed),
            )
            .await
            .expect_err("inconsistent bar");
        assert!(err.message.starts_with("line 3:"), "{}", err.message);
        assert!(
            svc.symbols(&agent()).await.expect("symbols").is_empty(),
            "nothing half-ingested"
        );
        assert!(svc.datasets(&agent()).await.expect("datasets").is_empty());
    }

    async fn ingest_is_for_the_system_and_idempotent(db: Db) {
        let svc = ithaca_broker::market_service(db);
        let system = Principal::system("");
        let demo = ithaca_broker::market::csv::parse_bars("demo.csv", DEMO).expect("demo parses");
        let checksum = demo.checksum.clone();
        let rows = ingest_rows(demo);
        let err = svc
            .ingest(&agent(), "demo.csv", &checksum, rows.clone())
            .await
            .expect_err("agents do not ingest");
        assert_eq!(err.code, Code::PermissionDenied);
        let first = svc
            .ingest(&system, "demo.csv", &checksum, rows.clone())
            .await
            .expect("ingest");
        assert!(!first.already_present);
        assert_eq!(first.dataset.row_count, 12_154);
        assert_eq!(first.dataset.symbols, "AAPL FB GOOG IBM MSFT");
        assert_eq!(
            (
                first.dataset.first_date.as_str(),
                first.dataset.last_date.as_str()
            ),
            ("2000-03-01", "2013-03-01")
        );
        let again = svc
            .ingest(&system, "demo.csv", &checksum, rows)
            .await
            .expect("re-ingest");
        assert!(again.already_present, "the same file twice changes nothing");
        assert_eq!(again.dataset.dataset_id, first.dataset.dataset_id);
        assert_eq!(svc.datasets(&agent()).await.expect("datasets").len(), 1);
    }

    async fn history_reads_the_ingested_bars(db: Db) {
        let svc = with_demo(db).await;
        let agent = agent();
        let symbols = svc.symbols(&agent).await.expect("symbols");
        let fb = symbols.iter().find(|s| s.symbol == "FB").expect("FB");
        assert_eq!((fb.bars, fb.first_date.as_str()), (196, "2012-05-18"));

        let h = svc
            .history(
                &agent,
                HistoryQuery {
                    start: Some("2013-02-25".into()),
                    fields: vec!["adj_close".into()],
                    ..q("aapl")
                },
            )
            .await
            .expect("history");
        assert_eq!(h.symbol, "AAPL");
        assert_eq!(
            h.bars.iter().map(|b| b.date.as_str()).collect::<Vec<_>>(),
            vec![
                "2013-02-25",
                "2013-02-26",
                "2013-02-27",
                "2013-02-28",
                "2013-03-01"
            ]
        );
        assert_eq!(h.fields, vec!["adj_close"]);
        assert!(!h.truncated);
        let h = svc
            .history(
                &agent,
                HistoryQuery {
                    limit: Some(10),
                    ..q("IBM")
                },
            )
            .await
            .expect("bounded");
        // Without a start, a long range gives its newest bars (oldest first
        // within the page) and a cursor back.
        assert_eq!((h.bars.len(), h.truncated), (10, true));
        assert_eq!(h.bars[9].date, "2013-03-01");
        assert!(h.bars.windows(2).all(|w| w[0].date < w[1].date));
        assert_eq!(
            h.next_cursor.as_deref(),
            Some(format!("before:{}", h.bars[0].date).as_str())
        );
        let h = svc.history(&agent, q("MSFT")).await.expect("default limit");
        let default = ithaca_broker::market::model::DEFAULT_LIMIT as usize;
        assert_eq!((h.bars.len(), h.truncated), (default, true));
        assert_eq!(h.bars.last().expect("bar").date, "2013-03-01");

        // Following the cursors reads every bar once, in both directions.
        let msft = symbols.iter().find(|s| s.symbol == "MSFT").expect("MSFT");
        for start in [None, Some("2000-01-01".to_owned())] {
            let (mut seen, mut cursor) = (Vec::new(), None);
            loop {
                let page = svc
                    .history(
                        &agent,
                        HistoryQuery {
                            start: start.clone(),
                            limit: Some(700),
                            cursor: cursor.clone(),
                            ..q("MSFT")
                        },
                    )
                    .await
                    .expect("page");
                let dates: Vec<String> = page.bars.iter().map(|b| b.date.clone()).collect();
                assert_eq!(page.truncated, page.next_cursor.is_some());
                if start.is_none() {
                    seen.splice(0..0, dates);
                } else {
                    seen.extend(dates);
                }
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            assert_eq!(seen.len() as i64, msft.bars, "from {start:?}");
            assert!(
                seen.windows(2).all(|w| w[0] < w[1]),
                "in order, none twice, from {start:?}"
            );
            assert_eq!(
                seen.first().map(String::as_str),
                Some(msft.first_date.as_str())
            );
        }
    }

    async fn history_refusals_name_the_problem(db: Db) {
        let svc = with_demo(db).await;
        let agent = agent();
        let err = svc
            .history(&agent, q("NVDA"))
            .await
            .expect_err("unknown symbol");
        assert_eq!(
            (err.code, err.domain),
            (Code::NotFound, Some("UNKNOWN_SYMBOL"))
        );
        assert!(
            err.message.contains("AAPL"),
            "names the known symbols: {}",
            err.message
        );
        let err = svc
            .history(
                &agent,
                HistoryQuery {
                    start: Some("1990-01-01".into()),
                    end: Some("1990-12-31".into()),
                    ..q("AAPL")
                },
            )
            .await
            .expect_err("no bars");
        assert_eq!(err.domain, Some("NO_DATA"));
        let err = svc
            .history(
                &agent,
                HistoryQuery {
                    end: Some("2010-01-01".into()),
                    ..q("FB")
                },
            )
            .await
            .expect_err("before the IPO");
        assert_eq!(err.domain, Some("NO_DATA"));
        for (query, field) in [
            (
                HistoryQuery {
                    start: Some("2001-02-30".into()),
                    ..q("AAPL")
                },
                "start",
            ),
            (
                HistoryQuery {
                    fields: vec!["price".into()],
                    ..q("AAPL")
                },
                "fields",
            ),
            (
                HistoryQuery {
                    limit: Some(0),
                    ..q("AAPL")
                },
                "limit",
            ),
            (q("AAPL; DROP TABLE bars"), "symbol"),
            (
                HistoryQuery {
                    cursor: Some("page 2".into()),
                    ..q("AAPL")
                },
                "cursor",
            ),
            (
                HistoryQuery {
                    cursor: Some("before:2013-02-30".into()),
                    ..q("AAPL")
                },
                "cursor",
            ),
        ] {
            let err = svc.history(&agent, query).await.expect_err("bad input");
            assert!(
                err.message.starts_with(field),
                "{} names {field}",
                err.message
            );
        }
    }

    /// Provider accounts: the credential is sealed at rest and never comes
    /// back.
    async fn provider_credentials_are_sealed_at_rest(db: Db) {
        let svc = ithaca_broker::account_service(db.clone(), &common::key());
        let system = Principal::system("");
        let secret = "sk-live-DO-NOT-LEAK-4242";
        let new = |tenant: &str| NewAccount {
            tenant_id: tenant.into(),
            provider: "ibkr".into(),
            label: "main".into(),
            config: json!({"host": "gw.internal.example", "quote_path": "/q", "order_path": "/o", "source_account": "U123", "account_ref": "ref-9"}),
            credential: secret.into(),
        };
        let err = svc
            .add_account(&agent(), new("tenant-a"))
            .await
            .expect_err("agents cannot add accounts");
        assert_eq!(err.code, Code::PermissionDenied);
        let row = svc
            .add_account(&system, new("tenant-a"))
            .await
            .expect("add");
        let stored = ithaca_broker::accounts::AccountStore::new(db)
            .accounts("tenant-a")
            .await
            .expect("rows");
        assert_eq!(stored.len(), 1);
        let sealed = stored[0].credential.clone().expect("sealed");
        assert!(
            !sealed.contains(secret),
            "the credential is encrypted at rest"
        );
        assert!(svc.credential_configured(&row));
        assert!(
            svc.accounts(&common::agent("tenant-b", "b"))
                .await
                .expect("other tenant")
                .is_empty()
        );
        let err = svc
            .add_account(
                &system,
                NewAccount {
                    provider: "IB KR!".into(),
                    ..new("tenant-a")
                },
            )
            .await
            .expect_err("bad provider");
        assert!(err.message.starts_with("provider"), "{}", err.message);
    }
}
