//! The domain behind `ithaca.broker.v1.FundamentalsService`: ingest (one
//! file, one transaction, resolved against the filing index), symbols to
//! CIKs, the filing index and insider activity. The point-in-time reads of
//! line items and the peer screen are in [`super::reads`].
//!
//! An XBRL instance and a Form 4 do not carry their accession number or
//! filing date. They are found in the filing index: the company's filing of
//! that form whose report date is the document's period (exactly one), else
//! for an instance the first filing of that form whose companyfacts values
//! end on its period. A document whose filing cannot be found is refused,
//! naming what to ingest first; `ithaca ingest sec` therefore sends JSON
//! files (the index, companyfacts) before zips and XML.

use super::model::{Accession, Cik, SourceFormat, TxnCode, format_date, parse_date};
use super::parse::{self, Batch, Parsed};
use super::store::{FilingRow, FundamentalsStore, TxnRow};
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::{Actor, Principal};
use ithaca_proto::broker::v1 as pb;
use sha2::{Digest, Sha256};

/// The domain error code of a file refused by its content.
pub const BAD_SEC_FILE: ithaca_kit::error::DomainCode = ithaca_kit::error::DomainCode::BadSecFile;

/// Most filings per page.
const MAX_FILINGS_PAGE: i32 = 500;

/// The fundamentals domain.
#[derive(Clone, Debug)]
pub struct FundamentalsService {
    pub(super) store: FundamentalsStore,
    /// The broker's own market tables, for the peer screen's prices.
    pub(super) market: crate::market::MarketStore,
}

/// A company a symbol names.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub cik: String,
    pub name: String,
}

impl FundamentalsService {
    pub fn new(store: FundamentalsStore, market: crate::market::MarketStore) -> Self {
        FundamentalsService { store, market }
    }

    pub async fn ingest_file(
        &self,
        caller: &Principal,
        source: &str,
        bytes: Vec<u8>,
    ) -> Result<pb::SecIngestReport, ServiceError> {
        self.ingest_file_reporting(caller, source, bytes, None)
            .await
    }

    /// [`Self::ingest_file`], reporting rows written of total to `progress`.
    pub async fn ingest_file_reporting(
        &self,
        caller: &Principal,
        source: &str,
        bytes: Vec<u8>,
        progress: Option<&crate::progress::Progress>,
    ) -> Result<pb::SecIngestReport, ServiceError> {
        if caller.actor() != Actor::System {
            return Err(ServiceError::denied("only administrators ingest SEC data"));
        }
        let source: String = match source.trim() {
            "" => "sec".to_owned(),
            s => s.chars().take(200).collect(),
        };
        let bad =
            |e: String| ServiceError::invalid(format!("{source}: {e}")).with_domain(BAD_SEC_FILE);
        if bytes.len() > parse::MAX_FILE_BYTES {
            return Err(bad(format!(
                "file too big: {} bytes, at most {}",
                bytes.len(),
                parse::MAX_FILE_BYTES
            )));
        }
        let checksum = hex::encode(Sha256::digest(&bytes));
        let name = source.clone();
        let parsed = tokio::task::spawn_blocking(move || parse::parse(&name, &bytes))
            .await
            .map_err(|e| ServiceError::internal(&e))?
            .map_err(bad)?;
        let format = parsed.format();
        let batch = self.resolve(parsed).await.map_err(bad)?;
        let w = self
            .store
            .ingest(&checksum, &source, format, &batch, progress)
            .await?;
        tracing::info!(source = %source, format = %format, facts = batch.facts.len(),
            stored = w.facts_stored, already_present = w.already_present, "sec file ingested");
        let n = |x: usize| i32::try_from(x).unwrap_or(i32::MAX);
        let m = |x: u64| i32::try_from(x).unwrap_or(i32::MAX);
        Ok(pb::SecIngestReport {
            source,
            checksum,
            format: format.as_str().to_owned(),
            already_present: w.already_present,
            facts: n(batch.facts.len()),
            facts_stored: m(w.facts_stored),
            filings: n(batch.filings.len()),
            filings_stored: m(w.filings_stored),
            transactions: n(batch.txns.len()),
            transactions_stored: m(w.transactions_stored),
            companies: batch
                .companies
                .iter()
                .take(20)
                .map(|c| format!("{} {}", c.cik, c.name))
                .collect(),
            tickers: w.tickers.into_iter().take(50).collect(),
        })
    }

