//! The auth domain: who may do what with tenants and keys, how tokens are
//! minted and verified.

use crate::model::{self, KeyActor, KeyId, Scope, SignInId, TokenParts};
use crate::store::{KeyRow, SignInRow, Store, TenantRow};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ithaca_kit::clock;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::id::TenantId;
use ithaca_kit::principal::{Actor, Principal};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// How often a key's last-used time is rewritten at most.
pub(crate) const LAST_USED_INTERVAL_MS: i64 = 10_000;

/// Whether a credential last used at `last_used_at_ms` (as read with it)
/// should be recorded as used at `now_ms`: not when it was recorded within
/// [`LAST_USED_INTERVAL_MS`], so a busy key's check stays a read and takes
/// no turn at the database's write gate. The update's own condition still
/// guards against another replica's write in between.
pub(crate) fn last_use_due(last_used_at_ms: Option<i64>, now_ms: i64) -> bool {
    last_used_at_ms.is_none_or(|at| at <= now_ms - LAST_USED_INTERVAL_MS)
}

/// The one answer for every token that does not verify, whatever the reason.
pub const INVALID_KEY: &str = "invalid api key";

/// A newly created key with its one-time token.
#[derive(Debug)]
pub struct NewKey {
    pub row: KeyRow,
    pub token: String,
}

/// What a verified token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub tenant_id: TenantId,
    pub key_id: KeyId,
    pub scopes: Vec<String>,
    pub actor: KeyActor,
    /// The resource an OAuth access token was issued for; empty for a key.
    pub resource: String,
}

/// What CreateKey needs.
#[derive(Debug, Default, Clone)]
pub struct KeySpec {
    pub tenant_id: String,
    pub scopes: Vec<String>,
    pub actor: Option<KeyActor>,
    pub label: String,
    pub env: String,
}

/// What a quota lease granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaLease {
    pub granted: i64,
    pub used: i64,
    /// Milliseconds until the window ends.
    pub resets_in_ms: i64,
}

/// The longest quota window: a month.
const MAX_WINDOW_MS: i64 = 31 * 24 * 3600 * 1000;

/// The most units one lease may ask for.
const MAX_WANT: i64 = 10_000;

/// How often ended quota windows are swept at most.
const SWEEP_INTERVAL_MS: i64 = 60_000;

