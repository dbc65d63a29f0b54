//! Whether a tenant exists, asked of the auth service (`ListTenants` as
//! the system) and cached: tenants are never deleted, so a known one stays
//! known for [`KNOWN_FOR`]; an unknown one makes the list be read again, at
//! most once per [`MISS_INTERVAL`], so a stream of made-up tenants costs
//! auth one query per interval.

use futures::future::BoxFuture;
use ithaca_kit::client::Outbound;
use ithaca_proto::auth::v1 as pb;
use ithaca_proto::auth::v1::auth_service_client::AuthServiceClient;
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// How long the list read is trusted for tenants found in it.
pub const KNOWN_FOR: Duration = Duration::from_secs(5 * 60);

/// The shortest pause between two reads caused by unknown tenants.
pub const MISS_INTERVAL: Duration = Duration::from_secs(1);

/// The auth service's tenants.
pub struct AuthTenants {
    client: AuthServiceClient<InterceptedService<Channel, Outbound>>,
    timeout: Duration,
    /// One read at a time.
    load: tokio::sync::Mutex<()>,
    cache: Mutex<(HashSet<String>, Option<Instant>)>,
}

impl AuthTenants {
    /// `client` must sign as the system (the edge's authenticator does).
    pub fn new(
        client: AuthServiceClient<InterceptedService<Channel, Outbound>>,
        timeout: Duration,
    ) -> Self {
        AuthTenants {
            client,
            timeout,
            load: tokio::sync::Mutex::new(()),
            cache: Mutex::new((HashSet::new(), None)),
        }
    }

    /// `Some(answer)` when the cache can answer.
    fn cached(&self, tenant_id: &str, interval: Duration) -> Option<bool> {
        let cache = self.cache.lock().ok()?;
        let read = cache.1?;
        if cache.0.contains(tenant_id) && read.elapsed() < KNOWN_FOR {
            return Some(true);
        }
        (read.elapsed() < interval).then_some(false)
    }

    async fn read(&self) -> Result<(), String> {
        let mut request = tonic::Request::new(pb::ListTenantsRequest {});
        request.set_timeout(self.timeout);
        let mut client = self.client.clone();
        let reply = tokio::time::timeout(self.timeout, client.list_tenants(request))
            .await
            .map_err(|_| "the auth service did not list tenants in time".to_owned())?
            .map_err(|status| format!("listing tenants: {}", status.message()))?;
        let ids = reply
            .into_inner()
            .tenants
            .into_iter()
            .map(|t| t.tenant_id)
            .collect();
        if let Ok(mut cache) = self.cache.lock() {
            *cache = (ids, Some(Instant::now()));
        }
        Ok(())
    }
}

impl super::Tenants for AuthTenants {
    fn record<'a>(&'a self, agent: &'a super::SeenAgent) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let mut request = tonic::Request::new(pb::RecordExternalAgentRequest {
                tenant_id: agent.tenant_id.clone(),
                agent_id: agent.agent_id.clone(),
                issuer: agent.issuer.clone(),
                subject: agent.subject.clone(),
                client_id: agent.client_id.clone(),
                scopes: agent.scopes.clone(),
                expires_at_ms: agent.expires_at_ms,
            });
            request.set_timeout(self.timeout);
            let mut client = self.client.clone();
            let reply = tokio::time::timeout(self.timeout, client.record_external_agent(request))
                .await
                .map_err(|_| "the auth service did not record the agent in time".to_owned())?
                .map_err(|status| format!("recording the agent: {}", status.message()))?;
            Ok(reply.into_inner().revoked)
        })
    }

    fn exists<'a>(&'a self, tenant_id: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            if let Some(known) = self.cached(tenant_id, MISS_INTERVAL) {
                return Ok(known);
            }
            let _reading = self.load.lock().await;
            // Read by another request while this one waited?
            if let Some(known) = self.cached(tenant_id, MISS_INTERVAL) {
                return Ok(known);
            }
            self.read().await?;
            Ok(self.cached(tenant_id, Duration::MAX).unwrap_or(false))
        })
    }
}
