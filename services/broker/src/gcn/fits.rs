//! A bounded reader of the part of FITS a multi-order sky map needs: the
//! 2880-byte blocks of 80-character header cards, HDU sizes to step over
//! what is not wanted, and the fixed-width rows of a binary table
//! (`BINTABLE`) with the byte offset and type of each column.
//!
//! Every size read from a header is checked against the bytes actually
//! present before anything is allocated or indexed, so a truncated file, a
//! bad header or a huge `NAXIS2` is an error naming the card at fault, and
//! no input can make this panic. Nothing here knows about HEALPix: that is
//! [`super::skymap`]'s.

use std::collections::HashMap;

/// The FITS block: headers and data are whole blocks.
pub const BLOCK: usize = 2880;
const CARD: usize = 80;
/// Header blocks one HDU may have (36 cards each): a sky map's has one or
/// two; far more is a corrupt or hostile file.
const MAX_HEADER_BLOCKS: usize = 100;

/// One HDU's header: each keyword's raw value text (the first occurrence
/// of a keyword wins), and where its data starts.
#[derive(Clone, Debug)]
pub struct Header {
    values: HashMap<String, String>,
    /// Offset of the first data byte in the file.
    pub data_start: usize,
    /// Which HDU this is (0: primary), for messages.
    pub index: usize,
}

/// A binary table column's storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    /// `J`: 32-bit big-endian integer.
    Int32,
    /// `K`: 64-bit big-endian integer.
    Int64,
    /// `E`: 32-bit IEEE float.
    Float32,
    /// `D`: 64-bit IEEE float.
    Float64,
    /// Anything else; only its width matters.
    Other,
}

/// Where a column is in a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub tform: String,
    pub kind: ColumnType,
    /// Elements per row (the repeat count of `TFORM`).
    pub repeat: u64,
    /// Byte offset within the row.
    pub offset: usize,
}

/// A binary table: its columns and the bytes of its rows (exactly
/// `rows * row_bytes`, all present).
#[derive(Clone, Debug)]
pub struct Table<'a> {
    pub columns: Vec<Column>,
    pub rows: usize,
    pub row_bytes: usize,
    pub data: &'a [u8],
}

impl Header {
    /// The header that starts at `start`: whole blocks up to the one with
    /// `END`.
    pub fn read(bytes: &[u8], start: usize, index: usize) -> Result<Header, String> {
        let mut values = HashMap::new();
        let mut pos = start;
        for _ in 0..MAX_HEADER_BLOCKS {
            let Some(block) = bytes.get(pos..pos.saturating_add(BLOCK)) else {
                return Err(format!(
                    "HDU {index}: the header is cut short at byte {pos} (the file ends before its END card)"
                ));
            };
            pos += BLOCK;
            for (i, card) in block.chunks_exact(CARD).enumerate() {
                if let Some(b) = card.iter().find(|b| !(0x20..=0x7e).contains(*b)) {
                    return Err(format!(
                        "HDU {index}: header card {} holds byte 0x{b:02x}, not printable ASCII",
                        i + 1
                    ));
                }
                // Printable ASCII throughout, so these slices are text.
                let text = String::from_utf8_lossy(card);
                let keyword = text[..8].trim_end();
                if keyword == "END" {
                    return Ok(Header {
                        values,
                        data_start: pos,
                        index,
                    });
                }
                if &text[8..10] == "= " && !keyword.is_empty() {
                    values
                        .entry(keyword.to_owned())
                        .or_insert_with(|| text[10..].to_owned());
                }
            }
        }
        Err(format!(
            "HDU {index}: no END card in {MAX_HEADER_BLOCKS} header blocks"
        ))
    }

    /// Whether the keyword is present with a value.
    pub fn has(&self, keyword: &str) -> bool {
        self.values.contains_key(keyword)
    }

    /// A string value (`'NUNIQ   '`), trailing spaces dropped; `None` when
    /// absent, an error when present but not a string.
    pub fn string(&self, keyword: &str) -> Result<Option<String>, String> {
        let Some(raw) = self.values.get(keyword) else {
            return Ok(None);
        };
        let raw = raw.trim_start();
        let Some(rest) = raw.strip_prefix('\'') else {
            return Err(self.bad(keyword, raw, "a quoted string"));
        };
        // A quote inside the string is written twice.
        let mut out = String::new();
        let mut chars = rest.chars().peekable();
        loop {
            match chars.next() {
                None => return Err(self.bad(keyword, raw, "a string with its closing quote")),
                Some('\'') if chars.peek() == Some(&'\'') => {
                    chars.next();
                    out.push('\'');
                }
                Some('\'') => break,
                Some(c) => out.push(c),
            }
        }
        Ok(Some(out.trim_end().to_owned()))
    }

