//! The accounts domain: provider accounts of each tenant, their connection
//! details and credentials sealed at rest and never returned.

use super::store::{AccountRow, AccountStore};
use super::vault::Vault;
use ithaca_kit::clock;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::{Actor, Principal};

/// Provider accounts of each tenant.
#[derive(Clone, Debug)]
pub struct AccountService {
    store: AccountStore,
    /// Seals configs and credentials at rest.
    vault: Vault,
}

/// The public label of a provider id: what agents see instead of the id.
pub fn provider_label(provider: &str) -> String {
    match provider {
        "ibkr" => "Interactive Brokers (market data)".to_owned(),
        "alpaca" => "Alpaca".to_owned(),
        "polygon" => "Polygon".to_owned(),
        other => other.to_owned(),
    }
}

/// A new provider account.
#[derive(Clone, Debug, Default)]
pub struct NewAccount {
    pub tenant_id: String,
    pub provider: String,
    pub label: String,
    pub config: serde_json::Value,
    pub credential: String,
}

impl AccountService {
    pub fn new(store: AccountStore, vault: Vault) -> Self {
        AccountService { store, vault }
    }

    /// Store a provider account; its config and credential are sealed
    /// before they are written. Administrators only.
    pub async fn add_account(
        &self,
        caller: &Principal,
        account: NewAccount,
    ) -> Result<AccountRow, ServiceError> {
        if caller.actor() != Actor::System {
            return Err(ServiceError::denied(
                "only administrators add provider accounts",
            ));
        }
        let tenant_id = if account.tenant_id.is_empty() {
            caller.tenant_id().to_owned()
        } else {
            account.tenant_id.clone()
        };
        if tenant_id.is_empty() {
            return Err(ServiceError::invalid("tenant_id: required"));
        }
        let provider = account.provider.trim().to_ascii_lowercase();
        if provider.is_empty()
            || provider.len() > 32
            || !provider
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(ServiceError::invalid(
                "provider: 1-32 characters of a-z, 0-9, _ and -",
            ));
        }
        let label = account.label.trim();
        if label.is_empty() || label.chars().count() > 100 {
            return Err(ServiceError::invalid("label: 1 to 100 characters"));
        }
        if !matches!(
            account.config,
            serde_json::Value::Object(_) | serde_json::Value::Null
        ) {
            return Err(ServiceError::invalid("config: must be an object"));
        }
        if account.credential.len() > 8192 {
            return Err(ServiceError::invalid("credential: at most 8192 bytes"));
        }
        let credential =
            (!account.credential.is_empty()).then(|| self.vault.seal(&account.credential));
        let row = AccountRow {
            account_id: uuid::Uuid::new_v4().hyphenated().to_string(),
            tenant_id,
            provider,
            label: label.to_owned(),
            config: self.vault.seal(&account.config.to_string()),
            credential,
            created_at_ms: clock::now_ms(),
        };
        self.store.insert_account(&row).await?;
        // The account id and provider only: never the credential or config.
        tracing::info!(account_id = %row.account_id, provider = %row.provider, "provider account added");
        Ok(row)
    }

    /// The caller's tenant's accounts.
    pub async fn accounts(&self, caller: &Principal) -> Result<Vec<AccountRow>, ServiceError> {
        caller.tenant()?;
        Ok(self.store.accounts(caller.tenant_id()).await?)
    }

    /// An account's connection details, opened; `None` when they do not
    /// open (a foreign key, or a corrupted row).
    pub fn account_config(&self, account: &AccountRow) -> Option<serde_json::Value> {
        let plain = self.vault.open(&account.config).ok()?;
        serde_json::from_str(&plain).ok()
    }

    /// Seal every account config still stored in plaintext (rows written
    /// before configs were sealed). Run at start, before serving; running it
    /// again changes nothing, and replicas starting together seal each row
    /// once. Returns how many rows were sealed.
    pub async fn seal_account_configs(&self) -> Result<u64, ServiceError> {
        let sealed = self
            .store
            .rewrite_account_configs(|account_id, config| {
                if self.vault.open(config).is_ok() {
                    return None;
                }
                if serde_json::from_str::<serde_json::Value>(config).is_ok() {
                    return Some(self.vault.seal(config));
                }
                // Neither sealed with this key nor plaintext JSON: sealed
                // with another deployment's key, or damaged. Left as it is.
                tracing::warn!(%account_id, "an account config is neither sealed with this key nor JSON; left unchanged");
                None
            })
            .await?;
        if sealed > 0 {
            tracing::info!(
                accounts = sealed,
                "sealed provider account configs that were stored in plaintext"
            );
        }
        Ok(sealed)
    }

    /// Whether a stored credential still opens (a corrupted or foreign one
    /// counts as not configured).
    pub fn credential_configured(&self, account: &AccountRow) -> bool {
        account
            .credential
            .as_deref()
            .is_some_and(|c| self.vault.open(c).is_ok())
    }
}
