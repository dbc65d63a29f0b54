//! What the skills service asks of other services, over gRPC and on behalf
//! of the caller: prices, symbols, fundamentals and the peer screen from
//! the broker, trace events to and
//! from the session service.

use crate::service::SkillsService;
use crate::store::RunRow;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::json;
use ithaca_kit::principal::Principal;
use ithaca_proto::broker::v1 as bpb;
use ithaca_proto::broker::v1::alert_service_client::AlertServiceClient;
use ithaca_proto::broker::v1::broker_service_client::BrokerServiceClient;
use ithaca_proto::broker::v1::fundamentals_service_client::FundamentalsServiceClient;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use serde_json::{Value, json};
use tonic::transport::Channel;

impl SkillsService {
    /// The run's events in its research session (its run transitions), read
    /// from the session service as the caller.
    pub async fn run_trace(&self, caller: &Principal, run: &RunRow) -> Vec<Value> {
        let Some(channel) = &self.session else {
            return Vec::new();
        };
        if run.session_id.is_empty() {
            return Vec::new();
        }
        let mut request = tonic::Request::new(spb::ReadEventsRequest {
            session_id: run.session_id.clone(),
            after_seq: 0,
            limit: Some(1000),
        });
        self.key.sign(&mut request, caller);
        match SessionServiceClient::new(channel.clone()).read_events(request).await {
            Ok(reply) => reply
                .into_inner()
                .events
                .into_iter()
                .filter_map(|e| {
                    let payload = e.payload.map(json::from_struct).unwrap_or(Value::Null);
                    (payload["run_id"] == json!(run.run_id.as_str())).then(|| {
                        json!({"seq": e.seq, "type": e.r#type, "payload": payload, "created_at": e.created_at})
                    })
                })
                .collect(),
            Err(status) => {
                tracing::warn!(error = %status.message(), "reading the run's trace failed");
                Vec::new()
            }
        }
    }

    /// Append an event to the caller's session, when there is one.
    pub(crate) async fn append(&self, caller: &Principal, kind: spb::EventType, payload: Value) {
        let (Some(channel), Some(session_id)) = (&self.session, caller.session_id()) else {
            return;
        };
        let mut request = tonic::Request::new(spb::AppendEventRequest {
            session_id: session_id.to_owned(),
            r#type: kind as i32,
            payload: Some(json::to_struct(payload)),
            payload_json: Vec::new(),
        });
        self.key.sign(&mut request, caller);
        if let Err(status) = SessionServiceClient::new(channel.clone())
            .append_event(request)
            .await
        {
            tracing::warn!(error = %status.message(), event = ?kind, "recording a trace event failed");
        }
    }

    fn broker(&self) -> Result<BrokerServiceClient<Channel>, ServiceError> {
        let channel = self.broker.clone().ok_or_else(|| {
            ServiceError::new(Code::Unavailable, "no broker service is configured")
        })?;
        Ok(BrokerServiceClient::new(channel))
    }

    /// Every symbol the broker has data for.
    pub(crate) async fn known_symbols(
        &self,
        caller: &Principal,
    ) -> Result<Vec<String>, ServiceError> {
        let mut request = tonic::Request::new(bpb::ListSymbolsRequest {});
        self.key.sign(&mut request, caller);
        let list = self
            .broker()?
            .list_symbols(request)
            .await
            .map_err(from_status)?
            .into_inner();
        Ok(list.symbols.into_iter().map(|s| s.symbol).collect())
    }

    /// Adjusted closes of `symbol` (dates and prices), through the broker.
    pub(crate) async fn prices(
        &self,
        caller: &Principal,
        symbol: &str,
        start: Option<&str>,
        end: Option<&str>,
    ) -> Result<(Vec<String>, Vec<f64>), ServiceError> {
        let mut request = tonic::Request::new(bpb::GetPriceHistoryRequest {
            symbol: symbol.to_owned(),
            start: start.map(str::to_owned),
            end: end.map(str::to_owned),
            fields: vec!["adj_close".to_owned()],
            limit: Some(5000),
            cursor: None,
        });
        self.key.sign(&mut request, caller);
        let history = self
            .broker()?
            .get_price_history(request)
            .await
            .map_err(from_status)?
            .into_inner();
        let (dates, prices) = history
            .bars
            .into_iter()
            .filter_map(|b| b.adj_close.map(|p| (b.date, p)))
            .unzip();
        Ok((dates, prices))
    }
}

impl SkillsService {
    /// The broker's alert service (served by the broker process, on the
    /// same channel).
    fn alerts_client(&self) -> Result<AlertServiceClient<Channel>, ServiceError> {
        let channel = self.broker.clone().ok_or_else(|| {
            ServiceError::new(Code::Unavailable, "no broker service is configured")
        })?;
        Ok(AlertServiceClient::new(channel))
    }

    /// An object's light curve from `broker_id` (detections, upper limits
    /// and forced photometry, de-duplicated and sorted), through the broker.
    pub(crate) async fn light_curve(
        &self,
        caller: &Principal,
        broker_id: &str,
        object_id: &str,
    ) -> Result<bpb::LightCurve, ServiceError> {
        let mut request = tonic::Request::new(bpb::GetBrokerAlertPhotometryRequest {
            broker_id: broker_id.to_owned(),
            object_id: object_id.to_owned(),
            include_forced: Some(false),
            // Features read the whole curve, not the agent's default page.
            limit: Some(5000),
            cursor: None,
        });
        self.key.sign(&mut request, caller);
        self.alerts_client()?
            .get_broker_alert_photometry(request)
            .await
            .map_err(|status| {
                ServiceError::from_status(
                    &status,
                    &[
                        DomainCode::UnknownBroker,
                        DomainCode::UnknownObject,
                        DomainCode::OperationNotSupported,
                    ],
                )
            })
            .map(tonic::Response::into_inner)
    }
}

impl SkillsService {
    /// The broker's fundamentals service (served by the broker process, on
    /// the same channel).
    fn fundamentals_client(&self) -> Result<FundamentalsServiceClient<Channel>, ServiceError> {
        let channel = self.broker.clone().ok_or_else(|| {
            ServiceError::new(Code::Unavailable, "no broker service is configured")
        })?;
        Ok(FundamentalsServiceClient::new(channel))
    }

    /// A company's line items as known on `as_of`, through the broker.
    pub(crate) async fn fundamentals(
        &self,
        caller: &Principal,
        request: bpb::GetFundamentalsRequest,
    ) -> Result<bpb::Fundamentals, ServiceError> {
        let mut request = tonic::Request::new(request);
        self.key.sign(&mut request, caller);
        self.fundamentals_client()?
            .get_fundamentals(request)
            .await
            .map_err(from_status)
            .map(tonic::Response::into_inner)
    }

    /// The broker's peer screen at a date.
    pub(crate) async fn screen_peers(
        &self,
        caller: &Principal,
        request: bpb::ScreenPeersRequest,
    ) -> Result<bpb::PeerScreen, ServiceError> {
        let mut request = tonic::Request::new(request);
        self.key.sign(&mut request, caller);
        self.fundamentals_client()?
            .screen_peers(request)
            .await
            .map_err(from_status)
            .map(tonic::Response::into_inner)
    }
}

/// A broker error, passed on with its code and domain.
fn from_status(status: tonic::Status) -> ServiceError {
    ServiceError::from_status(&status, &[DomainCode::UnknownSymbol, DomainCode::NoData])
}
