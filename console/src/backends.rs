//! The services the console calls, and how: every request signed with the
//! signed-in person's principal (never a system one), with a deadline.

use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::approvals::v1::approvals_service_client::ApprovalsServiceClient;
use ithaca_proto::auth::v1::auth_service_client::AuthServiceClient;
use ithaca_proto::auth::v1::o_auth_service_client::OAuthServiceClient;
use ithaca_proto::broker::v1::alert_service_client::AlertServiceClient;
use ithaca_proto::broker::v1::catalog_service_client::CatalogServiceClient;
use ithaca_proto::broker::v1::filter_service_client::FilterServiceClient;
use ithaca_proto::broker::v1::gcn_service_client::GcnServiceClient;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use ithaca_proto::skills::v1::skills_service_client::SkillsServiceClient;
use std::time::Duration;
use tonic::transport::Channel;

/// Channels to the services; a missing one makes its pages say so.
#[derive(Clone, Debug)]
pub struct Backends {
    pub auth: Channel,
    pub session: Option<Channel>,
    pub approvals: Option<Channel>,
    pub skills: Option<Channel>,
    /// The broker: its filters, GCN events, alerts and catalogs.
    pub broker: Option<Channel>,
    /// Deadline of each call.
    pub timeout: Duration,
}

/// Why a backend call failed, as a page shows it.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("this deployment has no {0} service")]
    Missing(&'static str),
    #[error(transparent)]
    Status(#[from] tonic::Status),
}

impl Backends {
    /// One channel per URL (connections are made lazily).
    pub fn from_urls(
        auth: &str,
        session: Option<&str>,
        approvals: Option<&str>,
        skills: Option<&str>,
        broker: Option<&str>,
        timeout: Duration,
    ) -> Result<Backends, ithaca_kit::client::BadUrl> {
        let channel = |url: Option<&str>| url.map(ithaca_kit::client::channel).transpose();
        Ok(Backends {
            auth: ithaca_kit::client::channel(auth)?,
            session: channel(session)?,
            approvals: channel(approvals)?,
            skills: channel(skills)?,
            broker: channel(broker)?,
            timeout,
        })
    }

    pub fn auth(&self) -> AuthServiceClient<Channel> {
        AuthServiceClient::new(self.auth.clone())
    }

    /// The auth service's authorization-server records.
    pub fn oauth(&self) -> OAuthServiceClient<Channel> {
        OAuthServiceClient::new(self.auth.clone())
    }

    pub fn session(&self) -> Result<SessionServiceClient<Channel>, CallError> {
        self.session
            .clone()
            .map(SessionServiceClient::new)
            .ok_or(CallError::Missing("session"))
    }

    pub fn approvals(&self) -> Result<ApprovalsServiceClient<Channel>, CallError> {
        self.approvals
            .clone()
            .map(ApprovalsServiceClient::new)
            .ok_or(CallError::Missing("approvals"))
    }

    pub fn skills(&self) -> Result<SkillsServiceClient<Channel>, CallError> {
        self.skills
            .clone()
            .map(SkillsServiceClient::new)
            .ok_or(CallError::Missing("skills"))
    }

    pub fn filters(&self) -> Result<FilterServiceClient<Channel>, CallError> {
        self.broker
            .clone()
            .map(FilterServiceClient::new)
            .ok_or(CallError::Missing("broker"))
    }

    pub fn alerts(&self) -> Result<AlertServiceClient<Channel>, CallError> {
        self.broker
            .clone()
            .map(AlertServiceClient::new)
            .ok_or(CallError::Missing("broker"))
    }

    pub fn catalogs(&self) -> Result<CatalogServiceClient<Channel>, CallError> {
        self.broker
            .clone()
            .map(CatalogServiceClient::new)
            .ok_or(CallError::Missing("broker"))
    }

    pub fn gcn(&self) -> Result<GcnServiceClient<Channel>, CallError> {
        self.broker
            .clone()
            .map(GcnServiceClient::new)
            .ok_or(CallError::Missing("broker"))
    }
}

/// A request for `principal`, signed with the internal key, with the
/// console's deadline.
pub fn signed<T>(
    key: &InternalKey,
    principal: &Principal,
    timeout: Duration,
    message: T,
) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    key.sign(&mut request, principal);
    request
}