/// Tenants and keys.
#[derive(Clone, Debug)]
pub struct AuthService {
    pub(crate) store: Store,
    /// Lifetimes of the authorization server's codes, tokens and
    /// registrations.
    pub(crate) oauth: crate::oauth_config::OAuthConfig,
    /// When expired codes and lapsed registrations were last swept.
    pub(crate) oauth_swept_at_ms: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// When ended quota windows were last swept (ms since the epoch), so
    /// the sweep runs about once a minute whatever the lease rate.
    swept_at_ms: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// When expired sign-ins were last swept, likewise.
    sign_ins_swept_at_ms: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl AuthService {
    pub fn new(store: Store) -> Self {
        AuthService {
            store,
            oauth: crate::oauth_config::OAuthConfig::default(),
            oauth_swept_at_ms: Default::default(),
            swept_at_ms: Default::default(),
            sign_ins_swept_at_ms: Default::default(),
        }
    }

    /// Take up to `want` units of `subject`'s budget of `limit` per window
    /// of `window_ms`. Windows are aligned to the epoch on this service's
    /// clock, so edges need no synchronised clocks.
    pub async fn lease_quota(
        &self,
        caller: &Principal,
        subject: &str,
        window_ms: i64,
        limit: i64,
        want: i64,
    ) -> Result<QuotaLease, ServiceError> {
        require_system(caller)?;
        if subject.is_empty() || subject.len() > 200 {
            return Err(ServiceError::invalid(
                "subject: must be 1 to 200 characters",
            ));
        }
        if !(1000..=MAX_WINDOW_MS).contains(&window_ms) {
            return Err(ServiceError::invalid(format!(
                "window_ms: must be 1000 to {MAX_WINDOW_MS}"
            )));
        }
        if limit < 1 {
            return Err(ServiceError::invalid("limit: must be at least 1"));
        }
        if !(1..=MAX_WANT).contains(&want) {
            return Err(ServiceError::invalid(format!(
                "want: must be 1 to {MAX_WANT}"
            )));
        }
        let now = clock::now_ms();
        let start = now - now.rem_euclid(window_ms);
        let leased = self
            .store
            .lease_quota(subject, window_ms, start, limit, want)
            .await?;
        self.sweep_quota(now).await;
        Ok(QuotaLease {
            granted: leased.granted,
            used: leased.used,
            resets_in_ms: start + window_ms - now,
        })
    }

    /// Delete ended windows, at most once per [`SWEEP_INTERVAL_MS`]. A
    /// failed sweep is retried by a later lease; it loses nothing.
    async fn sweep_quota(&self, now: i64) {
        if !due(&self.swept_at_ms, now) {
            return;
        }
        if let Err(error) = self.store.sweep_quota(now).await {
            tracing::warn!(%error, "sweeping ended quota windows failed");
        }
    }

    /// Open a console sign-in for the caller's own human key, for
    /// `ttl_secs` ([`model::MIN_SIGN_IN_SECS`] to [`model::MAX_SIGN_IN_SECS`]).
    pub async fn open_sign_in(
        &self,
        caller: &Principal,
        ttl_secs: i64,
    ) -> Result<SignInRow, ServiceError> {
        let key = self.own_human_key(caller).await?;
        let (min, max) = (model::MIN_SIGN_IN_SECS, model::MAX_SIGN_IN_SECS);
        if !(min..=max).contains(&ttl_secs) {
            return Err(ServiceError::invalid(format!(
                "ttl_secs: must be {min} to {max}"
            )));
        }
        let now = clock::now_ms();
        let row = SignInRow {
            sign_in_id: SignInId::parse(&hex::encode(rand::random::<[u8; 16]>()))?,
            key_id: key.key_id,
            tenant_id: key.tenant_id,
            created_at_ms: now,
            expires_at_ms: now + ttl_secs * 1000,
            ended_at_ms: None,
        };
        self.store.insert_sign_in(&row).await?;
        tracing::info!(tenant_id = %row.tenant_id, key_id = %row.key_id, "console sign-in opened");
        if due(&self.sign_ins_swept_at_ms, now)
            && let Err(error) = self.store.sweep_sign_ins(now).await
        {
            tracing::warn!(%error, "sweeping expired sign-ins failed");
        }
        Ok(row)
    }

    /// End a sign-in of the caller's own key (sign-out); ending it twice
    /// is accepted.
    pub async fn end_sign_in(
        &self,
        caller: &Principal,
        sign_in_id: &str,
    ) -> Result<SignInRow, ServiceError> {
        let key = self.own_human_key(caller).await?;
        let id = SignInId::parse(sign_in_id.trim())?;
        let row = self
            .store
            .end_sign_in(&key.key_id, &id, clock::now_ms())
            .await?
            .ok_or_else(|| ServiceError::not_found(format!("sign_in_id: no sign-in {id}")))?;
        tracing::info!(tenant_id = %row.tenant_id, key_id = %row.key_id, "console sign-in ended");
        Ok(row)
    }

    /// [`AuthService::verify`], and `sign_in_id` is an open sign-in of the
    /// token's key. Every failure is the same UNAUTHENTICATED.
    pub async fn verify_sign_in(
        &self,
        caller: &Principal,
        token: &str,
        sign_in_id: &str,
    ) -> Result<Verified, ServiceError> {
        let verified = self.verify(caller, token).await?;
        let unauthenticated = || ServiceError::new(Code::Unauthenticated, INVALID_KEY);
        let id = SignInId::parse(sign_in_id).map_err(|_| unauthenticated())?;
        match self.store.find_sign_in(&id).await? {
            Some(row) if row.key_id == verified.key_id && row.is_open(clock::now_ms()) => {
                Ok(verified)
            }
            _ => Err(unauthenticated()),
        }
    }

    /// One key of the tenant a caller administers, or that a system caller
    /// names: whether it is still active (the approvals service asks before
    /// an approved call runs as its requester).
    pub async fn get_key(
        &self,
        caller: &Principal,
        tenant_id: &str,
        key_id: &str,
    ) -> Result<KeyRow, ServiceError> {
        let tenant_id = self.target_tenant(caller, tenant_id).await?;
        let key_id = KeyId::parse(key_id.trim())?;
        if let Some(key) = self
            .store
            .find_key(&key_id)
            .await?
            .filter(|k| k.tenant_id == tenant_id)
        {
            return Ok(key);
        }
        // An OAuth access token acts with its grant's id as its key id, so
        // "is the requester's key still good" (the approvals service asks
        // before it runs an approved call) is answered for the grant: it
        // stands while neither it nor the consenting person's key is
        // revoked.
        if let Some(key) = self.grant_as_key(&key_id, &tenant_id).await? {
            return Ok(key);
        }
        // An external identity provider's token acts with an agent id the
        // edge derived and recorded (see `oauth_external`): live while its
        // newest token is unexpired and nobody revoked it here.
        match self.external_agent_as_key(&key_id, &tenant_id).await? {
            Some(key) => Ok(key),
            None => Err(ServiceError::not_found(format!("key_id: no key {key_id}"))),
        }
    }

    /// An OAuth grant of `tenant_id` as a key is listed: an agent with the
    /// grant's scopes, revoked when the grant or its consenting key is.
    async fn grant_as_key(
        &self,
        grant_id: &KeyId,
        tenant_id: &TenantId,
    ) -> Result<Option<KeyRow>, ServiceError> {
        let Some(grant) = self
            .store
            .find_grant(grant_id.as_str())
            .await?
            .filter(|g| g.tenant_id == tenant_id.as_str())
        else {
            return Ok(None);
        };
        let consenting = KeyId::parse(&grant.key_id)?;
        let key_revoked = match self.store.find_key(&consenting).await? {
            Some(key) => key.revoked_at_ms,
            None => Some(grant.created_at_ms),
        };
        Ok(Some(KeyRow {
            key_id: grant_id.clone(),
            tenant_id: tenant_id.clone(),
            env: "oauth".to_owned(),
            salt: String::new(),
            secret_hash: String::new(),
            scopes: grant.scopes,
            actor: KeyActor::Agent,
            label: format!("OAuth grant to {}", grant.client_id),
            created_at_ms: grant.created_at_ms,
            revoked_at_ms: grant.revoked_at_ms.or(key_revoked),
            last_used_at_ms: grant.last_used_at_ms,
        }))
    }

    /// The caller's own key, which must be an active human key: sign-ins
    /// are opened and ended by the person they belong to.
    pub(crate) async fn own_human_key(&self, caller: &Principal) -> Result<KeyRow, ServiceError> {
        if caller.actor() != Actor::Human {
            return Err(ServiceError::denied(
                "only a person signs in to the console (a human key)",
            ));
        }
        let key_id = KeyId::parse(caller.key_id())?;
        match self.store.find_key(&key_id).await? {
            Some(key) if key.tenant_id == caller.tenant_id() && key.revoked_at_ms.is_none() => {
                Ok(key)
            }
            _ => Err(ServiceError::new(Code::Unauthenticated, INVALID_KEY)),
        }
    }

    pub async fn create_tenant(
        &self,
        caller: &Principal,
        name: &str,
    ) -> Result<TenantRow, ServiceError> {
        require_system(caller)?;
        let name = name.trim();
        if name.is_empty() || name.len() > 200 {
            return Err(ServiceError::invalid("name: must be 1 to 200 characters"));
        }
        let row = TenantRow {
            tenant_id: TenantId::parse(&uuid::Uuid::new_v4().to_string())?,
            name: name.to_owned(),
            created_at_ms: clock::now_ms(),
        };
        self.store.insert_tenant(&row).await?;
        tracing::info!(tenant_id = %row.tenant_id, "tenant created");
        Ok(row)
    }

    pub async fn list_tenants(&self, caller: &Principal) -> Result<Vec<TenantRow>, ServiceError> {
        require_system(caller)?;
        Ok(self.store.list_tenants().await?)
    }

    pub async fn create_key(
        &self,
        caller: &Principal,
        spec: KeySpec,
    ) -> Result<NewKey, ServiceError> {
        let tenant_id = self.target_tenant(caller, &spec.tenant_id).await?;
        let actor = spec
            .actor
            .ok_or_else(|| {
                ServiceError::invalid(
                    "actor: unknown or missing; allowed values: human (ACTOR_HUMAN), agent (ACTOR_AGENT)",
                )
            })?;
        if spec.scopes.is_empty() {
            return Err(ServiceError::invalid(
                "scopes: at least one scope is required",
            ));
        }
        let mut scopes = Vec::new();
        for name in &spec.scopes {
            let scope = Scope::parse(name.trim())
                .map_err(|e| ServiceError::invalid(format!("scopes: {e}")))?;
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        scopes.sort();
        if scopes.contains(&Scope::ApprovalsDecide) && actor != KeyActor::Human {
            return Err(ServiceError::invalid(
                "scopes: approvals:decide can only be granted to a human key",
            ));
        }
        let env = if spec.env.is_empty() {
            "test"
        } else {
            spec.env.as_str()
        };
        let env = model::parse_env(env).map_err(|e| ServiceError::invalid(format!("env: {e}")))?;
        if spec.label.len() > 200 {
            return Err(ServiceError::invalid("label: at most 200 characters"));
        }

        let key_id = KeyId::parse(&uuid::Uuid::new_v4().simple().to_string())?;
        let secret = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
        let salt = hex::encode(rand::random::<[u8; 16]>());
        let row = KeyRow {
            key_id: key_id.clone(),
            tenant_id,
            env: env.to_owned(),
            secret_hash: hash_secret(&salt, &secret),
            salt,
            scopes: scopes
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" "),
            actor,
            label: spec.label.trim().to_owned(),
            created_at_ms: clock::now_ms(),
            revoked_at_ms: None,
            last_used_at_ms: None,
        };
        self.store.insert_key(&row).await?;
        tracing::info!(tenant_id = %row.tenant_id, key_id = %row.key_id, actor = %row.actor, "api key created");
        let token = format!("{}_{env}_{key_id}_{secret}", model::TOKEN_PREFIX);
        Ok(NewKey { row, token })
    }

    pub async fn list_keys(
        &self,
        caller: &Principal,
        tenant_id: &str,
        include_revoked: bool,
    ) -> Result<Vec<KeyRow>, ServiceError> {
        let tenant_id = self.target_tenant(caller, tenant_id).await?;
        Ok(self.store.list_keys(&tenant_id, include_revoked).await?)
    }

    pub async fn revoke_key(
        &self,
        caller: &Principal,
        tenant_id: &str,
        key_id: &str,
    ) -> Result<KeyRow, ServiceError> {
        let tenant_id = self.target_tenant(caller, tenant_id).await?;
        let key_id = KeyId::parse(key_id)?;
        let Some(row) = self
            .store
            .revoke_key(&tenant_id, &key_id, clock::now_ms())
            .await?
        else {
            // An external identity provider's agent: revoked here, its
            // tokens are refused by the edges from their next check.
            return self
                .revoke_external_agent(&key_id, &tenant_id)
                .await?
                .ok_or_else(|| ServiceError::not_found(format!("key_id: no key {key_id}")));
        };
        // Its console sign-ins end with it (verification refuses a revoked
        // key anyway; this makes the record say so too).
        let ended = self
            .store
            .end_sign_ins_of(&row.key_id, clock::now_ms())
            .await?;
        tracing::info!(tenant_id = %row.tenant_id, key_id = %row.key_id, sign_ins_ended = ended, "api key revoked");
        Ok(row)
    }

    /// Seed 000's verification: split, look up, refuse revoked, compare
    /// `sha256(salt + secret)` in constant time.
    pub async fn verify(&self, caller: &Principal, token: &str) -> Result<Verified, ServiceError> {
        require_system(caller)?;
        if token.starts_with(crate::oauth_config::ACCESS_PREFIX) {
            return self.verify_access_token(token).await;
        }
        let unauthenticated = || ServiceError::new(Code::Unauthenticated, INVALID_KEY);
        let Some(TokenParts {
            env,
            key_id,
            secret,
        }) = model::parse_token(token)
        else {
            return Err(unauthenticated());
        };
        // parse_token checked the id's shape already.
        let key_id = KeyId::parse(key_id).map_err(|_| unauthenticated())?;
        let Some(row) = self.store.find_key(&key_id).await? else {
            // Hash anyway so an unknown id costs what a known one does.
            let _ = hash_secret("0000000000000000", secret);
            return Err(unauthenticated());
        };
        let computed = hash_secret(&row.salt, secret);
        let matches: bool = computed.as_bytes().ct_eq(row.secret_hash.as_bytes()).into();
        if !matches || row.revoked_at_ms.is_some() || row.env != env {
            return Err(unauthenticated());
        }
        let actor = row.actor;
        let now = clock::now_ms();
        if last_use_due(row.last_used_at_ms, now)
            && let Err(err) = self
                .store
                .touch_last_used(&row.key_id, now, LAST_USED_INTERVAL_MS)
                .await
        {
            // Losing a last-used update must not fail a valid request.
            tracing::warn!(error = %err, key_id = %row.key_id, "recording last use failed");
        }
        Ok(Verified {
            tenant_id: row.tenant_id,
            key_id: row.key_id,
            scopes: row.scopes.split_whitespace().map(str::to_owned).collect(),
            actor,
            resource: String::new(),
        })
    }

    /// The tenant a key-administration call acts on. System callers name it;
    /// humans act on their own tenant only; agents may not administer keys.
    pub(crate) async fn target_tenant(
        &self,
        caller: &Principal,
        requested: &str,
    ) -> Result<TenantId, ServiceError> {
        let no_such_tenant = || ServiceError::not_found("tenant_id: no such tenant");
        let tenant_id = match caller.actor() {
            Actor::System => TenantId::parse(requested)?,
            Actor::Human if requested.is_empty() || requested == caller.tenant_id() => {
                TenantId::parse(caller.tenant_id()).map_err(|_| no_such_tenant())?
            }
            // Another tenant is indistinguishable from a missing one.
            Actor::Human => return Err(no_such_tenant()),
            Actor::Agent => {
                return Err(ServiceError::denied("agent keys cannot administer keys"));
            }
        };
        if !self.store.tenant_exists(&tenant_id).await? {
            return Err(no_such_tenant());
        }
        Ok(tenant_id)
    }
}

/// Whether a sweep last run at `*last` is due again at `now` (about once a
/// minute); the one caller that wins the swap runs it.
pub(crate) fn due(last: &std::sync::atomic::AtomicI64, now: i64) -> bool {
    use std::sync::atomic::Ordering;
    let before = last.load(Ordering::Relaxed);
    now - before >= SWEEP_INTERVAL_MS
        && last
            .compare_exchange(before, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

pub(crate) fn require_system(caller: &Principal) -> Result<(), ServiceError> {
    if caller.actor() == Actor::System {
        Ok(())
    } else {
        Err(ServiceError::denied("only system callers may do this"))
    }
}

/// `hex(sha256(salt + secret))`, the only form in which a secret is stored.
fn hash_secret(salt: &str, secret: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(salt.as_bytes());
    hasher.update(secret.as_bytes());
    hex::encode(hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::{LAST_USED_INTERVAL_MS, last_use_due};

    #[test]
    fn a_last_use_is_rewritten_once_per_interval() {
        let now = 1_000_000;
        assert!(last_use_due(None, now), "never recorded");
        assert!(!last_use_due(Some(now), now), "just recorded");
        assert!(!last_use_due(Some(now - LAST_USED_INTERVAL_MS + 1), now));
        assert!(last_use_due(Some(now - LAST_USED_INTERVAL_MS), now));
        // A clock that stepped back: recorded "in the future", not rewritten.
        assert!(!last_use_due(Some(now + 5_000), now));
    }
}
