//! The market tables' SQL (`datasets` and `bars`), one text for SQLite
//! and PostgreSQL.

use ithaca_kit::db::Db;
use ithaca_kit::with_pool;

/// Rows per INSERT statement while ingesting (9 parameters each, well
/// under SQLite's and PostgreSQL's bind limits).
const INSERT_BATCH: usize = 500;

/// A dataset row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct DatasetRow {
    pub dataset_id: String,
    pub source: String,
    /// Space-separated.
    pub symbols: String,
    pub row_count: i64,
    pub first_date: String,
    pub last_date: String,
    pub checksum: String,
    pub ingested_at_ms: i64,
}

/// A bar row.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct BarRow {
    pub symbol: String,
    pub date: String,
    pub open: f64,
    pub high: f64,
    pub low: f64,
    pub close: f64,
    pub volume: i64,
    pub adj_close: f64,
    pub dataset_id: String,
}

/// A symbol's coverage.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct SymbolRow {
    pub symbol: String,
    pub bars: i64,
    pub first_date: String,
    pub last_date: String,
}

const DATASET_COLUMNS: &str =
    "dataset_id, source, symbols, row_count, first_date, last_date, checksum, ingested_at_ms";

/// The market tables.
#[derive(Clone, Debug)]
pub struct MarketStore {
    db: Db,
}

impl MarketStore {
    pub fn new(db: Db) -> Self {
        MarketStore { db }
    }

    pub async fn dataset_by_checksum(
        &self,
        checksum: &str,
    ) -> Result<Option<DatasetRow>, sqlx::Error> {
        let sql = format!("SELECT {DATASET_COLUMNS} FROM datasets WHERE checksum = $1");
        with_pool!(self.db, pool => sqlx::query_as::<_, DatasetRow>(&sql).bind(checksum).fetch_optional(pool).await)
    }

    pub async fn datasets(&self) -> Result<Vec<DatasetRow>, sqlx::Error> {
        let sql =
            format!("SELECT {DATASET_COLUMNS} FROM datasets ORDER BY ingested_at_ms, dataset_id");
        with_pool!(self.db, pool => sqlx::query_as::<_, DatasetRow>(&sql).fetch_all(pool).await)
    }

    /// Store a dataset and its bars in one transaction: all or nothing. A
    /// bar for an existing (symbol, date) is replaced by the newer file's.
    pub async fn ingest(
        &self,
        dataset: &DatasetRow,
        bars: &[BarRow],
        progress: Option<&crate::progress::Progress>,
    ) -> Result<(), sqlx::Error> {
        let total = bars.len() as u64;
        let mut written = 0u64;
        let _gate = self.db.write_gate().await;
        let insert_dataset = format!(
            "INSERT INTO datasets ({DATASET_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        );
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(&insert_dataset)
                .bind(&dataset.dataset_id)
                .bind(&dataset.source)
                .bind(&dataset.symbols)
                .bind(dataset.row_count)
                .bind(&dataset.first_date)
                .bind(&dataset.last_date)
                .bind(&dataset.checksum)
                .bind(dataset.ingested_at_ms)
                .execute(&mut *tx)
                .await?;
            for chunk in bars.chunks(INSERT_BATCH) {
                let mut builder = sqlx::QueryBuilder::new(
                    "INSERT INTO bars (symbol, date, open, high, low, close, volume, adj_close, dataset_id) ",
                );
                builder.push_values(chunk, |mut row, bar| {
                    row.push_bind(&bar.symbol)
                        .push_bind(&bar.date)
                        .push_bind(bar.open)
                        .push_bind(bar.high)
                        .push_bind(bar.low)
                        .push_bind(bar.close)
                        .push_bind(bar.volume)
                        .push_bind(bar.adj_close)
                        .push_bind(&bar.dataset_id);
                });
                builder.push(
                    " ON CONFLICT (symbol, date) DO UPDATE SET open = excluded.open, high = excluded.high, \
                     low = excluded.low, close = excluded.close, volume = excluded.volume, \
                     adj_close = excluded.adj_close, dataset_id = excluded.dataset_id",
                );
                builder.build().execute(&mut *tx).await?;
                written += chunk.len() as u64;
                crate::progress::report(progress, written, total);
            }
            tx.commit().await?;
        });
        Ok(())
    }

    pub async fn symbols(&self) -> Result<Vec<SymbolRow>, sqlx::Error> {
        let sql = "SELECT symbol, COUNT(*) AS bars, MIN(date) AS first_date, MAX(date) AS last_date \
                   FROM bars GROUP BY symbol ORDER BY symbol";
        with_pool!(self.db, pool => sqlx::query_as::<_, SymbolRow>(sql).fetch_all(pool).await)
    }

    pub async fn symbol(&self, symbol: &str) -> Result<Option<SymbolRow>, sqlx::Error> {
        let sql = "SELECT symbol, COUNT(*) AS bars, MIN(date) AS first_date, MAX(date) AS last_date \
                   FROM bars WHERE symbol = $1 GROUP BY symbol";
        with_pool!(self.db, pool => sqlx::query_as::<_, SymbolRow>(sql).bind(symbol).fetch_optional(pool).await)
    }

    /// Bars of `symbol` in [start, end], oldest first, at most `limit`.
    /// Up to `limit` bars of `symbol` in `start..=end`: the first ones,
    /// oldest first, or with `newest` the last ones, newest first.
    pub async fn bars(
        &self,
        symbol: &str,
        start: &str,
        end: &str,
        limit: i64,
        newest: bool,
    ) -> Result<Vec<BarRow>, sqlx::Error> {
        let sql = if newest {
            "SELECT symbol, date, open, high, low, close, volume, adj_close, dataset_id FROM bars \
             WHERE symbol = $1 AND date >= $2 AND date <= $3 ORDER BY date DESC LIMIT $4"
        } else {
            "SELECT symbol, date, open, high, low, close, volume, adj_close, dataset_id FROM bars \
             WHERE symbol = $1 AND date >= $2 AND date <= $3 ORDER BY date LIMIT $4"
        };
        with_pool!(self.db, pool => sqlx::query_as::<_, BarRow>(sql)
            .bind(symbol)
            .bind(start)
            .bind(end)
            .bind(limit)
            .fetch_all(pool)
            .await)
    }
}
