//! Point-in-time reads: a company's line items as known on `as_of`, and
//! the peer screen over them and the bars' prices (see [`super::lineitems`]
//! for the mapping, the point-in-time rule and TTM).

use super::lineitems::{self, Chosen, Key, LineItem};
use super::model::{format_date, month_minus, parse_date};
use super::service::{FundamentalsService, date_or, today};
use super::store::FactRow;
use ithaca_kit::error::ServiceError;
use ithaca_proto::broker::v1 as pb;
use std::collections::{BTreeMap, HashMap};

/// Most periods per answer.
const MAX_PERIODS: i32 = 40;

/// Most symbols a screen compares.
const MAX_PEERS: usize = 50;

/// The screen's metrics, in their default order.
pub const METRICS: [&str; 6] = [
    "pe",
    "ps",
    "revenue_growth",
    "net_margin",
    "operating_margin",
    "momentum",
];

/// Bars between the two closes of `momentum` (a trading year).
const MOMENTUM_BARS: usize = 252;

/// Every line item's chosen values of a company on `as_of`.
pub struct Known {
    pub values: HashMap<LineItem, BTreeMap<Key, Chosen>>,
    pub facts: Vec<FactRow>,
}

impl FundamentalsService {
    /// What was known of `cik` on `as_of`.
    pub async fn known(&self, cik: &str, as_of: &str) -> Result<Known, ServiceError> {
        let concepts = LineItem::all_concepts();
        let facts = self.store.facts(cik, &concepts, as_of).await?;
        let values = LineItem::ALL
            .iter()
            .map(|i| (*i, lineitems::choose(*i, &facts)))
            .collect();
        Ok(Known { values, facts })
    }

    pub async fn fundamentals(
        &self,
        r: &pb::GetFundamentalsRequest,
    ) -> Result<pb::Fundamentals, ServiceError> {
        let company = self.resolve_symbol(&r.symbol).await?;
        let as_of = date_or(r.as_of.as_deref(), "as_of", &today())?;
        let period = r
            .period
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .unwrap_or("quarter");
        let quarters = match period {
            "quarter" => 1,
            "year" => 4,
            other => {
                return Err(ServiceError::invalid(format!(
                    "period: {:?} is neither quarter nor year",
                    super::parse::truncate(other, 20)
                )));
            }
        };
        let limit = r.limit.unwrap_or(8);
        if !(1..=MAX_PERIODS).contains(&limit) {
            return Err(ServiceError::invalid(format!(
                "limit: from 1 to {MAX_PERIODS}"
            )));
        }
        let known = self.known(&company.cik, &as_of).await?;
        if known.facts.is_empty() {
            return Err(ServiceError::not_found(format!(
                "{}: no line item filed on or before {as_of} (as_of is before every ingested filing of CIK {})",
                r.symbol.trim(),
                company.cik
            )));
        }
        // The periods: every month where a flow has a value of this length.
        let mut months: Vec<String> = known
            .values
            .iter()
            .filter(|(i, _)| !i.is_balance())
            .flat_map(|(_, v)| {
                v.keys()
                    .filter(|(_, q)| *q == quarters)
                    .map(|(m, _)| m.clone())
            })
            .collect();
        months.sort();
        months.dedup();
        months.reverse();
        months.truncate(limit as usize);
        let mut periods = Vec::new();
        for m in &months {
            let mut p = pb::FundamentalPeriod::default();
            for item in LineItem::ALL {
                let q = if item.is_balance() { 0 } else { quarters };
                let Some(c) = known.values[item].get(&(m.clone(), q)) else {
                    continue;
                };
                // The first item (revenue, a flow) names the period.
                if p.period_end.is_empty() {
                    p.period_end = c.fact.period_end.clone();
                    p.period_start = c.fact.period_start.clone();
                    p.fiscal_year = c.fact.fiscal_year.unwrap_or(0) as i32;
                    p.fiscal_period = c.fact.fiscal_period.clone().unwrap_or_default();
                }
                p.items.push(line_value(*item, c));
            }
            periods.push(p);
        }
        let mut missing = Vec::new();
        for item in LineItem::ALL {
            if !periods
                .iter()
                .any(|p| p.items.iter().any(|v| v.item == item.as_str()))
            {
                missing.push(format!(
                    "{item}: none of {} filed for these periods by {as_of}",
                    item.concepts().join(", ")
                ));
            }
        }
        let mut ttm = Vec::new();
        for item in LineItem::ALL.iter().filter(|i| i.sums()) {
            let v = &known.values[item];
            if let Some(t) = lineitems::latest_month(v).and_then(|m| lineitems::ttm_at(v, &m)) {
                ttm.push(pb::TtmValue {
                    item: item.as_str().to_owned(),
                    value: t.value,
                    period_end: t.period_end,
                    method: t.method.to_owned(),
                    accessions: t.accessions,
                });
            }
        }
        let disagreements = lineitems::disagreements(&known.facts)
            .into_iter()
            .map(|d| pb::Disagreement {
                concept: d.concept,
                accession: d.accession,
                period_end: d.period_end,
                quarters: d.quarters as i32,
                values: d.values.iter().map(|(s, v)| format!("{s}={v}")).collect(),
            })
            .collect();
        Ok(pb::Fundamentals {
            symbol: r.symbol.trim().to_owned(),
            uri: format!("doomberg://fundamentals/{}", r.symbol.trim()),
            cik: company.cik,
            company: company.name,
            as_of,
            period: period.to_owned(),
            periods,
            ttm,
            disagreements,
            missing,
        })
    }

