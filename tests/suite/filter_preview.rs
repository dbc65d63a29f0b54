//! The filter preview over the real ZTF alerts of `../shared/data`, on
//! SQLite and PostgreSQL: a counterpart-search pipeline compiled against
//! the ingested schemas and previewed (its count and its sorted alerts
//! checked against the same cuts written out in plain Rust on each alert),
//! a pipeline that reads the history (the packet), programmes, a time
//! window, and regions: a cone as a MOC (everything inside found, the
//! nearest alert outside left out) and a MOC cell, which is not a cone.

use crate::common;

use common::astro;
use ithaca_broker::alerts::schema::{self, FlatField};
use ithaca_broker::alerts::{AlertService, AlertsConfig};
use ithaca_broker::filters::pipeline::{self, Pipeline, StreamBounds};
use ithaca_broker::filters::preview::{self, PreviewQuery, Region};
use ithaca_broker::sky;
use ithaca_kit::db::Db;
use ithaca_kit::error::Code;
use serde_json::{Value, json};

fn reader() -> ithaca_kit::principal::Principal {
    common::agent("tenant-a", "agent-a")
}

/// Every stored alert: its row's position and time, its candidate and its
/// whole packet, read through the archive's own query tools.
struct Stored {
    candid: i64,
    object_id: String,
    ra: f64,
    dec: f64,
    jd: f64,
    candidate: Value,
    packet: Value,
}

async fn stored(alerts: &AlertService) -> Vec<Stored> {
    let mut out = Vec::new();
    for l in astro::listed() {
        let a = alerts
            .packet(&reader(), "ztf-archive", &l.candid.to_string())
            .await
            .expect("stored alert");
        out.push(Stored {
            candid: a.row.candid,
            object_id: a.row.object_id.clone(),
            ra: a.row.ra,
            dec: a.row.dec,
            jd: a.row.jd,
            candidate: a.candidate.clone(),
            packet: a.packet.clone().expect("packet"),
        });
    }
    out
}

fn defaults() -> Value {
    json!([
        {"$match": {
            "candidate.drb": {"$gt": 0.5},
            "candidate.isdiffpos": {"$in": ["t", "1"]},
            "candidate.nbad": {"$lte": 5},
            "$or": [{"candidate.ndethist": {"$gte": 2}}, {"candidate.ssdistnr": {"$gte": 0}}],
            "$nor": [{"candidate.sgscore1": {"$gt": 0.76}, "candidate.distpsnr1": {"$lt": 2}}]
        }},
        {"$addFields": {"age_days": {"$subtract": ["$candidate.jd", "$candidate.jdstarthist"]}}},
        {"$project": {"candidate.jd": 1, "candidate.magpsf": 1, "candidate.drb": 1, "age_days": 1}}
    ])
}

/// The same cuts as [`defaults`], in plain Rust. (The real alerts' new
/// objects all sit on known asteroids, so the usual "not near a known
/// solar-system object" cut would pass none of them.)
fn defaults_by_hand(c: &Value) -> bool {
    let num = |k: &str| c[k].as_f64();
    let drb = num("drb").is_some_and(|d| d > 0.5);
    let positive = matches!(c["isdiffpos"].as_str(), Some("t" | "1"));
    let nbad = num("nbad").is_some_and(|n| n <= 5.0);
    let seen_or_known =
        num("ndethist").is_some_and(|n| n >= 2.0) || num("ssdistnr").is_some_and(|d| d >= 0.0);
    let star =
        num("sgscore1").is_some_and(|s| s > 0.76) && num("distpsnr1").is_some_and(|d| d < 2.0);
    drb && positive && nbad && seen_or_known && !star
}

async fn compiled(alerts: &AlertService, stages: &Value) -> Pipeline {
    let (_, versions) = alerts.schema_versions().await.expect("schemas");
    let union: Vec<FlatField> =
        schema::union(versions.iter().map(|(v, f)| (v.as_str(), f.as_slice())))
            .into_iter()
            .map(|(f, _)| f)
            .collect();
    let stream = StreamBounds {
        programids: vec![1, 2, 3],
        fields: None,
    };
    pipeline::compile(stages, &union, &stream)
        .unwrap_or_else(|p| panic!("{stages}: {p:#?}"))
        .pipeline
}

fn query() -> PreviewQuery {
    PreviewQuery {
        broker_id: "ztf-archive".into(),
        limit: 10,
        ..Default::default()
    }
}

