//! The five SEC formats, each read in its original form, with bounded
//! sizes: a file too big, malformed or of no known kind is refused with a
//! reason naming what was wrong, never a panic.
//!
//! - [`companyfacts`]: `api/xbrl/companyfacts` JSON, every fact with its
//!   accession, form and filing date.
//! - [`submissions`]: the filing index JSON (a `CIK##########.json` with
//!   `filings.recent`, or one of its `-submissions-NNN.json` pages).
//! - [`fsds`]: Financial Statement Data Sets zips (`sub`, `num`, `tag`,
//!   `pre`, tab-separated).
//! - [`xbrl`]: XBRL 2.1 instance documents (contexts, units, facts).
//! - [`form4`]: Form 4 ownership XML.
//!
//! XBRL instances and Form 4s do not carry their accession number or their
//! filing date; the service resolves those from the filing index (see
//! [`super::service`]), so they come back unresolved.

pub mod companyfacts;
pub mod form4;
pub mod fsds;
pub mod submissions;
pub mod xbrl;

use super::model::{Company, Fact, Filing, InsiderTxn, SourceFormat};

/// Largest file accepted, any format (the largest companyfacts files of
/// the biggest filers are about 30 MB; the quarterly Data Sets zips about
/// 60 MB).
pub const MAX_FILE_BYTES: usize = 96 * 1024 * 1024;

/// Largest XML tree, in nodes (a 4 MB instance has about 200,000).
pub const MAX_XML_NODES: u32 = 8_000_000;

/// What a file held, ready to store.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    pub companies: Vec<Company>,
    pub filings: Vec<Filing>,
    pub facts: Vec<Fact>,
    pub txns: Vec<InsiderTxn>,
}

/// A parsed file.
#[derive(Clone, Debug, PartialEq)]
pub enum Parsed {
    Batch(SourceFormat, Batch),
    /// An XBRL instance, before its filing is known.
    Instance(xbrl::Instance),
    /// A Form 4, before its filing is known.
    Form4(form4::Form4),
}

impl Parsed {
    pub fn format(&self) -> SourceFormat {
        match self {
            Parsed::Batch(f, _) => *f,
            Parsed::Instance(_) => SourceFormat::Xbrl,
            Parsed::Form4(_) => SourceFormat::Form4,
        }
    }
}

/// Read `bytes` as whichever SEC format it is; `source` is the file's name
/// (a submissions page names its company only there).
pub fn parse(source: &str, bytes: &[u8]) -> Result<Parsed, String> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(format!(
            "file too big: {} bytes, at most {MAX_FILE_BYTES}",
            bytes.len()
        ));
    }
    if bytes.starts_with(b"PK") {
        return fsds::parse(bytes).map(|b| Parsed::Batch(SourceFormat::Fsds, b));
    }
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace() && *b != 0xEF && *b != 0xBB && *b != 0xBF);
    match start.map(|i| bytes[i]) {
        Some(b'{') => {
            let value: serde_json::Value =
                serde_json::from_slice(bytes).map_err(|e| format!("not well-formed JSON: {e}"))?;
            if value.get("facts").is_some() {
                companyfacts::parse(&value).map(|b| Parsed::Batch(SourceFormat::Companyfacts, b))
            } else if value.get("filings").is_some() || value.get("accessionNumber").is_some() {
                submissions::parse(source, &value)
                    .map(|b| Parsed::Batch(SourceFormat::Submissions, b))
            } else {
                Err(
                    "JSON that is neither companyfacts (no `facts`) nor submissions (no `filings` \
                     or `accessionNumber`)"
                        .to_owned(),
                )
            }
        }
        Some(b'<') => {
            let text = std::str::from_utf8(bytes).map_err(|e| format!("XML not in UTF-8: {e}"))?;
            let doc = xml_document(text)?;
            let root = doc.root_element();
            match root.tag_name().name() {
                "ownershipDocument" => form4::parse(&doc).map(Parsed::Form4),
                "xbrl" => xbrl::parse(&doc).map(Parsed::Instance),
                "linkbase" => Err("an XBRL linkbase, not an instance document".to_owned()),
                "schema" => Err("an XML schema, not an instance document".to_owned()),
                other => Err(format!(
                    "XML whose root is <{other}>: neither an XBRL instance (<xbrl>) nor a Form 4 \
                     (<ownershipDocument>)"
                )),
            }
        }
        _ => Err("neither JSON, XML nor a zip: no SEC format this reads".to_owned()),
    }
}

/// An XML tree with DTDs refused (so no entity expansion) and its size
/// bounded.
pub fn xml_document(text: &str) -> Result<roxmltree::Document<'_>, String> {
    let options = roxmltree::ParsingOptions {
        allow_dtd: false,
        nodes_limit: MAX_XML_NODES,
        ..roxmltree::ParsingOptions::default()
    };
    roxmltree::Document::parse_with_options(text, options)
        .map_err(|e| format!("not well-formed XML: {e}"))
}

