//! The append committer's own SQLite connection, driven on the committer's
//! task.
//!
//! sqlx runs every SQLite connection on a thread of its own, so each batch
//! was a message to that thread (a futex wake-up) and an answer back (an
//! eventfd wake-up of the runtime): two cross-thread wake-ups per batch,
//! two batches per tool call. Under `ithaca-bench`'s load those hand-offs
//! cost `ithaca up` more CPU than the SQL they carried (stop 46's profile:
//! `futex`, the eventfd `write` and the `epoll_wait` after them). A batch
//! runs in tens of microseconds and waits for no disk: in WAL mode with
//! `synchronous=NORMAL` a commit appends to the log without `fsync`, and
//! checkpoints are the checkpointer's, on the pool. So the committer runs
//! it here, on its own task. The one commit that does sync, the first after
//! a checkpoint copied the whole log (it starts the log over and syncs the
//! new header), goes to a pool connection instead
//! (`Db::write_turn`, asked once the batch's turn at the write gate has
//! come), so no `fsync` blocks the runtime.
//!
//! The connection sets the pool's writer pragmas, and the committer holds
//! the write gate while it writes, as every writer of this process does, so
//! it never waits for another writer of this process; a writer in another
//! process (none in a normal deployment) makes it wait at most
//! [`BUSY_TIMEOUT`], after which the batch fails and its callers hear so.

use super::{
    AppendJob, AppendScope, RESERVE, SizedTexts, made_once, numbered, runs, sized_texts, strictest,
};
use crate::model::Status;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use std::path::Path;
use std::sync::LazyLock;
use std::time::Duration;

/// How long a batch waits for a writer of another process.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

/// Distinct batch sizes whose statements stay prepared.
const STATEMENTS_KEPT: usize = 64;

/// The committer's connection.
pub(super) struct Inline {
    conn: Connection,
}

impl Inline {
    /// Open `path` (the service's database, already migrated) for writing.
    pub(super) fn open(path: &Path) -> rusqlite::Result<Self> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        for (name, value) in ithaca_kit::db::SQLITE_WRITER_PRAGMAS {
            conn.pragma_update(None, name, value)?;
        }
        conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
        Ok(Inline { conn })
    }

    /// Commit `jobs` (in runs, see [`runs`]) in one transaction: each
    /// append's seq, or `None` where its session does not take it. On an
    /// error nothing of the batch is written.
    pub(super) fn commit(&mut self, jobs: &[AppendJob]) -> rusqlite::Result<Vec<Option<i64>>> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut seqs = Vec::with_capacity(jobs.len());
        for run in runs(jobs) {
            match append_run(&tx, &strictest(run), run)? {
                Some(last) => seqs.extend(numbered(last, run.len())),
                // Refused as a whole (a closed session, a foreign tenant):
                // each append is judged by its own rule.
                None => {
                    for job in run {
                        seqs.push(append_run(&tx, &job.scope(), std::slice::from_ref(job))?);
                    }
                }
            }
        }
        tx.commit()?;
        Ok(seqs)
    }
}

/// Reserve `run.len()` seqs under `scope` and insert the run's events
/// numbered from them: the run's last seq, or `None` (nothing written)
/// when the session does not take the run.
fn append_run(
    tx: &rusqlite::Transaction<'_>,
    scope: &AppendScope<'_>,
    run: &[AppendJob],
) -> rusqlite::Result<Option<i64>> {
    let n = run.len() as i64;
    let mut reserve = tx.prepare_cached(&RESERVE_INDEXED)?;
    reserve.raw_bind_parameter(1, scope.session_id.as_str())?;
    reserve.raw_bind_parameter(2, scope.tenant_id.as_str())?;
    reserve.raw_bind_parameter(3, scope.now_ms)?;
    reserve.raw_bind_parameter(4, scope.closed_since_ms.unwrap_or(i64::MAX))?;
    reserve.raw_bind_parameter(5, Status::Open.as_str())?;
    reserve.raw_bind_parameter(6, Status::Closed.as_str())?;
    reserve.raw_bind_parameter(7, n)?;
    reserve.raw_bind_parameter(8, scope.current_for.unwrap_or(""))?;
    let last = {
        let mut rows = reserve.raw_query();
        match rows.next()? {
            Some(row) => row.get::<_, i64>(0)?,
            None => return Ok(None),
        }
    };
    static INSERTS: SizedTexts = sized_texts();
    let mut insert = tx.prepare_cached(&made_once(&INSERTS, run.len(), insert_sql))?;
    insert.raw_bind_parameter(1, scope.session_id.as_str())?;
    insert.raw_bind_parameter(2, last - n)?;
    for (row, job) in run.iter().enumerate() {
        let p = 3 + row * 4;
        insert.raw_bind_parameter(p, job.event.event_type)?;
        insert.raw_bind_parameter(p + 1, job.event.payload.as_str())?;
        insert.raw_bind_parameter(p + 2, job.now_ms)?;
        insert.raw_bind_parameter(p + 3, job.event.trace_id.as_str())?;
    }
    insert.raw_execute()?;
    Ok(Some(last))
}

/// [`RESERVE`] with its `$N` parameters as `?N`, which SQLite binds by
/// that number (a `$N` is a name, numbered by where it first appears);
/// made once, since every batch looks its statement up by this text.
static RESERVE_INDEXED: LazyLock<String> = LazyLock::new(|| indexed(RESERVE));

/// `sql` with its `$N` parameters as `?N`.
fn indexed(sql: &str) -> String {
    sql.replace('$', "?")
}

/// Insert `rows` events of session `?1` numbered after `?2`, each with
/// its type, payload, time and trace id from `?3` on.
fn insert_sql(rows: usize) -> String {
    use std::fmt::Write;
    let mut sql = String::with_capacity(120 + rows * 32);
    sql.push_str(
        "INSERT INTO trace_events (session_id, seq, event_type, payload, created_at_ms, trace_id) VALUES ",
    );
    for row in 0..rows {
        let p = 3 + row * 4;
        let sep = if row == 0 { "" } else { ", " };
        let _ = write!(
            sql,
            "{sep}(?1, ?2 + {}, ?{p}, ?{}, ?{}, ?{})",
            row + 1,
            p + 1,
            p + 2,
            p + 3
        );
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_insert_numbers_each_row_after_the_first_seq_and_binds_four_values_a_row() {
        assert_eq!(
            insert_sql(2),
            "INSERT INTO trace_events (session_id, seq, event_type, payload, created_at_ms, trace_id) \
             VALUES (?1, ?2 + 1, ?3, ?4, ?5, ?6), (?1, ?2 + 2, ?7, ?8, ?9, ?10)"
        );
        assert_eq!(indexed("a = $7 AND b = $12"), "a = ?7 AND b = ?12");
    }
}
