//! Multi-order sky maps the tests write themselves: a FITS file laid out
//! as LIGO/Virgo/KAGRA's (an empty primary HDU, then a binary table of
//! UNIQ, PROBDENSITY and the three distance columns), and a map of a disc
//! whose pixels are known, so a test can say which pixels the 90% region
//! must be. Shared by the broker's unit tests (through `#[path]`) and the
//! integration tests; it needs only `std` and `cdshealpix`.

use std::f64::consts::PI;

const BLOCK: usize = 2880;

/// The NUNIQ index of a nested pixel.
pub fn uniq(order: u8, ipix: u64) -> i64 {
    i64::try_from((4u64 << (2 * u32::from(order))) + ipix).expect("order at most 29")
}

/// Area of a pixel of `order`, square degrees.
pub fn pixel_area_deg2(order: u8) -> f64 {
    let sr = PI / 3.0 / (1u64 << (2 * u32::from(order))) as f64;
    sr * (180.0 / PI).powi(2)
}

fn card(text: &str) -> Vec<u8> {
    assert!(text.len() <= 80, "card too long: {text}");
    format!("{text:<80}").into_bytes()
}

fn keyword(key: &str, value: &str) -> Vec<u8> {
    card(&format!("{key:<8}= {value:>20}"))
}

fn pad(out: &mut Vec<u8>, fill: u8) {
    out.resize(out.len().div_ceil(BLOCK) * BLOCK, fill);
}

/// A multi-order FITS file: `header` cards (keyword, value as FITS writes
/// it: `'S230825x'`, `58598.3`) go in the table's header; each row is
/// `(uniq, probdensity)`, distances filled in.
pub fn multiorder_fits(header: &[(&str, &str)], rows: &[(i64, f64)]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in [
        keyword("SIMPLE", "T"),
        keyword("BITPIX", "8"),
        keyword("NAXIS", "0"),
        keyword("EXTEND", "T"),
        card("END"),
    ] {
        out.extend(c);
    }
    pad(&mut out, b' ');
    let columns = [
        ("UNIQ", "K"),
        ("PROBDENSITY", "D"),
        ("DISTMU", "D"),
        ("DISTSIGMA", "D"),
        ("DISTNORM", "D"),
    ];
    let mut cards = vec![
        keyword("XTENSION", "'BINTABLE'"),
        keyword("BITPIX", "8"),
        keyword("NAXIS", "2"),
        keyword("NAXIS1", "40"),
        keyword("NAXIS2", &rows.len().to_string()),
        keyword("PCOUNT", "0"),
        keyword("GCOUNT", "1"),
        keyword("TFIELDS", &columns.len().to_string()),
    ];
    for (i, (name, form)) in columns.iter().enumerate() {
        cards.push(keyword(&format!("TTYPE{}", i + 1), &format!("'{name}'")));
        cards.push(keyword(&format!("TFORM{}", i + 1), &format!("'{form}'")));
    }
    cards.push(keyword("PIXTYPE", "'HEALPIX'"));
    cards.push(keyword("ORDERING", "'NUNIQ'"));
    cards.push(keyword("COORDSYS", "'C'"));
    for (k, v) in header {
        cards.push(keyword(k, v));
    }
    cards.push(card("END"));
    for c in cards {
        out.extend(c);
    }
    pad(&mut out, b' ');
    for (u, d) in rows {
        out.extend(u.to_be_bytes());
        out.extend(d.to_be_bytes());
        out.extend(100.0f64.to_be_bytes());
        out.extend(20.0f64.to_be_bytes());
        out.extend(1e-4f64.to_be_bytes());
    }
    pad(&mut out, 0);
    out
}

/// A map of the whole sky whose probability is mostly in a disc: the
/// pixels of `FINE` order whose centres are within `inner_deg` of
/// (`ra`, `dec`) hold `p_inner` of it, those out to `outer_deg` 0.06, and
/// the rest of the sky (pixels of order `COARSE`, split to `FINE` next to
/// the disc) what is left. With under ninety-one inner pixels and
/// `p_inner` = 0.91, the 90% region is exactly the inner pixels.
pub struct DiscMap {
    pub rows: Vec<(i64, f64)>,
    /// The inner pixels (nested, order `FINE`).
    pub inner: Vec<u64>,
}

pub const FINE: u8 = 7;
pub const COARSE: u8 = 4;

pub fn disc_map(ra: f64, dec: f64, inner_deg: f64, outer_deg: f64, p_inner: f64) -> DiscMap {
    let (lon0, lat0) = (ra.to_radians(), dec.to_radians());
    let sep = |(lon, lat): (f64, f64)| {
        let h = ((lat - lat0) / 2.0).sin().powi(2)
            + lat.cos() * lat0.cos() * ((lon - lon0) / 2.0).sin().powi(2);
        (2.0 * h.sqrt().asin()).to_degrees()
    };
    let children = 1u64 << (2 * u32::from(FINE - COARSE));
    let (mut inner, mut annulus, mut background_fine, mut background_coarse) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for coarse in 0..12u64 << (2 * u32::from(COARSE)) {
        let fine: Vec<(u64, f64)> = (coarse * children..(coarse + 1) * children)
            .map(|p| (p, sep(cdshealpix::nested::center(FINE, p))))
            .collect();
        if fine.iter().all(|(_, d)| *d > outer_deg) {
            background_coarse.push(coarse);
            continue;
        }
        for (p, d) in fine {
            if d <= inner_deg {
                inner.push(p);
            } else if d <= outer_deg {
                annulus.push(p);
            } else {
                background_fine.push(p);
            }
        }
    }
    let (fine_sr, coarse_sr) = (
        pixel_area_deg2(FINE) / (180.0 / PI).powi(2),
        pixel_area_deg2(COARSE) / (180.0 / PI).powi(2),
    );
    let d_inner = p_inner / (inner.len() as f64 * fine_sr);
    let d_annulus = 0.06 / (annulus.len() as f64 * fine_sr);
    let rest_sr =
        background_fine.len() as f64 * fine_sr + background_coarse.len() as f64 * coarse_sr;
    let d_rest = (1.0 - p_inner - 0.06) / rest_sr;
    let mut rows: Vec<(i64, f64)> = Vec::new();
    rows.extend(inner.iter().map(|p| (uniq(FINE, *p), d_inner)));
    rows.extend(annulus.iter().map(|p| (uniq(FINE, *p), d_annulus)));
    rows.extend(background_fine.iter().map(|p| (uniq(FINE, *p), d_rest)));
    rows.extend(background_coarse.iter().map(|p| (uniq(COARSE, *p), d_rest)));
    rows.sort_by_key(|(u, _)| *u);
    DiscMap { rows, inner }
}
