//! `lightcurve.features`: what an astronomer reads off a transient's light
//! curve first — its peak, how fast it rose and faded in each band, and its
//! g−r colour near the peak — from the broker's de-duplicated photometry.

use super::{Artifact, Context, Inputs, Output, Skill};
use crate::model::Manifest;
use crate::model::Profile;
use ithaca_kit::error::ServiceError;
use ithaca_proto::broker::v1 as bpb;
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub struct LightCurveFeatures;

/// The broker asked when the run names none (the archive `ithaca ingest ztf`
/// fills).
const DEFAULT_BROKER: &str = "ztf-archive";
/// Detections this close in time count as "near" the peak for the colour.
const COLOUR_WINDOW_DAYS: f64 = 3.0;

#[tonic::async_trait]
impl Skill for LightCurveFeatures {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: "lightcurve.features",
            version: "1.0",
            name: "Light-curve features",
            description: "Peak magnitude and time, rise and fade rates per band (mag/day), and the g−r colour near peak of an astronomical transient, from the alert archive's light curve (detections only; upper limits and forced photometry are not fitted).",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["objectId"], "properties": {
                "objectId": {"type": "string", "maxLength": 64, "description": "The object, for example ZTF17aaacxxf (see get_broker_alerts)."},
                "broker_id": {"type": "string", "maxLength": 64, "description": "The broker holding its alerts (default ztf-archive; see list_brokers)."}}}),
            output_schema: json!({"type": "object", "properties": {
                "objectId": {"type": "string"}, "broker_id": {"type": "string"},
                "detections": super::count("Detections used (upper limits and forced photometry are not)."),
                "peak": {"type": ["object", "null"]},
                "bands": {"type": "object", "description": "Per band: detections, peak_mag (difference magnitude, AB), peak_jd, rise and fade rates in mag/day over at least 1 day between detections (null with rise_rate_why / fade_rate_why when not measurable)."},
                "g_minus_r_near_peak": super::maybe_number("g − r colour near the peak (detections within 3 days of it), magnitudes of difference photometry.")}}),
            profile: Profile::Interactive,
            asset_class: "astronomy",
            source_classes: &["broker"],
            trigger_compatible: false,
            intents: &["light curve", "transient", "photometry", "classification"],
        }
    }

    async fn run(&self, ctx: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError> {
        let object_id = inputs
            .text("objectId")
            .map(str::trim)
            .filter(|o| !o.is_empty())
            .ok_or_else(|| ServiceError::invalid("inputs.objectId: required input is missing"))?;
        let broker_id = inputs.text("broker_id").unwrap_or(DEFAULT_BROKER);
        let curve = ctx.light_curve(broker_id, object_id).await?;
        let features = features(&curve.points);
        let outputs = json!({
            "objectId": curve.object_id,
            "broker_id": curve.broker_id,
            "detections": features.detections,
            "peak": features.peak,
            "bands": features.bands,
            "g_minus_r_near_peak": features.colour,
            "time_scale": curve.time_scale,
            "light_curve": curve.uri,
        });
        let mut csv = String::from("jd,band,mag,mag_err\n");
        for p in detections(&curve.points) {
            let err = p.mag_err.map(|e| e.to_string()).unwrap_or_default();
            csv.push_str(&format!("{},{},{},{err}\n", p.jd, p.band, p.mag));
        }
        Ok(Output {
            artifacts: vec![
                Artifact::json("features.json", &outputs),
                Artifact::csv("detections.csv", csv),
            ],
            outputs,
        })
    }
}

/// What the light curve says, computed from its detections alone.
struct Features {
    detections: usize,
    peak: Value,
    bands: BTreeMap<String, Value>,
    colour: Option<f64>,
}

fn detections(points: &[bpb::PhotometryPoint]) -> impl Iterator<Item = &bpb::PhotometryPoint> {
    points
        .iter()
        .filter(|p| p.kind == "detection" && !p.is_limit && p.mag.is_finite())
}

fn features(points: &[bpb::PhotometryPoint]) -> Features {
    let mut by_band: BTreeMap<String, Vec<&bpb::PhotometryPoint>> = BTreeMap::new();
    for p in detections(points) {
        by_band.entry(p.band.clone()).or_default().push(p);
    }
    let mut bands = BTreeMap::new();
    for (band, pts) in &by_band {
        bands.insert(band.clone(), band_features(pts));
    }
    // The brightest detection of any band is the peak (smaller is brighter).
    let peak = detections(points).min_by(|a, b| a.mag.total_cmp(&b.mag));
    let colour = peak.and_then(|peak| colour_near(&by_band, peak.jd));
    Features {
        detections: detections(points).count(),
        peak: peak.map_or(Value::Null, |p| {
            json!({"band": p.band, "mag": p.mag, "jd": p.jd, "time_utc": p.time_utc,
                "days_since_first_detection": p.days_since_first_detection})
        }),
        bands,
        colour,
    }
}

