//! The session service's SQL, one text for SQLite and PostgreSQL.
//!
//! The gap-free `seq`: every append increments `sessions.last_seq` and
//! inserts the event in one transaction. The increment locks the session row
//! (PostgreSQL) or the database (SQLite), so appenders to one session commit
//! one after another in `seq` order, and a rolled-back append returns its
//! number. Readers therefore never see `seq` N+1 before N.

use crate::model::Status;
use ithaca_kit::db::{Db, Migrations, Pool};
use ithaca_kit::id::{SessionId, TenantId};
use ithaca_kit::with_pool;
use sqlx::Connection;
use sqlx::migrate::Migrator;
use sqlx::pool::PoolConnection;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

mod inline;

static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

/// This service's migrations, and its SQLite file's page size.
///
/// Every append rewrites whole pages into the write-ahead log: the trace's
/// last leaf, its key's index leaf and the session's row, about three and
/// a half pages a commit whatever the event's size. With SQLite's 4 KiB
/// pages a 250-byte event wrote 13.8 KiB of log; with 1 KiB pages it
/// writes 4.8 KiB (900-byte events: 15.1 → 5.9 KiB; 3,000-byte: 21.3 →
/// 8.0), and the checkpoints copy and flush that much less. Reads of a
/// trace cost a little more (a tenth to a quarter, more pages to walk).
/// Measured in docs/perf/edge-rebuild.md (stop 51).
pub const MIGRATIONS: Migrations = Migrations {
    sqlite: &SQLITE,
    postgres: &POSTGRES,
    sqlite_page_size: Some(SESSION_PAGE_SIZE),
};

/// The page size of a new SQLite session database, in bytes.
pub const SESSION_PAGE_SIZE: u32 = 1024;

/// A session row.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct SessionRow {
    #[sqlx(try_from = "String")]
    pub session_id: SessionId,
    #[sqlx(try_from = "String")]
    pub tenant_id: TenantId,
    pub agent_id: String,
    pub title: String,
    #[sqlx(try_from = "String")]
    pub status: Status,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub closed_at_ms: Option<i64>,
    pub last_seq: i64,
    pub prompt_count: i64,
    /// The object the session was opened on, set by a person (both or neither).
    pub subject_kind: Option<String>,
    pub subject_id: Option<String>,
}

const SESSION_COLUMNS: &str = "session_id, tenant_id, agent_id, title, status, created_at_ms, \
     updated_at_ms, closed_at_ms, last_seq, prompt_count, subject_kind, subject_id";

/// A prompt row.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct PromptRow {
    pub position: i64,
    pub text: String,
    pub created_at_ms: i64,
}

/// A stored trace event.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct EventRow {
    #[sqlx(try_from = "String")]
    pub session_id: SessionId,
    pub seq: i64,
    pub event_type: String,
    /// JSON object text.
    pub payload: String,
    pub created_at_ms: i64,
    pub trace_id: String,
}

/// An event to append; the store assigns `seq`.
#[derive(Clone, Debug)]
pub struct NewEvent {
    pub event_type: &'static str,
    pub payload: String,
    pub trace_id: String,
}

/// Why an append or resume touched no row.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No such session in this tenant.
    NotFound,
    /// The session exists but is not open (its status).
    NotOpen(Status),
}

/// Who is appending and under what rules.
#[derive(Clone, Copy, Debug)]
pub struct AppendScope<'a> {
    pub tenant_id: &'a TenantId,
    pub session_id: &'a SessionId,
    pub now_ms: i64,
    /// Accept the append into a session closed at or after this time (the
    /// in-flight grace); `None` accepts open sessions only.
    pub closed_since_ms: Option<i64>,
    /// Accept it only while the session is this agent's current one (a
    /// `BeginCall` that took the current session from its cache: the
    /// append itself checks the cache was right).
    pub current_for: Option<&'a str>,
}

/// Allocate `n` consecutive seqs of one session inside `$tx`, under the
/// rules of `$scope`: evaluates to `Ok(Some(last))` (the seqs are
/// `last - n + 1 ..= last`), or `Ok(None)` when the session does not take
/// appends under those rules. (The committer reserves a whole run's seqs
/// in its one statement, [`run_sql`]; this is for the appends made one at
/// a time.)
macro_rules! reserve_seqs_in_tx {
    ($tx:expr, $scope:expr, $n:expr) => {{
        let query = sqlx::query_scalar::<_, i64>(RESERVE);
        bind_reservation!(query, $scope, $n)
            .fetch_optional(&mut *$tx)
            .await
    }};
}

/// Take `$7` seqs of session `$1` in tenant `$2` at time `$3`, if it is open
/// (`$5`) or closed (`$6`) no earlier than `$4`, and (unless `$8` is empty)
/// it is agent `$8`'s current session; returns its new `last_seq`.
const RESERVE: &str = "UPDATE sessions SET last_seq = last_seq + $7, updated_at_ms = $3 \
     WHERE session_id = $1 AND tenant_id = $2 \
     AND (status = $5 OR (status = $6 AND closed_at_ms >= $4)) \
     AND ($8 = '' OR EXISTS (SELECT 1 FROM current_sessions AS c \
          WHERE c.tenant_id = $2 AND c.agent_id = $8 AND c.session_id = $1)) \
     RETURNING last_seq";

