//! The skills domain: discovery over the catalog, runs with a state
//! machine (draft → queued → running → succeeded | failed), artifacts, and
//! the `run_transition` trace of every step. Market data comes from the
//! broker over gRPC, on behalf of the caller.

use crate::catalog::{self, Manifest};
use crate::compute;
use crate::plot;
use crate::store::{ArtifactRow, RunRow, Store, StrategyRow};
use crate::validate;
use ithaca_kit::clock;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::json;
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::broker::v1 as bpb;
use ithaca_proto::broker::v1::broker_service_client::BrokerServiceClient;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use tonic::transport::Channel;

/// Where the skills service finds the services it calls.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub broker_url: Option<String>,
    pub session_url: Option<String>,
}

/// A run with its artifacts.
#[derive(Clone, Debug)]
pub struct RunView {
    pub run: RunRow,
    pub artifacts: Vec<ArtifactRow>,
    pub jobs: Vec<crate::store::JobRow>,
}

/// A proposed strategy, before checking.
#[derive(Clone, Debug, Default)]
pub struct StrategySpec {
    pub name: String,
    pub universe: Vec<String>,
    pub lookback: i32,
    pub rebalance: i32,
    pub max_weight: Option<f64>,
    pub max_drawdown: Option<f64>,
    pub cost_bps: Option<f64>,
}

/// What a computation produced.
struct Produced {
    outputs: Value,
    artifacts: Vec<(String, &'static str, String)>,
}

/// Skills and runs.
#[derive(Clone, Debug)]
pub struct SkillsService {
    store: Store,
    key: InternalKey,
    broker: Option<Channel>,
    session: Option<Channel>,
    /// Wakes the background worker when a batch run is queued.
    wake: std::sync::Arc<tokio::sync::Notify>,
}

/// A run `running` for longer than this was left by a stopped worker.
const STALE_RUN_MS: i64 = 10 * 60 * 1000;

impl SkillsService {
    pub fn new(
        store: Store,
        key: InternalKey,
        config: &Config,
    ) -> Result<Self, ithaca_kit::client::BadUrl> {
        let channel =
            |url: &Option<String>| url.as_deref().map(ithaca_kit::client::channel).transpose();
        Ok(SkillsService {
            store,
            key,
            broker: channel(&config.broker_url)?,
            session: channel(&config.session_url)?,
            wake: std::sync::Arc::new(tokio::sync::Notify::new()),
        })
    }

    /// Matching skills (best first), how many matched, and whether the list
    /// was cut at `limit`.
    pub fn search(
        &self,
        query: Option<&str>,
        asset_class: Option<&str>,
        intent: Option<&str>,
        limit: Option<i32>,
    ) -> Result<(Vec<Manifest>, usize, bool), ServiceError> {
        let limit = match limit {
            None => 10,
            Some(n) if !(1..=50).contains(&n) => {
                return Err(ServiceError::invalid("limit: must be between 1 and 50"));
            }
            Some(n) => n as usize,
        };
        let mut hits = catalog::search(query, asset_class, intent);
        let count = hits.len();
        hits.truncate(limit);
        Ok((hits, count, count > limit))
    }

    pub fn describe(
        &self,
        skill_id: &str,
        version: Option<&str>,
    ) -> Result<Manifest, ServiceError> {
        catalog::find(skill_id, version).ok_or_else(|| unknown_skill(skill_id, version))
    }

    /// Validate inputs and record the run. Interactive skills run within the
    /// call; batch skills are queued for the background worker and the run
    /// comes back `queued` (follow it with get_run or subscribe_run).
    pub async fn run(
        &self,
        caller: &Principal,
        skill_id: &str,
        version: Option<&str>,
        inputs: Value,
    ) -> Result<RunView, ServiceError> {
        let tenant_id = tenant(caller)?;
        let manifest = self.describe(skill_id, version)?;
        let inputs = validate::inputs(&manifest.input_schema, inputs)?;
        let now = clock::now_ms();
        let run = RunRow {
            run_id: uuid::Uuid::new_v4().hyphenated().to_string(),
            tenant_id: tenant_id.to_owned(),
            session_id: caller.session_id.clone().unwrap_or_default(),
            skill_id: manifest.skill_id.to_owned(),
            version: manifest.version.to_owned(),
            inputs: Value::Object(inputs).to_string(),
            status: "queued".to_owned(),
            outputs: None,
            error: String::new(),
            created_at_ms: now,
            updated_at_ms: now,
            requester: serde_json::to_string(caller).map_err(|e| ServiceError::internal(&e))?,
        };
        self.store.insert_run(&run).await?;
        self.trace(caller, &run, "draft", "queued", None).await;
        if manifest.profile == "batch" {
            self.wake.notify_one();
            return self.get_run(caller, &run.run_id).await;
        }
        match self.execute(caller, &run).await {
            Some(err) => Err(ServiceError {
                // The caller learns why, and which run recorded it.
                message: format!("{} (run {} failed)", err.message, run.run_id),
                ..err
            }),
            None => self.get_run(caller, &run.run_id).await,
        }
    }

