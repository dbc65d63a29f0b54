//! The market-data domain: ingest with validation, symbol coverage and
//! bounded price histories.

use super::model::{self, DEFAULT_LIMIT, MAX_LIMIT};
use super::store::{BarRow, DatasetRow, MarketStore, SymbolRow};
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::{Actor, Principal};
use std::collections::{BTreeSet, HashSet};

/// One row of an ingest, with the line it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct IngestRow {
    pub line: i64,
    pub symbol: String,
    pub date: String,
    pub open: f64,
    pub high: f64,
    pub low: f64,
    pub close: f64,
    pub volume: i64,
    pub adj_close: f64,
}

impl From<ithaca_proto::broker::v1::BarRow> for IngestRow {
    fn from(r: ithaca_proto::broker::v1::BarRow) -> Self {
        IngestRow {
            line: r.line,
            symbol: r.symbol,
            date: r.date,
            open: r.open,
            high: r.high,
            low: r.low,
            close: r.close,
            volume: r.volume,
            adj_close: r.adj_close,
        }
    }
}

/// What an ingest produced.
#[derive(Clone, Debug)]
pub struct Ingested {
    pub dataset: DatasetRow,
    pub already_present: bool,
}

/// A price-history request.
#[derive(Clone, Debug, Default)]
pub struct HistoryQuery {
    pub symbol: String,
    pub start: Option<String>,
    pub end: Option<String>,
    pub fields: Vec<String>,
    pub limit: Option<i32>,
    /// A page's `next_cursor` (`before:DATE` or `after:DATE`).
    pub cursor: Option<String>,
}

/// A price history.
#[derive(Clone, Debug)]
pub struct History {
    pub symbol: String,
    pub bars: Vec<BarRow>,
    pub fields: Vec<&'static str>,
    pub truncated: bool,
    /// When truncated, where the next page starts.
    pub next_cursor: Option<String>,
}

/// Daily bars and the datasets they came from.
#[derive(Clone, Debug)]
pub struct MarketService {
    store: MarketStore,
}

impl MarketService {
    pub fn new(store: MarketStore) -> Self {
        MarketService { store }
    }

    /// Validate every row first (errors name the line), then store the
    /// dataset and its bars in one transaction.
    pub async fn ingest(
        &self,
        caller: &Principal,
        source: &str,
        checksum: &str,
        rows: Vec<IngestRow>,
    ) -> Result<Ingested, ServiceError> {
        self.ingest_reporting(caller, source, checksum, rows, None)
            .await
    }

