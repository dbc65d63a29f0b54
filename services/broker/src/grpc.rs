//! The tonic adapter: protobuf in, domain call, protobuf out. No logic here.

use crate::accounts::AccountService;
use crate::accounts::service::{NewAccount, provider_label};
use crate::accounts::store::AccountRow;
use crate::alerts::AlertService;
use crate::alerts::service::{AlertQuery, MAX_FILE_BYTES, NewBroker};
use crate::catalogs::CatalogService;
use crate::catalogs::service::CrossmatchQuery;
use crate::grpc_astro as render;
use crate::market::MarketService;
use crate::market::service::{HistoryQuery, IngestRow};
use crate::market::store::DatasetRow;
use ithaca_kit::error::ServiceError;
use ithaca_kit::{clock, principal};
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::broker_service_server::BrokerService as Rpc;
use tonic::{Request, Response, Status, Streaming};

/// Largest ingest accepted, in rows.
const MAX_INGEST_ROWS: usize = 2_000_000;

/// The gRPC face of the market, accounts, alerts and catalogs domains
/// (`ithaca.broker.v1.BrokerService`).
#[derive(Clone, Debug)]
pub struct Grpc {
    pub market: MarketService,
    pub accounts: AccountService,
    pub alerts: AlertService,
    pub catalogs: CatalogService,
}

fn dataset(row: DatasetRow, already_present: bool) -> pb::Dataset {
    pb::Dataset {
        dataset_id: row.dataset_id,
        source: row.source,
        symbols: row.symbols.split_whitespace().map(str::to_owned).collect(),
        row_count: row.row_count,
        first_date: row.first_date,
        last_date: row.last_date,
        checksum: row.checksum,
        ingested_at: clock::rfc3339(row.ingested_at_ms),
        already_present,
    }
}

impl Grpc {
    /// An account as anyone may see it: no config, no credential.
    fn account(&self, row: AccountRow) -> pb::Account {
        pb::Account {
            credential_configured: self.accounts.credential_configured(&row),
            provider: provider_label(&row.provider),
            account_id: row.account_id,
            label: row.label,
            created_at: clock::rfc3339(row.created_at_ms),
        }
    }
}

#[tonic::async_trait]
impl Rpc for Grpc {
    async fn get_accounts(
        &self,
        request: Request<pb::GetAccountsRequest>,
    ) -> Result<Response<pb::Accounts>, Status> {
        let caller = principal::of(&request)?;
        let rows = self.accounts.accounts(&caller).await?;
        Ok(Response::new(pb::Accounts {
            kind: "accounts".to_owned(),
            accounts: rows.into_iter().map(|r| self.account(r)).collect(),
        }))
    }

