//! Broker filters through `ithaca.broker.v1.FilterService` over real gRPC,
//! on SQLite and PostgreSQL, with the real ZTF alerts of `../shared/data`
//! ingested through the broker's own `IngestAlerts`: the whole flow from
//! post_filter to activation in a session opened on the filter, activation
//! refused without a verdict or without a preview in the same session, a
//! misspelt path named, writes refused outside their subject, bad input on
//! every RPC, tenant isolation, the deep copy of the defaults, and an
//! active version saving the matches of newly ingested alerts (counted
//! independently from SOURCES.md), bounded by its stream.

use crate::common;

use common::{astro, gcn, skymap};
use ithaca_kit::client::{self, Outbound};
use ithaca_kit::error::domain_code;
use ithaca_kit::principal::{Principal, Subject, VerifiedKey};
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::alert_service_client::AlertServiceClient;
use ithaca_proto::broker::v1::filter_service_client::FilterServiceClient;
use prost_types::ListValue;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::PathBuf;
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Filters = FilterServiceClient<InterceptedService<Channel, Outbound>>;

/// For each behaviour, a `sqlite` and a `postgres` test, each on a broker
/// of its own serving over gRPC on a loopback port.
macro_rules! on_both_brokers {
    ($($behaviour:ident),+ $(,)?) => {$(
        mod $behaviour {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let dir = tempfile::tempdir().expect("tempdir");
                let url = crate::common::sqlite_path(&dir, "broker");
                let broker = crate::filters::Broker::start(&url, "unused").await;
                super::$behaviour(&broker).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let Some(url) = crate::common::postgres(module_path!()) else {
                    return;
                };
                let schema = crate::common::unique_schema("filters");
                let broker = crate::filters::Broker::start(&url, &schema).await;
                super::$behaviour(&broker).await;
                broker.db.close().await;
                crate::common::drop_schema(&url, &schema).await;
            }
        }
    )+};
}

on_both_brokers!(
    the_console_lists_a_tenants_filters_a_page_at_a_time,
    the_whole_flow_from_post_filter_to_activation,
    activation_needs_a_verdict_and_a_preview_in_the_same_session,
    a_misspelt_path_is_refused_with_the_path_named,
    writes_are_refused_outside_their_subject,
    bad_input_gets_a_clear_error_and_writes_nothing,
    tenants_never_see_each_others_groups_or_filters,
    the_defaults_are_a_deep_copy,
    an_active_version_saves_matches_of_newly_ingested_alerts,
    an_objects_matches_are_its_tenants_filters_only,
    a_gcn_localisation_bounds_the_preview,
    a_sky_map_bounds_the_preview,
);

mod lifecycle;

/// A broker serving `AlertService` and `FilterService` (and the rest of
/// its services) on one port, as `ithaca serve broker` does.
pub struct Broker {
    url: String,
    db: ithaca_kit::db::Db,
}

impl Broker {
    async fn start(db_url: &str, schema: &str) -> Broker {
        let db = ithaca_broker::open_db(db_url, schema)
            .await
            .expect("broker db");
        let config = ithaca_broker::alerts::AlertsConfig {
            schema_dir: Some(astro::schema_dir()),
        };
        let options = ithaca_broker::serve_options_with(db.clone(), common::key(), config);
        let url = common::serve_grpc(options).await;
        Broker { url, db }
    }

    fn filters(&self, caller: &Principal) -> Filters {
        FilterServiceClient::with_interceptor(
            client::channel(&self.url).expect("url"),
            Outbound::new(common::key(), caller.clone()),
        )
    }

    /// Ingest the alert files under `folder` (of `ztf/alerts`) through the
    /// broker's gRPC ingest, as `ithaca ingest ztf` does.
    async fn ingest(&self, folder: &str) -> usize {
        self.ingest_dir(&astro::alerts_dir().join(folder)).await
    }

    /// Ingest every alert file under `dir`.
    async fn ingest_dir(&self, dir: &std::path::Path) -> usize {
        let mut alerts = AlertServiceClient::with_interceptor(
            client::channel(&self.url).expect("url"),
            Outbound::new(common::key(), Principal::system("")),
        );
        let mut stored = 0;
        for path in astro::avro_files(dir) {
            let chunk = pb::AlertFileChunk {
                broker_id: String::new(),
                source: path.file_name().expect("name").to_string_lossy().into(),
                data: std::fs::read(&path).expect("read"),
            };
            let report = alerts
                .ingest_alerts(tokio_stream::iter(vec![chunk]))
                .await
                .expect("ingest")
                .into_inner();
            stored += report.stored as usize;
        }
        stored
    }
}

// ---- principals ------------------------------------------------------------------

/// A person of `tenant` who may write filters.
fn person(tenant: &str) -> Principal {
    Principal::verified(VerifiedKey {
        tenant_id: tenant.to_owned(),
        key_id: format!("{tenant}-person"),
        scopes: vec!["data:read".into(), "filters:write".into()],
        human: true,
    })
}

/// An agent of `tenant` with `filters:write`.
fn agent(tenant: &str) -> Principal {
    Principal::verified(VerifiedKey {
        tenant_id: tenant.to_owned(),
        key_id: format!("{tenant}-agent"),
        scopes: vec!["data:read".into(), "filters:write".into()],
        human: false,
    })
}

/// `who` in research session `session`, opened on filter `filter_id`.
fn on_filter(who: &Principal, session: &str, filter_id: &str) -> Principal {
    who.clone()
        .in_session(Some(session.to_owned()))
        .on_subject(Some(Subject::new("filter", filter_id)))
}

fn in_session(who: &Principal, session: &str) -> Principal {
    who.clone().in_session(Some(session.to_owned()))
}

// ---- JSON <-> protobuf --------------------------------------------------------------

fn list(value: Value) -> ListValue {
    let s = ithaca_kit::json::to_struct(json!({ "v": value }));
    match s.fields.into_values().next().and_then(|v| v.kind) {
        Some(prost_types::value::Kind::ListValue(l)) => l,
        other => panic!("not a list: {other:?}"),
    }
}

fn unlist(list: ListValue) -> Value {
    let s = prost_types::Struct {
        fields: [(
            "v".to_owned(),
            prost_types::Value {
                kind: Some(prost_types::value::Kind::ListValue(list)),
            },
        )]
        .into_iter()
        .collect(),
    };
    ithaca_kit::json::from_struct(s)["v"].clone()
}

// ---- SOURCES.md, read independently of the broker ---------------------------------

/// One alert of SOURCES.md's list: what a cut on them must find.
#[derive(Clone, Debug)]
struct Row {
    folder: String,
    candid: String,
    ra: f64,
    dec: f64,
    magpsf: f64,
}

fn sources() -> Vec<Row> {
    let text = std::fs::read_to_string(astro::data().join("ztf/SOURCES.md")).expect("SOURCES.md");
    text.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            if cells.len() < 11 || !cells[1].ends_with(".avro") {
                return None;
            }
            Some(Row {
                folder: cells[1].split('/').next().unwrap_or_default().to_owned(),
                candid: cells[3].to_owned(),
                ra: cells[6].parse().expect("ra"),
                dec: cells[7].trim_start_matches('+').parse().expect("dec"),
                magpsf: cells[8].parse().expect("magpsf"),
            })
        })
        .collect()
}

/// The one alert of the data that is not public (programid 3, SOURCES.md).
const CALTECH_ALERT: &str = "472263571115115000";

/// candids of `folders` brighter than `mag`, in the public programme.
fn brighter(folders: &[&str], mag: f64) -> BTreeSet<String> {
    sources()
        .into_iter()
        .filter(|r| folders.contains(&r.folder.as_str()) && r.magpsf < mag)
        .filter(|r| r.candid != CALTECH_ALERT)
        .map(|r| r.candid)
        .collect()
}

