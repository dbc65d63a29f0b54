//! XBRL 2.1 instance documents: contexts (entity, period, segment and
//! scenario members), units (a measure, or a divide), and numeric facts.
//! A fact whose context has dimension members is kept apart from the
//! undimensioned total: its `dims` names them. The filing's CIK, form,
//! period and ticker come from the `dei` cover facts. DTDs are refused.

use super::super::model::{
    Accession, Cik, Company, Date, Fact, SourceFormat, parse_date, quarters_between,
};
use roxmltree::{Document, Node};
use std::collections::HashMap;

const XBRLI: &str = "http://www.xbrl.org/2003/instance";
const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// Most facts one instance may hold.
pub const MAX_FACTS: usize = 1_000_000;

/// An instance before its filing (accession, filing date) is known.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub cik: Cik,
    pub name: String,
    pub ticker: Option<String>,
    /// `dei:DocumentType` (`10-Q`, `10-K`).
    pub form: String,
    /// `dei:DocumentPeriodEndDate`.
    pub period_end: Date,
    pub fiscal_year: Option<i64>,
    pub fiscal_period: Option<String>,
    pub facts: Vec<RawFact>,
}

/// A numeric fact of an instance.
#[derive(Clone, Debug, PartialEq)]
pub struct RawFact {
    pub concept: String,
    pub unit: String,
    pub period_start: Option<Date>,
    pub period_end: Date,
    pub quarters: i64,
    pub dims: String,
    pub value: f64,
    pub value_text: String,
}

impl Instance {
    pub fn company(&self) -> Company {
        Company {
            cik: self.cik.clone(),
            name: self.name.clone(),
            tickers: self.ticker.iter().cloned().collect(),
            seen_on: self.period_end,
        }
    }

    /// Its facts, once the filing is known.
    pub fn facts(&self, accession: &Accession, filed: Date) -> Vec<Fact> {
        self.facts
            .iter()
            .map(|f| Fact {
                cik: self.cik.clone(),
                concept: f.concept.clone(),
                unit: f.unit.clone(),
                period_start: f.period_start,
                period_end: f.period_end,
                quarters: f.quarters,
                dims: f.dims.clone(),
                value: f.value,
                value_text: f.value_text.clone(),
                accession: accession.clone(),
                form: self.form.clone(),
                filed,
                fiscal_year: self.fiscal_year,
                fiscal_period: self.fiscal_period.clone(),
                source_format: SourceFormat::Xbrl,
            })
            .collect()
    }
}

/// A ticker as SEC writes them (`AAPL`, `BRK-B`), uppercase; `None` for
/// anything else.
pub fn ticker(text: &str) -> Option<String> {
    let t = text.trim().to_ascii_uppercase();
    let ok = !t.is_empty()
        && t.len() <= 10
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    ok.then_some(t)
}

struct Context {
    cik: Option<String>,
    start: Option<Date>,
    end: Date,
    instant: bool,
    dims: String,
}

fn xbrli<'a, 'i>(n: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    n.children().find(|c| {
        c.is_element() && c.tag_name().name() == name && c.tag_name().namespace() == Some(XBRLI)
    })
}

fn text(n: Node<'_, '_>) -> String {
    n.text().unwrap_or_default().trim().to_owned()
}

/// The members of a segment or scenario, `dimension=member` each.
fn members(n: Node<'_, '_>, out: &mut Vec<String>) {
    for m in n.children().filter(Node::is_element) {
        let Some(dim) = m.attribute("dimension") else {
            continue;
        };
        let value = match m.tag_name().name() {
            "typedMember" => m
                .children()
                .find(Node::is_element)
                .map(text)
                .unwrap_or_default(),
            _ => text(m),
        };
        out.push(format!("{dim}={value}"));
    }
}

fn context(n: Node<'_, '_>) -> Result<Context, String> {
    let entity = xbrli(n, "entity").ok_or("no <entity>")?;
    let cik = xbrli(entity, "identifier").map(text);
    let period = xbrli(n, "period").ok_or("no <period>")?;
    let mut dims = Vec::new();
    if let Some(s) = xbrli(entity, "segment") {
        members(s, &mut dims);
    }
    if let Some(s) = xbrli(n, "scenario") {
        members(s, &mut dims);
    }
    dims.sort();
    let dims = dims.iter().map(|d| format!("{d};")).collect::<String>();
    if let Some(i) = xbrli(period, "instant") {
        return Ok(Context {
            cik,
            start: None,
            end: parse_date(&text(i))?,
            instant: true,
            dims,
        });
    }
    let (Some(s), Some(e)) = (xbrli(period, "startDate"), xbrli(period, "endDate")) else {
        // `forever` facts have no period a line item can use.
        return Err("a period neither instant nor start and end".to_owned());
    };
    let (start, end) = (parse_date(&text(s))?, parse_date(&text(e))?);
    if start > end {
        return Err("startDate after endDate".to_owned());
    }
    Ok(Context {
        cik,
        start: Some(start),
        end,
        instant: false,
        dims,
    })
}

