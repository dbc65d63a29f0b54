//! The fundamentals tables' SQL, one text for SQLite and PostgreSQL: one
//! transaction per ingested file (all of it or nothing), and the reads.

use super::model::{Fact, SourceFormat, format_date, period_month};
use super::parse::Batch;
use ithaca_kit::db::Db;
use ithaca_kit::with_pool;
use sha2::{Digest, Sha256};

/// Rows per INSERT (17 parameters a fact: well under both databases' bind
/// limits).
const INSERT_BATCH: usize = 1_000;

/// What one file's transaction wrote.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Written {
    pub already_present: bool,
    pub facts_stored: u64,
    pub filings_stored: u64,
    pub transactions_stored: u64,
    /// `TICKER=CIK` mapped (or confirmed) by this file.
    pub tickers: Vec<String>,
}

/// A fact as read back.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct FactRow {
    pub concept: String,
    pub unit: String,
    pub period_start: Option<String>,
    pub period_end: String,
    pub period_month: String,
    pub quarters: i64,
    pub value: f64,
    pub accession: String,
    pub form: String,
    pub filed: String,
    pub fiscal_year: Option<i64>,
    pub fiscal_period: Option<String>,
    pub source_format: String,
}

const FACT_READ: &str = "concept, unit, period_start, period_end, period_month, quarters, value, \
     accession, form, filed, fiscal_year, fiscal_period, source_format";

/// A filing as read back.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct FilingRow {
    pub accession: String,
    pub cik: String,
    pub form: String,
    pub filing_date: String,
    pub report_date: Option<String>,
    pub primary_document: Option<String>,
}

const FILING_COLUMNS: &str = "accession, cik, form, filing_date, report_date, primary_document";

/// An insider transaction as read back.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct TxnRow {
    pub accession: String,
    pub filed: String,
    pub owner_cik: String,
    pub owner_name: String,
    pub relationship: String,
    pub officer_title: Option<String>,
    pub security: String,
    pub derivative: i64,
    pub transaction_date: String,
    pub code: String,
    pub shares: f64,
    pub price: Option<f64>,
    pub acquired_disposed: String,
    pub shares_after: f64,
    pub ownership: String,
}

const TXN_READ: &str = "accession, filed, owner_cik, owner_name, relationship, officer_title, \
     security, derivative, transaction_date, code, shares, price, acquired_disposed, shares_after, ownership";