fn bright_cut(mag: f64) -> Value {
    json!([{"$match": {"candidate.magpsf": {"$lt": mag}}}])
}

// ---- helpers -------------------------------------------------------------------------

fn refused(status: &tonic::Status, code: Code, domain: Option<&str>) {
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(domain_code(status), domain, "{status:?}");
}

async fn default_group(broker: &Broker, who: &Principal) -> pb::FilterTargets {
    broker
        .filters(who)
        .get_filter_targets(pb::GetFilterTargetsRequest {})
        .await
        .expect("targets")
        .into_inner()
}

async fn new_filter(broker: &Broker, who: &Principal, stream: &str) -> pb::Filter {
    let targets = default_group(broker, who).await;
    broker
        .filters(who)
        .post_filter(pb::PostFilterRequest {
            name: format!("bright on {stream}"),
            group_id: targets.groups[0].group_id.clone(),
            stream_id: stream.to_owned(),
            ..Default::default()
        })
        .await
        .expect("post_filter")
        .into_inner()
}

fn preview_of(filter_id: &str, pipeline: Value) -> pb::RunBrokerFilterRequest {
    pb::RunBrokerFilterRequest {
        pipeline: Some(list(pipeline)),
        filter_id: Some(filter_id.to_owned()),
        ..Default::default()
    }
}

async fn post_version(
    broker: &Broker,
    who: &Principal,
    filter_id: &str,
    pipeline: Value,
) -> pb::FilterVersionVerdict {
    broker
        .filters(who)
        .post_broker_filter_version(pb::PostBrokerFilterVersionRequest {
            filter_id: filter_id.to_owned(),
            pipeline: Some(list(pipeline)),
        })
        .await
        .expect("post version")
        .into_inner()
}

async fn read(broker: &Broker, who: &Principal, filter_id: &str) -> pb::Filter {
    broker
        .filters(who)
        .get_broker_filter(pb::GetBrokerFilterRequest {
            filter_id: filter_id.to_owned(),
            matches_limit: Some(200),
        })
        .await
        .expect("get filter")
        .into_inner()
}

// ---- behaviours ----------------------------------------------------------------------

async fn the_whole_flow_from_post_filter_to_activation(broker: &Broker) {
    broker.ingest("v4.02").await;
    broker.ingest("v3.x").await;
    let alice = person("tenant-a");

    // Targets: the default group with both streams; brokers with no more
    // than id, name and survey.
    let targets = default_group(broker, &alice).await;
    assert_eq!(targets.groups.len(), 1);
    assert_eq!(targets.groups[0].name, "default");
    assert_eq!(
        targets.groups[0].stream_ids,
        ["ztf-partnership", "ztf-public"]
    );
    let public = targets
        .streams
        .iter()
        .find(|s| s.stream_id == "ztf-public")
        .expect("public stream");
    assert_eq!(public.programids, [1]);
    assert!(public.withheld_paths.contains(&"fp_hists".to_owned()));
    let partnership = targets
        .streams
        .iter()
        .find(|s| s.stream_id == "ztf-partnership")
        .expect("partnership stream");
    assert_eq!(partnership.programids, [1, 2]);
    assert!(partnership.withheld_paths.is_empty());
    assert_eq!(
        targets
            .brokers
            .iter()
            .map(|b| b.broker_id.as_str())
            .collect::<Vec<_>>(),
        ["ztf-archive"]
    );
    // A second read finds the same group, not a second default.
    assert_eq!(default_group(broker, &alice).await.groups, targets.groups);

    // post_filter: an id and a uri.
    let filter = new_filter(broker, &alice, "ztf-public").await;
    assert_eq!(
        filter.uri,
        format!("doomberg://filters/{}", filter.filter_id)
    );
    assert_eq!(filter.active_version, None);
    let autosave = filter.autosave.expect("autosave");
    assert!(autosave.enabled);
    assert_eq!(autosave.keep, 1000);
    let id = filter.filter_id.clone();

    // The preview: a count, then the alerts themselves sorted.
    let session = "session-1";
    let me = on_filter(&alice, session, &id);
    let cut = bright_cut(18.5);
    let want = brighter(&["v4.02", "v3.x"], 18.5);
    let counted = broker
        .filters(&me)
        .run_broker_filter(preview_of(&id, cut.clone()))
        .await
        .expect("preview")
        .into_inner();
    assert_eq!(counted.matched as usize, want.len(), "{counted:?}");
    // 11 + 5 alerts, less the Caltech one the public stream does not carry.
    assert_eq!(counted.evaluated, 15);
    assert!(counted.alerts.is_empty(), "no sort_by: a count only");
    assert!(counted.recorded);
    assert_eq!(counted.stream_id, "ztf-public");
    let sorted = broker
        .filters(&me)
        .run_broker_filter(pb::RunBrokerFilterRequest {
            sort_by: Some("candidate.magpsf".into()),
            sort_order: Some("Ascending".into()),
            limit: Some(3),
            ..preview_of(&id, cut.clone())
        })
        .await
        .expect("sorted preview")
        .into_inner();
    let mut brightest: Vec<Row> = sources()
        .into_iter()
        .filter(|r| want.contains(&r.candid))
        .collect();
    brightest.sort_by(|a, b| a.magpsf.total_cmp(&b.magpsf));
    let got: Vec<String> = sorted
        .alerts
        .iter()
        .map(|a| {
            let doc = ithaca_kit::json::from_struct(a.clone());
            doc["candid"]
                .as_str()
                .expect("candid as a string")
                .to_owned()
        })
        .collect();
    let expected: Vec<String> = brightest.iter().take(3).map(|r| r.candid.clone()).collect();
    assert_eq!(got, expected);

    // A version: numbered 1, validated at once.
    let verdict = post_version(broker, &me, &id, cut.clone()).await;
    assert_eq!(verdict.version, 1);
    assert!(verdict.passed, "{verdict:?}");
    assert!(verdict.problems.is_empty());
    assert_eq!(verdict.pipeline_hash, counted.pipeline_hash);
    let again = broker
        .filters(&me)
        .validate_broker_filter_version(pb::ValidateBrokerFilterVersionRequest {
            filter_id: id.clone(),
            version: 1,
        })
        .await
        .expect("validate")
        .into_inner();
    assert!(again.passed);

    // Activation, in the session that previewed it.
    let activated = broker
        .filters(&me)
        .activate_broker_filter_version(pb::ActivateBrokerFilterVersionRequest {
            filter_id: id.clone(),
            version: 1,
        })
        .await
        .expect("activate")
        .into_inner();
    assert_eq!(activated.active_version, 1);
    assert_eq!(activated.previous_version, None);

    // A second version, diffed against the first, activated in turn.
    let v2 = post_version(broker, &me, &id, bright_cut(17.5)).await;
    assert_eq!(v2.version, 2);
    let diff = broker
        .filters(&me)
        .diff_broker_filter_versions(pb::DiffBrokerFilterVersionsRequest {
            filter_id: id.clone(),
            from_version: 1,
            to_version: 2,
        })
        .await
        .expect("diff")
        .into_inner();
    assert!(!diff.identical);
    assert!(diff.diff.starts_with("--- v1\n+++ v2\n"), "{}", diff.diff);
    assert!(diff.diff.contains("-") && diff.diff.contains("18.5"));
    assert!(diff.diff.contains("+") && diff.diff.contains("17.5"));
    let same = broker
        .filters(&me)
        .diff_broker_filter_versions(pb::DiffBrokerFilterVersionsRequest {
            filter_id: id.clone(),
            from_version: 1,
            to_version: 1,
        })
        .await
        .expect("diff")
        .into_inner();
    assert!(same.identical && same.diff.is_empty());
    broker
        .filters(&me)
        .run_broker_filter(preview_of(&id, bright_cut(17.5)))
        .await
        .expect("preview v2");
    let swapped = broker
        .filters(&me)
        .activate_broker_filter_version(pb::ActivateBrokerFilterVersionRequest {
            filter_id: id.clone(),
            version: 2,
        })
        .await
        .expect("activate v2")
        .into_inner();
    assert_eq!(swapped.previous_version, Some(1));

    let back = read(broker, &alice, &id).await;
    assert_eq!(back.active_version, Some(2));
    assert_eq!(back.versions.len(), 2);
    assert_eq!(
        unlist(back.versions[0].pipeline.clone().expect("pipeline")),
        json!([{"$match": {"candidate.magpsf": {"$lt": 18.5}}}])
    );
    assert!(back.versions.iter().all(|v| v.passed));
}

