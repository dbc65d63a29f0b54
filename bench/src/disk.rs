//! What the alert archive costs on disk and what the PostgreSQL server
//! spends, for the alerts and filters phases.
//!
//! Disk is read from the database itself, not the file system: SQLite's
//! `dbstat` table (pages in use, the write-ahead log's included, free pages
//! not) and PostgreSQL's `pg_total_relation_size` (heap, TOAST and indexes)
//! over the bench's own schema. The compact filter record (`alert_cuts`, its
//! indexes) is counted apart, so the archive "before" it is the total less
//! that part.

use ithaca_kit::db::Db;

/// Bytes the archive holds.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Disk {
    /// Every table and index of the broker's schema.
    pub total_bytes: u64,
    /// `alert_cuts` and its indexes.
    pub cuts_bytes: u64,
}

impl Disk {
    /// Bytes per alert, with and without the compact record.
    pub fn per_alert(&self, alerts: u64) -> (f64, f64) {
        let n = alerts.max(1) as f64;
        (
            self.total_bytes as f64 / n,
            (self.total_bytes - self.cuts_bytes.min(self.total_bytes)) as f64 / n,
        )
    }
}

/// Measure the archive's size.
pub async fn measure(db: &Db) -> anyhow::Result<Disk> {
    let (total, cuts): (i64, i64) = match db.pool() {
        ithaca_kit::db::Pool::Sqlite(pool) => {
            let total = sqlx::query_scalar("SELECT COALESCE(SUM(pgsize), 0) FROM dbstat")
                .fetch_one(pool)
                .await?;
            let cuts = sqlx::query_scalar(
                "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN \
                 (SELECT name FROM sqlite_master WHERE tbl_name = 'alert_cuts')",
            )
            .fetch_one(pool)
            .await?;
            (total, cuts)
        }
        ithaca_kit::db::Pool::Postgres(pool) => {
            let total = sqlx::query_scalar(
                "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::BIGINT \
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')",
            )
            .fetch_one(pool)
            .await?;
            let cuts = sqlx::query_scalar("SELECT pg_total_relation_size('alert_cuts')::BIGINT")
                .fetch_one(pool)
                .await?;
            (total, cuts)
        }
    };
    Ok(Disk {
        total_bytes: u64::try_from(total).unwrap_or_default(),
        cuts_bytes: u64::try_from(cuts).unwrap_or_default(),
    })
}

/// CPU seconds (user + system) of every process named `postgres` on this
/// machine: the server the bench talks to, when it runs here. Read from
/// `/proc/<pid>/stat`, which any user may read; a backend that exits
/// between two readings takes its ticks with it, so the pool's connections
/// must stay open across a measurement (they do: the pool keeps them).
pub fn postgres_cpu_seconds() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return f64::NAN;
    };
    let mut ticks = 0.0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if &stat[open + 1..close] != "postgres" {
            continue;
        }
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
        if let (Some(u), Some(s)) = (tick(11), tick(12)) {
            ticks += u + s;
        }
    }
    ticks / 100.0
}
