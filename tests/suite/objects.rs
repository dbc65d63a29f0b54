//! An object's page and its alerts' cutouts, on `ithaca up` with a real
//! night of ZTF alerts: the console page and its images over plain HTTP
//! with a signed-in cookie, the cutout resource through MCP, the clear
//! refusals of a bad object, candid or kind, and the cutouts' pixels
//! against astropy's reading of the same packet
//! (`tests/astro/cutouts_check.py`, in the venv `tests/astro/install.sh`
//! makes; without it the comparison prints NOT RUN, and fails under
//! `ITHACA_TEST_REQUIRE_ASTROPY`, as `tests/astro/run.sh` sets).

use crate::common;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use common::{Up, http};
use serde_json::{Value, json};
use std::io::Read;

/// An alert of `v4.01` whose science and difference cutouts have masked
/// pixels (NaN), and its object.
const OBJECT: &str = "ZTF17aacymkh";
const CANDID: &str = "2475433850015015000";
const FILE: &str = "v4.01/2475433850015015000.avro";
/// The colour blank pixels are drawn in (README, Objects).
const BLANK: [u8; 3] = [0x3c, 0x78, 0xd8];

/// Whether a pixel has a value (README, Objects): not NaN, and not the
/// float32 extremes ZTF's templates hold where the reference has no data.
fn has_value(v: f64) -> bool {
    v.is_finite() && v.abs() < 3.0e38
}

fn stack() -> Up {
    let up = common::up(&[]);
    up.ingest("ztf", &[common::astro::alerts_dir().join("v4.01")]);
    up
}

/// Sign in to the console with `key`: the cookie header to send.
async fn sign_in(up: &Up, key: &str) -> String {
    let body: String = format!("key={}", key.replace('+', "%2B").replace('/', "%2F"));
    let origin = up.url.trim_end_matches('/').to_owned();
    let reply = http::request(
        &up.url,
        "POST",
        "/console/sign-in",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Origin", origin.as_str()),
        ],
        body.as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 303, "{}", reply.text());
    reply
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
        .find_map(|(_, v)| {
            let value = v.strip_prefix("ithaca_console=")?.split(';').next()?;
            (!value.is_empty()).then(|| format!("ithaca_console={value}"))
        })
        .unwrap_or_else(|| panic!("no cookie: {:?}", reply.headers))
}

async fn get(up: &Up, path: &str, cookie: &str) -> http::Reply {
    http::request(&up.url, "GET", path, &[("Cookie", cookie)], b"").await
}

