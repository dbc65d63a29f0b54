//! What a skill reads, and nothing more: prices, the symbol list, an
//! object's light curve, fundamentals, the peer screen and the caller's
//! strategies. The service implements it over the broker and its store; a
//! skill sees it through its [`crate::skills::Context`], so a skill can be
//! run against a fake.

use crate::store::StrategyRow;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;
use ithaca_proto::broker::v1 as bpb;

/// The data sources of a skill's run.
#[tonic::async_trait]
pub trait Sources: Send + Sync {
    /// Dates and adjusted closes of `symbol` between `start` and `end`
    /// (inclusive; default: all).
    async fn prices(
        &self,
        caller: &Principal,
        symbol: &str,
        start: Option<&str>,
        end: Option<&str>,
    ) -> Result<(Vec<String>, Vec<f64>), ServiceError>;

    /// Every symbol there is data for.
    async fn symbols(&self, caller: &Principal) -> Result<Vec<String>, ServiceError>;

    /// An object's light curve from a broker's alert archive.
    async fn light_curve(
        &self,
        caller: &Principal,
        broker_id: &str,
        object_id: &str,
    ) -> Result<bpb::LightCurve, ServiceError>;

    /// A company's line items and TTM values, point-in-time.
    async fn fundamentals(
        &self,
        caller: &Principal,
        request: bpb::GetFundamentalsRequest,
    ) -> Result<bpb::Fundamentals, ServiceError>;

    /// Symbols ranked by metrics at a date.
    async fn screen_peers(
        &self,
        caller: &Principal,
        request: bpb::ScreenPeersRequest,
    ) -> Result<bpb::PeerScreen, ServiceError>;

    /// One of the caller's strategies.
    async fn strategy(
        &self,
        caller: &Principal,
        strategy_id: &str,
    ) -> Result<StrategyRow, ServiceError>;
}
