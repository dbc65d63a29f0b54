//! The real GCN circulars and notices of `../shared/data/gcn`, and a broker
//! GCN service loaded with them, for the GCN tests.

use ithaca_broker::gcn::GcnService;
use ithaca_broker::gcn::service::IngestReport;
use ithaca_kit::db::Db;
use ithaca_kit::principal::Principal;
use std::path::{Path, PathBuf};

pub fn dir() -> PathBuf {
    super::astro::data().join("gcn")
}

pub fn circulars_file() -> PathBuf {
    dir().join("circulars/gcn_circulars_34277-34775_and_36796.jsonl")
}

pub fn notices_dir() -> PathBuf {
    dir().join("notices")
}

/// The 2026-04-21 burst seen by Fermi GBM and SVOM.
pub fn fermi_svom_dir() -> PathBuf {
    notices_dir().join("grb_2026-04-21_fermi_798437606_svom_sb26042105")
}

/// Every notice file under `dir`, sorted by path.
pub fn notice_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read notices dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "xml" || x == "json") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

pub fn service(db: Db) -> GcnService {
    ithaca_broker::gcn_service(db)
}

/// Ingest one file as the system; panics naming the file on error.
pub async fn ingest(gcn: &GcnService, path: &Path) -> IngestReport {
    let name = path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let bytes = std::fs::read(path).expect("read gcn file");
    gcn.ingest_file(&Principal::system(""), &name, bytes)
        .await
        .unwrap_or_else(|e| panic!("{name}: {}", e.message))
}

/// Ingest the circulars, then every notice.
pub async fn ingest_all(gcn: &GcnService) -> Vec<IngestReport> {
    let mut reports = vec![ingest(gcn, &circulars_file()).await];
    for path in notice_files(&notices_dir()) {
        reports.push(ingest(gcn, &path).await);
    }
    reports
}