/// Bind [`RESERVE`]'s eight parameters to `$query`: `$n` seqs under the
/// rules of `$scope`.
macro_rules! bind_reservation {
    ($query:expr, $scope:expr, $n:expr) => {{
        let scope: &AppendScope<'_> = $scope;
        let n: i64 = $n;
        $query
            .bind(scope.session_id.as_str())
            .bind(scope.tenant_id.as_str())
            .bind(scope.now_ms)
            .bind(scope.closed_since_ms.unwrap_or(i64::MAX))
            .bind(Status::Open.as_str())
            .bind(Status::Closed.as_str())
            .bind(n)
            .bind(scope.current_for.unwrap_or(""))
    }};
}

/// Allocate the next seq of a session and insert one event, inside `$tx`.
/// Evaluates to `Ok(Some(seq))`, or `Ok(None)` when the session is not
/// appendable.
macro_rules! append_in_tx {
    ($tx:expr, $scope:expr, $event:expr) => {{
        let scope: &AppendScope<'_> = $scope;
        let event: &NewEvent = $event;
        let seq: Option<i64> = reserve_seqs_in_tx!($tx, scope, 1)?;
        if let Some(seq) = seq {
            sqlx::query(
                "INSERT INTO trace_events (session_id, seq, event_type, payload, created_at_ms, trace_id) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(scope.session_id.as_str())
            .bind(seq)
            .bind(event.event_type)
            .bind(&event.payload)
            .bind(scope.now_ms)
            .bind(&event.trace_id)
            .execute(&mut *$tx)
            .await?;
        }
        Ok::<Option<i64>, sqlx::Error>(seq)
    }};
}

/// [`run_sql`]'s text `$sql` with a run's parameters bound: the
/// reservation's, each append's four, and last the notify channel.
macro_rules! run_query {
    ($sql:expr, $run:expr, $channel:expr) => {{
        let run: &[AppendJob] = $run;
        let query = sqlx::query_scalar::<_, i64>($sql);
        let mut query = bind_reservation!(query, &strictest(run), run.len() as i64);
        for job in run {
            query = query
                .bind(job.event.event_type)
                .bind(job.event.payload.as_str())
                .bind(job.now_ms)
                .bind(job.event.trace_id.as_str());
        }
        let channel: &str = $channel;
        // Bound last; SQLite's texts do not name it and ignore it.
        query.bind(channel)
    }};
}

/// Commit one run of appends with [`run_sql`]'s text `$sql` on `$conn`
/// (a connection, or an open transaction): evaluates to the run's last seq,
/// or `None` when the session refused the run.
macro_rules! run_in {
    ($conn:expr, $sql:expr, $run:expr, $channel:expr) => {{
        // All rows: SQLite's script stops at the first row when told to
        // fetch one, and the insert and commit follow the update's row.
        run_query!($sql, $run, $channel)
            .fetch_all($conn)
            .await
            .map(|rows| rows.last().copied())
    }};
}

/// [`run_in!`] for [`Dialect::PostgresAt`]: the run lands only on top of
/// `$at`, the session's `last_seq` as the committer last saw it.
macro_rules! run_at {
    ($conn:expr, $sql:expr, $run:expr, $channel:expr, $at:expr) => {{
        let at: i64 = $at;
        run_query!($sql, $run, $channel)
            .bind(at)
            .fetch_optional($conn)
            .await
    }};
}

/// Upsert the (tenant, agent) → session mapping inside `$tx`.
macro_rules! set_current_in_tx {
    ($tx:expr, $tenant:expr, $agent:expr, $session:expr, $now:expr) => {
        sqlx::query(
            "INSERT INTO current_sessions (tenant_id, agent_id, session_id, updated_at_ms) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (tenant_id, agent_id) \
             DO UPDATE SET session_id = excluded.session_id, updated_at_ms = excluded.updated_at_ms",
        )
        .bind($tenant)
        .bind($agent)
        .bind($session)
        .bind($now)
        .execute(&mut *$tx)
        .await
    };
}

/// What a page of the session list asks for.
#[derive(Clone, Copy, Debug)]
pub struct ListQuery<'a> {
    pub tenant_id: &'a str,
    pub status: Option<&'a str>,
    pub agent_id: Option<&'a str>,
    /// Only sessions opened on this subject (kind, id).
    pub subject: Option<(&'a str, &'a str)>,
    /// Only sessions before this `(created_at_ms, session_id)` cursor.
    pub before: Option<(i64, &'a str)>,
    pub limit: i64,
}

/// The session tables.
#[derive(Clone, Debug)]
pub struct Store {
    db: Db,
    /// The group-commit queue of appends, started on first use.
    appends: Arc<OnceLock<mpsc::Sender<AppendJob>>>,
}

/// Appends committed together in one transaction, at most.
const MAX_BATCH: usize = 256;

/// One queued append and where its outcome goes.
struct AppendJob {
    tenant_id: TenantId,
    session_id: SessionId,
    now_ms: i64,
    closed_since_ms: Option<i64>,
    current_for: Option<String>,
    event: NewEvent,
    /// The seq it was given (None: the session does not take it), sent only
    /// after the transaction holding it committed.
    reply: oneshot::Sender<Result<Option<i64>, String>>,
}

impl AppendJob {
    fn scope(&self) -> AppendScope<'_> {
        AppendScope {
            tenant_id: &self.tenant_id,
            session_id: &self.session_id,
            now_ms: self.now_ms,
            closed_since_ms: self.closed_since_ms,
            current_for: self.current_for.as_deref(),
        }
    }
}

impl Store {
    pub fn new(db: Db) -> Self {
        Store {
            db,
            appends: Arc::new(OnceLock::new()),
        }
    }

