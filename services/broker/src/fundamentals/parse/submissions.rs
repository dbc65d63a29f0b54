//! SEC "submissions" JSON, the filing index: a company's file
//! (`CIK##########.json`: `cik`, `name`, `tickers`, and `filings.recent`
//! with one array per column) or one of its older pages
//! (`CIK##########-submissions-NNN.json`: the columns alone, the company
//! named only by the file's name, as SEC names it).

use super::super::model::{Accession, Cik, Company, Filing, parse_date};
use super::Batch;
use serde_json::Value;

/// Most filings one file may list (SEC pages hold about 1,000 to 2,000).
pub const MAX_FILINGS: usize = 200_000;

pub fn parse(source: &str, doc: &Value) -> Result<Batch, String> {
    let cik = match doc.get("cik") {
        Some(Value::String(s)) => Cik::parse(s)?,
        Some(Value::Number(n)) => Cik::parse(&n.to_string())?,
        _ => cik_of_name(source).ok_or_else(|| {
            format!(
                "submissions: no `cik`, and the file name {source:?} does not start with \
                 CIK##########"
            )
        })?,
    };
    let columns = match doc.get("filings") {
        Some(f) => f
            .get("recent")
            .ok_or("submissions: `filings` has no `recent`")?,
        None => doc,
    };
    let col = |name: &str| -> Result<&Vec<Value>, String> {
        columns
            .get(name)
            .and_then(Value::as_array)
            .ok_or_else(|| format!("submissions: no `{name}` column"))
    };
    let accessions = col("accessionNumber")?;
    let forms = col("form")?;
    let filed = col("filingDate")?;
    let reported = col("reportDate").ok();
    let documents = col("primaryDocument").ok();
    if accessions.len() > MAX_FILINGS {
        return Err(format!("submissions: more than {MAX_FILINGS} filings"));
    }
    if forms.len() != accessions.len() || filed.len() != accessions.len() {
        return Err("submissions: the columns differ in length".to_owned());
    }
    let mut filings = Vec::with_capacity(accessions.len());
    for i in 0..accessions.len() {
        let s = |c: &Vec<Value>| {
            c.get(i)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let at = |e: String| format!("submissions: filing #{i}: {e}");
        let report = reported.map(s).filter(|r| !r.is_empty());
        filings.push(Filing {
            accession: Accession::parse(&s(accessions)).map_err(at)?,
            cik: cik.clone(),
            form: s(forms),
            filing_date: parse_date(&s(filed)).map_err(at)?,
            report_date: report.as_deref().map(parse_date).transpose().map_err(at)?,
            primary_document: documents.map(s).filter(|d| !d.is_empty()),
        });
    }
    let tickers = doc
        .get("tickers")
        .and_then(Value::as_array)
        .map(|t| {
            t.iter()
                .filter_map(Value::as_str)
                .filter_map(super::xbrl::ticker)
                .collect()
        })
        .unwrap_or_default();
    let seen_on = filings
        .iter()
        .map(|f| f.filing_date)
        .max()
        .unwrap_or(time::Date::MIN);
    let name = doc
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Ok(Batch {
        companies: vec![Company {
            cik,
            name,
            tickers,
            seen_on,
        }],
        filings,
        ..Batch::default()
    })
}

/// The CIK in a file name SEC gave (`CIK0000320193-submissions-001.json`).
fn cik_of_name(source: &str) -> Option<Cik> {
    let name = source.rsplit(['/', '\\']).next()?;
    let digits = name.strip_prefix("CIK")?.get(..10)?;
    Cik::parse(digits).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_page_takes_its_company_from_its_name() {
        let page = json!({"accessionNumber": ["0001127602-13-004097"], "form": ["4"],
            "filingDate": ["2013-02-04"], "reportDate": ["2013-01-31"],
            "primaryDocument": ["xslF345X03/form4.xml"]});
        let b = parse("CIK0000320193-submissions-001.json", &page).expect("a value");
        assert_eq!(b.companies[0].cik.as_str(), "0000320193");
        assert_eq!(b.filings[0].form, "4");
        assert!(
            parse("filings.json", &page)
                .expect_err("an error")
                .contains("CIK##########")
        );
    }
}
