//! SEC fundamentals in the broker on the real EDGAR files of
//! `../shared/data/fundamentals`, on SQLite and PostgreSQL: Apple's FY2019
//! Q1 from the XBRL instance and companyfacts, the 10-Q of 2010-03-27 in the
//! Data Set and companyfacts, `as_of` and a restatement, Form 4 counts per
//! month from the filing index and the Form 4's transactions, the peer
//! screen at 2010-06-30 checked against a computation from the raw files,
//! idempotent re-ingest, and bad input that writes nothing. Plus
//! `ithaca ingest sec` against `ithaca serve broker`.

use crate::common;

use ithaca_broker::fundamentals::FundamentalsService;
use ithaca_kit::db::Db;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::principal::Principal;
use ithaca_proto::broker::v1 as pb;
use serde_json::Value;
use std::path::{Path, PathBuf};

common::on_both_databases!(ithaca_broker::open_db, "sec" =>
    apple_from_every_source,
    insider_activity_and_the_form_4,
    peers_at_2010_06_30,
    bad_input_writes_nothing,
);

fn dir() -> PathBuf {
    common::astro::data().join("fundamentals")
}

fn file(rel: &str) -> PathBuf {
    dir().join(rel)
}

fn json(rel: &str) -> Value {
    serde_json::from_slice(&std::fs::read(file(rel)).expect("read")).expect("json")
}

async fn ingest(
    svc: &FundamentalsService,
    path: &Path,
) -> Result<pb::SecIngestReport, ServiceError> {
    let name = path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    svc.ingest_file(
        &Principal::system(""),
        &name,
        std::fs::read(path).expect("read"),
    )
    .await
}

async fn must(svc: &FundamentalsService, rel: &str) -> pb::SecIngestReport {
    ingest(svc, &file(rel))
        .await
        .unwrap_or_else(|e| panic!("{rel}: {}", e.message))
}

/// Apple's filing index and companyfacts.
async fn apple(svc: &FundamentalsService) {
    must(svc, "submissions/CIK0000320193-submissions-001.json").await;
    must(svc, "submissions/CIK0000320193-2013-2023.json").await;
    must(svc, "companyfacts/CIK0000320193.json").await;
}

fn fundamentals(symbol: &str, as_of: &str, period: &str) -> pb::GetFundamentalsRequest {
    pb::GetFundamentalsRequest {
        symbol: symbol.to_owned(),
        as_of: Some(as_of.to_owned()),
        period: Some(period.to_owned()),
        limit: Some(40),
    }
}

fn item<'a>(f: &'a pb::Fundamentals, end: &str, name: &str) -> Option<&'a pb::LineItemValue> {
    f.periods
        .iter()
        .find(|p| p.period_end == end)?
        .items
        .iter()
        .find(|i| i.item == name)
}

/// A companyfacts value: concept, accession, start and end.
fn companyfacts_value(
    doc: &Value,
    concept: &str,
    unit: &str,
    accn: &str,
    start: &str,
    end: &str,
) -> f64 {
    doc["facts"]["us-gaap"][concept]["units"][unit]
        .as_array()
        .expect("values")
        .iter()
        .find(|v| v["accn"] == accn && v["start"] == start && v["end"] == end)
        .and_then(|v| v["val"].as_f64())
        .unwrap_or_else(|| panic!("{concept} {accn} {start}..{end} in companyfacts"))
}

