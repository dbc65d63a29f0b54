//! The alert domain: brokers and their operations, ingest, alert queries,
//! light curves and the alert schema. Every refusal names the field at
//! fault; nothing here panics on a caller's input.

use super::avro::{self, DecodedFile};
use super::lightcurve::{self, Point};
use super::schema::{self, FlatField};
use super::store::{AlertRow, AlertStore, BrokerRow, BrokerStats, FileRecord, NewAlert, SchemaRow};
use crate::accounts::vault::Vault;
use crate::progress::{Progress, report};
use crate::sky;
use apache_avro::Schema;
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::{Actor, Principal};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// The broker every deployment has: its own archive (created by migration).
pub const ARCHIVE_BROKER: &str = "ztf-archive";
/// Operations a broker can list.
pub const OPERATIONS: [&str; 3] = ["alerts", "photometry", "crossmatch"];
/// Largest cone radius, arcsec.
pub const MAX_RADIUS_ARCSEC: f64 = 3600.0;
/// Default and largest number of alerts per answer (trimmed, full).
pub const DEFAULT_LIMIT: i64 = 50;
pub const MAX_LIMIT: i64 = 500;
pub const DEFAULT_FULL_LIMIT: i64 = 5;
pub const MAX_FULL_LIMIT: i64 = 20;
/// Most index rows a cone search reads before it stops and says so.
pub const CONE_SCAN_CAP: i64 = 100_000;
/// Most alerts a light curve is built from.
pub const MAX_LIGHT_CURVE_ALERTS: usize = 5_000;
/// Largest file accepted by an ingest.
pub const MAX_FILE_BYTES: usize = 512 * 1024 * 1024;

/// Where the schema files are, for `get_alert_schema` before anything is
/// ingested.
#[derive(Clone, Debug, Default)]
pub struct AlertsConfig {
    /// A folder of `v<version>/` folders of `.avsc` files, or one such folder.
    pub schema_dir: Option<PathBuf>,
}

impl AlertsConfig {
    /// `ITHACA_ZTF_SCHEMA_DIR`, else `../shared/data/ztf/schema` when it
    /// exists (a checkout with the shared data beside it).
    pub fn from_env() -> Self {
        let dir = std::env::var_os("ITHACA_ZTF_SCHEMA_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                let default = PathBuf::from("../shared/data/ztf/schema");
                default.is_dir().then_some(default)
            });
        AlertsConfig { schema_dir: dir }
    }
}

/// Brokers, the alert archive and the alert schema.
#[derive(Clone)]
pub struct AlertService {
    store: AlertStore,
    vault: Vault,
    config: AlertsConfig,
    /// Parsed writer schemas by id: parsing one takes longer than decoding
    /// a packet with it.
    schemas: Arc<Mutex<HashMap<String, Arc<Schema>>>>,
    /// Told about newly stored alerts (the broker's filters); set once when
    /// the broker is wired, shared by every clone.
    ingest_hook: Arc<OnceLock<Arc<dyn IngestHook>>>,
}

/// Told about the alerts an ingest newly stored, once they are committed:
/// the seam through which active filter versions see every new alert.
#[tonic::async_trait]
pub trait IngestHook: Send + Sync {
    /// `batch` holds only alerts that were not stored before. A failure is
    /// the hook's to report: the alerts are stored either way.
    async fn stored(&self, batch: StoredBatch);
}

/// The alerts one ingest newly stored, with their writer schema.
pub struct StoredBatch {
    pub broker_id: String,
    pub schema: Arc<Schema>,
    pub alerts: Vec<NewAlert>,
}

impl std::fmt::Debug for AlertService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertService")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A new broker.
#[derive(Clone, Debug, Default)]
pub struct NewBroker {
    pub broker_id: String,
    pub name: String,
    pub survey: String,
    pub operations: Vec<String>,
    pub altdata: Option<Json>,
    pub credential: String,
}

/// A broker as anyone may see it.
#[derive(Clone, Debug)]
pub struct BrokerView {
    pub row: BrokerRow,
    pub credential_configured: bool,
    pub stats: BrokerStats,
}

impl BrokerView {
    pub fn operations(&self) -> Vec<String> {
        self.row
            .operations
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }
}

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

