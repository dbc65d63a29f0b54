//! `ithaca ingest bars <file>`: load daily bars (the format of the demo
//! dataset, plain or gzipped) into the broker service, showing progress.
//!
//! The file is parsed and checked completely before anything is sent, so a
//! malformed row is reported with its line number and nothing is ingested;
//! the broker then commits the whole file in one transaction. Re-ingesting
//! the same file (same SHA-256) changes nothing.

use super::{Target, Upload};
use crate::broker_client::Client;
use anyhow::Context;
pub use ithaca_broker::market::csv::{BarsFile, parse_bars};
use ithaca_kit::config::CommonArgs;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::mcp::v1::CallEvent;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// The demo dataset shipped with Ithaca (public domain; see data/demo/SOURCES.md).
pub const DEMO_DATASET: &[u8] =
    include_bytes!("../../data/demo/stocks_daily_ohlcv_2000-2013.csv.gz");
pub const DEMO_NAME: &str = "stocks_daily_ohlcv_2000-2013.csv";

/// Rows per streamed chunk.
const CHUNK_ROWS: usize = 1000;

/// The broker's bars ingest: chunks of rows, answered by the dataset.
struct Bars<'a>(&'a mut Client);

impl Upload for Bars<'_> {
    type Chunk = pb::IngestBarsChunk;
    type Report = pb::Dataset;
    const REPLY: &'static str = "dataset";

    async fn open(
        &mut self,
        chunks: impl tokio_stream::Stream<Item = pb::IngestBarsChunk> + Send + 'static,
    ) -> Result<tonic::Streaming<CallEvent>, tonic::Status> {
        Ok(self.0.ingest_bars_with_progress(chunks).await?.into_inner())
    }
}

/// Stream a parsed file to the broker; `progress` reports rows sent, then
/// `written` the rows the broker has written (its progress events).
pub async fn upload_bars(
    broker: &mut Client,
    file: BarsFile,
    progress: impl Fn(usize, usize) + Send + 'static,
    written: impl FnMut(u64, u64),
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
    super::upload(&mut Bars(broker), stream, written)
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))
}

pub async fn bars(common: &CommonArgs, file: PathBuf, target: Target) -> anyhow::Result<()> {
    let raw = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("bars.csv")
        .trim_end_matches(".gz")
        .to_owned();
    let parsed = parse_bars(&name, &raw)
        .with_context(|| format!("{}: nothing was ingested", file.display()))?;
    let mut broker = super::connect(common, &target)?;
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
    let dataset = upload_bars(
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
