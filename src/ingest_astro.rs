//! `ithaca ingest ztf <files|dirs>` and `ithaca ingest catalog <csv>`: send
//! alert containers and reference catalogs to the broker, which decodes and
//! stores them (the Avro and CSV readers are the broker's own).
//!
//! Each alert file is one gRPC stream and one transaction: a malformed or
//! truncated file is reported by name and skipped, the others still land,
//! and the command then exits non-zero saying how many were skipped.
//! Re-ingesting a file changes nothing.

use crate::broker_client::broker_client;
use crate::stack::{self, StackInfo};
use anyhow::Context;
use ithaca_kit::config::CommonArgs;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::mcp::v1::call_event::Event;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Bytes per streamed chunk.
const CHUNK_BYTES: usize = 1024 * 1024;

/// Where to send, shared by both commands.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The broker service URL (default: the local stack's, from stack.json).
    #[arg(long, env = "ITHACA_BROKER_URL")]
    pub broker_url: Option<String>,
    /// The local stack's data directory (for stack.json and internal.key).
    #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
}

/// Every `.avro` file under `paths` (files as given, folders walked), sorted
/// within each folder.
pub fn avro_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    files_under(paths, |p| p.extension().is_some_and(|x| x == "avro"))
}

/// The files under `paths`: each file as given (whatever its name), and in
/// each folder, walked in name order, those `wanted` picks. A path that does
/// not exist is an error naming it.
pub(crate) fn files_under(
    paths: &[PathBuf],
    wanted: impl Fn(&Path) -> bool + Copy,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, wanted, &mut out).with_context(|| format!("reading {}", p.display()))?;
        } else if p.exists() {
            out.push(p.clone());
        } else {
            anyhow::bail!("{}: no such file or folder", p.display());
        }
    }
    Ok(out)
}

fn walk(
    dir: &Path,
    wanted: impl Fn(&Path) -> bool + Copy,
    out: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for e in entries {
        if e.is_dir() {
            walk(&e, wanted, out)?;
        } else if wanted(&e) {
            out.push(e);
        }
    }
    Ok(())
}

/// A progress line on stderr: redrawn in place on a terminal, one line per
/// step otherwise.
pub(crate) struct Progress {
    pub(crate) terminal: bool,
}

impl Progress {
    /// Progress on stderr, redrawn in place when it is a terminal.
    pub(crate) fn stderr() -> Self {
        Progress {
            terminal: std::io::stderr().is_terminal(),
        }
    }

    pub(crate) fn show(&self, done: usize, total: usize, what: &str) {
        const WIDTH: usize = 30;
        let filled = done * WIDTH / total.max(1);
        let bar = format!("[{}{}]", "#".repeat(filled), " ".repeat(WIDTH - filled));
        if self.terminal {
            eprint!("\r\x1b[2K{bar} {done}/{total} {what}");
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("{bar} {done}/{total} {what}");
        }
    }

    pub(crate) fn say(&self, line: &str) {
        if self.terminal {
            eprint!("\r\x1b[2K");
        }
        eprintln!("{line}");
    }
}

/// Stream `bytes` as one file to the broker's alert ingest, handing each
/// progress report (alerts written of total) to `on_progress`.
pub async fn send_alert_file(
    broker: &mut crate::broker_client::Client,
    broker_id: &str,
    source: &str,
    bytes: Vec<u8>,
    on_progress: impl FnMut(u64, u64),
) -> Result<pb::AlertIngestReport, tonic::Status> {
    let mut chunks: Vec<pb::AlertFileChunk> = bytes
        .chunks(CHUNK_BYTES)
        .map(|c| pb::AlertFileChunk {
            broker_id: String::new(),
            source: String::new(),
            data: c.to_vec(),
        })
        .collect();
    if chunks.is_empty() {
        chunks.push(pb::AlertFileChunk::default());
    }
    chunks[0].broker_id = broker_id.to_owned();
    chunks[0].source = source.to_owned();
    let events = broker
        .ingest_alerts_with_progress(tokio_stream::iter(chunks))
        .await?
        .into_inner();
    follow(events, on_progress).await
}

