//! `ithaca ingest catalog <csv>`: send a reference catalog (the Hipparcos-2
//! or OpenNGC CSV) to the broker, which reads and stores it (the CSV readers
//! are the broker's own) in one transaction. Re-ingesting it changes
//! nothing.

use super::{CHUNK_BYTES, FileUpload, Progress, Target, Upload};
use crate::broker_client::{MAX_MESSAGE, Signed};
use anyhow::Context;
use ithaca_kit::config::CommonArgs;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::catalog_service_client::CatalogServiceClient;
use ithaca_proto::mcp::v1::CallEvent;
use std::path::PathBuf;

/// The broker's catalog ingest, signed as the system.
struct Catalog(CatalogServiceClient<Signed>);

impl Upload for Catalog {
    type Chunk = pb::CatalogFileChunk;
    type Report = pb::CatalogIngestReport;

    async fn open(
        &mut self,
        chunks: impl tokio_stream::Stream<Item = pb::CatalogFileChunk> + Send + 'static,
    ) -> Result<tonic::Streaming<CallEvent>, tonic::Status> {
        Ok(self
            .0
            .ingest_catalog_with_progress(chunks)
            .await?
            .into_inner())
    }
}

impl FileUpload for Catalog {
    fn chunk(&self, source: Option<&str>, data: Vec<u8>) -> pb::CatalogFileChunk {
        pb::CatalogFileChunk {
            source: source.unwrap_or_default().to_owned(),
            data,
        }
    }
}

pub async fn catalog(common: &CommonArgs, file: PathBuf, target: Target) -> anyhow::Result<()> {
    let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let name = file.file_name().map_or_else(
        || "catalog.csv".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut catalog = Catalog(
        CatalogServiceClient::new(super::channel(common, &target)?)
            .max_encoding_message_size(MAX_MESSAGE),
    );
    let total = bytes.len();
    let chunks: Vec<pb::CatalogFileChunk> = bytes
        .chunks(CHUNK_BYTES)
        .enumerate()
        .map(|(i, c)| catalog.chunk((i == 0).then_some(name.as_str()), c.to_vec()))
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
    let report = super::upload(&mut catalog, stream, stored)
        .await
        .map_err(|s| anyhow::anyhow!("{}: {}", file.display(), s.message()))?;
    progress.finish();
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
