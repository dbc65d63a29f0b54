//! Cutouts: the three stamps an alert packet carries around its candidate
//! (`cutoutScience`, `cutoutTemplate`, `cutoutDifference`, 63×63 pixels
//! for ZTF), each a gzipped FITS file with one 2-D image in its primary
//! HDU, decoded here and drawn as PNG by [`super::stretch`].
//!
//! The pixels are decoded by `fitsrs` (CDS's pure-Rust FITS reader). Before
//! it sees a byte, the file is bounded the way every FITS file the broker
//! reads is ([`crate::gcn::fits::Header`]): inflated to at most
//! [`MAX_FITS_BYTES`], `SIMPLE = T`, a known `BITPIX`, `NAXIS = 2`, each
//! side 1 to [`MAX_SIDE`], and every data byte the header announces present.
//! So a corrupt or hostile cutout is refused naming what is wrong, and the
//! crate is only ever handed a file whose sizes are sane; its call is still
//! wrapped in `catch_unwind`, so a defect in it fails one cutout, not the
//! service.

use super::queries::parse_candid;
use super::service::AlertService;
use super::stretch::{self, Stretch};
use crate::gcn::fits::Header;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ithaca_kit::error::{DomainCode, ServiceError};
use ithaca_kit::principal::Principal;
use std::io::{Cursor, Read};

/// Largest inflated cutout: a ZTF stamp is 20 KiB; a thousand times that is
/// corrupt or hostile.
pub const MAX_FITS_BYTES: usize = 4 * 1024 * 1024;
/// Largest side of a cutout image, pixels.
pub const MAX_SIDE: i64 = 2048;

/// Which of an alert's three cutouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutoutKind {
    /// The new exposure.
    Science,
    /// The reference image subtracted from it.
    Template,
    /// Science minus template: what changed.
    Difference,
}

impl CutoutKind {
    pub const ALL: [CutoutKind; 3] = [
        CutoutKind::Science,
        CutoutKind::Template,
        CutoutKind::Difference,
    ];

    /// `science`, `template` or `difference`; anything else is refused
    /// naming the three.
    pub fn parse(raw: &str) -> Result<CutoutKind, String> {
        match raw.trim() {
            "science" => Ok(CutoutKind::Science),
            "template" => Ok(CutoutKind::Template),
            "difference" => Ok(CutoutKind::Difference),
            other => {
                let shown: String = other.chars().take(40).collect();
                Err(format!(
                    "kind: {shown:?} is not a cutout (science, template or difference)"
                ))
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CutoutKind::Science => "science",
            CutoutKind::Template => "template",
            CutoutKind::Difference => "difference",
        }
    }

    /// The packet field holding it.
    pub fn packet_field(self) -> &'static str {
        match self {
            CutoutKind::Science => "cutoutScience",
            CutoutKind::Template => "cutoutTemplate",
            CutoutKind::Difference => "cutoutDifference",
        }
    }
}

/// Why a cutout does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CutoutError(pub String);

/// A decoded cutout: physical pixel values (`BZERO + BSCALE × stored`;
/// `BLANK` and non-finite values as NaN), row-major in FITS order:
/// `pixels[y * width + x]`, `y = 0` the first row stored, which is the
/// bottom of the picture as astronomers display it.
#[derive(Clone, Debug, PartialEq)]
pub struct Image {
    pub width: usize,
    pub height: usize,
    pub bitpix: i64,
    pub pixels: Vec<f64>,
}

impl Image {
    /// Pixels without a value: NaN, or a fill value
    /// ([`super::stretch::has_value`]).
    pub fn blank_pixels(&self) -> usize {
        self.pixels
            .iter()
            .filter(|v| !super::stretch::has_value(**v))
            .count()
    }
}

/// Decode a cutout's `stampData`: gzipped (by its magic) or plain FITS.
pub fn decode(stamp: &[u8]) -> Result<Image, CutoutError> {
    let fits = inflate(stamp)?;
    let bad = |m: String| CutoutError(m);
    if !fits.starts_with(b"SIMPLE  =") {
        return Err(bad("not FITS: the first card is not SIMPLE".to_owned()));
    }
    let header = Header::read(&fits, 0, 0).map_err(bad)?;
    if header.logical("SIMPLE").map_err(bad)? != Some(true) {
        return Err(bad("HDU 0: SIMPLE is not T".to_owned()));
    }
    let bitpix = header.int("BITPIX").map_err(bad)?.unwrap_or_default();
    if ![8, 16, 32, 64, -32, -64].contains(&bitpix) {
        return Err(bad(format!(
            "HDU 0: BITPIX = {bitpix} is not a FITS BITPIX"
        )));
    }
    let naxis = header.int_in("NAXIS", 0..=999).map_err(bad)?;
    if naxis != 2 {
        return Err(bad(format!(
            "HDU 0: NAXIS = {naxis}, but a cutout is a 2-D image"
        )));
    }
    let width = header.int_in("NAXIS1", 1..=MAX_SIDE).map_err(bad)?;
    let height = header.int_in("NAXIS2", 1..=MAX_SIDE).map_err(bad)?;
    // Every data byte the header announces is in the file.
    header.next_hdu(fits.len()).map_err(bad)?;
    let bzero = header.real("BZERO").map_err(bad)?.unwrap_or(0.0);
    let bscale = header.real("BSCALE").map_err(bad)?.unwrap_or(1.0);
    let blank = header.int("BLANK").map_err(bad)?;
    // Both sides are at most MAX_SIDE, so the product fits.
    let (width, height) = (width as usize, height as usize);
    let stored = std::panic::catch_unwind(|| stored_pixels(&fits))
        .map_err(|_| bad("the FITS reader failed on this cutout".to_owned()))??;
    if stored.len() != width * height {
        return Err(bad(format!(
            "HDU 0: {} pixels read, but NAXIS1 × NAXIS2 = {}",
            stored.len(),
            width * height
        )));
    }
    let scaled = bzero != 0.0 || bscale != 1.0;
    let pixels = stored
        .into_iter()
        .map(|p| {
            let v = match p {
                Stored::Int(raw) if Some(raw) == blank => f64::NAN,
                Stored::Int(raw) => raw as f64,
                Stored::Real(v) => v,
            };
            let v = if scaled { bzero + bscale * v } else { v };
            if v.is_finite() { v } else { f64::NAN }
        })
        .collect();
    Ok(Image {
        width,
        height,
        bitpix,
        pixels,
    })
}

