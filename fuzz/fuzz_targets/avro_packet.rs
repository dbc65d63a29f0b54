//! An alert file from outside: bytes through
//! `ithaca_broker::alerts::avro::decode_file`, the broker's reader of Avro
//! object containers (its hand-read framing and limits, then `apache_avro`).
//! Nothing may panic, overflow the stack or allocate past the limits
//! (libFuzzer's `-rss_limit_mb` catches that), and what it accepts must keep
//! its promises:
//!
//! - the limits walk and the decoder read each datum alike (a disagreement
//!   is reported as such, and is a bug);
//! - every stored datum decodes again with the file's schema, and the
//!   schema's flattening to paths never panics.
//!
//! Seeds (`fuzz/seeds/avro_packet/`): real alerts of
//! `../shared/data/ztf` (ZTF 4.02 plain and deflated, 3.x with several
//! alerts, Fink), each record cut down to a few of its fields, arrays to
//! three items and cutouts to 200 bytes, re-encoded; the real cutout
//! schema; and the probe's recursive schema.

#![no_main]

use ithaca_broker::alerts::avro::{DecodeError, decode_file, decode_packet};
use ithaca_broker::alerts::schema::flatten;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = match decode_file(data) {
        Ok(file) => file,
        Err(DecodeError::Record { reason, .. }) => {
            assert!(!reason.contains("disagree"), "{reason}");
            return;
        }
        Err(DecodeError::Thread(e)) => panic!("no thread involved: {e}"),
        Err(_) => return,
    };
    assert!(!file.alerts.is_empty());
    for alert in &file.alerts {
        decode_packet(&file.schema, &alert.datum)
            .unwrap_or_else(|e| panic!("a stored datum does not decode again: {e}"));
    }
    let _ = flatten(&file.schema, &[]);
});
