//! A computation that panics fails its run, interactive or batch, and the
//! service goes on: the panic never leaves a run `running`.

use crate::catalog::Manifest;
use crate::model::{Profile, RunStatus};
use crate::service::SkillsService;
use crate::skills::{Context, Inputs, Output, Skill};
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::principal::{InternalKey, Principal};
use serde_json::json;

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

async fn service(dir: &tempfile::TempDir) -> SkillsService {
    let path = dir.path().join("skills.db").display().to_string();
    let db = crate::open_db(&path, "unused").await.expect("db");
    let key = InternalKey::new(vec![7; 32]).expect("key");
    SkillsService::with_skills(
        crate::store::Store::new(db),
        key,
        &crate::Config::default(),
        vec![&INTERACTIVE, &BATCH],
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