    /// Find the filing of an instance or a Form 4; a batch is ready as is.
    async fn resolve(&self, parsed: Parsed) -> Result<Batch, String> {
        match parsed {
            Parsed::Batch(_, b) => Ok(b),
            Parsed::Instance(i) => {
                let period = format_date(i.period_end);
                let forms = [i.form.as_str(), ""];
                let found = self
                    .store
                    .indexed_filings(i.cik.as_str(), &forms, &period)
                    .await
                    .map_err(|e| format!("reading the filing index: {e}"))?;
                let (accession, filed) = if let [only] = found.as_slice() {
                    (only.accession.clone(), only.filing_date.clone())
                } else if let Some(hit) = self
                    .store
                    .companyfacts_filing(i.cik.as_str(), &i.form, &period)
                    .await
                    .map_err(|e| format!("reading companyfacts: {e}"))?
                {
                    hit
                } else {
                    return Err(format!(
                        "no filing of CIK {} form {} for period {period} in the filing index or \
                         companyfacts ({} candidates): ingest the company's submissions or \
                         companyfacts JSON first",
                        i.cik,
                        i.form,
                        found.len()
                    ));
                };
                let accession = Accession::parse(&accession)?;
                let filed = parse_date(&filed)?;
                Ok(Batch {
                    companies: vec![i.company()],
                    facts: i.facts(&accession, filed),
                    ..Batch::default()
                })
            }
            Parsed::Form4(f) => {
                let period = format_date(f.period);
                let found = self
                    .store
                    .indexed_filings(f.issuer.as_str(), &["4", "4/A"], &period)
                    .await
                    .map_err(|e| format!("reading the filing index: {e}"))?;
                let [only] = found.as_slice() else {
                    return Err(format!(
                        "{} Form 4 filings of CIK {} report on {period} in the filing index, not \
                         exactly one: ingest the issuer's submissions JSON first",
                        found.len(),
                        f.issuer
                    ));
                };
                let accession = Accession::parse(&only.accession)?;
                let filed = parse_date(&only.filing_date)?;
                let company = super::model::Company {
                    cik: f.issuer.clone(),
                    name: f.issuer_name.clone(),
                    tickers: f.ticker.iter().cloned().collect(),
                    seen_on: filed,
                };
                Ok(Batch {
                    companies: vec![company],
                    txns: f.into_txns(&accession, filed),
                    ..Batch::default()
                })
            }
        }
    }

    /// The company a ticker or CIK names.
    pub async fn resolve_symbol(&self, symbol: &str) -> Result<Resolved, ServiceError> {
        let s = symbol.trim();
        if s.is_empty() {
            return Err(ServiceError::invalid(
                "symbol: required (a ticker like AAPL, or a CIK)",
            ));
        }
        let cik = if s.bytes().all(|b| b.is_ascii_digit()) || s.starts_with("CIK") {
            Cik::parse(s)
                .map_err(|e| ServiceError::invalid(format!("symbol: {e}")))?
                .to_string()
        } else {
            let t = parse::xbrl::ticker(s).ok_or_else(|| {
                ServiceError::invalid(format!(
                    "symbol: not a ticker or a CIK: {:?}",
                    parse::truncate(s, 20)
                ))
            })?;
            self.store.cik_of_ticker(&t).await?.ok_or_else(|| {
                ServiceError::not_found(format!(
                    "symbol {t}: no CIK known for it; tickers map to CIKs from ingested filings \
                     (submissions JSON, XBRL instances, Data Sets)"
                ))
            })?
        };
        let name = self.store.company(&cik).await?.ok_or_else(|| {
            ServiceError::not_found(format!(
                "CIK {cik}: no filings of this company were ingested"
            ))
        })?;
        Ok(Resolved { cik, name })
    }

