//! The tonic adapter of `ithaca.auth.v1.OAuthService`. No logic here.

use crate::oauth::{CodeSpec, Exchange, GrantView, Tokens};
use crate::oauth_store::ClientRow;
use crate::service::AuthService;
use ithaca_kit::clock;
use ithaca_kit::principal;
use ithaca_proto::auth::v1 as pb;
use ithaca_proto::auth::v1::o_auth_service_server::OAuthService as Rpc;
use tonic::{Request, Response, Status};

/// The gRPC face of the authorization server's half of [`AuthService`].
#[derive(Clone, Debug)]
pub struct OAuthGrpc {
    pub service: AuthService,
}

fn client(row: ClientRow) -> pb::OAuthClient {
    pb::OAuthClient {
        redirect_uris: row.redirect_uris(),
        client_id: row.client_id,
        client_name: row.client_name,
        kind: row.kind,
        created_at: clock::rfc3339(row.created_at_ms),
        expires_at: clock::rfc3339_opt(row.expires_at_ms),
    }
}

fn tokens(t: Tokens) -> pb::TokenResponse {
    pb::TokenResponse {
        access_token: t.access_token,
        refresh_token: t.refresh_token,
        expires_in: t.expires_in_secs,
        scope: t.scope,
        grant_id: t.grant_id,
    }
}

fn grant(g: GrantView) -> pb::Grant {
    let row = g.row;
    pb::Grant {
        scopes: row.scopes.split_whitespace().map(str::to_owned).collect(),
        grant_id: row.grant_id,
        tenant_id: row.tenant_id,
        client_id: row.client_id,
        client_name: g.client_name,
        key_id: row.key_id,
        resource: row.resource,
        created_at: clock::rfc3339(row.created_at_ms),
        last_used_at: clock::rfc3339_opt(row.last_used_at_ms),
        revoked_at: clock::rfc3339_opt(row.revoked_at_ms),
    }
}

#[tonic::async_trait]
impl Rpc for OAuthGrpc {
    async fn register_client(
        &self,
        request: Request<pb::RegisterClientRequest>,
    ) -> Result<Response<pb::OAuthClient>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let row = self
            .service
            .register_client(&caller, &req.client_name, &req.redirect_uris)
            .await?;
        Ok(Response::new(client(row)))
    }

    async fn put_metadata_client(
        &self,
        request: Request<pb::PutMetadataClientRequest>,
    ) -> Result<Response<pb::OAuthClient>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let row = self
            .service
            .put_metadata_client(
                &caller,
                &req.client_id,
                &req.client_name,
                &req.redirect_uris,
            )
            .await?;
        Ok(Response::new(client(row)))
    }

    async fn get_client(
        &self,
        request: Request<pb::GetClientRequest>,
    ) -> Result<Response<pb::OAuthClient>, Status> {
        let caller = principal::of(&request)?;
        let row = self
            .service
            .get_client(&caller, &request.get_ref().client_id)
            .await?;
        Ok(Response::new(client(row)))
    }

    async fn issue_code(
        &self,
        request: Request<pb::IssueCodeRequest>,
    ) -> Result<Response<pb::IssueCodeResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.into_inner();
        let spec = CodeSpec {
            client_id: req.client_id,
            redirect_uri: req.redirect_uri,
            code_challenge: req.code_challenge,
            resource: req.resource,
            scopes: req.scopes,
        };
        let code = self.service.issue_code(&caller, spec).await?;
        Ok(Response::new(pb::IssueCodeResponse {
            code: code.code,
            expires_in: code.expires_in_secs,
        }))
    }

    async fn exchange_code(
        &self,
        request: Request<pb::ExchangeCodeRequest>,
    ) -> Result<Response<pb::TokenResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.into_inner();
        let ex = Exchange {
            code: req.code,
            client_id: req.client_id,
            redirect_uri: req.redirect_uri,
            code_verifier: req.code_verifier,
            resource: req.resource,
        };
        let t = self.service.exchange_code(&caller, ex).await?;
        Ok(Response::new(tokens(t)))
    }

    async fn refresh_token(
        &self,
        request: Request<pb::RefreshTokenRequest>,
    ) -> Result<Response<pb::TokenResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let t = self
            .service
            .refresh(&caller, &req.refresh_token, &req.client_id, &req.scopes)
            .await?;
        Ok(Response::new(tokens(t)))
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        self.service
            .revoke_oauth_token(&caller, &req.token, &req.client_id)
            .await?;
        Ok(Response::new(pb::RevokeTokenResponse {}))
    }

    async fn list_grants(
        &self,
        request: Request<pb::ListGrantsRequest>,
    ) -> Result<Response<pb::ListGrantsResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let rows = self
            .service
            .list_grants(&caller, &req.tenant_id, req.include_revoked)
            .await?;
        Ok(Response::new(pb::ListGrantsResponse {
            grants: rows.into_iter().map(grant).collect(),
        }))
    }

    async fn revoke_grant(
        &self,
        request: Request<pb::RevokeGrantRequest>,
    ) -> Result<Response<pb::Grant>, Status> {
        let caller = principal::of(&request)?;
        let g = self
            .service
            .revoke_grant(&caller, &request.get_ref().grant_id)
            .await?;
        Ok(Response::new(grant(g)))
    }
}
