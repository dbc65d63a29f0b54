//! Hostile alert files against the real stack (`ithaca up`, every service in
//! one process): `ithaca ingest ztf` of the security probe's files — a
//! recursive schema nested 700 deep (which aborted the whole process), an
//! array declaring 40,000,000 nulls and a deflate block of 1 GiB of zeros
//! (which took gigabytes) — names each file skipped with its reason; the
//! process's peak memory, read from `/proc` and reset before each file,
//! stays within 64 MiB of its resting size; and the stack keeps serving: a
//! real alert ingests and an agent reads it back.

use crate::common;

use common::astro;
use common::stack::{Outcome, call, open_session};
use serde_json::json;
use std::path::{Path, PathBuf};

/// What a hostile file may cost the process, above its resting size.
const PEAK_ALLOWANCE_KIB: u64 = 64 * 1024;

/// Avro's zig-zag varint.
fn long(n: i64) -> Vec<u8> {
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

/// An object container of `schema` with one block of one record, `data`.
fn container(schema: &str, codec: &str, data: &[u8]) -> Vec<u8> {
    let sync = *b"fedcba9876543210";
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
    out.extend(long(1));
    out.extend(long(data.len() as i64));
    out.extend(data);
    out.extend(sync);
    out
}

/// The probe's three files, written into `dir`.
fn hostile_files(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    let recursive = {
        let schema =
            r#"{"type":"record","name":"n","fields":[{"name":"next","type":["null","n"]}]}"#;
        let mut datum = vec![2u8; 700];
        datum.push(0);
        container(schema, "null", &datum)
    };
    let nulls = {
        let schema = r#"{"type":"record","name":"alert","fields":[{"name":"xs","type":{"type":"array","items":"null"}}]}"#;
        let mut datum = long(40_000_000);
        datum.extend(long(0));
        container(schema, "null", &datum)
    };
    let bomb = {
        // A MiB of zeros compressed, then the compressed form of a further
        // MiB repeated: every match reaches back into zeros, so the stream
        // inflates to 1 GiB.
        use flate2::{Compress, Compression, FlushCompress};
        let mib = vec![0u8; 1 << 20];
        let mut z = Compress::new(Compression::best(), false);
        let mut chunk = || {
            let mut out = Vec::with_capacity(64 * 1024);
            z.compress_vec(&mib, &mut out, FlushCompress::Sync)
                .expect("compress");
            out
        };
        let mut stream = chunk();
        let repeat = chunk();
        for _ in 1..1024 {
            stream.extend(&repeat);
        }
        stream.extend([0x01, 0x00, 0x00, 0xff, 0xff]);
        let schema =
            r#"{"type":"record","name":"alert","fields":[{"name":"objectId","type":"bytes"}]}"#;
        container(schema, "deflate", &stream)
    };
    let mut out = Vec::new();
    for (name, bytes, reason) in [
        (
            "recursive.avro",
            recursive,
            "refused: the writer schema is recursive: type n contains itself",
        ),
        (
            "nulls.avro",
            nulls,
            "refused: alert 0: an array declares 40000000 items, more than the limit of 100000 values in one alert",
        ),
        (
            "bomb.avro",
            bomb,
            "refused: block 0: inflates to more than the limit of 8388608 bytes per block",
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        out.push((path, reason));
    }
    out
}

/// A `VmRSS`/`VmHWM`-style line of `/proc/<pid>/status`, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Reset the peak (`VmHWM`) to the current resident size.
fn reset_peak(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("clear_refs");
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_alert_files_are_skipped_with_their_reasons_and_cost_little() {
    let mut up = common::up(&[]);
    // Every service runs in this one process: one abort would stop them all.
    let pid = up.process.child.id();
    let dir = tempfile::tempdir().expect("tempdir");
    let files = hostile_files(dir.path());
    assert!(std::fs::metadata(&files[0].0).expect("file").len() < 1024);
    assert!(std::fs::metadata(&files[1].0).expect("file").len() < 256);

    for (path, reason) in &files {
        reset_peak(pid);
        let rest = status_kib(pid, "VmRSS:");
        let out = common::ithaca()
            .args(["ingest", "ztf"])
            .arg(path)
            .arg("--data-dir")
            .arg(&up.data_dir)
            .output()
            .expect("run ithaca ingest");
        let name = path.file_name().and_then(|n| n.to_str()).expect("name");
        if let Some(status) = up.process.child.try_wait().expect("wait") {
            panic!("{name}: the stack stopped ({status})");
        }
        let peak = status_kib(pid, "VmHWM:");
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "{name}: peak {} KiB above a resting {rest} KiB",
            peak.saturating_sub(rest)
        );
        assert!(
            !out.status.success(),
            "{name}: a skipped file fails the run"
        );
        assert!(
            stderr.contains(&format!("skipped {}: {name}: {reason}", path.display())),
            "{name}: {stderr}"
        );
        assert!(
            peak.saturating_sub(rest) < PEAK_ALLOWANCE_KIB,
            "{name}: the peak rose {} KiB above {rest} KiB",
            peak - rest
        );
    }

    // Still serving: a real alert ingests, and an agent reads it back.
    let real = astro::alerts_dir().join("v4.02/2695378462115010012.avro");
    up.ingest("ztf", &[real]);
    open_session(
        &up.url,
        &up.agent,
        "read an alert after hostile files",
        None,
    )
    .await;
    let answer = call(
        &up.url,
        &up.agent,
        "get_broker_alerts",
        json!({"broker_id": "ztf-archive", "objectId": "ZTF18abudxnw"}),
    )
    .await;
    match answer.outcome {
        Outcome::Ok(result) => assert_eq!(result["matched"], 1, "{result}"),
        other => panic!("get_broker_alerts after the hostile files: {other:?}"),
    }
}