    /// A company's filings, newest first, by form and filing-date range.
    pub async fn filings(&self, r: &pb::GetFilingsRequest) -> Result<pb::Filings, ServiceError> {
        let company = self.resolve_symbol(&r.symbol).await?;
        let from = date_or(r.from.as_deref(), "from", "0000-01-01")?;
        let to = date_or(r.to.as_deref(), "to", &today())?;
        let limit = r.limit.unwrap_or(50);
        if !(1..=MAX_FILINGS_PAGE).contains(&limit) {
            return Err(ServiceError::invalid(format!(
                "limit: from 1 to {MAX_FILINGS_PAGE}"
            )));
        }
        let offset = r.offset.unwrap_or(0);
        if offset < 0 {
            return Err(ServiceError::invalid("offset: not negative"));
        }
        let form = r.form.as_deref().map(str::trim).filter(|f| !f.is_empty());
        if form.is_some_and(|f| f.len() > 20) {
            return Err(ServiceError::invalid("form: at most 20 characters"));
        }
        let (rows, total) = self
            .store
            .filings(
                &company.cik,
                form,
                &from,
                &to,
                i64::from(limit),
                i64::from(offset),
            )
            .await?;
        let count = rows.len() as i32;
        let total = i32::try_from(total).unwrap_or(i32::MAX);
        let next = offset + count;
        Ok(pb::Filings {
            symbol: r.symbol.trim().to_owned(),
            cik: company.cik,
            company: company.name,
            filings: rows.into_iter().map(summary).collect(),
            count,
            total,
            truncated: next < total,
            next_offset: (next < total).then_some(next),
        })
    }

    /// One filing by accession.
    pub async fn filing(&self, accession: &str) -> Result<pb::Filing, ServiceError> {
        let a = Accession::parse(accession)
            .map_err(|e| ServiceError::invalid(format!("accession: {e}")))?;
        let row = self.store.filing(a.as_str()).await?.ok_or_else(|| {
            ServiceError::not_found(format!("filing {a}: not in the ingested filing index"))
        })?;
        let counts = self.store.facts_of_filing(a.as_str()).await?;
        let txns = self.store.transactions_of_filing(a.as_str()).await?;
        let company = self.store.company(&row.cik).await?.unwrap_or_default();
        Ok(pb::Filing {
            accession: row.accession,
            cik: row.cik,
            company,
            form: row.form,
            filing_date: row.filing_date,
            report_date: row.report_date,
            primary_document: row.primary_document,
            facts: i32::try_from(counts.iter().map(|(_, n)| n).sum::<i64>()).unwrap_or(i32::MAX),
            source_formats: counts.into_iter().map(|(s, _)| s).collect(),
            transactions: txns.into_iter().map(transaction).collect(),
        })
    }