pub async fn ztf(
    common: &CommonArgs,
    paths: Vec<PathBuf>,
    broker_id: String,
    target: Target,
) -> anyhow::Result<()> {
    let files = avro_files(&paths)?;
    if files.is_empty() {
        anyhow::bail!(
            "no .avro files under {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut broker = connect(common, &target)?;
    let progress = Progress {
        terminal: std::io::stderr().is_terminal(),
    };
    let (mut alerts, mut stored, mut unchanged, mut skipped) = (0i64, 0i64, 0usize, Vec::new());
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
                skipped.push(path.clone());
                continue;
            }
        };
        let shown = |done: u64, total: u64| {
            progress.show(i, files.len(), &format!("{name}: {done}/{total} packets"));
        };
        match send_alert_file(&mut broker, &broker_id, &name, bytes, shown).await {
            Ok(report) => {
                alerts += i64::from(report.alerts);
                stored += i64::from(report.stored);
                if report.already_present {
                    unchanged += 1;
                }
            }
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                progress.say(&format!("skipped {}: {}", path.display(), status.message()));
                skipped.push(path.clone());
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
    println!(
        "{} files: {alerts} alerts read, {stored} newly stored, {unchanged} files already ingested, {} skipped",
        files.len(),
        skipped.len()
    );
    if !skipped.is_empty() {
        anyhow::bail!(
            "{} file(s) skipped: {}",
            skipped.len(),
            skipped
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

pub async fn catalog(common: &CommonArgs, file: PathBuf, target: Target) -> anyhow::Result<()> {
    let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let name = file.file_name().map_or_else(
        || "catalog.csv".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut broker = connect(common, &target)?;
    let total = bytes.len();
    let chunks: Vec<pb::CatalogFileChunk> = bytes
        .chunks(CHUNK_BYTES)
        .enumerate()
        .map(|(i, c)| pb::CatalogFileChunk {
            source: if i == 0 { name.clone() } else { String::new() },
            data: c.to_vec(),
        })
        .collect();
    let progress = Progress::stderr();
    let count = chunks.len();
    let mut sent = 0;
    let (sending, shown) = (Progress::stderr(), name.clone());
    let stream = tokio_stream::iter(chunks.into_iter().enumerate().map(move |(i, c)| {
        sent += c.data.len();
        sending.show(i + 1, count, &format!("{shown}: {sent}/{total} bytes"));
        c
    }));
    // Then the broker's own count: sources stored of total as it writes them.
    let stored = |done: u64, total: u64| {
        progress.show(count, count, &format!("{name}: {done}/{total} sources"));
    };
    let report = send_catalog(&mut broker, stream, stored)
        .await
        .map_err(|s| anyhow::anyhow!("{}: {}", file.display(), s.message()))?;
    if progress.terminal {
        eprintln!();
    }
    if report.already_present {
        println!(
            "{}: already ingested ({} {} sources); nothing changed",
            report.source, report.rows, report.catalog
        );
    } else {
        println!(
            "{}: {} {} sources, sha256 {}",
            report.source, report.rows, report.catalog, report.checksum
        );
    }
    Ok(())
}

/// Stream a catalog file's chunks to the broker's catalog ingest, handing
/// each progress report (sources stored of total) to `on_progress`.
async fn send_catalog(
    broker: &mut crate::broker_client::Client,
    chunks: impl tokio_stream::Stream<Item = pb::CatalogFileChunk> + Send + 'static,
    on_progress: impl FnMut(u64, u64),
) -> Result<pb::CatalogIngestReport, tonic::Status> {
    let events = broker
        .ingest_catalog_with_progress(chunks)
        .await?
        .into_inner();
    follow(events, on_progress).await
}

pub fn connect(
    common: &CommonArgs,
    target: &Target,
) -> anyhow::Result<crate::broker_client::Client> {
    let url = target
        .broker_url
        .clone()
        .or(StackInfo::read(&target.data_dir).broker_url)
        .unwrap_or_else(|| "http://127.0.0.1:50054".to_owned());
    let key = common.internal_key(&stack::key_file(&target.data_dir))?;
    broker_client(&url, key)
}

/// Read an ingest's streamed events (`stream.proto`): hand each progress
/// report to `on_progress` (done, total) and decode the terminal reply.
pub(crate) async fn follow<M: prost::Message + Default>(
    mut events: tonic::Streaming<ithaca_proto::mcp::v1::CallEvent>,
    mut on_progress: impl FnMut(u64, u64),
) -> Result<M, tonic::Status> {
    while let Some(event) = events.message().await? {
        match event.event {
            Some(Event::Progress(p)) => {
                on_progress(p.progress as u64, p.total.unwrap_or(0.0) as u64);
            }
            Some(Event::Reply(reply)) => {
                return M::decode(reply.as_slice())
                    .map_err(|e| tonic::Status::internal(format!("decoding the report: {e}")));
            }
            _ => {}
        }
    }
    Err(tonic::Status::internal(
        "the ingest ended without its report",
    ))
}
