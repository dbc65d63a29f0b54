//! The token endpoint's half of the authorization server: exchanging a
//! code (single use, PKCE S256), rotating refresh tokens (a replay revokes
//! the grant) and revoking tokens (RFC 7009).

use crate::oauth::{
    Exchange, REFRESH_PREFIX, Tokens, hash, invalid_grant, new_id, s256, token_shape_ok,
    verifier_ok,
};
use crate::oauth_store::{CodeRow, GrantRow};
use crate::service::{AuthService, require_system};
use ithaca_kit::clock;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;
use subtle::ConstantTimeEq;

impl AuthService {
    /// Exchange a code for tokens: single use, unexpired, same client,
    /// same redirect URI, a verifier matching the S256 challenge.
    pub async fn exchange_code(
        &self,
        caller: &Principal,
        ex: Exchange,
    ) -> Result<Tokens, ServiceError> {
        require_system(caller)?;
        let code_hash = hash(&ex.code);
        let now = clock::now_ms();
        let code = self
            .store
            .find_code(&code_hash)
            .await?
            .ok_or_else(|| invalid_grant("code: unknown or expired"))?;
        if code.used_at_ms.is_some() {
            return Err(self.code_replayed(&code, now).await);
        }
        if now >= code.expires_at_ms {
            return Err(invalid_grant("code: expired"));
        }
        if code.client_id != ex.client_id {
            return Err(invalid_grant("code: issued to another client"));
        }
        if code.redirect_uri != ex.redirect_uri {
            return Err(invalid_grant(
                "redirect_uri: does not match the authorization request",
            ));
        }
        if !verifier_ok(&ex.code_verifier) {
            return Err(invalid_grant(
                "code_verifier: required, 43 to 128 unreserved characters",
            ));
        }
        let computed = s256(&ex.code_verifier);
        let matches: bool = computed
            .as_bytes()
            .ct_eq(code.code_challenge.as_bytes())
            .into();
        if !matches {
            return Err(invalid_grant("code_verifier: does not match the challenge"));
        }
        if !ex.resource.is_empty() && ex.resource != code.resource {
            return Err(invalid_grant(
                "resource: not the resource the code was issued for",
            ));
        }
        if self.store.use_code(&code_hash, now).await? == 0 {
            // Another exchange won the race: this one is a replay.
            let code = self.store.find_code(&code_hash).await?.unwrap_or(code);
            return Err(self.code_replayed(&code, now).await);
        }
        let key = self.active_key(&code.key_id, &code.tenant_id).await?;
        let Some(key) = key else {
            return Err(invalid_grant("code: the consenting key was revoked"));
        };
        let grant = GrantRow {
            grant_id: new_id(),
            tenant_id: key.tenant_id.to_string(),
            client_id: code.client_id.clone(),
            key_id: key.key_id.to_string(),
            scopes: code.scopes.clone(),
            resource: code.resource.clone(),
            created_at_ms: now,
            last_used_at_ms: None,
            revoked_at_ms: None,
        };
        self.store.insert_grant(&grant).await?;
        self.store
            .set_code_grant(&code_hash, &grant.grant_id)
            .await?;
        tracing::info!(grant_id = %grant.grant_id, client_id = %grant.client_id, tenant_id = %grant.tenant_id, "oauth grant created");
        self.mint(&grant, None, now).await
    }

    /// A used code was presented again: refuse, and revoke what the first
    /// exchange issued (the code may have been stolen).
    async fn code_replayed(&self, code: &CodeRow, now: i64) -> ServiceError {
        if let Some(grant_id) = &code.grant_id {
            match self.store.revoke_grant(grant_id, now).await {
                Ok(_) => tracing::warn!(%grant_id, "oauth code replayed; grant revoked"),
                Err(error) => {
                    tracing::error!(%error, %grant_id, "revoking a replayed code's grant failed")
                }
            }
        }
        invalid_grant("code: already used; the tokens issued for it are revoked")
    }

    /// Rotate a refresh token.
    pub async fn refresh(
        &self,
        caller: &Principal,
        refresh_token: &str,
        client_id: &str,
        scopes: &[String],
    ) -> Result<Tokens, ServiceError> {
        require_system(caller)?;
        let unknown = || invalid_grant("refresh_token: unknown, expired or revoked");
        if !token_shape_ok(refresh_token, REFRESH_PREFIX) {
            return Err(unknown());
        }
        let token_hash = hash(refresh_token);
        let now = clock::now_ms();
        let token = self
            .store
            .find_token(&token_hash)
            .await?
            .filter(|t| t.kind == "refresh")
            .ok_or_else(unknown)?;
        let grant = self
            .store
            .find_grant(&token.grant_id)
            .await?
            .ok_or_else(unknown)?;
        if grant.client_id != client_id {
            return Err(invalid_grant("refresh_token: issued to another client"));
        }
        if token.rotated_at_ms.is_some() {
            return Err(self.refresh_replayed(&grant.grant_id, now).await);
        }
        if token.revoked_at_ms.is_some() || grant.revoked_at_ms.is_some() {
            return Err(unknown());
        }
        if now >= token.expires_at_ms {
            return Err(unknown());
        }
        // RFC 6749 section 6: a `scope` on a refresh may only narrow. The
        // access token then carries just those; the grant (and the new
        // refresh token) keep everything the person allowed.
        let held: Vec<&str> = grant.scopes.split_whitespace().collect();
        if let Some(extra) = scopes.iter().find(|s| !held.contains(&s.as_str())) {
            return Err(ServiceError::invalid(format!(
                "scope: {extra} was not granted (invalid_scope)"
            )));
        }
        let narrowed = if scopes.is_empty() {
            None
        } else {
            // In the grant's order, each once.
            let asked: Vec<&str> = held
                .iter()
                .copied()
                .filter(|s| scopes.iter().any(|a| a == s))
                .collect();
            (asked.len() < held.len()).then(|| asked.join(" "))
        };
        if self
            .active_key(&grant.key_id, &grant.tenant_id)
            .await?
            .is_none()
        {
            return Err(unknown());
        }
        if self.store.rotate_token(&token_hash, now).await? == 0 {
            return Err(self.refresh_replayed(&grant.grant_id, now).await);
        }
        self.mint(&grant, narrowed, now).await
    }

    async fn refresh_replayed(&self, grant_id: &str, now: i64) -> ServiceError {
        match self.store.revoke_grant(grant_id, now).await {
            Ok(_) => tracing::warn!(%grant_id, "rotated refresh token replayed; grant revoked"),
            Err(error) => tracing::error!(%error, %grant_id, "revoking a replayed grant failed"),
        }
        invalid_grant("refresh_token: already used; the grant is revoked")
    }

    /// Revoke a token (RFC 7009): a refresh token takes its grant with it.
    /// Unknown tokens and other clients' tokens are accepted silently.
    pub async fn revoke_oauth_token(
        &self,
        caller: &Principal,
        token: &str,
        client_id: &str,
    ) -> Result<(), ServiceError> {
        require_system(caller)?;
        let now = clock::now_ms();
        let Some(row) = self.store.find_token(&hash(token)).await? else {
            return Ok(());
        };
        let Some(grant) = self.store.find_grant(&row.grant_id).await? else {
            return Ok(());
        };
        if grant.client_id != client_id {
            return Ok(());
        }
        if row.kind == "refresh" {
            self.store.revoke_grant(&grant.grant_id, now).await?;
        } else {
            self.store.revoke_token(&row.token_hash, now).await?;
        }
        tracing::info!(grant_id = %grant.grant_id, kind = %row.kind, "oauth token revoked");
        Ok(())
    }
}
