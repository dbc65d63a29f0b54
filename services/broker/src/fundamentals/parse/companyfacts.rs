//! SEC "company facts" JSON: `{cik, entityName, facts: {taxonomy: {concept:
//! {units: {unit: [{start?, end, val, accn, fy, fp, form, filed}]}}}}}`.
//! Every value names the filing it came from, so each becomes a [`Fact`]
//! with its provenance, and each accession a filing of the index.

use super::super::model::{
    Accession, Cik, Company, Fact, Filing, SourceFormat, parse_date, quarters_between,
};
use super::Batch;
use serde_json::Value;
use std::collections::BTreeMap;

/// Most facts one file may hold (Apple's has about 25,000).
pub const MAX_FACTS: usize = 2_000_000;

pub fn parse(doc: &Value) -> Result<Batch, String> {
    let cik = match doc.get("cik") {
        Some(Value::Number(n)) => Cik::parse(&n.to_string()),
        Some(Value::String(s)) => Cik::parse(s),
        _ => Err("companyfacts: no `cik`".to_owned()),
    }?;
    let name = doc
        .get("entityName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim()
        .to_owned();
    let facts_by_taxonomy = doc
        .get("facts")
        .and_then(Value::as_object)
        .ok_or("companyfacts: `facts` is not an object")?;
    let mut facts = Vec::new();
    let mut filings: BTreeMap<Accession, Filing> = BTreeMap::new();
    let mut latest = None;
    for (taxonomy, concepts) in facts_by_taxonomy {
        let concepts = concepts
            .as_object()
            .ok_or_else(|| format!("companyfacts: facts.{taxonomy} is not an object"))?;
        for (concept, body) in concepts {
            let Some(units) = body.get("units").and_then(Value::as_object) else {
                return Err(format!("companyfacts: {taxonomy}:{concept} has no `units`"));
            };
            for (unit, values) in units {
                let values = values.as_array().ok_or_else(|| {
                    format!("companyfacts: {taxonomy}:{concept} {unit} is not a list")
                })?;
                for (i, v) in values.iter().enumerate() {
                    let at = || format!("companyfacts: {taxonomy}:{concept} {unit} #{i}");
                    let fact = fact(&cik, taxonomy, concept, unit, v)
                        .map_err(|e| format!("{}: {e}", at()))?;
                    filings
                        .entry(fact.accession.clone())
                        .or_insert_with(|| Filing {
                            accession: fact.accession.clone(),
                            cik: cik.clone(),
                            form: fact.form.clone(),
                            filing_date: fact.filed,
                            report_date: None,
                            primary_document: None,
                        });
                    if latest.is_none_or(|d| d < fact.filed) {
                        latest = Some(fact.filed);
                    }
                    facts.push(fact);
                    if facts.len() > MAX_FACTS {
                        return Err(format!("companyfacts: more than {MAX_FACTS} facts"));
                    }
                }
            }
        }
    }
    let seen_on = latest.unwrap_or(time::Date::MIN);
    Ok(Batch {
        companies: vec![Company {
            cik,
            name,
            tickers: Vec::new(),
            seen_on,
        }],
        filings: filings.into_values().collect(),
        facts,
        txns: Vec::new(),
    })
}

fn fact(cik: &Cik, taxonomy: &str, concept: &str, unit: &str, v: &Value) -> Result<Fact, String> {
    let text = |k: &str| v.get(k).and_then(Value::as_str);
    let end = parse_date(text("end").ok_or("no `end`")?)?;
    let start = text("start").map(parse_date).transpose()?;
    if start.is_some_and(|s| s > end) {
        return Err("`start` after `end`".to_owned());
    }
    let value = match v.get("val") {
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|x| x.is_finite())
            .ok_or("`val` out of range")?,
        _ => return Err("`val` is not a number".to_owned()),
    };
    let value_text = v.get("val").map(Value::to_string).unwrap_or_default();
    Ok(Fact {
        cik: cik.clone(),
        concept: format!("{taxonomy}:{concept}"),
        unit: unit.to_owned(),
        period_start: start,
        period_end: end,
        quarters: start.map_or(0, |s| quarters_between(s, end)),
        dims: String::new(),
        value,
        value_text,
        accession: Accession::parse(text("accn").ok_or("no `accn`")?)?,
        form: text("form").ok_or("no `form`")?.to_owned(),
        filed: parse_date(text("filed").ok_or("no `filed`")?)?,
        fiscal_year: v.get("fy").and_then(Value::as_i64),
        fiscal_period: text("fp").map(str::to_owned),
        source_format: SourceFormat::Companyfacts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_fact_keeps_its_filing() {
        let doc = json!({"cik": 320193, "entityName": "Apple Inc.", "facts": {"us-gaap": {
            "NetIncomeLoss": {"units": {"USD": [{"start": "2018-09-30", "end": "2018-12-29",
            "val": 19965000000_i64, "accn": "0000320193-19-000010", "fy": 2019, "fp": "Q1",
            "form": "10-Q", "filed": "2019-01-30"}]}}}}});
        let b = parse(&doc).expect("a value");
        assert_eq!(b.facts.len(), 1);
        let f = &b.facts[0];
        assert_eq!(f.concept, "us-gaap:NetIncomeLoss");
        assert_eq!(f.value, 19_965_000_000.0);
        assert_eq!(f.quarters, 1);
        assert_eq!(f.accession.as_str(), "0000320193-19-000010");
        assert_eq!(b.filings.len(), 1);
        assert_eq!(b.companies[0].cik.as_str(), "0000320193");
    }

    #[test]
    fn a_bad_value_names_its_place() {
        let doc = json!({"cik": 320193, "facts": {"us-gaap": {"Assets": {"units": {"USD": [
            {"end": "2018-12-29", "val": "lots", "accn": "0000320193-19-000010",
             "form": "10-Q", "filed": "2019-01-30"}]}}}}});
        let e = parse(&doc).expect_err("an error");
        assert!(
            e.contains("us-gaap:Assets USD #0") && e.contains("`val`"),
            "{e}"
        );
    }
}
