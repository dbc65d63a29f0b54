//! A database handle for one service: a SQLite file or a PostgreSQL URL.
//!
//! Each service owns its schema: on PostgreSQL a schema of its own (selected
//! through `search_path`, so the SQL names no schema), on SQLite a file of its
//! own. Migrations in both dialects run at start.
//!
//! SQLite files are private to the user running the service: a directory
//! created for them is 0700, and the database file (so also its `-wal` and
//! `-shm`, which SQLite creates with the database's mode) 0600. An existing
//! file that others could read is tightened, with a warning; an existing
//! directory is left as the operator made it, with a warning.
//!
//! Store code writes each query once and runs it on either pool with
//! [`with_pool!`](crate::with_pool): both drivers accept `$1`-style
//! parameters, and each arm is type-checked against its own driver.

use crate::write_gate::{Turn, WriteGate};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{PgPool, SqlitePool};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::MutexGuard;

/// Run `$body` with `$pool` bound to the concrete pool of `$db`.
#[macro_export]
macro_rules! with_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db.pool() {
            $crate::db::Pool::Sqlite($pool) => $body,
            $crate::db::Pool::Postgres($pool) => $body,
        }
    };
}

/// The two backends.
#[derive(Clone, Debug)]
pub enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// A service's database. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Db {
    pool: Pool,
    /// SQLite allows one writer at a time; writers in this process queue here
    /// instead of spinning on SQLITE_BUSY, and learn there when their write
    /// starts the log over ([`Db::write_turn`]). `None` on PostgreSQL, whose
    /// row locks order concurrent writers.
    write_gate: Option<Arc<WriteGate>>,
    /// The PostgreSQL schema (empty on SQLite), for LISTEN channel names.
    schema: String,
    /// The SQLite file (none in memory and on PostgreSQL), for a writer
    /// that opens a connection of its own ([`Db::sqlite_file`]).
    sqlite_file: Option<std::path::PathBuf>,
    /// The migrations this binary knows, to compare with those the
    /// database has applied ([`Db::schema_state`]).
    migrator: &'static Migrator,
}

/// How the database's schema compares with this binary's migrations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaState {
    /// Exactly the migrations this binary knows are applied.
    Current,
    /// Some of this binary's migrations are not applied yet.
    Behind { missing: Vec<i64> },
    /// The database has migrations this binary does not know: a newer
    /// version migrated it.
    Ahead { unknown: Vec<i64> },
}

/// The migrations of one service, one set per dialect, and how a new
/// SQLite file of it is laid out.
#[derive(Clone, Copy)]
pub struct Migrations {
    pub sqlite: &'static Migrator,
    pub postgres: &'static Migrator,
    /// The page size, in bytes, a new SQLite file is created with (a power
    /// of two from 512 to 65,536); `None` keeps SQLite's (4,096). It is
    /// fixed when the file is made: a file that exists keeps its own.
    pub sqlite_page_size: Option<u32>,
}

/// Opening or migrating the database failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("invalid database url: {0}")]
    BadUrl(String),
    #[error("invalid schema name {0:?}: use lowercase letters, digits and _")]
    BadSchema(String),
    #[error("database: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("creating {path}: {source}")]
    Dir {
        path: String,
        source: std::io::Error,
    },
}

