//! Gravitational-wave sky maps: a LIGO/Virgo/KAGRA multi-order HEALPix
//! map in FITS (`bayestar.multiorder.fits`), read with [`super::fits`], and
//! turned into the event's localisation: the 90% credible region as a MOC.
//!
//! The map is a binary table of pixels of mixed orders, each named by its
//! NUNIQ index (`UNIQ` = 4·4^order + ipix, nested scheme) with a
//! probability density per steradian (`PROBDENSITY`); a pixel's
//! probability is its density times its area, 4π / (12·4^order). The
//! credible region at level p is the smallest set of pixels holding p of
//! the probability: pixels by density, highest first, until the sum
//! reaches p (the pixel that crosses it included).
//!
//! The header says which event the map is of: `OBJECT` (`S190425z`, a
//! GraceDB id), `DATE-OBS` or `MJD-OBS` (the merger time). Gzipped files
//! are read too, their expanded size bounded like a plain file's.

use super::fits::{Column, ColumnType, Header, Table};
use super::model::DateObs;
use crate::sky::{INDEX_DEPTH, MAX_ASCII_MOC, SkyMoc};
use std::f64::consts::PI;
use std::io::Read;
use std::ops::Range;

/// The credible level of the region stored.
pub const CREDIBLE_LEVEL: f64 = 0.9;
/// Most pixels a map may have: LVK's maps have tens of thousands; this is
/// what 64 MiB of 16-byte rows holds.
pub const MAX_PIXELS: usize = 4 * 1024 * 1024;
/// Largest file, plain or once expanded.
pub const MAX_BYTES: usize = 64 * 1024 * 1024;
/// HDUs read in search of the pixel table.
const MAX_HDUS: usize = 8;
/// Square degrees in a steradian.
const DEG2_PER_SR: f64 = (180.0 / PI) * (180.0 / PI);
/// MJD of the Unix epoch.
const MJD_UNIX_EPOCH: f64 = 40_587.0;

/// A sky map, read.
#[derive(Clone, Debug, PartialEq)]
pub struct SkyMap {
    /// `OBJECT`: the event's name (a superevent or GraceDB id).
    pub object: Option<String>,
    /// The event time, from `DATE-OBS` (else `MJD-OBS`).
    pub time: DateObs,
    /// When the map was made (`DATE`), when stated.
    pub made: Option<DateObs>,
    /// `INSTRUME` (`H1,L1,V1`) and `CREATOR` (`BAYESTAR`), when stated.
    pub instruments: Option<String>,
    pub creator: Option<String>,
    /// Pixels in the map, and the finest order among them.
    pub pixels: usize,
    pub max_order: u8,
    pub region: CredibleRegion,
}

/// The credible region of a map.
#[derive(Clone, Debug, PartialEq)]
pub struct CredibleRegion {
    pub level: f64,
    /// The region as an IVOA ASCII MOC, at most [`MAX_ASCII_MOC`] bytes
    /// (a region too fine for that is stored a depth coarser, a superset).
    pub moc: String,
    /// The MOC's depth: the finest pixel order in the region, or coarser
    /// when it had to be degraded to fit.
    pub moc_depth: u8,
    /// Area of the region's pixels, square degrees.
    pub area_deg2: f64,
    /// Pixels in the region.
    pub pixels: usize,
    /// Centre of the pixel of highest density, degrees.
    pub peak_ra_deg: f64,
    pub peak_dec_deg: f64,
    /// Radius of a circle of the region's area, degrees: what orders a
    /// sky map among an event's error circles.
    pub equivalent_radius_deg: f64,
}

/// Whether `bytes` look like FITS (or gzip, which may hold FITS).
pub fn looks_like(bytes: &[u8]) -> bool {
    bytes.starts_with(b"SIMPLE  =") || bytes.starts_with(&[0x1f, 0x8b])
}

