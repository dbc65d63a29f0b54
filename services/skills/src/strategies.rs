//! Strategies: proposed (checked, stored as a draft, `strategy_proposed`
//! traced), read, and promoted to paper or live by the approvals service.

use crate::model::{StrategyProposal, StrategyStatus};
use crate::service::{SkillsService, parse_id};
use crate::store::StrategyRow;
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::id::TenantId;
use ithaca_kit::principal::Principal;
use ithaca_proto::session::v1 as spb;
use serde_json::json;

impl SkillsService {
    /// Check a momentum strategy, store it as a draft and record
    /// `strategy_proposed` in the caller's session.
    pub async fn propose(
        &self,
        caller: &Principal,
        proposal: StrategyProposal,
    ) -> Result<StrategyRow, ServiceError> {
        let tenant_id = TenantId::of(caller)?;
        let (name, spec) = proposal.check()?;
        let known = self.known_symbols(caller).await?;
        if let Some(unknown) = spec.universe.iter().find(|s| !known.contains(s)) {
            return Err(ServiceError::not_found(format!(
                "universe: no market data for {unknown}; known symbols: {}",
                known.join(", ")
            ))
            .with_domain(DomainCode::UnknownSymbol));
        }
        let row = StrategyRow {
            strategy_id: uuid::Uuid::new_v4().hyphenated().to_string(),
            tenant_id,
            session_id: caller.session_id().unwrap_or_default().to_owned(),
            name,
            spec,
            status: StrategyStatus::Draft,
            created_at_ms: clock::now_ms(),
        };
        self.store.insert_strategy(&row).await?;
        let mut payload = row.spec.to_json();
        payload["strategy_id"] = json!(row.strategy_id);
        payload["name"] = json!(row.name);
        self.append(caller, spb::EventType::StrategyProposed, payload)
            .await;
        Ok(row)
    }

    pub async fn strategy(
        &self,
        caller: &Principal,
        strategy_id: &str,
    ) -> Result<StrategyRow, ServiceError> {
        let tenant_id = TenantId::of(caller)?;
        let strategy_id = parse_id("strategy_id", strategy_id)?;
        self.store
            .strategy(&tenant_id, &strategy_id)
            .await?
            .ok_or_else(|| {
                ServiceError::not_found(format!("strategy_id: no strategy {strategy_id}"))
                    .with_domain(DomainCode::UnknownStrategy)
            })
    }

    /// Move a strategy to paper or live (the approvals service does this
    /// once a person approved the promotion).
    /// Promote a strategy to paper or live. The approvals service has
    /// applied the policy and, for an agent, a person approved; with `check`
    /// (the approval gate's check) validate only and change nothing.
    pub async fn promote_strategy(
        &self,
        caller: &Principal,
        strategy_id: &str,
        mode: &str,
        check: bool,
    ) -> Result<StrategyRow, ServiceError> {
        let tenant_id = TenantId::of(caller)?;
        let status = match StrategyStatus::parse(mode) {
            Some(s @ (StrategyStatus::Paper | StrategyStatus::Live)) => s,
            _ => return Err(ServiceError::invalid("mode: must be paper or live")),
        };
        let strategy = self.strategy(caller, strategy_id).await?;
        if check {
            return Ok(strategy);
        }
        self.store
            .set_strategy_status(&tenant_id, &strategy.strategy_id, status)
            .await?;
        self.strategy(caller, &strategy.strategy_id).await
    }

    /// What promoting `strategy` to `mode` would do, for the person who
    /// approves it: the strategy's spec and its latest successful backtest.
    pub async fn promotion_summary(
        &self,
        strategy: &StrategyRow,
        mode: &str,
    ) -> Result<serde_json::Value, ServiceError> {
        let mut spec = strategy.spec.to_json();
        spec["name"] = json!(strategy.name);
        spec["strategy_id"] = json!(strategy.strategy_id);
        spec["status"] = json!(strategy.status.as_str());
        let backtest = self
            .store
            .latest_backtest(&strategy.tenant_id, &strategy.strategy_id)
            .await?;
        let backtest = match backtest {
            Some(run) => {
                let outputs: serde_json::Value = run
                    .outputs
                    .as_deref()
                    .and_then(|o| serde_json::from_str(o).ok())
                    .unwrap_or_default();
                let mut kept = json!({"run_id": run.run_id.as_str(), "uri": format!("doomberg://runs/{}", run.run_id.as_str())});
                for key in [
                    "start",
                    "end",
                    "total_return",
                    "cagr",
                    "volatility",
                    "sharpe",
                    "max_drawdown",
                    "buy_and_hold_return",
                    "excess_return",
                    "stopped_on",
                ] {
                    if let Some(v) = outputs.get(key) {
                        kept[key] = v.clone();
                    }
                }
                kept
            }
            None => {
                json!({"none": "no backtest of this strategy has succeeded; ask for one (run_skill backtest.momentum with its strategy_id)"})
            }
        };
        Ok(json!({
            "what": format!("promote strategy {:?} to {mode} trading", strategy.name),
            "strategy": spec,
            "latest_backtest": backtest,
        }))
    }
}