async fn apple_from_every_source(db: Db) {
    let svc = ithaca_broker::fundamentals_service(db);
    apple(&svc).await;
    let xbrl = must(&svc, "xbrl/aapl-10q-2018q4/aapl-20181229.xml").await;
    assert_eq!(xbrl.format, "xbrl");
    assert!(
        xbrl.tickers.contains(&"AAPL=0000320193".to_owned()),
        "{:?}",
        xbrl.tickers
    );
    must(&svc, "fsds/2010q2.zip").await;

    // FY2019 Q1, the 10-Q for 2018-12-29, identical from the instance and
    // from companyfacts.
    let f = svc
        .fundamentals(&fundamentals("AAPL", "2019-02-01", "quarter"))
        .await
        .expect("fundamentals");
    assert_eq!(f.cik, "0000320193");
    let q = f
        .periods
        .iter()
        .find(|p| p.period_end == "2018-12-29")
        .expect("FY2019 Q1");
    assert_eq!((q.fiscal_year, q.fiscal_period.as_str()), (2019, "Q1"));
    let cf = json("companyfacts/CIK0000320193.json");
    let accn = "0000320193-19-000010";
    for (name, concept, unit, expected) in [
        (
            "revenue",
            "RevenueFromContractWithCustomerExcludingAssessedTax",
            "USD",
            84_310_000_000.0,
        ),
        ("net_income", "NetIncomeLoss", "USD", 19_965_000_000.0),
        ("eps_diluted", "EarningsPerShareDiluted", "USD/shares", 4.18),
    ] {
        let v = item(&f, "2018-12-29", name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(v.value, expected, "{name}");
        assert_eq!(
            companyfacts_value(&cf, concept, unit, accn, "2018-09-30", "2018-12-29"),
            expected
        );
        let src = v.source.as_ref().expect("provenance");
        assert_eq!(
            (
                src.accession.as_str(),
                src.form.as_str(),
                src.filed.as_str(),
                src.source_format.as_str()
            ),
            (accn, "10-Q", "2019-01-30", "xbrl"),
            "{name}"
        );
        assert_eq!(src.period_start.as_deref(), Some("2018-09-30"));
        assert!(!v.restated);
    }
    let filing = svc.filing(accn).await.expect("filing");
    assert_eq!(
        filing.source_formats,
        vec!["companyfacts".to_owned(), "xbrl".to_owned()]
    );
    assert!(
        f.disagreements.iter().all(|d| d.accession != accn),
        "instance and companyfacts agree: {:?}",
        f.disagreements
            .iter()
            .filter(|d| d.accession == accn)
            .collect::<Vec<_>>()
    );

    // The 10-Q of 2010-03-27 in the Data Set and in companyfacts.
    let f = svc
        .fundamentals(&fundamentals("AAPL", "2010-05-01", "quarter"))
        .await
        .expect("2010");
    let accn_2010 = "0001193125-10-088957";
    for (name, concept, expected) in [
        ("revenue", "SalesRevenueNet", 13_499_000_000.0),
        ("net_income", "NetIncomeLoss", 3_074_000_000.0),
    ] {
        let v = item(&f, "2010-03-27", name).unwrap_or_else(|| panic!("{name} 2010"));
        assert_eq!(v.value, expected);
        assert_eq!(
            companyfacts_value(&cf, concept, "USD", accn_2010, "2009-12-27", "2010-03-27"),
            expected
        );
        assert_eq!(v.source.as_ref().expect("source").accession, accn_2010);
    }
    let filing = svc.filing(accn_2010).await.expect("filing 2010");
    assert_eq!(
        filing.source_formats,
        vec!["companyfacts".to_owned(), "fsds".to_owned()]
    );
    let revenue_disagreements: Vec<_> = f
        .disagreements
        .iter()
        .filter(|d| {
            d.accession == accn_2010
                && (d.concept.ends_with("SalesRevenueNet") || d.concept.ends_with("NetIncomeLoss"))
        })
        .collect();
    assert!(
        revenue_disagreements.is_empty(),
        "{revenue_disagreements:?}"
    );

    // `as_of` the day before the 10-Q was filed hides it.
    let before = svc
        .fundamentals(&fundamentals("AAPL", "2019-01-29", "quarter"))
        .await
        .expect("before");
    assert!(item(&before, "2018-12-29", "revenue").is_none());
    assert!(
        before
            .periods
            .iter()
            .all(|p| p.period_end.as_str() < "2018-12-29")
    );

    // A restatement shows only from its own filing date: the 10-K of
    // 2020-10-30 restated FY2019 Q1's diluted EPS for the 4-for-1 split.
    let old = svc
        .fundamentals(&fundamentals("AAPL", "2020-10-29", "quarter"))
        .await
        .expect("old");
    let eps = item(&old, "2018-12-29", "eps_diluted").expect("eps");
    assert_eq!((eps.value, eps.restated), (4.18, false));
    let new = svc
        .fundamentals(&fundamentals("AAPL", "2020-10-30", "quarter"))
        .await
        .expect("new");
    let eps = item(&new, "2018-12-29", "eps_diluted").expect("eps restated");
    assert_eq!(
        (eps.value, eps.restated, eps.original_value),
        (1.05, true, Some(4.18))
    );
    assert_eq!(eps.source.as_ref().expect("source").filed, "2020-10-30");

    // The renaming: revenue is SalesRevenueNet in 2010 and the ASC 606
    // concept in 2018, both `revenue`.
    let y = svc
        .fundamentals(&fundamentals("AAPL", "2019-12-31", "year"))
        .await
        .expect("years");
    let concepts: Vec<String> = y
        .periods
        .iter()
        .filter_map(|p| p.items.iter().find(|i| i.item == "revenue"))
        .map(|i| i.source.as_ref().expect("source").concept.clone())
        .collect();
    assert!(
        concepts.contains(&"SalesRevenueNet".to_owned()),
        "{concepts:?}"
    );
    assert!(concepts.contains(&"RevenueFromContractWithCustomerExcludingAssessedTax".to_owned()));

    // TTM from quarters at FY2019 Q1: the year to date plus FY2018 less
    // FY2018 Q1, from companyfacts' own numbers.
    let ttm = f_ttm(&svc, "2019-02-01", "revenue").await;
    // (The three concepts of one line item: SalesRevenueNet in the 10-Q of
    // 2018-02-02, Revenues in the 10-K of 2018-11-05.)
    let expected = 84_310_000_000.0
        + companyfacts_value(
            &cf,
            "Revenues",
            "USD",
            "0000320193-18-000145",
            "2017-10-01",
            "2018-09-29",
        )
        - companyfacts_value(
            &cf,
            "SalesRevenueNet",
            "USD",
            "0000320193-18-000007",
            "2017-10-01",
            "2017-12-30",
        );
    assert_eq!((ttm.value, ttm.method.as_str()), (expected, "ytd"));

    // Re-ingesting changes nothing.
    let again = must(&svc, "companyfacts/CIK0000320193.json").await;
    assert!(again.already_present);
    let again = must(&svc, "fsds/2010q2.zip").await;
    assert!(again.already_present && again.facts_stored == 0);
    let after = svc
        .fundamentals(&fundamentals("AAPL", "2019-02-01", "quarter"))
        .await
        .expect("after");
    assert_eq!(
        after,
        svc.fundamentals(&fundamentals("AAPL", "2019-02-01", "quarter"))
            .await
            .expect("same")
    );
}

async fn f_ttm(svc: &FundamentalsService, as_of: &str, name: &str) -> pb::TtmValue {
    let f = svc
        .fundamentals(&fundamentals("AAPL", as_of, "quarter"))
        .await
        .expect("ttm");
    f.ttm
        .into_iter()
        .find(|t| t.item == name)
        .unwrap_or_else(|| panic!("ttm {name}"))
}

async fn insider_activity_and_the_form_4(db: Db) {
    let svc = ithaca_broker::fundamentals_service(db);
    // Without the filing index, a Form 4 cannot find its filing.
    let e = ingest(&svc, &file("form4/aapl-4-20201013.xml"))
        .await
        .expect_err("no index yet");
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message.contains("aapl-4-20201013.xml") && e.message.contains("submissions"),
        "{}",
        e.message
    );
    apple(&svc).await;
    let r = must(&svc, "form4/aapl-4-20201013.xml").await;
    assert_eq!(
        (r.format.as_str(), r.transactions, r.transactions_stored),
        ("form4", 1, 1)
    );

    // Form 4 filings per month of 2012, counted here from the raw index.
    let page = json("submissions/CIK0000320193-submissions-001.json");
    let mut expected = std::collections::BTreeMap::new();
    for (form, date) in page["form"]
        .as_array()
        .expect("form")
        .iter()
        .zip(page["filingDate"].as_array().expect("dates"))
    {
        let date = date.as_str().expect("date");
        if form == "4" && date.starts_with("2012") {
            *expected.entry(date[..7].to_owned()).or_insert(0) += 1;
        }
    }
    let a = svc
        .insider_activity(&pb::GetInsiderActivityRequest {
            symbol: "AAPL".into(),
            from: Some("2012-01-01".into()),
            to: Some("2012-12-31".into()),
        })
        .await
        .expect("activity");
    assert_eq!(a.months.len(), 12);
    for m in &a.months {
        assert_eq!(
            m.form4_filings,
            expected.get(&m.month).copied().unwrap_or(0),
            "{}",
            m.month
        );
    }
    assert_eq!(a.form4_filings, expected.values().sum::<i32>());
    assert_eq!(a.form4_filings, 62);

    // The Form 4's transaction, exactly, in its month.
    let a = svc
        .insider_activity(&pb::GetInsiderActivityRequest {
            symbol: "320193".into(),
            from: Some("2020-10-01".into()),
            to: Some("2020-10-31".into()),
        })
        .await
        .expect("october 2020");
    assert_eq!(a.transactions.len(), 1);
    let t = &a.transactions[0];
    assert_eq!(t.accession, "0000320193-20-000086");
    assert_eq!(
        (t.owner_name.as_str(), t.relationship.as_str()),
        ("Maestri Luca", "officer")
    );
    assert_eq!(
        t.officer_title.as_deref(),
        Some("Senior Vice President, CFO")
    );
    assert_eq!((t.date.as_str(), t.code.as_str()), ("2020-10-09", "S"));
    assert_eq!(
        (
            t.shares,
            t.price,
            t.acquired_disposed.as_str(),
            t.shares_owned_after
        ),
        (243_431.0, Some(116.89), "D", 110_272.0)
    );
    assert_eq!(a.months[0].shares_sold, 243_431.0);
    assert_eq!(a.net, "selling");
    let filing = svc.filing("0000320193-20-000086").await.expect("filing");
    assert_eq!(
        (filing.form.as_str(), filing.filing_date.as_str()),
        ("4", "2020-10-13")
    );
    assert_eq!(filing.transactions, a.transactions);

    // Filings by form and date.
    let f = svc
        .filings(&pb::GetFilingsRequest {
            symbol: "AAPL".into(),
            form: Some("10-K".into()),
            from: Some("2009-01-01".into()),
            to: Some("2012-12-31".into()),
            limit: Some(10),
            offset: None,
        })
        .await
        .expect("filings");
    let dates: Vec<&str> = f.filings.iter().map(|x| x.filing_date.as_str()).collect();
    assert_eq!(
        dates,
        ["2012-10-31", "2011-10-26", "2010-10-27", "2009-10-27"]
    );
    assert_eq!(
        f.filings[2].uri,
        format!("doomberg://filings/{}", f.filings[2].accession)
    );
}