async fn activation_needs_a_verdict_and_a_preview_in_the_same_session(broker: &Broker) {
    broker.ingest("v4.02").await;
    let bob = agent("tenant-b");
    let filter = new_filter(broker, &bob, "ztf-partnership").await;
    let id = filter.filter_id.clone();
    let here = on_filter(&bob, "session-here", &id);
    let elsewhere = on_filter(&bob, "session-elsewhere", &id);
    let activate = |who: Principal, version: i32| {
        let client = broker.filters(&who);
        let id = id.clone();
        async move {
            client
                .clone()
                .activate_broker_filter_version(pb::ActivateBrokerFilterVersionRequest {
                    filter_id: id,
                    version,
                })
                .await
        }
    };

    // A version that does not pass: stored, never activated.
    let failing = post_version(
        broker,
        &here,
        &id,
        json!([{"$match": {"candidate.magpsf": {"$lt": "bright"}}}]),
    )
    .await;
    assert!(!failing.passed);
    assert!(!failing.problems.is_empty());
    broker
        .filters(&here)
        .run_broker_filter(preview_of(&id, bright_cut(19.0)))
        .await
        .expect("preview of another pipeline");
    let err = activate(here.clone(), failing.version)
        .await
        .expect_err("no passing verdict");
    refused(&err, Code::FailedPrecondition, Some("NOT_VALIDATED"));
    assert!(
        err.message().contains("candidate.magpsf"),
        "{}",
        err.message()
    );

    // A passing version, previewed only in another session.
    let cut = bright_cut(18.0);
    let passing = post_version(broker, &here, &id, cut.clone()).await;
    assert!(passing.passed);
    let elsewhere_preview = broker
        .filters(&elsewhere)
        .run_broker_filter(preview_of(&id, cut.clone()))
        .await
        .expect("preview elsewhere")
        .into_inner();
    assert!(elsewhere_preview.recorded);
    let err = activate(here.clone(), passing.version)
        .await
        .expect_err("previewed in another session only");
    refused(&err, Code::FailedPrecondition, Some("NOT_PREVIEWED"));
    // No session at all: no preview can count.
    let sessionless = bob
        .clone()
        .on_subject(Some(Subject::new("filter", id.clone())));
    let err = activate(sessionless, passing.version)
        .await
        .expect_err("no session");
    refused(&err, Code::FailedPrecondition, Some("NOT_PREVIEWED"));
    // The same cut on the other stream is another preview.
    let targets = default_group(broker, &bob).await;
    broker
        .filters(&in_session(&bob, "session-here"))
        .run_broker_filter(pb::RunBrokerFilterRequest {
            pipeline: Some(list(cut.clone())),
            group_id: Some(targets.groups[0].group_id.clone()),
            stream_id: Some("ztf-public".into()),
            ..Default::default()
        })
        .await
        .expect("preview on the public stream");
    let err = activate(here.clone(), passing.version)
        .await
        .expect_err("previewed on another stream only");
    refused(&err, Code::FailedPrecondition, Some("NOT_PREVIEWED"));
    assert_eq!(read(broker, &bob, &id).await.active_version, None);

    // Previewed here, with its keys in another order: the same pipeline.
    broker
        .filters(&here)
        .run_broker_filter(pb::RunBrokerFilterRequest {
            pipeline: Some(list(
                json!([{"$match": {"candidate.magpsf": {"$lt": 18.0}}}]),
            )),
            group_id: Some(targets.groups[0].group_id.clone()),
            stream_id: Some("ztf-partnership".into()),
            ..Default::default()
        })
        .await
        .expect("preview here");
    let ok = activate(here.clone(), passing.version)
        .await
        .expect("activates")
        .into_inner();
    assert_eq!(ok.active_version, passing.version);
}

async fn a_misspelt_path_is_refused_with_the_path_named(broker: &Broker) {
    broker.ingest("v4.02").await;
    let carol = person("tenant-c");
    let filter = new_filter(broker, &carol, "ztf-public").await;
    let me = on_filter(&carol, "s", &filter.filter_id);
    let misspelt = json!([{"$match": {"candidate.magpfs": {"$lt": 18.0}}}]);
    let err = broker
        .filters(&me)
        .run_broker_filter(preview_of(&filter.filter_id, misspelt.clone()))
        .await
        .expect_err("misspelt");
    refused(&err, Code::InvalidArgument, Some("INVALID_PIPELINE"));
    assert!(
        err.message().contains("candidate.magpfs") && err.message().contains("candidate.magpsf"),
        "the path and the suggestion are named: {}",
        err.message()
    );
    let verdict = post_version(broker, &me, &filter.filter_id, misspelt).await;
    assert!(!verdict.passed);
    let problem = &verdict.problems[0];
    assert!(problem.location.contains("candidate.magpfs"), "{problem:?}");
    assert_eq!(problem.suggestion.as_deref(), Some("candidate.magpsf"));
    // A cut on a path the stream withholds runs, with a warning.
    let withheld = broker
        .filters(&me)
        .run_broker_filter(preview_of(
            &filter.filter_id,
            json!([{"$match": {"candidate.programpi": "Kulkarni"}}]),
        ))
        .await
        .expect("runs with a warning")
        .into_inner();
    assert!(
        withheld
            .warnings
            .iter()
            .any(|w| w.message.contains("candidate.programpi")),
        "{:?}",
        withheld.warnings
    );
}

async fn writes_are_refused_outside_their_subject(broker: &Broker) {
    let dave = agent("tenant-d");
    let mine = new_filter(broker, &dave, "ztf-public").await;
    let other = new_filter(broker, &dave, "ztf-public").await;
    let cut = bright_cut(18.0);
    let version = |who: &Principal| {
        let mut c = broker.filters(who);
        let id = mine.filter_id.clone();
        let cut = cut.clone();
        async move {
            c.post_broker_filter_version(pb::PostBrokerFilterVersionRequest {
                filter_id: id,
                pipeline: Some(list(cut)),
            })
            .await
        }
    };
    // No subject.
    let err = version(&in_session(&dave, "s"))
        .await
        .expect_err("no subject");
    refused(&err, Code::PermissionDenied, Some("SUBJECT_MISMATCH"));
    assert!(err.message().contains("no subject"), "{}", err.message());
    // Another filter's subject: the message names it.
    let err = version(&on_filter(&dave, "s", &other.filter_id))
        .await
        .expect_err("another filter");
    refused(&err, Code::PermissionDenied, Some("SUBJECT_MISMATCH"));
    assert!(
        err.message().contains(&other.filter_id),
        "{}",
        err.message()
    );
    // A subject of another kind with the same id.
    let gcn = dave
        .clone()
        .in_session(Some("s".into()))
        .on_subject(Some(Subject::new("gcn_event", mine.filter_id.clone())));
    let err = version(&gcn).await.expect_err("another kind");
    refused(&err, Code::PermissionDenied, Some("SUBJECT_MISMATCH"));
    // Validate and activate are scoped the same way.
    let right = on_filter(&dave, "s", &mine.filter_id);
    let posted = version(&right).await.expect("in its subject").into_inner();
    let wrong = on_filter(&dave, "s", &other.filter_id);
    let err = broker
        .filters(&wrong)
        .validate_broker_filter_version(pb::ValidateBrokerFilterVersionRequest {
            filter_id: mine.filter_id.clone(),
            version: posted.version,
        })
        .await
        .expect_err("validate outside");
    refused(&err, Code::PermissionDenied, Some("SUBJECT_MISMATCH"));
    let err = broker
        .filters(&wrong)
        .activate_broker_filter_version(pb::ActivateBrokerFilterVersionRequest {
            filter_id: mine.filter_id.clone(),
            version: posted.version,
        })
        .await
        .expect_err("activate outside");
    refused(&err, Code::PermissionDenied, Some("SUBJECT_MISMATCH"));
    // Only the write in its subject landed.
    assert_eq!(read(broker, &dave, &mine.filter_id).await.versions.len(), 1);
    assert!(
        read(broker, &dave, &other.filter_id)
            .await
            .versions
            .is_empty()
    );
}