/// A `get_broker_alerts` request.
#[derive(Clone, Debug, Default)]
pub struct AlertQuery {
    pub broker_id: String,
    pub object_id: Option<String>,
    pub ra: Option<f64>,
    pub dec: Option<f64>,
    pub radius_arcsec: Option<f64>,
    pub jd_start: Option<f64>,
    pub jd_end: Option<f64>,
    pub candid: Option<String>,
    pub full: bool,
    pub limit: Option<i32>,
}

/// One alert of an answer.
#[derive(Clone, Debug)]
pub struct FoundAlert {
    pub row: AlertRow,
    pub candidate: Json,
    pub separation_arcsec: Option<f64>,
    /// The whole packet (full answers).
    pub packet: Option<Json>,
}

/// A `get_broker_alerts` answer.
#[derive(Clone, Debug)]
pub struct AlertAnswer {
    pub broker_id: String,
    pub query: String,
    pub alerts: Vec<FoundAlert>,
    pub matched: i64,
    pub truncated: bool,
    pub scanned: Option<i64>,
    pub suggestion: Option<String>,
}

/// A light curve.
#[derive(Clone, Debug)]
pub struct LightCurve {
    pub broker_id: String,
    pub object_id: String,
    pub points: Vec<Point>,
    pub alerts: i64,
    pub first_detection_jd: Option<f64>,
    /// The zero of the time axis: the first detection, else the first point.
    pub zero_jd: f64,
    /// The survey's own first detection of the position (`jdstarthist`)
    /// and its count of detections (`ndethist`), from the newest alert.
    pub survey_first_jd: Option<f64>,
    pub survey_detections: Option<i64>,
}

/// The alert schema as an answer.
#[derive(Clone, Debug)]
pub struct SchemaAnswer {
    pub source: &'static str,
    pub versions: Vec<String>,
    pub paths: Vec<(FlatField, Vec<String>)>,
    pub matched: i64,
    pub truncated: bool,
    /// The producer asked for, when not the survey itself.
    pub producer: Option<String>,
    /// Producers whose added fields are kept apart from the survey's.
    pub producers: Vec<String>,
}

impl AlertService {
    pub fn new(store: AlertStore, vault: Vault, config: AlertsConfig) -> Self {
        // Before any packet is decoded: apache_avro fixes its allocation
        // limit the first time it decodes anything.
        super::container::limit_allocations();
        AlertService {
            store,
            vault,
            config,
            schemas: Arc::new(Mutex::new(HashMap::new())),
            ingest_hook: Arc::new(OnceLock::new()),
        }
    }

    /// Run `hook` on the alerts every later ingest newly stores (once; a
    /// second hook is refused and returned).
    pub fn set_ingest_hook(&self, hook: Arc<dyn IngestHook>) -> Result<(), Arc<dyn IngestHook>> {
        self.ingest_hook.set(hook)
    }

    pub fn store(&self) -> &AlertStore {
        &self.store
    }

    // ---- brokers ------------------------------------------------------------

    /// Configure a broker; its altdata and credential are sealed. Administrators only.
    pub async fn add_broker(
        &self,
        caller: &Principal,
        b: NewBroker,
    ) -> Result<BrokerView, ServiceError> {
        require_admin(caller, "configure brokers")?;
        let id = b.broker_id.trim().to_ascii_lowercase();
        if id.is_empty()
            || id.len() > 32
            || !id
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        {
            return Err(ServiceError::invalid(
                "broker_id: 1-32 characters of a-z, 0-9, _ and -",
            ));
        }
        let name = b.name.trim();
        if name.is_empty() || name.chars().count() > 100 {
            return Err(ServiceError::invalid("name: 1 to 100 characters"));
        }
        let mut operations = Vec::new();
        for op in &b.operations {
            let op = op.trim().to_ascii_lowercase();
            if !OPERATIONS.contains(&op.as_str()) {
                return Err(ServiceError::invalid(format!(
                    "operations: {op:?} is not one of {}",
                    OPERATIONS.join(", ")
                )));
            }
            if !operations.contains(&op) {
                operations.push(op);
            }
        }
        if b.credential.len() > 8192 {
            return Err(ServiceError::invalid("credential: at most 8192 bytes"));
        }
        let altdata = match &b.altdata {
            None | Some(Json::Null) => None,
            Some(v @ Json::Object(_)) => Some(self.vault.seal(&v.to_string())),
            Some(_) => return Err(ServiceError::invalid("altdata: must be an object")),
        };
        let survey = if b.survey.trim().is_empty() {
            "ZTF"
        } else {
            b.survey.trim()
        };
        let row = BrokerRow {
            broker_id: id.clone(),
            name: name.to_owned(),
            survey: survey.to_owned(),
            operations: operations.join(" "),
            altdata,
            credential: (!b.credential.is_empty()).then(|| self.vault.seal(&b.credential)),
            created_at_ms: clock::now_ms(),
        };
        if self.store.insert_broker(&row).await? == 0 {
            return Err(ServiceError::new(
                ithaca_kit::error::Code::AlreadyExists,
                format!("broker_id: a broker {id:?} exists already"),
            ));
        }
        // The id and operations only: never the altdata or credential.
        tracing::info!(broker_id = %row.broker_id, operations = %row.operations, "broker configured");
        Ok(self.view(row, BrokerStats::default()))
    }