/// Read a multi-order sky map, plain or gzipped.
pub fn read(bytes: &[u8]) -> Result<SkyMap, String> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        let limit = u64::try_from(MAX_BYTES).unwrap_or(u64::MAX) + 1;
        flate2::read::GzDecoder::new(bytes)
            .take(limit)
            .read_to_end(&mut out)
            .map_err(|e| format!("gzip: {e}"))?;
        if out.len() > MAX_BYTES {
            return Err(format!("gzip: expands to more than {MAX_BYTES} bytes"));
        }
        return read_fits(&out);
    }
    read_fits(bytes)
}

fn read_fits(bytes: &[u8]) -> Result<SkyMap, String> {
    let primary = Header::read(bytes, 0, 0)?;
    if primary.logical("SIMPLE")? != Some(true) {
        return Err("not FITS: the first card is not SIMPLE = T".to_owned());
    }
    let mut pos = primary.next_hdu(bytes.len())?;
    for index in 1..=MAX_HDUS {
        if pos >= bytes.len() {
            break;
        }
        let ext = Header::read(bytes, pos, index)?;
        if ext.string("XTENSION")?.as_deref() == Some("BINTABLE") {
            let table = ext.table(bytes)?;
            if table.column("UNIQ").is_some() {
                return sky_map(&primary, &ext, &table);
            }
        }
        pos = ext.next_hdu(bytes.len())?;
    }
    Err(
        "no binary table with a UNIQ column: not a multi-order sky map (a flat HEALPix map is not read)"
            .to_owned(),
    )
}

/// A header value from the table's header, else the primary's.
fn either<T>(
    ext: &Header,
    primary: &Header,
    get: impl Fn(&Header) -> Result<Option<T>, String>,
) -> Result<Option<T>, String> {
    match get(ext)? {
        Some(v) => Ok(Some(v)),
        None => get(primary),
    }
}

fn sky_map(primary: &Header, ext: &Header, table: &Table<'_>) -> Result<SkyMap, String> {
    let at = ext.index;
    if let Some(o) = ext.string("ORDERING")?
        && !o.eq_ignore_ascii_case("NUNIQ")
    {
        return Err(format!("HDU {at}: ORDERING = '{o}', not NUNIQ"));
    }
    if let Some(c) = either(ext, primary, |h| h.string("COORDSYS"))?
        && !c.eq_ignore_ascii_case("C")
    {
        return Err(format!(
            "HDU {at}: COORDSYS = '{c}': only maps in celestial (equatorial) coordinates, C, are read"
        ));
    }
    let uniq = wanted_column(table, ext, "UNIQ", &[ColumnType::Int64, ColumnType::Int32])?;
    let dens = wanted_column(
        table,
        ext,
        "PROBDENSITY",
        &[ColumnType::Float64, ColumnType::Float32],
    )?;
    if table.rows == 0 {
        return Err(format!("HDU {at}: the table has no pixels"));
    }
    if table.rows > MAX_PIXELS {
        return Err(format!(
            "HDU {at}: {} pixels, more than {MAX_PIXELS}",
            table.rows
        ));
    }
    let pixels = pixels(table, uniq, dens)?;
    let region = credible_region(&pixels, CREDIBLE_LEVEL)?;
    Ok(SkyMap {
        object: object(ext, primary)?,
        time: event_time(ext, primary)?,
        made: either(ext, primary, |h| h.string("DATE"))?.and_then(|d| DateObs::parse(&d).ok()),
        instruments: either(ext, primary, |h| h.string("INSTRUME"))?.map(|s| printable(&s, 100)),
        creator: either(ext, primary, |h| h.string("CREATOR"))?.map(|s| printable(&s, 100)),
        pixels: pixels.len(),
        max_order: pixels.iter().map(|p| p.order).max().unwrap_or(0),
        region,
    })
}

