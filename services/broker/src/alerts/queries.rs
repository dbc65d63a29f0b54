//! Alert queries: by object, by cone over the HEALPix index, by candid, in
//! a time window, trimmed or with full packets; and the checks on their
//! arguments, each refusal naming the argument.
use super::service::{
    AlertService, CONE_SCAN_CAP, DEFAULT_FULL_LIMIT, DEFAULT_LIMIT, MAX_FULL_LIMIT, MAX_LIMIT,
    MAX_RADIUS_ARCSEC,
};
use super::store::AlertRow;
use crate::sky;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;
use serde_json::Value as Json;

/// A `get_broker_alerts` request.
#[derive(Clone, Debug, Default)]
pub struct AlertQuery {
    pub broker_id: String,
    pub object_id: Option<String>,
    pub ra: Option<f64>,
    pub dec: Option<f64>,
    pub radius_arcsec: Option<f64>,
    pub jd_start: Option<f64>,
    pub jd_end: Option<f64>,
    pub candid: Option<String>,
    pub full: bool,
    pub limit: Option<i32>,
}

/// One alert of an answer.
#[derive(Clone, Debug)]
pub struct FoundAlert {
    pub row: AlertRow,
    pub candidate: Json,
    pub separation_arcsec: Option<f64>,
    /// The whole packet (full answers).
    pub packet: Option<Json>,
}

/// A `get_broker_alerts` answer.
#[derive(Clone, Debug)]
pub struct AlertAnswer {
    pub broker_id: String,
    pub query: String,
    pub alerts: Vec<FoundAlert>,
    pub matched: i64,
    pub truncated: bool,
    pub scanned: Option<i64>,
    pub suggestion: Option<String>,
}

impl AlertService {
    /// `get_broker_alerts`.
    pub async fn alerts(
        &self,
        caller: &Principal,
        q: AlertQuery,
    ) -> Result<AlertAnswer, ServiceError> {
        caller.tenant()?;
        let broker = self.broker_for(&q.broker_id, "alerts").await?;
        let (default_limit, max_limit) = if q.full {
            (DEFAULT_FULL_LIMIT, MAX_FULL_LIMIT)
        } else {
            (DEFAULT_LIMIT, MAX_LIMIT)
        };
        let limit = match q.limit {
            None => default_limit,
            Some(n) if n < 1 => {
                return Err(ServiceError::invalid(format!(
                    "limit: must be at least 1 (got {n})"
                )));
            }
            Some(n) if i64::from(n) > max_limit => {
                return Err(ServiceError::invalid(format!(
                    "limit: at most {max_limit}{} (got {n})",
                    if q.full { " with full=true" } else { "" }
                )));
            }
            Some(n) => i64::from(n),
        };
        let jd = time_window(q.jd_start, q.jd_end)?;
        let cone = q.ra.is_some() || q.dec.is_some() || q.radius_arcsec.is_some();
        let modes = [q.object_id.is_some(), cone, q.candid.is_some()]
            .iter()
            .filter(|m| **m)
            .count();
        if modes != 1 {
            return Err(ServiceError::invalid(
                "objectId: give exactly one of objectId, a cone (ra, dec, radius_arcsec) or candid",
            ));
        }
        let id = broker.broker_id.as_str();
        let mut answer = if let Some(candid) = &q.candid {
            let candid = parse_candid(candid)?;
            let Some(row) = self.store.alert(id, candid).await? else {
                return Err(ServiceError::not_found(format!(
                    "candid: no alert {candid} in broker {id:?}"
                ))
                .with_domain(DomainCode::UnknownAlert));
            };
            AlertAnswer {
                broker_id: id.to_owned(),
                query: format!("candid {candid}"),
                alerts: vec![found(row, None)?],
                matched: 1,
                truncated: false,
                scanned: None,
                suggestion: None,
            }
        } else if let Some(object_id) = &q.object_id {
            let object_id = parse_object_id(object_id)?;
            let window = jd.unwrap_or((f64::MIN, f64::MAX));
            let matched = self.store.count_of_object(id, &object_id, window).await?;
            if matched == 0 && self.store.latest_of_object(id, &object_id).await?.is_none() {
                return Err(unknown_object(&object_id, id));
            }
            let rows = self
                .store
                .alerts_of_object(id, &object_id, window, limit)
                .await?;
            let alerts = rows
                .into_iter()
                .map(|r| found(r, None))
                .collect::<Result<Vec<_>, _>>()?;
            AlertAnswer {
                broker_id: id.to_owned(),
                query: format!("objectId {object_id}{}", window_text(jd)),
                truncated: matched > alerts.len() as i64,
                suggestion: (matched > alerts.len() as i64).then(|| {
                    format!("{matched} alerts matched and {} were returned: narrow jd_start/jd_end or raise limit", alerts.len())
                }),
                alerts,
                matched,
                scanned: None,
            }
        } else {
            self.cone(id, &q, jd, limit).await?
        };
        if q.full {
            let candids: Vec<i64> = answer.alerts.iter().map(|a| a.row.candid).collect();
            let packets = self.store.packets(id, &candids).await?;
            for a in &mut answer.alerts {
                if let Some(p) = packets.iter().find(|p| p.candid == a.row.candid) {
                    a.packet = Some(self.packet_json(&p.schema_id, &p.packet).await?);
                }
            }
        }
        Ok(answer)
    }