    /// The append queue, with its committer started on first use. One per
    /// process: SQLite has one writer anyway, and on PostgreSQL one
    /// committer measured 2.2× the appends of four when 16 writers share a
    /// session (the four queued on that session's row lock with smaller
    /// batches). Replicas each run one; a batch locks its sessions' rows in
    /// session-id order, so committers of different replicas never deadlock.
    fn append_queue(&self) -> mpsc::Sender<AppendJob> {
        self.appends
            .get_or_init(|| {
                let (tx, rx) = mpsc::channel::<AppendJob>(4 * MAX_BATCH);
                tokio::spawn(commit_appends(self.db.clone(), rx));
                tx
            })
            .clone()
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Create a session with its first prompt and opening events, and make
    /// it the agent's current session. Returns the events with their seqs.
    pub async fn create(
        &self,
        row: &SessionRow,
        prompt: &str,
        events: &[NewEvent],
    ) -> Result<Vec<EventRow>, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let scope = AppendScope {
            tenant_id: &row.tenant_id,
            session_id: &row.session_id,
            now_ms: row.created_at_ms,
            closed_since_ms: None,
            current_for: None,
        };
        let insert_session = format!(
            "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, 1, $9, $10)"
        );
        let seqs = with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(&insert_session)
                .bind(row.session_id.as_str())
                .bind(row.tenant_id.as_str())
                .bind(&row.agent_id)
                .bind(&row.title)
                .bind(row.status.as_str())
                .bind(row.created_at_ms)
                .bind(row.updated_at_ms)
                .bind(row.closed_at_ms)
                .bind(row.subject_kind.as_deref())
                .bind(row.subject_id.as_deref())
                .execute(&mut *tx)
                .await?;
            sqlx::query("INSERT INTO prompts (session_id, position, text, created_at_ms) VALUES ($1, 1, $2, $3)")
                .bind(row.session_id.as_str())
                .bind(prompt)
                .bind(row.created_at_ms)
                .execute(&mut *tx)
                .await?;
            set_current_in_tx!(tx, row.tenant_id.as_str(), &row.agent_id, row.session_id.as_str(), row.created_at_ms)?;
            let mut seqs = Vec::with_capacity(events.len());
            for event in events {
                seqs.push(append_in_tx!(tx, &scope, event)?);
            }
            if let Some(Some(last)) = seqs.last() {
                notify_in_tx(&self.db, &mut tx, &row.session_id, *last).await?;
            }
            tx.commit().await?;
            seqs
        });
        Ok(stored(&scope, events, &seqs))
    }

    /// Resume an open session: append the prompt to its history, record the
    /// events and make it the agent's current session.
    pub async fn resume(
        &self,
        scope: &AppendScope<'_>,
        agent_id: &str,
        prompt: Option<&str>,
        events: &[NewEvent],
    ) -> Result<Result<Vec<EventRow>, Refusal>, sqlx::Error> {
        // Without a prompt the session's prompts stay as they are.
        let added = i64::from(prompt.is_some());
        let outcome = {
            let _gate = self.db.write_gate().await;
            with_pool!(self.db, pool => {
                let mut tx = pool.begin().await?;
                let position: Option<i64> = sqlx::query_scalar(
                    "UPDATE sessions SET prompt_count = prompt_count + $5, updated_at_ms = $3 \
                     WHERE session_id = $1 AND tenant_id = $2 AND status = $4 RETURNING prompt_count",
                )
                .bind(scope.session_id.as_str())
                .bind(scope.tenant_id.as_str())
                .bind(scope.now_ms)
                .bind(Status::Open.as_str())
                .bind(added)
                .fetch_optional(&mut *tx)
                .await?;
                match position {
                    None => None,
                    Some(position) => {
                        if let Some(prompt) = prompt {
                            sqlx::query("INSERT INTO prompts (session_id, position, text, created_at_ms) VALUES ($1, $2, $3, $4)")
                                .bind(scope.session_id.as_str())
                                .bind(position)
                                .bind(prompt)
                                .bind(scope.now_ms)
                                .execute(&mut *tx)
                                .await?;
                        }
                        set_current_in_tx!(tx, scope.tenant_id.as_str(), agent_id, scope.session_id.as_str(), scope.now_ms)?;
                        let mut seqs = Vec::with_capacity(events.len());
                        for event in events {
                            seqs.push(append_in_tx!(tx, scope, event)?);
                        }
                        if let Some(Some(last)) = seqs.last() {
                            notify_in_tx(&self.db, &mut tx, scope.session_id, *last).await?;
                        }
                        tx.commit().await?;
                        Some(seqs)
                    }
                }
            })
        };
        match outcome {
            Some(seqs) => Ok(Ok(stored(scope, events, &seqs))),
            None => Ok(Err(self.refusal(scope.tenant_id, scope.session_id).await?)),
        }
    }

    /// Append one event. `Err(Refusal)` when the session is missing or does
    /// not accept events.
    /// Append one event. Appends waiting at the same time commit together
    /// in one transaction (group commit), each session's in the order they
    /// were submitted; the caller hears back only after that commit.
    pub async fn append(
        &self,
        scope: &AppendScope<'_>,
        event: &NewEvent,
    ) -> Result<Result<EventRow, Refusal>, sqlx::Error> {
        let (reply, outcome) = oneshot::channel();
        let job = AppendJob {
            tenant_id: scope.tenant_id.clone(),
            session_id: scope.session_id.clone(),
            now_ms: scope.now_ms,
            closed_since_ms: scope.closed_since_ms,
            current_for: scope.current_for.map(str::to_owned),
            event: event.clone(),
            reply,
        };
        let unavailable = |why: String| sqlx::Error::Io(std::io::Error::other(why));
        self.append_queue()
            .send(job)
            .await
            .map_err(|_| unavailable("the append queue stopped".to_owned()))?;
        let seq = outcome
            .await
            .map_err(|_| unavailable("the append committer stopped".to_owned()))?
            .map_err(unavailable)?;
        match seq {
            Some(seq) => Ok(Ok(event_row(scope, event, seq))),
            None => Ok(Err(self.refusal(scope.tenant_id, scope.session_id).await?)),
        }
    }

    async fn refusal(
        &self,
        tenant_id: &TenantId,
        session_id: &SessionId,
    ) -> Result<Refusal, sqlx::Error> {
        Ok(match self.get(tenant_id, session_id).await? {
            None => Refusal::NotFound,
            Some(row) => Refusal::NotOpen(row.status),
        })
    }

    pub async fn get(
        &self,
        tenant_id: &TenantId,
        session_id: &SessionId,
    ) -> Result<Option<SessionRow>, sqlx::Error> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = $1 AND tenant_id = $2"
            )
        });
        with_pool!(self.db, pool => sqlx::query_as::<_, SessionRow>(&SQL)
            .bind(session_id.as_str())
            .bind(tenant_id.as_str())
            .fetch_optional(pool)
            .await)
    }

    /// The agent's current session, whatever its status.
    pub async fn current(
        &self,
        tenant_id: &TenantId,
        agent_id: &str,
    ) -> Result<Option<SessionRow>, sqlx::Error> {
        // Built once: every `BeginCall` without a pinned session reads it.
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!(
                "SELECT {} FROM sessions s JOIN current_sessions c ON c.session_id = s.session_id \
                 WHERE c.tenant_id = $1 AND c.agent_id = $2 AND s.tenant_id = $1",
                SESSION_COLUMNS
                    .split(", ")
                    .map(|c| format!("s.{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
        with_pool!(self.db, pool => sqlx::query_as::<_, SessionRow>(&SQL)
            .bind(tenant_id.as_str())
            .bind(agent_id)
            .fetch_optional(pool)
            .await)
    }

    /// Move a session from `from` to `to`. Returns whether a row changed.
    /// On PostgreSQL the update waits for appends holding the row, so
    /// in-flight appends finish before the status changes.
    pub async fn transition(
        &self,
        tenant_id: &TenantId,
        session_id: &SessionId,
        from: Status,
        to: Status,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        // Closing stamps `closed_at_ms`, which starts the in-flight grace.
        let closed_at_ms = (to == Status::Closed).then_some(now_ms);
        let sql = "UPDATE sessions SET status = $4, updated_at_ms = $5, \
                   closed_at_ms = COALESCE($6, closed_at_ms) \
                   WHERE session_id = $1 AND tenant_id = $2 AND status = $3";
        let n = with_pool!(self.db, pool => sqlx::query(sql)
            .bind(session_id.as_str())
            .bind(tenant_id.as_str())
            .bind(from.as_str())
            .bind(to.as_str())
            .bind(now_ms)
            .bind(closed_at_ms)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(n > 0)
    }

    /// Forget the agent's current session if it is `session_id`.
    pub async fn clear_current(
        &self,
        tenant_id: &TenantId,
        session_id: &SessionId,
    ) -> Result<(), sqlx::Error> {
        let _gate = self.db.write_gate().await;
        let sql = "DELETE FROM current_sessions WHERE tenant_id = $1 AND session_id = $2";
        with_pool!(self.db, pool => sqlx::query(sql)
            .bind(tenant_id.as_str())
            .bind(session_id.as_str())
            .execute(pool)
            .await
            .map(|r| r.rows_affected()))?;
        Ok(())
    }

    /// A page of a tenant's sessions, newest first: those created before the
    /// `after` cursor `(created_at_ms, session_id)`, optionally of one status
    /// and one agent.
    pub async fn list(&self, query: &ListQuery<'_>) -> Result<Vec<SessionRow>, sqlx::Error> {
        let (before_ms, before_id) = query.before.unwrap_or((i64::MAX, ""));
        let sql = format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant_id = $1 \
             AND ($2 = '' OR status = $2) AND ($3 = '' OR agent_id = $3) \
             AND (created_at_ms < $4 OR (created_at_ms = $4 AND session_id < $5)) \
             AND ($7 = '' OR (subject_kind = $7 AND subject_id = $8)) \
             ORDER BY created_at_ms DESC, session_id DESC LIMIT $6"
        );
        let (subject_kind, subject_id) = query.subject.unwrap_or(("", ""));
        with_pool!(self.db, pool => sqlx::query_as::<_, SessionRow>(&sql)
            .bind(query.tenant_id)
            .bind(query.status.unwrap_or(""))
            .bind(query.agent_id.unwrap_or(""))
            .bind(before_ms)
            .bind(before_id)
            .bind(query.limit)
            .bind(subject_kind)
            .bind(subject_id)
            .fetch_all(pool)
            .await)
    }

    pub async fn prompts(&self, session_id: &SessionId) -> Result<Vec<PromptRow>, sqlx::Error> {
        let sql = "SELECT position, text, created_at_ms FROM prompts WHERE session_id = $1 ORDER BY position";
        with_pool!(self.db, pool => sqlx::query_as::<_, PromptRow>(sql)
            .bind(session_id.as_str())
            .fetch_all(pool)
            .await)
    }

    /// Events with `seq > after_seq`, oldest first, at most `limit`. The
    /// caller has checked that the session belongs to its tenant.
    pub async fn read(
        &self,
        session_id: &SessionId,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>, sqlx::Error> {
        let hot = self
            .read_from("trace_events", session_id, after_seq, limit)
            .await?;
        if !hot.is_empty() {
            return Ok(hot);
        }
        // An archived session's events moved out of the hot table.
        self.read_from("trace_events_archive", session_id, after_seq, limit)
            .await
    }

    async fn read_from(
        &self,
        table: &str,
        session_id: &SessionId,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>, sqlx::Error> {
        let sql = format!(
            "SELECT session_id, seq, event_type, payload, created_at_ms, trace_id \
             FROM {table} WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, EventRow>(&sql)
            .bind(session_id.as_str())
            .bind(after_seq)
            .bind(limit)
            .fetch_all(pool)
            .await)
    }

    /// Sessions in `status` whose last change (for open ones) or close (for
    /// closed ones) is older than `before_ms`, at most `limit`, oldest
    /// first. Closed ones come from the index on `(status, closed_at_ms)`;
    /// open ones from a scan of the open sessions, since no index holds
    /// `updated_at_ms`, which every append changes (migration 0004 on
    /// SQLite, 0005 on PostgreSQL).
    pub async fn stale(
        &self,
        status: Status,
        before_ms: i64,
        limit: i64,
    ) -> Result<Vec<(TenantId, SessionId)>, sqlx::Error> {
        let column = if status == Status::Closed {
            "closed_at_ms"
        } else {
            "updated_at_ms"
        };
        let sql = format!(
            "SELECT tenant_id, session_id FROM sessions WHERE status = $1 AND {column} < $2 \
             ORDER BY {column} LIMIT $3"
        );
        let rows: Vec<(String, String)> = with_pool!(self.db, pool => sqlx::query_as(&sql)
            .bind(status.as_str())
            .bind(before_ms)
            .bind(limit)
            .fetch_all(pool)
            .await)?;
        Ok(rows
            .into_iter()
            .filter_map(|(t, s)| Some((TenantId::parse(&t).ok()?, SessionId::parse(&s).ok()?)))
            .collect())
    }

    /// Archive a closed session: its events move to the archive table and
    /// its status becomes `archived`, in one transaction. False when it was
    /// not closed.
    pub async fn archive(
        &self,
        tenant_id: &TenantId,
        session_id: &SessionId,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let _gate = self.db.write_gate().await;
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            let changed = sqlx::query(
                "UPDATE sessions SET status = $3, updated_at_ms = $4 \
                 WHERE session_id = $1 AND tenant_id = $2 AND status = $5",
            )
            .bind(session_id.as_str())
            .bind(tenant_id.as_str())
            .bind(Status::Archived.as_str())
            .bind(now_ms)
            .bind(Status::Closed.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if changed == 0 {
                return Ok(false);
            }
            sqlx::query(
                "INSERT INTO trace_events_archive (session_id, seq, event_type, payload, created_at_ms, trace_id) \
                 SELECT session_id, seq, event_type, payload, created_at_ms, trace_id \
                 FROM trace_events WHERE session_id = $1",
            )
            .bind(session_id.as_str())
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM trace_events WHERE session_id = $1")
                .bind(session_id.as_str())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(true)
        })
    }
}

/// How long the committer keeps its connection while no append is waiting;
/// after that it goes back to the pool (and is health-checked when taken
/// again), so a quiet service holds no connection a server could time out.
const HOLD_IDLE: Duration = Duration::from_secs(1);

/// The committer's own connection, kept across batches while appends keep
/// coming. Taking one from the pool for each batch handed SQLite a
/// different connection each time, whose page cache was stale (every
/// commit re-read the pages it touched) and whose statement cache had not
/// seen this batch size yet.
enum Held {
    /// SQLite in memory (no second connection could open it), and a file's
    /// batch that starts the write-ahead log over: a pool connection.
    Sqlite(PoolConnection<sqlx::Sqlite>),
    Postgres(PoolConnection<sqlx::Postgres>),
    /// A SQLite file: the committer's own connection, driven on its task
    /// ([`inline`]).
    Inline(inline::Inline),
}

impl Held {
    async fn take(db: &Db) -> Result<Held, sqlx::Error> {
        if let Some(file) = db.sqlite_file() {
            return inline::Inline::open(file)
                .map(Held::Inline)
                .map_err(sqlite_error);
        }
        Self::pooled(db).await
    }

    /// A connection of the pool, whatever the database.
    async fn pooled(db: &Db) -> Result<Held, sqlx::Error> {
        Ok(match db.pool() {
            Pool::Sqlite(pool) => Held::Sqlite(pool.acquire().await?),
            Pool::Postgres(pool) => Held::Postgres(pool.acquire().await?),
        })
    }

    /// After a failed batch: the connection may be broken, so it is closed
    /// rather than returned, and the next batch takes a fresh one.
    fn discard(self) {
        match self {
            Held::Sqlite(mut conn) => conn.close_on_drop(),
            Held::Postgres(mut conn) => conn.close_on_drop(),
            Held::Inline(conn) => drop(conn),
        }
    }
}

/// A committer: take the waiting appends (up to [`MAX_BATCH`]), commit them
/// in one transaction, then tell each caller its seq. When the transaction
/// fails, nothing of the batch was written and every caller hears so.
async fn commit_appends(db: Db, mut queue: mpsc::Receiver<AppendJob>) {
    let mut held: Option<Held> = None;
    let mut known = Known::default();
    loop {
        let mut jobs = {
            let first = match queue.try_recv() {
                Ok(job) => job,
                Err(_) => match tokio::time::timeout(HOLD_IDLE, queue.recv()).await {
                    Ok(Some(job)) => job,
                    Ok(None) => return,
                    Err(_) => {
                        held = None;
                        match queue.recv().await {
                            Some(job) => job,
                            None => return,
                        }
                    }
                },
            };
            let mut jobs = vec![first];
            while jobs.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
            jobs
        };
        // Lock session rows in one order across committers; a stable sort
        // keeps each session's appends in submission order. The tenant comes
        // second so that each (session, tenant) is one run: a run's
        // statement takes its session's row once.
        jobs.sort_by(|a, b| {
            (a.session_id.as_str(), a.tenant_id.as_str(), &a.current_for).cmp(&(
                b.session_id.as_str(),
                b.tenant_id.as_str(),
                &b.current_for,
            ))
        });
        let outcome = match commit_alone(&db, &mut held, &mut known, &jobs).await {
            Some(outcome) => outcome,
            None => commit_held(&db, &mut held, &jobs).await,
        };
        if let Ok(seqs) = &outcome {
            known.record(&jobs, seqs);
        }
        match outcome {
            Ok(seqs) => {
                for (job, seq) in jobs.into_iter().zip(seqs) {
                    let _ = job.reply.send(Ok(seq));
                }
            }
            Err(err) => {
                tracing::error!(error = %err, appends = jobs.len(), "committing trace appends failed");
                for job in jobs {
                    let _ = job.reply.send(Err(format!("database: {err}")));
                }
            }
        }
    }
}

/// The last seq of each session as this committer's own commits left it.
/// A one-statement commit ([`commit_alone`]) applies only on top of it.
#[derive(Default)]
struct Known(HashMap<SessionId, i64>);

impl Known {
    /// Sessions remembered at most; past it the map starts over (a session
    /// not in it is committed the longer way once).
    const MAX: usize = 4096;

    fn record(&mut self, jobs: &[AppendJob], seqs: &[Option<i64>]) {
        if self.0.len() >= Self::MAX {
            self.0.clear();
        }
        for (job, seq) in jobs.iter().zip(seqs) {
            if let Some(seq) = *seq {
                let last = self.0.entry(job.session_id.clone()).or_insert(seq);
                *last = (*last).max(seq);
            }
        }
    }
}

/// On PostgreSQL, a batch of one run to a session this committer knows is
/// committed as one statement, its own transaction: one trip to the server
/// instead of three (`BEGIN`, the run, `COMMIT`), the flush of the commit
/// unchanged.
///
/// The statement reserves its seqs only while the session's `last_seq` is
/// the one [`Known`] holds, so it can land at that one place or nowhere.
/// That makes a failure (the server ended the kept connection, say) safe to
/// send again once, on a fresh connection: if the first one landed after
/// all, the second finds the session moved and writes nothing, and if the
/// second lands, the first, should it still run, finds it moved. A second
/// attempt that finds the session moved cannot tell whose doing that was,
/// so the batch is reported as failed, never committed a third time.
///
/// `None` leaves the batch to [`commit_held`]: another case, or a first
/// attempt that wrote nothing because the session refused it or had moved
/// (another replica appended), where each append is then judged again.
async fn commit_alone(
    db: &Db,
    held: &mut Option<Held>,
    known: &mut Known,
    jobs: &[AppendJob],
) -> Option<Result<Vec<Option<i64>>, sqlx::Error>> {
    let Some(Held::Postgres(conn)) = held else {
        return None;
    };
    if runs(jobs).nth(1).is_some() {
        return None;
    }
    let session_id = &jobs[0].session_id;
    let before = *known.0.get(session_id)?;
    let sql = run_sql(Dialect::PostgresAt, jobs.len());
    let channel = notify_channel(db.schema());
    let first = run_at!(&mut **conn, &sql, jobs, &channel, before);
    let err = match first {
        Ok(Some(last)) => return Some(Ok(numbered(last, jobs.len()))),
        Ok(None) => return None,
        Err(err) => err,
    };
    // The connection may be broken: the second attempt takes a fresh one.
    if let Some(conn) = held.take() {
        conn.discard();
    }
    known.0.remove(session_id);
    let second = match Held::pooled(db).await {
        Ok(Held::Postgres(mut conn)) => {
            let second = run_at!(&mut *conn, &sql, jobs, &channel, before);
            if second.is_ok() {
                *held = Some(Held::Postgres(conn));
            }
            second
        }
        Ok(_) => return Some(Err(err)),
        Err(again) => Err(again),
    };
    Some(match second {
        Ok(Some(last)) => {
            tracing::warn!(error = %err, "a trace append commit failed; sent again, it landed once");
            Ok(numbered(last, jobs.len()))
        }
        // Moved: perhaps by the first attempt. Unknown, so not retried.
        Ok(None) => Err(err),
        Err(again) => Err(again),
    })
}

/// Commit a batch on the held connection (or a fresh one). A kept
/// connection that fails at `BEGIN` (the server closed it while it was
/// held) has written nothing, so the batch is tried once more on a fresh
/// connection; any other failure is the batch's.
async fn commit_held(
    db: &Db,
    held: &mut Option<Held>,
    jobs: &[AppendJob],
) -> Result<Vec<Option<i64>>, sqlx::Error> {
    // Writers of SQLite queue at the gate (free on PostgreSQL). A batch that
    // starts the write-ahead log over syncs its header to disk: it goes to
    // a pool connection (the pool's own thread, not the runtime), and the
    // held connection stays for the next batch. Whether it does is asked
    // once the turn has come: the checkpoint that copies the whole log
    // holds the gate while this batch waits.
    let turn = db.write_turn().await;
    let restart = db.sqlite_file().is_some() && turn.as_ref().is_some_and(|turn| turn.restarts_log);
    let (mut conn, kept) = match (restart, held.take()) {
        (true, keep) => {
            *held = keep;
            (Held::pooled(db).await?, false)
        }
        (false, Some(conn)) => (conn, true),
        (false, None) => (Held::take(db).await?, false),
    };
    let mut outcome = commit_batch(db, &mut conn, jobs).await;
    if kept && matches!(outcome, Err(Failed::AtBegin(_))) {
        conn.discard();
        conn = Held::take(db).await?;
        outcome = commit_batch(db, &mut conn, jobs).await;
    }
    match outcome {
        Ok(seqs) => {
            if !restart {
                *held = Some(conn);
            }
            Ok(seqs)
        }
        Err(Failed::AtBegin(err) | Failed::Later(err)) => {
            conn.discard();
            Err(err)
        }
    }
}

/// Where a batch failed: at `BEGIN` nothing of it was sent.
enum Failed {
    AtBegin(sqlx::Error),
    Later(sqlx::Error),
}

impl From<sqlx::Error> for Failed {
    fn from(err: sqlx::Error) -> Self {
        Failed::Later(err)
    }
}

async fn commit_batch(
    db: &Db,
    held: &mut Held,
    jobs: &[AppendJob],
) -> Result<Vec<Option<i64>>, Failed> {
    let channel = notify_channel(db.schema());
    // A batch of one run on SQLite is one script, its transaction included:
    // one trip to the connection's thread instead of four.
    if let Held::Sqlite(conn) = held
        && runs(jobs).nth(1).is_none()
    {
        let sql = run_sql(Dialect::SqliteAlone, jobs.len());
        if let Some(last) = run_in!(&mut **conn, &sql, jobs, &channel)? {
            return Ok(numbered(last, jobs.len()));
        }
        // Refused as a whole, and nothing of it written: each append is
        // judged by its own rule.
        let mut tx = conn.begin().await?;
        let mut seqs = Vec::with_capacity(jobs.len());
        for job in jobs {
            seqs.push(append_in_tx!(tx, &job.scope(), &job.event)?);
        }
        tx.commit().await?;
        return Ok(seqs);
    }
    macro_rules! on_held {
        ($conn:ident, $dialect:ident => $body:expr) => {
            match held {
                Held::Sqlite($conn) => {
                    let $dialect = Dialect::SqliteInTransaction;
                    $body
                }
                Held::Postgres($conn) => {
                    let $dialect = Dialect::Postgres;
                    $body
                }
                Held::Inline(conn) => {
                    return conn
                        .commit(jobs)
                        .map_err(|e| Failed::Later(sqlite_error(e)));
                }
            }
        };
    }
    on_held!(conn, dialect => {
        let mut tx = conn.begin().await.map_err(Failed::AtBegin)?;
        let mut seqs = Vec::with_capacity(jobs.len());
        for run in runs(jobs) {
            let sql = run_sql(dialect, run.len());
            match run_in!(&mut *tx, &sql, run, &channel)? {
                Some(last) => seqs.extend(numbered(last, run.len())),
                // Refused as a whole (a closed session, a foreign tenant):
                // each append is judged by its own rule.
                None => {
                    let mut last = None;
                    for job in run {
                        let seq = append_in_tx!(tx, &job.scope(), &job.event)?;
                        last = seq.or(last);
                        seqs.push(seq);
                    }
                    if let Some(seq) = last {
                        notify_in_tx(db, &mut tx, &run[0].session_id, seq).await?;
                    }
                }
            }
        }
        tx.commit().await?;
        Ok(seqs)
    })
}

/// A failure of the committer's own SQLite connection, as the pool's
/// failures are reported.
fn sqlite_error(err: rusqlite::Error) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::other(err))
}

/// The seqs of a run of `len` appends that ends at `last`.
fn numbered(last: i64, len: usize) -> Vec<Option<i64>> {
    let first = last - len as i64 + 1;
    (first..=last).map(Some).collect()
}

/// The consecutive appends of one session by one tenant (under one
/// current-session condition), in batch order.
fn runs(jobs: &[AppendJob]) -> impl Iterator<Item = &[AppendJob]> {
    jobs.chunk_by(|a, b| {
        a.session_id == b.session_id && a.tenant_id == b.tenant_id && a.current_for == b.current_for
    })
}

/// The rule that admits a run only if it admits each of its appends: the
/// latest `closed_since_ms` (open sessions only, if any append asks that),
/// and the run's latest time as the session's `updated_at_ms`.
fn strictest(run: &[AppendJob]) -> AppendScope<'_> {
    let closed_since_ms = run
        .iter()
        .map(|j| j.closed_since_ms)
        .try_fold(i64::MIN, |acc, c| c.map(|c| acc.max(c)));
    AppendScope {
        tenant_id: &run[0].tenant_id,
        session_id: &run[0].session_id,
        now_ms: run.iter().map(|j| j.now_ms).max().unwrap_or(0),
        closed_since_ms,
        current_for: run[0].current_for.as_deref(),
    }
}

