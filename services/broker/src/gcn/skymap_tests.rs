//! The sky map reader on maps written here (by the integration tests'
//! writer), and on broken ones: every truncation and thousands of
//! corruptions end in an error, never a panic.

use super::*;
use crate::filters::preview::Region;
use test_maps::{COARSE, FINE, disc_map, multiorder_fits, pixel_area_deg2, uniq};

#[path = "../../../../tests/suite/common/skymap.rs"]
mod test_maps;

const HEADER: &[(&str, &str)] = &[
    ("OBJECT", "'S230825x'"),
    ("DATE-OBS", "'2023-08-25T06:42:07.123456'"),
    ("MJD-OBS", "60181.279249"),
    ("INSTRUME", "'H1,L1'"),
    ("CREATOR", "'BAYESTAR'"),
    ("DATE", "'2023-08-25T06:43:01.000000'"),
];

/// Twelve order-0 pixels, all the sky, most of the probability in one.
fn tiny() -> Vec<u8> {
    let mut rows: Vec<(i64, f64)> = (0..12).map(|p| (uniq(0, p), 0.001)).collect();
    rows[5].1 = 2.0;
    multiorder_fits(HEADER, &rows)
}

fn in_moc(moc: &str, order: u8, ipix: u64) -> bool {
    let Ok(Region::Moc(m)) = Region::from_ascii(moc) else {
        panic!("the stored MOC reads back: {moc}");
    };
    let (lon, lat) = cdshealpix::nested::center(order, ipix);
    let cell = cdshealpix::nested::hash(INDEX_DEPTH, lon, lat);
    m.contains_val(&cell)
}

#[test]
fn the_ninety_percent_region_is_the_densest_pixels() {
    let map = disc_map(250.0, -21.0, 1.5, 3.0, 0.91);
    assert!(
        map.inner.len() > 10 && map.inner.len() < 91,
        "{}",
        map.inner.len()
    );
    let m = read(&multiorder_fits(HEADER, &map.rows)).expect("reads");
    assert_eq!(m.object.as_deref(), Some("S230825x"));
    assert_eq!(m.time.to_string(), "2023-08-25T06:42:07.123Z");
    assert_eq!(
        m.made.map(|t| t.to_string()).as_deref(),
        Some("2023-08-25T06:43:01Z")
    );
    assert_eq!(m.instruments.as_deref(), Some("H1,L1"));
    assert_eq!(m.creator.as_deref(), Some("BAYESTAR"));
    assert_eq!((m.pixels, m.max_order), (map.rows.len(), FINE));
    let r = &m.region;
    assert_eq!(r.level, CREDIBLE_LEVEL);
    assert_eq!(r.pixels, map.inner.len());
    assert_eq!(r.moc_depth, FINE);
    let area = map.inner.len() as f64 * pixel_area_deg2(FINE);
    assert!(
        (r.area_deg2 - area).abs() < 1e-9 * area,
        "{} {area}",
        r.area_deg2
    );
    // A circle of that area.
    let cap = 2.0 * PI * (1.0 - r.equivalent_radius_deg.to_radians().cos()) * DEG2_PER_SR;
    assert!((cap - area).abs() < 1e-6 * area, "{cap} {area}");
    assert!(crate::gcn::model::separation_deg(r.peak_ra_deg, r.peak_dec_deg, 250.0, -21.0) < 1.6);
    // The MOC is the inner pixels: each in, their neighbours of the
    // annulus out.
    for p in &map.inner {
        assert!(in_moc(&r.moc, FINE, *p), "inner pixel {p}");
    }
    let outside = map
        .rows
        .iter()
        .filter_map(|(u, _)| from_uniq(*u))
        .filter(|(o, p)| *o == FINE && !map.inner.contains(p))
        .take(200);
    for (o, p) in outside {
        assert!(!in_moc(&r.moc, o, p), "pixel {p} is not in the region");
    }
}

#[test]
fn the_time_falls_back_to_mjd_and_gzip_is_read() {
    let rows: Vec<(i64, f64)> = (0..12).map(|p| (uniq(0, p), 1.0)).collect();
    let bytes = multiorder_fits(&[("MJD-OBS", "57982.52852350")], &rows);
    let m = read(&bytes).expect("reads");
    assert_eq!(m.time.to_string(), "2017-08-17T12:41:04.430Z");
    assert_eq!(m.object, None);
    // A uniform map: 90% of the sky is eleven of the twelve pixels.
    assert_eq!(m.region.pixels, 11);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &bytes).expect("gzip");
    let zipped = gz.finish().expect("gzip");
    assert!(looks_like(&zipped) && looks_like(&bytes));
    assert_eq!(read(&zipped), Ok(m));
    assert!(
        read(&zipped[..zipped.len() / 2])
            .expect_err("half a gzip")
            .starts_with("gzip")
    );
}

#[test]
fn nuniq_indices_are_decoded() {
    assert_eq!(from_uniq(4), Some((0, 0)));
    assert_eq!(from_uniq(15), Some((0, 11)));
    assert_eq!(from_uniq(16), Some((1, 0)));
    assert_eq!(from_uniq(uniq(7, 12345)), Some((7, 12345)));
    assert_eq!(from_uniq(uniq(29, 0)), Some((29, 0)));
    for bad in [i64::MIN, -1, 0, 3, i64::MAX] {
        assert_eq!(from_uniq(bad), None, "{bad}");
    }
}