    fn view(&self, row: BrokerRow, stats: BrokerStats) -> BrokerView {
        let credential_configured = row
            .credential
            .as_deref()
            .is_some_and(|c| self.vault.open(c).is_ok());
        BrokerView {
            row,
            credential_configured,
            stats,
        }
    }

    /// Every broker with what it holds.
    pub async fn brokers(&self, caller: &Principal) -> Result<Vec<BrokerView>, ServiceError> {
        caller.tenant()?;
        let stats: HashMap<String, BrokerStats> = self
            .store
            .broker_stats()
            .await?
            .into_iter()
            .map(|s| (s.broker_id.clone(), s))
            .collect();
        Ok(self
            .store
            .brokers()
            .await?
            .into_iter()
            .map(|row| {
                let s = stats.get(&row.broker_id).cloned().unwrap_or_default();
                self.view(row, s)
            })
            .collect())
    }

    /// The broker `broker_id` if it answers `operation`; a refusal naming the
    /// field otherwise.
    pub async fn broker_for(
        &self,
        broker_id: &str,
        operation: &str,
    ) -> Result<BrokerRow, ServiceError> {
        let id = broker_id.trim();
        if id.is_empty() {
            return Err(ServiceError::invalid(
                "broker_id: required; list_brokers gives the brokers and what each answers",
            ));
        }
        let Some(row) = self.store.broker(id).await? else {
            let known: Vec<String> = self
                .store
                .brokers()
                .await?
                .into_iter()
                .map(|b| b.broker_id)
                .collect();
            return Err(ServiceError::not_found(format!(
                "broker_id: no broker {id:?}; brokers: {}",
                known.join(", ")
            ))
            .with_domain(DomainCode::UnknownBroker));
        };
        if !row.operations.split_whitespace().any(|op| op == operation) {
            return Err(ServiceError::invalid(format!(
                "broker_id: broker {id:?} does not answer the operation {operation:?}; it lists: {}",
                if row.operations.is_empty() { "nothing" } else { &row.operations }
            ))
            .with_domain(DomainCode::OperationNotSupported));
        }
        Ok(row)
    }

