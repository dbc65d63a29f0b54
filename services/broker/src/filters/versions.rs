//! Versions of a filter: posting one (numbered and validated at once),
//! validating one again, activating one, and the compile step all three
//! share with the preview: a pipeline checked against the alert schema and
//! bounded by the filter's stream.
//!
//! Activation rules, in the order they are checked:
//! 1. the caller's session is opened on this filter (`SUBJECT_MISMATCH`);
//! 2. the version has a passing verdict, and its pipeline still compiles
//!    against the schema and stream as they are now (`NOT_VALIDATED`);
//! 3. that exact pipeline (SHA-256 of its canonical JSON) was previewed on
//!    the filter's stream in the caller's session (`NOT_PREVIEWED`).

use super::access::{require_subject, require_write_scope, tenant_of};
use super::model::{self, FilterId, Finding, codes};
use super::pipeline::{self, Checked};
use super::service::FilterService;
use super::store::{FilterRow, StreamRow, Verdict, VersionRow};
use ithaca_kit::clock;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;
use serde_json::Value as Json;

/// Largest pipeline accepted, as canonical JSON.
pub const MAX_PIPELINE_BYTES: usize = 64 * 1024;

/// A stored verdict, as the version tools answer it.
#[derive(Clone, Debug)]
pub struct VerdictView {
    pub filter_id: String,
    pub version: i64,
    pub passed: bool,
    pub problems: Vec<Finding>,
    pub warnings: Vec<Finding>,
    pub pipeline_hash: String,
}

/// What activation did.
#[derive(Clone, Debug)]
pub struct Activation {
    pub filter_id: String,
    pub version: i64,
    pub previous: Option<i64>,
    /// From a check: what the activation would do, for the person who
    /// approves it (`ithaca_kit::approval::SUMMARY_KEY`).
    pub summary: Option<serde_json::Value>,
    /// The latest preview of its pipeline matched nothing, say.
    pub warnings: Vec<Finding>,
}

/// A pipeline compiled for a stream: the compiled form with its warnings,
/// or the problems that stopped it.
pub type Compiled = Result<Checked, Vec<Finding>>;

/// `pipeline` must be a JSON array of at most [`MAX_PIPELINE_BYTES`].
pub fn check_shape(pipeline: &Json) -> Result<(), ServiceError> {
    if !pipeline.is_array() {
        return Err(ServiceError::invalid(
            "pipeline: a JSON array of stages, for example [{\"$match\": {\"candidate.drb\": {\"$gt\": 0.5}}}]",
        ));
    }
    let size = model::canonical_text(pipeline).len();
    if size > MAX_PIPELINE_BYTES {
        return Err(ServiceError::invalid(format!(
            "pipeline: at most {MAX_PIPELINE_BYTES} bytes of JSON (got {size})"
        )));
    }
    Ok(())
}

/// The verdict to store for `posted` given how it compiled: the canonical
/// pipeline when it compiled, the posted one otherwise.
fn verdict(posted: &Json, compiled: &Compiled) -> Result<Verdict, ServiceError> {
    let at_ms = clock::now_ms();
    let text = |f: &[Finding]| serde_json::to_string(f).map_err(|e| ServiceError::internal(&e));
    Ok(match compiled {
        Ok(checked) => {
            let canonical = checked.pipeline.canonical();
            let warnings: Vec<Finding> = checked.warnings.iter().map(Finding::from).collect();
            Verdict {
                pipeline: model::canonical_text(&canonical),
                pipeline_hash: model::pipeline_hash(&canonical),
                passed: true,
                problems: "[]".to_owned(),
                warnings: text(&warnings)?,
                at_ms,
            }
        }
        Err(problems) => Verdict {
            pipeline: model::canonical_text(posted),
            pipeline_hash: model::pipeline_hash(posted),
            passed: false,
            problems: text(problems)?,
            warnings: "[]".to_owned(),
            at_ms,
        },
    })
}

fn view(filter_id: &str, version: i64, v: &Verdict) -> Result<VerdictView, ServiceError> {
    let parse = |t: &str| -> Result<Vec<Finding>, ServiceError> {
        serde_json::from_str(t).map_err(|e| ServiceError::internal(&e))
    };
    Ok(VerdictView {
        filter_id: filter_id.to_owned(),
        version,
        passed: v.passed,
        problems: parse(&v.problems)?,
        warnings: parse(&v.warnings)?,
        pipeline_hash: v.pipeline_hash.clone(),
    })
}