/// TTM diluted EPS at a date from the raw companyfacts: the latest value
/// filed by then of the year to date, plus the prior fiscal year, less the
/// prior year to date.
fn raw_ttm_eps(
    doc: &Value,
    date: &str,
    ytd: (&str, &str),
    fy: (&str, &str),
    prior: (&str, &str),
) -> f64 {
    let values = doc["facts"]["us-gaap"]["EarningsPerShareDiluted"]["units"]["USD/shares"]
        .as_array()
        .expect("eps");
    let latest = |(start, end): (&str, &str)| {
        values
            .iter()
            .filter(|v| {
                v["start"] == start
                    && v["end"] == end
                    && v["filed"].as_str().expect("filed") <= date
            })
            .max_by_key(|v| v["filed"].as_str().expect("filed").to_owned())
            .and_then(|v| v["val"].as_f64())
            .unwrap_or_else(|| panic!("EPS {start}..{end} filed by {date}"))
    };
    latest(ytd) + latest(fy) - latest(prior)
}

async fn peers_at_2010_06_30(db: Db) {
    let market = ithaca_broker::market_service(db.clone());
    let csv = std::fs::read(common::astro::data().join("market/stocks_daily_ohlcv_2000-2013.csv"))
        .expect("bars");
    let bars = ithaca_broker::market::csv::parse_bars("bars.csv", &csv).expect("bars parse");
    let checksum = bars.checksum.clone();
    market
        .ingest(
            &Principal::system(""),
            "bars.csv",
            &checksum,
            bars.rows.into_iter().map(Into::into).collect(),
        )
        .await
        .expect("bars ingest");
    let svc = ithaca_broker::fundamentals_service(db);
    apple(&svc).await;
    // The 2010q2 Data Set: the 10-Qs of all four for the quarter to March
    // 2010 (2009q3's add only earlier 10-Qs, no fiscal year: no TTM).
    must(&svc, "fsds/2010q2.zip").await;
    let screen = svc
        .screen_peers(&pb::ScreenPeersRequest {
            symbols: vec!["AAPL".into(), "MSFT".into(), "IBM".into(), "GOOG".into()],
            date: "2010-06-30".into(),
            metrics: vec![],
            rank_by: Some("pe".into()),
        })
        .await
        .expect("screen");
    assert_eq!(screen.rows.len(), 4, "no symbol drops out");
    let row = |s: &str| screen.rows.iter().find(|r| r.symbol == s).expect(s);
    let metric = |s: &str, m: &str| {
        row(s)
            .metrics
            .iter()
            .find(|x| x.metric == m)
            .cloned()
            .expect(m)
    };

    // AAPL: the close of 2010-06-30 in the bars over TTM diluted EPS from
    // the filings known that day (10-Q of 2010-03-27, FY2009 as restated).
    let close = std::str::from_utf8(&csv)
        .expect("utf8")
        .lines()
        .find(|l| l.starts_with("AAPL,2010-06-30,"))
        .and_then(|l| l.split(',').nth(5))
        .and_then(|c| c.parse::<f64>().ok())
        .expect("AAPL close");
    let cf = json("companyfacts/CIK0000320193.json");
    let eps = raw_ttm_eps(
        &cf,
        "2010-06-30",
        ("2009-09-27", "2010-03-27"),
        ("2008-09-28", "2009-09-26"),
        ("2008-09-28", "2009-03-28"),
    );
    let pe = metric("AAPL", "pe");
    assert_eq!(pe.value, Some(close / eps), "{}", pe.detail);
    assert_eq!(row("AAPL").rank, 1);
    // The others' Data Sets hold 10-Qs only: no fiscal year to build a TTM
    // from, and they say so.
    for s in ["MSFT", "IBM", "GOOG"] {
        let pe = metric(s, "pe");
        assert!(pe.value.is_none(), "{s}: {pe:?}");
        let why = pe.missing.expect("a reason");
        assert!(
            why.contains("no TTM diluted EPS") || why.contains("no CIK"),
            "{s}: {why}"
        );
        assert_eq!(row(s).rank, 0);
        assert!(
            metric(s, "momentum").value.is_some(),
            "{s} momentum from the bars"
        );
    }
    let growth = metric("AAPL", "revenue_growth");
    assert!(growth.value.is_some_and(|g| g > 0.0), "{growth:?}");
}

