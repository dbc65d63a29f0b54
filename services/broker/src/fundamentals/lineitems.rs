//! Standard line items over the raw us-gaap concepts, chosen
//! point-in-time, and the trailing twelve months derived from quarters.
//!
//! **The mapping.** Each line item lists its concepts in order of
//! preference; for a period the first concept with a value wins. The lists
//! cover the renamings across the years: revenue was `SalesRevenueNet`
//! until ASC 606 (2018), then
//! `RevenueFromContractWithCustomerExcludingAssessedTax`.
//!
//! **Point-in-time.** The caller reads only facts filed on or before
//! `as_of`. Of those, for one period (its end rounded to a month and its
//! length in quarters), the value of the latest filing counts: a restated
//! value replaces the original only from its own filing date, and the
//! original is kept beside it.
//!
//! **Quarters and TTM.** A discrete quarter a company did not report (the
//! fourth, which has no 10-Q, and the cash flows 10-Qs give only year to
//! date) is derived as year to date less the year to date a quarter
//! earlier. TTM at a quarter end is the fiscal year ending there, else the
//! four quarters summed, else the year to date plus the prior fiscal year
//! less the prior year to date.

use super::model::month_minus;
use super::store::FactRow;
use std::collections::BTreeMap;

ithaca_kit::text_enum! {
    /// The standard line items.
    pub enum LineItem {
        Revenue = "revenue",
        NetIncome = "net_income",
        EpsDiluted = "eps_diluted",
        DilutedShares = "diluted_shares",
        OperatingIncome = "operating_income",
        TotalAssets = "total_assets",
        TotalLiabilities = "total_liabilities",
        Equity = "equity",
        OperatingCashFlow = "operating_cash_flow",
    }
}

impl LineItem {
    /// The us-gaap concepts, in order of preference.
    pub fn concepts(self) -> &'static [&'static str] {
        match self {
            LineItem::Revenue => &[
                "us-gaap:RevenueFromContractWithCustomerExcludingAssessedTax",
                "us-gaap:Revenues",
                "us-gaap:SalesRevenueNet",
                "us-gaap:RevenueFromContractWithCustomerIncludingAssessedTax",
                "us-gaap:SalesRevenueGoodsNet",
            ],
            LineItem::NetIncome => &[
                "us-gaap:NetIncomeLoss",
                "us-gaap:ProfitLoss",
                "us-gaap:NetIncomeLossAvailableToCommonStockholdersBasic",
            ],
            LineItem::EpsDiluted => &[
                "us-gaap:EarningsPerShareDiluted",
                "us-gaap:EarningsPerShareBasicAndDiluted",
            ],
            LineItem::DilutedShares => &["us-gaap:WeightedAverageNumberOfDilutedSharesOutstanding"],
            LineItem::OperatingIncome => &["us-gaap:OperatingIncomeLoss"],
            LineItem::TotalAssets => &["us-gaap:Assets"],
            LineItem::TotalLiabilities => &["us-gaap:Liabilities"],
            LineItem::Equity => &[
                "us-gaap:StockholdersEquity",
                "us-gaap:StockholdersEquityIncludingPortionAttributableToNoncontrollingInterest",
            ],
            LineItem::OperatingCashFlow => &[
                "us-gaap:NetCashProvidedByUsedInOperatingActivities",
                "us-gaap:NetCashProvidedByUsedInOperatingActivitiesContinuingOperations",
            ],
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            LineItem::EpsDiluted => "USD/shares",
            LineItem::DilutedShares => "shares",
            _ => "USD",
        }
    }

    /// A balance (an instant) rather than a flow over a period.
    pub fn is_balance(self) -> bool {
        matches!(
            self,
            LineItem::TotalAssets | LineItem::TotalLiabilities | LineItem::Equity
        )
    }

    /// Flows whose quarters add up to the year (EPS adds up only
    /// approximately, as the share count moves; TTM EPS is still the sum of
    /// four quarters' diluted EPS, the usual convention).
    pub fn sums(self) -> bool {
        !self.is_balance() && self != LineItem::DilutedShares
    }

    /// Every concept of every line item.
    pub fn all_concepts() -> Vec<&'static str> {
        LineItem::ALL
            .iter()
            .flat_map(|i| i.concepts().iter().copied())
            .collect()
    }
}