    /// Rank `symbols` by metrics at a date.
    pub async fn screen_peers(
        &self,
        r: &pb::ScreenPeersRequest,
    ) -> Result<pb::PeerScreen, ServiceError> {
        if r.symbols.is_empty() || r.symbols.len() > MAX_PEERS {
            return Err(ServiceError::invalid(format!(
                "symbols: from 1 to {MAX_PEERS}"
            )));
        }
        let date = date_or(Some(&r.date), "date", "")?;
        if date.is_empty() {
            return Err(ServiceError::invalid("date: required (YYYY-MM-DD)"));
        }
        let metrics: Vec<String> = if r.metrics.is_empty() {
            METRICS.iter().map(|m| (*m).to_owned()).collect()
        } else {
            r.metrics.iter().map(|m| m.trim().to_owned()).collect()
        };
        for m in &metrics {
            if !METRICS.contains(&m.as_str()) {
                return Err(ServiceError::invalid(format!(
                    "metrics: {:?} is not one of {}",
                    super::parse::truncate(m, 30),
                    METRICS.join(", ")
                )));
            }
        }
        let rank_by = r.rank_by.clone().unwrap_or_else(|| metrics[0].clone());
        if !metrics.contains(&rank_by) {
            return Err(ServiceError::invalid(
                "rank_by: must be one of the metrics asked for",
            ));
        }
        let mut rows = Vec::new();
        for symbol in &r.symbols {
            let values = self.peer_metrics(symbol.trim(), &date).await?;
            let metrics = metrics
                .iter()
                .map(|m| {
                    values
                        .iter()
                        .find(|v| v.metric == *m)
                        .cloned()
                        .unwrap_or_default()
                })
                .collect();
            rows.push(pb::PeerRow {
                symbol: symbol.trim().to_ascii_uppercase(),
                rank: 0,
                metrics,
            });
        }
        let ascending = rank_by == "pe" || rank_by == "ps";
        let key = |row: &pb::PeerRow| {
            row.metrics
                .iter()
                .find(|m| m.metric == rank_by)
                .and_then(|m| m.value)
        };
        let mut order: Vec<usize> = (0..rows.len())
            .filter(|i| key(&rows[*i]).is_some())
            .collect();
        order.sort_by(|a, b| {
            let (x, y) = (key(&rows[*a]).unwrap_or(0.0), key(&rows[*b]).unwrap_or(0.0));
            if ascending {
                x.total_cmp(&y)
            } else {
                y.total_cmp(&x)
            }
        });
        for (rank, i) in order.iter().enumerate() {
            rows[*i].rank = rank as i32 + 1;
        }
        rows.sort_by_key(|r| if r.rank == 0 { i32::MAX } else { r.rank });
        Ok(pb::PeerScreen {
            date,
            metrics,
            rank_by,
            rows,
        })
    }