/// `resources/read` of `uri` as the agent: the JSON-RPC reply.
async fn read(up: &Up, uri: &str) -> Value {
    let reply = http::modern(&up.url, &up.agent, "resources/read", json!({"uri": uri})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

/// A decoded PNG: width, height, RGB bytes.
fn rgb(png: &[u8]) -> (u32, u32, Vec<u8>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(png))
        .read_info()
        .expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    assert_eq!(info.color_type, png::ColorType::Rgb, "{info:?}");
    assert_eq!(info.bit_depth, png::BitDepth::Eight, "{info:?}");
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// A `BITPIX = -32` FITS image read here, independently of the broker:
/// width, height and the pixels in file order.
fn fits_f32(stamp: &[u8]) -> (usize, usize, Vec<f32>) {
    let mut fits = Vec::new();
    flate2::read::GzDecoder::new(stamp)
        .read_to_end(&mut fits)
        .expect("gzipped");
    let mut cards = std::collections::HashMap::new();
    let mut end = None;
    for (i, card) in fits.chunks(80).enumerate() {
        let text = String::from_utf8_lossy(card);
        if text.starts_with("END ") {
            end = Some(i + 1);
            break;
        }
        if let Some((k, v)) = text.split_once('=') {
            let v = v.split('/').next().unwrap_or_default().trim().to_owned();
            cards.insert(k.trim().to_owned(), v);
        }
    }
    let data = (end.expect("END") * 80).div_ceil(2880) * 2880;
    assert_eq!(cards["BITPIX"], "-32");
    let w: usize = cards["NAXIS1"].parse().expect("NAXIS1");
    let h: usize = cards["NAXIS2"].parse().expect("NAXIS2");
    let pixels = fits[data..data + w * h * 4]
        .chunks(4)
        .map(|b| f32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (w, h, pixels)
}

/// The packet's stamp of `kind` (gzipped FITS), through the alert resource.
async fn stamp(up: &Up, kind: &str) -> Vec<u8> {
    let uri = format!("doomberg://brokers/ztf-archive/alerts/{CANDID}");
    let packet: Value = serde_json::from_str(
        read(up, &uri).await["result"]["contents"][0]["text"]
            .as_str()
            .expect("the packet as text"),
    )
    .expect("JSON");
    let field = format!("cutout{}{}", kind[..1].to_uppercase(), &kind[1..]);
    let b64 = packet["packet"][&field]["stampData"]
        .as_str()
        .unwrap_or_else(|| panic!("no {field}"));
    STANDARD.decode(b64).expect("base64")
}

/// The PNG pixel (x, y from the top) of FITS pixel `i` of a `w`×`h` image:
/// the FITS's first row is the picture's bottom.
fn png_index(i: usize, w: usize, h: usize) -> usize {
    let (x, row) = (i % w, i / w);
    ((h - 1 - row) * w + x) * 3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_page_cutouts_and_their_resource() {
    let up = stack();
    let cookie = sign_in(&up, &up.human.clone()).await;

    // The page: light curve, alerts, the newest alert's cutouts.
    let page = get(&up, &format!("/console/objects/{OBJECT}"), &cookie).await;
    assert_eq!(page.status, 200, "{}", page.text());
    let html = page.text();
    for part in [
        "id=\"lightcurve\"",
        "Difference magnitudes",
        &format!("data-candid=\"{CANDID}\""),
        &format!("/console/alerts/{CANDID}/cutouts/science.png"),
        &format!("/console/alerts/{CANDID}/cutouts/template.png"),
        &format!("/console/alerts/{CANDID}/cutouts/difference.png"),
        "id=\"no-filter-matches\"",
        "sgscore1",
    ] {
        assert!(html.contains(part), "{part} not on the page: {html}");
    }
    let svg = get(
        &up,
        &format!("/console/objects/{OBJECT}/lightcurve.svg"),
        &cookie,
    )
    .await;
    assert_eq!(svg.status, 200, "{}", svg.text());
    assert_eq!(svg.header("content-type"), Some("image/svg+xml"));
    assert!(svg.text().contains("difference magnitude (AB)"));

    for kind in ["science", "template", "difference"] {
        let (w, h, pixels) = fits_f32(&stamp(&up, kind).await);
        let served = get(
            &up,
            &format!("/console/alerts/{CANDID}/cutouts/{kind}.png"),
            &cookie,
        )
        .await;
        assert_eq!(served.status, 200, "{kind}: {}", served.text());
        assert_eq!(served.header("content-type"), Some("image/png"));
        let (pw, ph, rgb_bytes) = rgb(&served.body);
        assert_eq!(
            (pw as usize, ph as usize),
            (w, h),
            "{kind}: the FITS's size"
        );
        // Blank pixels, and only they, in the blank colour, where the FITS
        // has them (first row at the bottom); the rest grey.
        let mut blanks = 0;
        for (i, v) in pixels.iter().enumerate() {
            let at = png_index(i, w, h);
            let px = &rgb_bytes[at..at + 3];
            if !has_value(f64::from(*v)) {
                blanks += 1;
                assert_eq!(px, BLANK, "{kind} pixel {i}");
            } else {
                assert!(px[0] == px[1] && px[1] == px[2], "{kind} pixel {i}: {px:?}");
            }
        }
        // The science and difference cutouts are NaN over half the stamp,
        // the template holds fill values there.
        assert!(blanks > 1000, "{kind}: {blanks} masked pixels");
        // The agent's resource is the same picture.
        let uri = format!("doomberg://brokers/ztf-archive/alerts/{CANDID}/cutouts/{kind}.png");
        let contents = &read(&up, &uri).await["result"]["contents"][0];
        assert_eq!(contents["uri"], uri.as_str(), "{contents}");
        assert_eq!(contents["mimeType"], "image/png", "{contents}");
        let blob = STANDARD
            .decode(contents["blob"].as_str().expect("a blob"))
            .expect("base64");
        assert_eq!(blob, served.body, "{kind}: the resource and the page agree");
    }

    // Refusals name what was wrong.
    for (uri, said) in [
        (
            format!("doomberg://brokers/ztf-archive/alerts/{CANDID}/cutouts/spectrum.png"),
            "is not a cutout (science, template or difference)",
        ),
        (
            "doomberg://brokers/ztf-archive/alerts/12x/cutouts/science.png".to_owned(),
            "candid",
        ),
        (
            "doomberg://brokers/ztf-archive/alerts/1/cutouts/science.png".to_owned(),
            "/1/",
        ),
        (
            format!("doomberg://brokers/nowhere/alerts/{CANDID}/cutouts/science.png"),
            "nowhere",
        ),
    ] {
        let reply = read(&up, &uri).await;
        let error = &reply["error"];
        assert_eq!(error["code"], -32602, "{reply}");
        assert!(
            error["message"].as_str().is_some_and(|m| m.contains(said)),
            "{reply}"
        );
    }
    let bad_kind = get(
        &up,
        &format!("/console/alerts/{CANDID}/cutouts/spectrum.png"),
        &cookie,
    )
    .await;
    assert_eq!(bad_kind.status, 400, "{}", bad_kind.text());
    assert!(bad_kind.text().contains("science, template or difference"));
    let unknown = get(&up, "/console/alerts/1/cutouts/science.png", &cookie).await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    let not_png = get(
        &up,
        &format!("/console/alerts/{CANDID}/cutouts/science.jpg"),
        &cookie,
    )
    .await;
    assert_eq!(not_png.status, 404, "{}", not_png.text());
    let no_object = get(&up, "/console/objects/ZTF99zzzzzzz", &cookie).await;
    assert_eq!(no_object.status, 404, "{}", no_object.text());
    let bad_object = get(&up, "/console/objects/bad%21id", &cookie).await;
    assert_eq!(bad_object.status, 400, "{}", bad_object.text());
    assert!(
        bad_object.text().contains("objectId"),
        "{}",
        bad_object.text()
    );
    // Signed out: to the sign-in page, never the picture.
    let anonymous = http::request(
        &up.url,
        "GET",
        &format!("/console/alerts/{CANDID}/cutouts/science.png"),
        &[],
        b"",
    )
    .await;
    assert_ne!(anonymous.status, 200);
    assert_ne!(anonymous.header("content-type"), Some("image/png"));
}

/// astropy's reading of the same packet, or `None` (after NOT RUN).
fn astropy() -> Option<Value> {
    let Ok(python) = std::env::var("ITHACA_ASTROPY_PYTHON") else {
        assert!(
            std::env::var_os("ITHACA_TEST_REQUIRE_ASTROPY").is_none(),
            "ITHACA_TEST_REQUIRE_ASTROPY is set but ITHACA_ASTROPY_PYTHON is not"
        );
        eprintln!(
            "NOT RUN: the astropy comparison needs ITHACA_ASTROPY_PYTHON (tests/astro/run.sh sets it)"
        );
        return None;
    };
    let out = std::process::Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/astro/cutouts_check.py"
        ))
        .arg(common::astro::alerts_dir().join(FILE))
        .arg(CANDID)
        .output()
        .expect("run cutouts_check.py");
    assert!(
        out.status.success(),
        "cutouts_check.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("JSON from cutouts_check.py"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cutouts_match_astropy_pixel_by_pixel() {
    let Some(theirs) = astropy() else {
        return;
    };
    use ithaca_broker::alerts::cutouts;
    use ithaca_broker::alerts::stretch;
    let up = stack();
    for kind in ["science", "template", "difference"] {
        let them = &theirs[kind];
        let (w, h) = (
            them["width"].as_u64().expect("width") as usize,
            them["height"].as_u64().expect("height") as usize,
        );
        let values: Vec<f64> = them["pixels"]
            .as_array()
            .expect("pixels")
            .iter()
            .map(|v| v.as_f64().unwrap_or(f64::NAN))
            .collect();
        assert_eq!(values.len(), w * h, "{kind}");

        // The broker's decoding of the stamp it serves, pixel by pixel.
        let ours = cutouts::decode(&stamp(&up, kind).await).expect("decodes");
        assert_eq!((ours.width, ours.height), (w, h), "{kind}");
        for (i, (a, b)) in ours.pixels.iter().zip(&values).enumerate() {
            let same = (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
            assert!(
                same,
                "{kind} pixel {i} (x {}, y {}): ours {a}, astropy {b}",
                i % w,
                i / w
            );
        }

        // The zscale limits agree with astropy's ZScaleInterval (the same
        // IRAF parameters; astropy places the line's centre one sample
        // lower than IRAF, about 0.1% of the range: within 0.5%).
        let limits = stretch::zscale(&values).expect("limits");
        let (z1, z2) = (
            them["zscale"][0].as_f64().expect("z1"),
            them["zscale"][1].as_f64().expect("z2"),
        );
        let tolerance = 0.005 * (z2 - z1);
        assert!(
            (limits.z1 - z1).abs() <= tolerance && (limits.z2 - z2).abs() <= tolerance,
            "{kind}: ours {limits:?}, astropy ({z1}, {z2})"
        );

        // The served PNG is astropy's pixels through the documented stretch.
        let uri = format!("doomberg://brokers/ztf-archive/alerts/{CANDID}/cutouts/{kind}.png");
        let blob = STANDARD
            .decode(
                read(&up, &uri).await["result"]["contents"][0]["blob"]
                    .as_str()
                    .expect("blob"),
            )
            .expect("base64");
        let (_, _, png) = rgb(&blob);
        for (i, v) in values.iter().enumerate() {
            let at = png_index(i, w, h);
            let want = if !has_value(*v) {
                BLANK
            } else {
                let g = limits.grey(*v);
                [g, g, g]
            };
            assert_eq!(&png[at..at + 3], want, "{kind} pixel {i}: value {v}");
        }
    }
}