/// The shortest time between two detections a rate is taken over: closer
/// points (ZTF often observes a field twice a night, minutes apart) measure
/// noise, not a rise (31.6 mag/day from two points 0.005 d apart).
const MIN_RATE_BASELINE_DAYS: f64 = 1.0;

/// Peak, rise and fade of one band, sorted by time. A rate is the change in
/// magnitude per day between the band's first (or last) detection and its
/// peak, positive when brightening (rise) or fading (fade); `null` with the
/// reason in `rise_rate_why` / `fade_rate_why` when it is not measurable: no
/// detection on that side of the peak, or one closer than
/// [`MIN_RATE_BASELINE_DAYS`].
fn band_features(pts: &[&bpb::PhotometryPoint]) -> Value {
    let Some((i, peak)) = pts
        .iter()
        .enumerate()
        .min_by(|(_, a), (_, b)| a.mag.total_cmp(&b.mag))
    else {
        return Value::Null;
    };
    let first = pts.first().filter(|_| i > 0);
    let last = pts.last().filter(|_| i + 1 < pts.len());
    let rate = |side: &str, pair: Option<(&bpb::PhotometryPoint, &bpb::PhotometryPoint)>| {
        let Some((from, to)) = pair else {
            return Err(format!(
                "not measurable: no detection in this band {side} its peak"
            ));
        };
        let days = (to.jd - from.jd).abs();
        if days < MIN_RATE_BASELINE_DAYS {
            return Err(format!(
                "not measurable: the detections {side} the peak span {days:.3} d; a rate needs at least {MIN_RATE_BASELINE_DAYS} d between detections"
            ));
        }
        Ok((to.mag - from.mag).abs() / days)
    };
    let mut out = json!({
        "detections": pts.len(),
        "peak_mag": peak.mag,
        "peak_jd": peak.jd,
        "peak_days_since_first_detection": peak.days_since_first_detection,
    });
    for (key, side, pair) in [
        ("rise", "before", first.map(|f| (*f, *peak))),
        ("fade", "after", last.map(|l| (*peak, *l))),
    ] {
        match rate(side, pair) {
            Ok(r) => out[format!("{key}_rate_mag_per_day")] = json!(r),
            Err(why) => {
                out[format!("{key}_rate_mag_per_day")] = Value::Null;
                out[format!("{key}_rate_why")] = json!(why);
            }
        }
    }
    out
}

/// g−r from the g and r detections nearest the peak, each within
/// [`COLOUR_WINDOW_DAYS`] of it.
fn colour_near(by_band: &BTreeMap<String, Vec<&bpb::PhotometryPoint>>, jd: f64) -> Option<f64> {
    let nearest = |band: &str| {
        by_band
            .get(band)?
            .iter()
            .filter(|p| (p.jd - jd).abs() <= COLOUR_WINDOW_DAYS)
            .min_by(|a, b| (a.jd - jd).abs().total_cmp(&(b.jd - jd).abs()))
            .map(|p| p.mag)
    };
    Some(nearest("g")? - nearest("r")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(jd: f64, band: &str, mag: f64) -> bpb::PhotometryPoint {
        bpb::PhotometryPoint {
            jd,
            band: band.into(),
            kind: "detection".into(),
            mag,
            ..Default::default()
        }
    }

    #[test]
    fn peak_rates_and_colour() {
        let mut points = vec![
            point(10.0, "g", 19.0),
            point(12.0, "g", 17.0),
            point(16.0, "g", 18.0),
            point(11.5, "r", 17.5),
            point(20.0, "r", 18.5),
        ];
        points.push(bpb::PhotometryPoint {
            is_limit: true,
            ..point(9.0, "g", 20.5)
        });
        let f = features(&points);
        assert_eq!(f.detections, 5);
        assert_eq!(f.peak["mag"], 17.0);
        assert_eq!(f.bands["g"]["rise_rate_mag_per_day"], 1.0);
        assert_eq!(f.bands["g"]["fade_rate_mag_per_day"], 0.25);
        // r peaks first: nothing before it to rise from, and it says so.
        assert_eq!(f.bands["r"]["rise_rate_mag_per_day"], Value::Null);
        assert!(
            f.bands["r"]["rise_rate_why"]
                .as_str()
                .is_some_and(|w| w.contains("no detection")),
            "{}",
            f.bands["r"]
        );
        // Two detections 0.005 d apart measure no rise (it would be 31.6
        // mag/day from a 0.158 mag difference).
        let close = features(&[point(30.0, "g", 18.158), point(30.005, "g", 18.0)]);
        assert_eq!(close.bands["g"]["rise_rate_mag_per_day"], Value::Null);
        assert!(
            close.bands["g"]["rise_rate_why"]
                .as_str()
                .is_some_and(|w| w.contains("0.005 d")),
            "{}",
            close.bands["g"]
        );
        // g at 12.0 (17.0) and r at 11.5 (17.5), both within 3 days.
        assert_eq!(f.colour, Some(-0.5));
        assert!(features(&[]).peak.is_null());
    }
}
