//! `ithaca ingest <kind>`: send files to the broker, which reads and stores
//! them (its parsers are the broker's own), showing progress on stderr.
//!
//! One module per kind (`bars`, `ztf`, `catalog`, `gcn`, `sec`); what they
//! share sits here: the command and its dispatch, the broker connection
//! ([`connect`]), the file walker ([`files_under`]), the progress printer
//! ([`Progress`]), and one upload loop: a kind says how to open its
//! streaming RPC and build a chunk ([`Upload`], [`FileUpload`]),
//! [`upload`] streams the chunks and follows the broker's progress events
//! to the report, and [`each_file`] sends many files one stream each,
//! naming and skipping those the broker refuses.

pub mod bars;
pub mod catalog;
pub mod gcn;
pub mod sec;
pub mod ztf;

pub use crate::broker_client::broker_client;
pub use bars::{DEMO_DATASET, DEMO_NAME, parse_bars, upload_bars};

use crate::broker_client::{self as clients, Client};
use crate::services::Service;
use crate::stack::{self, StackInfo};
use anyhow::Context;
use ithaca_kit::config::CommonArgs;
use ithaca_proto::mcp::v1::CallEvent;
use ithaca_proto::mcp::v1::call_event::Event;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Bytes per streamed chunk.
pub(crate) const CHUNK_BYTES: usize = 1024 * 1024;

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
        target: Target,
    },
    /// Ingest a reference catalog: the Hipparcos-2 or OpenNGC CSV.
    Catalog {
        /// The CSV file.
        file: PathBuf,
        #[command(flatten)]
        target: Target,
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
        target: Target,
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
        target: Target,
    },
}

pub async fn run(common: &CommonArgs, cmd: IngestCommand) -> anyhow::Result<()> {
    match cmd {
        IngestCommand::Bars {
            file,
            broker_url,
            data_dir,
        } => {
            let target = Target {
                broker_url,
                data_dir,
            };
            bars::bars(common, file, target).await
        }
        IngestCommand::Ztf {
            paths,
            broker,
            target,
        } => ztf::ztf(common, paths, broker, target).await,
        IngestCommand::Catalog { file, target } => catalog::catalog(common, file, target).await,
        IngestCommand::Gcn { paths, target } => gcn::gcn(common, paths, target).await,
        IngestCommand::Sec { paths, target } => sec::sec(common, paths, target).await,
    }
}

/// Where to send, shared by the commands.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The broker service URL (default: the local stack's, from stack.json).
    #[arg(long, env = "ITHACA_BROKER_URL")]
    pub broker_url: Option<String>,
    /// The local stack's data directory (for stack.json and internal.key).
    #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
}

/// A channel to the target's broker process signed as the system: the
/// URL given, else the local stack's, else the broker's default local URL.
pub(crate) fn channel(common: &CommonArgs, target: &Target) -> anyhow::Result<clients::Signed> {
    let url = target
        .broker_url
        .clone()
        .or(StackInfo::read(&target.data_dir).broker_url)
        .unwrap_or_else(|| Service::Broker.local_url());
    let key = common.internal_key(&stack::key_file(&target.data_dir))?;
    clients::signed(&url, key)
}

/// The target's broker service, signed as the system.
pub fn connect(common: &CommonArgs, target: &Target) -> anyhow::Result<Client> {
    Ok(clients::broker(channel(common, target)?))
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

/// `paths` for a message: shown, comma-separated.
pub(crate) fn shown(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
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

    /// Ends a line redrawn in place.
    pub(crate) fn finish(&self) {
        if self.terminal {
            eprintln!();
        }
    }
}

/// One kind of ingest: a client-streaming RPC of `Chunk`s that answers
/// with progress events and then a `Report` (`stream.proto`).
pub(crate) trait Upload {
    type Chunk: Send + 'static;
    type Report: prost::Message + Default;
    /// What the reply is called in an error about it.
    const REPLY: &'static str = "report";

    /// Start the RPC with the chunks to send.
    async fn open(
        &mut self,
        chunks: impl tokio_stream::Stream<Item = Self::Chunk> + Send + 'static,
    ) -> Result<tonic::Streaming<CallEvent>, tonic::Status>;
}

/// An ingest of whole files cut into byte chunks, the first one naming the
/// file.
pub(crate) trait FileUpload: Upload {
    /// A chunk of `data`; `source` is the file's name on the first one.
    fn chunk(&self, source: Option<&str>, data: Vec<u8>) -> Self::Chunk;
}

/// Stream `chunks` to the kind's RPC, hand each progress report (done,
/// total) to `on_progress`, and decode the terminal reply.
pub(crate) async fn upload<U: Upload>(
    kind: &mut U,
    chunks: impl tokio_stream::Stream<Item = U::Chunk> + Send + 'static,
    mut on_progress: impl FnMut(u64, u64),
) -> Result<U::Report, tonic::Status> {
    let mut events = kind.open(chunks).await?;
    while let Some(event) = events.message().await? {
        match event.event {
            Some(Event::Progress(p)) => {
                on_progress(p.progress as u64, p.total.unwrap_or(0.0) as u64);
            }
            Some(Event::Reply(reply)) => {
                return prost::Message::decode(reply.as_slice()).map_err(|e| {
                    tonic::Status::internal(format!("decoding the {}: {e}", U::REPLY))
                });
            }
            _ => {}
        }
    }
    Err(tonic::Status::internal(format!(
        "the ingest ended without its {}",
        U::REPLY
    )))
}

/// Send one file's `bytes` as `source` (at least one chunk, even when
/// empty), following its progress.
pub(crate) async fn upload_file<U: FileUpload>(
    kind: &mut U,
    source: &str,
    bytes: &[u8],
    on_progress: impl FnMut(u64, u64),
) -> Result<U::Report, tonic::Status> {
    let mut parts = bytes.chunks(CHUNK_BYTES);
    let first = kind.chunk(Some(source), parts.next().unwrap_or_default().to_vec());
    let chunks: Vec<U::Chunk> = std::iter::once(first)
        .chain(parts.map(|c| kind.chunk(None, c.to_vec())))
        .collect();
    upload(kind, tokio_stream::iter(chunks), on_progress).await
}

/// Send `files` one stream each, a progress bar over the files with the
/// broker's count of `unit` within each, and hand each report to `add`. A
/// file that cannot be read or that the broker refuses as invalid is named
/// and skipped; any other error stops. Returns the files skipped.
pub(crate) async fn each_file<U: FileUpload>(
    kind: &mut U,
    files: &[PathBuf],
    unit: &str,
    mut add: impl FnMut(U::Report),
) -> anyhow::Result<Vec<PathBuf>> {
    let progress = Progress::stderr();
    let mut skipped = Vec::new();
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
            progress.show(i, files.len(), &format!("{name}: {done}/{total} {unit}"));
        };
        match upload_file(kind, &name, &bytes, shown).await {
            Ok(report) => add(report),
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
    progress.finish();
    Ok(skipped)
}

/// The command's end once its summary is printed: an error naming the
/// files skipped, if any were.
pub(crate) fn none_skipped(skipped: &[PathBuf]) -> anyhow::Result<()> {
    if !skipped.is_empty() {
        anyhow::bail!("{} file(s) skipped: {}", skipped.len(), shown(skipped));
    }
    Ok(())
}
