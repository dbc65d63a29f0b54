//! A database handle for one service: a SQLite file or a PostgreSQL URL.
//!
//! Each service owns its schema: on PostgreSQL a schema of its own (selected
//! through `search_path`, so the SQL names no schema), on SQLite a file of its
//! own. Migrations in both dialects run at start.
//!
//! Store code writes each query once and runs it on either pool with
//! [`with_pool!`](crate::with_pool): both drivers accept `$1`-style
//! parameters, and each arm is type-checked against its own driver.

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, SqlitePool};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, MutexGuard};

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
    /// instead of spinning on SQLITE_BUSY. `None` on PostgreSQL, whose row
    /// locks order concurrent writers.
    write_gate: Option<Arc<Mutex<()>>>,
    /// The PostgreSQL schema (empty on SQLite), for LISTEN channel names.
    schema: String,
}

/// The migrations of one service, one set per dialect.
#[derive(Clone, Copy)]
pub struct Migrations {
    pub sqlite: &'static Migrator,
    pub postgres: &'static Migrator,
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
            Self::open_sqlite(url, migrations.sqlite).await
        }
    }

    async fn open_postgres(url: &str, schema: &str, migrator: &Migrator) -> Result<Db, DbError> {
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
        })
    }

    async fn open_sqlite(url: &str, migrator: &Migrator) -> Result<Db, DbError> {
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
            std::fs::create_dir_all(dir).map_err(|source| DbError::Dir {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        migrator.run(&pool).await?;
        Ok(Db {
            pool: Pool::Sqlite(pool),
            write_gate: Some(Arc::new(Mutex::new(()))),
            schema: String::new(),
        })
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
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
            Some(gate) => Some(gate.lock().await),
            None => None,
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