    // ---- ingest -------------------------------------------------------------

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
        // Decoding is CPU work; keep it off the async workers, on a thread
        // whose stack fits the deepest schema the limits accept.
        let decoded = match avro::decode_file_on_thread(bytes).await {
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
        if self.store.file(broker_id, &checksum).await?.is_some() {
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
        let stored = self
            .store_reporting(broker_id, &source, &checksum, decoded, progress)
            .await?;
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
        self.store_reporting(broker_id, source, checksum, decoded, None)
            .await
    }

    async fn store_reporting(
        &self,
        broker_id: &str,
        source: &str,
        checksum: &str,
        decoded: DecodedFile,
        progress: Option<&Progress>,
    ) -> Result<i64, ServiceError> {
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
        if let Some(hook) = self.ingest_hook.get()
            && !stored.is_empty()
        {
            let new: std::collections::HashSet<i64> = stored.into_iter().collect();
            alerts.retain(|a| new.contains(&a.row.candid));
            hook.stored(StoredBatch {
                broker_id: broker_id.to_owned(),
                schema: writer,
                alerts,
            })
            .await;
        }
        Ok(count)
    }

    /// The parsed writer schema `schema_id`.
    async fn writer_schema(&self, schema_id: &str) -> Result<Arc<Schema>, ServiceError> {
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
    async fn packet_json(&self, schema_id: &str, datum: &[u8]) -> Result<Json, ServiceError> {
        let schema = self.writer_schema(schema_id).await?;
        avro::decode_packet(&schema, datum).map_err(|e| {
            tracing::error!(error = %e, "stored packet does not decode");
            ServiceError::new(
                ithaca_kit::error::Code::Internal,
                "internal error: a stored packet does not decode",
            )
        })
    }

    // ---- alerts -------------------------------------------------------------

    /// `get_broker_alerts`.
    pub async fn alerts(
        &self,
        caller: &Principal,
        q: AlertQuery,
    ) -> Result<AlertAnswer, ServiceError> {
        caller.tenant()?;
        let broker = self.broker_for(&q.broker_id, "alerts").await?;
        let (default_limit, max_limit) = if q.full {
            (DEFAULT_FULL_LIMIT, MAX_FULL_LIMIT)
        } else {
            (DEFAULT_LIMIT, MAX_LIMIT)
        };
        let limit = match q.limit {
            None => default_limit,
            Some(n) if n < 1 => {
                return Err(ServiceError::invalid(format!(
                    "limit: must be at least 1 (got {n})"
                )));
            }
            Some(n) if i64::from(n) > max_limit => {
                return Err(ServiceError::invalid(format!(
                    "limit: at most {max_limit}{} (got {n})",
                    if q.full { " with full=true" } else { "" }
                )));
            }
            Some(n) => i64::from(n),
        };
        let jd = time_window(q.jd_start, q.jd_end)?;
        let cone = q.ra.is_some() || q.dec.is_some() || q.radius_arcsec.is_some();
        let modes = [q.object_id.is_some(), cone, q.candid.is_some()]
            .iter()
            .filter(|m| **m)
            .count();
        if modes != 1 {
            return Err(ServiceError::invalid(
                "objectId: give exactly one of objectId, a cone (ra, dec, radius_arcsec) or candid",
            ));
        }
        let id = broker.broker_id.as_str();
        let mut answer = if let Some(candid) = &q.candid {
            let candid = parse_candid(candid)?;
            let Some(row) = self.store.alert(id, candid).await? else {
                return Err(ServiceError::not_found(format!(
                    "candid: no alert {candid} in broker {id:?}"
                ))
                .with_domain(DomainCode::UnknownAlert));
            };
            AlertAnswer {
                broker_id: id.to_owned(),
                query: format!("candid {candid}"),
                alerts: vec![found(row, None)?],
                matched: 1,
                truncated: false,
                scanned: None,
                suggestion: None,
            }
        } else if let Some(object_id) = &q.object_id {
            let object_id = parse_object_id(object_id)?;
            let window = jd.unwrap_or((f64::MIN, f64::MAX));
            let matched = self.store.count_of_object(id, &object_id, window).await?;
            if matched == 0 && self.store.latest_of_object(id, &object_id).await?.is_none() {
                return Err(unknown_object(&object_id, id));
            }
            let rows = self
                .store
                .alerts_of_object(id, &object_id, window, limit)
                .await?;
            let alerts = rows
                .into_iter()
                .map(|r| found(r, None))
                .collect::<Result<Vec<_>, _>>()?;
            AlertAnswer {
                broker_id: id.to_owned(),
                query: format!("objectId {object_id}{}", window_text(jd)),
                truncated: matched > alerts.len() as i64,
                suggestion: (matched > alerts.len() as i64).then(|| {
                    format!("{matched} alerts matched and {} were returned: narrow jd_start/jd_end or raise limit", alerts.len())
                }),
                alerts,
                matched,
                scanned: None,
            }
        } else {
            self.cone(id, &q, jd, limit).await?
        };
        if q.full {
            let candids: Vec<i64> = answer.alerts.iter().map(|a| a.row.candid).collect();
            let packets = self.store.packets(id, &candids).await?;
            for a in &mut answer.alerts {
                if let Some(p) = packets.iter().find(|p| p.candid == a.row.candid) {
                    a.packet = Some(self.packet_json(&p.schema_id, &p.packet).await?);
                }
            }
        }
        Ok(answer)
    }

    async fn cone(
        &self,
        broker_id: &str,
        q: &AlertQuery,
        jd: Option<(f64, f64)>,
        limit: i64,
    ) -> Result<AlertAnswer, ServiceError> {
        let (Some(ra), Some(dec)) = (q.ra, q.dec) else {
            let missing = if q.ra.is_none() { "ra" } else { "dec" };
            return Err(ServiceError::invalid(format!(
                "{missing}: a cone search needs ra, dec and radius_arcsec"
            )));
        };
        let radius = check_radius(q.radius_arcsec)?;
        sky::check_position(ra, dec).map_err(ServiceError::invalid)?;
        let window = jd.unwrap_or((f64::MIN, f64::MAX));
        let ranges = sky::cone_ranges(ra, dec, radius);
        let candidates = self
            .store
            .cone_candidates(broker_id, &ranges, window, CONE_SCAN_CAP + 1)
            .await?;
        let scan_capped = candidates.len() as i64 > CONE_SCAN_CAP;
        let scanned = candidates.len().min(CONE_SCAN_CAP as usize) as i64;
        let mut inside: Vec<(i64, f64, f64)> = candidates
            .iter()
            .take(CONE_SCAN_CAP as usize)
            .filter_map(|c| {
                let sep = sky::separation_arcsec(ra, dec, c.ra, c.dec);
                (sep <= radius).then_some((c.candid, c.jd, sep))
            })
            .collect();
        inside.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let matched = inside.len() as i64;
        let keep: Vec<(i64, f64, f64)> = inside.into_iter().take(limit as usize).collect();
        let candids: Vec<i64> = keep.iter().map(|k| k.0).collect();
        let rows = self.store.alerts_by_candid(broker_id, &candids).await?;
        let mut alerts = Vec::with_capacity(rows.len());
        for row in rows {
            let sep = keep.iter().find(|k| k.0 == row.candid).map(|k| k.2);
            alerts.push(found(row, sep)?);
        }
        let truncated = matched > alerts.len() as i64 || scan_capped;
        let mut advice = Vec::new();
        if jd.is_none() {
            advice.push(format!(
                "no jd_start/jd_end: this is every alert ever recorded within {radius}\" ({scanned} alerts scanned); \
                 bound the search in time, for example jd_start={:.1} jd_end={:.1} for a 30-day window (convert_time turns dates into JD)",
                alerts.last().map_or(crate::astrotime::now_jd(), |a| a.row.jd) - 30.0,
                alerts.last().map_or(crate::astrotime::now_jd(), |a| a.row.jd),
            ));
        }
        if scan_capped {
            advice.push(format!("the index scan stopped at {CONE_SCAN_CAP} alerts: narrow the radius or the time window"));
        } else if truncated {
            advice.push(format!(
                "{matched} alerts matched and {} were returned: narrow the window or raise limit",
                alerts.len()
            ));
        }
        Ok(AlertAnswer {
            broker_id: broker_id.to_owned(),
            query: format!(
                "cone ra={ra} dec={dec} radius={radius}\"{}",
                window_text(jd)
            ),
            alerts,
            matched,
            truncated,
            scanned: Some(scanned),
            suggestion: (!advice.is_empty()).then(|| advice.join("; ")),
        })
    }

    /// One alert with its whole packet (the alert resource).
    pub async fn packet(
        &self,
        caller: &Principal,
        broker_id: &str,
        candid: &str,
    ) -> Result<FoundAlert, ServiceError> {
        caller.tenant()?;
        let broker = self.broker_for(broker_id, "alerts").await?;
        let candid = parse_candid(candid)?;
        let Some(row) = self.store.alert(&broker.broker_id, candid).await? else {
            return Err(ServiceError::not_found(format!(
                "candid: no alert {candid} in broker {:?}",
                broker.broker_id
            ))
            .with_domain(DomainCode::UnknownAlert));
        };
        let packets = self.store.packets(&broker.broker_id, &[candid]).await?;
        let mut alert = found(row, None)?;
        if let Some(p) = packets.first() {
            alert.packet = Some(self.packet_json(&p.schema_id, &p.packet).await?);
        }
        Ok(alert)
    }

    /// The latest alert of an object, or of a candid (crossmatch positions).
    pub async fn locate(
        &self,
        broker_id: &str,
        candid: Option<&str>,
        object_id: Option<&str>,
    ) -> Result<Option<AlertRow>, ServiceError> {
        if let Some(c) = candid {
            let candid = parse_candid(c)?;
            return match self.store.alert(broker_id, candid).await? {
                Some(row) => Ok(Some(row)),
                None => Err(ServiceError::not_found(format!(
                    "candid: no alert {candid} in broker {broker_id:?}"
                ))
                .with_domain(DomainCode::UnknownAlert)),
            };
        }
        if let Some(o) = object_id {
            let object_id = parse_object_id(o)?;
            return match self.store.latest_of_object(broker_id, &object_id).await? {
                Some(row) => Ok(Some(row)),
                None => Err(unknown_object(&object_id, broker_id)),
            };
        }
        Ok(None)
    }

    // ---- light curves -------------------------------------------------------

    /// `get_broker_alert_photometry`.
    pub async fn light_curve(
        &self,
        caller: &Principal,
        broker_id: &str,
        object_id: &str,
        include_forced: bool,
    ) -> Result<LightCurve, ServiceError> {
        caller.tenant()?;
        let broker = self.broker_for(broker_id, "photometry").await?;
        let object_id = parse_object_id(object_id)?;
        let packets = self
            .store
            .packets_of_object(&broker.broker_id, &object_id)
            .await?;
        if packets.is_empty() {
            return Err(unknown_object(&object_id, &broker.broker_id));
        }
        let alerts = packets.len() as i64;
        let mut builder = lightcurve::Builder::new(include_forced);
        let mut survey: Option<(Option<f64>, Option<i64>)> = None;
        // The newest alerts carry the longest histories; older ones add what
        // fell out of the 30-day window.
        for p in packets.iter().rev().take(MAX_LIGHT_CURVE_ALERTS) {
            let json = self.packet_json(&p.schema_id, &p.packet).await?;
            if survey.is_none() {
                let c = &json["candidate"];
                survey = Some((
                    c["jdstarthist"].as_f64().filter(|jd| *jd > 2_400_000.0),
                    c["ndethist"].as_i64().filter(|n| *n >= 0),
                ));
            }
            builder.add_packet(&json);
        }
        let (survey_first_jd, survey_detections) = survey.unwrap_or_default();
        let points = builder.finish();
        let first_detection_jd = lightcurve::first_detection(&points);
        let zero_jd = first_detection_jd
            .or_else(|| points.first().map(|p| p.jd))
            .unwrap_or_default();
        Ok(LightCurve {
            broker_id: broker.broker_id,
            object_id,
            points,
            alerts,
            first_detection_jd,
            zero_jd,
            survey_first_jd,
            survey_detections,
        })
    }

    /// The light curve drawn as SVG.
    pub async fn light_curve_svg(
        &self,
        caller: &Principal,
        broker_id: &str,
        object_id: &str,
    ) -> Result<String, ServiceError> {
        let lc = self.light_curve(caller, broker_id, object_id, true).await?;
        let svg = tokio::task::spawn_blocking(move || {
            super::plot::light_curve_svg(
                &lc.object_id,
                &lc.points,
                lc.zero_jd,
                lc.first_detection_jd.is_some(),
            )
        })
        .await
        .map_err(|e| ServiceError::internal(&e))?;
        Ok(svg)
    }

    // ---- schema -------------------------------------------------------------

    /// `get_alert_schema`: the survey's own schema (the union over its
    /// ingested writer schemas, else the schema files), or the fields one
    /// producer adds (`producer`, see [`super::producers`]).
    pub async fn alert_schema(
        &self,
        caller: &Principal,
        search: Option<&str>,
        prefix: Option<&str>,
        limit: Option<i32>,
        producer: Option<&str>,
    ) -> Result<SchemaAnswer, ServiceError> {
        caller.tenant()?;
        let limit = match limit {
            None => 200,
            Some(n) if !(1..=2000).contains(&n) => {
                return Err(ServiceError::invalid(format!("limit: 1 to 2000 (got {n})")));
            }
            Some(n) => n as usize,
        };
        let super::schema::SchemaOf {
            source,
            versions,
            paths: union,
            producers,
        } = self.schema_of(producer).await?;
        let search = search
            .map(|s| s.trim().to_ascii_lowercase())
            .filter(|s| !s.is_empty());
        // `real-bogus` finds `RealBogus` and `real bogus`: separators are
        // compared away as well.
        let squashed = search.as_deref().map(super::schema::squash);
        let prefix = prefix
            .map(|p| p.trim().trim_end_matches('.').to_owned())
            .filter(|p| !p.is_empty());
        let matching: Vec<(FlatField, Vec<String>)> = union
            .into_iter()
            .filter(|(f, _)| {
                prefix.as_ref().is_none_or(|p| {
                    f.field == *p
                        || f.field.starts_with(&format!("{p}."))
                        || f.path.starts_with(p.as_str())
                })
            })
            .filter(|(f, _)| {
                search.as_ref().is_none_or(|s| {
                    let squashed = squashed.as_deref().unwrap_or(s.as_str());
                    f.path.to_ascii_lowercase().contains(s)
                        || f.doc.as_deref().is_some_and(|d| {
                            d.to_ascii_lowercase().contains(s)
                                || (!squashed.is_empty()
                                    && super::schema::squash(d).contains(squashed))
                        })
                })
            })
            .collect();
        let matched = matching.len() as i64;
        let truncated = matching.len() > limit;
        Ok(SchemaAnswer {
            source,
            versions,
            paths: matching.into_iter().take(limit).collect(),
            matched,
            truncated,
            producer: producer
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned),
            producers,
        })
    }

    /// The flattened schema of every version known: ingested ones, else the
    /// schema files. The filter validation of the next issue reads this.
    pub async fn schema_versions(
        &self,
    ) -> Result<(&'static str, Vec<(String, Vec<FlatField>)>), ServiceError> {
        let rows = self.store.schemas().await?;
        if !rows.is_empty() {
            let mut out: Vec<(String, Vec<FlatField>)> = Vec::new();
            for row in rows {
                let fields: Vec<FlatField> =
                    serde_json::from_str(&row.paths).map_err(|e| ServiceError::internal(&e))?;
                // Two writer schemas of one version label (a re-ordered
                // field, say) merge into one entry.
                match out.iter_mut().find(|(v, _)| *v == row.version) {
                    Some((_, known)) => {
                        for f in fields {
                            if !known.iter().any(|k| k.path == f.path) {
                                known.push(f);
                            }
                        }
                    }
                    None => out.push((row.version, fields)),
                }
            }
            return Ok(("ingested", out));
        }
        self.file_schema_versions().await
    }

    /// The schema versions of the configured schema files.
    pub async fn file_schema_versions(
        &self,
    ) -> Result<(&'static str, Vec<(String, Vec<FlatField>)>), ServiceError> {
        let Some(dir) = self.config.schema_dir.clone() else {
            return Err(ServiceError::precondition(
                "no alert has been ingested and no schema folder is configured (ITHACA_ZTF_SCHEMA_DIR)",
            )
            .with_domain(DomainCode::NoAlertSchema));
        };
        let versions = tokio::task::spawn_blocking(move || schema_files(&dir))
            .await
            .map_err(|e| ServiceError::internal(&e))?
            .map_err(|e| {
                tracing::error!(error = %e, "schema files unreadable");
                ServiceError::precondition(
                    "no alert has been ingested and the schema files cannot be read",
                )
                .with_domain(DomainCode::NoAlertSchema)
            })?;
        Ok(("schema files", versions))
    }
}

/// The versions under `dir`: `dir` itself if it holds `alert.avsc`, else
/// each sub-folder that does.
fn schema_files(dir: &std::path::Path) -> Result<Vec<(String, Vec<FlatField>)>, String> {
    if dir.join("alert.avsc").is_file() {
        return Ok(vec![schema::flatten_files(dir)?]);
    }
    let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("alert.avsc").is_file())
        .collect();
    subdirs.sort();
    if subdirs.is_empty() {
        return Err(format!("{}: no alert.avsc", dir.display()));
    }
    subdirs.iter().map(|d| schema::flatten_files(d)).collect()
}