async fn suite(db: Db) {
    let (alerts, _) = ithaca_broker::astro(
        db,
        &common::key(),
        AlertsConfig {
            schema_dir: Some(astro::schema_dir()),
        },
    );
    astro::ingest_alerts(&alerts).await;
    let all = stored(&alerts).await;
    assert_eq!(all.len(), 40);
    let store = alerts.store();

    // The defaults: the count, and the alerts by time both ways.
    let p = compiled(&alerts, &defaults()).await;
    let mut passing: Vec<&Stored> = all
        .iter()
        .filter(|s| defaults_by_hand(&s.candidate))
        .collect();
    assert!(
        !passing.is_empty() && passing.len() < all.len(),
        "the cuts should split the real alerts ({} of {})",
        passing.len(),
        all.len()
    );
    let counted = preview::preview(store, &p, &query()).await.expect("count");
    assert_eq!(
        (counted.evaluated, counted.matched),
        (40, passing.len() as u64)
    );
    assert!(counted.alerts.is_empty(), "no sort_by: counts only");

    passing.sort_by(|a, b| a.jd.total_cmp(&b.jd).then(a.candid.cmp(&b.candid)));
    let sorted = preview::preview(
        store,
        &p,
        &PreviewQuery {
            sort_by: Some("candidate.jd".into()),
            ascending: true,
            limit: 5,
            ..query()
        },
    )
    .await
    .expect("sorted");
    let want: Vec<i64> = passing.iter().take(5).map(|s| s.candid).collect();
    let got: Vec<i64> = sorted
        .alerts
        .iter()
        .map(|a| a["candid"].as_i64().expect("candid"))
        .collect();
    assert_eq!(got, want, "the 5 earliest passing alerts");
    let first = &sorted.alerts[0];
    assert_eq!(first["objectId"], json!(passing[0].object_id));
    assert_eq!(
        first["candidate"]["magpsf"], passing[0].candidate["magpsf"],
        "the projection of the whole alert"
    );
    assert!(first["candidate"].get("rb").is_none(), "projected away");
    let age = passing[0].candidate["jd"].as_f64().expect("jd")
        - passing[0].candidate["jdstarthist"]
            .as_f64()
            .expect("jdstarthist");
    assert!((first["age_days"].as_f64().expect("age") - age).abs() < 1e-9);
    // Every returned document is what the ingest path's matcher gives.
    let doc = preview::alert_document(
        &passing[0].object_id,
        passing[0].candid,
        "",
        passing[0].candidate.clone(),
    );
    let mut by_matcher = preview::matches(&p, &doc).expect("passes");
    by_matcher
        .as_object_mut()
        .expect("object")
        .remove("schemavsn");
    assert_eq!(&by_matcher, first);

    let newest = preview::preview(
        store,
        &p,
        &PreviewQuery {
            sort_by: Some("age_days".into()),
            ascending: false,
            limit: 3,
            ..query()
        },
    )
    .await
    .expect("by a computed field");
    let mut by_age: Vec<(f64, i64)> = passing
        .iter()
        .map(|s| {
            (
                s.candidate["jd"].as_f64().unwrap_or(0.0)
                    - s.candidate["jdstarthist"].as_f64().unwrap_or(0.0),
                s.candid,
            )
        })
        .collect();
    by_age.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let got: Vec<i64> = newest
        .alerts
        .iter()
        .map(|a| a["candid"].as_i64().expect("candid"))
        .collect();
    assert_eq!(got, by_age.iter().take(3).map(|a| a.1).collect::<Vec<_>>());

    // A time window: the 2023-10-12 exposure only.
    let night = preview::preview(
        store,
        &p,
        &PreviewQuery {
            jd_start: Some(2_460_229.5),
            jd_end: Some(2_460_230.5),
            ..query()
        },
    )
    .await
    .expect("window");
    let in_night: Vec<&&Stored> = passing
        .iter()
        .filter(|s| (2_460_229.5..=2_460_230.5).contains(&s.jd))
        .collect();
    assert_eq!(
        night.evaluated,
        all.iter()
            .filter(|s| (2_460_229.5..=2_460_230.5).contains(&s.jd))
            .count() as u64
    );
    assert_eq!(night.matched, in_night.len() as u64);

    // Programmes: only one alert is not public (programid 3).
    let caltech = preview::preview(
        store,
        &compiled(&alerts, &json!([{"$match": {}}])).await,
        &PreviewQuery {
            programids: vec![3],
            ..query()
        },
    )
    .await
    .expect("programmes");
    let want = all
        .iter()
        .filter(|s| s.candidate["programid"] == json!(3))
        .count() as u64;
    assert_eq!((caltech.evaluated, caltech.matched), (want, want));
    assert!(want >= 1);

    // A pipeline that reads the history decodes the packets.
    let bright_before = compiled(
        &alerts,
        &json!([{"$match": {"prv_candidates.magpsf": {"$lt": 16}}}]),
    )
    .await;
    assert!(bright_before.needs().packet);
    let r = preview::preview(
        store,
        &bright_before,
        &PreviewQuery {
            sort_by: Some("candidate.magpsf".into()),
            ascending: true,
            limit: 40,
            ..query()
        },
    )
    .await
    .expect("history");
    let mut want: Vec<&Stored> = all
        .iter()
        .filter(|s| {
            s.packet["prv_candidates"].as_array().is_some_and(|h| {
                h.iter()
                    .any(|p| p["magpsf"].as_f64().is_some_and(|m| m < 16.0))
            })
        })
        .collect();
    want.sort_by(|a, b| {
        a.candidate["magpsf"]
            .as_f64()
            .unwrap_or(f64::MAX)
            .total_cmp(&b.candidate["magpsf"].as_f64().unwrap_or(f64::MAX))
            .then(a.candid.cmp(&b.candid))
    });
    assert!(!want.is_empty() && want.len() < 40);
    assert_eq!(r.matched, want.len() as u64);
    let got: Vec<i64> = r
        .alerts
        .iter()
        .map(|a| a["candid"].as_i64().expect("candid"))
        .collect();
    assert_eq!(got, want.iter().map(|s| s.candid).collect::<Vec<_>>());
    assert!(
        r.alerts[0]["prv_candidates"].is_array(),
        "the whole packet is the document"
    );
    assert!(
        r.alerts[0].get("cutoutScience").is_none(),
        "without its cutouts"
    );

    withheld_paths(&alerts, &all).await;
    regions(&alerts, &all).await;
    bad_queries(&alerts, &p).await;
}