    /// The value text without its comment, for numbers and logicals.
    fn token(&self, keyword: &str) -> Option<&str> {
        let raw = self.values.get(keyword)?;
        Some(raw.split('/').next().unwrap_or_default().trim())
    }

    pub fn int(&self, keyword: &str) -> Result<Option<i64>, String> {
        match self.token(keyword) {
            None => Ok(None),
            Some(t) => t
                .parse::<i64>()
                .map(Some)
                .map_err(|_| self.bad(keyword, t, "an integer")),
        }
    }

    pub fn real(&self, keyword: &str) -> Result<Option<f64>, String> {
        match self.token(keyword) {
            None => Ok(None),
            // FITS allows a D exponent.
            Some(t) => t
                .replace(['D', 'd'], "E")
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .map(Some)
                .ok_or_else(|| self.bad(keyword, t, "a finite number")),
        }
    }

    pub fn logical(&self, keyword: &str) -> Result<Option<bool>, String> {
        match self.token(keyword) {
            None => Ok(None),
            Some("T") => Ok(Some(true)),
            Some("F") => Ok(Some(false)),
            Some(t) => Err(self.bad(keyword, t, "T or F")),
        }
    }

    /// A required integer within `range`.
    pub fn int_in(
        &self,
        keyword: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<i64, String> {
        let v = self
            .int(keyword)?
            .ok_or_else(|| format!("HDU {}: no {keyword}", self.index))?;
        if !range.contains(&v) {
            return Err(format!(
                "HDU {}: {keyword} = {v} is not within {} to {}",
                self.index,
                range.start(),
                range.end()
            ));
        }
        Ok(v)
    }

    fn bad(&self, keyword: &str, value: &str, wanted: &str) -> String {
        let shown: String = value.chars().take(40).collect();
        format!("HDU {}: {keyword} = {shown} is not {wanted}", self.index)
    }

    /// Bytes of data that follow the header, unpadded:
    /// |BITPIX|/8 × GCOUNT × (PCOUNT + NAXIS1 × … × NAXISn).
    pub fn data_bytes(&self) -> Result<u64, String> {
        let bitpix = self
            .int("BITPIX")?
            .ok_or_else(|| format!("HDU {}: no BITPIX", self.index))?;
        if ![8, 16, 32, 64, -32, -64].contains(&bitpix) {
            return Err(format!(
                "HDU {}: BITPIX = {bitpix} is not a FITS BITPIX",
                self.index
            ));
        }
        let naxis = self.int_in("NAXIS", 0..=999)?;
        if naxis == 0 {
            return Ok(0);
        }
        let too_big = || format!("HDU {}: its data size overflows", self.index);
        let mut elements: u64 = 1;
        for i in 1..=naxis {
            let n = self.int_in(&format!("NAXIS{i}"), 0..=i64::MAX)?;
            elements = elements
                .checked_mul(u64::try_from(n).map_err(|_| too_big())?)
                .ok_or_else(too_big)?;
        }
        let pcount = u64::try_from(self.int("PCOUNT")?.unwrap_or(0))
            .map_err(|_| format!("HDU {}: PCOUNT is negative", self.index))?;
        let gcount = u64::try_from(self.int("GCOUNT")?.unwrap_or(1))
            .map_err(|_| format!("HDU {}: GCOUNT is negative", self.index))?;
        elements
            .checked_add(pcount)
            .and_then(|e| e.checked_mul(gcount))
            .and_then(|e| e.checked_mul(bitpix.unsigned_abs() / 8))
            .ok_or_else(too_big)
    }

    /// Where the next HDU starts: after this one's data, padded to a
    /// block. An error when the file is shorter than the header says.
    pub fn next_hdu(&self, file_len: usize) -> Result<usize, String> {
        let data = self.data_bytes()?;
        let padded = data.div_ceil(BLOCK as u64).saturating_mul(BLOCK as u64);
        let end = (self.data_start as u64).saturating_add(padded);
        let unpadded_end = (self.data_start as u64).saturating_add(data);
        if unpadded_end > file_len as u64 {
            return Err(format!(
                "HDU {}: its header announces {data} bytes of data but the file has {} after the header",
                self.index,
                file_len.saturating_sub(self.data_start)
            ));
        }
        Ok(usize::try_from(end).unwrap_or(usize::MAX))
    }

    /// The binary table of this (`BINTABLE`) extension, its rows checked
    /// to be all present.
    pub fn table<'a>(&self, bytes: &'a [u8]) -> Result<Table<'a>, String> {
        let at = self.index;
        if self.string("XTENSION")?.as_deref() != Some("BINTABLE") {
            return Err(format!("HDU {at}: not a BINTABLE extension"));
        }
        if self.int("BITPIX")? != Some(8) || self.int("NAXIS")? != Some(2) {
            return Err(format!(
                "HDU {at}: a binary table has BITPIX = 8 and NAXIS = 2"
            ));
        }
        if self.int("GCOUNT")?.unwrap_or(1) != 1 {
            return Err(format!("HDU {at}: a binary table has GCOUNT = 1"));
        }
        let row_bytes = self.int_in("NAXIS1", 1..=1 << 20)?;
        let rows = self.int_in("NAXIS2", 0..=i64::MAX)?;
        let fields = self.int_in("TFIELDS", 1..=999)?;
        let mut columns = Vec::new();
        let mut offset: u64 = 0;
        for i in 1..=fields {
            let tform = self
                .string(&format!("TFORM{i}"))?
                .ok_or_else(|| format!("HDU {at}: no TFORM{i} for column {i}"))?;
            let name = self.string(&format!("TTYPE{i}"))?.unwrap_or_default();
            let (repeat, kind, width) = tform_width(&tform).ok_or_else(|| {
                format!("HDU {at}: TFORM{i} = '{tform}' is not a binary table format")
            })?;
            columns.push(Column {
                name,
                tform,
                kind,
                repeat,
                offset: usize::try_from(offset).unwrap_or(usize::MAX),
            });
            offset = offset.saturating_add(width);
        }
        // Both sides are at most 2^20 here or the check fails.
        if offset != row_bytes as u64 {
            return Err(format!(
                "HDU {at}: the columns' formats add up to {offset} bytes a row but NAXIS1 = {row_bytes}"
            ));
        }
        let row_bytes =
            usize::try_from(row_bytes).map_err(|_| format!("HDU {at}: NAXIS1 too large"))?;
        let present = bytes.len().saturating_sub(self.data_start);
        let rows_present = present / row_bytes;
        let rows = usize::try_from(rows).ok().filter(|r| *r <= rows_present).ok_or_else(|| {
            format!(
                "HDU {at}: NAXIS2 = {rows} rows of {row_bytes} bytes, but the file holds {rows_present} rows after the header"
            )
        })?;
        let end = self.data_start + rows * row_bytes;
        Ok(Table {
            columns,
            rows,
            row_bytes,
            data: &bytes[self.data_start..end],
        })
    }
}

