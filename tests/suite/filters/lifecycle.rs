//! Issue 26's filter workflow, on both databases: deactivating and deleting
//! a filter, per-stage preview counts and the zero-match warning, matches
//! that carry what their version projects (and a watch that hears of them),
//! finding a filter by name, and Fink's fields kept out of ZTF's schema.

use super::*;
use ithaca_proto::broker::v1::alert_service_client::AlertServiceClient;
use std::time::Duration;

on_both_brokers!(
    deactivation_stops_matching_and_deletion_refuses_an_active_filter,
    a_preview_counts_each_match_stage_and_zero_matches_warn,
    matches_carry_what_the_version_projects_and_a_watch_hears_of_them,
    the_filter_list_finds_a_filter_by_name,
    fink_fields_stay_in_finks_namespace,
);

/// Post `pipeline` as the next version, preview it in the same session
/// and activate it; the activation's answer.
async fn activate(
    broker: &Broker,
    who: &Principal,
    filter_id: &str,
    pipeline: Value,
) -> pb::FilterActivation {
    let verdict = post_version(broker, who, filter_id, pipeline.clone()).await;
    assert!(verdict.passed, "{verdict:?}");
    let mut c = broker.filters(who);
    c.run_broker_filter(preview_of(filter_id, pipeline))
        .await
        .expect("preview");
    c.activate_broker_filter_version(pb::ActivateBrokerFilterVersionRequest {
        filter_id: filter_id.to_owned(),
        version: verdict.version,
    })
    .await
    .expect("activate")
    .into_inner()
}

