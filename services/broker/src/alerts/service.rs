//! The alert domain's service: its limits, its configuration, the state
//! every operation shares and the hook ingest tells. The operations are in
//! the sibling files by part (`brokers`, `ingest`, `queries`, `curves`,
//! `schema_query`); their types are re-exported here. Every refusal names
//! the field at fault; nothing here panics on a caller's input.

use super::avro::DecodedAlert;
pub use super::brokers::{BrokerView, NewBroker};
pub use super::curves::LightCurve;
pub use super::ingest::IngestReport;
pub use super::queries::{
    AlertAnswer, AlertQuery, FoundAlert, check_radius, parse_candid, parse_object_id, time_window,
};
pub use super::schema_query::SchemaAnswer;
use super::store::{AlertStore, NewAlert};
use crate::accounts::vault::Vault;
use apache_avro::Schema;
use apache_avro::types::Value;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::{Actor, Principal};
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
/// ingested. The library reads no environment: the binary builds this from
/// its options (`--ztf-schema-dir`, `ITHACA_ZTF_SCHEMA_DIR`).
#[derive(Clone, Debug, Default)]
pub struct AlertsConfig {
    /// A folder of `v<version>/` folders of `.avsc` files, or one such
    /// folder; `None` answers the schema from ingested alerts only.
    pub schema_dir: Option<PathBuf>,
}

/// Brokers, the alert archive and the alert schema.
#[derive(Clone)]
pub struct AlertService {
    pub(super) store: AlertStore,
    pub(super) vault: Vault,
    pub(super) config: AlertsConfig,
    /// Parsed writer schemas by id: parsing one takes longer than decoding
    /// a packet with it.
    pub(super) schemas: Arc<Mutex<HashMap<String, Arc<Schema>>>>,
    /// Told about newly stored alerts (the broker's filters); set once when
    /// the broker is wired, shared by every clone.
    pub(super) ingest_hook: Arc<OnceLock<Arc<dyn IngestHook>>>,
}

/// Told about the alerts an ingest newly stored, once they are committed:
/// the seam through which active filter versions see every new alert.
#[tonic::async_trait]
pub trait IngestHook: Send + Sync {
    /// Asked before a file of `broker_id` is decoded: a watcher to see each
    /// alert's decoded value as the decode makes it, which then takes this
    /// hook's place for the file (its [`FileWatch::stored`] is called
    /// instead of [`Self::stored`]). `None` (the default): the hook needs
    /// nothing the stored alerts do not carry, and the decode is unchanged.
    async fn watch(&self, _broker_id: &str) -> Option<Box<dyn FileWatch>> {
        None
    }

    /// `batch` holds only alerts that were not stored before. A failure is
    /// the hook's to report: the alerts are stored either way.
    async fn stored(&self, batch: StoredBatch);
}

/// One file's watcher: it sees every alert of the file once, on the decode
/// thread, right after the alert is decoded (so the value it reads is
/// never decoded again), and is then told which alerts the ingest newly
/// stored. Whatever it keeps between the two is its own; it must not keep
/// the values (a 1,000-alert file decodes to hundreds of megabytes).
#[tonic::async_trait]
pub trait FileWatch: Send {
    /// `alert` (its stored parts) and `value`, the whole decoded packet, in
    /// file order. Called at most once per alert; a file that fails to
    /// decode stores nothing and is never followed by [`Self::stored`].
    fn decoded(&mut self, alert: &DecodedAlert, value: &Value);

    /// The alerts the ingest newly stored, once committed (none stored:
    /// not called). Alerts stored before are not in `batch`, and whatever
    /// was kept for them must be dropped.
    async fn stored(self: Box<Self>, batch: StoredBatch);
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
}

pub(super) fn require_admin(caller: &Principal, what: &str) -> Result<(), ServiceError> {
    if caller.actor() != Actor::System {
        return Err(ServiceError::denied(format!("only administrators {what}")));
    }
    Ok(())
}
