//! The Avro object-container framing, read by hand and bounded, before any
//! byte of a file reaches `apache_avro`.
//!
//! `apache_avro` believes what a file declares. Its decoder recurses once per
//! nested value, so a recursive writer schema with a record nested 700
//! levels deep overflows the thread's stack and aborts the whole process;
//! it reserves room for as many array items as a block count says (40
//! million nulls cost 2 GB from a 177-byte file); and it inflates a deflate
//! block to whatever size it holds (1 GiB of zeros from 1 MB). So a file is
//! read here first, and refused with its reason as soon as it declares more
//! than an alert needs:
//!
//! 1. the header: the magic, at most [`MAX_METADATA_ENTRIES`] metadata
//!    entries, a writer schema of at most [`MAX_SCHEMA_BYTES`];
//! 2. the writer schema ([`super::walk::check_schema`]): no named type that contains
//!    itself, nesting at most [`MAX_SCHEMA_DEPTH`] deep, no `fixed` larger
//!    than a block;
//! 3. each block ([`Blocks`]): at most [`MAX_BLOCK_RECORDS`] records and
//!    [`MAX_BLOCK_BYTES`] stored and inflated (deflate goes through a reader
//!    that stops one byte past the limit);
//! 4. each datum ([`super::walk::Walk`]): walked against the schema without allocating,
//!    counting every value, at most [`MAX_ALERT_VALUES`] per alert. Only a
//!    datum that passes is decoded;
//! 5. what a file keeps once decoded: at most [`MAX_FILE_CANDIDATE_VALUES`]
//!    values in the `candidate` records of all its alerts together (the
//!    rest of an alert is kept as its datum, no larger than it came).
//!
//! The limits come from the real packets in `../shared/data/ztf` (ZTF 3.x to
//! 4.02 and a Fink container), measured by the `real_alerts_fit_the_limits`
//! test, which prints them: every block holds one record of at most 65 KB,
//! uncompressed; a writer schema is at most 26 KB and nests 6 levels; an
//! alert holds at most a few thousand values.

use super::limits::Cursor;
pub use super::limits::{
    DECODE_STACK_BYTES, DecodeError, MAX_ALERT_VALUES, MAX_BLOCK_BYTES, MAX_BLOCK_RECORDS,
    MAX_FILE_CANDIDATE_VALUES, MAX_METADATA_ENTRIES, MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, WalkError,
    limit_allocations,
};
use apache_avro::Schema;
use std::io::Read;

/// How a container's blocks are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Null,
    Deflate,
}

/// A container's header, read and checked.
pub struct Header<'a> {
    pub schema: Schema,
    pub codec: Codec,
    sync: [u8; 16],
    /// The bytes after the header: the blocks.
    rest: &'a [u8],
}

