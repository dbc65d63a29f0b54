//! Gravitational-wave sky maps the test writes itself (multi-order FITS
//! laid out as LVK's), ingested on top of the real GCN data: a map naming
//! GW170817's GraceDB id joins that event, one without a name joins it by
//! its time, a new superevent id makes a new GW event with its names; the
//! 90% region's area is that of the pixels the test put 91% of the
//! probability in; the same file twice changes nothing; broken maps are
//! refused naming what is wrong; `get_gcn_event` lists the sky map with
//! its area, level and key.

use super::{client, loaded, reader, serve};
use crate::common::skymap::{self, FINE, disc_map, multiorder_fits, pixel_area_deg2};
use ithaca_kit::db::Db;
use ithaca_kit::error::Code;
use ithaca_kit::principal::Principal;
use ithaca_proto::broker::v1 as pb;

/// NGC 4993, GW170817's host.
const RA: f64 = 197.45;
const DEC: f64 = -23.38;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs()
}

pub async fn sky_maps(db: Db) {
    let svc = loaded(db.clone()).await;
    let admin = Principal::system("");
    let agent = reader("tenant-a");
    let gw = svc.event(&agent, "GW170817").await.expect("GW170817");
    let before = gw.localisations.len();

    // A BAYESTAR-like map naming the GraceDB id of the LVC notice.
    let wide = disc_map(RA, DEC, 1.5, 3.0, 0.91);
    let named = multiorder_fits(
        &[
            ("OBJECT", "'G298048'"),
            ("DATE-OBS", "'2017-08-17T12:41:04.445710'"),
            ("DATE", "'2017-08-17T13:21:42'"),
            ("CREATOR", "'BAYESTAR'"),
            ("INSTRUME", "'H1,L1,V1'"),
        ],
        &wide.rows,
    );
    let report = svc
        .ingest_file(&admin, "bayestar.multiorder.fits", named.clone())
        .await
        .expect("a sky map is ingested");
    assert_eq!(report.kind, "skymap");
    assert_eq!((report.outcome.items, report.outcome.stored), (1, 1));
    assert!(report.outcome.events_created.is_empty());
    assert_eq!(report.outcome.events, vec![gw.summary.row.dateobs.clone()]);

    let after = svc.event(&agent, "GW170817").await.expect("GW170817");
    assert_eq!(after.localisations.len(), before + 1);
    let sky = after
        .localisations
        .iter()
        .find(|l| l.origin == "skymap")
        .expect("the sky map is a localisation")
        .clone();
    let area = wide.inner.len() as f64 * pixel_area_deg2(FINE);
    assert!(close(sky.area_deg2.expect("area"), area), "{sky:?} {area}");
    assert_eq!(sky.credible_level, Some(0.9));
    assert!(sky.description.contains("G298048") && sky.description.contains("BAYESTAR"));
    assert!(
        ithaca_broker::gcn::model::separation_deg(sky.ra, sky.dec, RA, DEC) < 1.6,
        "the densest pixel is in the disc: {sky:?}"
    );
    // The trigger's localisation is still the earliest issued (GBM's).
    let trigger = svc
        .chosen_localisation("GW170817", None)
        .await
        .expect("event")
        .expect("loc");
    assert_eq!(trigger.moc, None);
    for choice in ["skymap", sky.loc_key.as_str()] {
        let chosen = svc
            .chosen_localisation("GW170817", Some(choice))
            .await
            .expect(choice)
            .expect(choice);
        assert_eq!(chosen.moc, sky.moc, "{choice}");
        assert_eq!(chosen.area_deg2, sky.area_deg2, "{choice}");
    }

    // The same file again changes nothing.
    let again = svc
        .ingest_file(&admin, "bayestar.multiorder.fits", named.clone())
        .await
        .expect("again");
    assert!(again.already_present);

    // An update without OBJECT joins the event by its time, and is the
    // newest map.
    let narrow = disc_map(RA, DEC, 1.0, 3.0, 0.91);
    let update = multiorder_fits(
        &[
            ("MJD-OBS", "57982.528523677"),
            ("DATE", "'2017-08-18T02:00:00'"),
        ],
        &narrow.rows,
    );
    let report = svc
        .ingest_file(&admin, "LALInference.multiorder.fits", update)
        .await
        .expect("update");
    assert!(report.outcome.events_created.is_empty());
    assert_eq!(report.outcome.events, vec![gw.summary.row.dateobs.clone()]);
    let newest = svc
        .chosen_localisation("GW170817", Some("skymap"))
        .await
        .expect("event")
        .expect("loc");
    let narrow_area = narrow.inner.len() as f64 * pixel_area_deg2(FINE);
    assert!(narrow_area < area);
    assert!(close(newest.area_deg2.expect("area"), narrow_area));
    assert!(newest.description.contains("LALInference.multiorder.fits"));

    // A new superevent: a new GW event, known by its id and GW names.
    let fresh = multiorder_fits(
        &[
            ("OBJECT", "'S230825x'"),
            ("DATE-OBS", "'2023-08-25T06:42:07.123456'"),
        ],
        &wide.rows,
    );
    let report = svc
        .ingest_file(&admin, "S230825x.multiorder.fits", fresh)
        .await
        .expect("fresh");
    assert_eq!(
        report.outcome.events_created,
        vec!["2023-08-25T06:42:07.123Z".to_owned()]
    );
    let s = svc.event(&agent, "s230825x").await.expect("by its id");
    assert_eq!(s.summary.row.kind, "GW");
    for name in ["S230825x", "GW230825", "GW230825_064207"] {
        assert!(
            s.summary.aliases.iter().any(|a| a == name),
            "{name} in {:?}",
            s.summary.aliases
        );
    }

    // Broken maps are refused naming the file and what is wrong, and
    // store nothing.
    let totals = svc.store().totals().await.expect("totals");
    let mut huge = named.clone();
    let card = format!("{:<8}= {:>20}", "NAXIS2", wide.rows.len());
    let at = huge
        .windows(card.len())
        .position(|w| w == card.as_bytes())
        .expect("NAXIS2 card");
    huge[at..at + card.len()]
        .copy_from_slice(format!("{:<8}= {:>20}", "NAXIS2", i64::MAX).as_bytes());
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("cut.fits", named[..named.len() / 2].to_vec(), "NAXIS2"),
        ("header.fits", named[..4000].to_vec(), "cut short"),
        ("huge.fits", huge, "NAXIS2"),
        (
            "bad_uniq.fits",
            skymap::multiorder_fits(&[("DATE-OBS", "'2023-01-01T00:00:00'")], &[(3, 1.0)]),
            "UNIQ 3",
        ),
    ];
    for (name, bytes, needle) in cases {
        let err = svc.ingest_file(&admin, name, bytes).await.expect_err(name);
        assert_eq!(err.code, Code::InvalidArgument, "{name}: {}", err.message);
        assert_eq!(err.domain, Some("BAD_GCN_FILE"));
        assert!(
            err.message.starts_with(&format!("{name}:")),
            "{}",
            err.message
        );
        assert!(err.message.contains(needle), "{name}: {}", err.message);
    }
    assert_eq!(svc.store().totals().await.expect("totals"), totals);

    // Over gRPC, get_gcn_event lists the maps with their area and level.
    let url = serve(db).await;
    let event = client(&url, agent)
        .get_gcn_event(pb::GetGcnEventRequest {
            dateobs: "GW170817".into(),
            include_bodies: Some(false),
            limit: None,
            cursor: None,
        })
        .await
        .expect("event")
        .into_inner();
    let maps: Vec<&pb::GcnLocalisation> = event
        .localisations
        .iter()
        .filter(|l| l.origin == "skymap")
        .collect();
    assert_eq!(maps.len(), 2);
    for m in &maps {
        assert_eq!(m.credible_level, Some(0.9));
        assert!(
            m.area_deg2
                .is_some_and(|a| close(a, area) || close(a, narrow_area))
        );
        assert!(m.key.as_deref().is_some_and(|k| k.starts_with("skymap:")));
    }
    assert!(
        event
            .localisations
            .iter()
            .filter(|l| l.origin != "skymap")
            .all(|l| l.key.is_none() && l.area_deg2.is_none())
    );
}
