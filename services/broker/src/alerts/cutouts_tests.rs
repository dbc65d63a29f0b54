//! Cutouts: synthetic FITS files of each storage type, every real cutout of
//! `../shared/data/ztf`, and every truncation and thousands of corruptions
//! of one, none of which may panic.

use super::*;
use crate::alerts::avro;
use crate::alerts::stretch::{BLANK_RGB, to_png, zscale};
use std::io::Write;

fn card(text: &str) -> Vec<u8> {
    format!("{text:<80}").into_bytes()
}

/// A primary HDU: `cards` then `END`, padded; then `data`, padded.
fn fits(cards: &[&str], data: &[u8]) -> Vec<u8> {
    let mut out: Vec<u8> = cards.iter().flat_map(|c| card(c)).collect();
    out.extend(card("END"));
    out.resize(out.len().div_ceil(2880) * 2880, b' ');
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(2880) * 2880, 0);
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

fn f32_image(w: usize, h: usize, values: &[f32]) -> Vec<u8> {
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
    fits(
        &[
            "SIMPLE  =                    T",
            "BITPIX  =                  -32",
            "NAXIS   =                    2",
            &format!("NAXIS1  = {w:>20}"),
            &format!("NAXIS2  = {h:>20}"),
        ],
        &data,
    )
}

#[test]
fn floats_decode_exactly_with_their_nans_plain_or_gzipped() {
    let values = [1.5f32, -2.25, f32::NAN, 1e-30, 3.0e30, 0.0];
    let file = f32_image(3, 2, &values);
    for stamp in [file.clone(), gzip(&file)] {
        let image = decode(&stamp).expect("decodes");
        assert_eq!((image.width, image.height, image.bitpix), (3, 2, -32));
        for (got, want) in image.pixels.iter().zip(values) {
            if want.is_nan() {
                assert!(got.is_nan());
            } else {
                assert_eq!(*got, f64::from(want));
            }
        }
        assert_eq!(image.blank_pixels(), 1);
    }
}

#[test]
fn integers_are_scaled_and_blank_is_nan() {
    let raw: [i16; 4] = [-32768, -1, 0, 7];
    let data: Vec<u8> = raw.iter().flat_map(|v| v.to_be_bytes()).collect();
    let file = fits(
        &[
            "SIMPLE  =                    T",
            "BITPIX  =                   16",
            "NAXIS   =                    2",
            "NAXIS1  =                    2",
            "NAXIS2  =                    2",
            "BZERO   =               1000.0",
            "BSCALE  =                  0.5",
            "BLANK   =               -32768",
        ],
        &data,
    );
    let image = decode(&file).expect("decodes");
    assert!(image.pixels[0].is_nan());
    assert_eq!(&image.pixels[1..], &[999.5, 1000.0, 1003.5]);
}

#[test]
fn bad_files_are_refused_naming_the_fault() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"hello".to_vec(), "not FITS"),
        (
            fits(
                &[
                    "SIMPLE  =                    T",
                    "BITPIX  =                  -32",
                    "NAXIS   =                    3",
                ],
                &[],
            ),
            "NAXIS = 3",
        ),
        (
            fits(
                &[
                    "SIMPLE  =                    T",
                    "BITPIX  =                  -32",
                    "NAXIS   =                    2",
                    "NAXIS1  =          99999999999",
                    "NAXIS2  =          99999999999",
                ],
                &[],
            ),
            "NAXIS1 = 99999999999",
        ),
        (
            fits(
                &[
                    "SIMPLE  =                    T",
                    "BITPIX  =                   12",
                    "NAXIS   =                    2",
                ],
                &[],
            ),
            "BITPIX = 12",
        ),
        (
            f32_image(63, 63, &[0.0; 10])[..2880 + 40].to_vec(),
            "announces 15876 bytes",
        ),
        (gzip(&vec![0u8; MAX_FITS_BYTES + 10]), "more than"),
        (vec![0x1f, 0x8b, 8, 0, 1, 2, 3], "does not inflate"),
    ];
    for (bytes, said) in cases {
        let err = decode(&bytes).expect_err(said);
        assert!(err.0.contains(said), "{said:?} not in {err}");
    }
}

/// Every cutout of every real packet, as the packet JSON carries it.
fn real_stamps() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in ["v3.x", "v4.01", "v4.02"] {
        let folder = super::super::hostile_tests::alerts_dir().join(dir);
        let mut files: Vec<_> = std::fs::read_dir(folder)
            .expect("alerts dir")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        for path in files {
            let file = avro::decode_file(&std::fs::read(&path).expect("read")).expect("decode");
            for alert in file.alerts {
                let json = avro::decode_packet(&file.schema, &alert.datum).expect("packet");
                for kind in CutoutKind::ALL {
                    let b64 = json[kind.packet_field()]["stampData"]
                        .as_str()
                        .expect("stampData");
                    let name = format!("{} {}", alert.candid, kind.as_str());
                    out.push((name, STANDARD.decode(b64).expect("base64")));
                }
            }
        }
    }
    out
}

