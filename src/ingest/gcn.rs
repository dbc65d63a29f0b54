//! `ithaca ingest gcn <files|dirs>`: send GCN circulars and notices, and
//! gravitational-wave multi-order sky maps (FITS), to the broker's GCN
//! service, which reads them (its parsers are the broker's own), groups
//! them into events and stores each file in one transaction.
//!
//! Like `ithaca ingest ztf`: progress on stderr, a file the broker refuses is
//! named and skipped while the others land, the command then exits non-zero
//! saying which were skipped, and re-ingesting a file changes nothing.

use super::{FileUpload, Target, Upload};
use crate::broker_client::{MAX_MESSAGE, Signed};
use ithaca_kit::config::CommonArgs;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::gcn_service_client::GcnServiceClient;
use ithaca_proto::mcp::v1::CallEvent;
use std::path::{Path, PathBuf};

/// The broker's GCN ingest, signed as the system.
struct Gcn(GcnServiceClient<Signed>);

impl Upload for Gcn {
    type Chunk = pb::GcnFileChunk;
    type Report = pb::GcnIngestReport;

    async fn open(
        &mut self,
        chunks: impl tokio_stream::Stream<Item = pb::GcnFileChunk> + Send + 'static,
    ) -> Result<tonic::Streaming<CallEvent>, tonic::Status> {
        Ok(self.0.ingest_gcn_with_progress(chunks).await?.into_inner())
    }
}

impl FileUpload for Gcn {
    fn chunk(&self, source: Option<&str>, data: Vec<u8>) -> pb::GcnFileChunk {
        pb::GcnFileChunk {
            source: source.unwrap_or_default().to_owned(),
            data,
        }
    }
}

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
    super::files_under(paths, is_gcn_file)
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
}

pub async fn gcn(common: &CommonArgs, paths: Vec<PathBuf>, target: Target) -> anyhow::Result<()> {
    let files = gcn_files(&paths)?;
    if files.is_empty() {
        anyhow::bail!(
            "no .json, .jsonl, .xml or .fits files under {}",
            super::shown(&paths)
        );
    }
    let mut gcn = Gcn(GcnServiceClient::new(super::channel(common, &target)?)
        .max_encoding_message_size(MAX_MESSAGE));
    let mut t = Totals::default();
    let skipped = super::each_file(&mut gcn, &files, "packets", |r| {
        t.items += i64::from(r.items);
        t.stored += i64::from(r.stored);
        t.updated += i64::from(r.updated);
        t.unattached += i64::from(r.unattached);
        t.events_created += r.events_created.len();
        if r.already_present {
            t.files_unchanged += 1;
        }
    })
    .await?;
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
        skipped.len()
    );
    super::none_skipped(&skipped)
}