    async fn add_account(
        &self,
        request: Request<pb::AddAccountRequest>,
    ) -> Result<Response<pb::Account>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let account = NewAccount {
            tenant_id: r.tenant_id,
            provider: r.provider,
            label: r.label,
            config: r
                .config
                .map_or(serde_json::Value::Null, ithaca_kit::json::from_struct),
            credential: r.credential,
        };
        let row = self.accounts.add_account(&caller, account).await?;
        Ok(Response::new(self.account(row)))
    }

    async fn list_symbols(
        &self,
        request: Request<pb::ListSymbolsRequest>,
    ) -> Result<Response<pb::ListSymbolsResponse>, Status> {
        let caller = principal::of(&request)?;
        let rows = self.market.symbols(&caller).await?;
        Ok(Response::new(pb::ListSymbolsResponse {
            symbols: rows
                .into_iter()
                .map(|s| pb::SymbolSummary {
                    symbol: s.symbol,
                    bars: s.bars,
                    first_date: s.first_date,
                    last_date: s.last_date,
                })
                .collect(),
        }))
    }

    async fn list_datasets(
        &self,
        request: Request<pb::ListDatasetsRequest>,
    ) -> Result<Response<pb::ListDatasetsResponse>, Status> {
        let caller = principal::of(&request)?;
        let rows = self.market.datasets(&caller).await?;
        Ok(Response::new(pb::ListDatasetsResponse {
            datasets: rows.into_iter().map(|d| dataset(d, false)).collect(),
        }))
    }

    async fn get_price_history(
        &self,
        request: Request<pb::GetPriceHistoryRequest>,
    ) -> Result<Response<pb::GetPriceHistoryResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.into_inner();
        let history = self
            .market
            .history(
                &caller,
                HistoryQuery {
                    symbol: req.symbol,
                    start: req.start,
                    end: req.end,
                    fields: req.fields,
                    limit: req.limit,
                    cursor: req.cursor,
                },
            )
            .await?;
        let want = |f: &str| history.fields.contains(&f);
        let dataset_id = history
            .bars
            .last()
            .map(|b| b.dataset_id.clone())
            .unwrap_or_default();
        let bars: Vec<pb::Bar> = history
            .bars
            .iter()
            .map(|b| pb::Bar {
                date: b.date.clone(),
                open: want("open").then_some(b.open),
                high: want("high").then_some(b.high),
                low: want("low").then_some(b.low),
                close: want("close").then_some(b.close),
                volume: want("volume").then_some(b.volume),
                adj_close: want("adj_close").then_some(b.adj_close),
            })
            .collect();
        Ok(Response::new(pb::GetPriceHistoryResponse {
            count: bars.len() as i64,
            symbol: history.symbol,
            bars,
            truncated: history.truncated,
            next_cursor: history.next_cursor,
            dataset_id,
        }))
    }

    async fn get_data_providers(
        &self,
        request: Request<pb::GetDataProvidersRequest>,
    ) -> Result<Response<pb::DataProviders>, Status> {
        let caller = principal::of(&request)?;
        let datasets = self.market.datasets(&caller).await?;
        let mut providers = Vec::new();
        if !datasets.is_empty() {
            providers.push(pb::DataProvider {
                name: "Public end-of-day prices (WIKI, public domain)".to_owned(),
                kind: "daily_bars".to_owned(),
                credential_configured: false,
            });
        }
        for account in self.accounts.accounts(&caller).await? {
            providers.push(pb::DataProvider {
                credential_configured: self.accounts.credential_configured(&account),
                name: provider_label(&account.provider),
                kind: "market_data".to_owned(),
            });
        }
        Ok(Response::new(pb::DataProviders {
            kind: "data.providers".to_owned(),
            providers,
            datasets: datasets.into_iter().map(|d| dataset(d, false)).collect(),
        }))
    }

    async fn ingest_bars(
        &self,
        request: Request<Streaming<pb::IngestBarsChunk>>,
    ) -> Result<Response<pb::Dataset>, Status> {
        let caller = principal::of(&request)?;
        let (source, checksum, rows) = read_bars(request.into_inner()).await?;
        let ingested = self
            .market
            .ingest(&caller, &source, &checksum, rows)
            .await?;
        Ok(Response::new(dataset(
            ingested.dataset,
            ingested.already_present,
        )))
    }

    type IngestBarsWithProgressStream = Events;

    async fn ingest_bars_with_progress(
        &self,
        request: Request<Streaming<pb::IngestBarsChunk>>,
    ) -> Result<Response<Events>, Status> {
        let caller = principal::of(&request)?;
        let (source, checksum, rows) = read_bars(request.into_inner()).await?;
        let service = self.market.clone();
        Ok(Response::new(crate::progress::streamed(
            "rows",
            move |progress| async move {
                service
                    .ingest_reporting(&caller, &source, &checksum, rows, Some(&progress))
                    .await
            },
            |ingested| dataset(ingested.dataset, ingested.already_present),
        )))
    }

    async fn list_brokers(
        &self,
        request: Request<pb::ListBrokersRequest>,
    ) -> Result<Response<pb::Brokers>, Status> {
        let caller = principal::of(&request)?;
        let brokers = self.alerts.brokers(&caller).await?;
        Ok(Response::new(pb::Brokers {
            kind: "brokers".to_owned(),
            brokers: brokers.into_iter().map(render::broker).collect(),
        }))
    }

    async fn get_broker_alerts(
        &self,
        request: Request<pb::GetBrokerAlertsRequest>,
    ) -> Result<Response<pb::BrokerAlerts>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let query = AlertQuery {
            broker_id: r.broker_id,
            object_id: r.object_id,
            ra: r.ra,
            dec: r.dec,
            radius_arcsec: r.radius_arcsec,
            jd_start: r.jd_start,
            jd_end: r.jd_end,
            candid: r.candid,
            full: r.full.unwrap_or(false),
            limit: r.limit,
        };
        let answer = self.alerts.alerts(&caller, query).await?;
        Ok(Response::new(render::alerts(answer)))
    }

    async fn get_broker_alert_photometry(
        &self,
        request: Request<pb::GetBrokerAlertPhotometryRequest>,
    ) -> Result<Response<pb::LightCurve>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let page = crate::alerts::lightcurve::Page::parse(r.limit, r.cursor.as_deref())
            .map_err(Status::invalid_argument)?;
        let lc = self
            .alerts
            .light_curve(
                &caller,
                &r.broker_id,
                &r.object_id,
                r.include_forced.unwrap_or(true),
            )
            .await?;
        Ok(Response::new(render::light_curve(lc, &page)))
    }

    async fn get_light_curve_plot(
        &self,
        request: Request<pb::GetLightCurvePlotRequest>,
    ) -> Result<Response<ithaca_proto::mcp::v1::ToolContent>, Status> {
        use ithaca_proto::mcp::v1 as mcp;
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let svg = self
            .alerts
            .light_curve_svg(&caller, &r.broker_id, &r.object_id)
            .await?;
        let uri = format!(
            "{}.svg",
            render::light_curve_uri(r.broker_id.trim(), r.object_id.trim())
        );
        Ok(Response::new(mcp::ToolContent {
            content: vec![mcp::Content {
                kind: Some(mcp::content::Kind::Resource(mcp::EmbeddedResource {
                    uri,
                    mime_type: "image/svg+xml".to_owned(),
                    body: Some(mcp::embedded_resource::Body::Text(svg)),
                })),
            }],
            structured: None,
        }))
    }

    async fn get_alert_packet(
        &self,
        request: Request<pb::GetAlertPacketRequest>,
    ) -> Result<Response<pb::Alert>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let alert = self.alerts.packet(&caller, &r.broker_id, &r.candid).await?;
        Ok(Response::new(render::alert(alert)))
    }

    async fn crossmatch_broker_catalogs(
        &self,
        request: Request<pb::CrossmatchRequest>,
    ) -> Result<Response<pb::Crossmatch>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let query = CrossmatchQuery {
            broker_id: r.broker_id,
            ra: r.ra,
            dec: r.dec,
            radius_arcsec: r.radius_arcsec,
            candid: r.candid,
            object_id: r.object_id,
            epoch_jd: r.epoch_jd,
            catalogs: r.catalogs,
            limit: r.limit,
        };
        let answer = self.catalogs.crossmatch(&caller, query).await?;
        Ok(Response::new(render::crossmatch(answer)))
    }

    async fn convert_time(
        &self,
        request: Request<pb::ConvertTimeRequest>,
    ) -> Result<Response<pb::ConvertedTime>, Status> {
        let _caller = principal::of(&request)?;
        let r = request.into_inner();
        let t = crate::astrotime::convert(&r.value, r.from.as_deref())?;
        Ok(Response::new(pb::ConvertedTime {
            interpreted_as: t.from.as_str().to_owned(),
            iso: t.iso(),
            jd: t.jd,
            mjd: t.mjd(),
            julian_year: t.julian_year(),
            scale: crate::astrotime::SCALE.to_owned(),
            note: "UTC throughout: ZTF's jd and every JD the broker tools take are UTC Julian dates (no TT or TDB offset applied)".to_owned(),
        }))
    }

    async fn get_alert_schema(
        &self,
        request: Request<pb::GetAlertSchemaRequest>,
    ) -> Result<Response<pb::AlertSchema>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let answer = self
            .alerts
            .alert_schema(
                &caller,
                r.search.as_deref(),
                r.prefix.as_deref(),
                r.limit,
                r.producer.as_deref(),
            )
            .await?;
        Ok(Response::new(render::schema(answer)))
    }

    async fn add_broker(
        &self,
        request: Request<pb::AddBrokerRequest>,
    ) -> Result<Response<pb::Broker>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let view = self
            .alerts
            .add_broker(
                &caller,
                NewBroker {
                    broker_id: r.broker_id,
                    name: r.name,
                    survey: r.survey,
                    operations: r.operations,
                    altdata: r.altdata.map(ithaca_kit::json::from_struct),
                    credential: r.credential,
                },
            )
            .await?;
        Ok(Response::new(render::broker(view)))
    }

    async fn ingest_alerts(
        &self,
        request: Request<Streaming<pb::AlertFileChunk>>,
    ) -> Result<Response<pb::AlertIngestReport>, Status> {
        let caller = principal::of(&request)?;
        let (broker_id, source, data) = read_alert_file(request.into_inner()).await?;
        let report = self
            .alerts
            .ingest_file(&caller, &broker_id, &source, data)
            .await?;
        Ok(Response::new(alert_report(report)))
    }

    type IngestAlertsWithProgressStream = Events;

    async fn ingest_alerts_with_progress(
        &self,
        request: Request<Streaming<pb::AlertFileChunk>>,
    ) -> Result<Response<Events>, Status> {
        let caller = principal::of(&request)?;
        let (broker_id, source, data) = read_alert_file(request.into_inner()).await?;
        let alerts = self.alerts.clone();
        Ok(Response::new(crate::progress::streamed(
            "packets",
            move |progress| async move {
                alerts
                    .ingest_file_reporting(&caller, &broker_id, &source, data, Some(&progress))
                    .await
            },
            alert_report,
        )))
    }

    async fn ingest_catalog(
        &self,
        request: Request<Streaming<pb::CatalogFileChunk>>,
    ) -> Result<Response<pb::CatalogIngestReport>, Status> {
        let caller = principal::of(&request)?;
        let (source, data) = read_catalog_file(request.into_inner()).await?;
        let report = self.catalogs.ingest(&caller, &source, &data).await?;
        Ok(Response::new(render::catalog_report(report)))
    }

    type IngestCatalogWithProgressStream = Events;

    async fn ingest_catalog_with_progress(
        &self,
        request: Request<Streaming<pb::CatalogFileChunk>>,
    ) -> Result<Response<Events>, Status> {
        let caller = principal::of(&request)?;
        let (source, data) = read_catalog_file(request.into_inner()).await?;
        let catalogs = self.catalogs.clone();
        Ok(Response::new(crate::progress::streamed(
            "sources",
            move |progress| async move {
                catalogs
                    .ingest_reporting(&caller, &source, &data, Some(&progress))
                    .await
            },
            render::catalog_report,
        )))
    }
}

