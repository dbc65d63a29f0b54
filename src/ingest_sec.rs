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

use crate::ingest_astro::{Progress, Target, follow};
use crate::stack::{self, StackInfo};
use ithaca_kit::client::{self, Outbound};
use ithaca_kit::config::CommonArgs;
use ithaca_kit::principal::Principal;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::fundamentals_service_client::FundamentalsServiceClient;
use std::path::{Path, PathBuf};

/// Bytes per streamed chunk.
const CHUNK_BYTES: usize = 1024 * 1024;

type Client = FundamentalsServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Outbound>,
>;

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
    let mut files = crate::ingest_astro::files_under(paths, is_sec_file)?;
    files.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
    Ok(files)
}

fn connect(common: &CommonArgs, target: &Target) -> anyhow::Result<Client> {
    let url = target
        .broker_url
        .clone()
        .or(StackInfo::read(&target.data_dir).broker_url)
        .unwrap_or_else(|| "http://127.0.0.1:50054".to_owned());
    let key = common.internal_key(&stack::key_file(&target.data_dir))?;
    Ok(FundamentalsServiceClient::with_interceptor(
        client::channel(&url)?,
        Outbound::new(key, Principal::system("")),
    )
    .max_encoding_message_size(32 * 1024 * 1024))
}

async fn send(
    sec: &mut Client,
    source: &str,
    bytes: &[u8],
    on_progress: impl FnMut(u64, u64),
) -> Result<pb::SecIngestReport, tonic::Status> {
    let mut chunks: Vec<pb::SecFileChunk> = bytes
        .chunks(CHUNK_BYTES)
        .map(|c| pb::SecFileChunk {
            source: String::new(),
            data: c.to_vec(),
        })
        .collect();
    if chunks.is_empty() {
        chunks.push(pb::SecFileChunk::default());
    }
    chunks[0].source = source.to_owned();
    let events = sec
        .ingest_sec_with_progress(tokio_stream::iter(chunks))
        .await?
        .into_inner();
    follow(events, on_progress).await
}

#[derive(Default)]
struct Totals {
    facts: i64,
    facts_stored: i64,
    filings_stored: i64,
    transactions_stored: i64,
    files_unchanged: usize,
    tickers: Vec<String>,
    skipped: Vec<PathBuf>,
}

pub async fn sec(common: &CommonArgs, paths: Vec<PathBuf>, target: Target) -> anyhow::Result<()> {
    let files = sec_files(&paths)?;
    if files.is_empty() {
        anyhow::bail!("no .json, .zip or .xml files under the paths given");
    }
    let mut sec = connect(common, &target)?;
    let progress = Progress::stderr();
    let mut t = Totals::default();
    for (i, path) in files.iter().enumerate() {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        progress.show(i, files.len(), &name);
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                progress.say(&format!("skipped {}: {e}", path.display()));
                t.skipped.push(path.clone());
                continue;
            }
        };
        let shown = |done: u64, total: u64| {
            progress.show(i, files.len(), &format!("{name}: {done}/{total} rows"));
        };
        match send(&mut sec, &name, &bytes, shown).await {
            Ok(r) => {
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
            }
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                progress.say(&format!("skipped {}: {}", path.display(), status.message()));
                t.skipped.push(path.clone());
            }
            Err(status) => {
                progress.say("");
                anyhow::bail!("{}: {}", path.display(), status.message());
            }
        }
    }
    progress.show(files.len(), files.len(), "done");
    if progress.terminal {
        eprintln!();
    }
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
        t.skipped.len(),
        if t.tickers.is_empty() {
            "none".to_owned()
        } else {
            t.tickers.join(" ")
        }
    );
    if !t.skipped.is_empty() {
        anyhow::bail!(
            "{} file(s) skipped: {}",
            t.skipped.len(),
            t.skipped
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}