    /// Every metric of one symbol at `date`, each with a value or a reason.
    async fn peer_metrics(
        &self,
        symbol: &str,
        date: &str,
    ) -> Result<Vec<pb::MetricValue>, ServiceError> {
        let d = parse_date(date).map_err(ServiceError::invalid)?;
        let start = format_date(d.replace_year(d.year() - 2).unwrap_or(d));
        let bars = self
            .market
            .bars(&symbol.to_ascii_uppercase(), &start, date, 2_000, false)
            .await?;
        let close = bars.last().map(|b| (b.close, b.date.clone()));
        let mut out = Vec::new();
        let miss = |metric: &str, why: String| pb::MetricValue {
            metric: metric.to_owned(),
            value: None,
            missing: Some(why),
            detail: String::new(),
        };
        let momentum = match bars.len() {
            n if n > MOMENTUM_BARS => {
                let (now, then) = (&bars[n - 1], &bars[n - 1 - MOMENTUM_BARS]);
                pb::MetricValue {
                    metric: "momentum".to_owned(),
                    value: Some(now.adj_close / then.adj_close - 1.0),
                    missing: None,
                    detail: format!(
                        "adjusted close {} on {} over {} on {}",
                        now.adj_close, now.date, then.adj_close, then.date
                    ),
                }
            }
            n => miss(
                "momentum",
                format!("{n} bars by {date}, {} needed", MOMENTUM_BARS + 1),
            ),
        };
        out.push(momentum);
        let company = match self.resolve_symbol(symbol).await {
            Ok(c) => c,
            Err(e) => {
                for m in [
                    "pe",
                    "ps",
                    "revenue_growth",
                    "net_margin",
                    "operating_margin",
                ] {
                    out.push(miss(m, e.message.clone()));
                }
                return Ok(out);
            }
        };
        let known = self.known(&company.cik, date).await?;
        let ttm = |item: LineItem, month: &str| lineitems::ttm_at(&known.values[&item], month);
        let latest = lineitems::latest_month(&known.values[&LineItem::Revenue])
            .or_else(|| lineitems::latest_month(&known.values[&LineItem::EpsDiluted]));
        let Some(month) = latest else {
            for m in [
                "pe",
                "ps",
                "revenue_growth",
                "net_margin",
                "operating_margin",
            ] {
                out.push(miss(
                    m,
                    format!("no quarterly filing of CIK {} filed by {date}", company.cik),
                ));
            }
            return Ok(out);
        };
        let revenue = ttm(LineItem::Revenue, &month);
        let eps = ttm(LineItem::EpsDiluted, &month);
        let no_ttm = |what: &str| {
            format!("no TTM {what} at the quarter ending {month} from filings by {date}")
        };
        // P/E: the close over TTM diluted EPS.
        out.push(match (&close, &eps) {
            (None, _) => miss("pe", format!("no bar of {symbol} on or before {date}")),
            (_, None) => miss("pe", no_ttm("diluted EPS")),
            (Some(_), Some(e)) if e.value <= 0.0 => miss(
                "pe",
                format!("TTM diluted EPS is {} (not positive)", e.value),
            ),
            (Some((c, on)), Some(e)) => pb::MetricValue {
                metric: "pe".to_owned(),
                value: Some(c / e.value),
                missing: None,
                detail: format!(
                    "close {c} on {on} / TTM diluted EPS {} ({}, to {})",
                    e.value, e.method, e.period_end
                ),
            },
        });
        let shares = known.values[&LineItem::DilutedShares]
            .iter()
            .filter(|((m, q), _)| *m == month && (1..=4).contains(q))
            .map(|(_, c)| c.value)
            .next();
        out.push(match (&close, &revenue, shares) {
            (None, _, _) => miss("ps", format!("no bar of {symbol} on or before {date}")),
            (_, None, _) => miss("ps", no_ttm("revenue")),
            (_, _, None) => miss(
                "ps",
                format!("no diluted share count for the quarter ending {month}"),
            ),
            (Some((c, on)), Some(rv), Some(s)) => pb::MetricValue {
                metric: "ps".to_owned(),
                value: Some(c / (rv.value / s)),
                missing: None,
                detail: format!(
                    "close {c} on {on} / (TTM revenue {} / diluted shares {s})",
                    rv.value
                ),
            },
        });
        let year_before = month_minus(&month, 12).unwrap_or_default();
        out.push(match (&revenue, ttm(LineItem::Revenue, &year_before)) {
            (Some(now), Some(then)) if then.value != 0.0 => pb::MetricValue {
                metric: "revenue_growth".to_owned(),
                value: Some(now.value / then.value - 1.0),
                missing: None,
                detail: format!(
                    "TTM revenue {} to {} over {} to {}",
                    now.value, now.period_end, then.value, then.period_end
                ),
            },
            (None, _) => miss("revenue_growth", no_ttm("revenue")),
            _ => miss(
                "revenue_growth",
                format!("no TTM revenue a year before, at {year_before}"),
            ),
        });
        for (metric, item) in [
            ("net_margin", LineItem::NetIncome),
            ("operating_margin", LineItem::OperatingIncome),
        ] {
            out.push(match (&revenue, ttm(item, &month)) {
                (Some(rv), Some(x)) if rv.value != 0.0 => pb::MetricValue {
                    metric: metric.to_owned(),
                    value: Some(x.value / rv.value),
                    missing: None,
                    detail: format!("TTM {item} {} / TTM revenue {}", x.value, rv.value),
                },
                (None, _) => miss(metric, no_ttm("revenue")),
                _ => miss(metric, no_ttm(item.as_str())),
            });
        }
        Ok(out)
    }
}

fn line_value(item: LineItem, c: &Chosen) -> pb::LineItemValue {
    pb::LineItemValue {
        item: item.as_str().to_owned(),
        value: c.value,
        unit: item.unit().to_owned(),
        source: Some(pb::Provenance {
            accession: c.fact.accession.clone(),
            form: c.fact.form.clone(),
            filed: c.fact.filed.clone(),
            period_start: c.fact.period_start.clone(),
            period_end: c.fact.period_end.clone(),
            source_format: c.fact.source_format.clone(),
            concept: c.fact.concept.trim_start_matches("us-gaap:").to_owned(),
        }),
        restated: c.original.is_some(),
        original_value: c.original,
        derived: c.derived,
    }
}
