//! GCN events in the broker on the real circulars and notices of
//! `../shared/data/gcn`, on SQLite and PostgreSQL: events grouped from
//! 500 circulars and 14 notices, GRB 230812B with its circulars and its ZTF
//! counterpart, the Fermi/SVOM burst of 2026-04-21 with the smallest error
//! circle chosen, a redshift read from a real circular, idempotent
//! re-ingest, bad files, alias search and paging, comments scoped to the
//! session's subject and to the tenant, producers' extractions (never an
//! agent's), the bad-input table, and the same through gRPC. Plus `ithaca
//! ingest gcn` against `ithaca serve broker`.

use crate::common;

use common::gcn;
use ithaca_broker::gcn::GcnService;
use ithaca_broker::gcn::service::NewExtraction;
use ithaca_kit::db::Db;
use ithaca_kit::error::Code;
use ithaca_kit::principal::{Principal, Subject, VerifiedKey};
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::gcn_service_client::GcnServiceClient;
use serde_json::{Value, json};
use std::collections::BTreeSet;

mod answers;

mod skymaps;
use skymaps::sky_maps;

common::on_both_databases!(ithaca_broker::open_db, "gcn" =>
    real_data_events,
    reingest_and_bad_files,
    search_and_pages,
    comments_on_the_subject_only,
    producer_extractions,
    bad_input_on_every_tool,
    over_grpc,
    sky_maps,
);

fn reader(tenant: &str) -> Principal {
    common::agent(tenant, "agent-a")
}

fn person(tenant: &str) -> Principal {
    common::human(tenant, "person-a")
}

/// An agent in a session a person opened on `subject`.
fn agent_on(tenant: &str, subject: Option<Subject>) -> Principal {
    Principal::verified(VerifiedKey {
        tenant_id: tenant.to_owned(),
        key_id: "agent-a".to_owned(),
        scopes: vec!["data:read".to_owned(), "comments:write".to_owned()],
        human: false,
    })
    .in_session(Some("session-1".to_owned()))
    .on_subject(subject)
}

/// The circulars of the data file, as JSON.
fn circular_records() -> Vec<Value> {
    std::fs::read_to_string(gcn::circulars_file())
        .expect("circulars file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON record"))
        .collect()
}

/// The smallest non-zero `Error2Radius` among the VOEvents in `dir`, read
/// as plain text (independently of the broker's XML parser).
fn smallest_error_radius(dir: &std::path::Path) -> f64 {
    gcn::notice_files(dir)
        .iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(p).ok()?;
            let start = text.find("<Error2Radius>")? + "<Error2Radius>".len();
            let end = text[start..].find("</Error2Radius>")? + start;
            text[start..end].trim().parse::<f64>().ok()
        })
        .filter(|r| *r > 0.0)
        .fold(f64::INFINITY, f64::min)
}

async fn loaded(db: Db) -> GcnService {
    let svc = gcn::service(db);
    gcn::ingest_all(&svc).await;
    svc
}

