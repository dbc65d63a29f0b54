//! The broker service: market data (daily bars and the dataset snapshots
//! they came from), provider accounts, and the astronomy half: alert
//! brokers, the ZTF alert archive, light curves, reference catalogs and
//! their crossmatch, time conversion, the alert schema, GCN events, and
//! broker filters.
//!
//! The crate grows by domain, not by file: each folder holds a domain's
//! model, store and service parts, so whoever owns one reads only it.
//!
//! - [`market`]: daily bars and their datasets: the file format, ingest
//!   (validated, all or nothing), coverage, histories.
//! - [`accounts`]: provider accounts, and the [`accounts::vault`] that
//!   seals credentials at rest (accounts and alert brokers).
//! - [`alerts`]: brokers, alert ingest (Apache Avro), queries, light curves,
//!   plots, and the schema flattening filters validate against
//!   (`ithaca.broker.v1.AlertService`, with time conversion, served
//!   alongside).
//! - [`catalogs`]: Hipparcos-2 and OpenNGC, and the crossmatch
//!   (`ithaca.broker.v1.CatalogService`, served alongside).
//! - [`gcn`]: GCN events, circulars, notices, localisations, extractions
//!   and comments (`ithaca.broker.v1.GcnService`, served alongside).
//! - [`fundamentals`]: SEC EDGAR company facts, filings and Form 4
//!   insider transactions, read point-in-time
//!   (`ithaca.broker.v1.FundamentalsService`, served alongside).
//! - [`sky`]: the HEALPix index (CDS `cdshealpix`) alerts and catalogs share.
//! - [`astrotime`]: ISO 8601, JD and MJD on the UTC scale.
//! - [`filters`]: broker filters: groups, streams, filters and their
//!   versions, the pipeline language, the preview, activation, and the
//!   live path that runs active versions on every newly stored alert
//!   (`ithaca.broker.v1.FilterService`, served beside the broker's own).
//! - [`grpc`]: the `ithaca.broker.v1.BrokerService` adapter (market and
//!   accounts).
//! - [`db`]: the migrations every domain's tables come from; [`progress`]:
//!   the ingest progress the streaming RPCs share.
//!
//! Bars, alerts, catalogs and GCN events are reference data shared by every
//! tenant.
//! This crate depends on the kit and the proto crate, never on another
//! service.

#![forbid(unsafe_code)]

pub mod accounts;
pub mod alerts;
pub mod astrotime;
pub mod catalogs;
pub mod db;
pub mod filters;
pub mod fundamentals;
pub mod gcn;
pub mod grpc;
pub mod market;
pub mod progress;
pub mod sky;
pub mod upload;

use ithaca_kit::db::{Db, DbError};
use ithaca_kit::principal::{InternalKey, Verifier};
use ithaca_kit::server::ServeOptions;
use ithaca_proto::broker::v1::alert_service_server::AlertServiceServer;
use ithaca_proto::broker::v1::broker_service_server::BrokerServiceServer;
use ithaca_proto::broker::v1::catalog_service_server::CatalogServiceServer;
use ithaca_proto::broker::v1::filter_service_server::FilterServiceServer;
use ithaca_proto::broker::v1::fundamentals_service_server::FundamentalsServiceServer;
use ithaca_proto::broker::v1::gcn_service_server::GcnServiceServer;
use tonic::service::Routes;

/// The PostgreSQL schema this service owns.
pub const SCHEMA: &str = "ithaca_broker";

/// Largest gRPC message (an ingest chunk) accepted.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Open (and migrate) the broker database at `url`.
pub async fn open_db(url: &str, schema: &str) -> Result<Db, DbError> {
    Db::open(url, schema, db::MIGRATIONS).await
}

/// The market data over `db`.
pub fn market_service(db: Db) -> market::MarketService {
    market::MarketService::new(market::MarketStore::new(db))
}

/// The provider accounts over `db`; configs and credentials are sealed
/// with a key derived from the internal key.
pub fn account_service(db: Db, key: &InternalKey) -> accounts::AccountService {
    accounts::AccountService::new(accounts::AccountStore::new(db), vault(key))
}

/// The vault every sealed value of the broker uses: provider accounts'
/// and alert brokers' credentials share one derived key.
fn vault(key: &InternalKey) -> accounts::vault::Vault {
    accounts::vault::Vault::new(&key.derive("broker-credentials"))
}