/// Which text of a run's statements: SQLite's as a script of its own
/// transaction, SQLite's inside an open one, or PostgreSQL's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    SqliteAlone,
    SqliteInTransaction,
    Postgres,
    /// PostgreSQL's, taking the seqs only while the session's `last_seq`
    /// is the value bound after the channel ([`commit_alone`]).
    PostgresAt,
}

/// What commits one run of `rows` appends to one session in one trip to
/// the database: reserve the run's seqs under its strictest rule
/// ([`strictest`]), insert the rows numbered from them, and on PostgreSQL
/// announce the last one to the replicas. It yields one row, the run's last
/// seq, or none when the session refused the run (then nothing was
/// written).
///
/// Parameters: [`RESERVE`]'s eight (`$7` the run's length), four
/// an append from `$9` (type, payload, time, trace id), and last on
/// PostgreSQL the notify channel, then for [`Dialect::PostgresAt`] the
/// `last_seq` the run must find. SQLite runs the statements as a script
/// in one call, where the insert sees the update's `changes()`; PostgreSQL
/// runs one statement whose parts share the update's `RETURNING`.
fn run_sql(dialect: Dialect, rows: usize) -> Cow<'static, str> {
    static TEXTS: [SizedTexts; 4] = [const { sized_texts() }; 4];
    match TEXTS.get(dialect as usize) {
        Some(texts) => made_once(texts, rows, |rows| run_text(dialect, rows)),
        None => Cow::Owned(run_text(dialect, rows)),
    }
}

