//! The skills service's SQL (runs, artifacts, jobs and strategies), one text for SQLite and
//! PostgreSQL. Every query is filtered by tenant.

use crate::model::{RunId, RunStatus, StrategySpec, StrategyStatus};
use ithaca_kit::db::{Db, Migrations};
use ithaca_kit::id::TenantId;
use ithaca_kit::with_pool;
use sqlx::migrate::Migrator;

static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

/// This service's migrations.
pub const MIGRATIONS: Migrations = Migrations {
    sqlite: &SQLITE,
    postgres: &POSTGRES,
    sqlite_page_size: None,
};

/// A run row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct RunRow {
    #[sqlx(try_from = "String")]
    pub run_id: RunId,
    #[sqlx(try_from = "String")]
    pub tenant_id: TenantId,
    /// The caller's research session; empty when it had none.
    pub session_id: String,
    pub skill_id: String,
    pub version: String,
    /// JSON object.
    pub inputs: String,
    #[sqlx(try_from = "String")]
    pub status: RunStatus,
    /// JSON object, when succeeded.
    pub outputs: Option<String>,
    pub error: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// The principal (JSON) a batch run executes as.
    pub requester: String,
}

/// An artifact row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct ArtifactRow {
    pub artifact_id: String,
    #[sqlx(try_from = "String")]
    pub run_id: RunId,
    #[sqlx(try_from = "String")]
    pub tenant_id: TenantId,
    pub name: String,
    pub mime_type: String,
    pub body: String,
    pub created_at_ms: i64,
}

const RUN_COLUMNS: &str = "run_id, tenant_id, session_id, skill_id, version, inputs, status, outputs, error, created_at_ms, updated_at_ms, requester";
const ARTIFACT_COLUMNS: &str =
    "artifact_id, run_id, tenant_id, name, mime_type, body, created_at_ms";

/// The run tables.
#[derive(Clone, Debug)]
pub struct Store {
    db: Db,
}

impl Store {
    pub fn new(db: Db) -> Self {
        Store { db }
    }

    pub async fn insert_run(&self, run: &RunRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = format!(
            "INSERT INTO runs ({RUN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
        );
        with_pool!(self.db, pool => sqlx::query(&sql)
            .bind(run.run_id.as_str())
            .bind(run.tenant_id.as_str())
            .bind(&run.session_id)
            .bind(&run.skill_id)
            .bind(&run.version)
            .bind(&run.inputs)
            .bind(run.status.as_str())
            .bind(&run.outputs)
            .bind(&run.error)
            .bind(run.created_at_ms)
            .bind(run.updated_at_ms)
            .bind(&run.requester)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Move a run from `from` to `to`; false when it was not in `from`.
    pub async fn transition(
        &self,
        run_id: &RunId,
        from: RunStatus,
        to: RunStatus,
        outputs: Option<&str>,
        error: &str,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "UPDATE runs SET status = $3, outputs = COALESCE($4, outputs), error = $5, updated_at_ms = $6 \
                   WHERE run_id = $1 AND status = $2";
        // A run leaving `running` ends its running job in the same
        // transaction, so no reader sees a finished run with a job still
        // running (or the reverse).
        let ends_job = from == RunStatus::Running && to != RunStatus::Running;
        let end_job = "UPDATE jobs SET status = $2, error = $3, finished_at_ms = $4 \
                       WHERE run_id = $1 AND status = $5";
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            let n = sqlx::query(sql)
                .bind(run_id.as_str())
                .bind(from.as_str())
                .bind(to.as_str())
                .bind(outputs)
                .bind(error)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if n > 0 && ends_job {
                sqlx::query(end_job)
                    .bind(run_id.as_str())
                    .bind(to.as_str())
                    .bind(error)
                    .bind(now_ms)
                    .bind(RunStatus::Running.as_str())
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(n > 0)
        })
    }

    /// The oldest queued run, of any tenant, that is the worker's to run:
    /// a run of one of `batch` (skill ids), or any run queued before
    /// `orphaned_before_ms` (an interactive run whose caller's process
    /// stopped before claiming it). A younger interactive run is its
    /// caller's, which claims it within milliseconds and may stop it.
    pub async fn next_queued(
        &self,
        batch: &[&str],
        orphaned_before_ms: i64,
    ) -> Result<Option<RunRow>, sqlx::Error> {
        let placeholders: Vec<String> = (0..batch.len()).map(|i| format!("${}", i + 3)).collect();
        let batch_clause = if batch.is_empty() {
            String::new()
        } else {
            format!(" OR skill_id IN ({})", placeholders.join(", "))
        };
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status = $1 AND (created_at_ms < $2{batch_clause}) \
             ORDER BY created_at_ms, run_id LIMIT 1"
        );
        with_pool!(self.db, pool => {
            let mut query = sqlx::query_as::<_, RunRow>(&sql)
                .bind(RunStatus::Queued.as_str())
                .bind(orphaned_before_ms);
            for skill_id in batch {
                query = query.bind(*skill_id);
            }
            query.fetch_optional(pool).await
        })
    }

