//! The counterpart-search defaults: the ZTF quality cuts and time window a
//! search for the optical counterpart of a GCN trigger starts from. They
//! are kept once, and every answer is a deep copy, so a caller who edits
//! what it got never changes what the next caller gets.

use ithaca_kit::error::ServiceError;
use serde_json::{Value as Json, json};
use std::sync::LazyLock;

/// The window: from the trigger to three days after it (a kilonova or an
/// afterglow is brightest early; later, unrelated transients dominate).
pub const WINDOW_START_DAYS: f64 = 0.0;
pub const WINDOW_END_DAYS: f64 = 3.0;
/// What a counterpart search sorts by, and how: nearest the trigger first.
pub const SORT_BY: &str = "candidate.jd";
pub const SORT_ORDER: &str = "Ascending";

/// The stored cuts. Never handed out: [`defaults`] copies them.
static CUTS: LazyLock<Json> = LazyLock::new(|| {
    json!([
        {"$match": {
            "candidate.isdiffpos": {"$in": ["t", "1"]},
            "candidate.drb": {"$gte": 0.5},
            "candidate.nbad": {"$lte": 5},
            "candidate.fwhm": {"$lte": 5},
            "candidate.elong": {"$lte": 1.5},
            "candidate.ndethist": {"$gte": 2},
            "$and": [
                {"$or": [
                    {"candidate.ssdistnr": {"$lt": 0}},
                    {"candidate.ssdistnr": {"$gte": 12}}
                ]},
                {"$or": [
                    {"candidate.sgscore1": {"$lt": 0.76}},
                    {"candidate.distpsnr1": {"$gt": 2}}
                ]}
            ]
        }},
        {"$project": {
            "objectId": 1,
            "candid": 1,
            "candidate.jd": 1,
            "candidate.ra": 1,
            "candidate.dec": 1,
            "candidate.fid": 1,
            "candidate.magpsf": 1,
            "candidate.sigmapsf": 1,
            "candidate.drb": 1,
            "candidate.ndethist": 1,
            "candidate.jdstarthist": 1
        }}
    ])
});

/// What each cut is for, in the order they appear.
pub const NOTES: [&str; 9] = [
    "candidate.isdiffpos in t/1: brighter than the reference (a new or brightening source)",
    "candidate.drb >= 0.5: the deep-learning real-bogus score calls it real",
    "candidate.nbad <= 5, fwhm <= 5, elong <= 1.5: a clean, point-like subtraction",
    "candidate.ndethist >= 2: detected at least twice, which rejects single-epoch artefacts",
    "candidate.ssdistnr < 0 or >= 12: no known solar-system object within 12 arcsec",
    "candidate.sgscore1 < 0.76 or distpsnr1 > 2: not on a PS1 star",
    "with trigger_jd: candidate.jdstarthist >= trigger_jd, first detected after the trigger",
    "the window runs from the trigger to 3 days after it; pass it as jd_start/jd_end with dateobs",
    "sort_by candidate.jd with sort_order Ascending keeps the alerts nearest the trigger",
];

/// The defaults as handed out.
#[derive(Clone, Debug)]
pub struct Defaults {
    pub pipeline: Json,
    pub jd_start: Option<f64>,
    pub jd_end: Option<f64>,
}

/// A deep copy of the defaults; with a trigger, the absolute window and a
/// cut on first detection after the trigger.
pub fn defaults(trigger_jd: Option<f64>) -> Result<Defaults, ServiceError> {
    let mut pipeline = CUTS.clone();
    let Some(trigger) = trigger_jd else {
        return Ok(Defaults {
            pipeline,
            jd_start: None,
            jd_end: None,
        });
    };
    if !trigger.is_finite() || !(2_400_000.0..=2_600_000.0).contains(&trigger) {
        return Err(ServiceError::invalid(format!(
            "trigger_jd: {trigger} is not a Julian date of the survey era (2400000 to 2600000; convert_time converts dates)"
        )));
    }
    if let Some(m) = pipeline
        .get_mut(0)
        .and_then(|s| s.get_mut("$match"))
        .and_then(Json::as_object_mut)
    {
        m.insert("candidate.jdstarthist".to_owned(), json!({"$gte": trigger}));
    }
    Ok(Defaults {
        pipeline,
        jd_start: Some(trigger + WINDOW_START_DAYS),
        jd_end: Some(trigger + WINDOW_END_DAYS),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_copies() {
        let mut first = defaults(None).expect("defaults").pipeline;
        let untouched = first.clone();
        first[0]["$match"]["candidate.drb"] = json!({"$gte": 0.99});
        first.as_array_mut().expect("array").clear();
        assert_eq!(defaults(None).expect("defaults").pipeline, untouched);
        let with = defaults(Some(2_457_983.03)).expect("trigger");
        assert_eq!(
            with.pipeline[0]["$match"]["candidate.jdstarthist"],
            json!({"$gte": 2_457_983.03})
        );
        assert_eq!(defaults(None).expect("defaults").pipeline, untouched);
        assert!(defaults(Some(f64::NAN)).is_err());
    }
}
