//! Alert ingest: an Avro object container decoded with the writer schema it
//! carries, stored once (a file seen before changes nothing), and handed to
//! the ingest hook (the live filters) once committed.
use super::avro::{self, DecodedFile};
use super::cuts::Cuts;
use super::schema::{self};
use super::service::{ARCHIVE_BROKER, AlertService, FileWatch, StoredBatch, require_admin};
use super::store::{AlertRow, FileRecord, NewAlert, SchemaRow};
use crate::progress::{Progress, report};
use crate::sky;
use apache_avro::Schema;
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// What an ingest of one file did.
#[derive(Clone, Debug)]
pub struct IngestReport {
    pub broker_id: String,
    pub source: String,
    pub checksum: String,
    pub alerts: i64,
    pub stored: i64,
    pub already_present: bool,
    pub candids: Vec<i64>,
    pub object_ids: Vec<String>,
    pub version: String,
}

/// A decoded file on its way to the store, with the hook's watcher of its
/// decode (if any), which is told what was newly stored.
pub(super) struct DecodedIngest<'a> {
    pub broker_id: &'a str,
    pub source: &'a str,
    pub checksum: &'a str,
    pub decoded: DecodedFile,
    pub watch: Option<Box<dyn FileWatch>>,
}

impl AlertService {
    /// Ingest one Avro container into `broker_id`'s archive. Every alert is
    /// decoded before any is stored: a bad file stores nothing and is named
    /// in the error. Re-ingesting a file changes nothing.
    pub async fn ingest_file(
        &self,
        caller: &Principal,
        broker_id: &str,
        source: &str,
        bytes: Vec<u8>,
    ) -> Result<IngestReport, ServiceError> {
        self.ingest_file_reporting(caller, broker_id, source, bytes, None)
            .await
    }

    /// [`Self::ingest_file`], reporting alerts written of total to
    /// `progress` once the file is decoded (every insert batch).
    pub async fn ingest_file_reporting(
        &self,
        caller: &Principal,
        broker_id: &str,
        source: &str,
        bytes: Vec<u8>,
        progress: Option<&Progress>,
    ) -> Result<IngestReport, ServiceError> {
        require_admin(caller, "ingest alerts")?;
        let broker_id = if broker_id.trim().is_empty() {
            ARCHIVE_BROKER
        } else {
            broker_id.trim()
        };
        if self.store.broker(broker_id).await?.is_none() {
            return Err(
                ServiceError::not_found(format!("broker_id: no broker {broker_id:?}"))
                    .with_domain(DomainCode::UnknownBroker),
            );
        }
        let source = if source.trim().is_empty() {
            "alerts.avro"
        } else {
            source.trim()
        }
        .to_owned();
        let checksum = hex::encode(Sha256::digest(&bytes));
        let already_present = self.store.file(broker_id, &checksum).await?.is_some();
        // A file seen before stores nothing, so the hook has nothing to
        // watch; otherwise it may watch the decode (the filters evaluate
        // each alert on the value decoded here, never decoding it again).
        let watch = match self.ingest_hook.get() {
            Some(hook) if !already_present => hook.watch(broker_id).await,
            _ => None,
        };
        // Decoding is CPU work; keep it off the async workers, on a thread
        // whose stack fits the deepest schema the limits accept.
        let (decoded, watch) = match avro::decode_watched_on_thread(bytes, watch).await {
            Ok(decoded) => decoded,
            Err(e @ avro::DecodeError::Thread(_)) => return Err(ServiceError::internal(&e)),
            Err(e) => {
                return Err(ServiceError::invalid(format!("{source}: {e}"))
                    .with_domain(DomainCode::BadAlertFile));
            }
        };
        let candids: Vec<i64> = decoded.alerts.iter().map(|a| a.candid).collect();
        let object_ids: Vec<String> = decoded.alerts.iter().map(|a| a.object_id.clone()).collect();
        let count = decoded.alerts.len() as i64;
        let version = decoded.version.clone();
        if already_present {
            report(progress, count as u64, count as u64);
            return Ok(IngestReport {
                broker_id: broker_id.to_owned(),
                source,
                checksum,
                alerts: count,
                stored: 0,
                already_present: true,
                candids,
                object_ids,
                version,
            });
        }
        let file = DecodedIngest {
            broker_id,
            source: &source,
            checksum: &checksum,
            decoded,
            watch,
        };
        let stored = self.store_reporting(file, progress).await?;
        tracing::info!(%broker_id, %source, alerts = count, stored, "alerts ingested");
        Ok(IngestReport {
            broker_id: broker_id.to_owned(),
            source,
            checksum,
            alerts: count,
            stored,
            already_present: false,
            candids,
            object_ids,
            version,
        })
    }