impl Db {
    /// Open `url` for a service whose PostgreSQL schema is `schema`, and run
    /// its migrations.
    ///
    /// `url` is `postgres://…`/`postgresql://…`, `sqlite://path`, `sqlite:path`
    /// or a plain file path (SQLite, created if missing).
    pub async fn open(url: &str, schema: &str, migrations: Migrations) -> Result<Db, DbError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::open_postgres(url, schema, migrations.postgres).await
        } else {
            Self::open_sqlite(url, migrations.sqlite, migrations.sqlite_page_size).await
        }
    }

    async fn open_postgres(
        url: &str,
        schema: &str,
        migrator: &'static Migrator,
    ) -> Result<Db, DbError> {
        if schema.is_empty()
            || !schema
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(DbError::BadSchema(schema.to_owned()));
        }
        let base = PgConnectOptions::from_str(url).map_err(|e| DbError::BadUrl(e.to_string()))?;
        // The schema must exist before connections that select it are used.
        // Two replicas starting together may race on CREATE SCHEMA, so the
        // creation is serialised with an advisory lock.
        {
            let admin = PgPoolOptions::new()
                .max_connections(1)
                .connect_with(base.clone())
                .await?;
            let mut tx = admin.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(format!("ithaca-schema-{schema}"))
                .execute(&mut *tx)
                .await?;
            sqlx::query(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            admin.close().await;
        }
        let options = base.options([("search_path", schema)]);
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
            .await?;
        migrator.run(&pool).await?;
        Ok(Db {
            pool: Pool::Postgres(pool),
            write_gate: None,
            schema: schema.to_owned(),
            sqlite_file: None,
            migrator,
        })
    }

    async fn open_sqlite(
        url: &str,
        migrator: &'static Migrator,
        page_size: Option<u32>,
    ) -> Result<Db, DbError> {
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .unwrap_or(url);
        let path = path.split('?').next().unwrap_or(path);
        if path.is_empty() {
            return Err(DbError::BadUrl("empty sqlite path".into()));
        }
        if let Some(dir) = Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            create_private_dir(dir).map_err(|source| DbError::Dir {
                path: dir.display().to_string(),
                source,
            })?;
        }
        if !path.starts_with(':') {
            make_private_files(Path::new(path)).map_err(|source| DbError::Dir {
                path: path.to_owned(),
                source,
            })?;
        }
        let mut options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(30));
        if let Some(bytes) = page_size {
            // sqlx sets the page size before the journal mode, as it must be
            // for a new file; on a file that exists it changes nothing.
            options = options.page_size(bytes);
        }
        for (name, value) in SQLITE_WRITER_PRAGMAS {
            options = options.pragma(name, value);
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            // sqlx pings a pooled connection before handing it out; a SQLite
            // connection is a file handle that cannot have hung up, and its
            // ping is a round trip to the connection's worker thread (two
            // thread switches), paid by every query that takes a connection.
            .test_before_acquire(false)
            .connect_with(options)
            .await?;
        migrator.run(&pool).await?;
        let write_gate = Arc::new(WriteGate::default());
        tokio::spawn(checkpoint_wal(pool.clone(), write_gate.clone()));
        Ok(Db {
            pool: Pool::Sqlite(pool),
            write_gate: Some(write_gate),
            schema: String::new(),
            sqlite_file: (!path.starts_with(':')).then(|| Path::new(path).to_owned()),
            migrator,
        })
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The SQLite database's file, for a writer that opens a connection of
    /// its own beside the pool. It must set [`SQLITE_WRITER_PRAGMAS`] and
    /// hold [`Db::write_gate`] while it writes. `None` on PostgreSQL and for
    /// an in-memory database (which no second connection can open).
    pub fn sqlite_file(&self) -> Option<&Path> {
        self.sqlite_file.as_deref()
    }

    /// Hold the write gate, as [`Db::write_gate`] does, and learn whether
    /// this turn's first write transaction starts SQLite's write-ahead log
    /// over, which syncs the log's header to disk. A writer that runs its
    /// statements on the async runtime ([`Db::sqlite_file`]) hands that
    /// transaction to a pool connection instead, so the sync blocks no
    /// task (see [`crate::write_gate`]). `None` on PostgreSQL.
    pub async fn write_turn(&self) -> Option<Turn<'_>> {
        match &self.write_gate {
            Some(gate) => Some(gate.turn().await),
            None => None,
        }
    }

    /// The PostgreSQL schema, empty on SQLite.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self.pool, Pool::Postgres(_))
    }

    /// Hold this while writing. On SQLite it queues writers of this process;
    /// on PostgreSQL it is free.
    pub async fn write_gate(&self) -> Option<MutexGuard<'_, ()>> {
        match &self.write_gate {
            Some(gate) => Some(gate.hold().await),
            None => None,
        }
    }

    /// Compare the migrations the database has applied with this binary's.
    /// A rolling upgrade uses it: a replica of the old version sees the new
    /// version's migrations as [`SchemaState::Ahead`] and stops reporting
    /// ready (see `server::serve`).
    pub async fn schema_state(&self) -> Result<SchemaState, sqlx::Error> {
        let sql = "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version";
        let applied: Vec<i64> =
            with_pool!(self, pool => sqlx::query_scalar(sql).fetch_all(pool).await)?;
        let known: Vec<i64> = self.migrator.iter().map(|m| m.version).collect();
        let unknown: Vec<i64> = applied
            .iter()
            .copied()
            .filter(|v| !known.contains(v))
            .collect();
        if !unknown.is_empty() {
            return Ok(SchemaState::Ahead { unknown });
        }
        let missing: Vec<i64> = known.into_iter().filter(|v| !applied.contains(v)).collect();
        if missing.is_empty() {
            Ok(SchemaState::Current)
        } else {
            Ok(SchemaState::Behind { missing })
        }
    }

    /// Close every connection.
    pub async fn close(&self) {
        match &self.pool {
            Pool::Sqlite(p) => p.close().await,
            Pool::Postgres(p) => p.close().await,
        }
    }
}