async fn real_data_events(db: Db) {
    let svc = gcn::service(db);
    let reports = gcn::ingest_all(&svc).await;
    let circulars = &reports[0];
    assert_eq!(circulars.kind, "circulars");
    assert_eq!(
        (circulars.outcome.items, circulars.outcome.stored),
        (500, 500)
    );
    assert_eq!(
        reports.len(),
        1 + gcn::notice_files(&gcn::notices_dir()).len(),
        "the circulars file and every notice"
    );
    assert!(reports[1..].iter().all(|r| r.outcome.stored == 1));
    let reader = reader("tenant-a");
    // Every circular is in exactly one event or counted as naming none.
    let mut in_events = 0;
    let mut offset = 0;
    loop {
        let page = svc
            .events(&reader, None, Some(100), Some(offset))
            .await
            .expect("page");
        in_events += page.events.iter().map(|e| e.circulars).sum::<i64>();
        offset += 100;
        if i64::from(offset) >= page.total {
            break;
        }
    }
    assert_eq!(in_events + circulars.outcome.unattached, 500);
    assert!(in_events > 450, "{in_events} circulars attached");

    // GRB 230812B: every circular GCN files under that event, and the UVOT
    // one whose subject says only "GRB 230812" (attached by its citations).
    let records = circular_records();
    let filed: BTreeSet<i64> = records
        .iter()
        .filter(|r| r["eventId"] == "GRB 230812B")
        .filter_map(|r| r["circularId"].as_i64())
        .collect();
    assert_eq!(filed.len(), 64, "SOURCES.md: 64 circulars");
    let grb = svc
        .event(&reader, "GRB 230812B")
        .await
        .expect("GRB 230812B");
    let ids: BTreeSet<i64> = grb.circulars.iter().map(|c| c.circular_id).collect();
    assert!(
        filed.is_subset(&ids),
        "missing: {:?}",
        filed.difference(&ids)
    );
    assert!(ids.contains(&34399), "UVOT's 'GRB 230812' circular");
    // The trigger time is GBM's: "At 18:58:12 UT on 12 Aug 2023".
    assert!(
        grb.summary.row.dateobs.starts_with("2023-08-12T18:58:12"),
        "{}",
        grb.summary.row.dateobs
    );
    assert_eq!(grb.summary.row.kind, "GRB");
    // The ZTF counterpart: ZTF's circular, the candidate's name among the
    // event's names, and ZTF among the instruments the parser read.
    let ztf = grb
        .circulars
        .iter()
        .find(|c| c.circular_id == 34397)
        .expect("ZTF's circular");
    assert!(
        ztf.subject.contains("Zwicky Transient Facility"),
        "{}",
        ztf.subject
    );
    assert!(
        grb.circulars
            .iter()
            .any(|c| c.body.contains("ZTF23aaxeacr")),
        "the counterpart ZTF23aaxeacr is named"
    );
    assert!(
        grb.summary.aliases.iter().any(|a| a == "ZTF23aaxeacr"),
        "{:?}",
        grb.summary.aliases
    );
    let by_alias = svc
        .event(&reader, "ztf23aaxeacr")
        .await
        .expect("by ZTF name");
    assert_eq!(by_alias.summary.row.dateobs, grb.summary.row.dateobs);
    let instruments = svc
        .extractions(
            &reader,
            "GRB 230812B",
            Some("ithaca-circular-parser"),
            Some("instrument"),
            Some(2000),
        )
        .await
        .expect("instruments");
    assert!(
        instruments
            .rows
            .iter()
            .any(|r| r.circular_id == Some(34397) && r.payload.contains("\"ZTF\"")),
        "ZTF read in circular 34397"
    );

    // A redshift from a real circular: GTC's "a common redshift of 0.360".
    let z = svc
        .extractions(
            &reader,
            "GRB 230812B",
            Some("ithaca-circular-parser"),
            Some("redshift"),
            None,
        )
        .await
        .expect("redshifts");
    let gtc: Vec<Value> = z
        .rows
        .iter()
        .filter(|r| r.circular_id == Some(34409))
        .map(|r| serde_json::from_str(&r.payload).expect("JSON payload"))
        .collect();
    assert_eq!(gtc.len(), 1, "{gtc:?}");
    assert_eq!(gtc[0]["z"], 0.36);
    assert_eq!(gtc[0]["circular_id"], 34409);
    assert!(gtc[0]["text"].as_str().is_some_and(|t| t.contains("0.360")));
    let other = svc
        .extractions(&reader, "GRB 230812B", Some("someone-else"), None, None)
        .await
        .expect("filtered by origin");
    assert_eq!(other.total, 0);

    // The 2026-04-21 burst: Fermi GBM's eight notices and SVOM's three are
    // one event, whichever name finds it; the best localisation is the
    // smallest error circle of the lot (SVOM/MXT's).
    let dir = gcn::fermi_svom_dir();
    let burst = svc
        .event(&reader, "Fermi 798437606")
        .await
        .expect("by trigger");
    let same = svc
        .event(&reader, "SVOM sb26042105")
        .await
        .expect("by burst id");
    assert_eq!(burst.summary.row.dateobs, same.summary.row.dateobs);
    assert_eq!(burst.summary.row.dateobs, "2026-04-21T04:13:21.170Z");
    assert_eq!(burst.notices.len(), gcn::notice_files(&dir).len());
    let missions: BTreeSet<&str> = burst.notices.iter().map(|n| n.mission.as_str()).collect();
    assert_eq!(missions, BTreeSet::from(["Fermi", "SVOM"]));
    let smallest = smallest_error_radius(&dir);
    let best = burst.summary.best.as_ref().expect("a best localisation");
    assert_eq!(best.error_radius_deg, smallest);
    assert!(best.description.contains("MXT"), "{}", best.description);
    assert_eq!(burst.localisations[0].loc_key, best.loc_key);
    assert!(
        burst
            .localisations
            .windows(2)
            .all(|w| w[0].error_radius_deg <= w[1].error_radius_deg)
    );
    // The public API the filters preview uses.
    let loc = svc
        .best_localisation("bn260421176")
        .await
        .expect("by GBM burst number")
        .expect("localised");
    assert_eq!(loc.dateobs, "2026-04-21T04:13:21.170Z");
    assert_eq!(
        (loc.ra_deg, loc.dec_deg, loc.error_radius_deg),
        (best.ra, best.dec, smallest)
    );

    // GW170817: the GW candidate and the GBM burst 1.7 s after it are one
    // event (inside the documented -1 s..+5 s coincidence window), found
    // by every name either gave, and by the names astronomers use.
    let gw = svc.event(&reader, "G298048").await.expect("GW170817");
    let grb170817 = svc
        .event(&reader, "Fermi 524666471")
        .await
        .expect("GRB 170817A");
    assert_eq!(gw.summary.row.dateobs, grb170817.summary.row.dateobs);
    assert_eq!(gw.notices.len(), 2, "the LVC and the GBM notice");
    for name in ["GW170817", "gw 170817", "GW170817_124104"] {
        let by = svc.event(&reader, name).await.expect(name);
        assert_eq!(by.summary.row.dateobs, gw.summary.row.dateobs, "{name}");
    }
    for name in ["G298048", "GW170817", "Fermi 524666471"] {
        assert!(
            gw.summary.aliases.iter().any(|a| a == name),
            "{name} in {:?}",
            gw.summary.aliases
        );
    }
    // The merged event has the burst's localisation.
    let loc = svc
        .best_localisation("GW170817")
        .await
        .expect("known")
        .expect("GBM's circle");
    assert_eq!(loc.error_radius_deg, 17.45);
    // A GW name of a date without a candidate is unknown.
    assert!(svc.event(&reader, "GW170818").await.is_err());
}

