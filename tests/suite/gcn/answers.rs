//! What an agent reads about GCN events, sized for an agent: an event's
//! circulars a page at a time behind a cursor, one circular by number, a
//! word search over circulars, and the built-in extractions' own times
//! (the circular's, not the ingest's), magnitude epochs and counterparts,
//! all on the real circulars of `../shared/data/gcn`, on both databases,
//! through gRPC, measured as the edge renders JSON for agents.

use super::{circular_records, client, reader, serve};
use crate::common::gcn;
use ithaca_kit::db::Db;
use ithaca_kit::principal::Principal;
use ithaca_proto::broker::v1 as pb;
use prost::Message;
use serde_json::Value;
use std::collections::BTreeSet;

/// The most bytes the default `get_gcn_event` answer of GCN's busiest event
/// in the data (GRB 230812B, 64 circulars, 131 KB in full) may take.
const DEFAULT_EVENT_BYTES: usize = 40_000;
/// The most bytes a default page of search hits may take.
const DEFAULT_SEARCH_BYTES: usize = 16_000;

crate::common::on_both_databases!(ithaca_broker::open_db, "gcn" =>
    event_circulars_in_pages,
    one_circular_and_search,
    extraction_times_epochs_counterparts,
);

/// `message` as the edge hands it to an agent (proto field names, every
/// field present).
fn agent_json<M: Message>(message: &M, full_name: &str) -> Value {
    let pool = prost_reflect::DescriptorPool::decode(ithaca_proto::FILE_DESCRIPTOR_SET)
        .expect("descriptor pool");
    let descriptor = pool.get_message_by_name(full_name).expect("message type");
    let dynamic =
        prost_reflect::DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())
            .expect("decode");
    ithaca_edge::transcode::to_json(&dynamic)
}

async fn loaded_grpc(db: Db) -> super::Client {
    let url = serve(db).await;
    let admin = client(&url, Principal::system(""));
    for path in std::iter::once(gcn::circulars_file()).chain(gcn::notice_files(&gcn::notices_dir()))
    {
        let chunk = pb::GcnFileChunk {
            source: path.display().to_string(),
            data: std::fs::read(&path).expect("read"),
        };
        admin
            .clone()
            .ingest_gcn(tokio_stream::iter(vec![chunk]))
            .await
            .expect("ingest");
    }
    client(&url, reader("tenant-a"))
}

fn get(dateobs: &str, limit: Option<i32>, cursor: Option<String>) -> pb::GetGcnEventRequest {
    pb::GetGcnEventRequest {
        dateobs: dateobs.to_owned(),
        include_bodies: None,
        limit,
        cursor,
    }
}

async fn event_circulars_in_pages(db: Db) {
    let mut agent = loaded_grpc(db).await;
    let first = agent
        .get_gcn_event(get("GRB 230812B", None, None))
        .await
        .expect("default page")
        .into_inner();
    let bytes = serde_json::to_vec(&agent_json(&first, "ithaca.broker.v1.GcnEvent"))
        .expect("json")
        .len();
    eprintln!("get_gcn_event GRB 230812B, default page: {bytes} bytes");
    assert!(
        bytes <= DEFAULT_EVENT_BYTES,
        "the default answer is {bytes} bytes, more than {DEFAULT_EVENT_BYTES}"
    );
    assert_eq!(first.circulars.len(), 10, "the documented default page");
    assert!(first.circular_count >= 64, "{}", first.circular_count);
    let full = agent
        .get_gcn_event(get("GRB 230812B", Some(100), None))
        .await
        .expect("one big page")
        .into_inner();
    assert_eq!(full.next_cursor, None, "everything fits in 100");
    let every: Vec<i32> = full.circulars.iter().map(|c| c.circular_id).collect();
    assert_eq!(every.len() as i32, full.circular_count);
    // The cursor reads the rest: every circular once, in order.
    let mut read: Vec<i32> = first.circulars.iter().map(|c| c.circular_id).collect();
    let mut cursor = first.next_cursor.clone();
    let mut pages = 1;
    while let Some(c) = cursor {
        let page = agent
            .get_gcn_event(get(&first.dateobs, None, Some(c)))
            .await
            .expect("next page")
            .into_inner();
        assert!(page.circulars.len() <= 10);
        assert_eq!(
            page.circular_count, full.circular_count,
            "the total on every page"
        );
        read.extend(page.circulars.iter().map(|c| c.circular_id));
        cursor = page.next_cursor;
        pages += 1;
        assert!(pages <= 20, "the cursor ends");
    }
    assert_eq!(read, every);
    assert!(first.circulars[0].body.is_some(), "bodies by default");
    // Bad pages are named.
    for (limit, cursor, field) in [
        (Some(0), None, "limit:"),
        (Some(101), None, "limit:"),
        (None, Some("before:34400".to_owned()), "cursor:"),
        (None, Some("34400".to_owned()), "cursor:"),
    ] {
        let status = agent
            .get_gcn_event(get("GRB 230812B", limit, cursor))
            .await
            .expect_err("bad page");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().starts_with(field), "{}", status.message());
    }
}