async fn bad_input_gets_a_clear_error_and_writes_nothing(broker: &Broker) {
    let erin = person("tenant-e");
    let targets = default_group(broker, &erin).await;
    let group = targets.groups[0].group_id.clone();
    let filter = new_filter(broker, &erin, "ztf-public").await;
    let id = filter.filter_id.clone();
    let me = on_filter(&erin, "s", &id);
    let mut c = broker.filters(&me);

    // post_filter: each field named.
    let post = |name: &str, group_id: &str, stream: &str| pb::PostFilterRequest {
        name: name.into(),
        group_id: group_id.into(),
        stream_id: stream.into(),
        ..Default::default()
    };
    let missing_group = uuid::Uuid::new_v4().to_string();
    for (req, code, field) in [
        (
            post("", &group, "ztf-public"),
            Code::InvalidArgument,
            "name",
        ),
        (
            post("x", "nope", "ztf-public"),
            Code::InvalidArgument,
            "group_id",
        ),
        (
            post("x", &missing_group, "ztf-public"),
            Code::NotFound,
            "group_id",
        ),
        (
            post("x", &group, "ztf-nowhere"),
            Code::NotFound,
            "stream_id",
        ),
        (post("x", &group, "a b"), Code::InvalidArgument, "stream_id"),
        (
            pb::PostFilterRequest {
                autosave_keep: Some(0),
                ..post("x", &group, "ztf-public")
            },
            Code::InvalidArgument,
            "autosave_keep",
        ),
        (
            pb::PostFilterRequest {
                broker_id: Some("nowhere".into()),
                ..post("x", &group, "ztf-public")
            },
            Code::NotFound,
            "broker_id",
        ),
    ] {
        let err = c.post_filter(req).await.expect_err(field);
        assert_eq!(err.code(), code, "{field}: {err:?}");
        assert!(
            err.message().starts_with(field),
            "{field}: {}",
            err.message()
        );
    }
    // Without filters:write.
    let reader = Principal::verified(VerifiedKey {
        tenant_id: "tenant-e".into(),
        key_id: "reader".into(),
        scopes: vec!["data:read".into()],
        human: false,
    });
    let err = broker
        .filters(&reader)
        .post_filter(post("x", &group, "ztf-public"))
        .await
        .expect_err("no scope");
    assert_eq!(err.code(), Code::PermissionDenied);

    // run_broker_filter.
    let run = |pipeline: Option<Value>| pb::RunBrokerFilterRequest {
        pipeline: pipeline.map(list),
        filter_id: Some(id.clone()),
        ..Default::default()
    };
    let cut = bright_cut(18.0);
    for (req, code, field) in [
        (run(None), Code::InvalidArgument, "pipeline"),
        (
            pb::RunBrokerFilterRequest {
                filter_id: None,
                ..run(Some(cut.clone()))
            },
            Code::InvalidArgument,
            "filter_id",
        ),
        (
            pb::RunBrokerFilterRequest {
                group_id: Some(group.clone()),
                ..run(Some(cut.clone()))
            },
            Code::InvalidArgument,
            "filter_id",
        ),
        (
            pb::RunBrokerFilterRequest {
                filter_id: None,
                group_id: Some(group.clone()),
                ..run(Some(cut.clone()))
            },
            Code::InvalidArgument,
            "stream_id",
        ),
        (
            pb::RunBrokerFilterRequest {
                sort_order: Some("Sideways".into()),
                ..run(Some(cut.clone()))
            },
            Code::InvalidArgument,
            "sort_order",
        ),
        (
            pb::RunBrokerFilterRequest {
                limit: Some(0),
                ..run(Some(cut.clone()))
            },
            Code::InvalidArgument,
            "limit",
        ),
        (
            pb::RunBrokerFilterRequest {
                jd_start: Some(2_460_300.0),
                jd_end: Some(2_460_200.0),
                ..run(Some(cut.clone()))
            },
            Code::InvalidArgument,
            "jd_start",
        ),
        (
            pb::RunBrokerFilterRequest {
                jd_start: Some(f64::NAN),
                ..run(Some(cut.clone()))
            },
            Code::InvalidArgument,
            "jd_start",
        ),
        (
            pb::RunBrokerFilterRequest {
                sort_by: Some("candidate.nothing".into()),
                ..run(Some(cut.clone()))
            },
            Code::InvalidArgument,
            "sort_by",
        ),
        (
            pb::RunBrokerFilterRequest {
                dateobs: Some("2017-08-17T12:41:04".into()),
                ..run(Some(cut.clone()))
            },
            Code::NotFound,
            "dateobs",
        ),
        (
            run(Some(json!([{"$lookup": {}}]))),
            Code::InvalidArgument,
            "pipeline",
        ),
        (
            run(Some(
                json!([{"$match": {"candidate.magpsf": {"$lt": "x".repeat(70_000)}}}]),
            )),
            Code::InvalidArgument,
            "pipeline",
        ),
    ] {
        let err = c.run_broker_filter(req).await.expect_err(field);
        assert_eq!(err.code(), code, "{field}: {err:?}");
        assert!(
            err.message().starts_with(field),
            "{field}: {}",
            err.message()
        );
    }

    // Versions: bad ids, missing versions, a pipeline that is not stages.
    let err = c
        .post_broker_filter_version(pb::PostBrokerFilterVersionRequest {
            filter_id: id.clone(),
            pipeline: None,
        })
        .await
        .expect_err("no pipeline");
    assert!(err.message().starts_with("pipeline"), "{}", err.message());
    let err = c
        .post_broker_filter_version(pb::PostBrokerFilterVersionRequest {
            filter_id: "not-a-filter".into(),
            pipeline: Some(list(cut.clone())),
        })
        .await
        .expect_err("bad id");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("filter_id"), "{}", err.message());
    for version in [0, -1, 7] {
        let err = c
            .validate_broker_filter_version(pb::ValidateBrokerFilterVersionRequest {
                filter_id: id.clone(),
                version,
            })
            .await
            .expect_err("bad version");
        assert!(err.message().starts_with("version"), "{}", err.message());
        let err = c
            .activate_broker_filter_version(pb::ActivateBrokerFilterVersionRequest {
                filter_id: id.clone(),
                version,
            })
            .await
            .expect_err("bad version");
        assert!(err.message().starts_with("version"), "{}", err.message());
    }
    let err = c
        .activate_broker_filter_version(pb::ActivateBrokerFilterVersionRequest {
            filter_id: id.clone(),
            version: 7,
        })
        .await
        .expect_err("missing version");
    refused(&err, Code::NotFound, Some("UNKNOWN_VERSION"));
    for (from, to, field) in [
        (0, 1, "from_version"),
        (1, 0, "to_version"),
        (1, 9, "from_version"),
    ] {
        let err = c
            .diff_broker_filter_versions(pb::DiffBrokerFilterVersionsRequest {
                filter_id: id.clone(),
                from_version: from,
                to_version: to,
            })
            .await
            .expect_err("bad diff");
        assert!(
            err.message().starts_with(field),
            "{field}: {}",
            err.message()
        );
    }
    let err = c
        .get_broker_filter(pb::GetBrokerFilterRequest {
            filter_id: id.clone(),
            matches_limit: Some(1000),
        })
        .await
        .expect_err("matches_limit");
    assert!(
        err.message().starts_with("matches_limit"),
        "{}",
        err.message()
    );
    let err = c
        .get_counterpart_search_defaults(pb::GetCounterpartSearchDefaultsRequest {
            trigger_jd: Some(12.0),
        })
        .await
        .expect_err("trigger_jd");
    assert!(err.message().starts_with("trigger_jd"), "{}", err.message());
    // Groups are the administrators'.
    let err = c
        .add_filter_group(pb::AddFilterGroupRequest {
            tenant_id: "tenant-e".into(),
            name: "mine".into(),
            stream_ids: vec!["ztf-public".into()],
        })
        .await
        .expect_err("not an administrator");
    assert_eq!(err.code(), Code::PermissionDenied);

    let mut admin = broker.filters(&Principal::system(""));
    let group_req = |tenant: &str, name: &str, streams: &[&str]| pb::AddFilterGroupRequest {
        tenant_id: tenant.into(),
        name: name.into(),
        stream_ids: streams.iter().map(|s| (*s).to_owned()).collect(),
    };
    for (req, code, field) in [
        (
            group_req("", "g", &["ztf-public"]),
            Code::InvalidArgument,
            "tenant_id",
        ),
        (
            group_req("tenant-e", "", &["ztf-public"]),
            Code::InvalidArgument,
            "name",
        ),
        (
            group_req("tenant-e", "g", &[]),
            Code::InvalidArgument,
            "stream_ids",
        ),
        (
            group_req("tenant-e", "g", &["a b"]),
            Code::InvalidArgument,
            "stream_ids",
        ),
        (
            group_req("tenant-e", "g", &["ztf-public", "ztf-nowhere"]),
            Code::NotFound,
            "stream_ids",
        ),
        (
            group_req("tenant-e", "default", &["ztf-public"]),
            Code::AlreadyExists,
            "name",
        ),
    ] {
        let err = admin.add_filter_group(req).await.expect_err(field);
        assert_eq!(err.code(), code, "{field}: {err:?}");
        assert!(
            err.message().starts_with(field),
            "{field}: {}",
            err.message()
        );
    }

    // Nothing half-written: one filter, no versions, still the one group.
    let back = read(broker, &erin, &id).await;
    assert!(back.versions.is_empty() && back.active_version.is_none());
    let after = default_group(broker, &erin).await;
    assert_eq!(after.groups, targets.groups);
}