/// What every connection to a service's SQLite file sets, the pool's and a
/// writer's own ([`Db::sqlite_file`]): commits append to the write-ahead
/// log without `fsync`, foreign keys hold, and no connection checkpoints
/// as it commits (the checkpointer below does, off the writers' path; see
/// `checkpoint_wal`).
pub const SQLITE_WRITER_PRAGMAS: [(&str, &str); 4] = [
    ("synchronous", "NORMAL"),
    ("foreign_keys", "ON"),
    ("wal_autocheckpoint", "0"),
    ("journal_size_limit", LOG_KEPT_BYTES),
];

/// How soon the next checkpoint runs while commits arrive. Each flushes
/// what was committed since the last, beside the writer; the less that
/// is, the less the commits beside it slow down.
const CHECKPOINT_BUSY: Duration = Duration::from_millis(25);

/// Every this many rounds (about 200 ms while commits arrive) the round
/// ends with a pass that holds this process's writers back, so that the
/// log can start over. Holding them every round (every 25 ms) cost a
/// tenth of the full path's peak in `ithaca-bench` for no better p99;
/// every 80 rounds (2 s) made p99 at half of peak 3–10× worse, and every
/// 4 (100 ms) no better (stop 47).
const GATED_EVERY: u32 = 8;

/// The longest wait between checkpoints, reached by doubling while nothing
/// is written, so an idle service wakes once a second.
const CHECKPOINT_IDLE: Duration = Duration::from_secs(1);

/// A gated pass that holds the writers longer than this is logged (a
/// warning with the time and the log's size): on a slow disk the copy's
/// flush is what every write waits for meanwhile.
const SLOW_HOLD: Duration = Duration::from_millis(100);

/// The size a SQLite write-ahead log is cut back to when it starts over
/// (`journal_size_limit`): a log that a long read kept from starting over
/// grows, and does not keep that size on disk afterwards.
const LOG_KEPT_BYTES: &str = "67108864";

/// Copy a SQLite database's write-ahead log back into the database file
/// until the pool is closed, and let the log start over from its
/// beginning instead of growing.
///
/// SQLite's default lets the commit that crosses 1,000 log pages do the
/// checkpoint itself: copy the pages and `fsync` both files, during which
/// that writer, and every append queued behind it, waits. A passive
/// checkpoint on another connection runs beside the writer instead (WAL
/// mode lets a checkpoint and one writer proceed together).
///
/// A checkpoint beside the writer never ends the log, though: the log
/// starts over only when a write begins while every frame in it is in the
/// database, and under a steady stream of commits a new frame has always
/// been written by the time the checkpoint finishes. With one such
/// checkpoint a second, the log grew by every page each commit wrote
/// (927 MB in a minute of `ithaca-bench`'s load, against a 57 MB
/// database), and each checkpoint flushed the whole second, stalling the
/// commits beside it: p99 of a tool call at half of peak 11–23 ms, against
/// 3–4 ms with no checkpoint at all. So rounds come every
/// [`CHECKPOINT_BUSY`] while there are writes, each flushing little, and
/// every [`GATED_EVERY`]th ends with a second pass at the write gate:
/// it copies the few frames committed during the first, after which the
/// next write starts the log over (unless a read that began before still
/// holds an older snapshot; the next gated round tries again).
async fn checkpoint_wal(pool: SqlitePool, gate: Arc<WriteGate>) {
    let mut wait = CHECKPOINT_BUSY;
    let mut left = Log::default();
    let mut rounds_ungated: u32 = 0;
    loop {
        if wait > CHECKPOINT_BUSY {
            // A quiet spell: the first write after it starts the rounds
            // again. Sleeping it out, a round up to a second late found
            // all the log a new load had written meanwhile (19,553 pages
            // in one `ithaca-bench` run, copied in 20 ms beside the
            // writers) and, counted as the eighth, then held them at the
            // gate. Loads of 2 s at 5,500 calls/s after 3 s of quiet read
            // p99 2.9–7.0 ms that way, 2.6–3.6 ms with the wake-up (stop
            // 52, sixteen of each).
            gate.idle(wait).await;
        } else {
            tokio::time::sleep(wait).await;
        }
        if pool.is_closed() {
            return;
        }
        rounds_ungated = rounds_ungated.saturating_add(1);
        let gated = rounds_ungated >= GATED_EVERY;
        match checkpoint_round(&pool, &gate, gated, left).await {
            Ok(Some(log)) => {
                left = log;
                wait = CHECKPOINT_BUSY;
                if gated {
                    rounds_ungated = 0;
                }
            }
            Ok(None) => {
                wait = (wait * 2).min(CHECKPOINT_IDLE);
                // Nothing was written since a round that found the whole log
                // copied and told the gate, so the next write starts the log
                // over by itself: the writers need not be held back again
                // until a busy spell has lasted [`GATED_EVERY`] rounds.
                rounds_ungated = 0;
            }
            Err(err) => {
                if pool.is_closed() {
                    return;
                }
                tracing::warn!(error = %err, "checkpointing the SQLite write-ahead log failed");
                wait = CHECKPOINT_IDLE;
            }
        }
    }
}