async fn one_circular_and_search(db: Db) {
    let mut agent = loaded_grpc(db).await;
    let ztf = agent
        .get_gcn_circular(pb::GetGcnCircularRequest { circular_id: 34397 })
        .await
        .expect("34397")
        .into_inner();
    assert!(
        ztf.body
            .as_deref()
            .unwrap_or_default()
            .contains("ZTF23aaxeacr")
    );
    let event = agent
        .get_gcn_event(get("GRB 230812B", Some(1), None))
        .await
        .expect("event")
        .into_inner();
    assert_eq!(ztf.dateobs.as_deref(), Some(event.dateobs.as_str()));
    assert_eq!(ztf.uri.as_deref(), Some(event.uri.as_str()));
    let missing = agent
        .get_gcn_circular(pb::GetGcnCircularRequest { circular_id: 1 })
        .await
        .expect_err("not stored");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(
        missing.message().starts_with("circular_id:"),
        "{}",
        missing.message()
    );
    let zero = agent
        .get_gcn_circular(pb::GetGcnCircularRequest { circular_id: 0 })
        .await
        .expect_err("zero");
    assert_eq!(zero.code(), tonic::Code::InvalidArgument);
    let every: BTreeSet<i64> = agent
        .get_gcn_event(get("GRB 230812B", Some(100), None))
        .await
        .expect("every circular")
        .into_inner()
        .circulars
        .iter()
        .map(|c| i64::from(c.circular_id))
        .collect();

    // The search, against the records read independently: every word, any
    // case, in the subject or body.
    let records = circular_records();
    let expected = |words: &[&str], only: Option<&BTreeSet<i64>>| -> Vec<i64> {
        let mut ids: Vec<i64> = records
            .iter()
            .filter(|r| {
                let text = format!(
                    "{}\n{}",
                    r["subject"].as_str().unwrap_or_default(),
                    r["body"].as_str().unwrap_or_default()
                )
                .to_ascii_lowercase();
                words.iter().all(|w| text.contains(&w.to_ascii_lowercase()))
            })
            .filter_map(|r| r["circularId"].as_i64())
            .filter(|id| only.is_none_or(|o| o.contains(id)))
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids
    };
    let search = |query: &str, dateobs: Option<&str>, cursor: Option<String>| {
        pb::SearchGcnCircularsRequest {
            query: query.to_owned(),
            dateobs: dateobs.map(str::to_owned),
            limit: Some(3),
            cursor,
        }
    };
    for (query, words, dateobs) in [
        ("ztf23AAXEACR", vec!["ztf23aaxeacr"], None),
        (
            "Afterglow  GROWTH-India",
            vec!["afterglow", "growth-india"],
            None,
        ),
        ("redshift", vec!["redshift"], Some("GRB 230812B")),
    ] {
        let only: Option<BTreeSet<i64>> = dateobs.map(|_| every.clone());
        let want = expected(&words, only.as_ref());
        assert!(want.len() > 1, "{query}: the data has several");
        let mut got: Vec<i64> = Vec::new();
        let mut cursor = None;
        loop {
            let page = agent
                .search_gcn_circulars(search(query, dateobs, cursor))
                .await
                .expect("search")
                .into_inner();
            assert_eq!(page.total as usize, want.len(), "{query}");
            assert_eq!(page.words, words, "{query}");
            for hit in &page.circulars {
                assert!(hit.body.is_none(), "hits carry no body");
                let snippet = hit
                    .snippet
                    .as_deref()
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                assert!(!snippet.is_empty() && !snippet.contains('\n'), "{snippet}");
                assert!(
                    hit.snippet
                        .as_deref()
                        .is_some_and(|s| s.chars().count() <= 260)
                );
            }
            got.extend(page.circulars.iter().map(|c| i64::from(c.circular_id)));
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(got, want, "{query}: newest first, every hit once");
    }
    // The default page's size, as an agent reads it.
    let default = agent
        .search_gcn_circulars(pb::SearchGcnCircularsRequest {
            query: "afterglow".to_owned(),
            ..Default::default()
        })
        .await
        .expect("default search")
        .into_inner();
    assert_eq!(default.count, 20, "the documented default page");
    let bytes = serde_json::to_vec(&agent_json(&default, "ithaca.broker.v1.GcnCircularSearch"))
        .expect("json")
        .len();
    eprintln!("search_gcn_circulars afterglow, default page: {bytes} bytes");
    assert!(bytes <= DEFAULT_SEARCH_BYTES, "{bytes} bytes");
    let short = agent
        .search_gcn_circulars(search("x", None, None))
        .await
        .expect_err("one letter");
    assert!(short.message().starts_with("query:"), "{}", short.message());
    let none = agent
        .search_gcn_circulars(search("no-such-word-anywhere", None, None))
        .await
        .expect("empty search")
        .into_inner();
    assert_eq!((none.count, none.total, none.next_cursor), (0, 0, None));
}

/// A built-in extraction's payload of circular `id` of `kind`.
fn payloads(rows: &[ithaca_broker::gcn::store::ExtractionRow], id: i64, kind: &str) -> Vec<Value> {
    rows.iter()
        .filter(|r| r.circular_id == Some(id) && r.kind.as_deref() == Some(kind))
        .map(|r| serde_json::from_str(&r.payload).expect("payload json"))
        .collect()
}

async fn extraction_times_epochs_counterparts(db: Db) {
    let svc = gcn::service(db);
    gcn::ingest_all(&svc).await;
    let reader = reader("tenant-a");
    let origin = Some(ithaca_broker::gcn::extract::ORIGIN);
    let created_on: std::collections::HashMap<i64, i64> = circular_records()
        .iter()
        .filter_map(|r| Some((r["circularId"].as_i64()?, r["createdOn"].as_i64()?)))
        .collect();
    let event_of = |id: i32| {
        let svc = svc.clone();
        let reader = reader.clone();
        async move {
            svc.circular(&reader, id)
                .await
                .expect("circular")
                .dateobs
                .unwrap_or_else(|| panic!("GCN Circular {id} is attached to an event"))
        }
    };

    // Tautenburg's photometry of GRB 230812B: "g = 21.85 +/- 0.25 (midtime:
    // August 14, 2023, 23:23:33 UT)".
    let grb = event_of(34435).await;
    let all = svc
        .extractions(&reader, &grb, origin, None, Some(2000))
        .await
        .expect("extractions");
    assert!(all.rows.len() < 2000);
    for row in &all.rows {
        let id = row.circular_id.expect("a circular");
        assert_eq!(
            Some(row.created_at_ms),
            created_on.get(&id).copied(),
            "extraction {} of circular {id}: the circular's time, not the ingest's",
            row.extraction_id
        );
    }
    let mags = payloads(&all.rows, 34435, "magnitude");
    let g = mags
        .iter()
        .find(|m| m["band"] == "g" && m["mag"] == 21.85)
        .unwrap_or_else(|| panic!("g = 21.85 in {mags:?}"));
    assert_eq!(g["epoch"]["utc"], "2023-08-14T23:23:33Z", "{g}");
    assert!(
        g["epoch"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("August 14, 2023")),
        "{g}"
    );
    for m in all
        .rows
        .iter()
        .filter(|r| r.kind.as_deref() == Some("magnitude"))
    {
        let p: Value = serde_json::from_str(&m.payload).expect("json");
        assert!(
            p.get("epoch").is_some(),
            "every magnitude says its epoch, or null: {p}"
        );
    }

    // ZTF's candidate: named on a table row with its TNS name and no
    // position there: a counterpart with both names and a null position.
    let ztf = payloads(&all.rows, 34397, "counterpart");
    let c = ztf
        .iter()
        .find(|c| c["name"] == "ZTF23aaxeacr")
        .unwrap_or_else(|| panic!("ZTF23aaxeacr in {ztf:?}"));
    assert_eq!(c["other_names"], serde_json::json!(["AT 2023pel"]), "{c}");
    assert_eq!(
        (c["ra"].clone(), c["dec"].clone()),
        (Value::Null, Value::Null),
        "{c}"
    );

    // AT 2023qxj (ZTF23abaanxz): "RA = 19:58:33.55 (299.6397739 deg) Dec =
    // +54:27:48.02 (54.4633396 deg)"; r = 17.11 at "(MJD=60183.26872)".
    let qxj = event_of(34574).await;
    let rows = svc
        .extractions(&reader, &qxj, origin, None, Some(2000))
        .await
        .expect("extractions")
        .rows;
    let found = payloads(&rows, 34574, "counterpart");
    let c = found
        .iter()
        .find(|c| c["name"] == "AT 2023qxj")
        .unwrap_or_else(|| panic!("AT 2023qxj in {found:?}"));
    assert_eq!(c["other_names"], serde_json::json!(["ZTF23abaanxz"]), "{c}");
    let (ra, dec) = (
        c["ra"].as_f64().expect("ra"),
        c["dec"].as_f64().expect("dec"),
    );
    assert!(
        (ra - 299.6397739).abs() < 1e-4 && (dec - 54.4633396).abs() < 1e-4,
        "{c}"
    );
    let r = payloads(&rows, 34574, "magnitude");
    let r = r
        .iter()
        .find(|m| m["mag"] == 17.11)
        .unwrap_or_else(|| panic!("r = 17.11 in {r:?}"));
    let mjd_ms = ((60183.26872_f64 - 40587.0) * 86_400_000.0).round() as i64;
    assert_eq!(r["epoch"]["utc"], ithaca_kit::clock::rfc3339(mjd_ms), "{r}");
}