    /// Store a decoded file (the bench calls this directly to measure the
    /// store without the network).
    pub async fn store_decoded(
        &self,
        broker_id: &str,
        source: &str,
        checksum: &str,
        decoded: DecodedFile,
    ) -> Result<i64, ServiceError> {
        let file = DecodedIngest {
            broker_id,
            source,
            checksum,
            decoded,
            watch: None,
        };
        self.store_reporting(file, None).await
    }

    pub(super) async fn store_reporting(
        &self,
        file: DecodedIngest<'_>,
        progress: Option<&Progress>,
    ) -> Result<i64, ServiceError> {
        let DecodedIngest {
            broker_id,
            source,
            checksum,
            decoded,
            watch,
        } = file;
        let now = clock::now_ms();
        let paths = schema::flatten(&decoded.schema, &[]);
        let schema_row = SchemaRow {
            schema_id: decoded.schema_id.clone(),
            version: decoded.version.clone(),
            schema_json: decoded.schema.canonical_form(),
            paths: serde_json::to_string(&paths).map_err(|e| ServiceError::internal(&e))?,
            first_seen_ms: now,
        };
        let mut alerts = Vec::with_capacity(decoded.alerts.len());
        for a in decoded.alerts {
            alerts.push(NewAlert {
                row: AlertRow {
                    broker_id: broker_id.to_owned(),
                    candid: a.candid,
                    object_id: a.object_id,
                    jd: a.jd,
                    fid: a.fid,
                    ra: a.ra,
                    dec: a.dec,
                    hpx: sky::hpx(a.ra, a.dec),
                    magpsf: a.magpsf,
                    schemavsn: a.schemavsn,
                    schema_id: decoded.schema_id.clone(),
                    prv_detections: a.prv_detections,
                    prv_upper_limits: a.prv_upper_limits,
                    fp_hists: a.fp_hists,
                    candidate: a.candidate.to_string(),
                    ingested_at_ms: now,
                },
                packet: a.datum,
                cuts: Cuts::of(&a.candidate),
            });
        }
        let writer = self
            .schemas
            .lock()
            .map_err(|_| ServiceError::new(ithaca_kit::error::Code::Internal, "internal error"))?
            .entry(decoded.schema_id.clone())
            .or_insert_with(|| Arc::new(decoded.schema))
            .clone();
        let file = FileRecord {
            broker_id,
            checksum,
            source,
            alerts: alerts.len() as i64,
            ingested_at_ms: now,
        };
        let stored = self
            .store
            .ingest_file(file, &schema_row, &alerts, progress)
            .await?;
        let count = stored.len() as i64;
        let hook = self.ingest_hook.get();
        if (hook.is_none() && watch.is_none()) || stored.is_empty() {
            // Nothing new: a watcher is dropped with what it kept.
            return Ok(count);
        }
        let new: std::collections::HashSet<i64> = stored.into_iter().collect();
        alerts.retain(|a| new.contains(&a.row.candid));
        let batch = StoredBatch {
            broker_id: broker_id.to_owned(),
            schema: writer,
            alerts,
        };
        match (watch, hook) {
            (Some(watch), _) => watch.stored(batch).await,
            (None, Some(hook)) => hook.stored(batch).await,
            (None, None) => {}
        }
        Ok(count)
    }

    /// The parsed writer schema `schema_id`.
    pub(super) async fn writer_schema(&self, schema_id: &str) -> Result<Arc<Schema>, ServiceError> {
        let cached = self
            .schemas
            .lock()
            .map_err(|_| ServiceError::new(ithaca_kit::error::Code::Internal, "internal error"))?
            .get(schema_id)
            .cloned();
        if let Some(s) = cached {
            return Ok(s);
        }
        let row = self.store.schema(schema_id).await?.ok_or_else(|| {
            ServiceError::new(
                ithaca_kit::error::Code::Internal,
                "internal error: a stored alert names an unknown schema",
            )
        })?;
        let parsed =
            Arc::new(Schema::parse_str(&row.schema_json).map_err(|e| ServiceError::internal(&e))?);
        if let Ok(mut cache) = self.schemas.lock() {
            cache.insert(schema_id.to_owned(), parsed.clone());
        }
        Ok(parsed)
    }

    /// A stored packet as JSON.
    pub(super) async fn packet_json(
        &self,
        schema_id: &str,
        datum: &[u8],
    ) -> Result<Json, ServiceError> {
        let schema = self.writer_schema(schema_id).await?;
        avro::decode_packet(&schema, datum).map_err(|e| {
            tracing::error!(error = %e, "stored packet does not decode");
            ServiceError::new(
                ithaca_kit::error::Code::Internal,
                "internal error: a stored packet does not decode",
            )
        })
    }
}