async fn the_console_lists_a_tenants_filters_a_page_at_a_time(broker: &Broker) {
    let (hana, ivan) = (person("tenant-h"), person("tenant-i"));
    let list = |who: &Principal, limit: Option<i32>, offset: Option<i32>| {
        let mut client = broker.filters(who);
        async move {
            client
                .list_broker_filters(pb::ListBrokerFiltersRequest {
                    limit,
                    offset,
                    search: None,
                })
                .await
        }
    };
    let empty = list(&hana, None, None).await.expect("list").into_inner();
    assert_eq!(
        (empty.filters.len(), empty.total, empty.next_offset),
        (0, 0, None)
    );
    let mut posted = Vec::new();
    for _ in 0..3 {
        posted.push(new_filter(broker, &hana, "ztf-public").await.filter_id);
        // Distinct creation times, so "newest first" is one order.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    new_filter(broker, &ivan, "ztf-public").await;
    let first = list(&hana, Some(2), None)
        .await
        .expect("page 1")
        .into_inner();
    assert_eq!(first.total, 3, "only Hana's filters count");
    assert_eq!(first.next_offset, Some(2));
    let ids: Vec<&str> = first.filters.iter().map(|f| f.filter_id.as_str()).collect();
    assert_eq!(
        ids,
        [posted[2].as_str(), posted[1].as_str()],
        "newest first"
    );
    assert!(
        first
            .filters
            .iter()
            .all(|f| f.versions.is_empty() && f.uri.starts_with("doomberg://filters/"))
    );
    let second = list(&hana, Some(2), first.next_offset)
        .await
        .expect("page 2")
        .into_inner();
    let ids: Vec<&str> = second
        .filters
        .iter()
        .map(|f| f.filter_id.as_str())
        .collect();
    assert_eq!(ids, [posted[0].as_str()]);
    assert_eq!(second.next_offset, None);
    for (limit, offset, field) in [
        (Some(0), None, "limit"),
        (Some(101), None, "limit"),
        (None, Some(-1), "offset"),
    ] {
        let err = list(&hana, limit, offset).await.expect_err("bad paging");
        assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
        assert!(err.message().starts_with(field), "{err:?}");
    }
}

async fn tenants_never_see_each_others_groups_or_filters(broker: &Broker) {
    let frank = person("tenant-f");
    let grace = person("tenant-g");
    let franks = new_filter(broker, &frank, "ztf-public").await;
    let frank_groups = default_group(broker, &frank).await.groups;
    let grace_groups = default_group(broker, &grace).await.groups;
    assert_ne!(frank_groups[0].group_id, grace_groups[0].group_id);

    // Grace's view of Frank's filter and group: not found, like a missing one.
    let missing = uuid::Uuid::new_v4().to_string();
    let as_grace = on_filter(&grace, "s", &franks.filter_id);
    for id in [&franks.filter_id, &missing] {
        let err = broker
            .filters(&as_grace)
            .get_broker_filter(pb::GetBrokerFilterRequest {
                filter_id: id.clone(),
                matches_limit: None,
            })
            .await
            .expect_err("not hers");
        refused(&err, Code::NotFound, Some("UNKNOWN_FILTER"));
        // Even in a session whose subject names it.
        let err = broker
            .filters(&on_filter(&grace, "s", id))
            .post_broker_filter_version(pb::PostBrokerFilterVersionRequest {
                filter_id: id.clone(),
                pipeline: Some(list(bright_cut(18.0))),
            })
            .await
            .expect_err("not hers");
        refused(&err, Code::NotFound, Some("UNKNOWN_FILTER"));
        let err = broker
            .filters(&as_grace)
            .run_broker_filter(preview_of(id, bright_cut(18.0)))
            .await
            .expect_err("not hers");
        refused(&err, Code::NotFound, Some("UNKNOWN_FILTER"));
    }
    for group in [&frank_groups[0].group_id, &missing] {
        let err = broker
            .filters(&grace)
            .post_filter(pb::PostFilterRequest {
                name: "borrowed".into(),
                group_id: group.clone(),
                stream_id: "ztf-public".into(),
                ..Default::default()
            })
            .await
            .expect_err("not her group");
        refused(&err, Code::NotFound, Some("UNKNOWN_GROUP"));
    }

    // A group an administrator made with the public stream only: it bounds
    // the streams filters on it may use.
    let mut admin = broker.filters(&Principal::system(""));
    let narrow = admin
        .add_filter_group(pb::AddFilterGroupRequest {
            tenant_id: "tenant-g".into(),
            name: "public only".into(),
            stream_ids: vec!["ztf-public".into()],
        })
        .await
        .expect("admin adds a group")
        .into_inner();
    let err = admin
        .add_filter_group(pb::AddFilterGroupRequest {
            tenant_id: "tenant-g".into(),
            name: "public only".into(),
            stream_ids: vec!["ztf-public".into()],
        })
        .await
        .expect_err("same name twice");
    assert_eq!(err.code(), Code::AlreadyExists);
    let err = broker
        .filters(&grace)
        .post_filter(pb::PostFilterRequest {
            name: "wide".into(),
            group_id: narrow.group_id.clone(),
            stream_id: "ztf-partnership".into(),
            ..Default::default()
        })
        .await
        .expect_err("stream outside the group");
    refused(&err, Code::PermissionDenied, Some("STREAM_NOT_IN_GROUP"));
    let grace_now = default_group(broker, &grace).await.groups;
    assert_eq!(grace_now.len(), 2);
    assert_eq!(default_group(broker, &frank).await.groups, frank_groups);
}

async fn the_defaults_are_a_deep_copy(broker: &Broker) {
    broker.ingest("v4.01").await;
    let heidi = person("tenant-h");
    let mut c = broker.filters(&in_session(&heidi, "s"));
    let ask = |trigger_jd: Option<f64>| pb::GetCounterpartSearchDefaultsRequest { trigger_jd };
    let first = c
        .get_counterpart_search_defaults(ask(None))
        .await
        .expect("defaults")
        .into_inner();
    assert_eq!(first.sort_order, "Ascending");
    assert!(first.window_end_days > first.window_start_days);
    let original = unlist(first.pipeline.clone().expect("pipeline"));

    // Edit what came back, then ask again: the stored defaults are intact.
    let mut edited = original.clone();
    edited[0]["$match"]["candidate.drb"] = json!({"$gte": 0.99});
    edited
        .as_array_mut()
        .expect("array")
        .push(json!({"$match": {}}));
    let mut raw = first.pipeline.clone().expect("pipeline");
    raw.values.clear();
    let second = c
        .get_counterpart_search_defaults(ask(None))
        .await
        .expect("defaults")
        .into_inner();
    assert_eq!(unlist(second.pipeline.expect("pipeline")), original);

    // With a trigger: the absolute window and a cut on first detection.
    let trigger = 2_460_229.5;
    let triggered = c
        .get_counterpart_search_defaults(ask(Some(trigger)))
        .await
        .expect("defaults")
        .into_inner();
    assert_eq!(triggered.jd_start, Some(trigger + first.window_start_days));
    assert_eq!(triggered.jd_end, Some(trigger + first.window_end_days));
    let pipeline = unlist(triggered.pipeline.expect("pipeline"));
    assert_eq!(
        pipeline[0]["$match"]["candidate.jdstarthist"],
        json!({"$gte": trigger})
    );
    // ... and asking with a trigger did not change the plain defaults.
    let third = c
        .get_counterpart_search_defaults(ask(None))
        .await
        .expect("defaults")
        .into_inner();
    assert_eq!(unlist(third.pipeline.expect("pipeline")), original);

    // The defaults run as they are, sorted as suggested.
    let targets = default_group(broker, &heidi).await;
    let ran = c
        .run_broker_filter(pb::RunBrokerFilterRequest {
            pipeline: Some(list(pipeline)),
            group_id: Some(targets.groups[0].group_id.clone()),
            stream_id: Some("ztf-public".into()),
            jd_start: triggered.jd_start,
            jd_end: triggered.jd_end,
            sort_by: Some(triggered.sort_by.clone()),
            sort_order: Some(triggered.sort_order.clone()),
            ..Default::default()
        })
        .await
        .expect("the defaults compile and run")
        .into_inner();
    assert!(ran.warnings.is_empty(), "{:?}", ran.warnings);
    assert_eq!(ran.evaluated, 24, "the v4.01 night lies in the window");
    // That night's 16 new objects all sit on known asteroids (ssdistnr 0-1″)
    // and the older ones on PS1 stars or fainter than their reference: a
    // counterpart search rightly finds nothing there.
    assert_eq!(ran.matched, 0);
}

async fn an_active_version_saves_matches_of_newly_ingested_alerts(broker: &Broker) {
    // The archive before activation: these alerts must never match.
    broker.ingest("v4.02").await;
    let ivan = person("tenant-i");
    let cut = bright_cut(18.5);
    let activate = |filter_id: String, pipeline: Value, session: &'static str| {
        let who = on_filter(&ivan, session, &filter_id);
        async move {
            let mut c = broker.filters(&who);
            let verdict = post_version(broker, &who, &filter_id, pipeline.clone()).await;
            assert!(verdict.passed, "{verdict:?}");
            c.run_broker_filter(preview_of(&filter_id, pipeline))
                .await
                .expect("preview");
            c.activate_broker_filter_version(pb::ActivateBrokerFilterVersionRequest {
                filter_id,
                version: verdict.version,
            })
            .await
            .expect("activate");
        }
    };
    let targets = default_group(broker, &ivan).await;
    let post = |name: &str, stream: &str, autosave: Option<bool>, keep: Option<i32>| {
        let mut c = broker.filters(&ivan);
        let req = pb::PostFilterRequest {
            name: name.into(),
            group_id: targets.groups[0].group_id.clone(),
            stream_id: stream.into(),
            broker_id: None,
            autosave,
            autosave_keep: keep,
        };
        async move {
            c.post_filter(req)
                .await
                .expect("post_filter")
                .into_inner()
                .filter_id
        }
    };
    let bright = post("bright", "ztf-public", None, None).await;
    let kept = post("bright, keep 3", "ztf-public", None, Some(3)).await;
    let unsaved = post("bright, not saved", "ztf-public", Some(false), None).await;
    let forced_public = post("has fp_hists (public)", "ztf-public", None, None).await;
    let forced_partner = post("has fp_hists (partnership)", "ztf-partnership", None, None).await;
    let idle = post("never activated", "ztf-public", None, None).await;
    activate(bright.clone(), cut.clone(), "s1").await;
    activate(kept.clone(), cut.clone(), "s2").await;
    activate(unsaved.clone(), cut.clone(), "s3").await;
    let has_fp = json!([{"$match": {"fp_hists": {"$exists": true}}}]);
    activate(forced_public.clone(), has_fp.clone(), "s4").await;
    activate(forced_partner.clone(), has_fp.clone(), "s5").await;
    post_version(broker, &on_filter(&ivan, "s6", &idle), &idle, cut.clone()).await;

    // Nothing matched yet: activation does not run over the archive.
    assert_eq!(read(broker, &ivan, &bright).await.matches_saved, 0);

    // New alerts arrive: the v4.01 night, one file at a time.
    assert_eq!(broker.ingest("v4.01").await, 24);
    let want = brighter(&["v4.01"], 18.5);
    assert!(!want.is_empty() && want.len() < 24, "a cut that selects");
    let got = read(broker, &ivan, &bright).await;
    let saved: BTreeSet<String> = got
        .latest_matches
        .iter()
        .map(|m| m.candid.clone())
        .collect();
    assert_eq!(saved, want);
    assert_eq!(got.matches_saved as usize, want.len());
    let m = &got.latest_matches[0];
    assert_eq!(m.version, 1);
    assert_eq!(
        m.uri,
        format!("doomberg://brokers/ztf-archive/alerts/{}", m.candid)
    );
    assert!(m.object_id.starts_with("ZTF"));
    assert!((m.jd - 2_460_229.933).abs() < 0.01, "{m:?}");

    // Auto-save: at most `keep`, and none when it is off.
    let kept_back = read(broker, &ivan, &kept).await;
    assert_eq!(kept_back.matches_saved, 3);
    assert!(
        kept_back
            .latest_matches
            .iter()
            .all(|m| want.contains(&m.candid))
    );
    assert_eq!(read(broker, &ivan, &unsaved).await.matches_saved, 0);
    assert_eq!(read(broker, &ivan, &idle).await.matches_saved, 0);

    // The stream bounds what a version sees: the public stream carries no
    // forced photometry, the partnership stream does (every v4.01 alert).
    assert_eq!(read(broker, &ivan, &forced_public).await.matches_saved, 0);
    assert_eq!(read(broker, &ivan, &forced_partner).await.matches_saved, 24);

    // Re-ingesting changes nothing; new versions take over for new alerts.
    assert_eq!(broker.ingest("v4.01").await, 0);
    assert_eq!(
        read(broker, &ivan, &bright).await.matches_saved as usize,
        want.len()
    );
    activate(bright.clone(), bright_cut(30.0), "s1").await;
    assert_eq!(broker.ingest("v3.x").await, 5);
    let after = read(broker, &ivan, &bright).await;
    let v2: Vec<&pb::FilterMatch> = after
        .latest_matches
        .iter()
        .filter(|m| m.version == 2)
        .collect();
    // Every public alert of the three v3.x files (not the Caltech one).
    assert_eq!(v2.len(), 4);
    assert!(v2.iter().all(|m| m.candid != CALTECH_ALERT));
}