    /// Claim a queued run and compute it; the error, if it failed. A run
    /// another worker claimed, or one cancelled meanwhile, is left alone.
    async fn execute(&self, caller: &Principal, run: &RunRow) -> Option<ServiceError> {
        match self.step(caller, run, "queued", "running", None, "").await {
            Ok(true) => {}
            Ok(false) => return None,
            Err(err) => return Some(err),
        }
        let job = match self
            .store
            .start_job(&run.run_id, &run.tenant_id, clock::now_ms())
            .await
        {
            Ok(job) => Some(job),
            Err(err) => {
                tracing::warn!(error = %err, run_id = %run.run_id, "recording the job failed");
                None
            }
        };
        let outcome = self.compute_run(caller, run).await;
        if let Some(job) = job {
            // The run's final status decides the job's.
            let status = match self.store.run(&run.tenant_id, &run.run_id).await {
                Ok(Some(r)) if r.status == "succeeded" || r.status == "cancelled" => r.status,
                _ => "failed".to_owned(),
            };
            let error = outcome
                .as_ref()
                .map(|e| e.message.clone())
                .unwrap_or_default();
            if let Err(err) = self
                .store
                .finish_job(&job, &status, &error, clock::now_ms())
                .await
            {
                tracing::warn!(error = %err, run_id = %run.run_id, "recording the job's end failed");
            }
        }
        outcome
    }

    /// Compute a claimed (running) run and record its outcome.
    async fn compute_run(&self, caller: &Principal, run: &RunRow) -> Option<ServiceError> {
        let Some(manifest) = catalog::find(&run.skill_id, Some(&run.version)) else {
            let err = unknown_skill(&run.skill_id, Some(&run.version));
            let _ = self
                .step(caller, run, "running", "failed", None, &err.message)
                .await;
            return Some(err);
        };
        let inputs: Map<String, Value> = serde_json::from_str(&run.inputs).unwrap_or_default();
        let produced = match self.compute(caller, &manifest, &inputs).await {
            Ok(produced) => produced,
            Err(err) => {
                let _ = self
                    .step(caller, run, "running", "failed", None, &err.message)
                    .await;
                return Some(err);
            }
        };
        // Artifacts first, so a succeeded run always has them.
        for (name, mime, body) in produced.artifacts {
            let artifact = ArtifactRow {
                artifact_id: uuid::Uuid::new_v4().hyphenated().to_string(),
                run_id: run.run_id.clone(),
                tenant_id: run.tenant_id.clone(),
                name,
                mime_type: mime.to_owned(),
                body,
                created_at_ms: clock::now_ms(),
            };
            if let Err(err) = self.store.insert_artifact(&artifact).await {
                return Some(err.into());
            }
        }
        let outputs = produced.outputs.to_string();
        match self
            .step(caller, run, "running", "succeeded", Some(&outputs), "")
            .await
        {
            Ok(true) => None,
            // Cancelled while computing: the results are dropped.
            Ok(false) => self
                .store
                .delete_artifacts(&run.run_id)
                .await
                .err()
                .map(Into::into),
            Err(err) => Some(err),
        }
    }

    /// Cancel a queued or running run.
    pub async fn cancel(&self, caller: &Principal, run_id: &str) -> Result<RunView, ServiceError> {
        let view = self.get_run(caller, run_id).await?;
        let run = view.run;
        if !matches!(run.status.as_str(), "queued" | "running") {
            return Err(ServiceError::precondition(format!(
                "run_id: run {} already {}; only queued or running runs can be cancelled",
                run.run_id, run.status
            ))
            .with_domain("RUN_FINISHED"));
        }
        if !self
            .step(
                caller,
                &run,
                &run.status,
                "cancelled",
                None,
                "cancelled by the caller",
            )
            .await?
        {
            // It finished in the meantime.
            let now = self.get_run(caller, &run.run_id).await?;
            return Err(ServiceError::precondition(format!(
                "run_id: run {} already {}",
                run.run_id, now.run.status
            ))
            .with_domain("RUN_FINISHED"));
        }
        self.get_run(caller, &run.run_id).await
    }