impl FilterService {
    /// Compile `pipeline` for the stream `stream_id` against the schema as
    /// it is now.
    pub(super) async fn compile_for(
        &self,
        stream_id: &str,
        pipeline: &Json,
    ) -> Result<Compiled, ServiceError> {
        let streams = self.store.streams().await?;
        let stream = streams
            .into_iter()
            .find(|s| s.stream_id == stream_id)
            .ok_or_else(|| {
                ServiceError::new(
                    ithaca_kit::error::Code::Internal,
                    "internal error: a filter names an unknown stream",
                )
            })?;
        let schema = self.schema().await?;
        let bounds = stream.bounds(&schema);
        match pipeline::compile(pipeline, &schema, &bounds) {
            Ok(checked) => Ok(Ok(checked)),
            Err(problems) => {
                let mut found: Vec<Finding> = problems.iter().map(Finding::from).collect();
                self.name_foreign_paths(&stream, &mut found).await?;
                Ok(Err(found))
            }
        }
    }

    /// Problems about a path that is not the survey's but another
    /// producer's (a field Fink adds): say so, rather than suggest a
    /// near-miss of the survey's.
    async fn name_foreign_paths(
        &self,
        stream: &StreamRow,
        problems: &mut [Finding],
    ) -> Result<(), ServiceError> {
        let foreign = self.alerts.producer_paths().await?;
        if foreign.is_empty() {
            return Ok(());
        }
        for p in problems.iter_mut() {
            let named = foreign.iter().find(|(_, f)| {
                let field = f.field.as_str();
                p.message.starts_with(&format!("{field} is not a path"))
                    || p.message.starts_with(&format!("${field} is not a path"))
            });
            if let Some((producer, f)) = named {
                p.message = format!(
                    "{}: {} is a field {producer} adds to the alerts it redistributes, not part of {}'s alert schema; \
                     a filter on stream {} is checked against {}'s schema only (get_alert_schema lists it; \
                     get_alert_schema with producer {producer} lists {producer}'s own fields)",
                    codes::FOREIGN_PATH,
                    f.field,
                    stream.survey,
                    stream.stream_id,
                    stream.survey
                );
                p.suggestion = None;
            }
        }
        Ok(())
    }

    /// Add the zero-match warning to a passing verdict whose pipeline's
    /// latest preview on `stream_id` matched nothing.
    async fn warn_zero_matches(
        &self,
        tenant: &str,
        stream_id: &str,
        verdict: &mut Verdict,
    ) -> Result<(), ServiceError> {
        if !verdict.passed {
            return Ok(());
        }
        let Some(zero) = self
            .zero_match_warning(tenant, &verdict.pipeline_hash, stream_id)
            .await?
        else {
            return Ok(());
        };
        let mut warnings: Vec<Finding> =
            serde_json::from_str(&verdict.warnings).map_err(|e| ServiceError::internal(&e))?;
        warnings.push(zero);
        verdict.warnings =
            serde_json::to_string(&warnings).map_err(|e| ServiceError::internal(&e))?;
        Ok(())
    }

    /// `post_broker_filter_version`: the next version, validated.
    pub async fn post_version(
        &self,
        caller: &Principal,
        filter_id: &str,
        pipeline: &Json,
    ) -> Result<VerdictView, ServiceError> {
        let tenant = tenant_of(caller)?;
        require_write_scope(caller)?;
        let id = FilterId::parse(filter_id)?;
        require_subject(caller, &id, "post_broker_filter_version")?;
        check_shape(pipeline)?;
        let filter = self.filter_of(tenant, &id).await?;
        let compiled = self.compile_for(&filter.stream_id, pipeline).await?;
        let mut verdict = verdict(pipeline, &compiled)?;
        self.warn_zero_matches(tenant, &filter.stream_id, &mut verdict)
            .await?;
        let Some(version) = self
            .store
            .add_version(tenant, &filter.filter_id, caller.key_id(), &verdict)
            .await?
        else {
            return Err(super::service::unknown_filter(&id));
        };
        tracing::info!(filter_id = %filter.filter_id, version, passed = verdict.passed, "filter version posted");
        view(&filter.filter_id, version, &verdict)
    }

    /// `validate_broker_filter_version`: validate again and store the verdict.
    pub async fn validate(
        &self,
        caller: &Principal,
        filter_id: &str,
        version: i32,
    ) -> Result<VerdictView, ServiceError> {
        let tenant = tenant_of(caller)?;
        require_write_scope(caller)?;
        let id = FilterId::parse(filter_id)?;
        let version = model::parse_version("version", version)?;
        require_subject(caller, &id, "validate_broker_filter_version")?;
        let filter = self.filter_of(tenant, &id).await?;
        let stored = self.version_of(&filter, version, "version").await?;
        let pipeline: Json =
            serde_json::from_str(&stored.pipeline).map_err(|e| ServiceError::internal(&e))?;
        let compiled = self.compile_for(&filter.stream_id, &pipeline).await?;
        let mut verdict = verdict(&pipeline, &compiled)?;
        self.warn_zero_matches(tenant, &filter.stream_id, &mut verdict)
            .await?;
        self.store
            .set_verdict(&filter.filter_id, version, &verdict)
            .await?;
        view(&filter.filter_id, version, &verdict)
    }

