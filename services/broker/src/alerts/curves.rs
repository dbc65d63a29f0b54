//! Light curves: an object's detections and limits as points (built by
//! [`super::lightcurve`]) and their SVG plot.
use super::lightcurve::{self, Point};
use super::queries::{parse_object_id, unknown_object};
use super::service::{AlertService, MAX_LIGHT_CURVE_ALERTS};
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;

/// A light curve.
#[derive(Clone, Debug)]
pub struct LightCurve {
    pub broker_id: String,
    pub object_id: String,
    pub points: Vec<Point>,
    pub alerts: i64,
    pub first_detection_jd: Option<f64>,
    /// The zero of the time axis: the first detection, else the first point.
    pub zero_jd: f64,
    /// The survey's own first detection of the position (`jdstarthist`)
    /// and its count of detections (`ndethist`), from the newest alert.
    pub survey_first_jd: Option<f64>,
    pub survey_detections: Option<i64>,
}

impl AlertService {
    /// `get_broker_alert_photometry`.
    pub async fn light_curve(
        &self,
        caller: &Principal,
        broker_id: &str,
        object_id: &str,
        include_forced: bool,
    ) -> Result<LightCurve, ServiceError> {
        caller.tenant()?;
        let broker = self.broker_for(broker_id, "photometry").await?;
        let object_id = parse_object_id(object_id)?;
        let packets = self
            .store
            .packets_of_object(&broker.broker_id, &object_id)
            .await?;
        if packets.is_empty() {
            return Err(unknown_object(&object_id, &broker.broker_id));
        }
        let alerts = packets.len() as i64;
        let mut builder = lightcurve::Builder::new(include_forced);
        let mut survey: Option<(Option<f64>, Option<i64>)> = None;
        // The newest alerts carry the longest histories; older ones add what
        // fell out of the 30-day window.
        for p in packets.iter().rev().take(MAX_LIGHT_CURVE_ALERTS) {
            let json = self.packet_json(&p.schema_id, &p.packet).await?;
            if survey.is_none() {
                let c = &json["candidate"];
                survey = Some((
                    c["jdstarthist"].as_f64().filter(|jd| *jd > 2_400_000.0),
                    c["ndethist"].as_i64().filter(|n| *n >= 0),
                ));
            }
            builder.add_packet(&json);
        }
        let (survey_first_jd, survey_detections) = survey.unwrap_or_default();
        let points = builder.finish();
        let first_detection_jd = lightcurve::first_detection(&points);
        let zero_jd = first_detection_jd
            .or_else(|| points.first().map(|p| p.jd))
            .unwrap_or_default();
        Ok(LightCurve {
            broker_id: broker.broker_id,
            object_id,
            points,
            alerts,
            first_detection_jd,
            zero_jd,
            survey_first_jd,
            survey_detections,
        })
    }

    /// The light curve drawn as SVG.
    pub async fn light_curve_svg(
        &self,
        caller: &Principal,
        broker_id: &str,
        object_id: &str,
    ) -> Result<String, ServiceError> {
        let lc = self.light_curve(caller, broker_id, object_id, true).await?;
        let svg = tokio::task::spawn_blocking(move || {
            super::plot::light_curve_svg(
                &lc.object_id,
                &lc.points,
                lc.zero_jd,
                lc.first_detection_jd.is_some(),
            )
        })
        .await
        .map_err(|e| ServiceError::internal(&e))?;
        Ok(svg)
    }
}
