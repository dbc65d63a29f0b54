//! The astronomy half of the broker on the real data of `../shared/data`,
//! on SQLite and PostgreSQL: ingest of every ZTF alert file checked
//! against SOURCES.md (the three-alert container and the 3.x schemas
//! included), idempotent re-ingest, bad files, queries by object, candid and
//! cone, light curves, the schema union and its fallback, the crossmatch
//! (NGC 4993 at GW170817's host, 61 Cyg A after proper motion) and the
//! bad-input table.

use crate::common;

use common::astro;
use ithaca_broker::alerts::service::{AlertQuery, NewBroker};
use ithaca_broker::catalogs::service::CrossmatchQuery;
use ithaca_kit::db::Db;
use ithaca_kit::error::Code;
use ithaca_kit::principal::Principal;
use std::collections::{BTreeMap, BTreeSet};

fn reader() -> Principal {
    common::agent("tenant-a", "agent-a")
}

async fn archive_suite(db: Db) {
    let (alerts, catalogs) = astro::services(db);
    let listed = astro::listed();
    assert_eq!(listed.len(), 40, "SOURCES.md lists 40 raw alerts");

    // Ingest: every file of the list (38: its "36 files" heading miscounts
    // 11 + 24 + 3), 40 alerts, every id as listed.
    let reports = astro::ingest_alerts(&alerts).await;
    let files: BTreeSet<&str> = listed.iter().map(|l| l.file.as_str()).collect();
    assert_eq!(reports.len(), files.len());
    let total: i64 = reports.iter().map(|r| r.alerts).sum();
    let stored: i64 = reports.iter().map(|r| r.stored).sum();
    assert_eq!((total, stored), (40, 40));
    let multi = reports
        .iter()
        .find(|r| r.source.starts_with("multi_3alerts"))
        .expect("the three-alert container");
    assert_eq!(multi.alerts, 3);
    assert_eq!(
        multi.object_ids,
        ["ZTF19abbpaqb", "ZTF18acjzbxi", "ZTF18abecvir"]
    );
    let mut versions: BTreeSet<String> = reports.iter().map(|r| r.version.clone()).collect();
    assert_eq!(
        versions.iter().map(String::as_str).collect::<Vec<_>>(),
        ["3.2", "3.3", "4.01", "4.02"]
    );
    let got: BTreeMap<i64, String> = reports
        .iter()
        .flat_map(|r| r.candids.iter().copied().zip(r.object_ids.iter().cloned()))
        .collect();
    let want: BTreeMap<i64, String> = listed
        .iter()
        .map(|l| (l.candid, l.object_id.clone()))
        .collect();
    assert_eq!(got, want, "candid → objectId as in SOURCES.md");

    // Each alert's history counts, as SOURCES.md lists them.
    for l in &listed {
        let answer = alerts
            .alerts(
                &reader(),
                AlertQuery {
                    broker_id: "ztf-archive".into(),
                    candid: Some(l.candid.to_string()),
                    ..Default::default()
                },
            )
            .await
            .expect("by candid");
        let row = &answer.alerts[0].row;
        assert_eq!(row.object_id, l.object_id);
        assert_eq!(
            (row.prv_detections, row.prv_upper_limits, row.fp_hists),
            (l.prv_detections, l.prv_upper_limits, l.fp),
            "{}",
            l.file
        );
        assert!((row.ra - l.ra).abs() < 1e-5 && (row.dec - l.dec).abs() < 1e-5);
    }

    // Re-ingesting changes nothing.
    let again = astro::ingest_alerts(&alerts).await;
    assert!(again.iter().all(|r| r.already_present && r.stored == 0));
    let brokers = alerts.brokers(&reader()).await.expect("brokers");
    let archive = brokers
        .iter()
        .find(|b| b.row.broker_id == "ztf-archive")
        .expect("archive");
    assert_eq!((archive.stats.alerts, archive.stats.objects), (40, 40));

    // A truncated file and a file that is not Avro: named, nothing stored.
    let good =
        std::fs::read(astro::alerts_dir().join("v4.02/2695378462115010012.avro")).expect("read");
    let truncated = good[..good.len() * 2 / 3].to_vec();
    let err = alerts
        .ingest_file(&Principal::system(""), "", "cut.avro", truncated)
        .await
        .expect_err("truncated");
    assert_eq!(err.code, Code::InvalidArgument);
    assert!(err.message.starts_with("cut.avro:"), "{}", err.message);
    let err = alerts
        .ingest_file(&Principal::system(""), "", "notes.avro", b"hello".to_vec())
        .await
        .expect_err("not avro");
    assert!(err.message.starts_with("notes.avro:"), "{}", err.message);
    let brokers = alerts.brokers(&reader()).await.expect("brokers");
    assert_eq!(brokers[0].stats.alerts, 40);
    assert!(
        alerts
            .ingest_file(&reader(), "", "x.avro", good.clone())
            .await
            .is_err(),
        "agents do not ingest"
    );

    // By object, with and without time bounds.
    let q = |object: &str| AlertQuery {
        broker_id: "ztf-archive".into(),
        object_id: Some(object.into()),
        ..Default::default()
    };
    let by_object = alerts
        .alerts(&reader(), q("ZTF18abudxnw"))
        .await
        .expect("object");
    assert_eq!(by_object.alerts.len(), 1);
    let alert = &by_object.alerts[0];
    assert_eq!(alert.row.candid, 2_695_378_462_115_010_012);
    assert!(alert.packet.is_none(), "trimmed by default");
    let full = alerts
        .alerts(
            &reader(),
            AlertQuery {
                full: true,
                ..q("ZTF18abudxnw")
            },
        )
        .await
        .expect("full");
    let packet = full.alerts[0].packet.as_ref().expect("full packet");
    assert_eq!(packet["prv_candidates"].as_array().map(Vec::len), Some(10));
    assert_eq!(packet["fp_hists"].as_array().map(Vec::len), Some(10));
    for cutout in ["cutoutScience", "cutoutTemplate", "cutoutDifference"] {
        let stamp = packet[cutout]["stampData"].as_str().expect("base64 stamp");
        assert!(stamp.starts_with("H4sI"), "{cutout} is gzip, base64");
    }

    // Cone searches around ZTF18abudxnw, with and without time bounds.
    let cone = |jd: Option<(f64, f64)>| AlertQuery {
        broker_id: "ztf-archive".into(),
        ra: Some(295.30320),
        dec: Some(-10.39590),
        radius_arcsec: Some(5.0),
        jd_start: jd.map(|j| j.0),
        jd_end: jd.map(|j| j.1),
        ..Default::default()
    };
    let jd = alert.row.jd;
    let bounded = alerts
        .alerts(&reader(), cone(Some((jd - 30.0, jd + 1.0))))
        .await
        .expect("cone");
    assert_eq!(bounded.alerts.len(), 1);
    assert!(bounded.alerts[0].separation_arcsec.expect("separation") < 1.0);
    assert!(bounded.suggestion.is_none());
    let before = alerts
        .alerts(&reader(), cone(Some((jd - 60.0, jd - 30.0))))
        .await
        .expect("cone");
    assert!(before.alerts.is_empty());
    let unbounded = alerts.alerts(&reader(), cone(None)).await.expect("cone");
    assert_eq!(unbounded.alerts.len(), 1);
    assert_eq!(unbounded.scanned, Some(1));
    let advice = unbounded
        .suggestion
        .expect("a cone without bounds suggests some");
    assert!(
        advice.contains("jd_start") && advice.contains("1 alerts scanned"),
        "{advice}"
    );
    // The ten alerts of one v4.02 exposure around (249.9, -20.9), 30′.
    let field = alerts
        .alerts(
            &reader(),
            AlertQuery {
                broker_id: "ztf-archive".into(),
                ra: Some(249.9),
                dec: Some(-20.9),
                radius_arcsec: Some(1800.0),
                limit: Some(3),
                ..Default::default()
            },
        )
        .await
        .expect("wide cone");
    let inside = listed
        .iter()
        .filter(|l| ithaca_broker::sky::separation_arcsec(249.9, -20.9, l.ra, l.dec) <= 1800.0)
        .count() as i64;
    assert_eq!(field.matched, inside);
    assert!(field.truncated && field.alerts.len() == 3);

    // The light curve of an object with history.
    let lc = alerts
        .light_curve(&reader(), "ztf-archive", "ZTF17aadcuwj", true)
        .await
        .expect("light curve");
    assert!(lc.points.windows(2).all(|w| w[0].jd <= w[1].jd), "sorted");
    let dets = lc
        .points
        .iter()
        .filter(|p| p.kind.as_str() == "detection")
        .count();
    assert_eq!(dets, 37 + 1, "37 previous detections and the alert itself");
    assert_eq!(
        lc.points
            .iter()
            .filter(|p| p.kind.as_str() == "upper_limit")
            .count(),
        28
    );
    assert!(
        lc.points
            .iter()
            .all(|p| p.is_limit == (p.mag_err.is_none()))
    );
    // The packet's 30 days are not the object's history: the survey first
    // saw this position in 2017 (jdstarthist) and counts 894 detections.
    let first = lc.first_detection_jd.expect("a first detection");
    let survey = lc.survey_first_jd.expect("jdstarthist");
    assert!(
        ithaca_broker::astrotime::jd_to_iso(survey).starts_with("2017"),
        "{survey}"
    );
    assert!(first - survey > 365.0, "{first} vs {survey}");
    assert_eq!(lc.survey_detections, Some(894));
    let svg = alerts
        .light_curve_svg(&reader(), "ztf-archive", "ZTF17aadcuwj")
        .await
        .expect("svg");
    assert!(svg.starts_with("<svg") && svg.contains("days since first detection"));

    // The schema: the union of the ingested versions.
    let schema = alerts
        .alert_schema(&reader(), None, Some("candidate"), Some(2000), None)
        .await
        .expect("schema");
    assert_eq!(schema.source, "ingested");
    versions.insert("4.02".into());
    let magpsf = schema
        .paths
        .iter()
        .find(|(f, _)| f.path == "candidate.magpsf")
        .expect("candidate.magpsf");
    assert_eq!(
        magpsf.1.len(),
        4,
        "every version has magpsf: {:?}",
        magpsf.1
    );
    let fp = alerts
        .alert_schema(&reader(), Some("forcediffimflux"), None, None, None)
        .await
        .expect("fp");
    let flux = fp
        .paths
        .iter()
        .find(|(f, _)| f.field == "fp_hists.forcediffimflux")
        .expect("fp path");
    assert_eq!(flux.1, ["4.01", "4.02"], "only 4.x has forced photometry");
    assert!(flux.0.path.starts_with("fp_hists?[]."), "{}", flux.0.path);

    // The reference catalogs and the crossmatch.
    astro::ingest_catalogs(&catalogs).await;
    astro::ingest_catalogs(&catalogs).await; // unchanged the second time
    let counts = catalogs.counts().await.expect("counts");
    assert_eq!(
        counts,
        [
            ("hipparcos2".to_owned(), 4559),
            ("openngc".to_owned(), 2588)
        ]
    );
    // AT 2017gfo, the optical counterpart of GW170817, sits ~10″ from the
    // centre of NGC 4993.
    let x = catalogs
        .crossmatch(
            &reader(),
            CrossmatchQuery {
                broker_id: "ztf-archive".into(),
                ra: Some(197.450_354),
                dec: Some(-23.381_483),
                radius_arcsec: Some(60.0),
                ..Default::default()
            },
        )
        .await
        .expect("crossmatch");
    assert_eq!(x.matches[0].source.source_id, "NGC4993");
    assert!(
        (5.0..15.0).contains(&x.matches[0].separation_arcsec),
        "{}",
        x.matches[0].separation_arcsec
    );
    assert!((x.matches[0].distance_mpc().expect("distance") - 41.9).abs() < 0.5);
    // 61 Cyg A (HIP 104214) at SIMBAD's J2000 position: found at epoch
    // J2000 once its 5″/yr proper motion is applied, not at the catalog epoch.
    let star = |epoch: f64| CrossmatchQuery {
        broker_id: "ztf-archive".into(),
        ra: Some(316.724_750),
        dec: Some(38.749_417),
        radius_arcsec: Some(2.0),
        epoch_jd: Some(epoch),
        catalogs: vec!["hipparcos2".into()],
        ..Default::default()
    };
    let j2000 = catalogs
        .crossmatch(&reader(), star(2_451_545.0))
        .await
        .expect("61 Cyg");
    assert_eq!(j2000.matches.len(), 1);
    assert_eq!(j2000.matches[0].source.source_id, "HIP 104214");
    assert!(
        j2000.matches[0].separation_arcsec < 0.5,
        "{}",
        j2000.matches[0].separation_arcsec
    );
    let j1991 = catalogs
        .crossmatch(&reader(), star(2_448_349.062_5))
        .await
        .expect("1991.25");
    assert!(
        j1991.matches.is_empty(),
        "without proper motion the star is ~57″ away"
    );
    // Named by an alert, the epoch defaults to the alert's.
    let by_alert = catalogs
        .crossmatch(
            &reader(),
            CrossmatchQuery {
                broker_id: "ztf-archive".into(),
                object_id: Some("ZTF18abudxnw".into()),
                ..Default::default()
            },
        )
        .await
        .expect("by alert");
    assert!((by_alert.epoch_jd - jd).abs() < 1e-9);
    // A star our catalogs do not hold: ZTF's own alert puts a Pan-STARRS1
    // source 0.48″ away with star/galaxy score 1. The answer says what the
    // catalogs hold and echoes the survey's crossmatch, not a bare zero.
    let on_a_star = catalogs
        .crossmatch(
            &reader(),
            CrossmatchQuery {
                broker_id: "ztf-archive".into(),
                object_id: Some("ZTF17aadcuwj".into()),
                radius_arcsec: Some(3600.0),
                ..Default::default()
            },
        )
        .await
        .expect("ZTF17aadcuwj");
    assert!(on_a_star.matches.is_empty(), "{:?}", on_a_star.matches);
    let survey = on_a_star.survey.as_ref().expect("the survey's crossmatch");
    assert_eq!(survey["sgscore1"].as_f64(), Some(1.0), "{survey}");
    let d = survey["distpsnr1"].as_f64().expect("distpsnr1");
    assert!((d - 0.48).abs() < 0.01, "{survey}");
    let note = on_a_star.note.as_deref().expect("a note, not a bare zero");
    assert!(
        note.contains("does not mean nothing is there") && note.contains("0.48"),
        "{note}"
    );
    let held: Vec<(&str, i64)> = on_a_star
        .coverage
        .iter()
        .map(|c| (c.catalog, c.sources))
        .collect();
    assert_eq!(held, [("hipparcos2", 4559), ("openngc", 2588)]);
    assert!(
        on_a_star.coverage[0].holds.contains("Hp 6.0"),
        "{:?}",
        on_a_star.coverage
    );
    assert!(
        on_a_star.coverage[1].holds.contains("0.01"),
        "{:?}",
        on_a_star.coverage
    );

    bad_input(&alerts, &catalogs).await;
}