    /// `activate_broker_filter_version`: the checks of this module's docs,
    /// then the version runs on every newly ingested alert.
    /// Activate a version, after every check. With `check` (the approval
    /// gate's check, `ithaca_kit::approval::is_check`) the checks run and
    /// nothing changes: the answer names the version that would be active.
    pub async fn activate(
        &self,
        caller: &Principal,
        filter_id: &str,
        version: i32,
        check: bool,
    ) -> Result<Activation, ServiceError> {
        let tenant = tenant_of(caller)?;
        require_write_scope(caller)?;
        let id = FilterId::parse(filter_id)?;
        let version = model::parse_version("version", version)?;
        require_subject(caller, &id, "activate_broker_filter_version")?;
        let filter = self.filter_of(tenant, &id).await?;
        let stored = self.version_of(&filter, version, "version").await?;
        if !stored.passed {
            let problems: Vec<Finding> = serde_json::from_str(&stored.problems).unwrap_or_default();
            let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
            return Err(ServiceError::precondition(format!(
                "version: version {version} has no passing verdict ({}); post a corrected version",
                if listed.is_empty() {
                    "not validated".to_owned()
                } else {
                    listed.join("; ")
                }
            ))
            .with_domain(codes::NOT_VALIDATED));
        }
        let pipeline: Json =
            serde_json::from_str(&stored.pipeline).map_err(|e| ServiceError::internal(&e))?;
        let checked = match self.compile_for(&filter.stream_id, &pipeline).await? {
            Ok(checked) => checked,
            Err(problems) => {
                let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
                return Err(ServiceError::precondition(format!(
                    "version: version {version} no longer passes against the alert schema ({}); \
                     validate_broker_filter_version stores the new verdict",
                    listed.join("; ")
                ))
                .with_domain(codes::NOT_VALIDATED));
            }
        };
        let hash = model::pipeline_hash(&checked.pipeline.canonical());
        let Some(session) = caller.session_id() else {
            return Err(ServiceError::precondition(
                "version: activation needs a preview of this pipeline in the caller's research session, and the call has no session",
            )
            .with_domain(codes::NOT_PREVIEWED));
        };
        if !self
            .store
            .previewed(tenant, session, &hash, &filter.stream_id)
            .await?
        {
            return Err(ServiceError::precondition(format!(
                "version: version {version}'s pipeline (sha256 {hash}) was not previewed on stream {} in this session; \
                 run_broker_filter with exactly this pipeline and filter_id {id} first",
                filter.stream_id
            ))
            .with_domain(codes::NOT_PREVIEWED));
        }
        let warnings: Vec<Finding> = self
            .zero_match_warning(tenant, &hash, &filter.stream_id)
            .await?
            .into_iter()
            .collect();
        if check {
            let mut summary = self
                .activation_summary(caller, &filter, &stored, &pipeline)
                .await;
            if let Some(w) = warnings.first() {
                summary["zero_matches"] = Json::String(w.message.clone());
            }
            return Ok(Activation {
                filter_id: filter.filter_id,
                version,
                previous: filter.active_version,
                summary: Some(summary),
                warnings,
            });
        }
        let previous = self
            .store
            .activate(tenant, &filter.filter_id, version, clock::now_ms())
            .await?;
        self.live.invalidate();
        tracing::info!(filter_id = %filter.filter_id, version, "filter version activated");
        Ok(Activation {
            filter_id: filter.filter_id,
            version,
            previous,
            summary: None,
            warnings,
        })
    }

    /// What activating `stored` would do, in the filter's terms: the filter,
    /// the version's pipeline and verdict, and the active version it
    /// replaces with the diff between them. Long parts are cut so the
    /// summary fits the approval gate's bound.
    async fn activation_summary(
        &self,
        caller: &Principal,
        filter: &FilterRow,
        stored: &VersionRow,
        pipeline: &Json,
    ) -> Json {
        let warnings: Json = serde_json::from_str(&stored.warnings).unwrap_or(Json::Null);
        let mut summary = serde_json::json!({
            "what": format!(
                "make version {} of filter {:?} the one the broker runs on every new alert of stream {}",
                stored.version, filter.name, filter.stream_id
            ),
            "filter": {
                "filter_id": filter.filter_id,
                "name": filter.name,
                "stream_id": filter.stream_id,
                "uri": super::model::filter_uri(&filter.filter_id),
            },
            "version": stored.version,
            "pipeline": cut(&model::pretty_text(pipeline), 2_000),
            "verdict": {"passed": stored.passed, "warnings": warnings},
            "previewed_in_session": true,
            "replaces_version": filter.active_version,
        });
        if let Some(active) = filter.active_version.filter(|a| *a != stored.version)
            && let Ok(diff) = self
                .diff(
                    caller,
                    &filter.filter_id,
                    i32::try_from(active).unwrap_or(0),
                    i32::try_from(stored.version).unwrap_or(0),
                )
                .await
        {
            summary["diff_from_active"] = Json::String(cut(&diff.diff, 2_000));
        }
        summary
    }
}

/// `text` cut to at most `max` bytes (at a character boundary), saying so.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}