impl Table<'_> {
    /// The column whose `TTYPE` is `name` (case-insensitively).
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// The bytes of row `r`'s cell of `col`, `width` bytes long.
    fn cell(&self, r: usize, col: &Column, width: usize) -> Option<&[u8]> {
        let start = r.checked_mul(self.row_bytes)?.checked_add(col.offset)?;
        self.data.get(start..start.checked_add(width)?)
    }

    /// An integer column (`J` or `K`) at row `r`.
    pub fn int(&self, r: usize, col: &Column) -> Option<i64> {
        match col.kind {
            ColumnType::Int64 => self
                .cell(r, col, 8)
                .and_then(|b| b.try_into().ok())
                .map(i64::from_be_bytes),
            ColumnType::Int32 => self
                .cell(r, col, 4)
                .and_then(|b| b.try_into().ok())
                .map(|b| i64::from(i32::from_be_bytes(b))),
            _ => None,
        }
    }

    /// A float column (`E` or `D`) at row `r`.
    pub fn real(&self, r: usize, col: &Column) -> Option<f64> {
        match col.kind {
            ColumnType::Float64 => self
                .cell(r, col, 8)
                .and_then(|b| b.try_into().ok())
                .map(f64::from_be_bytes),
            ColumnType::Float32 => self
                .cell(r, col, 4)
                .and_then(|b| b.try_into().ok())
                .map(|b| f64::from(f32::from_be_bytes(b))),
            _ => None,
        }
    }
}