/// Read the header of `bytes` and check its writer schema.
pub fn read_header(bytes: &[u8]) -> Result<Header<'_>, DecodeError> {
    let not_avro = |m: &str| DecodeError::NotAvro(m.to_owned());
    let Some(mut cur) = bytes.strip_prefix(b"Obj\x01") else {
        return Err(not_avro("no Avro magic (Obj 1) at the start"));
    };
    let mut cur = Cursor(&mut cur);
    let mut schema_json: Option<&[u8]> = None;
    let mut codec = Codec::Null;
    let mut entries = 0usize;
    loop {
        let count = cur
            .block_len()
            .map_err(|e| not_avro(&format!("header metadata: {e}")))?;
        if count == 0 {
            break;
        }
        entries = entries.saturating_add(count);
        if entries > MAX_METADATA_ENTRIES {
            return Err(DecodeError::Refused(format!(
                "the header holds more than {MAX_METADATA_ENTRIES} metadata entries"
            )));
        }
        for _ in 0..count {
            let key = cur
                .bytes(256)
                .map_err(|e| not_avro(&format!("header metadata key: {e}")))?;
            let value = cur.bytes(MAX_SCHEMA_BYTES).map_err(|e| match e {
                WalkError::Limit(_) => DecodeError::Refused(format!(
                    "header metadata {:?} is larger than {MAX_SCHEMA_BYTES} bytes",
                    String::from_utf8_lossy(key)
                )),
                WalkError::Corrupt(e) => not_avro(&format!("header metadata value: {e}")),
            })?;
            match key {
                b"avro.schema" => schema_json = Some(value),
                b"avro.codec" => {
                    codec = match value {
                        b"null" => Codec::Null,
                        b"deflate" => Codec::Deflate,
                        other => {
                            return Err(DecodeError::Refused(format!(
                                "codec {:?}: only null and deflate are read",
                                String::from_utf8_lossy(other)
                            )));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    let sync: [u8; 16] = cur
        .take(16)
        .ok()
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| not_avro("the header ends before its sync marker"))?;
    let json = schema_json.ok_or_else(|| not_avro("the header has no avro.schema"))?;
    let value: serde_json::Value = serde_json::from_slice(json)
        .map_err(|e| not_avro(&format!("avro.schema is not JSON: {e}")))?;
    super::walk::check_schema_json(&value).map_err(DecodeError::Refused)?;
    let schema = Schema::parse(&value).map_err(|e| not_avro(&format!("avro.schema: {e}")))?;
    super::walk::check_schema(&schema).map_err(DecodeError::Refused)?;
    let rest = *cur.0;
    Ok(Header {
        schema,
        codec,
        sync,
        rest,
    })
}

impl<'a> Header<'a> {
    /// The blocks after the header, each checked and inflated.
    pub fn blocks(&self) -> Blocks<'a> {
        Blocks {
            rest: self.rest,
            sync: self.sync,
            codec: self.codec,
            index: 0,
        }
    }
}

/// One block: its records, inflated.
pub struct Block<'a> {
    pub records: usize,
    pub data: std::borrow::Cow<'a, [u8]>,
}

/// The blocks of a container, in order.
pub struct Blocks<'a> {
    rest: &'a [u8],
    sync: [u8; 16],
    codec: Codec,
    index: usize,
}

impl<'a> Iterator for Blocks<'a> {
    type Item = Result<Block<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let block = self.read();
        if block.is_err() {
            self.rest = &[];
        }
        self.index += 1;
        Some(block)
    }
}

impl<'a> Blocks<'a> {
    fn read(&mut self) -> Result<Block<'a>, DecodeError> {
        let index = self.index;
        let corrupt = |e: String| DecodeError::NotAvro(format!("block {index}: {e}"));
        let refused = |e: String| DecodeError::Refused(format!("block {index}: {e}"));
        let mut rest = self.rest;
        let mut cur = Cursor(&mut rest);
        let records = cur.long().map_err(|e| corrupt(e.to_string()))?;
        if records <= 0 {
            return Err(corrupt(format!("a block of {records} records")));
        }
        if records as u64 > MAX_BLOCK_RECORDS as u64 {
            return Err(refused(format!(
                "{records} records, above the limit of {MAX_BLOCK_RECORDS} per block"
            )));
        }
        let size = cur.long().map_err(|e| corrupt(e.to_string()))?;
        if size < 0 {
            return Err(corrupt(format!("a block of {size} bytes")));
        }
        if size as u64 > MAX_BLOCK_BYTES as u64 {
            return Err(refused(format!(
                "{size} bytes, above the limit of {MAX_BLOCK_BYTES} per block"
            )));
        }
        let stored = cur
            .take(size as usize)
            .map_err(|_| corrupt("truncated".to_owned()))?;
        let sync = cur
            .take(16)
            .map_err(|_| corrupt("truncated before its sync marker".to_owned()))?;
        if sync != self.sync {
            return Err(corrupt(
                "its sync marker differs from the header's".to_owned(),
            ));
        }
        self.rest = rest;
        let data = match self.codec {
            Codec::Null => std::borrow::Cow::Borrowed(stored),
            Codec::Deflate => std::borrow::Cow::Owned(inflate(stored).map_err(|e| match e {
                WalkError::Limit(e) => refused(e),
                WalkError::Corrupt(e) => corrupt(e),
            })?),
        };
        Ok(Block {
            records: records as usize,
            data,
        })
    }
}

/// Inflate a raw deflate stream (RFC 1951, as Avro writes it), stopping one
/// byte past [`MAX_BLOCK_BYTES`]: a bomb costs the limit, never its size.
pub fn inflate(stored: &[u8]) -> Result<Vec<u8>, WalkError> {
    let mut out = Vec::new();
    flate2::read::DeflateDecoder::new(stored)
        .take(MAX_BLOCK_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| WalkError::Corrupt(format!("not a deflate stream: {e}")))?;
    if out.len() > MAX_BLOCK_BYTES {
        return Err(WalkError::Limit(format!(
            "inflates to more than the limit of {MAX_BLOCK_BYTES} bytes per block"
        )));
    }
    Ok(out)
}