use crate::progress::Events;

/// One alert file's chunks: broker and source (first chunk) and its bytes,
/// at most [`MAX_FILE_BYTES`].
async fn read_alert_file(
    mut stream: Streaming<pb::AlertFileChunk>,
) -> Result<(String, String, Vec<u8>), Status> {
    let (mut broker_id, mut source, mut data) = (String::new(), String::new(), Vec::new());
    let mut first = true;
    while let Some(chunk) = stream.message().await? {
        if first {
            broker_id = chunk.broker_id;
            source = chunk.source;
            first = false;
        }
        if data.len() + chunk.data.len() > MAX_FILE_BYTES {
            return Err(ServiceError::invalid(format!(
                "data: a file may hold at most {MAX_FILE_BYTES} bytes"
            ))
            .into());
        }
        data.extend_from_slice(&chunk.data);
    }
    Ok((broker_id, source, data))
}

/// One catalog file's chunks: its source (first chunk) and its bytes, at
/// most [`MAX_FILE_BYTES`].
async fn read_catalog_file(
    mut stream: Streaming<pb::CatalogFileChunk>,
) -> Result<(String, Vec<u8>), Status> {
    let (mut source, mut data) = (String::new(), Vec::new());
    while let Some(chunk) = stream.message().await? {
        if source.is_empty() {
            source = chunk.source;
        }
        if data.len() + chunk.data.len() > MAX_FILE_BYTES {
            return Err(ServiceError::invalid(format!(
                "data: a file may hold at most {MAX_FILE_BYTES} bytes"
            ))
            .into());
        }
        data.extend_from_slice(&chunk.data);
    }
    Ok((source, data))
}