/// The object page's list: one object's matches across the caller's
/// tenant's filters, newest first, each with its filter; another tenant's
/// filters never show, and a bad request is named.
async fn an_objects_matches_are_its_tenants_filters_only(broker: &Broker) {
    let (ivan, judy) = (person("tenant-i"), person("tenant-j"));
    let activate = |who: &Principal, name: &'static str, session: &'static str| {
        let who = who.clone();
        async move {
            let targets = default_group(broker, &who).await;
            let filter_id = broker
                .filters(&who)
                .post_filter(pb::PostFilterRequest {
                    name: name.into(),
                    group_id: targets.groups[0].group_id.clone(),
                    stream_id: "ztf-public".into(),
                    ..Default::default()
                })
                .await
                .expect("post_filter")
                .into_inner()
                .filter_id;
            let on = on_filter(&who, session, &filter_id);
            let verdict = post_version(broker, &on, &filter_id, bright_cut(18.5)).await;
            let mut c = broker.filters(&on);
            c.run_broker_filter(preview_of(&filter_id, bright_cut(18.5)))
                .await
                .expect("preview");
            c.activate_broker_filter_version(pb::ActivateBrokerFilterVersionRequest {
                filter_id: filter_id.clone(),
                version: verdict.version,
            })
            .await
            .expect("activate");
            filter_id
        }
    };
    let first = activate(&ivan, "ivan's first", "s1").await;
    let second = activate(&ivan, "ivan's second", "s2").await;
    let judys = activate(&judy, "judy's", "s3").await;
    broker.ingest("v4.01").await;
    // An object one of the bright v4.01 alerts belongs to, from the saved
    // matches themselves.
    let saved = read(broker, &ivan, &first).await;
    let m = saved.latest_matches.first().expect("a saved match");
    let object = m.object_id.clone();
    let of_object = |who: &Principal, object: &str| {
        let mut c = broker.filters(who);
        let req = pb::ListObjectFilterMatchesRequest {
            broker_id: String::new(),
            object_id: object.to_owned(),
            limit: None,
        };
        async move { c.list_object_filter_matches(req).await }
    };
    let mine = of_object(&ivan, &object).await.expect("list").into_inner();
    assert_eq!(mine.broker_id, "ztf-archive");
    let filters: BTreeSet<String> = mine.matches.iter().map(|m| m.filter_id.clone()).collect();
    assert_eq!(
        filters,
        BTreeSet::from([first.clone(), second.clone()]),
        "{mine:?}"
    );
    assert!(!filters.contains(&judys));
    for found in &mine.matches {
        let saved = found.r#match.as_ref().expect("the match");
        assert_eq!(saved.object_id, object);
        assert_eq!(found.active_version, Some(1));
        assert!(found.filter_name.starts_with("ivan's"), "{found:?}");
        assert_eq!(
            saved.uri,
            format!("doomberg://brokers/ztf-archive/alerts/{}", saved.candid)
        );
    }
    assert_eq!(mine.count as usize, mine.matches.len());
    let theirs = of_object(&judy, &object).await.expect("list").into_inner();
    assert_eq!(theirs.matches.len(), mine.matches.len() / 2);
    assert!(theirs.matches.iter().all(|m| m.filter_id == judys));
    // A tenant without filters, and an object nothing matched: none.
    let nobody = of_object(&person("tenant-k"), &object).await.expect("list");
    assert!(nobody.into_inner().matches.is_empty());
    let unmatched = of_object(&ivan, "ZTF99zzzzzzz").await.expect("list");
    assert!(unmatched.into_inner().matches.is_empty());
    // A page of one says there is more.
    let one = broker
        .filters(&ivan)
        .list_object_filter_matches(pb::ListObjectFilterMatchesRequest {
            broker_id: "ztf-archive".into(),
            object_id: object.clone(),
            limit: Some(1),
        })
        .await
        .expect("list")
        .into_inner();
    assert_eq!((one.count, one.truncated), (1, true));
    for (req, field) in [
        (
            pb::ListObjectFilterMatchesRequest {
                object_id: "bad id!".into(),
                ..Default::default()
            },
            "objectId",
        ),
        (
            pb::ListObjectFilterMatchesRequest {
                object_id: object.clone(),
                limit: Some(0),
                ..Default::default()
            },
            "limit",
        ),
        (
            pb::ListObjectFilterMatchesRequest {
                broker_id: "Not A Broker".into(),
                object_id: object.clone(),
                ..Default::default()
            },
            "broker_id",
        ),
    ] {
        let err = broker
            .filters(&ivan)
            .list_object_filter_matches(req)
            .await
            .expect_err(field);
        refused(&err, Code::InvalidArgument, None);
        assert!(err.message().starts_with(field), "{err:?}");
    }
}

