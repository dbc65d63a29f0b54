//! `ithaca ingest sec <files|dirs>`: send SEC EDGAR files to the broker's
//! fundamentals service, which reads them (its parsers are the broker's
//! own) and stores each file in one transaction.
//!
//! Like `ithaca ingest gcn`: progress on stderr, a file the broker refuses
//! is named with its reason and skipped while the others land, the command
//! then exits non-zero saying which were skipped, and re-ingesting a file
//! changes nothing. JSON files go first (the filing index and
//! companyfacts), then Data Set zips, then XML (instances and Form 4s look
//! their filing up in what the JSON brought).

use super::{FileUpload, Target, Upload};
use crate::broker_client::{MAX_MESSAGE, Signed};
use ithaca_kit::config::CommonArgs;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::fundamentals_service_client::FundamentalsServiceClient;
use ithaca_proto::mcp::v1::CallEvent;
use std::path::{Path, PathBuf};

/// The broker's SEC ingest (the fundamentals service), signed as the system.
struct Sec(FundamentalsServiceClient<Signed>);

impl Upload for Sec {
    type Chunk = pb::SecFileChunk;
    type Report = pb::SecIngestReport;

    async fn open(
        &mut self,
        chunks: impl tokio_stream::Stream<Item = pb::SecFileChunk> + Send + 'static,
    ) -> Result<tonic::Streaming<CallEvent>, tonic::Status> {
        Ok(self.0.ingest_sec_with_progress(chunks).await?.into_inner())
    }
}

impl FileUpload for Sec {
    fn chunk(&self, source: Option<&str>, data: Vec<u8>) -> pb::SecFileChunk {
        pb::SecFileChunk {
            source: source.unwrap_or_default().to_owned(),
            data,
        }
    }
}

/// The order files are sent in: JSON, zips, XML.
fn rank(p: &Path) -> u8 {
    match p.extension().and_then(|x| x.to_str()) {
        Some("json") => 0,
        Some("zip") => 1,
        _ => 2,
    }
}

/// Whether a file looks like SEC data by its name: linkbases and schemas
/// beside an instance are not.
fn is_sec_file(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let linkbase = ["_cal.xml", "_def.xml", "_lab.xml", "_pre.xml"]
        .iter()
        .any(|s| name.ends_with(s));
    let wanted = matches!(
        p.extension().and_then(|x| x.to_str()),
        Some("json" | "zip" | "xml")
    );
    wanted && !linkbase
}

/// Every SEC file under `paths`, JSON first, then zips, then XML.
pub fn sec_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = super::files_under(paths, is_sec_file)?;
    files.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
    Ok(files)
}

#[derive(Default)]
struct Totals {
    facts: i64,
    facts_stored: i64,
    filings_stored: i64,
    transactions_stored: i64,
    files_unchanged: usize,
    tickers: Vec<String>,
}

pub async fn sec(common: &CommonArgs, paths: Vec<PathBuf>, target: Target) -> anyhow::Result<()> {
    let files = sec_files(&paths)?;
    if files.is_empty() {
        anyhow::bail!("no .json, .zip or .xml files under the paths given");
    }
    let mut sec = Sec(
        FundamentalsServiceClient::new(super::channel(common, &target)?)
            .max_encoding_message_size(MAX_MESSAGE),
    );
    let mut t = Totals::default();
    let skipped = super::each_file(&mut sec, &files, "rows", |r| {
        t.facts += i64::from(r.facts);
        t.facts_stored += i64::from(r.facts_stored);
        t.filings_stored += i64::from(r.filings_stored);
        t.transactions_stored += i64::from(r.transactions_stored);
        if r.already_present {
            t.files_unchanged += 1;
        }
        for k in r.tickers {
            if !t.tickers.contains(&k) {
                t.tickers.push(k);
            }
        }
    })
    .await?;
    t.tickers.sort();
    println!(
        "{} files: {} facts read, {} newly stored, {} filings and {} insider transactions newly \
         stored, {} files already ingested, {} skipped; tickers: {}",
        files.len(),
        t.facts,
        t.facts_stored,
        t.filings_stored,
        t.transactions_stored,
        t.files_unchanged,
        skipped.len(),
        if t.tickers.is_empty() {
            "none".to_owned()
        } else {
            t.tickers.join(" ")
        }
    );
    super::none_skipped(&skipped)
}
