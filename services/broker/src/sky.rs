//! Positions on the sky: the HEALPix index both databases store (NESTED
//! scheme, depth 29, CDS's `cdshealpix`), the index ranges that cover a
//! cone, angular separations, and proper motion.
//!
//! A cone search asks the database for rows whose `hpx` falls in a few
//! ranges (an index range scan), then keeps those whose exact separation is
//! within the radius. Depth 29 cells are ~0.4 mas wide, so a stored index
//! is the position itself for any practical purpose, and a coarser cell is
//! a contiguous range of depth-29 indexes.

use moc::moc::range::RangeMOC;
use moc::qty::Hpx;
use std::ops::RangeInclusive;

/// The depth stored in `hpx` columns.
pub const INDEX_DEPTH: u8 = 29;
/// A MOC of the sky at HEALPix depth up to 29 (the depth of `hpx`): a
/// filter preview's region, a sky map's credible region.
pub type SkyMoc = RangeMOC<u64, Hpx<u64>>;
/// Longest ASCII MOC accepted (or stored for a sky map), in bytes.
pub const MAX_ASCII_MOC: usize = 1 << 20;
/// Degrees in an arcsecond, and the reverse.
pub const DEG_PER_ARCSEC: f64 = 1.0 / 3600.0;

/// The stored HEALPix index of a position (degrees).
pub fn hpx(ra: f64, dec: f64) -> i64 {
    let lon = ra.rem_euclid(360.0).to_radians();
    let lat = dec.clamp(-90.0, 90.0).to_radians();
    let hash = cdshealpix::nested::hash(INDEX_DEPTH, lon, lat);
    // 12·4^29 < 2^63: every depth-29 index fits an i64.
    i64::try_from(hash).expect("depth-29 HEALPix indexes fit in 62 bits")
}

/// Inclusive `hpx` ranges covering a cone of `radius_arcsec` around (ra,
/// dec), in order. They may include cells a little outside the cone (the
/// coverage is approximate from outside), never fewer.
pub fn cone_ranges(ra: f64, dec: f64, radius_arcsec: f64) -> Vec<RangeInclusive<i64>> {
    let radius = (radius_arcsec * DEG_PER_ARCSEC).to_radians();
    // One depth finer than the depth at which the cone overlaps at most a
    // few cells: a handful of ranges, each not much larger than the cone.
    let depth = (cdshealpix::best_starting_depth(radius) + 1).min(INDEX_DEPTH);
    let bmoc = cdshealpix::nested::cone_coverage_approx(
        depth,
        ra.rem_euclid(360.0).to_radians(),
        dec.clamp(-90.0, 90.0).to_radians(),
        radius,
    );
    let shift = 2 * u32::from(INDEX_DEPTH - bmoc.get_depth_max());
    bmoc.to_ranges()
        .iter()
        .filter_map(|r| {
            let start = i64::try_from(r.start << shift).ok()?;
            let end = i64::try_from((r.end << shift) - 1).ok()?;
            Some(start..=end)
        })
        .collect()
}

/// Angular separation in arcseconds (Vincenty's formula: exact at every
/// distance, stable for tiny ones).
pub fn separation_arcsec(ra1: f64, dec1: f64, ra2: f64, dec2: f64) -> f64 {
    let (l1, b1, l2, b2) = (
        ra1.to_radians(),
        dec1.to_radians(),
        ra2.to_radians(),
        dec2.to_radians(),
    );
    let dl = l2 - l1;
    let (sdl, cdl) = dl.sin_cos();
    let (sb1, cb1) = b1.sin_cos();
    let (sb2, cb2) = b2.sin_cos();
    let num1 = cb2 * sdl;
    let num2 = cb1 * sb2 - sb1 * cb2 * cdl;
    let denominator = sb1 * sb2 + cb1 * cb2 * cdl;
    num1.hypot(num2).atan2(denominator).to_degrees() * 3600.0
}

/// Move a position by proper motion (`pm_ra` includes cos dec; mas/yr) over
/// `years`, on the tangent plane: good to well under a milliarcsecond for
/// the decades and the motions (< 10″/yr) of catalog stars, except within a
/// degree of a pole, where it is still good to a fraction of an arcsecond.
pub fn apply_proper_motion(ra: f64, dec: f64, pm_ra: f64, pm_dec: f64, years: f64) -> (f64, f64) {
    let mas_to_deg = 1.0 / 3_600_000.0;
    let cos_dec = dec.to_radians().cos().max(1e-9);
    let new_dec = (dec + pm_dec * years * mas_to_deg).clamp(-90.0, 90.0);
    let new_ra = (ra + pm_ra * years * mas_to_deg / cos_dec).rem_euclid(360.0);
    (new_ra, new_dec)
}

/// Check a position given by a caller; errors name the field.
pub fn check_position(ra: f64, dec: f64) -> Result<(), String> {
    if !ra.is_finite() || !(0.0..=360.0).contains(&ra) {
        return Err(format!(
            "ra: {ra} is not a right ascension (0 to 360 degrees)"
        ));
    }
    if !dec.is_finite() || !(-90.0..=90.0).contains(&dec) {
        return Err(format!(
            "dec: {dec} is not a declination (-90 to 90 degrees)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cone_ranges_hold_every_point_inside() {
        for (ra, dec, r) in [
            (197.45, -23.38, 5.0),
            (0.0001, 89.99, 60.0),
            (359.999, -45.0, 3600.0),
        ] {
            let ranges = cone_ranges(ra, dec, r);
            assert!(
                !ranges.is_empty() && ranges.len() < 64,
                "{} ranges",
                ranges.len()
            );
            for k in 0..200 {
                let angle = f64::from(k) * 0.7;
                let d = r * 0.999 * f64::from(k % 10) / 10.0 * DEG_PER_ARCSEC;
                let p_dec = (dec + d * angle.sin()).clamp(-90.0, 90.0);
                let p_ra = ra + d * angle.cos() / p_dec.to_radians().cos().max(1e-6);
                if separation_arcsec(ra, dec, p_ra, p_dec) > r {
                    continue;
                }
                let h = hpx(p_ra, p_dec);
                assert!(
                    ranges.iter().any(|range| range.contains(&h)),
                    "({p_ra}, {p_dec}) missed"
                );
            }
        }
    }

    #[test]
    fn separations_and_proper_motion() {
        assert!((separation_arcsec(10.0, 20.0, 10.0, 20.0 + 1.0 / 3600.0) - 1.0).abs() < 1e-9);
        assert!((separation_arcsec(0.0, 0.0, 180.0, 0.0) - 648_000.0).abs() < 1e-6);
        let (ra, dec) = apply_proper_motion(100.0, 0.0, 1000.0, -1000.0, 36.0);
        assert!((separation_arcsec(100.0, 0.0, ra, dec) - 36.0 * 2f64.sqrt()).abs() < 1e-3);
        assert!(
            check_position(361.0, 0.0)
                .expect_err("off the sky")
                .starts_with("ra:")
        );
    }
}
