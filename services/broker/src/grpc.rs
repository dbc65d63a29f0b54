//! The tonic adapter of `ithaca.broker.v1.BrokerService` (market data and
//! provider accounts): protobuf in, domain call, protobuf out. No logic here.

use crate::accounts::AccountService;
use crate::accounts::service::{NewAccount, provider_label};
use crate::accounts::store::AccountRow;
use crate::market::MarketService;
use crate::market::service::{HistoryQuery, IngestRow};
use crate::market::store::DatasetRow;
use crate::progress::Events;
use ithaca_kit::error::ServiceError;
use ithaca_kit::{clock, principal};
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::broker_service_server::BrokerService as Rpc;
use tonic::{Request, Response, Status, Streaming};

/// Largest ingest accepted, in rows.
const MAX_INGEST_ROWS: usize = 2_000_000;

/// The gRPC face of the market and accounts domains
/// (`ithaca.broker.v1.BrokerService`).
#[derive(Clone, Debug)]
pub struct Grpc {
    pub market: MarketService,
    pub accounts: AccountService,
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
