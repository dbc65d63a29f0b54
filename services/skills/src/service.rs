//! The skills domain: discovery over the catalog, runs with a state
//! machine (draft → queued → running → succeeded | failed), artifacts, and
//! the `run_transition` trace of every step. Market data comes from the
//! broker over gRPC, on behalf of the caller ([`crate::remote`]).
//! Strategies are in [`crate::strategies`]; the computations in
//! [`crate::skills`].

use crate::catalog::{self, Manifest};
use crate::model::{Profile, RunId, RunStatus};
use crate::skills::{self, Context, Inputs, Output, Progress, Skill};
use crate::stop::Stop;
use crate::store::{ArtifactRow, JobRow, RunRow, Store};
use crate::validate;
use futures::FutureExt;
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::id::TenantId;
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::session::v1 as spb;
use serde_json::{Map, Value, json};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tonic::transport::Channel;

/// How long run_skill waits for a batch run it follows before answering
/// with the run as it stands (the tool's deadline is 35 s).
pub const BATCH_WAIT: std::time::Duration = std::time::Duration::from_secs(25);

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
    pub jobs: Vec<JobRow>,
}

/// Skills and runs.
#[derive(Clone)]
pub struct SkillsService {
    pub(crate) store: Store,
    pub(crate) key: InternalKey,
    pub(crate) broker: Option<Channel>,
    pub(crate) session: Option<Channel>,
    /// The skills this service offers ([`skills::BUILTIN`] outside tests).
    skills: Arc<[&'static dyn Skill]>,
    /// Wakes the background worker when a batch run is queued.
    wake: Arc<tokio::sync::Notify>,
    /// The stop signal of each run computing in this process, so that
    /// cancel_run stops its computation too (a run computing on another
    /// replica finishes there and its results are dropped).
    computing: Arc<std::sync::Mutex<std::collections::HashMap<RunId, Stop>>>,
}

impl std::fmt::Debug for SkillsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkillsService")
            .field("store", &self.store)
            .field("skills", &self.skills.len())
            .finish_non_exhaustive()
    }
}

/// A run `running` for longer than this was left by a stopped worker.
const STALE_RUN_MS: i64 = 10 * 60 * 1000;

/// An interactive run still `queued` after this long lost its caller
/// before it was claimed; the worker runs it. Younger ones are their
/// caller's: run by the worker, a caller's going away could not stop them.
const ORPHANED_RUN_MS: i64 = 60 * 1000;

/// Who computes a run just recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Follower {
    /// The caller computes it within the call and follows its progress: a
    /// batch run is recorded claimed (`running`), so no worker takes it.
    Computes,
    /// The caller only waits: a batch run is queued for the worker.
    Waits,
}

/// What the caller and the run record learn of a computation that panicked.
const PANICKED: &str = "internal error: the computation failed unexpectedly";

impl SkillsService {
    pub fn new(
        store: Store,
        key: InternalKey,
        config: &Config,
    ) -> Result<Self, ithaca_kit::client::BadUrl> {
        Self::with_skills(store, key, config, skills::BUILTIN.to_vec())
    }