/// The alert archive and the catalogs over `db`; broker credentials are
/// sealed with the same derived key as provider credentials.
pub fn astro(
    db: Db,
    key: &InternalKey,
    config: alerts::AlertsConfig,
) -> (alerts::AlertService, catalogs::CatalogService) {
    let alerts = alerts::AlertService::new(
        alerts::store::AlertStore::new(db.clone()),
        vault(key),
        config,
    );
    let catalogs =
        catalogs::CatalogService::new(catalogs::store::CatalogStore::new(db), alerts.clone());
    (alerts, catalogs)
}

/// The GCN events over `db`.
pub fn gcn_service(db: Db) -> gcn::GcnService {
    gcn::GcnService::new(gcn::store::GcnStore::new(db))
}

/// The SEC fundamentals over `db` (prices for the peer screen come from
/// the same database's bars).
pub fn fundamentals_service(db: Db) -> fundamentals::FundamentalsService {
    fundamentals::FundamentalsService::new(
        fundamentals::store::FundamentalsStore::new(db.clone()),
        market::MarketStore::new(db),
    )
}

/// The gRPC routes of the broker service, behind the principal verifier,
/// with no alert schema folder (`get_alert_schema` answers from ingested
/// alerts only).
pub fn serve_options(db: Db, key: InternalKey) -> ServeOptions {
    serve_options_with(db, key, alerts::AlertsConfig::default())
}

/// [`serve_options`] with an alerts configuration: the binary's
/// `--ztf-schema-dir`.
pub fn serve_options_with(db: Db, key: InternalKey, config: alerts::AlertsConfig) -> ServeOptions {
    let (alerts, catalogs) = astro(db.clone(), &key, config);
    // An archive stored before the filter records existed gets them in
    // the background; previews read the candidates until it is done.
    alerts.store().spawn_cuts_backfill();
    let events = gcn_service(db.clone());
    let filters =
        filters::attach(db.clone(), &alerts).with_regions(std::sync::Arc::new(events.clone()));
    let gcn = GcnServiceServer::new(gcn::grpc::GcnGrpc::new(events))
        .max_decoding_message_size(MAX_MESSAGE);
    let gcn = tonic::service::interceptor::InterceptedService::new(gcn, Verifier::new(key.clone()));
    let sec = FundamentalsServiceServer::new(fundamentals::grpc::FundamentalsGrpc::new(
        fundamentals_service(db.clone()),
    ))
    .max_decoding_message_size(MAX_MESSAGE);
    let sec = tonic::service::interceptor::InterceptedService::new(sec, Verifier::new(key.clone()));
    let alerts = AlertServiceServer::new(alerts::grpc::AlertGrpc::new(alerts))
        .max_decoding_message_size(MAX_MESSAGE);
    let alerts =
        tonic::service::interceptor::InterceptedService::new(alerts, Verifier::new(key.clone()));
    let catalogs = CatalogServiceServer::new(catalogs::grpc::CatalogGrpc::new(catalogs))
        .max_decoding_message_size(MAX_MESSAGE);
    let catalogs =
        tonic::service::interceptor::InterceptedService::new(catalogs, Verifier::new(key.clone()));
    let grpc = grpc::Grpc {
        market: market_service(db.clone()),
        accounts: account_service(db, &key),
    };
    let server = BrokerServiceServer::new(grpc).max_decoding_message_size(MAX_MESSAGE);
    let verifier = Verifier::new(key);
    let server = tonic::service::interceptor::InterceptedService::new(server, verifier.clone());
    let filters = tonic::service::interceptor::InterceptedService::new(
        FilterServiceServer::new(filters::grpc::Grpc { service: filters }),
        verifier,
    );
    ServeOptions::new(
        vec![
            ithaca_proto::service_names::BROKER,
            ithaca_proto::service_names::ALERTS,
            ithaca_proto::service_names::CATALOGS,
            ithaca_proto::service_names::GCN,
            ithaca_proto::service_names::FILTERS,
            ithaca_proto::service_names::FUNDAMENTALS,
        ],
        Routes::new(server)
            .add_service(alerts)
            .add_service(catalogs)
            .add_service(gcn)
            .add_service(filters)
            .add_service(sec),
    )
}