/// What `PRAGMA wal_checkpoint` reports: the frames in the log, and how
/// many of them are in the database.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Log {
    frames: i64,
    copied: i64,
}

/// One round of [`checkpoint_wal`], ending at `gate` when `gated`: the
/// log as the round left it, or `None` when nothing was written since
/// `left` (so there was nothing to do). A round that leaves the whole log
/// copied tells the gate, a gated one before it lets the writers go (see
/// [`crate::write_gate`]).
async fn checkpoint_round(
    pool: &SqlitePool,
    gate: &WriteGate,
    gated: bool,
    left: Log,
) -> Result<Option<Log>, sqlx::Error> {
    let found = passive_checkpoint(pool).await?;
    if found.frames <= 0 || (found == left && found.copied == found.frames) {
        return Ok(None);
    }
    if !gated {
        if found.copied == found.frames {
            gate.log_copied();
        }
        return Ok(Some(found));
    }
    let writers_wait = gate.hold_for_checkpoint().await;
    let held = std::time::Instant::now();
    let log = passive_checkpoint(pool).await?;
    if log.copied == log.frames {
        gate.log_copied();
    }
    drop(writers_wait);
    let held = held.elapsed();
    if held > SLOW_HOLD {
        tracing::warn!(
            held_ms = held.as_millis() as u64,
            log_frames = log.frames,
            copied_before = found.copied,
            "a checkpoint of the SQLite write-ahead log held the writers"
        );
    }
    Ok(Some(log))
}

/// `PRAGMA wal_checkpoint(PASSIVE)`.
async fn passive_checkpoint(pool: &SqlitePool) -> Result<Log, sqlx::Error> {
    let (_busy, frames, copied): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(pool)
        .await?;
    Ok(Log { frames, copied })
}

/// Create `dir` and its missing parents, readable by the owner only
/// (0700). A directory that exists already keeps its mode (an operator may
/// have chosen it); a warning says when others can read it.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        builder.mode(0o700);
        if let Ok(meta) = std::fs::metadata(dir)
            && meta.is_dir()
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(
                dir = %dir.display(),
                mode = format!("{:o}", meta.permissions().mode() & 0o777),
                "the data directory is readable by other users; `chmod 700` it"
            );
        }
    }
    builder.create(dir)
}

/// Create the SQLite file `path` as 0600 when it is missing, and tighten
/// it and its `-wal` and `-shm` to 0600 when they exist with a looser mode.
fn make_private_files(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        // SQLite creates the -wal and -shm files with the mode of the
        // database file, so creating that one private is enough for new
        // databases.
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        let mut files = vec![path.to_path_buf()];
        for suffix in ["-wal", "-shm"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            files.push(name.into());
        }
        for file in files {
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(
                    file = %file.display(),
                    mode = format!("{mode:o}"),
                    "a database file was readable by other users; made it 0600"
                );
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}