/// One SQL text per run length, each made on first use: a run is one of
/// at most [`MAX_BATCH`] lengths, so the texts of a hot path are made
/// once per process, not once per batch.
type SizedTexts = [OnceLock<String>; MAX_BATCH];

const fn sized_texts() -> SizedTexts {
    [const { OnceLock::new() }; MAX_BATCH]
}

/// The text for `rows` rows from `texts`, made by `make` the first time
/// (and each time, for a length past [`MAX_BATCH`]).
fn made_once(
    texts: &'static SizedTexts,
    rows: usize,
    make: impl FnOnce(usize) -> String,
) -> Cow<'static, str> {
    match texts.get(rows.wrapping_sub(1)) {
        Some(text) => Cow::Borrowed(text.get_or_init(|| make(rows))),
        None => Cow::Owned(make(rows)),
    }
}

/// [`run_sql`]'s text, made.
fn run_text(dialect: Dialect, rows: usize) -> String {
    use std::fmt::Write;
    let mut values = String::with_capacity(rows * 28);
    for row in 0..rows {
        let p = 9 + row * 4;
        let sep = if row == 0 { "" } else { ", " };
        let _ = write!(
            values,
            "{sep}({}, ${p}, ${}, ${}, ${})",
            row + 1,
            p + 1,
            p + 2,
            p + 3
        );
    }
    let insert = "INSERT INTO trace_events (session_id, seq, event_type, payload, created_at_ms, trace_id) \
                  SELECT $1, s.last_seq - $7 + v.column1, v.column2, v.column3, v.column4, v.column5";
    match dialect {
        Dialect::SqliteAlone | Dialect::SqliteInTransaction => {
            let (begin, commit) = if dialect == Dialect::SqliteAlone {
                ("BEGIN; ", "; COMMIT")
            } else {
                ("", "")
            };
            format!(
                "{begin}{RESERVE}; {insert} FROM sessions AS s, (VALUES {values}) AS v \
                 WHERE s.session_id = $1 AND changes() = 1{commit}"
            )
        }
        Dialect::Postgres | Dialect::PostgresAt => {
            let channel = 9 + rows * 4;
            let reserve = if dialect == Dialect::PostgresAt {
                RESERVE.replace(
                    " RETURNING last_seq",
                    &format!(" AND last_seq = ${} RETURNING last_seq", channel + 1),
                )
            } else {
                RESERVE.to_owned()
            };
            format!(
                "WITH s AS ({reserve}), \
                 i AS ({insert} FROM s, (VALUES {values}) AS v), \
                 n AS (SELECT pg_notify(${channel}, $1 || ' ' || s.last_seq) FROM s) \
                 SELECT s.last_seq FROM s, n"
            )
        }
    }
}