/// The tiny map with the card `key` replaced by `value` (or added).
fn with(key: &str, value: &str) -> Vec<u8> {
    let mut header: Vec<(&str, &str)> = HEADER.iter().copied().filter(|(k, _)| *k != key).collect();
    header.insert(0, (key, value));
    let mut rows: Vec<(i64, f64)> = (0..12).map(|p| (uniq(0, p), 0.1)).collect();
    rows[5].1 = 2.0;
    multiorder_fits(&header, &rows)
}

/// A header card's text as the writer lays it out.
fn kw(key: &str, value: &str) -> String {
    format!("{key:<8}= {value:>20}")
}

/// Replace `from` by `to` (same length) in the headers.
fn patched(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap_or_else(|| panic!("{from} in the file"));
    let mut out = bytes.to_vec();
    out[at..at + to.len()].copy_from_slice(to.as_bytes());
    out
}

#[test]
fn broken_maps_are_refused_naming_what_is_wrong() {
    let ok = tiny();
    assert!(read(&ok).is_ok());
    let swap = |key: &str, from: &str, to: &str| patched(&ok, &kw(key, from), &kw(key, to));
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"SIMPLE  =  F".to_vec(), "cut short"),
        (swap("SIMPLE", "T", "F"), "SIMPLE"),
        (swap("NAXIS2", "12", "99999999999999999999"), "NAXIS2"),
        (swap("NAXIS2", "12", "1000000000"), "NAXIS2"),
        (swap("NAXIS1", "40", "41"), "NAXIS1"),
        (swap("TFORM1", "'K'", "'D'"), "UNIQ"),
        (swap("TFORM2", "'D'", "'1Z'"), "TFORM2"),
        (swap("TFORM2", "'D'", "'K'"), "PROBDENSITY"),
        (swap("TTYPE1", "'UNIQ'", "'UNIX'"), "UNIQ column"),
        (swap("ORDERING", "'NUNIQ'", "'NESTE'"), "ORDERING"),
        (swap("COORDSYS", "'C'", "'G'"), "COORDSYS"),
        (swap("TFIELDS", "5", "5000"), "TFIELDS"),
        (with("OBJECT", "'S230825x; DROP'"), "OBJECT"),
        (with("DATE-OBS", "'yesterday'"), "DATE-OBS"),
        (with("TZERO1", "9223372036854775808"), "scaled"),
    ];
    for (bytes, needle) in &cases {
        let err = read(bytes).expect_err(needle);
        assert!(err.contains(needle), "{needle}: {err}");
    }
    // No time at all.
    let rows: Vec<(i64, f64)> = (0..12).map(|p| (uniq(0, p), 1.0)).collect();
    let err = read(&multiorder_fits(&[], &rows)).expect_err("no time");
    assert!(err.contains("DATE-OBS"), "{err}");
    // Bad pixels: an index that is none, a negative or NaN density, a
    // pixel twice (an order-1 pixel inside an order-0 one), all zero.
    let bad_rows: Vec<(Vec<(i64, f64)>, &str)> = vec![
        (vec![(3, 1.0)], "UNIQ 3"),
        (vec![(4, -1.0)], "PROBDENSITY -1"),
        (vec![(4, f64::NAN)], "PROBDENSITY NaN"),
        (vec![(4, 1.0), (uniq(1, 2), 1.0)], "overlap"),
        (vec![(4, 0.0), (5, 0.0)], "add up to 0"),
        (vec![], "no pixels"),
    ];
    for (rows, needle) in bad_rows {
        let err = read(&multiorder_fits(HEADER, &rows)).expect_err(needle);
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn every_truncation_is_an_error_and_none_panics() {
    let ok = tiny();
    // Two header blocks then 12 rows of 40 bytes; the padding after them
    // is not needed.
    let needed = 2 * super::super::fits::BLOCK + 12 * 40;
    for n in 0..ok.len() {
        let r = read(&ok[..n]);
        assert_eq!(r.is_ok(), n >= needed, "{n} bytes: {r:?}");
    }
}

#[test]
fn corrupted_maps_never_panic() {
    let ok = tiny();
    // A fixed pseudo-random sequence: the same corruptions every run.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let interesting = b"0123456789-+.'= TFEDKJ/\x00\xff";
    let mut refused = 0;
    for _ in 0..3000 {
        let mut bytes = ok.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() % bytes.len() as u64) as usize;
            bytes[at] = interesting[(next() % interesting.len() as u64) as usize];
        }
        let cut = if next() % 4 == 0 {
            (next() % bytes.len() as u64) as usize
        } else {
            bytes.len()
        };
        if read(&bytes[..cut]).is_err() {
            refused += 1;
        }
    }
    assert!(refused > 0, "some corruptions are refused");
}

#[test]
fn a_coarse_map_keeps_its_order() {
    // Only order-4 pixels: the region's MOC is of depth 4.
    let rows: Vec<(i64, f64)> = (0..12u64 << 8)
        .map(|p| (uniq(COARSE, p), if p < 10 { 1000.0 } else { 0.01 }))
        .collect();
    let m = read(&multiorder_fits(HEADER, &rows)).expect("reads");
    assert_eq!(m.region.moc_depth, COARSE);
    assert_eq!(m.region.pixels, 10);
    assert!(in_moc(&m.region.moc, COARSE, 3));
    assert!(!in_moc(&m.region.moc, COARSE, 11));
}
