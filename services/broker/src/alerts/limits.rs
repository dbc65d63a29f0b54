//! What the Avro readers share and nothing else: the limits a container
//! must stay within ([`super::container`] explains each), why a walk or a
//! decode stopped, and the cursor over Avro's primitive encodings. A leaf:
//! [`super::walk`], [`super::container`] and [`super::avro`] all use it.

/// Largest writer schema (JSON) accepted: ten times ZTF 4.02's 25.6 KB.
pub const MAX_SCHEMA_BYTES: usize = 256 * 1024;
/// Most header metadata entries: real files carry two (`avro.schema`,
/// `avro.codec`).
pub const MAX_METADATA_ENTRIES: usize = 16;
/// Deepest writer schema accepted, counting each record, array, map and
/// union on the way to a leaf, and the leaf: more than twice the deepest
/// real one, Fink's 7 (ZTF's is 6: alert → union → array → prv_candidate →
/// union → double).
pub const MAX_SCHEMA_DEPTH: usize = 16;
/// Most records in one block: real containers hold one per block.
pub const MAX_BLOCK_RECORDS: usize = 1_000;
/// Largest block, as stored and once inflated: 128 times the largest real
/// one (65 KB). Also `apache_avro`'s allocation limit.
pub const MAX_BLOCK_BYTES: usize = 8 * 1024 * 1024;
/// Most values (each record, field, item, union branch) in one alert: nine
/// times the most a real alert holds (10,665, a Fink alert). A decoded
/// value costs up to about a hundred bytes, even one encoded in no byte.
pub const MAX_ALERT_VALUES: usize = 100_000;
/// Most values in the `candidate` records of one file, all alerts
/// together: what a file keeps decoded (as JSON) beside its datums. A ZTF
/// candidate holds about 110, so this is some 2,000 real alerts a file (ZTF
/// sends one a file; the Fink container here holds 31).
pub const MAX_FILE_CANDIDATE_VALUES: usize = 250_000;
/// The stack of the thread a file is decoded on. The decoders recurse once
/// per nesting level, a few KiB a level in a debug build, and a file nests
/// at most [`MAX_SCHEMA_DEPTH`] levels: 4 MiB leaves a wide margin.
pub const DECODE_STACK_BYTES: usize = 4 * 1024 * 1024;

/// Set `apache_avro`'s process-wide allocation limit to a block's size. The
/// crate fixes the limit the first time it decodes anything, so the broker
/// calls this when it starts, and every decode calls it again (it is
/// idempotent) in case something decoded earlier.
pub fn limit_allocations() -> usize {
    apache_avro::max_allocation_bytes(MAX_BLOCK_BYTES)
}

/// Why a walk stopped: a limit (the file is refused), or bytes that do not
/// hold what the schema says (the file is corrupt).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WalkError {
    #[error("{0}")]
    Limit(String),
    #[error("{0}")]
    Corrupt(String),
}

/// Why a file could not be read. Every alert of a file is decoded before any
/// is stored, so a bad file stores nothing.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("not an Avro object-container file: {0}")]
    NotAvro(String),
    #[error("alert {index} cannot be decoded (truncated or corrupt): {reason}")]
    Record { index: usize, reason: String },
    #[error("alert {index}: {reason}")]
    NotAnAlert { index: usize, reason: String },
    #[error("the file holds no alerts")]
    Empty,
    /// The file declares more than an alert packet needs (see
    /// [`super::container`]'s limits); nothing of it was decoded.
    #[error("refused: {0}")]
    Refused(String),
    /// No thread could decode the file: the broker's trouble, not the file's.
    #[error("the decoding thread failed: {0}")]
    Thread(String),
}

/// Avro's primitive encodings over a byte slice.
pub(super) struct Cursor<'c, 'b>(pub(super) &'c mut &'b [u8]);

impl<'b> Cursor<'_, 'b> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'b [u8], WalkError> {
        if n > self.0.len() {
            return Err(WalkError::Corrupt(format!(
                "truncated: {n} bytes needed, {} left",
                self.0.len()
            )));
        }
        let (head, tail) = self.0.split_at(n);
        *self.0 = tail;
        Ok(head)
    }

    /// A zig-zag varint, as the decoder reads it (at most ten bytes).
    pub(super) fn long(&mut self) -> Result<i64, WalkError> {
        let mut z = 0u64;
        for j in 0..10 {
            let [b, ..] = **self.0 else {
                return Err(WalkError::Corrupt("truncated inside a number".to_owned()));
            };
            *self.0 = &self.0[1..];
            z |= u64::from(b & 0x7f) << (j * 7);
            if b & 0x80 == 0 {
                return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
            }
        }
        Err(WalkError::Corrupt(
            "a number longer than ten bytes".to_owned(),
        ))
    }

    /// A length-prefixed byte string of at most `max` bytes.
    pub(super) fn bytes(&mut self, max: usize) -> Result<&'b [u8], WalkError> {
        let n = self.long()?;
        if n < 0 {
            return Err(WalkError::Corrupt(format!("a length of {n}")));
        }
        if n as u64 > max as u64 {
            return Err(WalkError::Limit(format!("{n} bytes, above {max}")));
        }
        self.take(n as usize)
    }

    /// The item count of an array or map block (a negative count is
    /// followed by the block's size in bytes); 0 ends the sequence.
    pub(super) fn block_len(&mut self) -> Result<usize, WalkError> {
        let n = self.long()?;
        let n = if n < 0 {
            self.long()?;
            n.checked_neg()
                .ok_or_else(|| WalkError::Corrupt("a block count overflows".to_owned()))?
        } else {
            n
        };
        usize::try_from(n).map_err(|_| WalkError::Corrupt(format!("a block of {n} items")))
    }
}
