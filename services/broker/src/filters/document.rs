//! The alert document a filter sees: built from an alert's stored parts
//! or from a whole packet, always without the image cutouts, and with a
//! stream's withheld paths removed. A leaf: the preview and the live path
//! both use it.

use serde_json::Value as Json;
use serde_json::{Map, Value};

/// Fields never shown to a filter: the image cutouts (bytes no cut applies
/// to; skipping them saves most of the decoding work).
pub const CUTOUTS: [&str; 3] = ["cutoutScience", "cutoutTemplate", "cutoutDifference"];

/// The alert document a pipeline sees, from the stored parts of an alert:
/// `objectId`, `candid`, `schemavsn` and the `candidate` record.
pub fn alert_document(object_id: &str, candid: i64, schemavsn: &str, candidate: Value) -> Value {
    let mut m = Map::new();
    m.insert("objectId".to_owned(), Value::from(object_id));
    m.insert("candid".to_owned(), Value::from(candid));
    m.insert("schemavsn".to_owned(), Value::from(schemavsn));
    m.insert("candidate".to_owned(), candidate);
    Value::Object(m)
}

/// The alert document from a whole decoded packet (for pipelines that read
/// `prv_candidates`, `fp_hists` or a broker's own fields): the packet
/// without its image cutouts.
pub fn packet_document(mut packet: Value) -> Value {
    if let Value::Object(m) = &mut packet {
        for cutout in CUTOUTS {
            m.remove(cutout);
        }
    }
    packet
}

/// `doc` without the `withheld` paths (plain dotted; through arrays too).
pub fn without(doc: &Json, withheld: &[String]) -> Json {
    let mut out = doc.clone();
    strip(&mut out, withheld);
    out
}

/// Remove the `withheld` paths from `doc`.
pub fn strip(doc: &mut Json, withheld: &[String]) {
    for path in withheld {
        let segs: Vec<&str> = path.split('.').collect();
        remove(doc, &segs);
    }
}

fn remove(value: &mut Json, segs: &[&str]) {
    match value {
        Json::Array(items) => items.iter_mut().for_each(|v| remove(v, segs)),
        Json::Object(map) => match segs {
            [] => {}
            [last] => {
                map.remove(*last);
            }
            [first, rest @ ..] => {
                if let Some(inner) = map.get_mut(*first) {
                    remove(inner, rest);
                }
            }
        },
        _ => {}
    }
}