/// A decimal number as written (`84310000000`, `-116000000.0000`, `4.18`);
/// its text and its double.
pub fn number(text: &str) -> Result<(String, f64), String> {
    let t = text.trim();
    let ok = !t.is_empty()
        && t.len() <= 40
        && t.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'));
    let v: f64 = if ok {
        t.parse().unwrap_or(f64::NAN)
    } else {
        f64::NAN
    };
    if !v.is_finite() {
        return Err(format!("not a number: {:?}", truncate(t, 40)));
    }
    Ok((t.to_owned(), v))
}

/// At most `n` characters of `s`, for messages.
pub fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_oversized_files_are_refused() {
        assert!(
            parse("x", b"hello")
                .expect_err("an error")
                .contains("no SEC format")
        );
        assert!(
            parse("x", b"{\"a\":1}")
                .expect_err("an error")
                .contains("neither companyfacts")
        );
        assert!(
            parse("x", b"{\"facts\":")
                .expect_err("an error")
                .contains("not well-formed JSON")
        );
        assert!(
            parse("x", b"<html/>")
                .expect_err("an error")
                .contains("root is <html>")
        );
        let dtd = "<!DOCTYPE x [<!ENTITY a \"aaaa\">]><xbrl>&a;</xbrl>";
        assert!(
            parse("x", dtd.as_bytes())
                .expect_err("an error")
                .contains("not well-formed XML")
        );
        let big = vec![b' '; MAX_FILE_BYTES + 1];
        assert!(
            parse("x", &big)
                .expect_err("an error")
                .contains("file too big")
        );
    }

    fn data(rel: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/fundamentals")
            .join(rel);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Every instance of `../shared/data/fundamentals/xbrl` reads, with its
    /// cover and both undimensioned and dimensional facts.
    #[test]
    fn every_real_instance_parses() {
        for (rel, cik, form, period) in [
            (
                "xbrl/aapl-10k-2010/aapl-20100925.xml",
                "0000320193",
                "10-K",
                "2010-09-25",
            ),
            (
                "xbrl/aapl-10q-2018q4/aapl-20181229.xml",
                "0000320193",
                "10-Q",
                "2018-12-29",
            ),
            ("xbrl/aapl-20130629.xml", "0000320193", "10-Q", "2013-06-29"),
            ("xbrl/fb-20121231.xml", "0001326801", "10-K", "2012-12-31"),
            ("xbrl/fb-20131231.xml", "0001326801", "10-K", "2013-12-31"),
            ("xbrl/goog-20131231.xml", "0001288776", "10-K", "2013-12-31"),
            ("xbrl/msft-20130630.xml", "0000789019", "10-K", "2013-06-30"),
            ("xbrl/msft-20150630.xml", "0000789019", "10-K", "2015-06-30"),
        ] {
            let Parsed::Instance(i) =
                parse(rel, &data(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
            else {
                panic!("{rel}: not read as an instance");
            };
            assert_eq!(
                (
                    i.cik.as_str(),
                    i.form.as_str(),
                    i.period_end.to_string().as_str()
                ),
                (cik, form, period),
                "{rel}"
            );
            assert!(i.facts.iter().any(|f| f.dims.is_empty()), "{rel}");
            assert!(i.facts.iter().any(|f| !f.dims.is_empty()), "{rel}");
        }
        let linkbase = "xbrl/aapl-10k-2010/aapl-20101027_cal.xml";
        let e = parse(linkbase, &data(linkbase)).expect_err("a linkbase");
        assert!(e.contains("linkbase"), "{e}");
    }

    /// The real JSON files: Apple's companyfacts and its filing index.
    #[test]
    fn the_real_json_files_parse() {
        let rel = "companyfacts/CIK0000320193.json";
        let Parsed::Batch(_, b) = parse(rel, &data(rel)).expect("companyfacts") else {
            panic!("not a batch");
        };
        assert_eq!(b.facts.len(), 24_579);
        assert_eq!(b.companies[0].name, "Apple Inc.");
        let rel = "submissions/CIK0000320193-submissions-001.json";
        let Parsed::Batch(_, b) = parse(rel, &data(rel)).expect("submissions") else {
            panic!("not a batch");
        };
        assert_eq!(b.filings.len(), 988);
        assert_eq!(b.filings.iter().filter(|f| f.form == "4").count(), 600);
        let rel = "submissions/CIK0000789019-recent.json";
        let Parsed::Batch(_, b) = parse(rel, &data(rel)).expect("msft") else {
            panic!("not a batch");
        };
        assert_eq!(b.companies[0].tickers, vec!["MSFT".to_owned()]);
    }

    #[test]
    fn numbers() {
        assert_eq!(number("84310000000").expect("a value").1, 84_310_000_000.0);
        assert_eq!(
            number("-116000000.0000").expect("a value").1,
            -116_000_000.0
        );
        assert!(number("1e999").is_err());
        assert!(number("12 apples").is_err());
    }
}