async fn reingest_and_bad_files(db: Db) {
    let svc = loaded(db).await;
    let before = svc.store().totals().await.expect("totals");
    assert!(before.events > 100 && before.circulars == 500, "{before:?}");

    // The same files again: nothing changes.
    let again = gcn::ingest_all(&svc).await;
    assert!(again.iter().all(|r| r.already_present), "every file known");
    assert_eq!(
        again[0].outcome.items, 500,
        "a known file still says what it holds"
    );
    assert_eq!(again[0].outcome.stored, 0);
    assert_eq!(svc.store().totals().await.expect("totals"), before);

    // The same circulars in another file (a JSON array): each is known.
    let records = circular_records();
    let three = Value::Array(records[..3].to_vec()).to_string().into_bytes();
    let r = svc
        .ingest_file(&Principal::system(""), "three.json", three)
        .await
        .expect("array of circulars");
    assert!(!r.already_present);
    assert_eq!((r.outcome.stored, r.outcome.unchanged), (0, 3));
    // A notice already stored, in a file of another name and bytes.
    let notice = std::fs::read_to_string(gcn::fermi_svom_dir().join("svom_mxt_49_sb26042105.xml"))
        .expect("read");
    let r = svc
        .ingest_file(
            &Principal::system(""),
            "copy.xml",
            format!("{notice}\n").into_bytes(),
        )
        .await
        .expect("same notice");
    assert_eq!((r.outcome.stored, r.outcome.unchanged), (0, 1));
    assert_eq!(svc.store().totals().await.expect("totals"), before);

    // A corrected circular (same number, new text) replaces the text and
    // what was read from it; nothing else.
    let mut corrected = records[2].clone();
    corrected["body"] = json!(format!(
        "{}\nCorrection: z = 1.25.",
        corrected["body"].as_str().unwrap_or_default()
    ));
    let r = svc
        .ingest_file(
            &Principal::system(""),
            "corrected.jsonl",
            corrected.to_string().into_bytes(),
        )
        .await
        .expect("corrected");
    assert_eq!(r.outcome.updated, 1);
    let after = svc.store().totals().await.expect("totals");
    assert_eq!(
        (after.events, after.circulars, after.notices),
        (before.events, before.circulars, before.notices)
    );

    // Bad files: named, refused, nothing stored.
    let good =
        std::fs::read(gcn::fermi_svom_dir().join("fermi_gbm_gnd_pos_1870.xml")).expect("read");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("cut.xml", good[..good.len() / 2].to_vec(), "XML"),
        ("notes.txt", b"hello".to_vec(), "neither XML"),
        ("empty.json", Vec::new(), "empty"),
        (
            "no_subject.jsonl",
            br#"{"circularId": 99999999, "body": "x", "createdOn": 1690499766440}"#.to_vec(),
            "subject",
        ),
        (
            "second_bad.jsonl",
            format!("{}\n{{\"circularId\": 5}}", records[0]).into_bytes(),
            "line 2",
        ),
        (
            "test_role.xml",
            String::from_utf8_lossy(&good)
                .replace("role=\"observation\"", "role=\"test\"")
                .into_bytes(),
            "role",
        ),
        (
            "bad_ra.xml",
            String::from_utf8_lossy(&good)
                .replace("<C1>193.3300</C1>", "<C1>412.0</C1>")
                .replace("GBM_Gnd_Pos_2026", "GBM_Gnd_Pos_X2026")
                .into_bytes(),
            "ra 412",
        ),
    ];
    for (name, bytes, needle) in cases {
        let err = svc
            .ingest_file(&Principal::system(""), name, bytes)
            .await
            .expect_err(name);
        assert_eq!(err.code, Code::InvalidArgument, "{name}: {}", err.message);
        assert_eq!(err.domain, Some("BAD_GCN_FILE"));
        assert!(
            err.message.starts_with(&format!("{name}:")),
            "{}",
            err.message
        );
        assert!(err.message.contains(needle), "{name}: {}", err.message);
    }
    assert_eq!(
        svc.store().totals().await.expect("totals").circulars,
        before.circulars
    );
    // Only administrators ingest.
    let err = svc
        .ingest_file(&reader("tenant-a"), "x.xml", good)
        .await
        .expect_err("agents do not ingest");
    assert_eq!(err.code, Code::PermissionDenied);
}

