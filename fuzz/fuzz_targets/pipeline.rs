//! The broker's filter pipeline language
//! (`ithaca_broker::filters::pipeline`): a pipeline an agent wrote, compiled
//! against the real ZTF alert schema and a filter's stream, then evaluated
//! on an alert. Nothing may panic, and what compiles must keep the
//! language's promises:
//!
//! - a refusal names at least one problem, each located in the pipeline;
//! - `eval` and `passes` agree on every alert;
//! - the canonical form compiles again into itself, and decides every alert
//!   the same way, with the same output document;
//! - an alert cut down to what `needs` names (the candidate's fields read
//!   through `scan::object_subset`, as the live path and the preview read
//!   stored alerts) passes exactly when the whole alert does;
//! - checking a path into the output never panics.
//!
//! Input: the pipeline as JSON, then optionally a NUL byte and an alert
//! document as JSON, evaluated besides the sample alert. The input's length
//! picks the stream: everything, or the public programme with the
//! candidate alone.
//!
//! The schema is read once from `ITHACA_ZTF_SCHEMA_DIR` (a folder of the
//! `.avsc` files, or of `v<version>/` folders of them; `fuzz/run.sh` sets
//! it to `../shared/data/ztf/schema` beside the checkout).

#![no_main]

use ithaca_broker::alerts::schema::{FlatField, flatten_files};
use ithaca_broker::filters::pipeline::scan::{KeySet, object_subset};
use ithaca_broker::filters::pipeline::{self, CandidateNeeds, Pipeline, StreamBounds};
use ithaca_broker::filters::preview::alert_document;
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::LazyLock;

static SCHEMA: LazyLock<Vec<FlatField>> = LazyLock::new(|| {
    let dir = std::env::var_os("ITHACA_ZTF_SCHEMA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/ztf/schema")
        });
    let dir = if dir.join("alert.avsc").is_file() {
        dir
    } else {
        dir.join("v4.02")
    };
    flatten_files(&dir)
        .unwrap_or_else(|e| panic!("the ZTF schema (set ITHACA_ZTF_SCHEMA_DIR): {e}"))
        .1
});

/// A ZTF alert as the preview's packet document shows it (no cutouts).
static SAMPLE: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "objectId": "ZTF24aavxtjp",
        "candid": 2752190655615010063_i64,
        "schemavsn": "4.02",
        "publisher": "ZTF (www.ztf.caltech.edu)",
        "candidate": {
            "jd": 2460506.69, "fid": 1, "pid": 2752190655615_i64, "programid": 1,
            "magpsf": 16.3, "sigmapsf": 0.05, "diffmaglim": 20.4, "drb": 0.99,
            "rb": 0.8, "isdiffpos": "t", "ndethist": 3, "ssdistnr": -999.0,
            "sgscore1": 0.1, "distpsnr1": 2.5, "ssnamenr": null, "nbad": 0,
            "ra": 254.1, "dec": 32.7, "drbversion": "d6_m7", "jdstarthist": 2460500.5
        },
        "prv_candidates": [
            {"jd": 2460500.5, "magpsf": 17.5, "fid": 1, "programid": 1},
            {"jd": 2460501.5, "magpsf": null, "diffmaglim": 20.1, "fid": 2, "programid": 1},
            {"jd": 2460502.5, "magpsf": 16.9, "fid": 1, "programid": 2}
        ],
        "fp_hists": [
            {"jd": 2460499.5, "forcediffimflux": -12.5, "fid": 1, "procstatus": "0"},
            {"jd": 2460503.5, "forcediffimflux": 310.0, "fid": 2, "procstatus": "56"}
        ]
    })
});

fn streams() -> [StreamBounds; 2] {
    [
        StreamBounds {
            programids: vec![1, 2, 3],
            fields: None,
        },
        StreamBounds {
            programids: vec![1],
            fields: Some(vec![
                "objectId".into(),
                "candid".into(),
                "schemavsn".into(),
                "candidate".into(),
            ]),
        },
    ]
}

/// `doc` as a stored alert is read when the pipeline needs no more than
/// (part of) its candidate: the three top fields and the candidate's
/// needed keys, scanned out of its JSON text. `None` when the pipeline
/// needs the packet, or `doc` does not have a stored alert's shape.
fn cut_down(pipeline: &Pipeline, doc: &Value) -> Option<Value> {
    let needs = pipeline.needs();
    if needs.packet {
        return None;
    }
    let object_id = doc.get("objectId")?.as_str()?;
    let candid = doc.get("candid")?.as_i64()?;
    let schemavsn = doc.get("schemavsn")?.as_str()?;
    let candidate = doc.get("candidate")?;
    if !candidate.is_object() {
        return None;
    }
    let text = candidate.to_string();
    let read = match &needs.candidate {
        CandidateNeeds::Whole => candidate.clone(),
        CandidateNeeds::Nothing => {
            Value::Object(object_subset(&text, &KeySet::new(Vec::new())).expect("an object"))
        }
        CandidateNeeds::Keys(keys) => {
            let subset = object_subset(&text, &KeySet::new(keys.clone()))
                .unwrap_or_else(|e| panic!("{text} does not scan: {e}"));
            for key in keys {
                assert_eq!(subset.get(key), candidate.get(key), "{key} of {text}");
            }
            Value::Object(subset)
        }
    };
    Some(alert_document(object_id, candid, schemavsn, read))
}

fn check(stages: &Value, stream: &StreamBounds, docs: &[&Value]) {
    let checked = match pipeline::compile(stages, &SCHEMA, stream) {
        Ok(checked) => checked,
        Err(problems) => {
            assert!(!problems.is_empty(), "refused without a problem: {stages}");
            for p in &problems {
                assert!(p.location.starts_with("pipeline"), "{p:?} for {stages}");
            }
            return;
        }
    };
    let pipeline = checked.pipeline;
    let canonical = pipeline.canonical();
    let again = pipeline::compile(&canonical, &SCHEMA, stream)
        .unwrap_or_else(|p| panic!("canonical {canonical} of {stages} refused: {p:#?}"))
        .pipeline;
    assert_eq!(again.canonical(), canonical, "canonical of {stages}");
    assert_eq!(again.needs(), pipeline.needs(), "needs of {stages}");
    for doc in docs {
        let out = pipeline.eval(doc);
        assert_eq!(out.is_some(), pipeline.passes(doc), "{stages} on {doc}");
        assert_eq!(again.eval(doc), out, "canonical {canonical} on {doc}");
        if let Some(small) = cut_down(&pipeline, doc) {
            assert_eq!(
                pipeline.passes(&small),
                out.is_some(),
                "{stages} ({:?}) on {doc} cut down to {small}",
                pipeline.needs()
            );
        }
        if let Some(Value::Object(fields)) = &out {
            for name in fields.keys() {
                let _ = pipeline.check_output_path(name);
            }
        }
    }
    for path in ["candidate.magpsf", "objectId", "x", "prv_candidates.0.jd"] {
        let _ = pipeline.check_output_path(path);
    }
}

fuzz_target!(|data: &[u8]| {
    let (text, doc) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    let Ok(stages) = serde_json::from_slice::<Value>(text) else {
        return;
    };
    let doc = doc.and_then(|d| serde_json::from_slice::<Value>(d).ok());
    let mut docs: Vec<&Value> = vec![&SAMPLE];
    docs.extend(doc.as_ref());
    let streams = streams();
    check(&stages, &streams[data.len() % streams.len()], &docs);
});
