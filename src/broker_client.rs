//! The broker client the command line's ingest and setup steps use,
//! signed as the system. A leaf: every ingest module uses it.

use ithaca_kit::client::{self, Outbound};
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::broker::v1::broker_service_client::BrokerServiceClient;

/// A broker client signed as the system.
pub type Client = BrokerServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Outbound>,
>;

/// A broker client signed as the system.
pub fn broker_client(
    url: &str,
    key: InternalKey,
) -> anyhow::Result<
    BrokerServiceClient<
        tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Outbound>,
    >,
> {
    Ok(BrokerServiceClient::with_interceptor(
        client::channel(url)?,
        Outbound::new(key, Principal::system("")),
    )
    .max_encoding_message_size(32 * 1024 * 1024))
}