/// A period's key: its end rounded to a month (`YYYY-MM`) and quarters.
pub type Key = (String, i64);

/// One line item's value for one period, with its provenance.
#[derive(Clone, Debug, PartialEq)]
pub struct Chosen {
    pub value: f64,
    /// The fact that counts (the latest filed), or for a derived quarter
    /// the later of its two parts.
    pub fact: FactRow,
    /// The first value reported, when a later filing changed it.
    pub original: Option<f64>,
    pub derived: bool,
    /// Accessions of every part (one, or two for a derived quarter).
    pub parts: Vec<String>,
}

/// A source disagreeing with another on the same fact of the same filing.
#[derive(Clone, Debug, PartialEq)]
pub struct Disagreement {
    pub concept: String,
    pub accession: String,
    pub period_end: String,
    pub quarters: i64,
    /// `(source_format, value)`.
    pub values: Vec<(String, f64)>,
}

fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Source preference when two formats of one filing agree (dates are
/// exact in an instance and in companyfacts, month-rounded in a Data Set).
fn source_rank(s: &str) -> u8 {
    match s {
        "xbrl" => 0,
        "companyfacts" => 1,
        _ => 2,
    }
}

/// Each period's value of `item` from `facts` (already filtered to those
/// filed by `as_of`), with the quarters the filings did not give derived.
pub fn choose(item: LineItem, facts: &[FactRow]) -> BTreeMap<Key, Chosen> {
    let concepts = item.concepts();
    let mut by_key: BTreeMap<Key, Vec<&FactRow>> = BTreeMap::new();
    for f in facts {
        if f.unit == item.unit() && concepts.contains(&f.concept.as_str()) && f.quarters >= 0 {
            if item.is_balance() != (f.quarters == 0) {
                continue;
            }
            by_key
                .entry((f.period_month.clone(), f.quarters))
                .or_default()
                .push(f);
        }
    }
    let mut out = BTreeMap::new();
    for (key, mut cands) in by_key {
        let best = cands
            .iter()
            .map(|f| {
                concepts
                    .iter()
                    .position(|c| *c == f.concept)
                    .unwrap_or(usize::MAX)
            })
            .min()
            .unwrap_or(usize::MAX);
        cands.retain(|f| concepts.get(best) == Some(&f.concept.as_str()));
        cands.sort_by(|a, b| {
            a.filed
                .cmp(&b.filed)
                .then(source_rank(&b.source_format).cmp(&source_rank(&a.source_format)))
        });
        let (Some(first), Some(last)) = (cands.first(), cands.last()) else {
            continue;
        };
        let mut fact = (*last).clone();
        if fact.source_format == "fsds"
            && let Some(exact) = cands.iter().find(|f| f.source_format != "fsds")
        {
            fact.period_end = exact.period_end.clone();
            fact.period_start = exact.period_start.clone();
        }
        // The fiscal label of the filing that first reported the period.
        fact.fiscal_year = first.fiscal_year;
        fact.fiscal_period = first.fiscal_period.clone().map(|fp| {
            if key.1 == 1 && fp == "FY" {
                "Q4".to_owned()
            } else {
                fp
            }
        });
        out.insert(
            key,
            Chosen {
                value: last.value,
                original: (!same(first.value, last.value)).then_some(first.value),
                derived: false,
                parts: vec![last.accession.clone()],
                fact,
            },
        );
    }
    if item.sums() {
        derive_quarters(&mut out);
    }
    out
}

/// A missing discrete quarter at month M: YTD(M, n) − YTD(M − 3, n − 1).
fn derive_quarters(values: &mut BTreeMap<Key, Chosen>) {
    let ytd: Vec<Key> = values.keys().filter(|(_, q)| *q >= 2).cloned().collect();
    for (month, n) in ytd {
        if values.contains_key(&(month.clone(), 1)) {
            continue;
        }
        let Some(prev) = month_minus(&month, 3) else {
            continue;
        };
        let (Some(total), Some(part)) =
            (values.get(&(month.clone(), n)), values.get(&(prev, n - 1)))
        else {
            continue;
        };
        let mut fact = total.fact.clone();
        fact.quarters = 1;
        fact.period_start = None;
        if fact.fiscal_period.as_deref() == Some("FY") {
            fact.fiscal_period = Some("Q4".to_owned());
        }
        let derived = Chosen {
            value: total.value - part.value,
            fact,
            original: None,
            derived: true,
            parts: vec![total.fact.accession.clone(), part.fact.accession.clone()],
        };
        values.insert((month, 1), derived);
    }
}

/// Where two source formats of one filing report different values for the
/// same undimensioned fact.
pub fn disagreements(facts: &[FactRow]) -> Vec<Disagreement> {
    let mut groups: BTreeMap<(String, String, String, i64, String), Vec<&FactRow>> =
        BTreeMap::new();
    for f in facts {
        groups
            .entry((
                f.concept.clone(),
                f.accession.clone(),
                f.period_month.clone(),
                f.quarters,
                f.unit.clone(),
            ))
            .or_default()
            .push(f);
    }
    let mut out = Vec::new();
    for ((concept, accession, _, quarters, _), rows) in groups {
        let mut values: Vec<(String, f64)> = Vec::new();
        for r in &rows {
            if !values.iter().any(|(s, _)| *s == r.source_format) {
                values.push((r.source_format.clone(), r.value));
            }
        }
        if values.len() > 1 && values.iter().any(|(_, v)| !same(*v, values[0].1)) {
            out.push(Disagreement {
                concept,
                accession,
                period_end: rows[0].period_end.clone(),
                quarters,
                values,
            });
        }
    }
    out
}

/// A TTM value and how it was made.
#[derive(Clone, Debug, PartialEq)]
pub struct Ttm {
    pub value: f64,
    pub period_end: String,
    pub method: &'static str,
    pub accessions: Vec<String>,
}

/// The TTM of a summing line item at the quarter ending in `month`: the
/// fiscal year ending there; else the year to date plus the prior fiscal
/// year less the prior year to date (reported values only where the filings
/// give them, which matters for EPS, whose quarters do not add up exactly);
/// else four quarters summed.
pub fn ttm_at(values: &BTreeMap<Key, Chosen>, month: &str) -> Option<Ttm> {
    let get = |m: &str, q: i64| values.get(&(m.to_owned(), q));
    let end = |c: &Chosen| c.fact.period_end.clone();
    if let Some(a) = get(month, 4) {
        return Some(Ttm {
            value: a.value,
            period_end: end(a),
            method: "annual",
            accessions: a.parts.clone(),
        });
    }
    for n in 1..=3 {
        let (Some(ytd), Some(fy_month), Some(prior_month)) = (
            get(month, n),
            month_minus(month, 3 * n as i32),
            month_minus(month, 12),
        ) else {
            continue;
        };
        let (Some(fy), Some(prior)) = (get(&fy_month, 4), get(&prior_month, n)) else {
            continue;
        };
        let mut accessions: Vec<String> = [ytd, fy, prior]
            .iter()
            .flat_map(|c| c.parts.clone())
            .collect();
        accessions.sort();
        accessions.dedup();
        return Some(Ttm {
            value: ytd.value + fy.value - prior.value,
            period_end: end(ytd),
            method: "ytd",
            accessions,
        });
    }
    let months: Vec<String> = (0..4).filter_map(|i| month_minus(month, 3 * i)).collect();
    let quarters: Vec<&Chosen> = months.iter().filter_map(|m| get(m, 1)).collect();
    if quarters.len() == 4 {
        let mut accessions: Vec<String> = quarters.iter().flat_map(|c| c.parts.clone()).collect();
        accessions.sort();
        accessions.dedup();
        return Some(Ttm {
            value: quarters.iter().map(|c| c.value).sum(),
            period_end: end(quarters[0]),
            method: "four_quarters",
            accessions,
        });
    }
    None
}

/// The latest quarter end (a key month) with any value of a flow.
pub fn latest_month(values: &BTreeMap<Key, Chosen>) -> Option<String> {
    values
        .keys()
        .filter(|(_, q)| *q >= 1)
        .map(|(m, _)| m.clone())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        concept: &str,
        month: &str,
        q: i64,
        v: f64,
        acc: &str,
        filed: &str,
        src: &str,
    ) -> FactRow {
        FactRow {
            concept: concept.to_owned(),
            unit: "USD".to_owned(),
            period_start: None,
            period_end: format!("{month}-28"),
            period_month: month.to_owned(),
            quarters: q,
            value: v,
            accession: acc.to_owned(),
            form: "10-Q".to_owned(),
            filed: filed.to_owned(),
            fiscal_year: Some(2010),
            fiscal_period: Some("Q1".to_owned()),
            source_format: src.to_owned(),
        }
    }

    #[test]
    fn a_renamed_concept_still_maps_and_the_later_filing_counts() {
        let facts = vec![
            row(
                "us-gaap:SalesRevenueNet",
                "2010-03",
                1,
                100.0,
                "a",
                "2010-04-21",
                "fsds",
            ),
            row(
                "us-gaap:SalesRevenueNet",
                "2010-03",
                1,
                110.0,
                "b",
                "2011-04-21",
                "companyfacts",
            ),
            row(
                "us-gaap:RevenueFromContractWithCustomerExcludingAssessedTax",
                "2018-12",
                1,
                5.0,
                "c",
                "2019-01-30",
                "xbrl",
            ),
        ];
        let v = choose(LineItem::Revenue, &facts);
        let q = &v[&("2010-03".to_owned(), 1)];
        assert_eq!(q.value, 110.0);
        assert_eq!(q.original, Some(100.0));
        assert_eq!(v[&("2018-12".to_owned(), 1)].value, 5.0);
        let before = choose(LineItem::Revenue, &facts[..1]);
        assert_eq!(before[&("2010-03".to_owned(), 1)].value, 100.0);
    }

    #[test]
    fn ttm_from_quarters_years_and_ytd() {
        let c = "us-gaap:Revenues";
        let facts = vec![
            row(c, "2009-06", 4, 400.0, "k", "2009-08-01", "fsds"),
            row(c, "2009-09", 1, 110.0, "q1", "2009-10-20", "fsds"),
            row(c, "2009-12", 2, 230.0, "q2", "2010-01-20", "fsds"),
            row(c, "2010-03", 3, 360.0, "q3", "2010-04-20", "fsds"),
            row(c, "2009-03", 3, 290.0, "q3", "2010-04-20", "fsds"),
        ];
        let v = choose(LineItem::Revenue, &facts);
        // Q2 and Q3 derived from the year to date.
        assert_eq!(v[&("2009-12".to_owned(), 1)].value, 120.0);
        assert!(v[&("2010-03".to_owned(), 1)].derived);
        // The fourth quarter too (the year less nine months).
        assert_eq!(v[&("2009-06".to_owned(), 1)].value, 110.0);
        let t = ttm_at(&v, "2010-03").expect("a value");
        assert_eq!((t.value, t.method), (400.0 + 360.0 - 290.0, "ytd"));
        // Without the prior year to date, the four quarters (two derived)
        // give the same.
        let fewer: BTreeMap<Key, Chosen> = v
            .iter()
            .filter(|(k, _)| **k != ("2009-03".to_owned(), 3))
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        let t = ttm_at(&fewer, "2010-03").expect("a value");
        assert_eq!((t.value, t.method), (470.0, "four_quarters"));
        assert_eq!(ttm_at(&v, "2009-06").expect("a value").method, "annual");
    }

    #[test]
    fn disagreeing_sources_are_reported() {
        let c = "us-gaap:NetIncomeLoss";
        let facts = vec![
            row(c, "2010-03", 1, 3074.0, "a", "2010-04-21", "fsds"),
            row(c, "2010-03", 1, 3075.0, "a", "2010-04-21", "companyfacts"),
            row(c, "2009-03", 1, 1.0, "a", "2010-04-21", "fsds"),
            row(c, "2009-03", 1, 1.0, "a", "2010-04-21", "companyfacts"),
        ];
        let d = disagreements(&facts);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].values.len(), 2);
    }
}
