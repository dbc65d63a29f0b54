//! A computation that panics fails its run, interactive or batch, and the
//! service goes on: the panic never leaves a run `running`. An interactive
//! computation stops, its run `cancelled`, when its caller goes away or its
//! deadline passes; a batch one goes on.

use crate::catalog::Manifest;
use crate::model::{Profile, RunStatus};
use crate::service::SkillsService;
use crate::skills::{Context, Inputs, Output, Skill};
use crate::stop::Stop;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::principal::{InternalKey, Principal};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A skill whose computation panics.
struct Panics(Profile);

static INTERACTIVE: Panics = Panics(Profile::Interactive);
static BATCH: Panics = Panics(Profile::Batch);

#[tonic::async_trait]
impl Skill for Panics {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: match self.0 {
                Profile::Interactive => "test.panics",
                Profile::Batch => "test.panics_batch",
            },
            version: "1.0",
            name: "Panics",
            description: "Indexes past the end of its data.",
            input_schema: json!({"type": "object", "properties": {}}),
            output_schema: json!({"type": "object"}),
            profile: self.0,
            asset_class: "test",
            source_classes: &[],
            trigger_compatible: false,
            intents: &[],
        }
    }

    async fn run(&self, _: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError> {
        let empty: Vec<f64> = inputs
            .counts("nothing")
            .unwrap_or_default()
            .into_iter()
            .map(|n| n as f64)
            .collect();
        let index = empty.len() + 1;
        Ok(Output {
            outputs: json!({"value": empty[index]}),
            artifacts: Vec::new(),
        })
    }
}

fn agent() -> Principal {
    Principal::verified(ithaca_kit::principal::VerifiedKey {
        tenant_id: "tenant-a".into(),
        key_id: "agent-a".into(),
        scopes: Vec::new(),
        human: false,
    })
}

/// A skill that computes until it is stopped, counting its turns; it
/// never awaits, so only [`Context::check`] can stop it.
struct Spins {
    skill_id: &'static str,
    profile: Profile,
    turns: AtomicU64,
}

static SPINS_DROPPED: Spins = Spins::new("test.spins_dropped", Profile::Interactive);
static SPINS_DEADLINE: Spins = Spins::new("test.spins_deadline", Profile::Interactive);
static SPINS_BATCH: Spins = Spins::new("test.spins_batch", Profile::Batch);

impl Spins {
    const fn new(skill_id: &'static str, profile: Profile) -> Spins {
        Spins {
            skill_id,
            profile,
            turns: AtomicU64::new(0),
        }
    }

    fn turns(&self) -> u64 {
        self.turns.load(Ordering::Relaxed)
    }
}

#[tonic::async_trait]
impl Skill for Spins {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: self.skill_id,
            version: "1.0",
            name: "Spins",
            description: "Computes until stopped.",
            input_schema: json!({"type": "object", "properties": {}}),
            output_schema: json!({"type": "object"}),
            profile: self.profile,
            asset_class: "test",
            source_classes: &[],
            trigger_compatible: false,
            intents: &[],
        }
    }

    async fn run(&self, ctx: &Context<'_>, _: &Inputs) -> Result<Output, ServiceError> {
        loop {
            ctx.check()?;
            let mut x = 0u64;
            for i in 0..100_000u64 {
                x = x.wrapping_mul(31).wrapping_add(i);
            }
            std::hint::black_box(x);
            self.turns.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A batch skill that reports three steps and succeeds.
struct Steps;

static STEPS: Steps = Steps;

#[tonic::async_trait]
impl Skill for Steps {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: "test.steps",
            version: "1.0",
            name: "Steps",
            description: "Reports three steps.",
            input_schema: json!({"type": "object", "properties": {}}),
            output_schema: json!({"type": "object"}),
            profile: Profile::Batch,
            asset_class: "test",
            source_classes: &[],
            trigger_compatible: false,
            intents: &[],
        }
    }

    async fn run(&self, ctx: &Context<'_>, _: &Inputs) -> Result<Output, ServiceError> {
        for done in 1..=3 {
            ctx.progress(done, 3, format!("step {done}"));
        }
        Ok(Output {
            outputs: json!({"steps": 3}),
            artifacts: Vec::new(),
        })
    }
}

async fn service(dir: &tempfile::TempDir) -> SkillsService {
    let path = dir.path().join("skills.db").display().to_string();
    let db = crate::open_db(&path, "unused").await.expect("db");
    let key = InternalKey::new(vec![7; 32]).expect("key");
    SkillsService::with_skills(
        crate::store::Store::new(db),
        key,
        &crate::Config::default(),
        vec![
            &INTERACTIVE,
            &BATCH,
            &SPINS_DROPPED,
            &SPINS_DEADLINE,
            &SPINS_BATCH,
            &STEPS,
        ],
    )
    .expect("service")
}