/// Each bad argument is refused with an error that names the field.
async fn bad_input(
    alerts: &ithaca_broker::alerts::AlertService,
    catalogs: &ithaca_broker::catalogs::CatalogService,
) {
    alerts
        .add_broker(
            &Principal::system(""),
            NewBroker {
                broker_id: "fink".into(),
                name: "Fink".into(),
                operations: vec!["alerts".into()],
                altdata: Some(serde_json::json!({"kafka": "fink.example:9092", "username": "u"})),
                credential: "s3cret-kafka-password".into(),
                ..Default::default()
            },
        )
        .await
        .expect("add broker");
    let listed = alerts.brokers(&reader()).await.expect("brokers");
    let fink = listed
        .iter()
        .find(|b| b.row.broker_id == "fink")
        .expect("fink");
    assert!(fink.credential_configured);
    assert!(
        !format!("{:?}", fink.row).contains("s3cret"),
        "sealed at rest"
    );

    let base = AlertQuery {
        broker_id: "ztf-archive".into(),
        ..Default::default()
    };
    let cases: Vec<(AlertQuery, &str)> = vec![
        (
            AlertQuery {
                broker_id: "nope".into(),
                object_id: Some("ZTF18abudxnw".into()),
                ..base.clone()
            },
            "broker_id:",
        ),
        (
            AlertQuery {
                ra: Some(10.0),
                dec: Some(10.0),
                radius_arcsec: Some(-5.0),
                ..base.clone()
            },
            "radius_arcsec:",
        ),
        (
            AlertQuery {
                ra: Some(10.0),
                dec: Some(10.0),
                radius_arcsec: Some(7200.0),
                ..base.clone()
            },
            "radius_arcsec:",
        ),
        (
            AlertQuery {
                ra: Some(10.0),
                dec: Some(100.0),
                radius_arcsec: Some(5.0),
                ..base.clone()
            },
            "dec:",
        ),
        (
            AlertQuery {
                candid: Some("27521906550-15010016".into()),
                ..base.clone()
            },
            "candid:",
        ),
        (
            AlertQuery {
                candid: Some("99999999999999999999".into()),
                ..base.clone()
            },
            "candid:",
        ),
        (
            AlertQuery {
                object_id: Some("ZTF99zzzzzzz".into()),
                ..base.clone()
            },
            "objectId:",
        ),
        (
            AlertQuery {
                object_id: Some("ZTF18abudxnw".into()),
                jd_start: Some(2_460_000.0),
                jd_end: Some(2_459_000.0),
                ..base.clone()
            },
            "jd_start:",
        ),
        (
            AlertQuery {
                object_id: Some("ZTF18abudxnw".into()),
                limit: Some(0),
                ..base.clone()
            },
            "limit:",
        ),
        (base.clone(), "objectId:"),
    ];
    for (q, field) in cases {
        let err = alerts
            .alerts(&reader(), q.clone())
            .await
            .expect_err("refused");
        assert!(err.message.starts_with(field), "{q:?}: {}", err.message);
    }
    let err = alerts
        .light_curve(&reader(), "fink", "ZTF18abudxnw", true)
        .await
        .expect_err("fink does not list photometry");
    assert_eq!(err.domain, Some("OPERATION_NOT_SUPPORTED"));
    assert!(
        err.message.starts_with("broker_id:") && err.message.contains("photometry"),
        "{}",
        err.message
    );
    let err = alerts
        .light_curve(&reader(), "ztf-archive", "ZTF99zzzzzzz", true)
        .await
        .expect_err("unknown object");
    assert_eq!(
        (err.code, err.domain),
        (Code::NotFound, Some("UNKNOWN_OBJECT"))
    );
    let err = catalogs
        .crossmatch(
            &reader(),
            CrossmatchQuery {
                broker_id: "fink".into(),
                ra: Some(1.0),
                dec: Some(1.0),
                ..Default::default()
            },
        )
        .await
        .expect_err("fink does not list crossmatch");
    assert!(err.message.contains("crossmatch"), "{}", err.message);
    let err = catalogs
        .crossmatch(
            &reader(),
            CrossmatchQuery {
                broker_id: "ztf-archive".into(),
                ra: Some(1.0),
                dec: Some(1.0),
                catalogs: vec!["sdss".into()],
                ..Default::default()
            },
        )
        .await
        .expect_err("unknown catalog");
    assert!(err.message.starts_with("catalogs:"), "{}", err.message);
}

