//! How a cutout becomes a picture: IRAF's zscale limits, a linear grey ramp
//! between them, and PNG.
//!
//! **zscale** (IRAF `display`, the default of DS9 and of most alert
//! viewers) picks the limits from the bulk of the sky rather than from the
//! extremes, so a bright star neither washes out the background nor hides
//! a faint transient:
//!
//! 1. Take at most [`SAMPLES`] of the finite pixels, evenly spaced through
//!    the image (every `n / SAMPLES`-th), and sort them.
//! 2. Fit a straight line to the sorted values against their index by
//!    least squares, reject points more than [`KREJ`] standard deviations
//!    from it, widen each rejection to its neighbours (1% of the sample),
//!    and fit again, at most [`MAX_ITERATIONS`] times, stopping when
//!    nothing more is rejected or fewer than half the sample (and at
//!    least [`MIN_PIXELS`]) would remain.
//! 3. With the line's slope divided by [`CONTRAST`] (0.25) and the sample's
//!    median `m` at index `c = (n − 1) / 2`: `z1 = m − c · slope`,
//!    `z2 = m + (n − 1 − c) · slope`, kept within the sample's minimum and
//!    maximum (IRAF's centre; astropy's `ZScaleInterval` puts it one sample
//!    lower). When the fit stops with too few points, the minimum and
//!    maximum themselves.
//!
//! A pixel's grey is `255 · (v − z1) / (z2 − z1)`, clipped to 0–255 and
//! rounded; an image whose limits coincide is mid-grey. A pixel without a
//! value is drawn in one fixed colour, [`BLANK_RGB`] (#3c78d8, a blue no
//! grey can be mistaken for), and left out of the limits: NaN (`BLANK`,
//! off the detector, masked), and ±3.4 × 10³⁸, the float32 extremes ZTF's
//! templates hold where the reference has no data (anything beyond
//! [`FILL`] in magnitude).
//! The picture is the FITS image with its first row at the bottom (the
//! convention of astronomical displays, `origin='lower'`), one PNG pixel
//! per FITS pixel.

use super::cutouts::{CutoutError, Image};

/// Most pixels sampled for the fit.
pub const SAMPLES: usize = 1000;
/// The slope is divided by this: below 1 widens the range.
pub const CONTRAST: f64 = 0.25;
/// Rejection threshold, standard deviations.
pub const KREJ: f64 = 2.5;
/// Most fitting rounds.
pub const MAX_ITERATIONS: usize = 5;
/// Fewest points a fit may keep (and at least half the sample).
pub const MIN_PIXELS: usize = 5;
/// The colour of pixels without a value.
pub const BLANK_RGB: [u8; 3] = [0x3c, 0x78, 0xd8];
/// The same colour as CSS writes it.
pub const BLANK_COLOUR: &str = "#3c78d8";

/// Values this large are fill, not flux: ZTF templates write the float32
/// extremes (±3.4028235 × 10³⁸) where the reference image has no data.
pub const FILL: f64 = 3.0e38;

/// Whether a pixel has a value to draw: finite and not a fill value.
pub fn has_value(v: f64) -> bool {
    v.is_finite() && v.abs() < FILL
}

/// The values the grey ramp spans: `z1` black, `z2` white.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stretch {
    pub z1: f64,
    pub z2: f64,
}

impl Stretch {
    /// The grey of `v` (finite).
    pub fn grey(&self, v: f64) -> u8 {
        let span = self.z2 - self.z1;
        if span <= 0.0 || !span.is_finite() {
            return 128;
        }
        let t = ((v - self.z1) / span).clamp(0.0, 1.0);
        // Within 0 to 255 after the clamp.
        (t * 255.0).round() as u8
    }
}

