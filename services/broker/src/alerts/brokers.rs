//! The broker registry: configuring a broker (its altdata and credential
//! sealed), listing brokers with what they hold, and finding the one a
//! call names.
use super::service::{AlertService, OPERATIONS, require_admin};
use super::store::{BrokerRow, BrokerStats};
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;
use serde_json::Value as Json;
use std::collections::HashMap;

/// A new broker.
#[derive(Clone, Debug, Default)]
pub struct NewBroker {
    pub broker_id: String,
    pub name: String,
    pub survey: String,
    pub operations: Vec<String>,
    pub altdata: Option<Json>,
    pub credential: String,
}

/// A broker as anyone may see it.
#[derive(Clone, Debug)]
pub struct BrokerView {
    pub row: BrokerRow,
    pub credential_configured: bool,
    pub stats: BrokerStats,
}

impl BrokerView {
    pub fn operations(&self) -> Vec<String> {
        self.row
            .operations
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }
}

impl AlertService {
    /// Configure a broker; its altdata and credential are sealed. Administrators only.
    pub async fn add_broker(
        &self,
        caller: &Principal,
        b: NewBroker,
    ) -> Result<BrokerView, ServiceError> {
        require_admin(caller, "configure brokers")?;
        let id = b.broker_id.trim().to_ascii_lowercase();
        if id.is_empty()
            || id.len() > 32
            || !id
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        {
            return Err(ServiceError::invalid(
                "broker_id: 1-32 characters of a-z, 0-9, _ and -",
            ));
        }
        let name = b.name.trim();
        if name.is_empty() || name.chars().count() > 100 {
            return Err(ServiceError::invalid("name: 1 to 100 characters"));
        }
        let mut operations = Vec::new();
        for op in &b.operations {
            let op = op.trim().to_ascii_lowercase();
            if !OPERATIONS.contains(&op.as_str()) {
                return Err(ServiceError::invalid(format!(
                    "operations: {op:?} is not one of {}",
                    OPERATIONS.join(", ")
                )));
            }
            if !operations.contains(&op) {
                operations.push(op);
            }
        }
        if b.credential.len() > 8192 {
            return Err(ServiceError::invalid("credential: at most 8192 bytes"));
        }
        let altdata = match &b.altdata {
            None | Some(Json::Null) => None,
            Some(v @ Json::Object(_)) => Some(self.vault.seal(&v.to_string())),
            Some(_) => return Err(ServiceError::invalid("altdata: must be an object")),
        };
        let survey = if b.survey.trim().is_empty() {
            "ZTF"
        } else {
            b.survey.trim()
        };
        let row = BrokerRow {
            broker_id: id.clone(),
            name: name.to_owned(),
            survey: survey.to_owned(),
            operations: operations.join(" "),
            altdata,
            credential: (!b.credential.is_empty()).then(|| self.vault.seal(&b.credential)),
            created_at_ms: clock::now_ms(),
        };
        if self.store.insert_broker(&row).await? == 0 {
            return Err(ServiceError::new(
                ithaca_kit::error::Code::AlreadyExists,
                format!("broker_id: a broker {id:?} exists already"),
            ));
        }
        // The id and operations only: never the altdata or credential.
        tracing::info!(broker_id = %row.broker_id, operations = %row.operations, "broker configured");
        Ok(self.view(row, BrokerStats::default()))
    }

    pub(super) fn view(&self, row: BrokerRow, stats: BrokerStats) -> BrokerView {
        let credential_configured = row
            .credential
            .as_deref()
            .is_some_and(|c| self.vault.open(c).is_ok());
        BrokerView {
            row,
            credential_configured,
            stats,
        }
    }

    /// Every broker with what it holds.
    pub async fn brokers(&self, caller: &Principal) -> Result<Vec<BrokerView>, ServiceError> {
        caller.tenant()?;
        let stats: HashMap<String, BrokerStats> = self
            .store
            .broker_stats()
            .await?
            .into_iter()
            .map(|s| (s.broker_id.clone(), s))
            .collect();
        Ok(self
            .store
            .brokers()
            .await?
            .into_iter()
            .map(|row| {
                let s = stats.get(&row.broker_id).cloned().unwrap_or_default();
                self.view(row, s)
            })
            .collect())
    }

    /// The broker `broker_id` if it answers `operation`; a refusal naming the
    /// field otherwise.
    pub async fn broker_for(
        &self,
        broker_id: &str,
        operation: &str,
    ) -> Result<BrokerRow, ServiceError> {
        let id = broker_id.trim();
        if id.is_empty() {
            return Err(ServiceError::invalid(
                "broker_id: required; list_brokers gives the brokers and what each answers",
            ));
        }
        let Some(row) = self.store.broker(id).await? else {
            let known: Vec<String> = self
                .store
                .brokers()
                .await?
                .into_iter()
                .map(|b| b.broker_id)
                .collect();
            return Err(ServiceError::not_found(format!(
                "broker_id: no broker {id:?}; brokers: {}",
                known.join(", ")
            ))
            .with_domain(DomainCode::UnknownBroker));
        };
        if !row.operations.split_whitespace().any(|op| op == operation) {
            return Err(ServiceError::invalid(format!(
                "broker_id: broker {id:?} does not answer the operation {operation:?}; it lists: {}",
                if row.operations.is_empty() { "nothing" } else { &row.operations }
            ))
            .with_domain(DomainCode::OperationNotSupported));
        }
        Ok(row)
    }
}