/// `iso4217:USD` → `USD`, `xbrli:shares` → `shares`.
fn measure(n: Node<'_, '_>) -> String {
    let t = text(n);
    t.rsplit(':').next().unwrap_or(&t).to_owned()
}

fn unit(n: Node<'_, '_>) -> Result<String, String> {
    if let Some(m) = xbrli(n, "measure") {
        return Ok(measure(m));
    }
    let d = xbrli(n, "divide").ok_or("a unit with neither measure nor divide")?;
    let num = xbrli(d, "unitNumerator").and_then(|x| xbrli(x, "measure"));
    let den = xbrli(d, "unitDenominator").and_then(|x| xbrli(x, "measure"));
    match (num, den) {
        (Some(a), Some(b)) => Ok(format!("{}/{}", measure(a), measure(b))),
        _ => Err("a divide without numerator and denominator".to_owned()),
    }
}

/// The concept's name with a stable prefix: `us-gaap` and `dei` whatever
/// the taxonomy year, else the prefix the document declares.
fn concept(n: Node<'_, '_>) -> String {
    let tag = n.tag_name();
    let ns = tag.namespace().unwrap_or_default();
    let prefix = if ns.contains("/us-gaap/") {
        "us-gaap".to_owned()
    } else if ns.contains("/dei/") {
        "dei".to_owned()
    } else {
        n.lookup_prefix(ns).unwrap_or("custom").to_owned()
    };
    format!("{prefix}:{}", tag.name())
}