#[test]
fn every_real_cutout_decodes_to_a_63_pixel_square_and_draws() {
    let stamps = real_stamps();
    assert_eq!(stamps.len(), 3 * 40);
    let mut with_blanks = 0;
    for (name, stamp) in &stamps {
        let image = decode(stamp).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((image.width, image.height, image.bitpix), (63, 63, -32));
        with_blanks += usize::from(image.blank_pixels() > 0);
        let stretch = zscale(&image.pixels).expect("some pixels have values");
        assert!(stretch.z1 < stretch.z2, "{name}: {stretch:?}");
        let png = to_png(&image, Some(stretch)).expect("png");
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    }
    // SOURCES.md's packets include cutouts with masked pixels.
    assert!(with_blanks >= 5, "{with_blanks}");
}

/// A small deterministic generator (xorshift64*), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn no_truncation_or_corruption_of_a_real_cutout_panics() {
    let (_, stamp) = real_stamps().swap_remove(0);
    let plain = inflate(&stamp).expect("inflates");
    // Every truncation, gzipped and plain (the plain one at every card).
    for cut in 0..stamp.len() {
        let _ = decode(&stamp[..cut]);
    }
    for cut in (0..plain.len()).step_by(7) {
        let _ = decode(&plain[..cut]);
    }
    // Corruptions: header bytes replaced by digits, signs and letters that
    // make numbers huge, negative or malformed; data bytes flipped.
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    let alphabet = b"0123456789-+ .ET'=/9999999999";
    for _ in 0..3000 {
        let mut bytes = plain.clone();
        for _ in 0..1 + rng.below(6) {
            let at = if rng.below(4) == 0 {
                rng.below(bytes.len())
            } else {
                rng.below(800)
            };
            bytes[at] = if at < 2880 {
                alphabet[rng.below(alphabet.len())]
            } else {
                rng.next() as u8
            };
        }
        if let Ok(image) = decode(&bytes) {
            let _ = to_png(&image, zscale(&image.pixels));
        }
        let _ = decode(&gzip(&bytes));
    }
}

#[test]
fn the_picture_has_the_first_row_at_the_bottom_and_blanks_in_their_colour() {
    let image = Image {
        width: 2,
        height: 2,
        bitpix: -32,
        pixels: vec![0.0, f64::NAN, 10.0, 5.0],
    };
    let stretch = Stretch { z1: 0.0, z2: 10.0 };
    let png = to_png(&image, Some(stretch)).expect("png");
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let mut reader = decoder.read_info().expect("info");
    let mut buf = vec![0; reader.output_buffer_size()];
    reader.next_frame(&mut buf).expect("frame");
    // Top row: FITS row 1 (10, 5); bottom row: FITS row 0 (0, NaN).
    assert_eq!(&buf[..6], &[255, 255, 255, 128, 128, 128]);
    assert_eq!(&buf[6..9], &[0, 0, 0]);
    assert_eq!(&buf[9..12], &BLANK_RGB);
    // Nothing to stretch: every pixel blank.
    let none = Image {
        pixels: vec![f64::NAN; 4],
        ..image
    };
    assert_eq!(zscale(&none.pixels), None);
    assert!(to_png(&none, None).is_ok());
}

#[test]
fn zscale_ignores_a_few_bright_pixels() {
    // Sky of 100 ± 5 with a handful of saturated stars: the limits hug the
    // sky, not the stars.
    let mut rng = Rng(42);
    let mut pixels: Vec<f64> = (0..4000)
        .map(|_| 100.0 + (rng.below(1001) as f64 - 500.0) / 100.0)
        .collect();
    for i in (0..4000).step_by(97) {
        pixels[i] = 60_000.0;
    }
    let s = zscale(&pixels).expect("limits");
    assert!(s.z1 >= 95.0 && s.z1 < 100.0, "{s:?}");
    assert!(s.z2 > 100.0 && s.z2 < 200.0, "{s:?}");
    // A flat image is mid-grey.
    let flat = zscale(&[3.0; 100]).expect("limits");
    assert_eq!(flat.grey(3.0), 128);
}

#[test]
fn kinds_parse_and_name_the_three() {
    for kind in CutoutKind::ALL {
        assert_eq!(CutoutKind::parse(kind.as_str()), Ok(kind));
    }
    let err = CutoutKind::parse("science.png").expect_err("not a kind");
    assert!(err.contains("science, template or difference"), "{err}");
}