async fn search_and_pages(db: Db) {
    let svc = loaded(db).await;
    let r = reader("tenant-a");
    let grb = svc.resolve("GRB 230812B").await.expect("known").dateobs;

    // Names, case-insensitively and in GCN's other spellings.
    for q in [
        "GRB 230812B",
        "grb 230812b",
        "GRB230812B",
        "Fermi 713559497",
        "bn230812790",
    ] {
        let found = svc.events(&r, Some(q), None, None).await.expect(q);
        assert_eq!(found.total, 1, "{q}");
        assert_eq!(found.events[0].row.dateobs, grb, "{q}");
        assert!(found.events[0].circulars >= 64);
        assert_eq!(svc.resolve(q).await.expect(q).dateobs, grb);
    }
    // A superevent, bare or in its long form, finds the GW candidate.
    let s = svc
        .events(&r, Some("S230814r"), None, None)
        .await
        .expect("S-name");
    assert_eq!(s.total, 1);
    assert_eq!(s.events[0].row.kind, "GW");
    assert!(
        s.events[0]
            .aliases
            .iter()
            .any(|a| a == "LIGO/Virgo/KAGRA S230814r")
    );
    let long = svc
        .events(&r, Some("LIGO/Virgo/KAGRA S230914ak"), None, None)
        .await
        .expect("long form");
    assert_eq!(long.total, 1);
    assert!(long.events[0].aliases.iter().any(|a| a == "S230914ak"));
    // A name prefix finds every event it starts.
    let lvk = svc
        .events(&r, Some("s2308"), Some(100), None)
        .await
        .expect("prefix");
    assert!(lvk.total >= 10, "{}", lvk.total);
    assert!(lvk.events.iter().all(|e| e.row.kind == "GW"));

    // A dateobs prefix: exactly the events whose dateobs starts with it,
    // counted independently from the full list.
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let page = svc
            .events(&r, None, Some(100), Some(offset))
            .await
            .expect("page");
        let n = i32::try_from(page.events.len()).expect("small");
        all.extend(page.events);
        offset += n;
        if n == 0 || i64::from(offset) >= page.total {
            break;
        }
    }
    let totals = svc.store().totals().await.expect("totals");
    assert_eq!(all.len() as i64, totals.events);
    let on_day: Vec<&str> = all
        .iter()
        .map(|e| e.row.dateobs.as_str())
        .filter(|d| d.starts_with("2023-08-12"))
        .collect();
    let day = svc
        .events(&r, Some("2023-08-12"), Some(100), None)
        .await
        .expect("day");
    assert_eq!(day.total as usize, on_day.len());
    assert!(day.events.iter().any(|e| e.row.dateobs == grb));
    assert!(
        day.events
            .iter()
            .all(|e| e.row.dateobs.starts_with("2023-08-12"))
    );
    // Newest first, and pages neither overlap nor skip.
    assert!(
        all.windows(2)
            .all(|w| w[0].row.dateobs_ms >= w[1].row.dateobs_ms)
    );
    let p1 = svc
        .events(&r, Some("2023-08"), Some(3), Some(0))
        .await
        .expect("p1");
    let p2 = svc
        .events(&r, Some("2023-08"), Some(3), Some(3))
        .await
        .expect("p2");
    assert_eq!((p1.events.len(), p2.events.len()), (3, 3));
    assert_eq!(p1.total, p2.total);
    let seen: BTreeSet<&str> = p1
        .events
        .iter()
        .chain(&p2.events)
        .map(|e| e.row.dateobs.as_str())
        .collect();
    assert_eq!(seen.len(), 6);
    // An exact dateobs in another ISO form, or to the second.
    let burst = "2026-04-21T04:13:21.170Z";
    for q in [
        "2026-04-21 04:13:21.17",
        "2026-04-21T04:13:21",
        "2026-04-21T04%3A13%3A21.170Z",
    ] {
        assert_eq!(svc.resolve(q).await.expect(q).dateobs, burst, "{q}");
    }
    // Nothing matches: an empty page, not an error.
    let none = svc
        .events(&r, Some("GRB 990101A"), None, None)
        .await
        .expect("none");
    assert_eq!((none.total, none.events.len()), (0, 0));
}

