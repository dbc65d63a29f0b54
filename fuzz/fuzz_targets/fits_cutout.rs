//! An alert cutout from outside: bytes through
//! `ithaca_broker::alerts::cutouts::decode` (gzip or plain FITS, bounded by
//! the broker's header checks, pixels by `fitsrs`) and, when it decodes,
//! `stretch::zscale` and `stretch::to_png`. Nothing may panic (libFuzzer's
//! panic hook aborts even inside the decoder's `catch_unwind`, so a panic
//! in `fitsrs` is found too), and:
//!
//! - a decoded image has the pixels its sides say, each side at most
//!   `MAX_SIDE`;
//! - its zscale limits, when some pixel has a value, are ordered and within
//!   the values;
//! - it always draws.
//!
//! Seeds (`fuzz/seeds/fits_cutout/`): a real ZTF science cutout as the
//! packet carries it (gzipped), a real template inflated (with its fill
//! values), and a 3×2 16-bit image with `BZERO`, `BSCALE` and `BLANK`.

#![no_main]

use ithaca_broker::alerts::cutouts::{MAX_SIDE, decode};
use ithaca_broker::alerts::stretch::{has_value, to_png, zscale};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(image) = decode(data) else {
        return;
    };
    assert_eq!(image.pixels.len(), image.width * image.height);
    assert!(image.width as i64 <= MAX_SIDE && image.height as i64 <= MAX_SIDE);
    let limits = zscale(&image.pixels);
    if let Some(s) = limits {
        let valued = image.pixels.iter().copied().filter(|v| has_value(*v));
        let (lo, hi) = valued.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
        assert!(s.z1 <= s.z2 && s.z1 >= lo && s.z2 <= hi, "{s:?} outside {lo}..{hi}");
    }
    to_png(&image, limits).expect("a decoded image draws");
});