#[tokio::test]
async fn an_interactive_run_that_panics_fails_with_internal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(&dir).await;
    let err = svc
        .run(&agent(), "test.panics", None, json!({}))
        .await
        .expect_err("the computation panics");
    assert_eq!(err.code, Code::Internal);
    assert!(
        !err.message.contains("index out of bounds"),
        "no details: {}",
        err.message
    );
    let run_id = err
        .message
        .split("(run ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .expect("the error names the run");
    let view = svc.get_run(&agent(), run_id).await.expect("run");
    assert_eq!(view.run.status, RunStatus::Failed);
    assert!(
        view.run.error.starts_with("internal error"),
        "{}",
        view.run.error
    );
    assert_eq!(view.jobs.len(), 1);
    assert_eq!(view.jobs[0].status, RunStatus::Failed);
    // The service still serves.
    assert!(svc.describe("test.panics", None).is_ok());
}

#[tokio::test]
async fn a_batch_run_that_panics_fails_and_the_worker_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(&dir).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    svc.spawn_worker(shutdown.clone(), &tokio_util::task::TaskTracker::new());
    let mut ids = Vec::new();
    for _ in 0..2 {
        let queued = svc
            .run(&agent(), "test.panics_batch", None, json!({}))
            .await
            .expect("queued");
        assert_eq!(queued.run.status, RunStatus::Queued);
        ids.push(queued.run.run_id);
    }
    for id in ids {
        let mut status = RunStatus::Queued;
        for _ in 0..100 {
            status = svc.get_run(&agent(), &id).await.expect("run").run.status;
            if !status.is_active() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(status, RunStatus::Failed, "run {id}");
    }
    shutdown.cancel();
}

/// Every run's id, status and error, read from the service's own SQLite
/// file (a run whose caller went away was never answered with its id).
async fn runs(dir: &tempfile::TempDir) -> Vec<(String, String, String)> {
    let path = dir.path().join("skills.db").display().to_string();
    let db = crate::open_db(&path, "unused").await.expect("db");
    let ithaca_kit::db::Pool::Sqlite(pool) = db.pool() else {
        panic!("a SQLite database");
    };
    sqlx::query_as("SELECT run_id, status, error FROM runs ORDER BY created_at_ms")
        .fetch_all(pool)
        .await
        .expect("runs")
}