/// The zscale limits of the pixels that have a value ([`has_value`]);
/// `None` when none has.
pub fn zscale(pixels: &[f64]) -> Option<Stretch> {
    let finite: Vec<f64> = pixels.iter().copied().filter(|v| has_value(*v)).collect();
    if finite.is_empty() {
        return None;
    }
    let stride = (finite.len() / SAMPLES).max(1);
    let mut sample: Vec<f64> = finite.into_iter().step_by(stride).take(SAMPLES).collect();
    sample.sort_by(f64::total_cmp);
    let n = sample.len();
    let (lowest, highest) = (sample[0], sample[n - 1]);
    let center = (n - 1) / 2;
    let median = if n % 2 == 1 {
        sample[center]
    } else {
        (sample[center] + sample[center + 1]) / 2.0
    };
    let fewest = MIN_PIXELS.max(n / 2);
    let grow = (n / 100).max(1);
    let mut rejected = vec![false; n];
    let mut kept = n;
    let mut kept_before = n + 1;
    let mut slope = None;
    for _ in 0..MAX_ITERATIONS {
        if kept >= kept_before || kept < fewest {
            break;
        }
        let Some((a, b)) = fit_line(&sample, &rejected) else {
            break;
        };
        slope = Some(b);
        let residual = |i: usize| sample[i] - (a + b * i as f64);
        let sigma = spread(&sample, &rejected, residual);
        let threshold = KREJ * sigma;
        let mut out: Vec<usize> = (0..n).filter(|&i| residual(i).abs() > threshold).collect();
        out.extend((0..n).filter(|&i| rejected[i]));
        // Each rejection takes its neighbours with it: a window of `grow`
        // points around it (one more after than before when even).
        let (before, after) = ((grow - 1) / 2, grow / 2);
        for i in out {
            let start = i.saturating_sub(before);
            let end = (i + after).min(n - 1);
            rejected[start..=end].iter_mut().for_each(|r| *r = true);
        }
        kept_before = kept;
        kept = rejected.iter().filter(|r| !**r).count();
    }
    let (z1, z2) = match slope {
        Some(b) if kept >= fewest => {
            let slope = b / CONTRAST;
            (
                lowest.max(median - center as f64 * slope),
                highest.min(median + (n - 1 - center) as f64 * slope),
            )
        }
        _ => (lowest, highest),
    };
    // A flat sample can leave a slope a rounding error below zero, which
    // would cross the limits: the sample's range is the honest answer then.
    if z1 <= z2 {
        Some(Stretch { z1, z2 })
    } else {
        Some(Stretch {
            z1: lowest,
            z2: highest,
        })
    }
}

/// Least squares `y = a + b·i` over the points not rejected.
fn fit_line(y: &[f64], rejected: &[bool]) -> Option<(f64, f64)> {
    let points = || (0..y.len()).filter(|&i| !rejected[i]);
    let count = points().count() as f64;
    if count < 2.0 {
        return None;
    }
    let mean_x = points().map(|i| i as f64).sum::<f64>() / count;
    let mean_y = points().map(|i| y[i]).sum::<f64>() / count;
    let sxx: f64 = points().map(|i| (i as f64 - mean_x).powi(2)).sum();
    let sxy: f64 = points()
        .map(|i| (i as f64 - mean_x) * (y[i] - mean_y))
        .sum();
    if sxx == 0.0 {
        return None;
    }
    let b = sxy / sxx;
    Some((mean_y - b * mean_x, b))
}

/// The standard deviation of the residuals of the points not rejected.
fn spread(y: &[f64], rejected: &[bool], residual: impl Fn(usize) -> f64) -> f64 {
    let points: Vec<f64> = (0..y.len())
        .filter(|&i| !rejected[i])
        .map(residual)
        .collect();
    let count = points.len() as f64;
    let mean = points.iter().sum::<f64>() / count;
    (points.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / count).sqrt()
}

/// `image` as an 8-bit RGB PNG, first FITS row at the bottom.
pub fn to_png(image: &Image, stretch: Option<Stretch>) -> Result<Vec<u8>, CutoutError> {
    let (w, h) = (image.width, image.height);
    if w.checked_mul(h) != Some(image.pixels.len()) || w == 0 {
        return Err(CutoutError(format!(
            "{} pixels do not make a {w}×{h} image",
            image.pixels.len()
        )));
    }
    let mut rgb = Vec::with_capacity(w * h * 3);
    for row in (0..h).rev() {
        for &v in &image.pixels[row * w..(row + 1) * w] {
            match stretch {
                Some(s) if has_value(v) => {
                    let g = s.grey(v);
                    rgb.extend_from_slice(&[g, g, g]);
                }
                _ => rgb.extend_from_slice(&BLANK_RGB),
            }
        }
    }
    let to_u32 = |n: usize| u32::try_from(n).map_err(|_| CutoutError("image too large".into()));
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, to_u32(w)?, to_u32(h)?);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let failed = |e: png::EncodingError| CutoutError(format!("PNG encoding failed: {e}"));
    let mut writer = encoder.write_header().map_err(failed)?;
    writer.write_image_data(&rgb).map_err(failed)?;
    writer.finish().map_err(failed)?;
    Ok(out)
}