    /// [`Self::ingest`], reporting rows written of total to `progress` once
    /// the rows are checked (every insert batch).
    pub async fn ingest_reporting(
        &self,
        caller: &Principal,
        source: &str,
        checksum: &str,
        rows: Vec<IngestRow>,
        progress: Option<&crate::progress::Progress>,
    ) -> Result<Ingested, ServiceError> {
        if caller.actor() != Actor::System {
            return Err(ServiceError::denied(
                "only administrators ingest market data",
            ));
        }
        let checksum = checksum.trim().to_ascii_lowercase();
        if checksum.len() != 64 || !checksum.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ServiceError::invalid(
                "checksum: expected the file's SHA-256 as 64 hex digits",
            ));
        }
        if source.trim().is_empty() {
            return Err(ServiceError::invalid("source: required"));
        }
        if rows.is_empty() {
            return Err(ServiceError::invalid("rows: the file holds no bars"));
        }
        if let Some(existing) = self.store.dataset_by_checksum(&checksum).await? {
            let rows = u64::try_from(existing.row_count).unwrap_or(0);
            crate::progress::report(progress, rows, rows);
            return Ok(Ingested {
                dataset: existing,
                already_present: true,
            });
        }
        let dataset_id = uuid::Uuid::new_v4().hyphenated().to_string();
        let mut seen = HashSet::with_capacity(rows.len());
        let mut symbols = BTreeSet::new();
        let mut bars = Vec::with_capacity(rows.len());
        for row in rows {
            let at = |what: String| ServiceError::invalid(format!("line {}: {what}", row.line));
            let symbol = model::parse_symbol(&row.symbol).map_err(|e| at(e.message))?;
            let date = model::parse_date("date", &row.date).map_err(|e| at(e.message))?;
            if let Some(problem) = model::bar_problem(
                row.open,
                row.high,
                row.low,
                row.close,
                row.volume,
                row.adj_close,
            ) {
                return Err(at(problem.to_owned()));
            }
            if !seen.insert((symbol.clone(), date.clone())) {
                return Err(at(format!("a second bar for {symbol} on {date}")));
            }
            symbols.insert(symbol.clone());
            bars.push(BarRow {
                symbol,
                date,
                open: row.open,
                high: row.high,
                low: row.low,
                close: row.close,
                volume: row.volume,
                adj_close: row.adj_close,
                dataset_id: dataset_id.clone(),
            });
        }
        let first_date = bars
            .iter()
            .map(|b| b.date.as_str())
            .min()
            .unwrap_or_default()
            .to_owned();
        let last_date = bars
            .iter()
            .map(|b| b.date.as_str())
            .max()
            .unwrap_or_default()
            .to_owned();
        let dataset = DatasetRow {
            dataset_id,
            source: source.trim().to_owned(),
            symbols: symbols.into_iter().collect::<Vec<_>>().join(" "),
            row_count: bars.len() as i64,
            first_date,
            last_date,
            checksum,
            ingested_at_ms: clock::now_ms(),
        };
        self.store.ingest(&dataset, &bars, progress).await?;
        tracing::info!(dataset_id = %dataset.dataset_id, rows = dataset.row_count, "market data ingested");
        Ok(Ingested {
            dataset,
            already_present: false,
        })
    }

    pub async fn symbols(&self, caller: &Principal) -> Result<Vec<SymbolRow>, ServiceError> {
        caller.tenant()?;
        Ok(self.store.symbols().await?)
    }

    pub async fn datasets(&self, caller: &Principal) -> Result<Vec<DatasetRow>, ServiceError> {
        caller.tenant()?;
        Ok(self.store.datasets().await?)
    }

    /// A bounded price history; errors name the argument at fault.
    pub async fn history(
        &self,
        caller: &Principal,
        query: HistoryQuery,
    ) -> Result<History, ServiceError> {
        caller.tenant()?;
        let symbol = model::parse_symbol(&query.symbol)?;
        let fields = model::parse_fields(&query.fields)?;
        let limit = match query.limit {
            None => DEFAULT_LIMIT,
            Some(n) if n < 1 => return Err(ServiceError::invalid("limit: must be at least 1")),
            Some(n) => i64::from(n).min(MAX_LIMIT),
        };
        let Some(coverage) = self.store.symbol(&symbol).await? else {
            let known: Vec<String> = self
                .store
                .symbols()
                .await?
                .into_iter()
                .map(|s| s.symbol)
                .collect();
            return Err(ServiceError::not_found(format!(
                "symbol: no market data for {symbol}; known symbols: {}",
                known.join(", ")
            ))
            .with_domain(DomainCode::UnknownSymbol));
        };
        let start = match &query.start {
            Some(s) => model::parse_date("start", s)?,
            None => coverage.first_date.clone(),
        };
        let end = match &query.end {
            Some(e) => model::parse_date("end", e)?,
            None => coverage.last_date.clone(),
        };
        if start > end && query.start.is_some() && query.end.is_some() {
            return Err(ServiceError::invalid(format!(
                "start: {start} is after end {end}"
            )));
        }
        // A range longer than `limit` is read from `start` when one was
        // given (or a cursor pages forward), else from its newest bar back.
        let (start, end, newest) = match query.cursor.as_deref().map(model::parse_cursor) {
            None => (start, end, query.start.is_none()),
            Some(Err(e)) => return Err(e),
            Some(Ok(model::Cursor::Before(d))) => (start, end.min(d), true),
            Some(Ok(model::Cursor::After(d))) => (start.max(d), end, false),
        };
        let mut bars = self
            .store
            .bars(&symbol, &start, &end, limit + 1, newest)
            .await?;
        if bars.is_empty() {
            return Err(ServiceError::precondition(format!(
                "no bars for {symbol} between {start} and {end}; it has bars from {} to {}",
                coverage.first_date, coverage.last_date
            ))
            .with_domain(DomainCode::NoData));
        }
        let truncated = bars.len() as i64 > limit;
        bars.truncate(limit as usize);
        if newest {
            bars.reverse();
        }
        let next_cursor = truncated
            .then(|| match newest {
                true => bars.first().map(|b| format!("before:{}", b.date)),
                false => bars.last().map(|b| format!("after:{}", b.date)),
            })
            .flatten();
        Ok(History {
            symbol,
            bars,
            fields,
            truncated,
            next_cursor,
        })
    }
}