fn alert_report(report: crate::alerts::service::IngestReport) -> pb::AlertIngestReport {
    pb::AlertIngestReport {
        broker_id: report.broker_id,
        source: report.source,
        checksum: report.checksum,
        alerts: render::n(report.alerts),
        stored: render::n(report.stored),
        already_present: report.already_present,
        candids: report.candids.iter().map(i64::to_string).collect(),
        object_ids: report.object_ids,
        schema_version: report.version,
    }
}

/// One bars file's chunks: source and checksum (first chunk) and its rows,
/// at most [`MAX_INGEST_ROWS`].
async fn read_bars(
    mut stream: Streaming<pb::IngestBarsChunk>,
) -> Result<(String, String, Vec<IngestRow>), Status> {
    let (mut source, mut checksum, mut rows) = (String::new(), String::new(), Vec::new());
    while let Some(chunk) = stream.message().await? {
        if source.is_empty() {
            source = chunk.source;
            checksum = chunk.checksum;
        }
        if rows.len() + chunk.rows.len() > MAX_INGEST_ROWS {
            return Err(ServiceError::invalid(format!(
                "rows: at most {MAX_INGEST_ROWS} rows per ingest"
            ))
            .into());
        }
        rows.extend(chunk.rows.into_iter().map(IngestRow::from));
    }
    Ok((source, checksum, rows))
}