/// A column the map needs, of one of `types`, one element a row, without
/// scaling.
fn wanted_column<'t>(
    table: &'t Table<'_>,
    ext: &Header,
    name: &str,
    types: &[ColumnType],
) -> Result<&'t Column, String> {
    let at = ext.index;
    let col = table
        .column(name)
        .ok_or_else(|| format!("HDU {at}: no {name} column"))?;
    if !types.contains(&col.kind) || col.repeat != 1 {
        return Err(format!(
            "HDU {at}: column {name} has TFORM '{}'; a sky map's is {}",
            col.tform,
            if name == "UNIQ" {
                "K (or J)"
            } else {
                "D (or E)"
            }
        ));
    }
    let n = table
        .columns
        .iter()
        .position(|c| std::ptr::eq(c, col))
        .unwrap_or(0)
        + 1;
    let scale = ext.real(&format!("TSCAL{n}"))?.unwrap_or(1.0);
    let zero = ext.real(&format!("TZERO{n}"))?.unwrap_or(0.0);
    if scale != 1.0 || zero != 0.0 {
        return Err(format!(
            "HDU {at}: column {name} is scaled (TSCAL{n}/TZERO{n}); sky maps are not"
        ));
    }
    Ok(col)
}

/// One pixel of the map.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Pixel {
    order: u8,
    ipix: u64,
    /// Probability per steradian.
    density: f64,
}

impl Pixel {
    /// Area in steradians: 4π / (12·4^order).
    fn area(self) -> f64 {
        PI / 3.0 / (1u64 << (2 * u32::from(self.order))) as f64
    }

    /// The cells at depth 29 (the `hpx` index's) the pixel covers.
    fn range(self) -> Range<u64> {
        let shift = 2 * u32::from(INDEX_DEPTH - self.order);
        (self.ipix << shift)..((self.ipix + 1) << shift)
    }
}

/// A NUNIQ index as (order, ipix), if it is one of order at most 29.
fn from_uniq(uniq: i64) -> Option<(u8, u64)> {
    let u = u64::try_from(uniq).ok().filter(|u| *u >= 4)?;
    // 4·4^o ≤ u < 16·4^o, so floor(log2 u) is 2o+2 or 2o+3.
    let order = u8::try_from((63 - u.leading_zeros()) / 2 - 1).ok()?;
    if order > INDEX_DEPTH {
        return None;
    }
    Some((order, u - (4u64 << (2 * u32::from(order)))))
}

fn pixels(table: &Table<'_>, uniq: &Column, dens: &Column) -> Result<Vec<Pixel>, String> {
    let mut out = Vec::with_capacity(table.rows);
    for r in 0..table.rows {
        let row = r + 1;
        let (Some(u), Some(d)) = (table.int(r, uniq), table.real(r, dens)) else {
            return Err(format!("row {row}: cut short"));
        };
        let (order, ipix) = from_uniq(u).ok_or_else(|| {
            format!("row {row}: UNIQ {u} is not a HEALPix NUNIQ index (order 0 to 29)")
        })?;
        if !d.is_finite() || d < 0.0 {
            return Err(format!(
                "row {row}: PROBDENSITY {d} is not a probability density (finite, not negative)"
            ));
        }
        out.push(Pixel {
            order,
            ipix,
            density: d,
        });
    }
    // Pixels that overlap would count their probability twice.
    let mut spans: Vec<(Range<u64>, usize)> = out
        .iter()
        .enumerate()
        .map(|(i, p)| (p.range(), i))
        .collect();
    spans.sort_by_key(|(r, _)| (r.start, r.end));
    for w in spans.windows(2) {
        if w[1].0.start < w[0].0.end {
            return Err(format!(
                "rows {} and {}: the pixels overlap",
                w[0].1 + 1,
                w[1].1 + 1
            ));
        }
    }
    Ok(out)
}

