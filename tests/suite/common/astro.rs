//! The real ZTF alerts and reference catalogs of `../shared/data`, and a
//! broker loaded with them, for the astronomy tests.

use ithaca_broker::alerts::{AlertService, AlertsConfig};
use ithaca_broker::catalogs::CatalogService;
use ithaca_kit::db::Db;
use ithaca_kit::principal::Principal;
use std::path::{Path, PathBuf};

/// `../shared/data` relative to the repository root (the tests' working
/// directory).
pub fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data")
}

pub fn alerts_dir() -> PathBuf {
    data().join("ztf/alerts")
}

pub fn schema_dir() -> PathBuf {
    data().join("ztf/schema")
}

/// Every `.avro` file under `dir`, sorted.
pub fn avro_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read data dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "avro") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// One row of SOURCES.md's alert list.
#[derive(Clone, Debug, PartialEq)]
pub struct Listed {
    pub file: String,
    pub object_id: String,
    pub candid: i64,
    pub ra: f64,
    pub dec: f64,
    pub prv_detections: i64,
    pub prv_upper_limits: i64,
    pub fp: Option<i64>,
}

/// The alert list of `ztf/SOURCES.md`.
pub fn listed() -> Vec<Listed> {
    let text = std::fs::read_to_string(data().join("ztf/SOURCES.md")).expect("SOURCES.md");
    let mut out = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | file | objectId | candid | date | filter | ra | dec | magpsf | prv (det/ul) | fp |
        if cells.len() < 11 || !cells[1].ends_with(".avro") {
            continue;
        }
        let (det, ul) = cells[9]
            .split_once('(')
            .and_then(|(_, r)| r.trim_end_matches(')').split_once('/'))
            .expect("prv (det/ul)");
        out.push(Listed {
            file: cells[1].to_owned(),
            object_id: cells[2].to_owned(),
            candid: cells[3].parse().expect("candid"),
            ra: cells[6].parse().expect("ra"),
            dec: cells[7].trim_start_matches('+').parse().expect("dec"),
            prv_detections: det.parse().expect("det"),
            prv_upper_limits: ul.parse().expect("ul"),
            fp: cells[10].parse().ok(),
        });
    }
    out
}

/// The broker's astronomy services over `db`, with the schema files as the
/// fallback.
pub fn services(db: Db) -> (AlertService, CatalogService) {
    ithaca_broker::astro(
        db,
        &super::key(),
        AlertsConfig {
            schema_dir: Some(schema_dir()),
        },
    )
}

/// Ingest every raw alert file; returns the reports.
pub async fn ingest_alerts(
    alerts: &AlertService,
) -> Vec<ithaca_broker::alerts::service::IngestReport> {
    let mut reports = Vec::new();
    for path in avro_files(&alerts_dir()) {
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let bytes = std::fs::read(&path).expect("read alert file");
        reports.push(
            alerts
                .ingest_file(&Principal::system(""), "", &name, bytes)
                .await
                .unwrap_or_else(|e| panic!("{name}: {}", e.message)),
        );
    }
    reports
}

/// Ingest both reference catalogs.
pub async fn ingest_catalogs(catalogs: &CatalogService) {
    for name in ["hipparcos2_hp_le_6.0.csv", "openngc_galaxies_z_le_0.01.csv"] {
        let bytes = std::fs::read(data().join("catalogs").join(name)).expect("catalog file");
        catalogs
            .ingest(&Principal::system(""), name, &bytes)
            .await
            .unwrap_or_else(|e| panic!("{name}: {}", e.message));
    }
}