/// `rT[…]` of a binary table column: the repeat count, the type and the
/// bytes a row holds of it. `None` for what is not a binary table format.
fn tform_width(tform: &str) -> Option<(u64, ColumnType, u64)> {
    let t = tform.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let repeat: u64 = if digits == 0 {
        1
    } else {
        t[..digits].parse().ok()?
    };
    let code = t[digits..].chars().next()?;
    let (kind, bytes) = match code {
        'L' | 'B' | 'A' => (ColumnType::Other, 1),
        'I' => (ColumnType::Other, 2),
        'J' => (ColumnType::Int32, 4),
        'K' => (ColumnType::Int64, 8),
        'E' => (ColumnType::Float32, 4),
        'D' => (ColumnType::Float64, 8),
        'C' | 'P' => (ColumnType::Other, 8),
        'M' | 'Q' => (ColumnType::Other, 16),
        // Bits, packed into bytes.
        'X' => return Some((repeat, ColumnType::Other, repeat.div_ceil(8))),
        _ => return None,
    };
    Some((repeat, kind, repeat.checked_mul(bytes)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_have_their_widths() {
        assert_eq!(tform_width("K"), Some((1, ColumnType::Int64, 8)));
        assert_eq!(tform_width("1D"), Some((1, ColumnType::Float64, 8)));
        assert_eq!(tform_width("3E"), Some((3, ColumnType::Float32, 12)));
        assert_eq!(tform_width("16A"), Some((16, ColumnType::Other, 16)));
        assert_eq!(tform_width("9X"), Some((9, ColumnType::Other, 2)));
        assert_eq!(tform_width("1PE(100)"), Some((1, ColumnType::Other, 8)));
        for bad in [
            "",
            "Z",
            "12",
            "99999999999999999999K",
            "18446744073709551615D",
        ] {
            assert_eq!(tform_width(bad), None, "{bad:?}");
        }
    }

    fn card(text: &str) -> Vec<u8> {
        format!("{text:<80}").into_bytes()
    }

    fn header(cards: &[&str]) -> Vec<u8> {
        let mut out: Vec<u8> = cards.iter().flat_map(|c| card(c)).collect();
        out.extend(card("END"));
        out.resize(out.len().div_ceil(BLOCK) * BLOCK, b' ');
        out
    }

    #[test]
    fn values_are_read_by_type() {
        let bytes = header(&[
            "SIMPLE  =                    T / conforms",
            "BITPIX  =                    8",
            "NAXIS   =                    0",
            "OBJECT  = 'O''Hara  '           / a quote inside",
            "MJD-OBS =     5.8598346E4",
            "BAD     = 'unterminated",
            "OBJECT  = 'second'",
        ]);
        let h = Header::read(&bytes, 0, 0).expect("header");
        assert_eq!(h.logical("SIMPLE"), Ok(Some(true)));
        assert_eq!(h.string("OBJECT"), Ok(Some("O'Hara".to_owned())));
        assert_eq!(h.real("MJD-OBS"), Ok(Some(58598.346)));
        assert!(h.string("BAD").is_err());
        assert!(h.int("OBJECT").is_err());
        assert_eq!(h.string("NOPE"), Ok(None));
        assert_eq!(h.data_start, BLOCK);
        assert_eq!(h.next_hdu(bytes.len()), Ok(BLOCK));
    }

    #[test]
    fn a_header_without_end_or_with_binary_is_refused() {
        let mut bytes = header(&["SIMPLE  =                    T"]);
        let end = bytes.windows(3).position(|w| w == b"END").expect("END");
        bytes[end..end + 3].copy_from_slice(b"   ");
        assert!(
            Header::read(&bytes, 0, 0)
                .expect_err("no END")
                .contains("cut short")
        );
        let mut bytes = header(&["SIMPLE  =                    T"]);
        bytes[85] = 0xff;
        assert!(
            Header::read(&bytes, 0, 0)
                .expect_err("binary")
                .contains("0xff")
        );
    }

    #[test]
    fn a_table_larger_than_the_file_is_refused_before_reading() {
        let mut bytes = header(&[
            "XTENSION= 'BINTABLE'",
            "BITPIX  =                    8",
            "NAXIS   =                    2",
            "NAXIS1  =                   16",
            "NAXIS2  =  9223372036854775807",
            "PCOUNT  =                    0",
            "GCOUNT  =                    1",
            "TFIELDS =                    2",
            "TTYPE1  = 'UNIQ    '",
            "TFORM1  = 'K       '",
            "TTYPE2  = 'PROBDENSITY'",
            "TFORM2  = 'D       '",
        ]);
        bytes.extend([0u8; 32]);
        let h = Header::read(&bytes, 0, 1).expect("header");
        assert!(
            h.table(&bytes)
                .expect_err("too many rows")
                .contains("NAXIS2")
        );
        assert!(
            h.next_hdu(bytes.len())
                .expect_err("too much data")
                .contains("data")
        );
    }
}