    /// Wait until the run's status differs from `status` (default: the
    /// current one) or `wait_ms` passes.
    pub async fn subscribe(
        &self,
        caller: &Principal,
        run_id: &str,
        status: Option<&str>,
        wait_ms: Option<i32>,
    ) -> Result<RunView, ServiceError> {
        let wait = match wait_ms {
            None => 20_000,
            Some(ms) if (0..=30_000).contains(&ms) => ms as u64,
            Some(_) => {
                return Err(ServiceError::invalid(
                    "wait_ms: must be between 0 and 30000",
                ));
            }
        };
        let first = self.get_run(caller, run_id).await?;
        let from = status
            .map(str::to_owned)
            .unwrap_or_else(|| first.run.status.clone());
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(wait);
        let mut view = first;
        while view.run.status == from && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            view = self.get_run(caller, run_id).await?;
        }
        Ok(view)
    }

    /// The background worker: runs queued batch runs one at a time (as the
    /// principal that queued them) until `shutdown`, and fails runs a
    /// crashed worker left `running`, so no run stays stuck.
    pub fn spawn_worker(&self, shutdown: tokio_util::sync::CancellationToken) {
        let service = self.clone();
        tokio::spawn(async move {
            while !shutdown.is_cancelled() {
                match service
                    .store
                    .fail_stale(STALE_RUN_MS, clock::now_ms())
                    .await
                {
                    Ok(0) => {}
                    Ok(n) => tracing::warn!(runs = n, "failed runs a stopped worker left running"),
                    Err(err) => tracing::warn!(error = %err, "checking for stale runs failed"),
                }
                match service.store.next_queued().await {
                    Ok(Some(run)) => {
                        match serde_json::from_str::<Principal>(&run.requester) {
                            Ok(requester) => {
                                if let Some(err) = service.execute(&requester, &run).await {
                                    tracing::info!(run_id = %run.run_id, error = %err.message, "batch run failed");
                                }
                            }
                            Err(_) => {
                                let system = Principal::system(run.tenant_id.clone());
                                let _ = service
                                    .step(
                                        &system,
                                        &run,
                                        "queued",
                                        "failed",
                                        None,
                                        "the run has no requester to act for",
                                    )
                                    .await;
                            }
                        }
                        continue;
                    }
                    Ok(None) => {}
                    Err(err) => tracing::warn!(error = %err, "reading the run queue failed"),
                }
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = service.wake.notified() => {}
                    _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                }
            }
        });
    }

    /// Check a momentum strategy, store it as a draft and record
    /// `strategy_proposed` in the caller's session.
    pub async fn propose(
        &self,
        caller: &Principal,
        spec: StrategySpec,
    ) -> Result<StrategyRow, ServiceError> {
        let tenant_id = tenant(caller)?;
        let name = spec.name.trim();
        if name.is_empty() || name.chars().count() > 100 {
            return Err(ServiceError::invalid("name: 1 to 100 characters"));
        }
        if spec.universe.is_empty() || spec.universe.len() > 20 {
            return Err(ServiceError::invalid("universe: 1 to 20 symbols"));
        }
        if !(1..=756).contains(&spec.lookback) {
            return Err(ServiceError::invalid(
                "lookback: must be between 1 and 756 trading days",
            ));
        }
        if !(1..=252).contains(&spec.rebalance) {
            return Err(ServiceError::invalid(
                "rebalance: must be between 1 and 252 trading days",
            ));
        }
        let max_weight = spec.max_weight.unwrap_or(1.0);
        if !(max_weight > 0.0 && max_weight <= 1.0) {
            return Err(ServiceError::invalid("risk.max_weight: must be in (0, 1]"));
        }
        let mut universe: Vec<String> = spec
            .universe
            .iter()
            .map(|s| s.trim().to_uppercase())
            .collect();
        universe.sort();
        universe.dedup();
        if 1.0 / (universe.len() as f64) > max_weight + 1e-12 {
            return Err(ServiceError::invalid(format!(
                "risk.max_weight: {max_weight} is below the equal weight 1/{} of this universe",
                universe.len()
            )));
        }
        if let Some(dd) = spec.max_drawdown.filter(|d| !(*d > 0.0 && *d < 1.0)) {
            return Err(ServiceError::invalid(format!(
                "risk.max_drawdown: {dd} must be in (0, 1)"
            )));
        }
        let cost_bps = spec.cost_bps.unwrap_or(5.0);
        if !(0.0..=500.0).contains(&cost_bps) {
            return Err(ServiceError::invalid("cost_bps: must be between 0 and 500"));
        }
        let known = self.known_symbols(caller).await?;
        if let Some(unknown) = universe.iter().find(|s| !known.contains(s)) {
            return Err(ServiceError::not_found(format!(
                "universe: no market data for {unknown}; known symbols: {}",
                known.join(", ")
            ))
            .with_domain("UNKNOWN_SYMBOL"));
        }
        let spec_json = json!({"universe": universe, "lookback": spec.lookback, "rebalance": spec.rebalance,
            "risk": {"max_weight": max_weight, "max_drawdown": spec.max_drawdown}, "cost_bps": cost_bps});
        let row = StrategyRow {
            strategy_id: uuid::Uuid::new_v4().hyphenated().to_string(),
            tenant_id: tenant_id.to_owned(),
            session_id: caller.session_id.clone().unwrap_or_default(),
            name: name.to_owned(),
            spec: spec_json.to_string(),
            status: "draft".to_owned(),
            created_at_ms: clock::now_ms(),
        };
        self.store.insert_strategy(&row).await?;
        let mut payload = spec_json;
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
        let tenant_id = tenant(caller)?;
        let strategy_id = parse_id("strategy_id", strategy_id)?;
        self.store
            .strategy(tenant_id, &strategy_id)
            .await?
            .ok_or_else(|| {
                ServiceError::not_found(format!("strategy_id: no strategy {strategy_id}"))
                    .with_domain("UNKNOWN_STRATEGY")
            })
    }

    /// Move a strategy to paper or live (the approvals service does this
    /// once a person approved the promotion).
    pub async fn set_strategy_status(
        &self,
        caller: &Principal,
        strategy_id: &str,
        status: &str,
    ) -> Result<StrategyRow, ServiceError> {
        let tenant_id = tenant(caller)?;
        if !matches!(status, "paper" | "live") {
            return Err(ServiceError::invalid("status: must be paper or live"));
        }
        let strategy = self.strategy(caller, strategy_id).await?;
        self.store
            .set_strategy_status(tenant_id, &strategy.strategy_id, status)
            .await?;
        self.strategy(caller, &strategy.strategy_id).await
    }

    /// The run's events in its research session (its run transitions), read
    /// from the session service as the caller.
    pub async fn run_trace(&self, caller: &Principal, run: &RunRow) -> Vec<Value> {
        let Some(channel) = &self.session else {
            return Vec::new();
        };
        if run.session_id.is_empty() {
            return Vec::new();
        }
        let mut request = tonic::Request::new(spb::ReadEventsRequest {
            session_id: run.session_id.clone(),
            after_seq: 0,
            limit: 1000,
        });
        self.key.sign(&mut request, caller);
        match SessionServiceClient::new(channel.clone()).read_events(request).await {
            Ok(reply) => reply
                .into_inner()
                .events
                .into_iter()
                .filter_map(|e| {
                    let payload = e.payload.map(json::from_struct).unwrap_or(Value::Null);
                    (payload["run_id"] == json!(run.run_id)).then(|| {
                        json!({"seq": e.seq, "type": e.r#type, "payload": payload, "created_at": e.created_at})
                    })
                })
                .collect(),
            Err(status) => {
                tracing::warn!(error = %status.message(), "reading the run's trace failed");
                Vec::new()
            }
        }
    }

    async fn known_symbols(&self, caller: &Principal) -> Result<Vec<String>, ServiceError> {
        let channel = self.broker.clone().ok_or_else(|| {
            ServiceError::new(Code::Unavailable, "no broker service is configured")
        })?;
        let mut request = tonic::Request::new(bpb::ListSymbolsRequest {});
        self.key.sign(&mut request, caller);
        let list = BrokerServiceClient::new(channel)
            .list_symbols(request)
            .await
            .map_err(from_status)?
            .into_inner();
        Ok(list.symbols.into_iter().map(|s| s.symbol).collect())
    }

    pub async fn get_run(&self, caller: &Principal, run_id: &str) -> Result<RunView, ServiceError> {
        let tenant_id = tenant(caller)?;
        let run_id = parse_id("run_id", run_id)?;
        let run = self
            .store
            .run(tenant_id, &run_id)
            .await?
            .ok_or_else(|| ServiceError::not_found(format!("run_id: no run {run_id}")))?;
        let artifacts = self.store.artifacts(tenant_id, &run_id).await?;
        let jobs = self.store.jobs(tenant_id, &run_id).await?;
        Ok(RunView {
            run,
            artifacts,
            jobs,
        })
    }

    pub async fn artifact(
        &self,
        caller: &Principal,
        artifact_id: &str,
    ) -> Result<ArtifactRow, ServiceError> {
        let tenant_id = tenant(caller)?;
        let artifact_id = parse_id("artifact_id", artifact_id)?;
        self.store
            .artifact(tenant_id, &artifact_id)
            .await?
            .ok_or_else(|| {
                ServiceError::not_found(format!("artifact_id: no artifact {artifact_id}"))
            })
    }

    async fn step(
        &self,
        caller: &Principal,
        run: &RunRow,
        from: &str,
        to: &str,
        outputs: Option<&str>,
        error: &str,
    ) -> Result<bool, ServiceError> {
        if !self
            .store
            .transition(&run.run_id, from, to, outputs, error, clock::now_ms())
            .await?
        {
            return Ok(false);
        }
        let detail = (!error.is_empty()).then(|| error.to_owned());
        self.trace(caller, run, from, to, detail).await;
        Ok(true)
    }

    /// Record a `run_transition` in the caller's session, when there is one.
    /// A trace that cannot be written is logged; the run goes on.
    async fn trace(
        &self,
        caller: &Principal,
        run: &RunRow,
        from: &str,
        to: &str,
        error: Option<String>,
    ) {
        let mut payload = json!({"run_id": run.run_id, "skill_id": run.skill_id, "version": run.version, "from": from, "to": to});
        if let Some(e) = error {
            payload["error"] = json!(e);
        }
        self.append(caller, spb::EventType::RunTransition, payload)
            .await;
    }

    /// Append an event to the caller's session, when there is one.
    async fn append(&self, caller: &Principal, kind: spb::EventType, payload: Value) {
        let (Some(channel), Some(session_id)) = (&self.session, &caller.session_id) else {
            return;
        };
        let mut request = tonic::Request::new(spb::AppendEventRequest {
            session_id: session_id.clone(),
            r#type: kind as i32,
            payload: Some(json::to_struct(payload)),
        });
        self.key.sign(&mut request, caller);
        if let Err(status) = SessionServiceClient::new(channel.clone())
            .append_event(request)
            .await
        {
            tracing::warn!(error = %status.message(), event = ?kind, "recording a trace event failed");
        }
    }

    /// Adjusted closes of `symbol` (dates and prices), through the broker.
    async fn prices(
        &self,
        caller: &Principal,
        symbol: &str,
        start: Option<&str>,
        end: Option<&str>,
    ) -> Result<(Vec<String>, Vec<f64>), ServiceError> {
        let channel = self.broker.clone().ok_or_else(|| {
            ServiceError::new(Code::Unavailable, "no broker service is configured")
        })?;
        let mut request = tonic::Request::new(bpb::GetPriceHistoryRequest {
            symbol: symbol.to_owned(),
            start: start.map(str::to_owned),
            end: end.map(str::to_owned),
            fields: vec!["adj_close".to_owned()],
            limit: Some(5000),
        });
        self.key.sign(&mut request, caller);
        let history = BrokerServiceClient::new(channel)
            .get_price_history(request)
            .await
            .map_err(from_status)?
            .into_inner();
        let (dates, prices) = history
            .bars
            .into_iter()
            .filter_map(|b| b.adj_close.map(|p| (b.date, p)))
            .unzip();
        Ok((dates, prices))
    }

    async fn compute(
        &self,
        caller: &Principal,
        manifest: &Manifest,
        inputs: &Map<String, Value>,
    ) -> Result<Produced, ServiceError> {
        let text = |k: &str| inputs.get(k).and_then(Value::as_str);
        let int = |k: &str| inputs.get(k).and_then(Value::as_i64).unwrap_or(0) as usize;
        let symbol = text("symbol").unwrap_or("").to_owned();
        match manifest.skill_id {
            "vol.realized" => {
                let (dates, prices) = self.prices(caller, &symbol, None, text("end")).await?;
                let window = int("window");
                let vol = compute::realized_vol(&prices, window)
                    .ok_or_else(|| too_long("inputs.window", window, &symbol, prices.len()))?;
                let outputs = json!({"symbol": symbol.to_uppercase(), "window": window, "volatility": vol,
                    "as_of": dates.last(), "observations": window});
                Ok(Produced {
                    artifacts: vec![(
                        "result.json".into(),
                        "application/json",
                        outputs.to_string(),
                    )],
                    outputs,
                })
            }
            "vol.term_structure" => {
                let (dates, prices) = self.prices(caller, &symbol, None, text("end")).await?;
                let windows: Vec<usize> = inputs
                    .get("windows")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_u64)
                    .map(|w| w as usize)
                    .collect();
                let mut points = Vec::new();
                for (i, w) in windows.iter().enumerate() {
                    let vol = compute::realized_vol(&prices, *w).ok_or_else(|| {
                        too_long(&format!("inputs.windows[{i}]"), *w, &symbol, prices.len())
                    })?;
                    points.push(json!({"window": w, "volatility": vol}));
                }
                let chart: Vec<(String, f64)> = points
                    .iter()
                    .map(|p| {
                        (
                            format!("{}d", p["window"]),
                            p["volatility"].as_f64().unwrap_or(0.0),
                        )
                    })
                    .collect();
                let svg = plot::line_chart(
                    &format!(
                        "{} realized volatility term structure",
                        symbol.to_uppercase()
                    ),
                    "annualized volatility",
                    &chart,
                );
                let outputs = json!({"symbol": symbol.to_uppercase(), "as_of": dates.last(), "points": points});
                Ok(Produced {
                    artifacts: vec![
                        (
                            "term_structure.json".into(),
                            "application/json",
                            outputs.to_string(),
                        ),
                        ("term_structure.svg".into(), "image/svg+xml", svg),
                    ],
                    outputs,
                })
            }
            "returns.summary" => {
                let (dates, prices) = self
                    .prices(caller, &symbol, text("start"), text("end"))
                    .await?;
                let s = compute::returns_summary(&prices)
                    .ok_or_else(|| too_long("inputs.start", 3, &symbol, prices.len()))?;
                let outputs = json!({"symbol": symbol.to_uppercase(), "start": dates.first(), "end": dates.last(),
                    "cagr": s.cagr, "volatility": s.volatility, "sharpe": s.sharpe, "max_drawdown": s.max_drawdown,
                    "total_return": s.total_return, "days": s.days});
                Ok(Produced {
                    artifacts: vec![(
                        "summary.json".into(),
                        "application/json",
                        outputs.to_string(),
                    )],
                    outputs,
                })
            }
            "corr.peers" => self.peers(caller, &symbol, inputs).await,
            "backtest.momentum" if inputs.get("strategy_id").is_some() => {
                self.backtest_strategy(caller, inputs).await
            }
            "backtest.momentum" => {
                if symbol.is_empty() {
                    return Err(ServiceError::invalid(
                        "inputs.symbol: give a symbol or a strategy_id",
                    ));
                }
                let (dates, prices) = self
                    .prices(caller, &symbol, text("start"), text("end"))
                    .await?;
                let (lookback, holding) = (int("lookback"), int("holding"));
                let cost = inputs
                    .get("cost_bps")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0);
                let bt = compute::momentum_backtest(&prices, lookback, holding, cost).ok_or_else(
                    || too_long("inputs.lookback", lookback + 1, &symbol, prices.len()),
                )?;
                let buy_hold = prices[prices.len() - 1] / prices[lookback] - 1.0;
                let mut csv = String::from("date,equity,position\n");
                for (i, (d, e)) in dates.iter().zip(&bt.equity).enumerate() {
                    let pos = if i == 0 {
                        0
                    } else {
                        bt.positions.get(i - 1).copied().unwrap_or(0)
                    };
                    csv.push_str(&format!("{d},{e:.6},{pos}\n"));
                }
                let chart: Vec<(String, f64)> = dates
                    .iter()
                    .cloned()
                    .zip(bt.equity.iter().copied())
                    .collect();
                let svg = plot::line_chart(
                    &format!(
                        "{} momentum {lookback}/{holding} equity curve",
                        symbol.to_uppercase()
                    ),
                    "equity",
                    &chart,
                );
                let outputs = json!({"symbol": symbol.to_uppercase(), "lookback": lookback, "holding": holding, "cost_bps": cost,
                    "start": dates.first(), "end": dates.last(), "total_return": bt.total_return, "cagr": bt.cagr,
                    "volatility": bt.volatility, "sharpe": bt.sharpe, "max_drawdown": bt.max_drawdown, "trades": bt.trades,
                    "buy_and_hold_return": buy_hold});
                Ok(Produced {
                    artifacts: vec![
                        ("stats.json".into(), "application/json", outputs.to_string()),
                        ("equity_curve.csv".into(), "text/csv", csv),
                        ("equity_curve.svg".into(), "image/svg+xml", svg),
                    ],
                    outputs,
                })
            }
            other => Err(ServiceError::invalid(format!(
                "skill_id: {other} has no implementation"
            ))),
        }
    }

    /// Backtest a proposed strategy: momentum on each symbol of its universe
    /// over their common dates, equal initial weights, stopped for good when
    /// the portfolio's drawdown passes the strategy's limit.
    async fn backtest_strategy(
        &self,
        caller: &Principal,
        inputs: &Map<String, Value>,
    ) -> Result<Produced, ServiceError> {
        let text = |k: &str| inputs.get(k).and_then(Value::as_str);
        let strategy = self
            .strategy(caller, text("strategy_id").unwrap_or(""))
            .await?;
        let spec: Value = serde_json::from_str(&strategy.spec).unwrap_or(Value::Null);
        let universe: Vec<String> = spec["universe"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        let lookback = spec["lookback"].as_u64().unwrap_or(1) as usize;
        let holding = spec["rebalance"].as_u64().unwrap_or(1) as usize;
        let cost = spec["cost_bps"].as_f64().unwrap_or(0.0);
        let stop = spec["risk"]["max_drawdown"].as_f64();
        let mut series: Vec<BTreeMap<String, f64>> = Vec::new();
        for symbol in &universe {
            let (d, p) = self
                .prices(caller, symbol, text("start"), text("end"))
                .await?;
            series.push(d.into_iter().zip(p).collect());
        }
        let Some(first) = series.first() else {
            return Err(ServiceError::invalid(
                "strategy_id: the strategy has an empty universe",
            ));
        };
        let dates: Vec<String> = first
            .keys()
            .filter(|d| series.iter().all(|s| s.contains_key(*d)))
            .cloned()
            .collect();
        let mut curves = Vec::new();
        for (symbol, s) in universe.iter().zip(&series) {
            let prices: Vec<f64> = dates.iter().map(|d| s[d]).collect();
            let bt = compute::momentum_backtest(&prices, lookback, holding, cost)
                .ok_or_else(|| too_long("lookback", lookback + 1, symbol, prices.len()))?;
            curves.push(bt.equity);
        }
        let n = curves.len() as f64;
        let mut equity: Vec<f64> = (0..dates.len())
            .map(|i| curves.iter().map(|c| c[i]).sum::<f64>() / n)
            .collect();
        let mut stopped_on = None;
        if let Some(limit) = stop {
            let mut peak = f64::MIN;
            for i in 0..equity.len() {
                if let Some(j) = stopped_on {
                    equity[i] = equity[j];
                    continue;
                }
                peak = peak.max(equity[i]);
                if 1.0 - equity[i] / peak > limit {
                    stopped_on = Some(i);
                }
            }
        }
        let summary = compute::returns_summary(&equity);
        let mut csv = String::from("date,equity\n");
        for (d, e) in dates.iter().zip(&equity) {
            csv.push_str(&format!("{d},{e:.6}\n"));
        }
        let chart: Vec<(String, f64)> = dates.iter().cloned().zip(equity.iter().copied()).collect();
        let svg = plot::line_chart(&format!("{} equity curve", strategy.name), "equity", &chart);
        let outputs = json!({"strategy_id": strategy.strategy_id, "name": strategy.name, "universe": universe,
            "start": dates.first(), "end": dates.last(),
            "total_return": equity.last().map(|e| e - 1.0), "cagr": summary.as_ref().map(|s| s.cagr),
            "volatility": summary.as_ref().map(|s| s.volatility), "sharpe": summary.as_ref().map(|s| s.sharpe),
            "max_drawdown": compute::max_drawdown(&equity),
            "stopped_on": stopped_on.map(|i| dates[i].clone())});
        Ok(Produced {
            artifacts: vec![
                ("stats.json".into(), "application/json", outputs.to_string()),
                ("equity_curve.csv".into(), "text/csv", csv),
                ("equity_curve.svg".into(), "image/svg+xml", svg),
            ],
            outputs,
        })
    }

    async fn peers(
        &self,
        caller: &Principal,
        symbol: &str,
        inputs: &Map<String, Value>,
    ) -> Result<Produced, ServiceError> {
        let text = |k: &str| inputs.get(k).and_then(Value::as_str);
        let symbol = symbol.to_uppercase();
        // Indexing a JSON map panics on a missing key; peers are optional.
        let mut peers: Vec<String> = inputs
            .get("peers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_uppercase)
            .collect();
        if peers.is_empty() {
            let channel = self.broker.clone().ok_or_else(|| {
                ServiceError::new(Code::Unavailable, "no broker service is configured")
            })?;
            let mut request = tonic::Request::new(bpb::ListSymbolsRequest {});
            self.key.sign(&mut request, caller);
            let list = BrokerServiceClient::new(channel)
                .list_symbols(request)
                .await
                .map_err(from_status)?
                .into_inner();
            peers = list
                .symbols
                .into_iter()
                .map(|s| s.symbol)
                .filter(|s| *s != symbol)
                .collect();
        }
        let (dates, prices) = self
            .prices(caller, &symbol, text("start"), text("end"))
            .await?;
        let base: BTreeMap<String, f64> = dates.into_iter().zip(prices).collect();
        let mut rows = Vec::new();
        for peer in peers {
            let (pd, pp) = self
                .prices(caller, &peer, text("start"), text("end"))
                .await?;
            // Align on common dates, then take log returns of both.
            let (a, b): (Vec<f64>, Vec<f64>) = pd
                .iter()
                .zip(&pp)
                .filter_map(|(d, p)| base.get(d).map(|x| (*x, *p)))
                .unzip();
            let (ra, rb) = (compute::log_returns(&a), compute::log_returns(&b));
            if let Some(c) = compute::correlation(&ra, &rb) {
                rows.push(json!({"symbol": peer, "correlation": c, "observations": ra.len()}));
            }
        }
        rows.sort_by(|x, y| {
            y["correlation"]
                .as_f64()
                .partial_cmp(&x["correlation"].as_f64())
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let mut csv = String::from("symbol,correlation,observations\n");
        for r in &rows {
            csv.push_str(&format!(
                "{},{:.6},{}\n",
                r["symbol"].as_str().unwrap_or(""),
                r["correlation"].as_f64().unwrap_or(0.0),
                r["observations"]
            ));
        }
        let outputs = json!({"symbol": symbol, "peers": rows});
        Ok(Produced {
            artifacts: vec![
                ("peers.json".into(), "application/json", outputs.to_string()),
                ("peers.csv".into(), "text/csv", csv),
            ],
            outputs,
        })
    }
}

fn tenant(caller: &Principal) -> Result<&str, ServiceError> {
    if caller.tenant_id.is_empty() {
        return Err(ServiceError::denied("the caller has no tenant"));
    }
    Ok(&caller.tenant_id)
}

fn parse_id(field: &str, raw: &str) -> Result<String, ServiceError> {
    uuid::Uuid::parse_str(raw.trim())
        .map(|u| u.hyphenated().to_string())
        .map_err(|_| ServiceError::invalid(format!("{field}: not an id (expected a UUID)")))
}

fn unknown_skill(skill_id: &str, version: Option<&str>) -> ServiceError {
    let err = match (catalog::find(skill_id, None), version) {
        (Some(latest), Some(v)) => ServiceError::not_found(format!(
            "version: {skill_id} has no version {v}; the latest is {}",
            latest.version
        )),
        _ => {
            let ids: Vec<&str> = catalog::builtin().iter().map(|m| m.skill_id).collect();
            ServiceError::not_found(format!(
                "skill_id: unknown skill {skill_id:?}; skills: {}",
                ids.join(", ")
            ))
        }
    };
    err.with_domain("UNKNOWN_SKILL")
}

fn too_long(field: &str, needed: usize, symbol: &str, have: usize) -> ServiceError {
    ServiceError::invalid(format!(
        "{field}: needs {} prices but {} has {have} in the range",
        needed + 1,
        symbol.to_uppercase()
    ))
    .with_domain("INSUFFICIENT_DATA")
}

/// A broker error, passed on with its code and domain.
fn from_status(status: tonic::Status) -> ServiceError {
    ServiceError::from_status(&status, &["UNKNOWN_SYMBOL", "NO_DATA"])
}
