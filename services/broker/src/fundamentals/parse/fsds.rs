//! SEC Financial Statement Data Sets: a quarterly zip of tab-separated
//! files. `sub.txt` has one row per filing (accession `adsh`, CIK, name,
//! form, period, fiscal year and period, filing date, instance file name);
//! `num.txt` one row per value (`adsh`, tag, taxonomy version, `ddate` the
//! period end rounded to a month end, `qtrs` its length, unit, `segments`
//! and `coreg` for dimensional values, value); `tag.txt` and `pre.txt`
//! describe the tags and where filings present them, and are checked for
//! their columns. Columns are found by their header, so the Data Sets
//! before and after SEC's 2024 re-issue (which added `segments`) both read.
//!
//! The zip is read in memory with every member's size bounded, so a
//! zip bomb or a truncated archive is refused with a reason.

use super::super::model::{
    Accession, Cik, Company, Fact, Filing, SourceFormat, parse_compact_date,
};
use super::Batch;
use std::collections::HashMap;
use std::io::Read;

/// Largest member, uncompressed (a full quarter's `num.txt` is about
/// 400 MB; the test copies hold a subset).
pub const MAX_MEMBER_BYTES: u64 = 512 * 1024 * 1024;

/// Most values one Data Set may hold.
pub const MAX_VALUES: usize = 5_000_000;

fn member(zip: &mut zip::ZipArchive<std::io::Cursor<&[u8]>>, name: &str) -> Result<String, String> {
    let file = zip
        .by_name(name)
        .map_err(|e| format!("fsds: no {name} in the zip ({e})"))?;
    let mut out = Vec::new();
    file.take(MAX_MEMBER_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("fsds: {name}: the zip is damaged or truncated ({e})"))?;
    if out.len() as u64 > MAX_MEMBER_BYTES {
        return Err(format!(
            "fsds: {name} is larger than {MAX_MEMBER_BYTES} bytes uncompressed"
        ));
    }
    String::from_utf8(out).map_err(|e| format!("fsds: {name} is not UTF-8: {e}"))
}

/// A tab-separated table with named columns.
struct Table<'a> {
    name: &'static str,
    columns: HashMap<&'a str, usize>,
    rows: Vec<Vec<&'a str>>,
}

impl<'a> Table<'a> {
    fn read(name: &'static str, text: &'a str, required: &[&str]) -> Result<Table<'a>, String> {
        let mut lines = text.lines();
        let header = lines
            .next()
            .ok_or_else(|| format!("fsds: {name} is empty"))?;
        let columns: HashMap<&str, usize> = header
            .split('\t')
            .enumerate()
            .map(|(i, c)| (c.trim(), i))
            .collect();
        for c in required {
            if !columns.contains_key(c) {
                return Err(format!("fsds: {name} has no `{c}` column"));
            }
        }
        let width = columns.len();
        let mut rows = Vec::new();
        for (i, line) in lines.enumerate() {
            if line.is_empty() {
                continue;
            }
            let row: Vec<&str> = line.split('\t').collect();
            if row.len() != width {
                return Err(format!(
                    "fsds: {name} line {}: {} fields, the header has {width}",
                    i + 2,
                    row.len()
                ));
            }
            rows.push(row);
            if rows.len() > MAX_VALUES {
                return Err(format!("fsds: {name} has more than {MAX_VALUES} rows"));
            }
        }
        Ok(Table {
            name,
            columns,
            rows,
        })
    }

    fn get<'r>(&self, row: &'r [&'a str], column: &str) -> &'a str {
        self.columns.get(column).map_or("", |&i| row[i].trim())
    }
}

struct Sub {
    cik: Cik,
    form: String,
    filed: time::Date,
    fy: Option<i64>,
    fp: Option<String>,
    prefix: Option<String>,
}