/// Wait until `spins` has turned at least once.
async fn until_turning(spins: &Spins) {
    for _ in 0..500 {
        if spins.turns() > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never ran", spins.skill_id);
}

/// Assert that `spins` stopped turning.
async fn stopped(spins: &Spins) {
    // A turn under way when the stop came may still end.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = spins.turns();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(spins.turns(), before, "{} still computes", spins.skill_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_run_whose_caller_goes_away_stops_and_is_cancelled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(&dir).await;
    let call = tokio::spawn({
        let svc = svc.clone();
        async move {
            svc.run(&agent(), "test.spins_dropped", None, json!({}))
                .await
        }
    });
    until_turning(&SPINS_DROPPED).await;
    // What tonic does when the caller cancels: the handler's future is dropped.
    call.abort();
    stopped(&SPINS_DROPPED).await;
    let runs = runs(&dir).await;
    let (run_id, status, error) = runs
        .iter()
        .find(|(_, status, _)| status != "failed")
        .expect("the run");
    assert_eq!(status, "cancelled", "{runs:?}");
    assert!(error.contains("the caller went away"), "{error}");
    let view = svc.get_run(&agent(), run_id).await.expect("run");
    assert_eq!(view.jobs.len(), 1);
    assert_eq!(view.jobs[0].status, RunStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_run_stops_at_its_callers_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(&dir).await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(300);
    let err = svc
        .run_until(
            &agent(),
            "test.spins_deadline",
            None,
            json!({}),
            Stop::until(Some(deadline)),
        )
        .await
        .expect_err("stopped at the deadline");
    assert_eq!(err.domain, Some("RUN_CANCELLED"), "{}", err.message);
    assert!(err.message.contains("deadline passed"), "{}", err.message);
    assert!(SPINS_DEADLINE.turns() > 0);
    stopped(&SPINS_DEADLINE).await;
    let run_id = err
        .message
        .split("(run ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .expect("the error names the run");
    let view = svc.get_run(&agent(), run_id).await.expect("run");
    assert_eq!(view.run.status, RunStatus::Cancelled);
    assert_eq!(view.jobs[0].status, RunStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_run_stops_a_batch_computation_on_the_worker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(&dir).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    svc.spawn_worker(shutdown.clone(), &tokio_util::task::TaskTracker::new());
    let queued = svc
        .run(&agent(), "test.spins_batch", None, json!({}))
        .await
        .expect("queued");
    until_turning(&SPINS_BATCH).await;
    let cancelled = svc
        .cancel(&agent(), queued.run.run_id.as_str())
        .await
        .expect("cancelled");
    assert_eq!(cancelled.run.status, RunStatus::Cancelled);
    stopped(&SPINS_BATCH).await;
    let view = svc
        .get_run(&agent(), queued.run.run_id.as_str())
        .await
        .expect("run");
    assert_eq!(view.run.status, RunStatus::Cancelled);
    assert_eq!(view.jobs[0].status, RunStatus::Cancelled);
    // The worker goes on with the next run.
    let next = svc
        .run(&agent(), "test.panics_batch", None, json!({}))
        .await
        .expect("queued");
    let mut status = RunStatus::Queued;
    for _ in 0..100 {
        status = svc
            .get_run(&agent(), next.run.run_id.as_str())
            .await
            .expect("run")
            .run
            .status;
        if !status.is_active() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, RunStatus::Failed);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_leaves_a_fresh_interactive_run_to_its_caller() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(&dir).await;
    let now = ithaca_kit::clock::now_ms();
    let queued = |age_ms: i64| crate::store::RunRow {
        run_id: crate::model::RunId::new_v4(),
        tenant_id: ithaca_kit::id::TenantId::parse("tenant-a").expect("tenant"),
        session_id: String::new(),
        skill_id: "test.panics".into(),
        version: "1.0".into(),
        inputs: "{}".into(),
        status: RunStatus::Queued,
        outputs: None,
        error: String::new(),
        created_at_ms: now - age_ms,
        updated_at_ms: now - age_ms,
        requester: serde_json::to_string(&agent()).expect("principal"),
    };
    // Just recorded by a caller about to claim it, and one whose caller's
    // process stopped two minutes ago.
    let fresh = queued(0);
    let orphaned = queued(120_000);
    svc.store.insert_run(&fresh).await.expect("insert");
    svc.store.insert_run(&orphaned).await.expect("insert");
    let shutdown = tokio_util::sync::CancellationToken::new();
    svc.spawn_worker(shutdown.clone(), &tokio_util::task::TaskTracker::new());
    let status = |run_id: crate::model::RunId| {
        let svc = svc.clone();
        async move {
            svc.get_run(&agent(), run_id.as_str())
                .await
                .expect("run")
                .run
                .status
        }
    };
    let mut orphan_status = RunStatus::Queued;
    for _ in 0..100 {
        orphan_status = status(orphaned.run_id.clone()).await;
        if !orphan_status.is_active() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        orphan_status,
        RunStatus::Failed,
        "the worker ran the orphan"
    );
    // Two more turns of the worker's loop.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(status(fresh.run_id.clone()).await, RunStatus::Queued);
    shutdown.cancel();
}

/// run_skill computes a batch run within the call and forwards its
/// progress. The run is recorded claimed (`running`), so a worker reading
/// the queue at that moment cannot take it; when it was recorded `queued`,
/// a worker could, and the caller heard no progress at all (a CI run of
/// the Python SDK's client once saw none). Here a claimer as eager as a
/// worker can be (the worker's own query and claim, in a loop) watches the
/// queue through twenty followed runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_batch_run_is_never_the_workers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = service(&dir).await;
    let done = tokio_util::sync::CancellationToken::new();
    let claimer = tokio::spawn({
        let (svc, done) = (svc.clone(), done.clone());
        async move {
            let mut taken = 0;
            while !done.is_cancelled() {
                let now = ithaca_kit::clock::now_ms();
                if let Ok(Some(run)) = svc.store.next_queued(&["test.steps"], 0).await
                    && svc
                        .store
                        .transition(
                            &run.run_id,
                            RunStatus::Queued,
                            RunStatus::Running,
                            None,
                            "",
                            now,
                        )
                        .await
                        .unwrap_or(false)
                {
                    taken += 1;
                }
                tokio::task::yield_now().await;
            }
            taken
        }
    });
    for n in 0..20 {
        let (progress, mut steps) = tokio::sync::mpsc::channel(64);
        let view = tokio::time::timeout(
            Duration::from_secs(10),
            svc.run_following(
                &agent(),
                "test.steps",
                None,
                json!({}),
                progress,
                &Stop::never(),
            ),
        )
        .await
        .expect("the run came back within 10 s")
        .expect("run");
        let mut heard = Vec::new();
        while let Ok(step) = steps.try_recv() {
            heard.push(step.done);
        }
        assert_eq!(
            heard,
            vec![1, 2, 3],
            "run {n}: every step reached the caller"
        );
        assert_eq!(view.run.status, RunStatus::Succeeded, "run {n}");
    }
    done.cancel();
    assert_eq!(
        claimer.await.expect("claimer"),
        0,
        "no followed run was queued"
    );
}
