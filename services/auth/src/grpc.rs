//! The tonic adapter: protobuf in, domain call, protobuf out. No logic here.

use crate::model::KeyActor;
use crate::service::Verified;
use crate::service::{AuthService, KeySpec};
use crate::store::{KeyRow, SignInRow, TenantRow};
use ithaca_kit::clock;
use ithaca_kit::principal;
use ithaca_proto::auth::v1 as pb;
use ithaca_proto::auth::v1::auth_service_server::AuthService as Rpc;
use tonic::{Request, Response, Status};

/// The gRPC face of [`AuthService`].
#[derive(Clone, Debug)]
pub struct Grpc {
    pub service: AuthService,
}

fn tenant(row: TenantRow) -> pb::Tenant {
    pb::Tenant {
        tenant_id: row.tenant_id.into(),
        name: row.name,
        created_at: clock::rfc3339(row.created_at_ms),
    }
}

fn actor_to_pb(actor: KeyActor) -> i32 {
    match actor {
        KeyActor::Human => pb::Actor::Human as i32,
        KeyActor::Agent => pb::Actor::Agent as i32,
    }
}

fn actor_from_pb(actor: i32) -> Option<KeyActor> {
    match pb::Actor::try_from(actor) {
        Ok(pb::Actor::Human) => Some(KeyActor::Human),
        Ok(pb::Actor::Agent) => Some(KeyActor::Agent),
        _ => None,
    }
}

/// A key as listed: the salt and hash are dropped here, at the boundary.
fn api_key(row: KeyRow) -> pb::ApiKey {
    pb::ApiKey {
        actor: actor_to_pb(row.actor),
        key_id: row.key_id.into(),
        tenant_id: row.tenant_id.into(),
        env: row.env,
        scopes: row.scopes.split_whitespace().map(str::to_owned).collect(),
        label: row.label,
        created_at: clock::rfc3339(row.created_at_ms),
        revoked_at: clock::rfc3339_opt(row.revoked_at_ms),
        last_used_at: clock::rfc3339_opt(row.last_used_at_ms),
    }
}

fn sign_in(row: SignInRow) -> pb::SignIn {
    pb::SignIn {
        sign_in_id: row.sign_in_id.into(),
        key_id: row.key_id.into(),
        tenant_id: row.tenant_id.into(),
        created_at: clock::rfc3339(row.created_at_ms),
        expires_at: clock::rfc3339(row.expires_at_ms),
        ended_at: clock::rfc3339_opt(row.ended_at_ms),
    }
}

fn verified(v: Verified) -> pb::VerifyKeyResponse {
    pb::VerifyKeyResponse {
        tenant_id: v.tenant_id.into(),
        key_id: v.key_id.into(),
        scopes: v.scopes,
        actor: actor_to_pb(v.actor),
        resource: v.resource,
    }
}

#[tonic::async_trait]
impl Rpc for Grpc {
    async fn create_tenant(
        &self,
        request: Request<pb::CreateTenantRequest>,
    ) -> Result<Response<pb::Tenant>, Status> {
        let caller = principal::of(&request)?;
        let row = self
            .service
            .create_tenant(&caller, &request.get_ref().name)
            .await?;
        Ok(Response::new(tenant(row)))
    }

    async fn list_tenants(
        &self,
        request: Request<pb::ListTenantsRequest>,
    ) -> Result<Response<pb::ListTenantsResponse>, Status> {
        let caller = principal::of(&request)?;
        let rows = self.service.list_tenants(&caller).await?;
        Ok(Response::new(pb::ListTenantsResponse {
            tenants: rows.into_iter().map(tenant).collect(),
        }))
    }