/// On a stream that withholds paths (`ztf-public`: `candidate.programpi`,
/// `fp_hists`), the preview sees documents without them, as the live path
/// does: nothing counts on them, and no alert returned carries them.
async fn withheld_paths(alerts: &AlertService, all: &[Stored]) {
    let store = alerts.store();
    let withheld = vec!["candidate.programpi".to_owned(), "fp_hists".to_owned()];
    let has_pi = all
        .iter()
        .filter(|s| s.candidate.get("programpi").is_some_and(|v| !v.is_null()))
        .count() as u64;
    assert!(has_pi > 0, "the real alerts carry programpi");
    let on_pi = compiled(
        alerts,
        &json!([{"$match": {"candidate.programpi": {"$exists": true}}}]),
    )
    .await;
    let open = preview::preview(store, &on_pi, &query())
        .await
        .expect("open");
    let public = preview::preview(
        store,
        &on_pi,
        &PreviewQuery {
            withheld: withheld.clone(),
            ..query()
        },
    )
    .await
    .expect("public");
    assert_eq!(open.matched, has_pi, "without withholding, it counts");
    assert_eq!(public.matched, 0, "a withheld path is absent");
    // The whole documents returned (from the candidate, and from the packet).
    for stages in [
        json!([{"$match": {"candidate.magpsf": {"$lt": 30}}}]),
        json!([{"$match": {"prv_candidates.magpsf": {"$lt": 30}}}]),
    ] {
        let p = compiled(alerts, &stages).await;
        let r = preview::preview(
            store,
            &p,
            &PreviewQuery {
                sort_by: Some("candidate.jd".into()),
                limit: 40,
                withheld: withheld.clone(),
                ..query()
            },
        )
        .await
        .expect("sorted");
        assert!(!r.alerts.is_empty(), "{stages}");
        for a in &r.alerts {
            assert!(a["candidate"].get("programpi").is_none(), "{stages}: {a}");
            assert!(a.get("fp_hists").is_none(), "{stages}");
            assert!(a["candidate"]["magpsf"].is_number(), "the rest is kept");
        }
    }
}

