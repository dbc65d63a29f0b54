//! Form 4 ownership XML (schema X0306): the issuer, the reporting owners
//! with their relationship, and each line of the non-derivative and
//! derivative tables. A transaction code SEC does not define is an error
//! naming it.

use super::super::model::{Accession, Cik, Date, InsiderTxn, TxnCode, parse_date};
use roxmltree::{Document, Node};

/// Most table lines one Form 4 may hold.
pub const MAX_LINES: usize = 10_000;

/// A Form 4 before its filing (accession, filing date) is known.
#[derive(Clone, Debug, PartialEq)]
pub struct Form4 {
    pub issuer: Cik,
    pub issuer_name: String,
    pub ticker: Option<String>,
    pub period: Date,
    pub owner_cik: Cik,
    pub owner_name: String,
    pub relationship: String,
    pub officer_title: Option<String>,
    pub lines: Vec<Line>,
}

/// One table line.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub security: String,
    pub derivative: bool,
    pub date: Date,
    pub code: TxnCode,
    pub shares: f64,
    pub price: Option<f64>,
    pub acquired_disposed: String,
    pub shares_after: f64,
    pub ownership: String,
}

impl Form4 {
    /// Its transactions, once the filing is known.
    pub fn into_txns(self, accession: &Accession, filed: Date) -> Vec<InsiderTxn> {
        self.lines
            .into_iter()
            .map(|l| InsiderTxn {
                accession: accession.clone(),
                issuer: self.issuer.clone(),
                filed,
                owner_cik: self.owner_cik.clone(),
                owner_name: self.owner_name.clone(),
                relationship: self.relationship.clone(),
                officer_title: self.officer_title.clone(),
                security: l.security,
                derivative: l.derivative,
                date: l.date,
                code: l.code,
                shares: l.shares,
                price: l.price,
                acquired_disposed: l.acquired_disposed,
                shares_after: l.shares_after,
                ownership: l.ownership,
            })
            .collect()
    }
}

fn child<'a, 'i>(n: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    n.children()
        .find(|c| c.is_element() && c.tag_name().name() == name)
}

/// The text at a path of child elements, trimmed, `None` when absent or
/// empty.
fn text_at(n: Node<'_, '_>, path: &[&str]) -> Option<String> {
    let mut at = n;
    for p in path {
        at = child(at, p)?;
    }
    let t = at.text().unwrap_or_default().trim();
    (!t.is_empty()).then(|| t.to_owned())
}

fn required(n: Node<'_, '_>, path: &[&str]) -> Result<String, String> {
    text_at(n, path).ok_or_else(|| format!("form 4: no <{}>", path.join("/")))
}

fn flag(n: Node<'_, '_>, name: &str) -> bool {
    text_at(n, &[name]).is_some_and(|t| t == "1" || t.eq_ignore_ascii_case("true"))
}

pub fn parse(doc: &Document<'_>) -> Result<Form4, String> {
    let root = doc.root_element();
    let kind = required(root, &["documentType"])?;
    if kind != "4" && kind != "4/A" {
        return Err(format!("form 4: documentType is {kind:?}, not 4 or 4/A"));
    }
    let issuer = Cik::parse(&required(root, &["issuer", "issuerCik"])?)?;
    let issuer_name = required(root, &["issuer", "issuerName"])?;
    let ticker =
        text_at(root, &["issuer", "issuerTradingSymbol"]).and_then(|t| super::xbrl::ticker(&t));
    let period = parse_date(&required(root, &["periodOfReport"])?)?;
    let owner = child(root, "reportingOwner").ok_or("form 4: no <reportingOwner>")?;
    let owner_cik = Cik::parse(&required(owner, &["reportingOwnerId", "rptOwnerCik"])?)?;
    let owner_name = required(owner, &["reportingOwnerId", "rptOwnerName"])?;
    let rel = child(owner, "reportingOwnerRelationship");
    let relationship = rel
        .map(|r| {
            [
                ("isDirector", "director"),
                ("isOfficer", "officer"),
                ("isTenPercentOwner", "ten_percent_owner"),
                ("isOther", "other"),
            ]
            .iter()
            .filter(|(tag, _)| flag(r, tag))
            .map(|(_, name)| *name)
            .collect::<Vec<_>>()
            .join(",")
        })
        .unwrap_or_default();
    let officer_title = rel.and_then(|r| text_at(r, &["officerTitle"]));
    let mut lines = Vec::new();
    for (table, derivative, row) in [
        ("nonDerivativeTable", false, "nonDerivativeTransaction"),
        ("derivativeTable", true, "derivativeTransaction"),
    ] {
        let Some(t) = child(root, table) else {
            continue;
        };
        for (i, n) in t
            .children()
            .filter(|c| c.is_element() && c.tag_name().name() == row)
            .enumerate()
        {
            let l = line(n, derivative).map_err(|e| format!("form 4: {row} #{}: {e}", i + 1))?;
            lines.push(l);
            if lines.len() > MAX_LINES {
                return Err(format!("form 4: more than {MAX_LINES} transactions"));
            }
        }
    }
    Ok(Form4 {
        issuer,
        issuer_name,
        ticker,
        period,
        owner_cik,
        owner_name,
        relationship,
        officer_title,
        lines,
    })
}