pub fn parse(doc: &Document<'_>) -> Result<Instance, String> {
    let root = doc.root_element();
    if root.tag_name().namespace() != Some(XBRLI) {
        return Err("xbrl: the root <xbrl> is not in the XBRL 2.1 instance namespace".to_owned());
    }
    let mut contexts = HashMap::new();
    let mut units = HashMap::new();
    for n in root.children().filter(Node::is_element) {
        if n.tag_name().namespace() != Some(XBRLI) {
            continue;
        }
        let id = n.attribute("id").unwrap_or_default().to_owned();
        match n.tag_name().name() {
            "context" => {
                if let Ok(c) = context(n) {
                    contexts.insert(id, c);
                } else if xbrli(n, "period")
                    .and_then(|p| xbrli(p, "forever"))
                    .is_none()
                {
                    return Err(format!(
                        "xbrl: context {id:?}: {}",
                        context(n).err().unwrap_or_default()
                    ));
                }
            }
            "unit" => {
                units.insert(
                    id.clone(),
                    unit(n).map_err(|e| format!("xbrl: unit {id:?}: {e}"))?,
                );
            }
            _ => {}
        }
    }
    if contexts.is_empty() {
        return Err("xbrl: no contexts: not an instance document".to_owned());
    }
    let mut dei: HashMap<String, String> = HashMap::new();
    let mut facts = Vec::new();
    for n in root.children().filter(Node::is_element) {
        let Some(cref) = n.attribute("contextRef") else {
            continue;
        };
        if n.attribute((XSI, "nil")).is_some_and(|v| v == "true") {
            continue;
        }
        let name = concept(n);
        let Some(ctx) = contexts.get(cref) else {
            if name.starts_with("dei:") || n.attribute("unitRef").is_some() {
                // A fact on a `forever` context has no period we use.
                continue;
            }
            continue;
        };
        let Some(uref) = n.attribute("unitRef") else {
            if let Some(short) = name.strip_prefix("dei:")
                && ctx.dims.is_empty()
            {
                dei.entry(short.to_owned()).or_insert_with(|| text(n));
            }
            continue;
        };
        let unit = units
            .get(uref)
            .ok_or_else(|| format!("xbrl: {name} names unit {uref:?}, which is not declared"))?;
        let (value_text, value) =
            super::number(&text(n)).map_err(|e| format!("xbrl: {name} in {cref:?}: {e}"))?;
        facts.push(RawFact {
            concept: name,
            unit: unit.clone(),
            period_start: ctx.start,
            period_end: ctx.end,
            quarters: match (ctx.instant, ctx.start) {
                (false, Some(s)) => quarters_between(s, ctx.end),
                _ => 0,
            },
            dims: ctx.dims.clone(),
            value,
            value_text,
        });
        if facts.len() > MAX_FACTS {
            return Err(format!("xbrl: more than {MAX_FACTS} facts"));
        }
    }
    let cik_text = dei
        .get("EntityCentralIndexKey")
        .cloned()
        .or_else(|| contexts.values().find_map(|c| c.cik.clone()))
        .ok_or("xbrl: no dei:EntityCentralIndexKey and no entity identifier")?;
    let cik = Cik::parse(&cik_text).map_err(|e| format!("xbrl: {e}"))?;
    let form = dei
        .get("DocumentType")
        .cloned()
        .ok_or("xbrl: no dei:DocumentType")?;
    let period_end = parse_date(
        dei.get("DocumentPeriodEndDate")
            .ok_or("xbrl: no dei:DocumentPeriodEndDate")?,
    )
    .map_err(|e| format!("xbrl: dei:DocumentPeriodEndDate: {e}"))?;
    Ok(Instance {
        cik,
        name: dei.get("EntityRegistrantName").cloned().unwrap_or_default(),
        ticker: dei.get("TradingSymbol").and_then(|t| ticker(t)),
        form,
        period_end,
        fiscal_year: dei
            .get("DocumentFiscalYearFocus")
            .and_then(|y| y.trim().parse().ok()),
        fiscal_period: dei.get("DocumentFiscalPeriodFocus").cloned(),
        facts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = r#"<xbrli:xbrl xmlns:xbrli="http://www.xbrl.org/2003/instance"
        xmlns:us-gaap="http://fasb.org/us-gaap/2018-01-31" xmlns:dei="http://xbrl.sec.gov/dei/2018-01-31"
        xmlns:xbrldi="http://xbrl.org/2006/xbrldi" xmlns:iso4217="http://www.xbrl.org/2003/iso4217">
      <xbrli:context id="d"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000320193</xbrli:identifier></xbrli:entity>
        <xbrli:period><xbrli:startDate>2018-09-30</xbrli:startDate><xbrli:endDate>2018-12-29</xbrli:endDate></xbrli:period></xbrli:context>
      <xbrli:context id="seg"><xbrli:entity><xbrli:identifier scheme="http://www.sec.gov/CIK">0000320193</xbrli:identifier>
        <xbrli:segment><xbrldi:explicitMember dimension="us-gaap:StatementBusinessSegmentsAxis">aapl:AmericasSegmentMember</xbrldi:explicitMember></xbrli:segment></xbrli:entity>
        <xbrli:period><xbrli:startDate>2018-09-30</xbrli:startDate><xbrli:endDate>2018-12-29</xbrli:endDate></xbrli:period></xbrli:context>
      <xbrli:unit id="usd"><xbrli:measure>iso4217:USD</xbrli:measure></xbrli:unit>
      <dei:DocumentType contextRef="d">10-Q</dei:DocumentType>
      <dei:DocumentPeriodEndDate contextRef="d">2018-12-29</dei:DocumentPeriodEndDate>
      <us-gaap:Revenues contextRef="d" unitRef="usd" decimals="-6">84310000000</us-gaap:Revenues>
      <us-gaap:Revenues contextRef="seg" unitRef="usd" decimals="-6">36941000000</us-gaap:Revenues>
    </xbrli:xbrl>"#;

    #[test]
    fn dimensional_facts_are_kept_apart() {
        let doc = super::super::xml_document(TINY).expect("a value");
        let i = parse(&doc).expect("a value");
        assert_eq!(i.cik.as_str(), "0000320193");
        assert_eq!(i.form, "10-Q");
        let totals: Vec<_> = i.facts.iter().filter(|f| f.dims.is_empty()).collect();
        assert_eq!(totals.len(), 1);
        assert_eq!(totals[0].value, 84_310_000_000.0);
        assert_eq!(totals[0].quarters, 1);
        let seg: Vec<_> = i.facts.iter().filter(|f| !f.dims.is_empty()).collect();
        assert_eq!(
            seg[0].dims,
            "us-gaap:StatementBusinessSegmentsAxis=aapl:AmericasSegmentMember;"
        );
    }

    #[test]
    fn malformed_instances_are_refused() {
        let cut = &TINY[..TINY.len() / 2];
        assert!(
            super::super::parse("x.xml", cut.as_bytes())
                .expect_err("an error")
                .contains("not well-formed XML")
        );
        let bad = TINY.replace(">84310000000<", ">84,310<");
        let e = super::super::parse("x.xml", bad.as_bytes()).expect_err("an error");
        assert!(
            e.contains("us-gaap:Revenues") && e.contains("not a number"),
            "{e}"
        );
        let no_unit = TINY.replace(
            "unitRef=\"usd\" decimals=\"-6\">36941",
            "unitRef=\"eur\">36941",
        );
        let e = super::super::parse("x.xml", no_unit.as_bytes()).expect_err("an error");
        assert!(e.contains("not declared"), "{e}");
    }
}