    async fn create_key(
        &self,
        request: Request<pb::CreateKeyRequest>,
    ) -> Result<Response<pb::CreateKeyResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.into_inner();
        let spec = KeySpec {
            actor: actor_from_pb(req.actor),
            tenant_id: req.tenant_id,
            scopes: req.scopes,
            label: req.label,
            env: req.env,
        };
        let created = self.service.create_key(&caller, spec).await?;
        Ok(Response::new(pb::CreateKeyResponse {
            key: Some(api_key(created.row)),
            token: created.token,
        }))
    }

    async fn list_keys(
        &self,
        request: Request<pb::ListKeysRequest>,
    ) -> Result<Response<pb::ListKeysResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let rows = self
            .service
            .list_keys(&caller, &req.tenant_id, req.include_revoked)
            .await?;
        Ok(Response::new(pb::ListKeysResponse {
            keys: rows.into_iter().map(api_key).collect(),
        }))
    }

    async fn revoke_key(
        &self,
        request: Request<pb::RevokeKeyRequest>,
    ) -> Result<Response<pb::ApiKey>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let row = self
            .service
            .revoke_key(&caller, &req.tenant_id, &req.key_id)
            .await?;
        Ok(Response::new(api_key(row)))
    }

    async fn verify_key(
        &self,
        request: Request<pb::VerifyKeyRequest>,
    ) -> Result<Response<pb::VerifyKeyResponse>, Status> {
        let caller = principal::of(&request)?;
        let v = self
            .service
            .verify(&caller, &request.get_ref().token)
            .await?;
        Ok(Response::new(verified(v)))
    }

    async fn verify_sign_in(
        &self,
        request: Request<pb::VerifySignInRequest>,
    ) -> Result<Response<pb::VerifyKeyResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let v = self
            .service
            .verify_sign_in(&caller, &req.token, &req.sign_in_id)
            .await?;
        Ok(Response::new(verified(v)))
    }

    async fn record_external_agent(
        &self,
        request: Request<pb::RecordExternalAgentRequest>,
    ) -> Result<Response<pb::RecordExternalAgentResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.into_inner();
        let revoked = self
            .service
            .record_external_agent(
                &caller,
                crate::oauth_external::ExternalAgent {
                    tenant_id: req.tenant_id,
                    agent_id: req.agent_id,
                    issuer: req.issuer,
                    subject: req.subject,
                    client_id: req.client_id,
                    scopes: req.scopes,
                    expires_at_ms: req.expires_at_ms,
                },
            )
            .await?;
        Ok(Response::new(pb::RecordExternalAgentResponse { revoked }))
    }

    async fn get_key(
        &self,
        request: Request<pb::GetKeyRequest>,
    ) -> Result<Response<pb::ApiKey>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let row = self
            .service
            .get_key(&caller, &req.tenant_id, &req.key_id)
            .await?;
        Ok(Response::new(api_key(row)))
    }

    async fn open_sign_in(
        &self,
        request: Request<pb::OpenSignInRequest>,
    ) -> Result<Response<pb::SignIn>, Status> {
        let caller = principal::of(&request)?;
        let row = self
            .service
            .open_sign_in(&caller, request.get_ref().ttl_secs)
            .await?;
        Ok(Response::new(sign_in(row)))
    }

    async fn end_sign_in(
        &self,
        request: Request<pb::EndSignInRequest>,
    ) -> Result<Response<pb::SignIn>, Status> {
        let caller = principal::of(&request)?;
        let row = self
            .service
            .end_sign_in(&caller, &request.get_ref().sign_in_id)
            .await?;
        Ok(Response::new(sign_in(row)))
    }

    async fn lease_quota(
        &self,
        request: Request<pb::LeaseQuotaRequest>,
    ) -> Result<Response<pb::LeaseQuotaResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let lease = self
            .service
            .lease_quota(&caller, &req.subject, req.window_ms, req.limit, req.want)
            .await?;
        Ok(Response::new(pb::LeaseQuotaResponse {
            granted: lease.granted,
            used: lease.used,
            resets_in_ms: lease.resets_in_ms,
        }))
    }
}