/// A cone becomes a MOC: every alert inside is found, the nearest alert
/// outside is not; a MOC cell is a region that is not a cone.
async fn regions(alerts: &AlertService, all: &[Stored]) {
    let store = alerts.store();
    let everything = compiled(alerts, &json!([{"$match": {}}])).await;
    // Around ZTF17aadcuwj, in the 24-alert exposure of 2023-10-12: a
    // radius between two neighbours with a clear gap.
    let center = all
        .iter()
        .find(|s| s.object_id == "ZTF17aadcuwj")
        .expect("ZTF17aadcuwj");
    let mut by_distance: Vec<(f64, &Stored)> = all
        .iter()
        .map(|s| {
            (
                sky::separation_arcsec(center.ra, center.dec, s.ra, s.dec) / 3600.0,
                s,
            )
        })
        .collect();
    by_distance.sort_by(|a, b| a.0.total_cmp(&b.0));
    let gap = by_distance
        .windows(2)
        .skip(2)
        .find(|w| w[1].0 > w[0].0 * 1.1)
        .expect("a gap between neighbours");
    // The next alert 5% beyond the radius.
    let radius = gap[1].0 / 1.05;
    let just_outside = gap[1].1;
    let inside: Vec<i64> = by_distance
        .iter()
        .filter(|(d, _)| *d <= radius)
        .map(|(_, s)| s.candid)
        .collect();
    let r = preview::preview(
        store,
        &everything,
        &PreviewQuery {
            region: Some(Region::Cone {
                ra_deg: center.ra,
                dec_deg: center.dec,
                radius_deg: radius,
            }),
            sort_by: Some("candid".into()),
            ascending: true,
            limit: 40,
            ..query()
        },
    )
    .await
    .expect("cone");
    let mut want = inside.clone();
    want.sort();
    let got: Vec<i64> = r
        .alerts
        .iter()
        .map(|a| a["candid"].as_i64().expect("candid"))
        .collect();
    assert_eq!(got, want, "inside a {radius}° localisation");
    assert!(
        !got.contains(&just_outside.candid),
        "{} is just outside",
        just_outside.object_id
    );
    assert!(got.len() >= 3);

    // One depth-8 HEALPix cell (about 0.23° across) holding several alerts of
    // that exposure: exactly the alerts whose index falls in the cell,
    // whatever their distance to its centre.
    let cell = |s: &Stored| sky::hpx(s.ra, s.dec) >> (2 * (29 - 8));
    let target = cell(center);
    let moc = Region::from_ascii(&format!("8/{target}")).expect("an ASCII MOC");
    let r = preview::preview(
        store,
        &everything,
        &PreviewQuery {
            region: Some(moc),
            ..query()
        },
    )
    .await
    .expect("moc");
    let in_cell = all.iter().filter(|s| cell(s) == target).count() as u64;
    assert!(in_cell >= 1);
    assert_eq!((r.evaluated, r.matched), (in_cell, in_cell));
    let nearest_other = by_distance
        .iter()
        .find(|(_, s)| cell(s) != target)
        .expect("an alert outside the cell");
    assert!(
        nearest_other.0 < 0.5,
        "a neighbour close by, outside the cell"
    );

    // A larger MOC read through a coarser cover still answers exactly.
    // Every other alert's depth-20 cell (about 0.2″), listed out of order.
    let mut picked: Vec<&Stored> = all.iter().step_by(2).collect();
    picked.reverse();
    let ascii = format!(
        "20/{}",
        picked
            .iter()
            .map(|s| (sky::hpx(s.ra, s.dec) >> (2 * (29 - 20))).to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let r = preview::preview(
        store,
        &everything,
        &PreviewQuery {
            region: Some(Region::from_ascii(&ascii).expect("MOC")),
            ..query()
        },
    )
    .await
    .expect("fine moc");
    assert_eq!(r.evaluated, picked.len() as u64);
}

async fn bad_queries(alerts: &AlertService, p: &Pipeline) {
    let store = alerts.store();
    for (q, field) in [
        (
            PreviewQuery {
                broker_id: "nope".into(),
                ..query()
            },
            "broker_id",
        ),
        (
            PreviewQuery {
                jd_start: Some(2_460_300.0),
                jd_end: Some(2_460_200.0),
                ..query()
            },
            "jd_start",
        ),
        (
            PreviewQuery {
                sort_by: Some("candidate.rb".into()),
                ..query()
            },
            "sort_by",
        ),
        (
            PreviewQuery {
                sort_by: Some("candidate.jd".into()),
                limit: 0,
                ..query()
            },
            "limit",
        ),
        (
            PreviewQuery {
                region: Some(Region::Cone {
                    ra_deg: 10.0,
                    dec_deg: 95.0,
                    radius_deg: 1.0,
                }),
                ..query()
            },
            "region.dec",
        ),
        (
            PreviewQuery {
                region: Some(Region::Cone {
                    ra_deg: 10.0,
                    dec_deg: 5.0,
                    radius_deg: f64::NAN,
                }),
                ..query()
            },
            "region.radius_deg",
        ),
    ] {
        let err = preview::preview(store, p, &q).await.expect_err(field);
        assert!(err.message.starts_with(field), "{field}: {}", err.message);
        assert!(matches!(err.code, Code::InvalidArgument | Code::NotFound));
    }
    let err = Region::from_ascii("8/a-b").expect_err("garbage");
    assert!(err.message.starts_with("region:"), "{}", err.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_preview_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = ithaca_broker::open_db(&common::sqlite_path(&dir, "broker"), "unused")
        .await
        .expect("open");
    suite(db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filter_preview_postgres() {
    let Some(url) = common::postgres("filter_preview_postgres") else {
        return;
    };
    let schema = common::unique_schema("filters");
    let db = ithaca_broker::open_db(&url, &schema).await.expect("open");
    suite(db).await;
    common::drop_schema(&url, &schema).await;
}