fn line(n: Node<'_, '_>, derivative: bool) -> Result<Line, String> {
    let num = |path: &[&str]| -> Result<Option<f64>, String> {
        text_at(n, path)
            .map(|t| super::number(&t).map(|v| v.1))
            .transpose()
    };
    let code_text = text_at(n, &["transactionCoding", "transactionCode"])
        .ok_or("no <transactionCoding/transactionCode>")?;
    let code = TxnCode::parse(&code_text).ok_or_else(|| {
        format!(
            "unknown transaction code {:?}",
            super::truncate(&code_text, 10)
        )
    })?;
    let acquired_disposed = text_at(
        n,
        &[
            "transactionAmounts",
            "transactionAcquiredDisposedCode",
            "value",
        ],
    )
    .ok_or("no acquired or disposed code")?;
    if acquired_disposed != "A" && acquired_disposed != "D" {
        return Err(format!(
            "acquired or disposed code is {:?}, not A or D",
            super::truncate(&acquired_disposed, 10)
        ));
    }
    Ok(Line {
        security: text_at(n, &["securityTitle", "value"]).unwrap_or_default(),
        derivative,
        date: parse_date(
            &text_at(n, &["transactionDate", "value"]).ok_or("no <transactionDate>")?,
        )?,
        code,
        shares: num(&["transactionAmounts", "transactionShares", "value"])?
            .ok_or("no <transactionShares>")?,
        price: num(&["transactionAmounts", "transactionPricePerShare", "value"])?,
        acquired_disposed,
        shares_after: num(&[
            "postTransactionAmounts",
            "sharesOwnedFollowingTransaction",
            "value",
        ])?
        .unwrap_or(0.0),
        ownership: text_at(
            n,
            &["ownershipNature", "directOrIndirectOwnership", "value"],
        )
        .unwrap_or_else(|| "D".to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/fundamentals/form4/aapl-4-20201013.xml");
        std::fs::read_to_string(path).expect("the real Form 4 in ../shared/data")
    }

    #[test]
    fn the_real_form_4_exactly() {
        let text = real();
        let doc = super::super::xml_document(&text).expect("a value");
        let f = parse(&doc).expect("a value");
        assert_eq!(f.issuer.as_str(), "0000320193");
        assert_eq!(f.ticker.as_deref(), Some("AAPL"));
        assert_eq!(f.owner_name, "Maestri Luca");
        assert_eq!(f.owner_cik.as_str(), "0001513362");
        assert_eq!(f.relationship, "officer");
        assert_eq!(
            f.officer_title.as_deref(),
            Some("Senior Vice President, CFO")
        );
        assert_eq!(f.period.to_string(), "2020-10-09");
        assert_eq!(f.lines.len(), 1);
        let l = &f.lines[0];
        assert_eq!(l.security, "Common Stock");
        assert_eq!(l.code, TxnCode::Sale);
        assert_eq!(l.shares, 243_431.0);
        assert_eq!(l.price, Some(116.89));
        assert_eq!(l.acquired_disposed, "D");
        assert_eq!(l.shares_after, 110_272.0);
        assert_eq!(l.ownership, "D");
        assert!(!l.derivative);
    }

    #[test]
    fn an_unknown_code_is_named() {
        let text = real().replace(
            "<transactionCode>S</transactionCode>",
            "<transactionCode>Q</transactionCode>",
        );
        let doc = super::super::xml_document(&text).expect("a value");
        let e = parse(&doc).expect_err("an error");
        assert!(e.contains("unknown transaction code \"Q\""), "{e}");
        assert!(e.contains("nonDerivativeTransaction #1"), "{e}");
    }
}
