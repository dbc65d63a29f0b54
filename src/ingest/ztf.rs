//! `ithaca ingest ztf <files|dirs>`: send alert containers to the broker,
//! which decodes and stores them (the Avro reader is the broker's own).
//!
//! Each alert file is one gRPC stream and one transaction: a malformed or
//! truncated file is reported by name and skipped, the others still land,
//! and the command then exits non-zero saying how many were skipped.
//! Re-ingesting a file changes nothing.

use super::{FileUpload, Target, Upload};
use crate::broker_client::{MAX_MESSAGE, Signed};
use ithaca_kit::config::CommonArgs;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::alert_service_client::AlertServiceClient;
use ithaca_proto::mcp::v1::CallEvent;
use std::path::PathBuf;

/// The broker's alert ingest, into one broker's archive, signed as the
/// system.
struct Alerts {
    service: AlertServiceClient<Signed>,
    broker_id: String,
}

impl Upload for Alerts {
    type Chunk = pb::AlertFileChunk;
    type Report = pb::AlertIngestReport;

    async fn open(
        &mut self,
        chunks: impl tokio_stream::Stream<Item = pb::AlertFileChunk> + Send + 'static,
    ) -> Result<tonic::Streaming<CallEvent>, tonic::Status> {
        Ok(self
            .service
            .ingest_alerts_with_progress(chunks)
            .await?
            .into_inner())
    }
}

impl FileUpload for Alerts {
    fn chunk(&self, source: Option<&str>, data: Vec<u8>) -> pb::AlertFileChunk {
        pb::AlertFileChunk {
            broker_id: source.map_or_else(String::new, |_| self.broker_id.clone()),
            source: source.unwrap_or_default().to_owned(),
            data,
        }
    }
}

/// Every `.avro` file under `paths` (files as given, folders walked), sorted
/// within each folder.
pub fn avro_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    super::files_under(paths, |p| p.extension().is_some_and(|x| x == "avro"))
}

pub async fn ztf(
    common: &CommonArgs,
    paths: Vec<PathBuf>,
    broker_id: String,
    target: Target,
) -> anyhow::Result<()> {
    let files = avro_files(&paths)?;
    if files.is_empty() {
        anyhow::bail!("no .avro files under {}", super::shown(&paths));
    }
    let mut alerts = Alerts {
        service: AlertServiceClient::new(super::channel(common, &target)?)
            .max_encoding_message_size(MAX_MESSAGE),
        broker_id,
    };
    let (mut read, mut stored, mut unchanged) = (0i64, 0i64, 0usize);
    let skipped = super::each_file(&mut alerts, &files, "packets", |report| {
        read += i64::from(report.alerts);
        stored += i64::from(report.stored);
        if report.already_present {
            unchanged += 1;
        }
    })
    .await?;
    println!(
        "{} files: {read} alerts read, {stored} newly stored, {unchanged} files already ingested, {} skipped",
        files.len(),
        skipped.len()
    );
    super::none_skipped(&skipped)
}
