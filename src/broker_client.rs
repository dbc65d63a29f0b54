//! The broker client the command line's ingest and setup steps use,
//! signed as the system. A leaf: every ingest module uses it.

use ithaca_kit::client::{self, Outbound};
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::broker::v1::broker_service_client::BrokerServiceClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A channel whose calls are signed as the system; any of the broker
/// process's services (broker, alerts, catalogs, GCN, fundamentals) is a
/// client over it.
pub type Signed = InterceptedService<Channel, Outbound>;

/// A broker client signed as the system.
pub type Client = BrokerServiceClient<Signed>;

/// The largest message a client built here sends (a whole chunk of a file).
pub const MAX_MESSAGE: usize = 32 * 1024 * 1024;

/// A channel to `url` signed as the system.
pub fn signed(url: &str, key: InternalKey) -> anyhow::Result<Signed> {
    Ok(InterceptedService::new(
        client::channel(url)?,
        Outbound::new(key, Principal::system("")),
    ))
}

/// The broker service over a signed channel.
pub fn broker(channel: Signed) -> Client {
    BrokerServiceClient::new(channel).max_encoding_message_size(MAX_MESSAGE)
}

/// A broker client signed as the system.
pub fn broker_client(url: &str, key: InternalKey) -> anyhow::Result<Client> {
    Ok(broker(signed(url, key)?))
}