    pub(super) async fn cone(
        &self,
        broker_id: &str,
        q: &AlertQuery,
        jd: Option<(f64, f64)>,
        limit: i64,
    ) -> Result<AlertAnswer, ServiceError> {
        let (Some(ra), Some(dec)) = (q.ra, q.dec) else {
            let missing = if q.ra.is_none() { "ra" } else { "dec" };
            return Err(ServiceError::invalid(format!(
                "{missing}: a cone search needs ra, dec and radius_arcsec"
            )));
        };
        let radius = check_radius(q.radius_arcsec)?;
        sky::check_position(ra, dec).map_err(ServiceError::invalid)?;
        let window = jd.unwrap_or((f64::MIN, f64::MAX));
        let ranges = sky::cone_ranges(ra, dec, radius);
        let candidates = self
            .store
            .cone_candidates(broker_id, &ranges, window, CONE_SCAN_CAP + 1)
            .await?;
        let scan_capped = candidates.len() as i64 > CONE_SCAN_CAP;
        let scanned = candidates.len().min(CONE_SCAN_CAP as usize) as i64;
        let mut inside: Vec<(i64, f64, f64)> = candidates
            .iter()
            .take(CONE_SCAN_CAP as usize)
            .filter_map(|c| {
                let sep = sky::separation_arcsec(ra, dec, c.ra, c.dec);
                (sep <= radius).then_some((c.candid, c.jd, sep))
            })
            .collect();
        inside.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let matched = inside.len() as i64;
        let keep: Vec<(i64, f64, f64)> = inside.into_iter().take(limit as usize).collect();
        let candids: Vec<i64> = keep.iter().map(|k| k.0).collect();
        let rows = self.store.alerts_by_candid(broker_id, &candids).await?;
        let mut alerts = Vec::with_capacity(rows.len());
        for row in rows {
            let sep = keep.iter().find(|k| k.0 == row.candid).map(|k| k.2);
            alerts.push(found(row, sep)?);
        }
        let truncated = matched > alerts.len() as i64 || scan_capped;
        let mut advice = Vec::new();
        if jd.is_none() {
            advice.push(format!(
                "no jd_start/jd_end: this is every alert ever recorded within {radius}\" ({scanned} alerts scanned); \
                 bound the search in time, for example jd_start={:.1} jd_end={:.1} for a 30-day window (convert_time turns dates into JD)",
                alerts.last().map_or(crate::astrotime::now_jd(), |a| a.row.jd) - 30.0,
                alerts.last().map_or(crate::astrotime::now_jd(), |a| a.row.jd),
            ));
        }
        if scan_capped {
            advice.push(format!("the index scan stopped at {CONE_SCAN_CAP} alerts: narrow the radius or the time window"));
        } else if truncated {
            advice.push(format!(
                "{matched} alerts matched and {} were returned: narrow the window or raise limit",
                alerts.len()
            ));
        }
        Ok(AlertAnswer {
            broker_id: broker_id.to_owned(),
            query: format!(
                "cone ra={ra} dec={dec} radius={radius}\"{}",
                window_text(jd)
            ),
            alerts,
            matched,
            truncated,
            scanned: Some(scanned),
            suggestion: (!advice.is_empty()).then(|| advice.join("; ")),
        })
    }

    /// One alert with its whole packet (the alert resource).
    pub async fn packet(
        &self,
        caller: &Principal,
        broker_id: &str,
        candid: &str,
    ) -> Result<FoundAlert, ServiceError> {
        caller.tenant()?;
        let broker = self.broker_for(broker_id, "alerts").await?;
        let candid = parse_candid(candid)?;
        let Some(row) = self.store.alert(&broker.broker_id, candid).await? else {
            return Err(ServiceError::not_found(format!(
                "candid: no alert {candid} in broker {:?}",
                broker.broker_id
            ))
            .with_domain(DomainCode::UnknownAlert));
        };
        let packets = self.store.packets(&broker.broker_id, &[candid]).await?;
        let mut alert = found(row, None)?;
        if let Some(p) = packets.first() {
            alert.packet = Some(self.packet_json(&p.schema_id, &p.packet).await?);
        }
        Ok(alert)
    }