async fn comments_on_the_subject_only(db: Db) {
    let svc = loaded(db).await;
    let grb = svc.resolve("GRB 230812B").await.expect("known").dateobs;
    let other = svc.resolve("S230814r").await.expect("known").dateobs;

    // No subject, or another event's: refused, naming the subject.
    let err = svc
        .post_comment(&agent_on("tenant-a", None), &grb, "a comment")
        .await
        .expect_err("no subject");
    assert_eq!(
        (err.code, err.domain),
        (Code::PermissionDenied, Some("SUBJECT_MISMATCH"))
    );
    assert!(
        err.message.contains("no subject") && err.message.contains(&grb),
        "{}",
        err.message
    );
    let on_other = agent_on("tenant-a", Some(Subject::new("gcn_event", other.clone())));
    let err = svc
        .post_comment(&on_other, &grb, "a comment")
        .await
        .expect_err("another event");
    assert_eq!(err.domain, Some("SUBJECT_MISMATCH"));
    assert!(
        err.message.contains(&other),
        "names the subject: {}",
        err.message
    );
    // A filter subject with the same id is not this event.
    let filter = agent_on("tenant-a", Some(Subject::new("filter", grb.clone())));
    assert_eq!(
        svc.post_comment(&filter, &grb, "x")
            .await
            .expect_err("kind")
            .domain,
        Some("SUBJECT_MISMATCH")
    );

    // The session's own event: accepted, by dateobs or by name.
    let on_grb = agent_on("tenant-a", Some(Subject::new("gcn_event", grb.clone())));
    let first = svc
        .post_comment(
            &on_grb,
            &grb,
            "  The ZTF candidate fades like an afterglow.  ",
        )
        .await
        .expect("posted");
    assert_eq!(first.text, "The ZTF candidate fades like an afterglow.");
    assert_eq!(
        (first.actor.as_str(), first.session_id.as_deref()),
        ("agent", Some("session-1"))
    );
    svc.post_comment(&on_grb, "GRB 230812B", "Redshift 0.36 per GTC.")
        .await
        .expect("by name");
    let (d, rows, total) = svc
        .comments(&reader("tenant-a"), "GRB 230812B", None)
        .await
        .expect("read");
    assert_eq!((d.as_str(), total), (grb.as_str(), 2));
    assert_eq!(rows[0].comment_id, first.comment_id, "oldest first");
    let detail = svc.event(&reader("tenant-a"), &grb).await.expect("event");
    assert_eq!(detail.comments, 2);

    // Another tenant sees none of it; its own comments stay its own.
    let (_, theirs, n) = svc
        .comments(&reader("tenant-b"), &grb, None)
        .await
        .expect("read");
    assert_eq!((theirs.len(), n), (0, 0));
    let b_on_grb = agent_on("tenant-b", Some(Subject::new("gcn_event", grb.clone())));
    svc.post_comment(&b_on_grb, &grb, "tenant b's view")
        .await
        .expect("own tenant");
    let (_, mine, _) = svc
        .comments(&reader("tenant-a"), &grb, None)
        .await
        .expect("read");
    assert_eq!(mine.len(), 2, "tenant b's comment is not tenant a's");

    // Text bounds and unknown events.
    for (text, needle) in [
        ("", "empty"),
        ("   ", "empty"),
        (&"x".repeat(10_001)[..], "10000"),
    ] {
        let err = svc
            .post_comment(&on_grb, &grb, text)
            .await
            .expect_err("bad text");
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(
            err.message.starts_with("text:") && err.message.contains(needle),
            "{}",
            err.message
        );
    }
    svc.post_comment(&on_grb, &grb, &"y".repeat(10_000))
        .await
        .expect("at the bound");
    let err = svc
        .post_comment(&on_grb, "GRB 990101A", "x")
        .await
        .expect_err("unknown");
    assert_eq!(
        (err.code, err.domain),
        (Code::NotFound, Some("UNKNOWN_GCN_EVENT"))
    );
}

