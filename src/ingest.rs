//! `ithaca ingest bars <file>`: load daily bars (the format of the demo
//! dataset, plain or gzipped) into the broker service, showing progress.
//!
//! The file is parsed and checked completely before anything is sent, so a
//! malformed row is reported with its line number and nothing is ingested;
//! the broker then commits the whole file in one transaction. Re-ingesting
//! the same file (same SHA-256) changes nothing.

pub use crate::broker_client::broker_client;
use crate::stack::{self, StackInfo};
use anyhow::Context;
pub use ithaca_broker::market::csv::{BarsFile, parse_bars};
use ithaca_kit::client::Outbound;
use ithaca_kit::config::CommonArgs;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::broker_service_client::BrokerServiceClient;
use ithaca_proto::mcp::v1::call_event::Event;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// The demo dataset shipped with Ithaca (public domain; see data/demo/SOURCES.md).
pub const DEMO_DATASET: &[u8] = include_bytes!("../data/demo/stocks_daily_ohlcv_2000-2013.csv.gz");
pub const DEMO_NAME: &str = "stocks_daily_ohlcv_2000-2013.csv";

/// Rows per streamed chunk.
const CHUNK_ROWS: usize = 1000;

#[derive(Debug, clap::Subcommand)]
pub enum IngestCommand {
    /// Ingest a CSV of daily bars (Ticker,Date,Open,High,Low,Close,Volume,Adj Close; .gz accepted).
    Bars {
        /// The file to ingest.
        file: PathBuf,
        /// The broker service URL (default: the local stack's, from stack.json).
        #[arg(long, env = "ITHACA_BROKER_URL")]
        broker_url: Option<String>,
        /// The local stack's data directory (for stack.json and internal.key).
        #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
    },
    /// Ingest ZTF alert packets: Avro object-container files, or folders of
    /// them (walked for `.avro`). Bad files are named and skipped.
    Ztf {
        /// Files or folders.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The broker whose archive receives them.
        #[arg(long, default_value = ithaca_broker::alerts::service::ARCHIVE_BROKER)]
        broker: String,
        #[command(flatten)]
        target: crate::ingest_astro::Target,
    },
    /// Ingest a reference catalog: the Hipparcos-2 or OpenNGC CSV.
    Catalog {
        /// The CSV file.
        file: PathBuf,
        #[command(flatten)]
        target: crate::ingest_astro::Target,
    },
    /// Ingest GCN circulars (JSON Lines or JSON, as GCN's archive serves
    /// them) and notices (VOEvent 2.0 XML, GCN JSON): files, or folders of
    /// them (walked for `.json`, `.jsonl` and `.xml`). Bad files are named
    /// and skipped.
    Gcn {
        /// Files or folders.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        target: crate::ingest_astro::Target,
    },
    /// Ingest SEC EDGAR files: companyfacts and submissions JSON, Financial
    /// Statement Data Sets zips, XBRL 2.1 instances and Form 4 XML; files, or
    /// folders of them (walked for `.json`, `.zip` and `.xml`, linkbases
    /// left out). JSON goes first, so the filing index is known when an
    /// instance or a Form 4 looks up its filing. Bad files are named and
    /// skipped.
    Sec {
        /// Files or folders.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        target: crate::ingest_astro::Target,
    },
}

/// Stream a parsed file to the broker; `progress` reports rows sent, then
/// `written` the rows the broker has written (its progress events).
pub async fn upload(
    broker: &mut BrokerServiceClient<
        tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Outbound>,
    >,
    file: BarsFile,
    progress: impl Fn(usize, usize) + Send + 'static,
    mut written: impl FnMut(u64, u64),
) -> anyhow::Result<pb::Dataset> {
    let total = file.rows.len();
    let mut chunks = Vec::new();
    let mut rows = file.rows.into_iter().peekable();
    let mut first = true;
    while rows.peek().is_some() {
        let batch: Vec<pb::BarRow> = rows.by_ref().take(CHUNK_ROWS).collect();
        chunks.push(pb::IngestBarsChunk {
            source: if first {
                file.source.clone()
            } else {
                String::new()
            },
            checksum: if first {
                file.checksum.clone()
            } else {
                String::new()
            },
            rows: batch,
        });
        first = false;
    }
    let mut sent = 0;
    let stream = tokio_stream::iter(chunks.into_iter().inspect(move |chunk| {
        sent += chunk.rows.len();
        progress(sent, total);
    }));
    let mut events = broker
        .ingest_bars_with_progress(stream)
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?
        .into_inner();
    while let Some(event) = events
        .message()
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?
    {
        match event.event {
            Some(Event::Progress(p)) => written(p.progress as u64, p.total.unwrap_or(0.0) as u64),
            Some(Event::Reply(reply)) => {
                return prost::Message::decode(reply.as_slice())
                    .map_err(|e| anyhow::anyhow!("decoding the dataset: {e}"));
            }
            _ => {}
        }
    }
    anyhow::bail!("the ingest ended without its dataset")
}

pub async fn run(common: &CommonArgs, cmd: IngestCommand) -> anyhow::Result<()> {
    let (file, broker_url, data_dir) = match cmd {
        IngestCommand::Bars {
            file,
            broker_url,
            data_dir,
        } => (file, broker_url, data_dir),
        IngestCommand::Ztf {
            paths,
            broker,
            target,
        } => return crate::ingest_astro::ztf(common, paths, broker, target).await,
        IngestCommand::Catalog { file, target } => {
            return crate::ingest_astro::catalog(common, file, target).await;
        }
        IngestCommand::Gcn { paths, target } => {
            return crate::ingest_gcn::gcn(common, paths, target).await;
        }
        IngestCommand::Sec { paths, target } => {
            return crate::ingest_sec::sec(common, paths, target).await;
        }
    };
    let raw = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("bars.csv")
        .trim_end_matches(".gz")
        .to_owned();
    let parsed = parse_bars(&name, &raw)
        .with_context(|| format!("{}: nothing was ingested", file.display()))?;
    let url = broker_url
        .or(StackInfo::read(&data_dir).broker_url)
        .unwrap_or_else(|| "http://127.0.0.1:50054".to_owned());
    let key = common.internal_key(&stack::key_file(&data_dir))?;
    let mut broker = broker_client(&url, key)?;
    let terminal = std::io::stderr().is_terminal();
    let show = move |what: &str, done: u64, total: u64| {
        let pct = done * 100 / total.max(1);
        if terminal {
            eprint!("\ringest: {done}/{total} rows {what} ({pct}%)");
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("ingest: {done}/{total} rows {what} ({pct}%)");
        }
    };
    let dataset = upload(
        &mut broker,
        parsed,
        move |sent, total| show("sent", sent as u64, total as u64),
        |done, total| show("written", done, total),
    )
    .await
    .with_context(|| format!("{}: nothing was ingested", file.display()))?;
    if terminal {
        eprintln!();
    }
    if dataset.already_present {
        println!(
            "already ingested as dataset {} ({} rows); nothing changed",
            dataset.dataset_id, dataset.row_count
        );
    } else {
        println!(
            "dataset {}: {} rows, {} to {}, symbols {}, sha256 {}",
            dataset.dataset_id,
            dataset.row_count,
            dataset.first_date,
            dataset.last_date,
            dataset.symbols.join(" "),
            dataset.checksum
        );
    }
    Ok(())
}