    /// Form 4 filings by month and the ingested transactions, over a range.
    pub async fn insider_activity(
        &self,
        r: &pb::GetInsiderActivityRequest,
    ) -> Result<pb::InsiderActivity, ServiceError> {
        let company = self.resolve_symbol(&r.symbol).await?;
        let to = date_or(r.to.as_deref(), "to", &today())?;
        let to_date = parse_date(&to).map_err(ServiceError::invalid)?;
        let default_from = format_date(to_date.replace_year(to_date.year() - 1).unwrap_or(to_date));
        let from = date_or(r.from.as_deref(), "from", &default_from)?;
        if from > to {
            return Err(ServiceError::invalid("from: after to"));
        }
        if from[..4].parse::<i32>().unwrap_or(0) + 50 < to[..4].parse::<i32>().unwrap_or(0) {
            return Err(ServiceError::invalid("from: a range of at most 50 years"));
        }
        let (filings, _) = self
            .store
            .filings(&company.cik, Some("4"), &from, &to, 100_000, 0)
            .await?;
        let txns = self.store.transactions(&company.cik, &from, &to).await?;
        let mut months: Vec<pb::InsiderMonth> = Vec::new();
        let mut month = from[..7].to_owned();
        while month.as_str() <= &to[..7] {
            months.push(pb::InsiderMonth {
                month: month.clone(),
                ..Default::default()
            });
            month = super::model::month_minus(&month, -1).unwrap_or_else(|| "9999-12".to_owned());
        }
        let with_txns: std::collections::BTreeSet<&str> =
            txns.iter().map(|t| t.accession.as_str()).collect();
        for f in &filings {
            if let Some(m) = months
                .iter_mut()
                .find(|m| f.filing_date.starts_with(&m.month))
            {
                m.form4_filings += 1;
                if with_txns.contains(f.accession.as_str()) {
                    m.with_transactions += 1;
                }
            }
        }
        let (mut bought, mut sold) = (0.0, 0.0);
        for t in &txns {
            let Some(m) = months.iter_mut().find(|m| t.filed.starts_with(&m.month)) else {
                continue;
            };
            match t.code.as_str() {
                "P" => {
                    m.shares_bought += t.shares;
                    bought += t.shares;
                }
                "S" => {
                    m.shares_sold += t.shares;
                    sold += t.shares;
                }
                _ => {}
            }
            m.net_shares = m.shares_bought - m.shares_sold;
        }
        let net = if bought > sold {
            "buying"
        } else if sold > bought {
            "selling"
        } else {
            "none"
        };
        Ok(pb::InsiderActivity {
            symbol: r.symbol.trim().to_owned(),
            cik: company.cik,
            from,
            to,
            months,
            form4_filings: filings.len() as i32,
            transactions: txns.into_iter().map(transaction).collect(),
            net: net.to_owned(),
        })
    }
}

/// Today, UTC, `YYYY-MM-DD`.
pub fn today() -> String {
    format_date(time::OffsetDateTime::now_utc().date())
}

/// A date argument, checked, or the default.
pub fn date_or(value: Option<&str>, field: &str, default: &str) -> Result<String, ServiceError> {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(default.to_owned()),
        Some(v) => parse_date(v)
            .map(format_date)
            .map_err(|e| ServiceError::invalid(format!("{field}: {e}"))),
    }
}

fn summary(f: FilingRow) -> pb::FilingSummary {
    pb::FilingSummary {
        uri: format!("doomberg://filings/{}", f.accession),
        accession: f.accession,
        form: f.form,
        filing_date: f.filing_date,
        report_date: f.report_date,
        primary_document: f.primary_document,
    }
}

fn transaction(t: TxnRow) -> pb::InsiderTransaction {
    let meaning = TxnCode::parse(&t.code).map_or("", TxnCode::meaning);
    pb::InsiderTransaction {
        accession: t.accession,
        owner_name: t.owner_name,
        owner_cik: t.owner_cik,
        relationship: t.relationship,
        officer_title: t.officer_title,
        security: t.security,
        derivative: t.derivative != 0,
        date: t.transaction_date,
        code_meaning: meaning.to_owned(),
        code: t.code,
        shares: t.shares,
        price: t.price,
        acquired_disposed: t.acquired_disposed,
        shares_owned_after: t.shares_after,
        ownership: t.ownership,
    }
}

impl SourceFormat {
    /// How a file of this format is described in messages.
    pub fn describe(self) -> &'static str {
        match self {
            SourceFormat::Companyfacts => "companyfacts JSON",
            SourceFormat::Submissions => "submissions JSON (filing index)",
            SourceFormat::Fsds => "Financial Statement Data Set zip",
            SourceFormat::Xbrl => "XBRL instance",
            SourceFormat::Form4 => "Form 4 XML",
        }
    }
}
