//! Hostile containers, built here byte by byte, each refused with its
//! reason; and the real packets of `../shared/data/ztf`, which decode as
//! `apache_avro`'s own reader decodes them and fit the limits with room.

use super::avro::{DecodeError, decode_file, decode_file_on_thread, to_json};
use super::container::{
    MAX_ALERT_VALUES, MAX_BLOCK_BYTES, MAX_BLOCK_RECORDS, MAX_FILE_CANDIDATE_VALUES,
    MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, read_header,
};
use super::walk::Walk;
use apache_avro::schema::ResolvedSchema;
use std::io::Write;
use std::path::PathBuf;

/// Avro's zig-zag varint.
pub(crate) fn long(n: i64) -> Vec<u8> {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        if z < 0x80 {
            out.push(z as u8);
            return out;
        }
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

/// An object container of `schema` whose blocks are `(records, bytes)`,
/// written as they are (already compressed when `codec` says so).
pub(crate) fn container(schema: &str, codec: &str, blocks: &[(i64, Vec<u8>)]) -> Vec<u8> {
    let sync = *b"0123456789abcdef";
    let mut out = b"Obj\x01".to_vec();
    out.extend(long(2));
    for (k, v) in [("avro.schema", schema), ("avro.codec", codec)] {
        out.extend(long(k.len() as i64));
        out.extend(k.as_bytes());
        out.extend(long(v.len() as i64));
        out.extend(v.as_bytes());
    }
    out.extend(long(0));
    out.extend(sync);
    for (records, data) in blocks {
        out.extend(long(*records));
        out.extend(long(data.len() as i64));
        out.extend(data);
        out.extend(sync);
    }
    out
}

/// The probe's file: a record whose only field is a union of null and
/// itself, nested `levels` deep.
pub(crate) fn recursive(levels: usize) -> Vec<u8> {
    let schema = r#"{"type":"record","name":"n","fields":[{"name":"next","type":["null","n"]}]}"#;
    let mut datum = vec![2u8; levels];
    datum.push(0);
    container(schema, "null", &[(1, datum)])
}

/// A record holding an array that declares 40,000,000 nulls (0 bytes each).
pub(crate) fn null_array() -> Vec<u8> {
    let schema = r#"{"type":"record","name":"alert","fields":[{"name":"objectId","type":"string"},{"name":"xs","type":{"type":"array","items":"null"}}]}"#;
    let mut datum = long(1);
    datum.push(b'x');
    datum.extend(long(40_000_000));
    datum.extend(long(0));
    container(schema, "null", &[(1, datum)])
}

/// A deflate block that inflates to 1 GiB of zeros (1 MB stored): the first
/// MiB compressed once, and the compressed form of a further MiB of zeros
/// repeated, which is valid anywhere after a MiB of zeros (every match
/// reaches back into zeros).
pub(crate) fn deflate_bomb() -> Vec<u8> {
    use flate2::{Compress, Compression, FlushCompress};
    let mib = vec![0u8; 1 << 20];
    let mut z = Compress::new(Compression::best(), false);
    let chunk = |z: &mut Compress, flush| {
        let mut out = Vec::with_capacity(64 * 1024);
        z.compress_vec(&mib, &mut out, flush).expect("compress");
        out
    };
    let first = chunk(&mut z, FlushCompress::Sync);
    let repeat = chunk(&mut z, FlushCompress::Sync);
    assert_eq!(z.total_in(), 2 << 20, "both MiB compressed");
    let mut stream = first;
    for _ in 1..1024 {
        stream.extend(&repeat);
    }
    // A final, empty stored block ends the stream.
    stream.extend([0x01, 0x00, 0x00, 0xff, 0xff]);
    let schema =
        r#"{"type":"record","name":"alert","fields":[{"name":"objectId","type":"bytes"}]}"#;
    container(schema, "deflate", &[(1, stream)])
}

fn refusal(bytes: &[u8]) -> String {
    match decode_file(bytes) {
        Err(e @ DecodeError::Refused(_)) => e.to_string(),
        Err(e) => panic!("refused for the wrong reason: {e}"),
        Ok(f) => panic!("decoded {} alerts", f.alerts.len()),
    }
}

#[test]
fn a_recursive_schema_is_refused_before_anything_decodes() {
    // The probe's file was 857 bytes; this one, with less metadata, 847.
    assert!(recursive(700).len() < 1024);
    for levels in [0, 1, 400, 700] {
        let err = refusal(&recursive(levels));
        assert!(
            err.contains("recursive") && err.contains("type n contains itself"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_file_is_decoded_on_a_thread_of_its_own_and_refused_there() {
    let err = decode_file_on_thread(recursive(700))
        .await
        .expect_err("refused");
    assert!(matches!(err, DecodeError::Refused(_)), "{err}");
    // A real file decodes there too.
    let real = std::fs::read(alerts_dir().join("v4.02/2695378462115010012.avro")).expect("read");
    let file = decode_file_on_thread(real).await.expect("decodes");
    assert_eq!(file.alerts.len(), 1);
}

#[test]
fn a_schema_deeper_than_the_limit_is_refused() {
    // Nested arrays of a long: the limit's depth is accepted, one more is not.
    let nest = |levels: usize| {
        let mut s = r#""long""#.to_owned();
        for _ in 1..levels {
            s = format!(r#"{{"type":"array","items":{s}}}"#);
        }
        s
    };
    let ok = container(&nest(MAX_SCHEMA_DEPTH), "null", &[]);
    assert!(
        matches!(decode_file(&ok), Err(DecodeError::Empty)),
        "depth {MAX_SCHEMA_DEPTH} is accepted"
    );
    let err = refusal(&container(&nest(MAX_SCHEMA_DEPTH + 1), "null", &[]));
    assert!(err.contains("nests deeper than 16 levels"), "{err}");
    // A named type's height counts wherever it is used: `r` fits where it
    // is defined, and is one level too deep inside the array.
    let schema = format!(
        r#"{{"type":"record","name":"top","fields":[{{"name":"a","type":{{"type":"record","name":"r","fields":[{{"name":"x","type":{}}}]}}}},{{"name":"b","type":{{"type":"array","items":"r"}}}}]}}"#,
        nest(MAX_SCHEMA_DEPTH - 2)
    );
    let err = refusal(&container(&schema, "null", &[]));
    assert!(err.contains("nests deeper"), "{err}");
}

#[test]
fn an_array_of_forty_million_nulls_is_refused_by_its_count() {
    let file = null_array();
    assert!(file.len() < 256, "{} bytes", file.len());
    let err = refusal(&file);
    assert!(
        err.contains("an array declares 40000000 items")
            && err.contains(&format!("limit of {MAX_ALERT_VALUES} values in one alert")),
        "{err}"
    );
}

#[test]
fn a_deflate_bomb_is_refused_at_the_block_limit() {
    let file = deflate_bomb();
    assert!(file.len() < 2 << 20, "{} bytes", file.len());
    let err = refusal(&file);
    assert!(
        err.contains(&format!(
            "block 0: inflates to more than the limit of {MAX_BLOCK_BYTES} bytes"
        )),
        "{err}"
    );
}

#[test]
fn framing_beyond_the_limits_is_refused() {
    let schema =
        r#"{"type":"record","name":"alert","fields":[{"name":"objectId","type":"string"}]}"#;
    let many = container(
        schema,
        "null",
        &[(MAX_BLOCK_RECORDS as i64 + 1, vec![0; 10])],
    );
    assert!(
        refusal(&many).contains("1001 records, above the limit of 1000 per block"),
        "{}",
        refusal(&many)
    );
    // A block that says it is larger than the limit is refused before it is read.
    let mut big = container(schema, "null", &[]);
    big.extend(long(1));
    big.extend(long(MAX_BLOCK_BYTES as i64 + 1));
    assert!(refusal(&big).contains("above the limit of 8388608 per block"));
    let codec = container(schema, "snappy", &[]);
    assert!(refusal(&codec).contains("codec \"snappy\""));
    let fixed = r#"{"type":"record","name":"alert","fields":[{"name":"f","type":{"type":"fixed","name":"huge","size":1099511627776}}]}"#;
    assert!(refusal(&container(fixed, "null", &[])).contains("fixed type huge"));
    let long_schema = format!(
        r#"{{"type":"record","name":"alert","doc":"{}","fields":[]}}"#,
        "x".repeat(MAX_SCHEMA_BYTES)
    );
    assert!(refusal(&container(&long_schema, "null", &[])).contains("larger than 262144 bytes"));
    // Many alerts, each within its own limit: the file keeps at most so
    // many candidate values.
    let wide = MINIMAL_ALERT.replace(
        r#"{"name":"fid","type":"int"}"#,
        r#"{"name":"fid","type":"int"},{"name":"xs","type":{"type":"array","items":"null"}}"#,
    );
    let per = 50_000i64;
    let mut datum = minimal_alert(0);
    datum.truncate(datum.len() - 1);
    datum.extend(long(per));
    datum.extend(long(0));
    datum.extend(long(0));
    let blocks: Vec<(i64, Vec<u8>)> = (0..=(MAX_FILE_CANDIDATE_VALUES as i64 / per))
        .map(|_| (1, datum.clone()))
        .collect();
    let err = refusal(&container(&wide, "null", &blocks));
    assert!(
        err.contains(
            "alert 4: the file's candidate records hold more than the limit of 250000 values"
        ),
        "{err}"
    );
}

/// The least a container must hold to be an alert, and an array of nulls.
const MINIMAL_ALERT: &str = r#"{"type":"record","name":"alert","fields":[
    {"name":"objectId","type":"string"},{"name":"candid","type":"long"},
    {"name":"candidate","type":{"type":"record","name":"candidate","fields":[
        {"name":"jd","type":"double"},{"name":"ra","type":"double"},
        {"name":"dec","type":"double"},{"name":"fid","type":"int"}]}},
    {"name":"xs","type":{"type":"array","items":"null"}}]}"#;

fn minimal_alert(nulls: i64) -> Vec<u8> {
    let mut datum = long(4);
    datum.extend(b"ZTFx");
    datum.extend(long(7));
    for x in [2460000.5f64, 10.0, 20.0] {
        datum.extend(x.to_le_bytes());
    }
    datum.extend(long(1));
    if nulls > 0 {
        datum.extend(long(nulls));
    }
    datum.extend(long(0));
    datum
}

#[test]
fn a_hand_built_alert_decodes() {
    let file =
        decode_file(&container(MINIMAL_ALERT, "null", &[(1, minimal_alert(3))])).expect("decodes");
    assert_eq!(file.alerts[0].object_id, "ZTFx");
    assert_eq!(file.alerts[0].candid, 7);
}

#[test]
fn truncated_and_corrupt_files_are_named_not_refused() {
    let real = std::fs::read(alerts_dir().join("v4.02/2695378462115010012.avro")).expect("read");
    for cut in [3, 100, real.len() / 2, real.len() - 1] {
        let err = decode_file(&real[..cut]).expect_err("truncated");
        assert!(
            matches!(err, DecodeError::NotAvro(_) | DecodeError::Record { .. }),
            "{cut}: {err}"
        );
    }
    let mut wrong_sync = real.clone();
    let n = wrong_sync.len();
    wrong_sync[n - 1] ^= 1;
    let err = decode_file(&wrong_sync).expect_err("sync");
    assert!(err.to_string().contains("sync marker"), "{err}");
}

pub(crate) fn alerts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/ztf/alerts")
}

fn real_files() -> Vec<PathBuf> {
    let base = alerts_dir();
    let mut files = vec![base.join("../broker_enriched/fink_ztf_part-3-305711.avro")];
    for dir in ["v3.x", "v4.01", "v4.02"] {
        for e in std::fs::read_dir(base.join(dir)).expect("alerts dir") {
            files.push(e.expect("entry").path());
        }
    }
    files.sort();
    files
}

/// Every real file decodes to exactly what `apache_avro::Reader` (the
/// decoder before the limits) reads, and the figures the limits are set from
/// are printed.
#[test]
fn real_alerts_decode_as_before_and_fit_the_limits() {
    let (mut depth, mut schema_bytes, mut block_bytes, mut block_records) = (0, 0, 0, 0);
    let (mut alert_values, mut candidate_values) = (0, 0);
    for path in real_files() {
        let bytes = std::fs::read(&path).expect("read");
        let decoded = decode_file(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let reader = apache_avro::Reader::new(&bytes[..]).expect("reader");
        let schema = reader.writer_schema().clone();
        assert_eq!(decoded.schema.canonical_form(), schema.canonical_form());
        let before: Vec<_> = reader.map(|v| v.expect("record")).collect();
        assert_eq!(before.len(), decoded.alerts.len(), "{}", path.display());
        // As JSON, not bytes or values: a map is a HashMap, re-encoded in any
        // order, and Fink's packets hold NaN, which equals nothing.
        for (value, alert) in before.into_iter().zip(&decoded.alerts) {
            let again = apache_avro::from_avro_datum(&schema, &mut &alert.datum[..], None)
                .expect("stored datum");
            assert!(
                to_json(&again) == to_json(&value),
                "{}: alert differs",
                path.display()
            );
        }

        let header = read_header(&bytes).expect("header");
        schema_bytes = schema_bytes.max(schema.canonical_form().len());
        depth = depth.max(super::walk::check_schema(&schema).expect("schema"));
        let resolved = ResolvedSchema::try_from(&schema).expect("names");
        let mut walk = Walk::new(resolved.get_names());
        let in_file: usize = decoded
            .alerts
            .iter()
            .map(|a| 1 + a.candidate.as_object().map_or(0, |c| c.len()))
            .sum();
        candidate_values = candidate_values.max(in_file);
        for block in header.blocks() {
            let block = block.expect("block");
            block_bytes = block_bytes.max(block.data.len());
            block_records = block_records.max(block.records);
            let mut data: &[u8] = &block.data;
            for _ in 0..block.records {
                let n = walk.datum(&header.schema, &mut data).expect("walk");
                alert_values = alert_values.max(n);
            }
        }
    }
    let mut out = std::io::stderr();
    writeln!(
        out,
        "real alerts: schema depth {depth}, canonical schema {schema_bytes} B, block {block_bytes} B, \
         {block_records} records a block, {alert_values} values an alert, \
         {candidate_values} candidate values a file"
    )
    .expect("stderr");
    assert_eq!(depth, 7, "Fink's schema nests 7 levels");
    assert!(depth * 2 <= MAX_SCHEMA_DEPTH);
    assert!(block_bytes * 100 <= MAX_BLOCK_BYTES);
    assert!(block_records == 1);
    assert!(alert_values * 9 <= MAX_ALERT_VALUES, "{alert_values}");
    assert!(
        candidate_values * 50 <= MAX_FILE_CANDIDATE_VALUES,
        "{candidate_values}"
    );
}

/// Schemas `apache_avro` panics on instead of refusing (the first two found
/// by the `avro_packet` fuzz target: records named `ztf&alert` and `.tf.alert`).
#[test]
fn schemas_the_avro_crate_would_panic_on_are_refused() {
    for (schema, needle) in [
        (
            r#"{"type":"record","name":"ztf&alert","fields":[]}"#,
            "a name \"ztf&alert\"",
        ),
        // The second finding: an empty namespace before a dotted name.
        (
            r#"{"type":"record","name":".tf.alert","fields":[]}"#,
            "a name \".tf.alert\"",
        ),
        (
            r#"{"type":"record","name":"a","namespace":"x&y","aliases":["b"],"fields":[]}"#,
            "a namespace \"x&y\"",
        ),
        (
            r#"{"type":"record","name":"a","namespace":".x","aliases":["b"],"fields":[]}"#,
            "a namespace \".x\"",
        ),
        (
            r#"{"type":"record","name":"a","aliases":["b c"],"fields":[]}"#,
            "\"b c\" that is not an Avro name",
        ),
        (
            r#"{"type":"record","name":"a","fields":[{"name":"f","type":"lo-ng"}]}"#,
            "a type name \"lo-ng\"",
        ),
        (
            r#"{"type":"record","name":"a","fields":[{"name":"f","type":"long","size":"x"}]}"#,
            "a field carrying \"size\"",
        ),
        (
            r#"{"type":"record","name":"a","items":5,"fields":[]}"#,
            "holds 5 where a type belongs",
        ),
    ] {
        let err = refusal(&container(schema, "null", &[]));
        assert!(err.contains(needle), "{schema}: {err}");
    }
}