async fn producer_extractions(db: Db) {
    let svc = loaded(db).await;
    let grb = svc.resolve("GRB 230812B").await.expect("known").dateobs;
    let add = |origin: &str, payload: Value| NewExtraction {
        dateobs: "GRB 230812B".into(),
        origin: origin.into(),
        payload,
        kind: Some("redshift".into()),
        circular_id: Some(34409),
        key: Some("z".into()),
    };

    // Agents are refused, whatever they carry.
    let err = svc
        .add_extraction(&reader("tenant-a"), add("agent-bot", json!({"z": 0.36})))
        .await
        .expect_err("agent");
    assert_eq!(
        (err.code, err.domain),
        (Code::PermissionDenied, Some("AGENT_NOT_ALLOWED"))
    );

    // A person's producer: only their tenant sees it; the same key replaces.
    let row = svc
        .add_extraction(&person("tenant-a"), add("redshift-bot", json!({"z": 0.35})))
        .await
        .expect("added");
    assert_eq!(
        (row.tenant_id.as_str(), row.dateobs.as_deref()),
        ("tenant-a", Some(grb.as_str()))
    );
    svc.add_extraction(&person("tenant-a"), add("redshift-bot", json!({"z": 0.36})))
        .await
        .expect("replaced");
    let mine = svc
        .extractions(&reader("tenant-a"), &grb, Some("redshift-bot"), None, None)
        .await
        .expect("read");
    assert_eq!(mine.total, 1);
    assert!(mine.rows[0].payload.contains("0.36"));
    let theirs = svc
        .extractions(&reader("tenant-b"), &grb, Some("redshift-bot"), None, None)
        .await
        .expect("read");
    assert_eq!(theirs.total, 0, "another tenant's producer is private");
    // A system producer without a tenant adds shared values.
    svc.add_extraction(
        &Principal::system(""),
        add("gcn-classifier", json!({"class": "long GRB"})),
    )
    .await
    .expect("shared");
    for t in ["tenant-a", "tenant-b"] {
        let seen = svc
            .extractions(&reader(t), &grb, Some("gcn-classifier"), None, None)
            .await
            .expect("read");
        assert_eq!(seen.total, 1, "{t}");
        assert!(
            seen.origins
                .iter()
                .any(|(o, _)| o == "ithaca-circular-parser")
        );
    }

    // Refusals naming the field.
    for (new, needle) in [
        (add("", json!({"z": 1})), "origin:"),
        (add("bad origin!", json!({"z": 1})), "origin:"),
        (add("ithaca-circular-parser", json!({"z": 1})), "built-in"),
        (add("bot", json!([1, 2])), "payload:"),
        (add("bot", json!({})), "payload:"),
        (add("bot", json!({"big": "x".repeat(70_000)})), "payload:"),
        (
            NewExtraction {
                circular_id: Some(34411),
                ..add("bot", json!({"z": 1}))
            },
            "circular_id:",
        ),
        (
            NewExtraction {
                circular_id: Some(1),
                ..add("bot", json!({"z": 1}))
            },
            "circular_id:",
        ),
    ] {
        let err = svc
            .add_extraction(&person("tenant-a"), new)
            .await
            .expect_err(needle);
        assert_eq!(err.code, Code::InvalidArgument, "{}", err.message);
        assert!(err.message.contains(needle), "{needle}: {}", err.message);
    }
    let err = svc
        .add_extraction(
            &person("tenant-a"),
            NewExtraction {
                dateobs: "GRB 990101A".into(),
                ..add("bot", json!({"z": 1}))
            },
        )
        .await
        .expect_err("unknown event");
    assert_eq!(err.code, Code::NotFound);

    // It is never a tool: the edge's catalog has the seven and not it.
    let catalog = ithaca_edge::catalog::Catalog::from_pool(ithaca_proto::annotations::pool())
        .expect("catalog");
    let tools: BTreeSet<&str> = catalog
        .tools
        .iter()
        .filter(|t| t.method.parent_service().full_name() == ithaca_proto::service_names::GCN)
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(
        tools,
        BTreeSet::from([
            "get_gcn_events",
            "get_gcn_event",
            "get_gcn_circular",
            "search_gcn_circulars",
            "get_gcn_event_extractions",
            "get_gcn_event_comments",
            "post_gcn_event_comment",
        ])
    );
    let post = catalog
        .tools
        .iter()
        .find(|t| t.name == "post_gcn_event_comment")
        .expect("post tool");
    assert_eq!(
        (
            post.options.read_only,
            post.options.scope.as_str(),
            post.options.subject_kind.as_str()
        ),
        (false, "comments:write", "gcn_event")
    );
    assert!(
        catalog
            .tools
            .iter()
            .all(|t| t.method.name() != "AddGcnEventExtraction")
    );
    assert!(catalog.tools.iter().all(|t| t.method.name() != "IngestGcn"));
}

async fn bad_input_on_every_tool(db: Db) {
    let svc = loaded(db).await;
    let r = reader("tenant-a");
    let invalid = |e: ithaca_kit::error::ServiceError, field: &str| {
        assert_eq!(e.code, Code::InvalidArgument, "{}", e.message);
        assert!(e.message.starts_with(field), "{field}: {}", e.message);
    };
    invalid(
        svc.events(&r, None, Some(0), None)
            .await
            .expect_err("limit 0"),
        "limit:",
    );
    invalid(
        svc.events(&r, None, Some(101), None)
            .await
            .expect_err("limit 101"),
        "limit:",
    );
    invalid(
        svc.events(&r, None, None, Some(-1))
            .await
            .expect_err("offset"),
        "offset:",
    );
    invalid(
        svc.events(&r, Some(&"x".repeat(201)), None, None)
            .await
            .expect_err("long"),
        "partialdateobs:",
    );
    invalid(svc.event(&r, "").await.expect_err("empty"), "dateobs:");
    invalid(
        svc.event(&r, &"x".repeat(201)).await.expect_err("long"),
        "dateobs:",
    );
    for unknown in ["2023-08-12T00:00:01Z", "GRB 990101A", "not an event"] {
        let e = svc.event(&r, unknown).await.expect_err(unknown);
        assert_eq!(
            (e.code, e.domain),
            (Code::NotFound, Some("UNKNOWN_GCN_EVENT")),
            "{unknown}"
        );
        assert!(e.message.starts_with("dateobs:"), "{}", e.message);
    }
    invalid(
        svc.extractions(&r, "GRB 230812B", None, None, Some(0))
            .await
            .expect_err("limit"),
        "limit:",
    );
    invalid(
        svc.extractions(&r, "GRB 230812B", Some(&"o".repeat(65)), None, None)
            .await
            .expect_err("origin"),
        "origin:",
    );
    invalid(
        svc.extractions(&r, "", None, None, None)
            .await
            .expect_err("dateobs"),
        "dateobs:",
    );
    invalid(
        svc.comments(&r, "GRB 230812B", Some(5000))
            .await
            .expect_err("limit"),
        "limit:",
    );
    invalid(
        svc.comments(&r, " ", None).await.expect_err("dateobs"),
        "dateobs:",
    );
    invalid(
        svc.best_localisation("").await.expect_err("empty"),
        "dateobs:",
    );
    // A principal without a tenant reads nothing.
    let nobody = common::agent("", "agent-x");
    assert_eq!(
        svc.events(&nobody, None, None, None)
            .await
            .expect_err("no tenant")
            .code,
        Code::PermissionDenied
    );
}