/// On PostgreSQL, announce the new last seq to every replica; delivered at
/// commit, so listeners never hear of an uncommitted event.
async fn notify_in_tx<DB: sqlx::Database>(
    db: &Db,
    tx: &mut sqlx::Transaction<'_, DB>,
    session_id: &str,
    seq: i64,
) -> Result<(), sqlx::Error>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    if !db.is_postgres() {
        return Ok(());
    }
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(notify_channel(db.schema()))
        .bind(format!("{session_id} {seq}"))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The LISTEN/NOTIFY channel of a schema's trace appends.
pub fn notify_channel(schema: &str) -> String {
    format!("{schema}_trace_events")
}

fn event_row(scope: &AppendScope<'_>, event: &NewEvent, seq: i64) -> EventRow {
    EventRow {
        session_id: scope.session_id.clone(),
        seq,
        event_type: event.event_type.to_owned(),
        payload: event.payload.clone(),
        created_at_ms: scope.now_ms,
        trace_id: event.trace_id.clone(),
    }
}

fn stored(scope: &AppendScope<'_>, events: &[NewEvent], seqs: &[Option<i64>]) -> Vec<EventRow> {
    events
        .iter()
        .zip(seqs)
        .filter_map(|(e, seq)| seq.map(|s| event_row(scope, e, s)))
        .collect()
}