async fn bad_input_writes_nothing(db: Db) {
    let svc = ithaca_broker::fundamentals_service(db);
    let tmp = tempfile::tempdir().expect("tmp");
    // A truncated zip.
    let zip = std::fs::read(file("fsds/2009q3.zip")).expect("zip");
    let cut = tmp.path().join("2009q3-cut.zip");
    std::fs::write(&cut, &zip[..zip.len() - 1000]).expect("write");
    let e = ingest(&svc, &cut).await.expect_err("truncated zip");
    assert!(
        e.message.starts_with("2009q3-cut.zip: fsds:") && e.message.contains("zip"),
        "{}",
        e.message
    );
    // A malformed instance.
    let xml = std::fs::read_to_string(file("xbrl/aapl-10q-2018q4/aapl-20181229.xml")).expect("xml");
    let bad = tmp.path().join("aapl-bad.xml");
    std::fs::write(&bad, &xml[..xml.len() / 3]).expect("write");
    let e = ingest(&svc, &bad).await.expect_err("malformed instance");
    assert!(
        e.message.contains("aapl-bad.xml: not well-formed XML"),
        "{}",
        e.message
    );
    // A Form 4 with an unknown transaction code, after the index that
    // would let it land: refused, nothing of it stored.
    apple(&svc).await;
    let form4 = std::fs::read_to_string(file("form4/aapl-4-20201013.xml"))
        .expect("form 4")
        .replace(
            "<transactionCode>S</transactionCode>",
            "<transactionCode>Q</transactionCode>",
        );
    let q = tmp.path().join("form4-q.xml");
    std::fs::write(&q, form4).expect("write");
    let e = ingest(&svc, &q).await.expect_err("unknown code");
    assert!(
        e.message.contains("unknown transaction code \"Q\""),
        "{}",
        e.message
    );
    let filing = svc
        .filing("0000320193-20-000086")
        .await
        .expect("the filing is indexed");
    assert!(filing.transactions.is_empty(), "nothing half-written");
    // A symbol with no CIK, and an `as_of` before any filing.
    let e = svc
        .fundamentals(&fundamentals("ZZZZ", "2019-01-01", "quarter"))
        .await
        .expect_err("no cik");
    assert_eq!(e.code, Code::NotFound);
    assert!(
        e.message.contains("ZZZZ") && e.message.contains("no CIK"),
        "{}",
        e.message
    );
    let e = svc
        .fundamentals(&fundamentals("AAPL", "1990-01-01", "quarter"))
        .await
        .expect_err("too early");
    assert_eq!(e.code, Code::NotFound);
    assert!(
        e.message.contains("before every ingested filing"),
        "{}",
        e.message
    );
    for (req, needle) in [
        (fundamentals("AAPL", "2019-13-01", "quarter"), "as_of"),
        (fundamentals("AAPL", "2019-01-01", "decade"), "period"),
        (fundamentals("", "2019-01-01", "quarter"), "symbol"),
        (
            fundamentals("AAPL; DROP", "2019-01-01", "quarter"),
            "symbol",
        ),
    ] {
        let e = svc.fundamentals(&req).await.expect_err(needle);
        assert_eq!(e.code, Code::InvalidArgument, "{needle}");
        assert!(e.message.starts_with(needle), "{needle}: {}", e.message);
    }
    // Only the system ingests.
    let e = svc
        .ingest_file(&common::agent("t", "a"), "x.json", b"{}".to_vec())
        .await
        .expect_err("agents do not ingest");
    assert_eq!(e.code, Code::PermissionDenied);
}