    /// Fail runs left `running` longer than `stale_ms` (a crashed worker),
    /// so none stays stuck. Returns how many.
    pub async fn fail_stale(&self, stale_ms: i64, now_ms: i64) -> Result<u64, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "UPDATE runs SET status = $3, error = 'interrupted: the worker stopped before the run finished', \
                   updated_at_ms = $1 WHERE status = $4 AND updated_at_ms < $2";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(now_ms)
            .bind(now_ms - stale_ms)
            .bind(RunStatus::Failed.as_str())
            .bind(RunStatus::Running.as_str())
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))
    }

    pub async fn run(
        &self,
        tenant_id: &TenantId,
        run_id: &RunId,
    ) -> Result<Option<RunRow>, sqlx::Error> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = $1 AND tenant_id = $2");
        with_pool!(self.db, pool => sqlx::query_as::<_, RunRow>(&sql).bind(run_id.as_str()).bind(tenant_id.as_str()).fetch_optional(pool).await)
    }

    /// The latest successful backtest of a strategy.
    pub async fn latest_backtest(
        &self,
        tenant_id: &TenantId,
        strategy_id: &str,
    ) -> Result<Option<RunRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE tenant_id = $1 AND skill_id = 'backtest.momentum' \
             AND status = 'succeeded' AND inputs LIKE $2 ORDER BY updated_at_ms DESC, run_id LIMIT 1"
        );
        // Inputs are stored as compact JSON; a strategy id is a UUID, so
        // it holds no LIKE wildcard.
        let pattern = format!("%\"strategy_id\":\"{strategy_id}\"%");
        with_pool!(self.db, pool => sqlx::query_as::<_, RunRow>(&sql).bind(tenant_id.as_str()).bind(pattern).fetch_optional(pool).await)
    }

    pub async fn insert_artifact(&self, artifact: &ArtifactRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = format!(
            "INSERT INTO artifacts ({ARTIFACT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        );
        with_pool!(self.db, pool => sqlx::query(&sql)
            .bind(&artifact.artifact_id)
            .bind(artifact.run_id.as_str())
            .bind(artifact.tenant_id.as_str())
            .bind(&artifact.name)
            .bind(&artifact.mime_type)
            .bind(&artifact.body)
            .bind(artifact.created_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Drop a run's artifacts (its results were cancelled).
    pub async fn delete_artifacts(&self, run_id: &RunId) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        with_pool!(self.db, pool => sqlx::query("DELETE FROM artifacts WHERE run_id = $1")
            .bind(run_id.as_str())
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn artifacts(
        &self,
        tenant_id: &TenantId,
        run_id: &RunId,
    ) -> Result<Vec<ArtifactRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE run_id = $1 AND tenant_id = $2 ORDER BY created_at_ms, name"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, ArtifactRow>(&sql).bind(run_id.as_str()).bind(tenant_id.as_str()).fetch_all(pool).await)
    }

    pub async fn artifact(
        &self,
        tenant_id: &TenantId,
        artifact_id: &str,
    ) -> Result<Option<ArtifactRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {ARTIFACT_COLUMNS} FROM artifacts WHERE artifact_id = $1 AND tenant_id = $2"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, ArtifactRow>(&sql).bind(artifact_id).bind(tenant_id.as_str()).fetch_optional(pool).await)
    }
}

/// A strategy row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct StrategyRow {
    pub strategy_id: String,
    #[sqlx(try_from = "String")]
    pub tenant_id: TenantId,
    /// The research session it was proposed in; empty when none.
    pub session_id: String,
    pub name: String,
    /// Stored as JSON: universe, lookback, rebalance, risk, cost_bps.
    #[sqlx(try_from = "String")]
    pub spec: StrategySpec,
    #[sqlx(try_from = "String")]
    pub status: StrategyStatus,
    pub created_at_ms: i64,
}

const STRATEGY_COLUMNS: &str =
    "strategy_id, tenant_id, session_id, name, spec, status, created_at_ms";

impl Store {
    pub async fn insert_strategy(&self, s: &StrategyRow) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = format!(
            "INSERT INTO strategies ({STRATEGY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
        );
        with_pool!(self.db, pool => sqlx::query(&sql)
            .bind(&s.strategy_id)
            .bind(s.tenant_id.as_str())
            .bind(&s.session_id)
            .bind(&s.name)
            .bind(s.spec.to_json().to_string())
            .bind(s.status.as_str())
            .bind(s.created_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// Move a tenant's strategy to `status`; false when there is none.
    pub async fn set_strategy_status(
        &self,
        tenant_id: &TenantId,
        strategy_id: &str,
        status: StrategyStatus,
    ) -> Result<bool, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "UPDATE strategies SET status = $3 WHERE strategy_id = $1 AND tenant_id = $2";
        let n = with_pool!(self.db, pool => sqlx::query(sql)
            .bind(strategy_id)
            .bind(tenant_id.as_str())
            .bind(status.as_str())
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(n > 0)
    }

    pub async fn strategy(
        &self,
        tenant_id: &TenantId,
        strategy_id: &str,
    ) -> Result<Option<StrategyRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {STRATEGY_COLUMNS} FROM strategies WHERE strategy_id = $1 AND tenant_id = $2"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, StrategyRow>(&sql).bind(strategy_id).bind(tenant_id.as_str()).fetch_optional(pool).await)
    }
}

/// One execution attempt of a run.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct JobRow {
    pub job_id: String,
    #[sqlx(try_from = "String")]
    pub run_id: RunId,
    #[sqlx(try_from = "String")]
    pub tenant_id: TenantId,
    pub attempt: i64,
    /// `Running`, then the run's final status.
    #[sqlx(try_from = "String")]
    pub status: RunStatus,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub error: String,
}

impl Store {
    /// Start a job for a run just claimed.
    pub async fn start_job(
        &self,
        run_id: &RunId,
        tenant_id: &TenantId,
        now_ms: i64,
    ) -> Result<String, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let job_id = uuid::Uuid::new_v4().hyphenated().to_string();
        let sql = "INSERT INTO jobs (job_id, run_id, tenant_id, attempt, status, started_at_ms) \
                   VALUES ($1, $2, $3, (SELECT COUNT(*) + 1 FROM jobs WHERE run_id = $2), $5, $4)";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(&job_id)
            .bind(run_id.as_str())
            .bind(tenant_id.as_str())
            .bind(now_ms)
            .bind(RunStatus::Running.as_str())
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(job_id)
    }

    pub async fn finish_job(
        &self,
        job_id: &str,
        status: RunStatus,
        error: &str,
        now_ms: i64,
    ) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "UPDATE jobs SET status = $2, error = $3, finished_at_ms = $4 WHERE job_id = $1 AND status = $5";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(job_id)
            .bind(status.as_str())
            .bind(error)
            .bind(now_ms)
            .bind(RunStatus::Running.as_str())
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    pub async fn jobs(
        &self,
        tenant_id: &TenantId,
        run_id: &RunId,
    ) -> Result<Vec<JobRow>, sqlx::Error> {
        let sql = "SELECT job_id, run_id, tenant_id, attempt, status, started_at_ms, finished_at_ms, error \
                   FROM jobs WHERE run_id = $1 AND tenant_id = $2 ORDER BY attempt";
        with_pool!(self.db, pool => sqlx::query_as::<_, JobRow>(sql).bind(run_id.as_str()).bind(tenant_id.as_str()).fetch_all(pool).await)
    }
}