fn found(row: AlertRow, separation_arcsec: Option<f64>) -> Result<FoundAlert, ServiceError> {
    let candidate: Json =
        serde_json::from_str(&row.candidate).map_err(|e| ServiceError::internal(&e))?;
    Ok(FoundAlert {
        row,
        candidate,
        separation_arcsec,
        packet: None,
    })
}

fn unknown_object(object_id: &str, broker_id: &str) -> ServiceError {
    ServiceError::not_found(format!(
        "objectId: no alerts of {object_id} in broker {broker_id:?}"
    ))
    .with_domain(DomainCode::UnknownObject)
}

fn window_text(jd: Option<(f64, f64)>) -> String {
    match jd {
        None => ", no time bounds".to_owned(),
        Some((a, b)) => {
            let a = if a == f64::MIN {
                "…".to_owned()
            } else {
                format!("{a}")
            };
            let b = if b == f64::MAX {
                "…".to_owned()
            } else {
                format!("{b}")
            };
            format!(", jd {a} to {b}")
        }
    }
}

/// The time window of a query; `None` when neither bound is given.
pub fn time_window(
    start: Option<f64>,
    end: Option<f64>,
) -> Result<Option<(f64, f64)>, ServiceError> {
    for (name, v) in [("jd_start", start), ("jd_end", end)] {
        if let Some(v) = v
            && (!v.is_finite() || !(2_400_000.0..=2_600_000.0).contains(&v))
        {
            return Err(ServiceError::invalid(format!(
                "{name}: {v} is not a Julian date of the survey era (2400000 to 2600000; convert_time converts dates)"
            )));
        }
    }
    match (start, end) {
        (None, None) => Ok(None),
        (Some(a), Some(b)) if a > b => Err(ServiceError::invalid(format!(
            "jd_start: {a} is after jd_end {b}"
        ))),
        (a, b) => Ok(Some((a.unwrap_or(f64::MIN), b.unwrap_or(f64::MAX)))),
    }
}

