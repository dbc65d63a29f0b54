//! Agents of external identity providers (the edge's `--oauth-issuer`).
//!
//! The edge verifies their JWT access tokens itself, with the issuer's
//! keys; auth never sees a token. But an approval an agent asks for runs
//! later, as that agent, and the approvals service asks auth (`GetKey`)
//! whether the requester can still act. So each edge records here every
//! agent whose token it verified, with the newest expiry it has seen
//! ([`AuthService::record_external_agent`]), and `GetKey` answers for the
//! agent id as for a key:
//!
//! - live while its newest token seen has not expired: an agent that keeps
//!   refreshing its tokens stays live; one that stopped, or whose identity
//!   provider stopped issuing it tokens, lapses with its last token (we
//!   cannot see a provider's revocation any sooner);
//! - revoked once a person or operator of the tenant revoked the agent id
//!   here (`RevokeKey`): the edges then refuse its tokens too.

use crate::model::{KeyActor, KeyId};
use crate::oauth_store::ExternalAgentRow;
use crate::service::{AuthService, require_system};
use crate::store::KeyRow;
use ithaca_kit::clock;
use ithaca_kit::error::ServiceError;
use ithaca_kit::id::TenantId;
use ithaca_kit::principal::Principal;

/// What an edge saw of a verified external token.
#[derive(Clone, Debug)]
pub struct ExternalAgent {
    pub tenant_id: String,
    pub agent_id: String,
    pub issuer: String,
    pub subject: String,
    pub client_id: String,
    pub scopes: Vec<String>,
    pub expires_at_ms: i64,
}

/// Longest issuer, subject or client recorded.
const MAX_FIELD: usize = 1024;

impl AuthService {
    /// Record an external agent's verified token; whether the agent was
    /// revoked here. System callers (the edges) only.
    pub async fn record_external_agent(
        &self,
        caller: &Principal,
        agent: ExternalAgent,
    ) -> Result<bool, ServiceError> {
        require_system(caller)?;
        let tenant_id = TenantId::parse(agent.tenant_id.trim())
            .map_err(|e| ServiceError::invalid(format!("tenant_id: {e}")))?;
        let key_id = KeyId::parse(agent.agent_id.trim())?;
        for (name, value) in [
            ("issuer", &agent.issuer),
            ("subject", &agent.subject),
            ("client_id", &agent.client_id),
        ] {
            if value.len() > MAX_FIELD {
                return Err(ServiceError::invalid(format!(
                    "{name}: at most {MAX_FIELD} bytes"
                )));
            }
        }
        if agent.issuer.is_empty() || agent.subject.is_empty() {
            return Err(ServiceError::invalid("issuer and subject: required"));
        }
        let now = clock::now_ms();
        self.store
            .record_external_agent(&ExternalAgentRow {
                tenant_id: tenant_id.to_string(),
                key_id: key_id.to_string(),
                issuer: agent.issuer,
                subject: agent.subject,
                client_id: agent.client_id,
                scopes: agent.scopes.join(" "),
                created_at_ms: now,
                last_seen_at_ms: now,
                expires_at_ms: agent.expires_at_ms,
                revoked_at_ms: None,
            })
            .await?;
        let row = self
            .store
            .find_external_agent(tenant_id.as_str(), key_id.as_str())
            .await?;
        Ok(row.is_some_and(|r| r.revoked_at_ms.is_some()))
    }

    /// An external agent of `tenant_id` as a key is listed: an agent with
    /// its newest token's scopes, revoked when revoked here or when that
    /// token expired (the time it expired).
    pub(crate) async fn external_agent_as_key(
        &self,
        key_id: &KeyId,
        tenant_id: &TenantId,
    ) -> Result<Option<KeyRow>, ServiceError> {
        let Some(row) = self
            .store
            .find_external_agent(tenant_id.as_str(), key_id.as_str())
            .await?
        else {
            return Ok(None);
        };
        let now = clock::now_ms();
        let lapsed = (row.expires_at_ms <= now).then_some(row.expires_at_ms);
        Ok(Some(KeyRow {
            key_id: key_id.clone(),
            tenant_id: tenant_id.clone(),
            env: "oauth".to_owned(),
            salt: String::new(),
            secret_hash: String::new(),
            scopes: row.scopes,
            actor: KeyActor::Agent,
            label: format!("external token from {}", row.issuer),
            created_at_ms: row.created_at_ms,
            revoked_at_ms: row.revoked_at_ms.or(lapsed),
            last_used_at_ms: Some(row.last_seen_at_ms),
        }))
    }

    /// Revoke an external agent of `tenant_id`; `None` when unknown.
    pub(crate) async fn revoke_external_agent(
        &self,
        key_id: &KeyId,
        tenant_id: &TenantId,
    ) -> Result<Option<KeyRow>, ServiceError> {
        let now = clock::now_ms();
        if self
            .store
            .revoke_external_agent(tenant_id.as_str(), key_id.as_str(), now)
            .await?
            == 0
        {
            return Ok(None);
        }
        tracing::info!(tenant_id = %tenant_id, key_id = %key_id, "external oauth agent revoked");
        self.external_agent_as_key(key_id, tenant_id).await
    }
}