/// The identity of a fact: the same fact of the same filing from the same
/// format is stored once.
fn fact_key(f: &Fact) -> String {
    let mut h = Sha256::new();
    for part in [
        f.source_format.as_str(),
        f.accession.as_str(),
        f.cik.as_str(),
        &f.concept,
        &f.unit,
        &f.period_start.map(format_date).unwrap_or_default(),
        &format_date(f.period_end),
        &f.quarters.to_string(),
        &f.dims,
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// The fundamentals tables.
#[derive(Clone, Debug)]
pub struct FundamentalsStore {
    db: Db,
}

impl FundamentalsStore {
    pub fn new(db: Db) -> Self {
        FundamentalsStore { db }
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Store one file's rows in one transaction. A file whose checksum was
    /// seen changes nothing; every row already present is left as it was.
    pub async fn ingest(
        &self,
        checksum: &str,
        source: &str,
        format: SourceFormat,
        batch: &Batch,
        progress: Option<&crate::progress::Progress>,
    ) -> Result<Written, sqlx::Error> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let total = (batch.facts.len() + batch.filings.len() + batch.txns.len()) as u64;
        let mut done = 0u64;
        let mut w = Written::default();
        let _gate = self.db.write_gate().await;
        with_pool!(self.db, pool => {
            let mut tx = pool.begin().await?;
            let seen: Option<String> = sqlx::query_scalar("SELECT checksum FROM sec_files WHERE checksum = $1")
                .bind(checksum)
                .fetch_optional(&mut *tx)
                .await?;
            if seen.is_some() {
                w.already_present = true;
                return Ok(w);
            }
            for c in &batch.companies {
                sqlx::query(
                    "INSERT INTO sec_companies (cik, name, created_at_ms) VALUES ($1, $2, $3) \
                     ON CONFLICT (cik) DO UPDATE SET name = excluded.name \
                     WHERE sec_companies.name = '' AND excluded.name <> ''",
                )
                .bind(c.cik.as_str())
                .bind(&c.name)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                for t in &c.tickers {
                    sqlx::query(
                        "INSERT INTO sec_tickers (ticker, cik, seen_on, source_format) VALUES ($1, $2, $3, $4) \
                         ON CONFLICT (ticker) DO UPDATE SET cik = excluded.cik, seen_on = excluded.seen_on, \
                         source_format = excluded.source_format WHERE excluded.seen_on > sec_tickers.seen_on",
                    )
                    .bind(t)
                    .bind(c.cik.as_str())
                    .bind(format_date(c.seen_on))
                    .bind(format.as_str())
                    .execute(&mut *tx)
                    .await?;
                    let entry = format!("{t}={}", c.cik);
                    if !w.tickers.contains(&entry) {
                        w.tickers.push(entry);
                    }
                }
            }
            // The filing index is authoritative for report dates and
            // documents; other formats only add filings it lacks.
            let on_conflict = if format == SourceFormat::Submissions {
                " ON CONFLICT (accession) DO UPDATE SET report_date = excluded.report_date, \
                 primary_document = excluded.primary_document, form = excluded.form, \
                 filing_date = excluded.filing_date, source_format = excluded.source_format \
                 WHERE sec_filings.source_format <> 'submissions'"
            } else {
                " ON CONFLICT (accession) DO NOTHING"
            };
            for chunk in batch.filings.chunks(INSERT_BATCH) {
                let mut b = sqlx::QueryBuilder::new(
                    "INSERT INTO sec_filings (accession, cik, form, filing_date, report_date, primary_document, source_format) ",
                );
                b.push_values(chunk, |mut row, f| {
                    row.push_bind(f.accession.as_str())
                        .push_bind(f.cik.as_str())
                        .push_bind(&f.form)
                        .push_bind(format_date(f.filing_date))
                        .push_bind(f.report_date.map(format_date))
                        .push_bind(&f.primary_document)
                        .push_bind(format.as_str());
                });
                b.push(on_conflict);
                w.filings_stored += b.build().execute(&mut *tx).await?.rows_affected();
                done += chunk.len() as u64;
                crate::progress::report(progress, done, total);
            }
            for chunk in batch.facts.chunks(INSERT_BATCH) {
                let mut b = sqlx::QueryBuilder::new(
                    "INSERT INTO sec_facts (fact_key, cik, concept, unit, period_start, period_end, period_month, \
                     quarters, dims, value, value_text, accession, form, filed, fiscal_year, fiscal_period, source_format) ",
                );
                b.push_values(chunk, |mut row, f| {
                    row.push_bind(fact_key(f))
                        .push_bind(f.cik.as_str())
                        .push_bind(&f.concept)
                        .push_bind(&f.unit)
                        .push_bind(f.period_start.map(format_date))
                        .push_bind(format_date(f.period_end))
                        .push_bind(period_month(f.period_end))
                        .push_bind(f.quarters)
                        .push_bind(&f.dims)
                        .push_bind(f.value)
                        .push_bind(&f.value_text)
                        .push_bind(f.accession.as_str())
                        .push_bind(&f.form)
                        .push_bind(format_date(f.filed))
                        .push_bind(f.fiscal_year)
                        .push_bind(&f.fiscal_period)
                        .push_bind(f.source_format.as_str());
                });
                b.push(" ON CONFLICT (fact_key) DO NOTHING");
                w.facts_stored += b.build().execute(&mut *tx).await?.rows_affected();
                done += chunk.len() as u64;
                crate::progress::report(progress, done, total);
            }
            for (i, t) in batch.txns.iter().enumerate() {
                let r = sqlx::query(
                    "INSERT INTO sec_insider_transactions (txn_key, accession, issuer_cik, filed, owner_cik, \
                     owner_name, relationship, officer_title, security, derivative, transaction_date, code, \
                     shares, price, acquired_disposed, shares_after, ownership) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) \
                     ON CONFLICT (txn_key) DO NOTHING",
                )
                .bind(format!("{}#{}", t.accession, i + 1))
                .bind(t.accession.as_str())
                .bind(t.issuer.as_str())
                .bind(format_date(t.filed))
                .bind(t.owner_cik.as_str())
                .bind(&t.owner_name)
                .bind(&t.relationship)
                .bind(&t.officer_title)
                .bind(&t.security)
                .bind(i64::from(t.derivative))
                .bind(format_date(t.date))
                .bind(t.code.as_str())
                .bind(t.shares)
                .bind(t.price)
                .bind(&t.acquired_disposed)
                .bind(t.shares_after)
                .bind(&t.ownership)
                .execute(&mut *tx)
                .await?;
                w.transactions_stored += r.rows_affected();
            }
            sqlx::query(
                "INSERT INTO sec_files (checksum, source, format, items, ingested_at_ms) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(checksum)
            .bind(source)
            .bind(format.as_str())
            .bind(total as i64)
            .bind(now)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        });
        crate::progress::report(progress, total, total);
        Ok(w)
    }

    /// The CIK a ticker maps to.
    pub async fn cik_of_ticker(&self, ticker: &str) -> Result<Option<String>, sqlx::Error> {
        with_pool!(self.db, pool => sqlx::query_scalar("SELECT cik FROM sec_tickers WHERE ticker = $1")
            .bind(ticker).fetch_optional(pool).await)
    }

    /// A company's name, when it is known.
    pub async fn company(&self, cik: &str) -> Result<Option<String>, sqlx::Error> {
        with_pool!(self.db, pool => sqlx::query_scalar("SELECT name FROM sec_companies WHERE cik = $1")
            .bind(cik).fetch_optional(pool).await)
    }

    /// A company's tickers.
    pub async fn tickers_of(&self, cik: &str) -> Result<Vec<String>, sqlx::Error> {
        with_pool!(self.db, pool => sqlx::query_scalar("SELECT ticker FROM sec_tickers WHERE cik = $1 ORDER BY ticker")
            .bind(cik).fetch_all(pool).await)
    }

    /// Filings of the index (`submissions`) of a company with this form and
    /// report date: how an instance or a Form 4 finds its accession.
    pub async fn indexed_filings(
        &self,
        cik: &str,
        forms: &[&str],
        report_date: &str,
    ) -> Result<Vec<FilingRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {FILING_COLUMNS} FROM sec_filings WHERE cik = $1 AND report_date = $2 \
             AND form IN ($3, $4) ORDER BY filing_date, accession"
        );
        let (a, b) = (
            forms.first().copied().unwrap_or(""),
            forms.get(1).copied().unwrap_or(""),
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, FilingRow>(&sql)
            .bind(cik).bind(report_date).bind(a).bind(b).fetch_all(pool).await)
    }

    /// The first filing of this form whose companyfacts values end on
    /// `period_end`: the filing that reported that period as its own.
    pub async fn companyfacts_filing(
        &self,
        cik: &str,
        form: &str,
        period_end: &str,
    ) -> Result<Option<(String, String)>, sqlx::Error> {
        let sql = "SELECT accession, filed FROM sec_facts WHERE cik = $1 AND form = $2 AND period_end = $3 \
                   AND source_format = 'companyfacts' AND concept LIKE 'us-gaap:%' \
                   ORDER BY filed, accession LIMIT 1";
        with_pool!(self.db, pool => sqlx::query_as::<_, (String, String)>(sql)
            .bind(cik).bind(form).bind(period_end).fetch_optional(pool).await)
    }

    /// Undimensioned facts of these concepts filed on or before `as_of`.
    pub async fn facts(
        &self,
        cik: &str,
        concepts: &[&str],
        as_of: &str,
    ) -> Result<Vec<FactRow>, sqlx::Error> {
        let list = (0..concepts.len())
            .map(|i| format!("${}", i + 3))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {FACT_READ} FROM sec_facts WHERE cik = $1 AND filed <= $2 AND dims = '' \
             AND concept IN ({list}) ORDER BY period_month, quarters, filed, source_format, accession"
        );
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, FactRow>(&sql).bind(cik).bind(as_of);
            for c in concepts {
                q = q.bind(*c);
            }
            q.fetch_all(pool).await
        })
    }

    /// A company's filings, newest first, and how many match in all.
    pub async fn filings(
        &self,
        cik: &str,
        form: Option<&str>,
        from: &str,
        to: &str,
        limit: i64,
        offset: i64,
    ) -> Result<(Vec<FilingRow>, i64), sqlx::Error> {
        let form_clause = if form.is_some() { " AND form = $4" } else { "" };
        let sql = format!(
            "SELECT {FILING_COLUMNS} FROM sec_filings WHERE cik = $1 AND filing_date >= $2 AND filing_date <= $3{form_clause} \
             ORDER BY filing_date DESC, accession DESC LIMIT {limit} OFFSET {offset}"
        );
        let count = format!(
            "SELECT COUNT(*) FROM sec_filings WHERE cik = $1 AND filing_date >= $2 AND filing_date <= $3{form_clause}"
        );
        with_pool!(self.db, pool => {
            let mut q = sqlx::query_as::<_, FilingRow>(&sql).bind(cik).bind(from).bind(to);
            let mut c = sqlx::query_scalar::<_, i64>(&count).bind(cik).bind(from).bind(to);
            if let Some(f) = form {
                q = q.bind(f);
                c = c.bind(f);
            }
            Ok((q.fetch_all(pool).await?, c.fetch_one(pool).await?))
        })
    }

    pub async fn filing(&self, accession: &str) -> Result<Option<FilingRow>, sqlx::Error> {
        let sql = format!("SELECT {FILING_COLUMNS} FROM sec_filings WHERE accession = $1");
        with_pool!(self.db, pool => sqlx::query_as::<_, FilingRow>(&sql).bind(accession).fetch_optional(pool).await)
    }

    /// How many facts each format holds of a filing.
    pub async fn facts_of_filing(
        &self,
        accession: &str,
    ) -> Result<Vec<(String, i64)>, sqlx::Error> {
        let sql = "SELECT source_format, COUNT(*) FROM sec_facts WHERE accession = $1 \
                   GROUP BY source_format ORDER BY source_format";
        with_pool!(self.db, pool => sqlx::query_as::<_, (String, i64)>(sql).bind(accession).fetch_all(pool).await)
    }

    /// Transactions of a filing, in table order.
    pub async fn transactions_of_filing(
        &self,
        accession: &str,
    ) -> Result<Vec<TxnRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {TXN_READ} FROM sec_insider_transactions WHERE accession = $1 ORDER BY txn_key"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, TxnRow>(&sql).bind(accession).fetch_all(pool).await)
    }

    /// An issuer's transactions filed in [from, to], oldest first.
    pub async fn transactions(
        &self,
        cik: &str,
        from: &str,
        to: &str,
    ) -> Result<Vec<TxnRow>, sqlx::Error> {
        let sql = format!(
            "SELECT {TXN_READ} FROM sec_insider_transactions WHERE issuer_cik = $1 AND filed >= $2 AND filed <= $3 \
             ORDER BY filed, txn_key"
        );
        with_pool!(self.db, pool => sqlx::query_as::<_, TxnRow>(&sql).bind(cik).bind(from).bind(to).fetch_all(pool).await)
    }
}