/// The smallest set of pixels holding `level` of the map's probability,
/// as a MOC.
fn credible_region(pixels: &[Pixel], level: f64) -> Result<CredibleRegion, String> {
    let total: f64 = pixels.iter().map(|p| p.density * p.area()).sum();
    if !(total.is_finite() && total > 0.0) {
        return Err(format!(
            "the pixels' probabilities add up to {total}, not a probability"
        ));
    }
    let mut order: Vec<&Pixel> = pixels.iter().collect();
    // Highest density first; ties by position so the region is one.
    order.sort_by(|a, b| {
        b.density
            .total_cmp(&a.density)
            .then(a.range().start.cmp(&b.range().start))
    });
    let mut sum = 0.0;
    let mut taken = Vec::new();
    for p in order {
        taken.push(*p);
        sum += p.density * p.area() / total;
        if sum >= level {
            break;
        }
    }
    let depth = taken.iter().map(|p| p.order).max().unwrap_or(0);
    let area_sr: f64 = taken.iter().map(|p| p.area()).sum();
    let moc = SkyMoc::from_maxdepth_ranges(depth, taken.iter().map(|p| p.range()), None);
    let (moc, moc_depth) = fitting_ascii(moc, depth)?;
    let peak = taken.first().copied().ok_or("the map has no pixels")?;
    let (lon, lat) = cdshealpix::nested::center(peak.order, peak.ipix);
    // A cap of area A has 1 - cos r = A / 2π.
    let cos_r = (1.0 - area_sr / (2.0 * PI)).clamp(-1.0, 1.0);
    Ok(CredibleRegion {
        level,
        moc,
        moc_depth,
        area_deg2: area_sr * DEG2_PER_SR,
        pixels: taken.len(),
        peak_ra_deg: lon.to_degrees().rem_euclid(360.0),
        peak_dec_deg: lat.to_degrees().clamp(-90.0, 90.0),
        equivalent_radius_deg: cos_r.acos().to_degrees().max(1e-9),
    })
}

/// The MOC as ASCII, a depth coarser at a time until it fits
/// [`MAX_ASCII_MOC`].
fn fitting_ascii(moc: SkyMoc, depth: u8) -> Result<(String, u8), String> {
    let mut depth = depth;
    let mut moc = moc;
    loop {
        let text = moc
            .to_ascii()
            .map_err(|e| format!("writing the MOC: {e}"))?;
        if text.len() <= MAX_ASCII_MOC || depth == 0 {
            return Ok((text, depth));
        }
        depth -= 1;
        moc = moc.degraded(depth);
    }
}

/// `OBJECT`, when it is a plausible event name.
fn object(ext: &Header, primary: &Header) -> Result<Option<String>, String> {
    let Some(o) = either(ext, primary, |h| h.string("OBJECT"))? else {
        return Ok(None);
    };
    let o = o.trim();
    if o.is_empty() {
        return Ok(None);
    }
    if o.chars().count() > 64
        || !o
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " _-.:+".contains(c))
    {
        return Err(format!(
            "OBJECT = '{}' is not an event name (letters, digits, _-.:+, at most 64)",
            printable(o, 40)
        ));
    }
    Ok(Some(o.to_owned()))
}

/// The event time: `DATE-OBS`, else `MJD-OBS`. A `DATE-OBS` that is not
/// a time is refused, not passed over: the two could disagree.
fn event_time(ext: &Header, primary: &Header) -> Result<DateObs, String> {
    if let Some(d) = either(ext, primary, |h| h.string("DATE-OBS"))? {
        return DateObs::parse(&d).map_err(|_| {
            format!(
                "DATE-OBS = '{}' is not an ISO 8601 UTC time",
                printable(&d, 40)
            )
        });
    }
    if let Some(mjd) = either(ext, primary, |h| h.real("MJD-OBS"))? {
        let ms = ((mjd - MJD_UNIX_EPOCH) * 86_400_000.0).round();
        // Within DateObs's range the cast is exact.
        if let Some(t) = (ms.abs() < 1e15)
            .then(|| DateObs::from_ms(ms as i64))
            .flatten()
        {
            return Ok(t);
        }
        return Err(format!("MJD-OBS = {mjd} is not a time from 1950 to 2200"));
    }
    Err("neither DATE-OBS nor MJD-OBS: the event time is needed".to_owned())
}

fn printable(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

#[cfg(test)]
#[path = "skymap_tests.rs"]
mod tests;