/// Before anything is ingested the schema comes from the files.
async fn schema_fallback(db: Db) {
    let (alerts, _) = astro::services(db);
    let schema = alerts
        .alert_schema(&reader(), Some("magpsf"), None, None, None)
        .await
        .expect("schema");
    assert_eq!(schema.source, "schema files");
    assert_eq!(schema.versions, ["4.02"]);
    let paths: Vec<&str> = schema.paths.iter().map(|(f, _)| f.path.as_str()).collect();
    assert!(paths.contains(&"candidate.magpsf"), "{paths:?}");
    assert!(paths.contains(&"prv_candidates?[].magpsf?"), "{paths:?}");
    let all = alerts
        .alert_schema(&reader(), None, None, Some(2000), None)
        .await
        .expect("all");
    assert!(all.matched > 150, "{} paths", all.matched);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_archive_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = ithaca_broker::open_db(&common::sqlite_path(&dir, "broker"), "unused")
        .await
        .expect("open");
    archive_suite(db).await;
    let fresh = ithaca_broker::open_db(&common::sqlite_path(&dir, "fresh"), "unused")
        .await
        .expect("open");
    schema_fallback(fresh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_archive_postgres() {
    let Some(url) = common::postgres("alert_archive_postgres") else {
        return;
    };
    let schema = common::unique_schema("astro");
    let db = ithaca_broker::open_db(&url, &schema).await.expect("open");
    archive_suite(db).await;
    common::drop_schema(&url, &schema).await;
    let fresh_schema = common::unique_schema("astro_fresh");
    let fresh = ithaca_broker::open_db(&url, &fresh_schema)
        .await
        .expect("open");
    schema_fallback(fresh).await;
    common::drop_schema(&url, &fresh_schema).await;
}