/// A cone radius in arcsec: above 0, at most [`MAX_RADIUS_ARCSEC`].
pub fn check_radius(radius: Option<f64>) -> Result<f64, ServiceError> {
    let Some(r) = radius else {
        return Err(ServiceError::invalid(
            "radius_arcsec: required for a cone search",
        ));
    };
    if !r.is_finite() || r <= 0.0 {
        return Err(ServiceError::invalid(format!(
            "radius_arcsec: must be above 0 (got {r})"
        )));
    }
    if r > MAX_RADIUS_ARCSEC {
        return Err(ServiceError::invalid(format!(
            "radius_arcsec: at most {MAX_RADIUS_ARCSEC} (1 degree; got {r})"
        )));
    }
    Ok(r)
}

/// A candid: a positive decimal integer that fits in 63 bits.
pub fn parse_candid(raw: &str) -> Result<i64, ServiceError> {
    let t = raw.trim();
    let bad = || {
        ServiceError::invalid(format!(
            "candid: {raw:?} is not a candid (a positive decimal integer of up to 19 digits, as a string)"
        ))
    };
    if t.is_empty() || t.len() > 19 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    t.parse::<i64>().ok().filter(|c| *c > 0).ok_or_else(bad)
}

/// An objectId: 1-64 letters, digits, `_`, `-`, `.`.
pub fn parse_object_id(raw: &str) -> Result<String, ServiceError> {
    let t = raw.trim();
    if t.is_empty()
        || t.len() > 64
        || !t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        return Err(ServiceError::invalid(format!(
            "objectId: {raw:?} is not an object id (for example ZTF18abudxnw)"
        )));
    }
    Ok(t.to_owned())
}

fn require_admin(caller: &Principal, what: &str) -> Result<(), ServiceError> {
    if caller.actor() != Actor::System {
        return Err(ServiceError::denied(format!("only administrators {what}")));
    }
    Ok(())
}
