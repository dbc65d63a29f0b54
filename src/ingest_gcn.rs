//! `ithaca ingest gcn <files|dirs>`: send GCN circulars and notices, and
//! gravitational-wave multi-order sky maps (FITS), to the broker's GCN
//! service, which reads them (its parsers are the broker's own), groups
//! them into events and stores each file in one transaction.
//!
//! Like `ithaca ingest ztf`: progress on stderr, a file the broker refuses is
//! named and skipped while the others land, the command then exits non-zero
//! saying which were skipped, and re-ingesting a file changes nothing.

use crate::ingest_astro::{Progress, Target, follow};
use crate::stack::{self, StackInfo};
use ithaca_kit::client::{self, Outbound};
use ithaca_kit::config::CommonArgs;
use ithaca_kit::principal::Principal;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::gcn_service_client::GcnServiceClient;
use std::path::{Path, PathBuf};

/// Bytes per streamed chunk.
const CHUNK_BYTES: usize = 1024 * 1024;

/// A GCN client signed as the system.
type Client = GcnServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Outbound>,
>;

/// Whether a file looks like GCN data by its name.
fn is_gcn_file(p: &Path) -> bool {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    [".json", ".jsonl", ".xml", ".fits", ".fits.gz", ".fit"]
        .iter()
        .any(|x| name.ends_with(x))
}

/// Every GCN file under `paths` (files as given, folders walked), sorted
/// within each folder.
pub fn gcn_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    crate::ingest_astro::files_under(paths, is_gcn_file)
}

fn connect(common: &CommonArgs, target: &Target) -> anyhow::Result<Client> {
    let url = target
        .broker_url
        .clone()
        .or(StackInfo::read(&target.data_dir).broker_url)
        .unwrap_or_else(|| "http://127.0.0.1:50054".to_owned());
    let key = common.internal_key(&stack::key_file(&target.data_dir))?;
    Ok(GcnServiceClient::with_interceptor(
        client::channel(&url)?,
        Outbound::new(key, Principal::system("")),
    )
    .max_encoding_message_size(32 * 1024 * 1024))
}

/// Stream one file to the broker's GCN ingest, handing each progress
/// report (packets done of total) to `on_progress`.
async fn send(
    gcn: &mut Client,
    source: &str,
    bytes: &[u8],
    on_progress: impl FnMut(u64, u64),
) -> Result<pb::GcnIngestReport, tonic::Status> {
    let mut chunks: Vec<pb::GcnFileChunk> = bytes
        .chunks(CHUNK_BYTES)
        .map(|c| pb::GcnFileChunk {
            source: String::new(),
            data: c.to_vec(),
        })
        .collect();
    if chunks.is_empty() {
        chunks.push(pb::GcnFileChunk::default());
    }
    chunks[0].source = source.to_owned();
    let events = gcn
        .ingest_gcn_with_progress(tokio_stream::iter(chunks))
        .await?
        .into_inner();
    follow(events, on_progress).await
}

/// What the files added up to.
#[derive(Default)]
struct Totals {
    items: i64,
    stored: i64,
    updated: i64,
    unattached: i64,
    events_created: usize,
    files_unchanged: usize,
    skipped: Vec<PathBuf>,
}

pub async fn gcn(common: &CommonArgs, paths: Vec<PathBuf>, target: Target) -> anyhow::Result<()> {
    let files = gcn_files(&paths)?;
    if files.is_empty() {
        anyhow::bail!(
            "no .json, .jsonl, .xml or .fits files under {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let mut gcn = connect(common, &target)?;
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
            progress.show(i, files.len(), &format!("{name}: {done}/{total} packets"));
        };
        match send(&mut gcn, &name, &bytes, shown).await {
            Ok(r) => {
                t.items += i64::from(r.items);
                t.stored += i64::from(r.stored);
                t.updated += i64::from(r.updated);
                t.unattached += i64::from(r.unattached);
                t.events_created += r.events_created.len();
                if r.already_present {
                    t.files_unchanged += 1;
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
    println!(
        "{} files: {} circulars and notices read, {} newly stored, {} updated, {} events created, \
         {} circulars naming no known event, {} files already ingested, {} skipped",
        files.len(),
        t.items,
        t.stored,
        t.updated,
        t.events_created,
        t.unattached,
        t.files_unchanged,
        t.skipped.len()
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