pub fn parse(bytes: &[u8]) -> Result<Batch, String> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| format!("fsds: not a readable zip ({e})"))?;
    let sub_text = member(&mut zip, "sub.txt")?;
    let num_text = member(&mut zip, "num.txt")?;
    let tag_text = member(&mut zip, "tag.txt")?;
    let pre_text = member(&mut zip, "pre.txt")?;
    let sub = Table::read(
        "sub.txt",
        &sub_text,
        &[
            "adsh", "cik", "name", "form", "period", "fy", "fp", "filed", "instance",
        ],
    )?;
    let num = Table::read(
        "num.txt",
        &num_text,
        &["adsh", "tag", "version", "ddate", "qtrs", "uom", "value"],
    )?;
    Table::read(
        "tag.txt",
        &tag_text,
        &["tag", "version", "custom", "datatype"],
    )?;
    Table::read(
        "pre.txt",
        &pre_text,
        &["adsh", "report", "line", "stmt", "tag", "version"],
    )?;

    let mut batch = Batch::default();
    let mut subs: HashMap<&str, Sub> = HashMap::new();
    for (i, row) in sub.rows.iter().enumerate() {
        let at = |e: String| format!("fsds: {} line {}: {e}", sub.name, i + 2);
        let adsh = sub.get(row, "adsh");
        let accession = Accession::parse(adsh).map_err(at)?;
        let cik = Cik::parse(sub.get(row, "cik")).map_err(at)?;
        let filed = parse_compact_date(sub.get(row, "filed")).map_err(at)?;
        let period = parse_compact_date(sub.get(row, "period")).map_err(at)?;
        let form = sub.get(row, "form").to_owned();
        let instance = sub.get(row, "instance");
        let prefix = instance
            .split_once('-')
            .filter(|(p, rest)| {
                rest.len() >= 8 && p.len() <= 6 && p.bytes().all(|b| b.is_ascii_alphabetic())
            })
            .map(|(p, _)| p.to_ascii_lowercase());
        batch.companies.push(Company {
            cik: cik.clone(),
            name: sub.get(row, "name").to_owned(),
            tickers: prefix
                .iter()
                .filter_map(|p| super::xbrl::ticker(p))
                .collect(),
            seen_on: filed,
        });
        batch.filings.push(Filing {
            accession,
            cik: cik.clone(),
            form: form.clone(),
            filing_date: filed,
            report_date: Some(period),
            primary_document: (!instance.is_empty()).then(|| instance.to_owned()),
        });
        subs.insert(
            adsh,
            Sub {
                cik,
                form,
                filed,
                fy: sub.get(row, "fy").parse().ok(),
                fp: Some(sub.get(row, "fp").to_owned()).filter(|f| !f.is_empty()),
                prefix,
            },
        );
    }
    for (i, row) in num.rows.iter().enumerate() {
        let at = |e: String| format!("fsds: {} line {}: {e}", num.name, i + 2);
        let value = num.get(row, "value");
        if value.is_empty() {
            continue;
        }
        let adsh = num.get(row, "adsh");
        let s = subs
            .get(adsh)
            .ok_or_else(|| at(format!("accession {adsh} is not in sub.txt")))?;
        let (value_text, v) = super::number(value).map_err(at)?;
        let version = num.get(row, "version");
        let taxonomy = if version == adsh {
            s.prefix.clone().unwrap_or_else(|| "custom".to_owned())
        } else {
            version.split('/').next().unwrap_or("custom").to_owned()
        };
        let qtrs: i64 = num
            .get(row, "qtrs")
            .parse()
            .map_err(|_| at("`qtrs` is not a number".to_owned()))?;
        let mut dims = num.get(row, "segments").to_owned();
        let coreg = num.get(row, "coreg");
        if !coreg.is_empty() {
            dims.push_str(&format!("coreg={coreg};"));
        }
        let end = parse_compact_date(num.get(row, "ddate")).map_err(at)?;
        batch.facts.push(Fact {
            cik: s.cik.clone(),
            concept: format!("{taxonomy}:{}", num.get(row, "tag")),
            unit: num.get(row, "uom").to_owned(),
            period_start: None,
            period_end: end,
            quarters: if (0..=4).contains(&qtrs) { qtrs } else { -1 },
            dims,
            value: v,
            value_text,
            accession: Accession::parse(adsh).map_err(at)?,
            form: s.form.clone(),
            filed: s.filed,
            fiscal_year: s.fy,
            fiscal_period: s.fp.clone(),
            source_format: SourceFormat::Fsds,
        });
    }
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/fundamentals/fsds")
            .join(name);
        std::fs::read(path).expect("the real Data Set in ../shared/data")
    }

    #[test]
    fn apples_10q_of_2010_03_27() {
        let b = parse(&real("2010q2.zip")).expect("a value");
        let aapl = "0001193125-10-088957";
        let filing = b
            .filings
            .iter()
            .find(|f| f.accession.as_str() == aapl)
            .expect("a value");
        assert_eq!(filing.form, "10-Q");
        assert_eq!(filing.filing_date.to_string(), "2010-04-21");
        let revenue: Vec<_> = b
            .facts
            .iter()
            .filter(|f| {
                f.accession.as_str() == aapl
                    && f.concept == "us-gaap:SalesRevenueNet"
                    && f.dims.is_empty()
            })
            .map(|f| (f.period_end.to_string(), f.quarters, f.value))
            .collect();
        assert!(
            revenue.contains(&("2010-03-31".to_owned(), 1, 13_499_000_000.0)),
            "{revenue:?}"
        );
        let company = b
            .companies
            .iter()
            .find(|c| c.cik.as_str() == "0000320193")
            .expect("a value");
        assert_eq!(company.tickers, vec!["AAPL".to_owned()]);
    }

    #[test]
    fn a_truncated_zip_is_refused() {
        let bytes = real("2009q3.zip");
        let e = parse(&bytes[..bytes.len() / 2]).expect_err("an error");
        assert!(e.starts_with("fsds:") && (e.contains("zip")), "{e}");
    }
}