async fn serve(db: Db) -> String {
    common::serve_grpc(ithaca_broker::serve_options_with(
        db,
        common::key(),
        ithaca_broker::alerts::AlertsConfig {
            schema_dir: Some(common::astro::schema_dir()),
        },
    ))
    .await
}

type Client = GcnServiceClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        ithaca_kit::client::Outbound,
    >,
>;

fn client(url: &str, principal: Principal) -> Client {
    GcnServiceClient::with_interceptor(
        ithaca_kit::client::channel(url).expect("url"),
        ithaca_kit::client::Outbound::new(common::key(), principal),
    )
}

async fn over_grpc(db: Db) {
    let url = serve(db).await;
    // Ingest over the stream, as the command line does.
    let admin = client(&url, Principal::system(""));
    let bytes =
        std::fs::read(gcn::fermi_svom_dir().join("svom_eclairs_311_sb26042105.xml")).expect("read");
    let report = admin
        .clone()
        .ingest_gcn(tokio_stream::iter(vec![
            pb::GcnFileChunk {
                source: "eclairs.xml".into(),
                data: bytes[..100].to_vec(),
            },
            pb::GcnFileChunk {
                source: String::new(),
                data: bytes[100..].to_vec(),
            },
        ]))
        .await
        .expect("ingest")
        .into_inner();
    assert_eq!(
        (
            report.kind.as_str(),
            report.stored,
            report.events_created.len()
        ),
        ("voevent", 1, 1)
    );
    let dateobs = report.events_created[0].clone();

    // The health service says the GCN service is served.
    let mut health = tonic_health::pb::health_client::HealthClient::new(
        ithaca_kit::client::channel(&url).expect("url"),
    );
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: ithaca_proto::service_names::GCN.into(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    let agent = client(&url, reader("tenant-a"));
    let events = agent
        .clone()
        .get_gcn_events(pb::GetGcnEventsRequest {
            partialdateobs: Some("svom sb2604".into()),
            ..Default::default()
        })
        .await
        .expect("events")
        .into_inner();
    assert_eq!(events.total, 1);
    let e = &events.events[0];
    assert_eq!(e.uri, format!("doomberg://gcn/events/{dateobs}"));
    assert!(
        e.best_localisation
            .as_ref()
            .is_some_and(|l| l.best && l.origin == "notice")
    );
    let full = agent
        .clone()
        .get_gcn_event(pb::GetGcnEventRequest {
            dateobs: dateobs.clone(),
            include_bodies: None,
            limit: None,
            cursor: None,
        })
        .await
        .expect("event")
        .into_inner();
    assert_eq!(full.notice_count, 1);
    assert!(
        full.notices[0]
            .localisation
            .as_ref()
            .is_some_and(|l| l.best)
    );

    // AddGcnEventExtraction: an agent is refused with its domain code.
    let status = agent
        .clone()
        .add_gcn_event_extraction(pb::AddGcnEventExtractionRequest {
            dateobs: dateobs.clone(),
            origin: "bot".into(),
            payload: Some(ithaca_kit::json::to_struct(json!({"x": 1}))),
            ..Default::default()
        })
        .await
        .expect_err("agents may not");
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    assert_eq!(
        ithaca_kit::error::domain_code(&status),
        Some("AGENT_NOT_ALLOWED")
    );
    let added = client(&url, person("tenant-a"))
        .add_gcn_event_extraction(pb::AddGcnEventExtractionRequest {
            dateobs: dateobs.clone(),
            origin: "bot".into(),
            payload: Some(ithaca_kit::json::to_struct(json!({"x": 1}))),
            ..Default::default()
        })
        .await
        .expect("a person's producer")
        .into_inner();
    assert!(added.private);

    // The write tool: refused without the subject, accepted with it.
    let status = client(&url, agent_on("tenant-a", None))
        .post_gcn_event_comment(pb::PostGcnEventCommentRequest {
            dateobs: dateobs.clone(),
            text: "hi".into(),
        })
        .await
        .expect_err("no subject");
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    assert_eq!(
        ithaca_kit::error::domain_code(&status),
        Some("SUBJECT_MISMATCH")
    );
    let posted = client(
        &url,
        agent_on("tenant-a", Some(Subject::new("gcn_event", dateobs.clone()))),
    )
    .post_gcn_event_comment(pb::PostGcnEventCommentRequest {
        dateobs: dateobs.clone(),
        text: "hi".into(),
    })
    .await
    .expect("on subject")
    .into_inner();
    assert_eq!(posted.dateobs, dateobs);
    let comments = agent
        .clone()
        .get_gcn_event_comments(pb::GetGcnEventCommentsRequest {
            dateobs: dateobs.clone(),
            limit: None,
        })
        .await
        .expect("comments")
        .into_inner();
    assert_eq!(comments.total, 1);

    // Unsigned calls are refused by the verifier.
    let mut bare = GcnServiceClient::new(ithaca_kit::client::channel(&url).expect("url"));
    let status = bare
        .get_gcn_events(pb::GetGcnEventsRequest::default())
        .await
        .expect_err("no principal");
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
}

/// `ithaca ingest gcn` against `ithaca serve broker`: every file of the
/// data set, a bad file named and skipped while the others land, a non-zero
/// exit saying so, progress on stderr, and a second run changing nothing.
#[test]
fn ingest_gcn_from_the_command_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_broker, url) = common::serve("broker", &common::sqlite_path(&dir, "broker"), "unused");
    let bad = dir.path().join("broken.xml");
    std::fs::write(&bad, "<voe:VOEvent role=\"observation\"").expect("write");
    let data = gcn::dir();
    let run = |args: &[&std::ffi::OsStr]| {
        let mut cmd = common::ithaca();
        cmd.args(["ingest", "gcn"])
            .args(args)
            .args(["--broker-url", &url]);
        cmd.output().expect("run ithaca ingest gcn")
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let files = 1 + gcn::notice_files(&gcn::notices_dir()).len();

    let out = run(&[data.as_os_str(), bad.as_os_str()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        !out.status.success(),
        "a skipped file makes the exit non-zero"
    );
    assert!(
        stdout.contains(&format!(
            "{} files: {} circulars and notices read, {} newly stored",
            files + 1,
            500 + files - 1,
            500 + files - 1
        )),
        "{stdout}"
    );
    assert!(stdout.contains("1 skipped"), "{stdout}");
    assert!(
        stderr.contains(&format!("skipped {}: broken.xml:", bad.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "[##############################] {0}/{0} done",
            files + 1
        )),
        "progress: {stderr}"
    );

    let again = run(&[data.as_os_str()]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    let stdout = text(&again.stdout);
    assert!(
        stdout.contains(&format!("{files} files already ingested, 0 skipped")),
        "{stdout}"
    );
    assert!(stdout.contains("0 newly stored"), "{stdout}");
    assert!(
        stdout.contains(&format!("{} circulars and notices read", 500 + files - 1)),
        "a known file still says what it holds: {stdout}"
    );
}

/// `ithaca ingest gcn` takes sky maps by their names (`.fits`, and
/// gzipped `.fits.gz`): each is read by the broker and becomes a
/// localisation of its event, listed by `get_gcn_event`.
#[test]
fn a_sky_map_from_the_command_line() {
    use common::skymap::{disc_map, multiorder_fits};
    let dir = tempfile::tempdir().expect("tempdir");
    let (_broker, url) = common::serve("broker", &common::sqlite_path(&dir, "broker"), "unused");
    let map = disc_map(120.0, 30.0, 1.5, 3.0, 0.91);
    let plain = dir.path().join("S230825x.multiorder.fits");
    let header = |object: &str, time: &str| {
        multiorder_fits(&[("OBJECT", object), ("DATE-OBS", time)], &map.rows)
    };
    std::fs::write(&plain, header("'S230825x'", "'2023-08-25T06:42:07'")).expect("write");
    let zipped = dir.path().join("S230826y.multiorder.fits.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &header("'S230826y'", "'2023-08-26T01:00:00'"))
        .expect("gzip");
    std::fs::write(&zipped, gz.finish().expect("gzip")).expect("write");
    let out = common::ithaca()
        .args(["ingest", "gcn"])
        .arg(dir.path())
        .args(["--broker-url", &url])
        .output()
        .expect("run ithaca ingest gcn");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(
            "2 files: 2 circulars and notices read, 2 newly stored, 0 updated, 2 events created"
        ),
        "{stdout}"
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let event = rt
        .block_on(async {
            client(&url, reader("tenant-a"))
                .get_gcn_event(pb::GetGcnEventRequest {
                    dateobs: "S230826y".into(),
                    include_bodies: None,
                    limit: None,
                    cursor: None,
                })
                .await
        })
        .expect("the gzipped map's event")
        .into_inner();
    let loc = event.best_localisation.expect("the sky map");
    assert_eq!(
        (loc.origin.as_str(), loc.credible_level),
        ("skymap", Some(0.9))
    );
    assert!(loc.area_deg2.is_some_and(|a| a > 0.0));
}