/// Great-circle distance in degrees.
fn separation_deg(ra1: f64, dec1: f64, ra2: f64, dec2: f64) -> f64 {
    let (a1, d1, a2, d2) = (
        ra1.to_radians(),
        dec1.to_radians(),
        ra2.to_radians(),
        dec2.to_radians(),
    );
    let h = ((d2 - d1) / 2.0).sin().powi(2) + d1.cos() * d2.cos() * ((a2 - a1) / 2.0).sin().powi(2);
    (2.0 * h.sqrt().asin()).to_degrees()
}

async fn a_gcn_localisation_bounds_the_preview(broker: &Broker) {
    for folder in ["v3.x", "v4.01", "v4.02"] {
        broker.ingest(folder).await;
    }
    let events = gcn::service(broker.db.clone());
    gcn::ingest_all(&events).await;
    let judy = person("tenant-j");
    let targets = default_group(broker, &judy).await;
    let everything = json!([{"$match": {"candidate.jd": {"$gt": 0}}}]);
    let run = |dateobs: Option<&str>| pb::RunBrokerFilterRequest {
        pipeline: Some(list(everything.clone())),
        group_id: Some(targets.groups[0].group_id.clone()),
        stream_id: Some("ztf-partnership".into()),
        dateobs: dateobs.map(str::to_owned),
        sort_by: Some("candidate.jd".into()),
        limit: Some(200),
        ..Default::default()
    };
    let mut c = broker.filters(&in_session(&judy, "s"));
    let all = c
        .run_broker_filter(run(None))
        .await
        .expect("no region")
        .into_inner();
    assert_eq!(all.evaluated, 39, "every alert but the Caltech one");

    // Fermi GBM bursts whose error circles (from their circulars) cover
    // some of the archive: GRB 230825.05 over the v4.02 fields near
    // (250, -21), GRB 230905A near (155, -1).
    let mut covered = 0;
    for name in ["GRB 230825.05", "GRB 230905A", "GRB 230918A"] {
        let loc = events
            .best_localisation(name)
            .await
            .expect("event")
            .expect("a localisation");
        let answer = c
            .run_broker_filter(pb::RunBrokerFilterRequest {
                localisation: Some("smallest".into()),
                ..run(Some(name))
            })
            .await
            .expect("preview in the region")
            .into_inner();
        assert_eq!(answer.window_alerts, Some(39), "the whole sky's alerts");
        let region = answer.region.clone().expect("the region is described");
        assert!(region.starts_with(&loc.dateobs), "{region}");
        let got: BTreeSet<String> = answer
            .alerts
            .iter()
            .map(|a| {
                ithaca_kit::json::from_struct(a.clone())["candid"]
                    .as_str()
                    .expect("candid")
                    .to_owned()
            })
            .collect();
        assert_eq!(got.len(), answer.matched as usize);
        // The region is the MOC of the circle: exact well inside and well
        // outside; cells straddling the edge may add an alert close to it.
        let sep = |r: &Row| separation_deg(r.ra, r.dec, loc.ra_deg, loc.dec_deg);
        let rows: Vec<Row> = sources()
            .into_iter()
            .filter(|r| r.candid != CALTECH_ALERT)
            .collect();
        for r in &rows {
            let d = sep(r);
            if d < 0.95 * loc.error_radius_deg {
                assert!(
                    got.contains(&r.candid),
                    "{name}: {} at {d:.2}° is inside",
                    r.candid
                );
            }
            if d > 1.05 * loc.error_radius_deg {
                assert!(
                    !got.contains(&r.candid),
                    "{name}: {} at {d:.2}° is outside",
                    r.candid
                );
            }
        }
        covered += got.len();
    }
    assert!(covered > 0, "the events chosen cover some alerts");

    // The agent chooses the localisation; by default it is the trigger's
    // (the earliest issued), not the smallest (SVOM/MXT's 0.027° circle),
    // and the answer names the one used.
    let burst = "Fermi 798437606";
    let smallest = events
        .best_localisation(burst)
        .await
        .expect("event")
        .expect("loc");
    let trigger = events
        .chosen_localisation(burst, None)
        .await
        .expect("event")
        .expect("loc");
    assert_ne!(trigger.error_radius_deg, smallest.error_radius_deg);
    // GRB 230812B: the trigger's circle is GBM's, not XRT's arcseconds.
    let grb = events
        .chosen_localisation("GRB 230812B", None)
        .await
        .expect("event")
        .expect("loc");
    let xrt = events
        .best_localisation("GRB 230812B")
        .await
        .expect("event")
        .expect("loc");
    assert!(
        grb.error_radius_deg > xrt.error_radius_deg,
        "{grb:?} {xrt:?}"
    );
    let answer = c
        .run_broker_filter(run(Some(burst)))
        .await
        .expect("trigger's region")
        .into_inner();
    let label = answer.region.expect("named");
    assert!(
        label.contains(&trigger.description) && label.contains("localisation trigger"),
        "{label}"
    );
    assert!(
        label.contains(&format!("{}°", trigger.error_radius_deg)),
        "{label}"
    );
    // Nothing in 2026 in the archive: 0 evaluated, but 39 alerts in the
    // stream and window at all, so the zero is not "nothing there".
    assert_eq!((answer.evaluated, answer.window_alerts), (0, Some(39)));
    let ivorn = smallest.ivorn.clone().expect("a notice's");
    for choice in ["smallest".to_owned(), format!("notice:{ivorn}")] {
        let answer = c
            .run_broker_filter(pb::RunBrokerFilterRequest {
                localisation: Some(choice.clone()),
                ..run(Some(burst))
            })
            .await
            .expect("chosen region")
            .into_inner();
        let label = answer.region.expect("named");
        assert!(label.contains(&smallest.description), "{choice}: {label}");
        assert!(label.contains(&choice), "{label}");
    }
    for (bad, needle) in [("circular:1", "has no"), ("biggest", "none of")] {
        let err = c
            .run_broker_filter(pb::RunBrokerFilterRequest {
                localisation: Some(bad.into()),
                ..run(Some(burst))
            })
            .await
            .expect_err(bad);
        assert_eq!(err.code(), Code::InvalidArgument, "{bad}");
        assert!(
            err.message().starts_with("localisation") && err.message().contains(needle),
            "{}",
            err.message()
        );
    }
    let err = c
        .run_broker_filter(pb::RunBrokerFilterRequest {
            localisation: Some("smallest".into()),
            ..run(None)
        })
        .await
        .expect_err("no event");
    assert!(
        err.message().starts_with("localisation"),
        "{}",
        err.message()
    );

    // Unknown events and events without a position are named.
    let err = c
        .run_broker_filter(run(Some("GRB 990101A")))
        .await
        .expect_err("unknown event");
    refused(&err, Code::NotFound, Some("UNKNOWN_GCN_EVENT"));
    assert!(err.message().starts_with("dateobs"), "{}", err.message());
}