    /// The latest alert of an object, or of a candid (crossmatch positions).
    pub async fn locate(
        &self,
        broker_id: &str,
        candid: Option<&str>,
        object_id: Option<&str>,
    ) -> Result<Option<AlertRow>, ServiceError> {
        if let Some(c) = candid {
            let candid = parse_candid(c)?;
            return match self.store.alert(broker_id, candid).await? {
                Some(row) => Ok(Some(row)),
                None => Err(ServiceError::not_found(format!(
                    "candid: no alert {candid} in broker {broker_id:?}"
                ))
                .with_domain(DomainCode::UnknownAlert)),
            };
        }
        if let Some(o) = object_id {
            let object_id = parse_object_id(o)?;
            return match self.store.latest_of_object(broker_id, &object_id).await? {
                Some(row) => Ok(Some(row)),
                None => Err(unknown_object(&object_id, broker_id)),
            };
        }
        Ok(None)
    }
}

pub(super) fn found(
    row: AlertRow,
    separation_arcsec: Option<f64>,
) -> Result<FoundAlert, ServiceError> {
    let candidate: Json =
        serde_json::from_str(&row.candidate).map_err(|e| ServiceError::internal(&e))?;
    Ok(FoundAlert {
        row,
        candidate,
        separation_arcsec,
        packet: None,
    })
}

pub(super) fn unknown_object(object_id: &str, broker_id: &str) -> ServiceError {
    ServiceError::not_found(format!(
        "objectId: no alerts of {object_id} in broker {broker_id:?}"
    ))
    .with_domain(DomainCode::UnknownObject)
}

pub(super) fn window_text(jd: Option<(f64, f64)>) -> String {
    match jd {
        None => ", no time bounds".to_owned(),
        Some((a, b)) => {
            let a = if a == f64::MIN {
                "…".to_owned()
            } else {
                format!("{a}")
            };
            let b = if b == f64::MAX {
                "…".to_owned()
            } else {
                format!("{b}")
            };
            format!(", jd {a} to {b}")
        }
    }
}

/// The time window of a query; `None` when neither bound is given.
pub fn time_window(
    start: Option<f64>,
    end: Option<f64>,
) -> Result<Option<(f64, f64)>, ServiceError> {
    for (name, v) in [("jd_start", start), ("jd_end", end)] {
        if let Some(v) = v
            && (!v.is_finite() || !(2_400_000.0..=2_600_000.0).contains(&v))
        {
            return Err(ServiceError::invalid(format!(
                "{name}: {v} is not a Julian date of the survey era (2400000 to 2600000; convert_time converts dates)"
            )));
        }
    }
    match (start, end) {
        (None, None) => Ok(None),
        (Some(a), Some(b)) if a > b => Err(ServiceError::invalid(format!(
            "jd_start: {a} is after jd_end {b}"
        ))),
        (a, b) => Ok(Some((a.unwrap_or(f64::MIN), b.unwrap_or(f64::MAX)))),
    }
}

/// A cone radius in arcsec: above 0, at most [`MAX_RADIUS_ARCSEC`].
pub fn check_radius(radius: Option<f64>) -> Result<f64, ServiceError> {
    let Some(r) = radius else {
        return Err(ServiceError::invalid(
            "radius_arcsec: required for a cone search",
        ));
    };
    if !r.is_finite() || r <= 0.0 {
        return Err(ServiceError::invalid(format!(
            "radius_arcsec: must be above 0 (got {r})"
        )));
    }
    if r > MAX_RADIUS_ARCSEC {
        return Err(ServiceError::invalid(format!(
            "radius_arcsec: at most {MAX_RADIUS_ARCSEC} (1 degree; got {r})"
        )));
    }
    Ok(r)
}

/// A candid: a positive decimal integer that fits in 63 bits.
pub fn parse_candid(raw: &str) -> Result<i64, ServiceError> {
    let t = raw.trim();
    let bad = || {
        ServiceError::invalid(format!(
            "candid: {raw:?} is not a candid (a positive decimal integer of up to 19 digits, as a string)"
        ))
    };
    if t.is_empty() || t.len() > 19 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    t.parse::<i64>().ok().filter(|c| *c > 0).ok_or_else(bad)
}

/// An objectId: 1-64 letters, digits, `_`, `-`, `.`.
pub fn parse_object_id(raw: &str) -> Result<String, ServiceError> {
    let t = raw.trim();
    if t.is_empty()
        || t.len() > 64
        || !t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        return Err(ServiceError::invalid(format!(
            "objectId: {raw:?} is not an object id (for example ZTF18abudxnw)"
        )));
    }
    Ok(t.to_owned())
}