async fn deactivate(
    broker: &Broker,
    who: &Principal,
    filter_id: &str,
) -> Result<pb::FilterDeactivation, tonic::Status> {
    broker
        .filters(who)
        .deactivate_broker_filter(pb::DeactivateBrokerFilterRequest {
            filter_id: filter_id.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn delete(
    broker: &Broker,
    who: &Principal,
    filter_id: &str,
) -> Result<pb::FilterDeletion, tonic::Status> {
    broker
        .filters(who)
        .delete_broker_filter(pb::DeleteBrokerFilterRequest {
            filter_id: filter_id.to_owned(),
        })
        .await
        .map(tonic::Response::into_inner)
}

pub(super) async fn deactivation_stops_matching_and_deletion_refuses_an_active_filter(
    broker: &Broker,
) {
    broker.ingest("v4.02").await;
    let dora = person("tenant-d");
    let filter = new_filter(broker, &dora, "ztf-public").await;
    let id = filter.filter_id.clone();
    let on = on_filter(&dora, "d1", &id);

    // Outside a session on the filter, both writes are refused.
    for status in [
        deactivate(broker, &in_session(&dora, "d0"), &id)
            .await
            .expect_err("no subject"),
        delete(broker, &in_session(&dora, "d0"), &id)
            .await
            .expect_err("no subject"),
    ] {
        refused(&status, Code::PermissionDenied, Some("SUBJECT_MISMATCH"));
    }
    // Another tenant's filter is not found, even in a session on its id.
    let eve = on_filter(&person("tenant-e"), "e1", &id);
    refused(
        &deactivate(broker, &eve, &id)
            .await
            .expect_err("other tenant"),
        Code::NotFound,
        Some("UNKNOWN_FILTER"),
    );
    refused(
        &delete(broker, &eve, &id).await.expect_err("other tenant"),
        Code::NotFound,
        Some("UNKNOWN_FILTER"),
    );

    // Deactivating a filter that never ran changes nothing and says so.
    let idle = deactivate(broker, &on, &id).await.expect("deactivate idle");
    assert_eq!(idle.previous_version, None);

    let activated = activate(broker, &on, &id, bright_cut(18.5)).await;
    assert_eq!(activated.active_version, 1);

    // An active filter is not deleted: nothing running disappears.
    let status = delete(broker, &on, &id).await.expect_err("active");
    refused(&status, Code::FailedPrecondition, Some("FILTER_ACTIVE"));
    assert!(
        status.message().contains("deactivate_broker_filter"),
        "{status:?}"
    );
    assert_eq!(read(broker, &dora, &id).await.active_version, Some(1));

    // Deactivated, it matches nothing more: the next night's alerts pass by.
    let stopped = deactivate(broker, &on, &id).await.expect("deactivate");
    assert_eq!(stopped.previous_version, Some(1));
    assert_eq!(stopped.uri, format!("doomberg://filters/{id}"));
    let after = read(broker, &dora, &id).await;
    assert_eq!(after.active_version, None);
    assert_eq!(after.versions.len(), 1, "versions stay");
    assert_eq!(broker.ingest("v4.01").await, 24);
    assert!(
        !brighter(&["v4.01"], 18.5).is_empty(),
        "the cut would match"
    );
    assert_eq!(read(broker, &dora, &id).await.matches_saved, 0);

    // Reactivated, it matches again; then stopped and deleted with what it
    // saved, counted in the answer.
    activate(broker, &on, &id, bright_cut(30.0)).await;
    assert_eq!(broker.ingest("v3.x").await, 5);
    let saved = read(broker, &dora, &id).await.matches_saved;
    assert!(saved > 0, "the v3.x night has bright public alerts");
    deactivate(broker, &on, &id).await.expect("deactivate");
    let gone = delete(broker, &on, &id).await.expect("delete");
    assert_eq!(gone.filter_id, id);
    assert_eq!(gone.name, filter.name);
    assert_eq!(gone.versions_deleted, 2);
    assert_eq!(gone.matches_deleted, saved);
    let status = broker
        .filters(&dora)
        .get_broker_filter(pb::GetBrokerFilterRequest {
            filter_id: id.clone(),
            matches_limit: None,
        })
        .await
        .expect_err("deleted");
    refused(&status, Code::NotFound, Some("UNKNOWN_FILTER"));
    refused(
        &delete(broker, &on, &id).await.expect_err("twice"),
        Code::NotFound,
        Some("UNKNOWN_FILTER"),
    );
}

pub(super) async fn a_preview_counts_each_match_stage_and_zero_matches_warn(broker: &Broker) {
    broker.ingest("v4.02").await;
    let zoe = person("tenant-z");
    let filter = new_filter(broker, &zoe, "ztf-public").await;
    let id = filter.filter_id.clone();
    let on = on_filter(&zoe, "z1", &id);
    let mut c = broker.filters(&on);

    // Two cuts: the first keeps the bright ones, the second nothing.
    let empty = json!([
        {"$match": {"candidate.magpsf": {"$lt": 18.5}}},
        {"$match": {"candidate.magpsf": {"$lt": 0}}},
    ]);
    let preview = c
        .run_broker_filter(preview_of(&id, empty.clone()))
        .await
        .expect("preview")
        .into_inner();
    assert_eq!(preview.matched, 0);
    let bright = brighter(&["v4.02"], 18.5).len() as i32;
    assert!(bright > 0 && bright <= preview.evaluated, "{preview:?}");
    let stages: Vec<(i32, i32)> = preview.stages.iter().map(|s| (s.stage, s.kept)).collect();
    assert_eq!(stages, [(0, bright), (1, 0)], "{preview:?}");

    // Posting it warns that its latest preview matched nothing, naming the
    // stage that emptied it; activating it warns again.
    let verdict = post_version(broker, &on, &id, empty.clone()).await;
    assert!(verdict.passed, "{verdict:?}");
    let zero = verdict
        .warnings
        .iter()
        .find(|w| w.message.contains("ZERO_MATCHES"))
        .unwrap_or_else(|| panic!("a zero-match warning: {verdict:?}"));
    assert!(
        zero.message
            .contains(&format!("pipeline[0] $match kept {bright}")),
        "{zero:?}"
    );
    assert!(
        zero.message.contains("pipeline[1] $match kept 0"),
        "{zero:?}"
    );
    let activated = c
        .activate_broker_filter_version(pb::ActivateBrokerFilterVersionRequest {
            filter_id: id.clone(),
            version: verdict.version,
        })
        .await
        .expect("activate")
        .into_inner();
    assert!(
        activated
            .warnings
            .iter()
            .any(|w| w.message.contains("ZERO_MATCHES")),
        "{activated:?}"
    );

    // A pipeline whose preview matched gets no such warning.
    let fine = bright_cut(18.5);
    c.run_broker_filter(preview_of(&id, fine.clone()))
        .await
        .expect("preview");
    let verdict = post_version(broker, &on, &id, fine).await;
    assert!(
        !verdict
            .warnings
            .iter()
            .any(|w| w.message.contains("ZERO_MATCHES")),
        "{verdict:?}"
    );

    // `$expr` is refused in words that do not make `$lt` look unsupported.
    let status = c
        .run_broker_filter(preview_of(
            &id,
            json!([{"$match": {"$expr": {"$lt": ["$candidate.magpsf", "$candidate.magap"]}}}]),
        ))
        .await
        .expect_err("$expr");
    let message = status.message();
    assert!(message.contains("$expr"), "{message}");
    assert!(
        message.contains("$lt") && message.contains("$subtract") && message.contains("$addFields"),
        "{message}"
    );
    assert!(!message.contains("supported here: $and"), "{message}");

    // The schema search finds what get_alert_schema's own example names.
    let mut alerts = AlertServiceClient::with_interceptor(
        client::channel(&broker.url).expect("url"),
        Outbound::new(common::key(), zoe.clone()),
    );
    let found = alerts
        .get_alert_schema(pb::GetAlertSchemaRequest {
            search: Some("real-bogus".into()),
            ..Default::default()
        })
        .await
        .expect("schema")
        .into_inner();
    let fields: Vec<&str> = found.paths.iter().map(|p| p.field.as_str()).collect();
    assert!(fields.contains(&"candidate.rb"), "{fields:?}");
    assert!(fields.contains(&"candidate.drb"), "{fields:?}");
}

pub(super) async fn matches_carry_what_the_version_projects_and_a_watch_hears_of_them(
    broker: &Broker,
) {
    broker.ingest("v4.02").await;
    let mia = person("tenant-m");
    let filter = new_filter(broker, &mia, "ztf-public").await;
    let id = filter.filter_id.clone();
    let on = on_filter(&mia, "m1", &id);
    let pipeline = json!([
        {"$match": {"candidate.magpsf": {"$lt": 18.5}}},
        {"$addFields": {"margin": {"$subtract": [18.5, "$candidate.magpsf"]}}},
        {"$project": {"candidate.magpsf": 1, "candidate.fid": 1, "margin": 1}},
    ]);
    activate(broker, &on, &id, pipeline).await;

    // A watch of the filter's resource hears of the matches.
    let mut watch = broker
        .filters(&mia)
        .watch_broker_filter(pb::GetBrokerFilterRequest {
            filter_id: id.clone(),
            matches_limit: None,
        })
        .await
        .expect("watch")
        .into_inner();
    assert_eq!(broker.ingest("v4.01").await, 24);
    let heard = tokio::time::timeout(Duration::from_secs(30), watch.message())
        .await
        .expect("a change within the watch's polling")
        .expect("stream");
    assert!(heard.is_some(), "one event for the new matches");

    let got = read(broker, &mia, &id).await;
    let want = brighter(&["v4.01"], 18.5);
    assert_eq!(got.matches_saved as usize, want.len());
    for m in &got.latest_matches {
        let fields = ithaca_kit::json::from_struct(m.fields.clone().expect("fields"));
        let mag = fields["candidate"]["magpsf"]
            .as_f64()
            .unwrap_or_else(|| panic!("projected magpsf: {fields}"));
        assert!(mag < 18.5, "{fields}");
        assert!(fields["candidate"]["fid"].is_i64(), "{fields}");
        let margin = fields["margin"].as_f64().expect("added margin");
        assert!((margin - (18.5 - mag)).abs() < 1e-9, "{fields}");
        // Only what the version projects: no other candidate field, and
        // the ids stand on the match itself.
        let keys: BTreeSet<&str> = fields["candidate"]
            .as_object()
            .expect("candidate")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, BTreeSet::from(["fid", "magpsf"]), "{fields}");
        assert!(fields.get("candid").is_none() && fields.get("objectId").is_none());
    }

    // A deleted filter's watch ends; a watch of another tenant's is refused.
    let other = broker
        .filters(&person("tenant-n"))
        .watch_broker_filter(pb::GetBrokerFilterRequest {
            filter_id: id.clone(),
            matches_limit: None,
        })
        .await
        .expect_err("other tenant");
    refused(&other, Code::NotFound, Some("UNKNOWN_FILTER"));
    deactivate(broker, &on, &id).await.expect("deactivate");
    delete(broker, &on, &id).await.expect("delete");
    // Events of the ingest's later files may still be queued before those
    // of the deactivation and the deletion.
    let mut ended = false;
    for _ in 0..64 {
        match tokio::time::timeout(Duration::from_secs(30), watch.message())
            .await
            .expect("the watch moves on")
        {
            Ok(Some(_)) => {}
            Ok(None) => {
                ended = true;
                break;
            }
            Err(status) => panic!("{status:?}"),
        }
    }
    assert!(ended, "the watch of a deleted filter ends");
}

pub(super) async fn the_filter_list_finds_a_filter_by_name(broker: &Broker) {
    let lea = person("tenant-l");
    let targets = default_group(broker, &lea).await;
    let group = targets.groups[0].group_id.clone();
    let mut c = broker.filters(&lea);
    for name in ["Kilonova hunt", "SN Ia early", "kilonova (GW)", "100%_done"] {
        c.post_filter(pb::PostFilterRequest {
            name: name.into(),
            group_id: group.clone(),
            stream_id: "ztf-public".into(),
            ..Default::default()
        })
        .await
        .expect("post_filter");
    }
    let find = |search: &str| {
        let mut c = broker.filters(&lea);
        let request = pb::ListBrokerFiltersRequest {
            search: Some(search.to_owned()),
            ..Default::default()
        };
        async move {
            c.list_broker_filters(request)
                .await
                .expect("list")
                .into_inner()
        }
    };
    let names = |page: &pb::BrokerFilters| -> BTreeSet<String> {
        page.filters.iter().map(|f| f.name.clone()).collect()
    };
    let kilonova = find("KILONOVA").await;
    assert_eq!(
        names(&kilonova),
        BTreeSet::from(["Kilonova hunt".to_owned(), "kilonova (GW)".to_owned()])
    );
    assert_eq!(kilonova.total, 2);
    // Wildcards are plain characters.
    assert_eq!(
        names(&find("%").await),
        BTreeSet::from(["100%_done".to_owned()])
    );
    assert_eq!(find("_").await.total, 1);
    assert_eq!(find("no such filter").await.total, 0);
    // Another tenant's filters are never found.
    let mut other = broker.filters(&person("tenant-o"));
    let theirs = other
        .list_broker_filters(pb::ListBrokerFiltersRequest {
            search: Some("kilonova".into()),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(theirs.total, 0);
    let long = "x".repeat(101);
    let status = c
        .list_broker_filters(pb::ListBrokerFiltersRequest {
            search: Some(long),
            ..Default::default()
        })
        .await
        .expect_err("too long");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("search:"), "{status:?}");
}

pub(super) async fn fink_fields_stay_in_finks_namespace(broker: &Broker) {
    broker.ingest("v4.02").await;
    let enriched = astro::data().join("ztf/broker_enriched");
    assert!(broker.ingest_dir(&enriched).await > 0, "the Fink packets");
    let fay = person("tenant-f");
    let mut alerts = AlertServiceClient::with_interceptor(
        client::channel(&broker.url).expect("url"),
        Outbound::new(common::key(), fay.clone()),
    );
    let schema = |search: &str, producer: Option<&str>| pb::GetAlertSchemaRequest {
        search: Some(search.to_owned()),
        producer: producer.map(str::to_owned),
        limit: Some(2000),
        ..Default::default()
    };

    // ZTF's schema has none of Fink's fields; Fink's lists them.
    let ztf = alerts
        .get_alert_schema(schema("", None))
        .await
        .expect("schema")
        .into_inner();
    let ztf_fields: BTreeSet<&str> = ztf.paths.iter().map(|p| p.field.as_str()).collect();
    assert!(ztf_fields.contains("candidate.magpsf"));
    assert!(!ztf_fields.contains("cdsxmatch"), "Fink's field leaked");
    assert!(
        ztf.versions.iter().all(|v| !v.contains('/')),
        "{:?}",
        ztf.versions
    );
    assert_eq!(ztf.producers.len(), 1, "{:?}", ztf.producers);
    let name = ztf.producers[0].clone();
    assert!(name.to_lowercase().contains("fink"), "{name}");
    let fink = alerts
        .get_alert_schema(schema("", Some(&name.to_uppercase())))
        .await
        .expect("fink schema")
        .into_inner();
    let fink_fields: BTreeSet<&str> = fink.paths.iter().map(|p| p.field.as_str()).collect();
    assert!(fink_fields.contains("cdsxmatch"), "{fink_fields:?}");
    assert!(
        !fink_fields.contains("candidate.magpsf"),
        "only what Fink adds"
    );
    assert_eq!(fink.producer, Some(name.to_uppercase()));
    assert!(
        fink.versions
            .iter()
            .all(|v| v.ends_with(&format!("/{name}")))
    );
    let unknown = alerts
        .get_alert_schema(schema("", Some("alerce")))
        .await
        .expect_err("unknown producer");
    assert_eq!(unknown.code(), Code::InvalidArgument);
    assert!(unknown.message().contains("Fink"), "{unknown:?}");

    // A filter on ZTF's stream cannot name Fink's field, and is told why.
    let filter = new_filter(broker, &fay, "ztf-public").await;
    let on = on_filter(&fay, "f1", &filter.filter_id);
    let verdict = post_version(
        broker,
        &on,
        &filter.filter_id,
        json!([{"$match": {"cdsxmatch": "Unknown"}}]),
    )
    .await;
    assert!(!verdict.passed, "{verdict:?}");
    let problem = &verdict.problems[0];
    assert!(problem.message.contains("FOREIGN_PATH"), "{problem:?}");
    assert!(problem.message.contains("Fink"), "{problem:?}");
    assert!(problem.message.contains("ZTF"), "{problem:?}");
    let status = broker
        .filters(&on)
        .run_broker_filter(preview_of(
            &filter.filter_id,
            json!([{"$match": {"cdsxmatch": "Unknown"}}]),
        ))
        .await
        .expect_err("a Fink path");
    assert!(status.message().contains("Fink adds"), "{status:?}");
    // ZTF's own paths still pass, over every ZTF alert (Fink's included).
    let verdict = post_version(broker, &on, &filter.filter_id, bright_cut(18.5)).await;
    assert!(verdict.passed, "{verdict:?}");
}
