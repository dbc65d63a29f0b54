//! The daily-bar file format (`Ticker,Date,Open,High,Low,Close,Volume,Adj
//! Close`, plain or gzipped): parsed and checked completely, so a malformed
//! row is reported with its line number before anything is ingested.

use ithaca_proto::broker::v1 as pb;
use sha2::{Digest, Sha256};
use std::io::Read;

/// A file that cannot be ingested, with the line at fault where there is one.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CsvError(String);

macro_rules! fail {
    ($($arg:tt)*) => {
        return Err(CsvError(format!($($arg)*)))
    };
}

const HEADER: [&str; 8] = [
    "ticker",
    "date",
    "open",
    "high",
    "low",
    "close",
    "volume",
    "adj close",
];

/// A parsed, checked file.
pub struct BarsFile {
    pub source: String,
    pub checksum: String,
    pub rows: Vec<pb::BarRow>,
}

/// Decompress if gzipped.
fn plain_bytes(raw: &[u8]) -> Result<Vec<u8>, CsvError> {
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(raw)
            .read_to_end(&mut out)
            .map_err(|_| CsvError("the file looks gzipped but does not decompress".into()))?;
        Ok(out)
    } else {
        Ok(raw.to_vec())
    }
}

/// Parse and check every row; the first problem is reported with its line.
pub fn parse_bars(source: &str, raw: &[u8]) -> Result<BarsFile, CsvError> {
    let bytes = plain_bytes(raw)?;
    let checksum = hex::encode(Sha256::digest(&bytes));
    let text =
        std::str::from_utf8(&bytes).map_err(|_| CsvError("the file is not UTF-8 text".into()))?;
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        fail!("the file is empty");
    };
    let names: Vec<String> = header
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .collect();
    if names != HEADER {
        fail!(
            "line 1: expected the header Ticker,Date,Open,High,Low,Close,Volume,Adj Close, found {header:?}"
        );
    }
    let mut rows = Vec::new();
    for (index, line) in lines {
        let number = index as i64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        if line.contains('"') {
            fail!("line {number}: quoted fields are not supported in bar files");
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != 8 {
            fail!(
                "line {number}: expected 8 comma-separated fields, found {}",
                fields.len()
            );
        }
        let num = |i: usize| -> Result<f64, CsvError> {
            fields[i]
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| {
                    CsvError(format!(
                        "line {number}: {}: {:?} is not a number",
                        HEADER[i], fields[i]
                    ))
                })
        };
        let volume = fields[6]
            .parse::<f64>()
            .ok()
            .filter(|v| v.fract() == 0.0 && *v >= 0.0 && *v < 9.0e15)
            .ok_or_else(|| {
                CsvError(format!(
                    "line {number}: volume: {:?} is not a whole number",
                    fields[6]
                ))
            })?;
        rows.push(pb::BarRow {
            line: number,
            symbol: fields[0].to_owned(),
            date: fields[1].to_owned(),
            open: num(2)?,
            high: num(3)?,
            low: num(4)?,
            close: num(5)?,
            volume: volume as i64,
            adj_close: num(7)?,
        });
    }
    if rows.is_empty() {
        fail!("the file holds no bars");
    }
    Ok(BarsFile {
        source: source.to_owned(),
        checksum,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO: &[u8] = include_bytes!("../../../../data/demo/stocks_daily_ohlcv_2000-2013.csv.gz");

    #[test]
    fn the_demo_dataset_parses_and_matches_its_recorded_checksum() {
        let parsed = parse_bars("demo.csv", DEMO).expect("demo parses");
        assert_eq!(parsed.rows.len(), 12_154);
        assert_eq!(
            parsed.checksum,
            "e73fe05d106b7da1abe8f947264c514afd02cef5c9db4864b9437c84d6bd6069"
        );
    }

    #[test]
    fn malformed_rows_are_reported_with_their_line() {
        let csv = "Ticker,Date,Open,High,Low,Close,Volume,Adj Close\nAAPL,2000-03-01,1,2,0.5,1.5,10,1.4\nAAPL,2000-03-02,1,2,0.5,abc,10,1.4\n";
        let err = parse_bars("x.csv", csv.as_bytes())
            .err()
            .expect("malformed")
            .to_string();
        assert!(err.starts_with("line 3: close"), "{err}");
        let err = parse_bars("x.csv", b"Sym,Day\n")
            .err()
            .expect("bad header")
            .to_string();
        assert!(err.starts_with("line 1"), "{err}");
        let err = parse_bars(
            "x.csv",
            b"Ticker,Date,Open,High,Low,Close,Volume,Adj Close\nAAPL,2000-03-01,1,2\n",
        )
        .err()
        .expect("short row")
        .to_string();
        assert!(err.starts_with("line 2: expected 8"), "{err}");
    }
}