/// One stored value: integers kept exact for the `BLANK` comparison.
enum Stored {
    Int(i64),
    Real(f64),
}

/// The primary HDU's stored values, read by `fitsrs`.
fn stored_pixels(fits: &[u8]) -> Result<Vec<Stored>, CutoutError> {
    use fitsrs::{Fits, HDU, Pixels};
    let mut hdus = Fits::from_reader(Cursor::new(fits));
    let hdu = match hdus.next() {
        Some(Ok(HDU::Primary(hdu))) => hdu,
        Some(Ok(_)) => return Err(CutoutError("HDU 0 is not an image".to_owned())),
        Some(Err(e)) => return Err(CutoutError(format!("HDU 0: {e}"))),
        None => return Err(CutoutError("the file holds no HDU".to_owned())),
    };
    let pixels = hdus.get_data(&hdu).pixels();
    Ok(match pixels {
        Pixels::U8(it) => it.map(|v| Stored::Int(i64::from(v))).collect(),
        Pixels::I16(it) => it.map(|v| Stored::Int(i64::from(v))).collect(),
        Pixels::I32(it) => it.map(|v| Stored::Int(i64::from(v))).collect(),
        Pixels::I64(it) => it.map(Stored::Int).collect(),
        Pixels::F32(it) => it.map(|v| Stored::Real(f64::from(v))).collect(),
        Pixels::F64(it) => it.map(Stored::Real).collect(),
    })
}

/// The FITS bytes of a stamp: inflated when gzipped, at most
/// [`MAX_FITS_BYTES`] either way.
fn inflate(stamp: &[u8]) -> Result<Vec<u8>, CutoutError> {
    if !stamp.starts_with(&[0x1f, 0x8b]) {
        if stamp.len() > MAX_FITS_BYTES {
            return Err(CutoutError(format!(
                "the cutout is {} bytes, more than {MAX_FITS_BYTES}",
                stamp.len()
            )));
        }
        return Ok(stamp.to_vec());
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(stamp)
        .take(MAX_FITS_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| CutoutError(format!("the gzip stream does not inflate: {e}")))?;
    if out.len() > MAX_FITS_BYTES {
        return Err(CutoutError(format!(
            "the cutout inflates to more than {MAX_FITS_BYTES} bytes"
        )));
    }
    Ok(out)
}

/// A cutout drawn as PNG, with what was drawn.
#[derive(Clone, Debug)]
pub struct Cutout {
    pub broker_id: String,
    pub candid: i64,
    pub kind: CutoutKind,
    pub width: usize,
    pub height: usize,
    /// The zscale limits the grey ramp spans; `None` when no pixel has a value.
    pub stretch: Option<Stretch>,
    pub blank_pixels: usize,
    pub png: Vec<u8>,
}

impl AlertService {
    /// One of an alert's cutouts as PNG (the cutout resource).
    pub async fn cutout(
        &self,
        caller: &Principal,
        broker_id: &str,
        candid: &str,
        kind: &str,
    ) -> Result<Cutout, ServiceError> {
        caller.tenant()?;
        let kind = CutoutKind::parse(kind).map_err(ServiceError::invalid)?;
        let broker = self.broker_for(broker_id, "alerts").await?;
        let candid = parse_candid(candid)?;
        let unknown = || {
            ServiceError::not_found(format!(
                "candid: no alert {candid} in broker {:?}",
                broker.broker_id
            ))
            .with_domain(DomainCode::UnknownAlert)
        };
        let packets = self.store.packets(&broker.broker_id, &[candid]).await?;
        let Some(stored) = packets.first() else {
            return Err(unknown());
        };
        let packet = self.packet_json(&stored.schema_id, &stored.packet).await?;
        let Some(stamp) = packet[kind.packet_field()]["stampData"].as_str() else {
            return Err(ServiceError::not_found(format!(
                "kind: alert {candid} carries no {} cutout",
                kind.as_str()
            )));
        };
        let bytes = STANDARD
            .decode(stamp)
            .map_err(|e| ServiceError::internal(&e))?;
        let drawn = tokio::task::spawn_blocking(move || {
            let image = decode(&bytes)?;
            let stretch = stretch::zscale(&image.pixels);
            let png = stretch::to_png(&image, stretch)?;
            Ok::<_, CutoutError>((image, stretch, png))
        })
        .await
        .map_err(|e| ServiceError::internal(&e))?;
        let (image, stretch, png) = drawn.map_err(|e| {
            ServiceError::precondition(format!(
                "kind: the {} cutout of alert {candid} does not decode: {e}",
                kind.as_str()
            ))
        })?;
        Ok(Cutout {
            broker_id: broker.broker_id,
            candid,
            kind,
            width: image.width,
            height: image.height,
            stretch,
            blank_pixels: image.blank_pixels(),
            png,
        })
    }
}

#[cfg(test)]
#[path = "cutouts_tests.rs"]
mod tests;