    /// A service offering `skills` instead of the built-in ones (tests).
    pub fn with_skills(
        store: Store,
        key: InternalKey,
        config: &Config,
        skills: Vec<&'static dyn Skill>,
    ) -> Result<Self, ithaca_kit::client::BadUrl> {
        let channel =
            |url: &Option<String>| url.as_deref().map(ithaca_kit::client::channel).transpose();
        Ok(SkillsService {
            store,
            key,
            broker: channel(&config.broker_url)?,
            session: channel(&config.session_url)?,
            skills: skills.into(),
            wake: Arc::new(tokio::sync::Notify::new()),
            computing: Arc::default(),
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
        let mut hits = catalog::search(&self.skills, query, asset_class, intent);
        let count = hits.len();
        hits.truncate(limit);
        Ok((hits, count, count > limit))
    }

    /// Why a search found nothing or which filter value is unknown, and
    /// then the catalog's asset classes and intents (see
    /// [`catalog::search_note`]).
    pub fn search_note(
        &self,
        query: Option<&str>,
        asset_class: Option<&str>,
        intent: Option<&str>,
        found: usize,
    ) -> Option<(String, Vec<String>, Vec<String>)> {
        let (classes, intents) = catalog::vocabulary(&self.skills);
        let note = catalog::search_note((&classes, &intents), query, asset_class, intent, found)?;
        Some((note, owned(classes), owned(intents)))
    }

    /// The catalog's asset classes and intents.
    pub fn vocabulary(&self) -> (Vec<String>, Vec<String>) {
        let (classes, intents) = catalog::vocabulary(&self.skills);
        (owned(classes), owned(intents))
    }

    pub fn describe(
        &self,
        skill_id: &str,
        version: Option<&str>,
    ) -> Result<Manifest, ServiceError> {
        self.skill(skill_id, version).map(|s| s.manifest())
    }

    fn skill(
        &self,
        skill_id: &str,
        version: Option<&str>,
    ) -> Result<&'static dyn Skill, ServiceError> {
        skills::find(&self.skills, skill_id, version)
            .ok_or_else(|| self.unknown_skill(skill_id, version))
    }

    /// Validate inputs and record the run. Interactive skills run within the
    /// call, and stop (the run `cancelled`) when this future is dropped;
    /// batch skills are queued for the background worker and the run comes
    /// back `queued` (follow it with get_run or subscribe_run).
    pub async fn run(
        &self,
        caller: &Principal,
        skill_id: &str,
        version: Option<&str>,
        inputs: Value,
    ) -> Result<RunView, ServiceError> {
        self.run_until(caller, skill_id, version, inputs, Stop::never())
            .await
    }

    /// [`SkillsService::run`], an interactive run also stopped when `stop`
    /// fires (the caller's deadline passed).
    pub async fn run_until(
        &self,
        caller: &Principal,
        skill_id: &str,
        version: Option<&str>,
        inputs: Value,
        stop: Stop,
    ) -> Result<RunView, ServiceError> {
        // The run goes on a task of its own and this future only waits for
        // it: when tonic drops this future (the caller went away) the guard
        // stops the run, which is then recorded `cancelled` instead of
        // being cut off while `running`.
        let _stop_on_drop = stop.on_drop();
        let (service, caller) = (self.clone(), caller.clone());
        let (skill_id, version) = (skill_id.to_owned(), version.map(str::to_owned));
        let running = tokio::spawn(async move {
            let (run, profile) = service
                .queue(
                    &caller,
                    &skill_id,
                    version.as_deref(),
                    inputs,
                    Follower::Waits,
                )
                .await?;
            if profile == Profile::Batch {
                service.wake.notify_one();
                // The run as queued: the worker may claim it before a read.
                return Ok(RunView {
                    run,
                    artifacts: Vec::new(),
                    jobs: Vec::new(),
                });
            }
            service.finish(&caller, &run, None, &stop).await
        });
        running
            .await
            .map_err(|_| ServiceError::new(Code::Internal, PANICKED))?
    }

    /// Validate inputs and record the run, then run it within the call,
    /// batch skills too, sending its steps to `progress` (run_skill over
    /// MCP). An interactive run stops, recorded `cancelled`, when `stop`
    /// fires. A batch run computes on a task of its own, so it finishes even
    /// when the caller goes away (`stop` only ends the wait for it); after
    /// [`BATCH_WAIT`] the run comes back as it stands (running) and goes
    /// on. A failed batch run is answered as the failed run, as
    /// get_run would show it.
    pub async fn run_following(
        &self,
        caller: &Principal,
        skill_id: &str,
        version: Option<&str>,
        inputs: Value,
        progress: Progress,
        stop: &Stop,
    ) -> Result<RunView, ServiceError> {
        // A batch run is recorded already claimed: queued, the worker could
        // take it before this call does, and its progress would go nowhere.
        let (run, profile) = self
            .queue(caller, skill_id, version, inputs, Follower::Computes)
            .await?;
        if profile != Profile::Batch {
            return self.finish(caller, &run, Some(&progress), stop).await;
        }
        let until = tokio::time::Instant::now() + BATCH_WAIT;
        let service = self.clone();
        let requester = caller.clone();
        let claimed = run.clone();
        let computing = tokio::spawn(async move {
            let never = Stop::never();
            if let Some(err) = service
                .execute_claimed(&requester, &claimed, Some(&progress), &never)
                .await
            {
                tracing::info!(run_id = %claimed.run_id, error = %err.message, "batch run failed");
            }
        });
        tokio::select! {
            _ = tokio::time::timeout_at(until, computing) => {}
            // Nobody waits any more; the run goes on.
            reason = stop.stopped() => return Err(skills::cancelled(reason)),
        }
        // The computation ended, or BATCH_WAIT passed: the run as it stands.
        self.get_run(caller, &run.run_id).await
    }

    /// Run a recorded interactive run within the call: the run, or why it
    /// failed (naming the run that recorded it).
    async fn finish(
        &self,
        caller: &Principal,
        run: &RunRow,
        progress: Option<&Progress>,
        stop: &Stop,
    ) -> Result<RunView, ServiceError> {
        match self.execute(caller, run, progress, stop).await {
            Some(err) => Err(ServiceError {
                // The caller learns why, and which run recorded it.
                message: format!(
                    "{} (run {} {})",
                    err.message,
                    run.run_id,
                    if is_cancellation(&err) {
                        RunStatus::Cancelled
                    } else {
                        RunStatus::Failed
                    }
                ),
                ..err
            }),
            None => self.get_run(caller, &run.run_id).await,
        }
    }

    /// Validate inputs and record the run (queued, or claimed for `follower`); with
    /// its skill's profile.
    async fn queue(
        &self,
        caller: &Principal,
        skill_id: &str,
        version: Option<&str>,
        inputs: Value,
        follower: Follower,
    ) -> Result<(RunRow, Profile), ServiceError> {
        let tenant_id = TenantId::of(caller)?;
        let manifest = self.describe(skill_id, version)?;
        let inputs = validate::inputs(&manifest.input_schema, inputs)?;
        let now = clock::now_ms();
        // A batch run the caller computes now is recorded claimed
        // (`running`), out of the worker's reach; its trace still shows
        // `queued`, then `running`.
        let claimed = follower == Follower::Computes && manifest.profile == Profile::Batch;
        let run = RunRow {
            run_id: RunId::new_v4(),
            tenant_id,
            session_id: caller.session_id().unwrap_or_default().to_owned(),
            skill_id: manifest.skill_id.to_owned(),
            version: manifest.version.to_owned(),
            inputs: Value::Object(inputs).to_string(),
            status: if claimed {
                RunStatus::Running
            } else {
                RunStatus::Queued
            },
            outputs: None,
            error: String::new(),
            created_at_ms: now,
            updated_at_ms: now,
            requester: serde_json::to_string(caller).map_err(|e| ServiceError::internal(&e))?,
        };
        self.store.insert_run(&run).await?;
        self.trace(caller, &run, RunStatus::Draft, RunStatus::Queued, None)
            .await;
        if claimed {
            self.trace(caller, &run, RunStatus::Queued, RunStatus::Running, None)
                .await;
        }
        Ok((run, manifest.profile))
    }

    /// Claim a queued run and compute it until `stop`; the error, if it
    /// failed or was stopped. A run another worker claimed, or one
    /// cancelled meanwhile, is left alone.
    async fn execute(
        &self,
        caller: &Principal,
        run: &RunRow,
        progress: Option<&Progress>,
        stop: &Stop,
    ) -> Option<ServiceError> {
        match self
            .step(caller, run, RunStatus::Queued, RunStatus::Running, None, "")
            .await
        {
            Ok(true) => {}
            Ok(false) => return None,
            Err(err) => return Some(err),
        }
        self.execute_claimed(caller, run, progress, stop).await
    }

    /// Compute a run this caller has claimed (`running`) until `stop`, with
    /// its job recorded; the error, if it failed or was stopped.
    async fn execute_claimed(
        &self,
        caller: &Principal,
        run: &RunRow,
        progress: Option<&Progress>,
        stop: &Stop,
    ) -> Option<ServiceError> {
        let _registered = Computing::register(self, &run.run_id, stop);
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
        let outcome = self.compute_run(caller, run, progress, stop).await;
        if let Some(job) = job {
            // The run's final status decides the job's.
            let status = match self.store.run(&run.tenant_id, &run.run_id).await {
                Ok(Some(r)) if matches!(r.status, RunStatus::Succeeded | RunStatus::Cancelled) => {
                    r.status
                }
                _ => RunStatus::Failed,
            };
            let error = outcome
                .as_ref()
                .map(|e| e.message.clone())
                .unwrap_or_default();
            if let Err(err) = self
                .store
                .finish_job(&job, status, &error, clock::now_ms())
                .await
            {
                tracing::warn!(error = %err, run_id = %run.run_id, "recording the job's end failed");
            }
        }
        outcome
    }

    /// Compute a claimed (running) run and record its outcome. Whatever
    /// happens in the computation, a panic or a stop included, the run
    /// leaves `running`: a stopped one is `cancelled`, with the reason.
    async fn compute_run(
        &self,
        caller: &Principal,
        run: &RunRow,
        progress: Option<&Progress>,
        stop: &Stop,
    ) -> Option<ServiceError> {
        let produced = match self.compute(caller, run, progress, stop).await {
            Ok(produced) => produced,
            Err(err) => {
                let to = if is_cancellation(&err) {
                    RunStatus::Cancelled
                } else {
                    RunStatus::Failed
                };
                let _ = self
                    .step(caller, run, RunStatus::Running, to, None, &err.message)
                    .await;
                return Some(err);
            }
        };
        // Artifacts first, so a succeeded run always has them.
        for artifact in produced.artifacts {
            let artifact = ArtifactRow {
                artifact_id: uuid::Uuid::new_v4().hyphenated().to_string(),
                run_id: run.run_id.clone(),
                tenant_id: run.tenant_id.clone(),
                name: artifact.name,
                mime_type: artifact.mime_type.to_owned(),
                body: artifact.body,
                created_at_ms: clock::now_ms(),
            };
            if let Err(err) = self.store.insert_artifact(&artifact).await {
                let err = ServiceError::from(err);
                let _ = self
                    .step(
                        caller,
                        run,
                        RunStatus::Running,
                        RunStatus::Failed,
                        None,
                        &err.message,
                    )
                    .await;
                return Some(err);
            }
        }
        let outputs = produced.outputs.to_string();
        match self
            .step(
                caller,
                run,
                RunStatus::Running,
                RunStatus::Succeeded,
                Some(&outputs),
                "",
            )
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

    /// Run the skill's computation until `stop` fires, a panic in it
    /// becoming an INTERNAL error (logged with the run; the caller learns
    /// no details). A stop drops the computation at its next await (a
    /// broker call, which is then cancelled too); between awaits the
    /// computation sees it through [`Context::check`].
    async fn compute(
        &self,
        caller: &Principal,
        run: &RunRow,
        progress: Option<&Progress>,
        stop: &Stop,
    ) -> Result<Output, ServiceError> {
        let skill = self.skill(&run.skill_id, Some(&run.version))?;
        let inputs: Map<String, Value> = serde_json::from_str(&run.inputs).unwrap_or_default();
        let inputs = Inputs::new(inputs);
        let ctx = Context {
            sources: self,
            caller,
            progress,
            stop,
            prices_read: std::sync::atomic::AtomicUsize::new(0),
        };
        let computing = AssertUnwindSafe(skill.run(&ctx, &inputs)).catch_unwind();
        let outcome = tokio::select! {
            biased;
            reason = stop.stopped() => return Err(skills::cancelled(reason)),
            outcome = computing => outcome,
        };
        match outcome {
            Ok(result) => result,
            Err(payload) => {
                tracing::error!(
                    run_id = %run.run_id,
                    skill_id = %run.skill_id,
                    panic = ithaca_kit::panic::panic_message(payload.as_ref()),
                    "skill computation panicked"
                );
                Err(ServiceError::new(Code::Internal, PANICKED))
            }
        }
    }

    /// Cancel a queued or running run.
    pub async fn cancel(&self, caller: &Principal, run_id: &str) -> Result<RunView, ServiceError> {
        let view = self.get_run(caller, run_id).await?;
        let run = view.run;
        if !run.status.is_active() {
            return Err(ServiceError::precondition(format!(
                "run_id: run {} already {}; only queued or running runs can be cancelled",
                run.run_id, run.status
            ))
            .with_domain(DomainCode::RunFinished));
        }
        if !self
            .step(
                caller,
                &run,
                run.status,
                RunStatus::Cancelled,
                None,
                "cancelled by the caller",
            )
            .await?
        {
            // It finished in the meantime.
            self.stop_computing(&run.run_id);
            let now = self.get_run(caller, &run.run_id).await?;
            return Err(ServiceError::precondition(format!(
                "run_id: run {} already {}",
                run.run_id, now.run.status
            ))
            .with_domain(DomainCode::RunFinished));
        }
        // Its computation, when it is here, stops now.
        self.stop_computing(&run.run_id);
        self.get_run(caller, &run.run_id).await
    }

    /// Stop the computation of `run_id` if it runs in this process.
    fn stop_computing(&self, run_id: &RunId) {
        let stop = self
            .computing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(run_id)
            .cloned();
        if let Some(stop) = stop {
            stop.stop(crate::stop::Reason::RunCancelled);
        }
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
        // A status that does not exist already differs from the run's.
        let from = match status {
            None => Some(first.run.status),
            Some(text) => RunStatus::parse(text),
        };
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(wait);
        let mut view = first;
        while Some(view.run.status) == from && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            view = self.get_run(caller, run_id).await?;
        }
        Ok(view)
    }

    /// The background worker: runs queued batch runs one at a time (as the
    /// principal that queued them) until `shutdown`, and fails runs a
    /// crashed worker left `running`, so no run stays stuck.
    pub fn spawn_worker(
        &self,
        shutdown: tokio_util::sync::CancellationToken,
        tasks: &tokio_util::task::TaskTracker,
    ) {
        let service = self.clone();
        tasks.spawn(async move {
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
                let batch = service.batch_skills();
                let orphaned = clock::now_ms() - ORPHANED_RUN_MS;
                match service.store.next_queued(&batch, orphaned).await {
                    Ok(Some(run)) => {
                        service.work_on(&run).await;
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

    /// The ids of the batch skills (the worker's runs).
    fn batch_skills(&self) -> Vec<&'static str> {
        let mut ids: Vec<&'static str> = self
            .skills
            .iter()
            .map(|s| s.manifest())
            .filter(|m| m.profile == Profile::Batch)
            .map(|m| m.skill_id)
            .collect();
        ids.dedup();
        ids
    }

    /// Execute one queued run as its requester.
    async fn work_on(&self, run: &RunRow) {
        match serde_json::from_str::<Principal>(&run.requester) {
            Ok(requester) => {
                // Batch runs go on whoever waits for them.
                let never = Stop::never();
                if let Some(err) = self.execute(&requester, run, None, &never).await {
                    tracing::info!(run_id = %run.run_id, error = %err.message, "batch run failed");
                }
            }
            Err(_) => {
                let system = Principal::system(run.tenant_id.as_str());
                let _ = self
                    .step(
                        &system,
                        run,
                        RunStatus::Queued,
                        RunStatus::Failed,
                        None,
                        "the run has no requester to act for",
                    )
                    .await;
            }
        }
    }

    pub async fn get_run(&self, caller: &Principal, run_id: &str) -> Result<RunView, ServiceError> {
        let tenant_id = TenantId::of(caller)?;
        let run_id = RunId::parse(run_id)?;
        let run = self
            .store
            .run(&tenant_id, &run_id)
            .await?
            .ok_or_else(|| ServiceError::not_found(format!("run_id: no run {run_id}")))?;
        let artifacts = self.store.artifacts(&tenant_id, &run_id).await?;
        let jobs = self.store.jobs(&tenant_id, &run_id).await?;
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
        let tenant_id = TenantId::of(caller)?;
        let artifact_id = parse_id("artifact_id", artifact_id)?;
        self.store
            .artifact(&tenant_id, &artifact_id)
            .await?
            .ok_or_else(|| {
                ServiceError::not_found(format!("artifact_id: no artifact {artifact_id}"))
            })
    }

    /// Move a run from `from` to `to` and trace it; false when it was not
    /// in `from` (another worker, or a cancel, came first).
    async fn step(
        &self,
        caller: &Principal,
        run: &RunRow,
        from: RunStatus,
        to: RunStatus,
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
        from: RunStatus,
        to: RunStatus,
        error: Option<String>,
    ) {
        let mut payload = json!({"run_id": run.run_id.as_str(), "skill_id": run.skill_id, "version": run.version,
            "from": from.as_str(), "to": to.as_str()});
        if let Some(e) = error {
            payload["error"] = json!(e);
        }
        self.append(caller, spb::EventType::RunTransition, payload)
            .await;
    }

    fn unknown_skill(&self, skill_id: &str, version: Option<&str>) -> ServiceError {
        let err = match (skills::find(&self.skills, skill_id, None), version) {
            (Some(latest), Some(v)) => ServiceError::not_found(format!(
                "version: {skill_id} has no version {}; the latest is {}",
                quoted(v),
                latest.manifest().version
            )),
            _ => {
                let ids: Vec<&str> = self.skills.iter().map(|s| s.manifest().skill_id).collect();
                ServiceError::not_found(format!(
                    "skill_id: unknown skill {}; skills: {}",
                    quoted(skill_id),
                    ids.join(", ")
                ))
            }
        };
        err.with_domain(DomainCode::UnknownSkill)
    }
}

/// A run's entry in [`SkillsService`]'s `computing` map while it computes
/// (its stop signal: the caller's for an interactive run, its own for a
/// batch run), removed when the computation ends.
struct Computing<'a> {
    service: &'a SkillsService,
    run_id: RunId,
}

impl<'a> Computing<'a> {
    fn register(service: &'a SkillsService, run_id: &RunId, stop: &Stop) -> Computing<'a> {
        service
            .computing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(run_id.clone(), stop.clone());
        Computing {
            service,
            run_id: run_id.clone(),
        }
    }
}

impl Drop for Computing<'_> {
    fn drop(&mut self) {
        self.service
            .computing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.run_id);
    }
}

/// `text` quoted for an error message, cut after 64 characters: what a
/// caller sent may be megabytes long, and errors travel in a gRPC trailer.
fn quoted(text: &str) -> String {
    let shown: String = text.chars().take(64).collect();
    if shown.len() < text.len() {
        format!("{shown:?}…")
    } else {
        format!("{shown:?}")
    }
}

/// Whether `err` is a run stopped because nobody waits for it any more.
fn is_cancellation(err: &ServiceError) -> bool {
    err.domain == Some(skills::RUN_CANCELLED.as_str())
}

/// Check an id's shape (a UUID) and return its canonical form.
pub(crate) fn parse_id(field: &str, raw: &str) -> Result<String, ServiceError> {
    ithaca_kit::id::canonical_uuid(raw)
        .ok_or_else(|| ServiceError::invalid(format!("{field}: not an id (expected a UUID)")))
}

fn owned(words: Vec<&str>) -> Vec<String> {
    words.into_iter().map(str::to_owned).collect()
}

#[tonic::async_trait]
impl crate::sources::Sources for SkillsService {
    async fn prices(
        &self,
        caller: &Principal,
        symbol: &str,
        start: Option<&str>,
        end: Option<&str>,
    ) -> Result<(Vec<String>, Vec<f64>), ServiceError> {
        SkillsService::prices(self, caller, symbol, start, end).await
    }

    async fn symbols(&self, caller: &Principal) -> Result<Vec<String>, ServiceError> {
        self.known_symbols(caller).await
    }

    async fn light_curve(
        &self,
        caller: &Principal,
        broker_id: &str,
        object_id: &str,
    ) -> Result<ithaca_proto::broker::v1::LightCurve, ServiceError> {
        SkillsService::light_curve(self, caller, broker_id, object_id).await
    }

    async fn fundamentals(
        &self,
        caller: &Principal,
        request: ithaca_proto::broker::v1::GetFundamentalsRequest,
    ) -> Result<ithaca_proto::broker::v1::Fundamentals, ServiceError> {
        SkillsService::fundamentals(self, caller, request).await
    }

    async fn screen_peers(
        &self,
        caller: &Principal,
        request: ithaca_proto::broker::v1::ScreenPeersRequest,
    ) -> Result<ithaca_proto::broker::v1::PeerScreen, ServiceError> {
        SkillsService::screen_peers(self, caller, request).await
    }

    async fn strategy(
        &self,
        caller: &Principal,
        strategy_id: &str,
    ) -> Result<crate::store::StrategyRow, ServiceError> {
        SkillsService::strategy(self, caller, strategy_id).await
    }
}