/// A gravitational-wave sky map (written here) whose 90% region is the
/// order-7 pixels within 1.5° of a v4.02 alert bounds the preview: exactly
/// the alerts in those pixels match, counted from SOURCES.md's positions.
async fn a_sky_map_bounds_the_preview(broker: &Broker) {
    for folder in ["v3.x", "v4.01", "v4.02"] {
        broker.ingest(folder).await;
    }
    let rows: Vec<Row> = sources()
        .into_iter()
        .filter(|r| r.candid != CALTECH_ALERT)
        .collect();
    let centre = rows
        .iter()
        .find(|r| r.folder == "v4.02")
        .expect("a v4.02 alert");
    let map = skymap::disc_map(centre.ra, centre.dec, 1.5, 3.0, 0.91);
    let fits = skymap::multiorder_fits(
        &[
            ("OBJECT", "'S230901ab'"),
            ("DATE-OBS", "'2023-09-01T01:02:03.456'"),
        ],
        &map.rows,
    );
    let events = gcn::service(broker.db.clone());
    events
        .ingest_file(&Principal::system(""), "S230901ab.multiorder.fits", fits)
        .await
        .expect("the sky map is ingested");
    let inside: BTreeSet<String> = rows
        .iter()
        .filter(|r| {
            let pixel =
                cdshealpix::nested::hash(skymap::FINE, r.ra.to_radians(), r.dec.to_radians());
            map.inner.contains(&pixel)
        })
        .map(|r| r.candid.clone())
        .collect();
    assert!(
        !inside.is_empty() && inside.len() < rows.len(),
        "{} of {} alerts in the region",
        inside.len(),
        rows.len()
    );
    let near_outside = rows
        .iter()
        .filter(|r| !inside.contains(&r.candid))
        .filter(|r| separation_deg(r.ra, r.dec, centre.ra, centre.dec) < 3.0)
        .count();

    let judy = person("tenant-j");
    let targets = default_group(broker, &judy).await;
    let mut c = broker.filters(&in_session(&judy, "s"));
    for choice in [None, Some("skymap")] {
        let answer = c
            .run_broker_filter(pb::RunBrokerFilterRequest {
                pipeline: Some(list(json!([{"$match": {"candidate.jd": {"$gt": 0}}}]))),
                group_id: Some(targets.groups[0].group_id.clone()),
                stream_id: Some("ztf-partnership".into()),
                dateobs: Some("S230901ab".into()),
                localisation: choice.map(str::to_owned),
                sort_by: Some("candidate.jd".into()),
                limit: Some(200),
                ..Default::default()
            })
            .await
            .expect("preview in the sky map's region")
            .into_inner();
        let got: BTreeSet<String> = answer
            .alerts
            .iter()
            .map(|a| {
                ithaca_kit::json::from_struct(a.clone())["candid"]
                    .as_str()
                    .expect("candid")
                    .to_owned()
            })
            .collect();
        assert_eq!(got, inside, "{choice:?} ({near_outside} more within 3°)");
        assert_eq!(answer.matched as usize, inside.len());
        assert_eq!(answer.window_alerts, Some(39), "the whole sky's alerts");
        let label = answer.region.expect("the region is described");
        assert!(
            label.starts_with("2023-09-01T01:02:03.456Z")
                && label.contains("90% credible region")
                && label.contains("S230901ab sky map"),
            "{label}"
        );
    }
}

/// The data is where the tests expect it.
#[test]
fn the_real_alerts_are_there() {
    let dir: PathBuf = astro::alerts_dir();
    assert!(dir.join("v4.01").is_dir(), "{}", dir.display());
    assert_eq!(sources().len(), 40);
}