/// `ithaca ingest sec` against `ithaca serve broker`: JSON first so the
/// instance and the Form 4 find their filings, linkbases left out, a
/// truncated zip named with its reason and skipped while the rest land, a
/// non-zero exit saying so; the second run changes nothing.
#[test]
fn ingest_sec_from_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_broker, url) = common::serve("broker", &common::sqlite_path(&dir, "broker"), "unused");
    let zip = std::fs::read(file("fsds/2009q3.zip")).expect("zip");
    let bad = dir.path().join("cut.zip");
    std::fs::write(&bad, &zip[..zip.len() / 2]).expect("write");
    let good = [
        file("form4"),
        file("xbrl/aapl-10q-2018q4"),
        file("submissions/CIK0000320193-2013-2023.json"),
    ];
    let run = |paths: &[PathBuf]| {
        let mut cmd = common::ithaca();
        cmd.args(["ingest", "sec"])
            .args(paths)
            .args(["--broker-url", &url]);
        cmd.output().expect("run ithaca ingest sec")
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut all = good.to_vec();
    all.push(bad.clone());
    let out = run(&all);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !out.status.success(),
        "a skipped file makes the exit non-zero"
    );
    assert!(
        stdout.starts_with("4 files: "),
        "json, zip, form 4, instance: {stdout}"
    );
    assert!(
        stdout.contains("1 skipped") && stdout.contains("tickers: AAPL=0000320193"),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 insider transactions newly stored"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("skipped {}: cut.zip: fsds:", bad.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("[##############################] 4/4 done"),
        "progress: {stderr}"
    );

    let again = run(&good);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let stdout = text(&again.stdout);
    assert!(
        stdout.contains("0 newly stored") && stdout.contains("3 files already ingested, 0 skipped"),
        "{stdout}"
    );
}
