//! The fundamentals' domain types: CIKs and accession numbers with `parse`,
//! the source formats, dates and period keys, the parsed rows every parser
//! produces (facts with their provenance, filings, insider transactions),
//! and the Form 4 transaction codes.

use std::fmt;

/// A company's Central Index Key: ten digits, leading zeros kept.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cik(String);

impl Cik {
    /// `320193`, `0000320193` or `CIK0000320193`.
    pub fn parse(text: &str) -> Result<Cik, String> {
        let t = text.trim();
        let digits = t
            .strip_prefix("CIK")
            .or_else(|| t.strip_prefix("cik"))
            .unwrap_or(t);
        if digits.is_empty() || digits.len() > 10 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("not a CIK (up to ten digits): {t:?}"));
        }
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("not a CIK (up to ten digits): {t:?}"))?;
        if n == 0 {
            return Err("a CIK is not zero".to_owned());
        }
        Ok(Cik(format!("{n:010}")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Cik {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An accession number, `0000320193-19-000010`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Accession(String);

impl Accession {
    pub fn parse(text: &str) -> Result<Accession, String> {
        let t = text.trim();
        let b = t.as_bytes();
        let ok = b.len() == 20
            && b[10] == b'-'
            && b[13] == b'-'
            && b.iter()
                .enumerate()
                .all(|(i, c)| i == 10 || i == 13 || c.is_ascii_digit());
        if !ok {
            return Err(format!(
                "not an accession number (like 0000320193-19-000010): {t:?}"
            ));
        }
        Ok(Accession(t.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Accession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

ithaca_kit::text_enum! {
    /// The file formats `ithaca ingest sec` reads.
    pub enum SourceFormat {
        /// `api/xbrl/companyfacts/CIK##########.json`.
        Companyfacts = "companyfacts",
        /// The filing index, `submissions/CIK##########.json`.
        Submissions = "submissions",
        /// A Financial Statement Data Sets quarterly zip.
        Fsds = "fsds",
        /// An XBRL 2.1 instance document.
        Xbrl = "xbrl",
        /// A Form 4 ownership document.
        Form4 = "form4",
    }
}

/// A calendar date, `YYYY-MM-DD`.
pub type Date = time::Date;

const ISO: &[time::format_description::BorrowedFormatItem<'static>] =
    time::macros::format_description!("[year]-[month]-[day]");

/// Parse `YYYY-MM-DD`.
pub fn parse_date(text: &str) -> Result<Date, String> {
    Date::parse(text.trim(), ISO).map_err(|_| format!("not a date (YYYY-MM-DD): {text:?}"))
}

/// Parse the Data Sets' `YYYYMMDD`.
pub fn parse_compact_date(text: &str) -> Result<Date, String> {
    let t = text.trim();
    if t.len() != 8 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("not a date (YYYYMMDD): {t:?}"));
    }
    parse_date(&format!("{}-{}-{}", &t[..4], &t[4..6], &t[6..]))
}

pub fn format_date(d: Date) -> String {
    d.format(ISO).expect("an ISO date always formats")
}

/// The end of a period rounded to the nearest month end, `YYYY-MM`: the
/// 15th and later round to their own month, earlier days to the month
/// before. The Data Sets give every date this way; Apple's quarter ending
/// 2010-03-27 is 2010-03 from every source.
pub fn period_month(end: Date) -> String {
    let (y, m) = if end.day() >= 15 {
        (end.year(), u8::from(end.month()))
    } else if u8::from(end.month()) == 1 {
        (end.year() - 1, 12)
    } else {
        (end.year(), u8::from(end.month()) - 1)
    };
    format!("{y:04}-{m:02}")
}

/// Months since year 0 of a `YYYY-MM` key, for stepping by quarters.
pub fn month_index(key: &str) -> Option<i32> {
    let (y, m) = key.split_once('-')?;
    Some(y.parse::<i32>().ok()? * 12 + m.parse::<i32>().ok()? - 1)
}

/// The `YYYY-MM` key `months` before `key`.
pub fn month_minus(key: &str, months: i32) -> Option<String> {
    let i = month_index(key)? - months;
    Some(format!(
        "{:04}-{:02}",
        i.div_euclid(12),
        i.rem_euclid(12) + 1
    ))
}

/// Quarters a duration covers: its length in days over 91.3, when within
/// three weeks of a whole number from 1 to 4; else -1 (an odd length).
pub fn quarters_between(start: Date, end: Date) -> i64 {
    let days = (end - start).whole_days() + 1;
    let q = (days as f64 / 91.31).round();
    if (1.0..=4.0).contains(&q) && (days as f64 - q * 91.31).abs() <= 21.0 {
        q as i64
    } else {
        -1
    }
}

/// One reported numeric value with its provenance.
#[derive(Clone, Debug, PartialEq)]
pub struct Fact {
    pub cik: Cik,
    /// `us-gaap:Revenues`, `dei:EntityCommonStockSharesOutstanding`,
    /// `aapl:...` for a company's own concepts.
    pub concept: String,
    /// `USD`, `USD/shares`, `shares`, `pure`, ...
    pub unit: String,
    pub period_start: Option<Date>,
    pub period_end: Date,
    /// 0 an instant, 1..4 quarters, -1 another length.
    pub quarters: i64,
    /// '' for an undimensioned total, else `Axis=Member;...` sorted.
    pub dims: String,
    pub value: f64,
    pub value_text: String,
    pub accession: Accession,
    pub form: String,
    pub filed: Date,
    pub fiscal_year: Option<i64>,
    pub fiscal_period: Option<String>,
    pub source_format: SourceFormat,
}

/// One filing of the index.
#[derive(Clone, Debug, PartialEq)]
pub struct Filing {
    pub accession: Accession,
    pub cik: Cik,
    pub form: String,
    pub filing_date: Date,
    pub report_date: Option<Date>,
    pub primary_document: Option<String>,
}

/// A company a file is about, with the tickers the file gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Company {
    pub cik: Cik,
    pub name: String,
    pub tickers: Vec<String>,
    /// The date of the ticker evidence (the filing or file date).
    pub seen_on: Date,
}

ithaca_kit::text_enum! {
    /// Form 4 transaction codes (SEC's General Instructions, item 8).
    pub enum TxnCode {
        Purchase = "P",
        Sale = "S",
        Voluntary = "V",
        Grant = "A",
        DispositionToIssuer = "D",
        TaxWithholding = "F",
        DiscretionaryIssuer = "I",
        Exercise = "M",
        ExerciseOutOfTheMoney = "X",
        ExerciseInTheMoney = "C",
        ExpirationShort = "E",
        ExpirationLong = "H",
        ExerciseOther = "O",
        Gift = "G",
        SmallAcquisition = "L",
        Will = "W",
        Trust = "Z",
        Other = "J",
        Tender = "U",
        EquitySwap = "K",
    }
}

impl TxnCode {
    /// What the code means, for an agent.
    pub fn meaning(self) -> &'static str {
        match self {
            TxnCode::Purchase => "open market or private purchase",
            TxnCode::Sale => "open market or private sale",
            TxnCode::Voluntary => "transaction voluntarily reported earlier than required",
            TxnCode::Grant => "grant, award or other acquisition from the issuer",
            TxnCode::DispositionToIssuer => "disposition to the issuer",
            TxnCode::TaxWithholding => "payment of exercise price or tax by delivering securities",
            TxnCode::DiscretionaryIssuer => "discretionary transaction with the issuer",
            TxnCode::Exercise => "exercise or conversion of a derivative security",
            TxnCode::ExerciseOutOfTheMoney => "exercise of an out-of-the-money derivative",
            TxnCode::ExerciseInTheMoney => "exercise of an in-the-money derivative",
            TxnCode::ExpirationShort => "expiration of a short derivative position",
            TxnCode::ExpirationLong => "expiration of a long derivative position",
            TxnCode::ExerciseOther => "exercise of an out-of-the-money derivative (other)",
            TxnCode::Gift => "bona fide gift",
            TxnCode::SmallAcquisition => "small acquisition",
            TxnCode::Will => "acquisition or disposition by will or the laws of descent",
            TxnCode::Trust => "deposit into or withdrawal from a voting trust",
            TxnCode::Other => "other acquisition or disposition",
            TxnCode::Tender => "disposition in a tender of shares in a change of control",
            TxnCode::EquitySwap => "equity swap or similar instrument",
        }
    }
}

/// One line of a Form 4's non-derivative or derivative table.
#[derive(Clone, Debug, PartialEq)]
pub struct InsiderTxn {
    pub accession: Accession,
    pub issuer: Cik,
    pub filed: Date,
    pub owner_cik: Cik,
    pub owner_name: String,
    /// `director`, `officer`, `ten_percent_owner`, `other`, comma-separated.
    pub relationship: String,
    pub officer_title: Option<String>,
    pub security: String,
    pub derivative: bool,
    pub date: Date,
    pub code: TxnCode,
    pub shares: f64,
    pub price: Option<f64>,
    /// `A` or `D`.
    pub acquired_disposed: String,
    pub shares_after: f64,
    /// `D` direct or `I` indirect.
    pub ownership: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ciks_and_accessions() {
        assert_eq!(
            Cik::parse("320193").expect("a value").as_str(),
            "0000320193"
        );
        assert_eq!(
            Cik::parse("CIK0000320193").expect("a value").as_str(),
            "0000320193"
        );
        assert!(Cik::parse("AAPL").is_err());
        assert!(Cik::parse("12345678901").is_err());
        assert!(Accession::parse("0000320193-19-000010").is_ok());
        assert!(Accession::parse("0000320193-19-00001").is_err());
    }

    #[test]
    fn periods() {
        let d = |s| parse_date(s).expect("a value");
        assert_eq!(period_month(d("2010-03-27")), "2010-03");
        assert_eq!(period_month(d("2018-12-29")), "2018-12");
        assert_eq!(period_month(d("2010-01-02")), "2009-12");
        assert_eq!(quarters_between(d("2018-09-30"), d("2018-12-29")), 1);
        assert_eq!(quarters_between(d("2009-09-27"), d("2010-03-27")), 2);
        assert_eq!(quarters_between(d("2017-10-01"), d("2018-09-29")), 4);
        assert_eq!(quarters_between(d("2018-10-01"), d("2018-11-30")), -1);
        assert_eq!(month_minus("2010-03", 3).expect("a value"), "2009-12");
        assert_eq!(
            parse_compact_date("20100331").expect("a value"),
            d("2010-03-31")
        );
    }
}
