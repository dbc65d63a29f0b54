//! Catalog ingest and `crossmatch_broker_catalogs`.

use super::parse::{self, Catalog, SourceRow};
use super::store::CatalogStore;
use crate::alerts::AlertService;
use crate::alerts::service::check_radius;
use crate::astrotime;
use crate::sky;
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::{Actor, Principal};
use sha2::{Digest, Sha256};

/// Default crossmatch radius, arcsec.
pub const DEFAULT_RADIUS_ARCSEC: f64 = 60.0;
/// Default and largest number of matches.
pub const DEFAULT_MATCHES: usize = 20;
pub const MAX_MATCHES: usize = 200;
/// Speed of light, km/s, and the Hubble constant used for distances.
const C_KM_S: f64 = 299_792.458;
pub const H0: f64 = 70.0;

/// What an ingest did.
#[derive(Clone, Debug)]
pub struct CatalogReport {
    pub catalog: &'static str,
    pub source: String,
    pub checksum: String,
    pub rows: i64,
    pub already_present: bool,
}

/// A crossmatch request.
#[derive(Clone, Debug, Default)]
pub struct CrossmatchQuery {
    pub broker_id: String,
    pub ra: Option<f64>,
    pub dec: Option<f64>,
    pub radius_arcsec: Option<f64>,
    pub candid: Option<String>,
    pub object_id: Option<String>,
    pub epoch_jd: Option<f64>,
    pub catalogs: Vec<String>,
    pub limit: Option<i32>,
}

/// One match.
#[derive(Clone, Debug)]
pub struct Match {
    pub source: SourceRow,
    pub separation_arcsec: f64,
    /// Position at the epoch asked.
    pub ra: f64,
    pub dec: f64,
}

impl Match {
    /// cz/H0 for galaxies receding faster than peculiar velocities.
    pub fn distance_mpc(&self) -> Option<f64> {
        self.source
            .redshift
            .filter(|z| *z > 0.001)
            .map(|z| C_KM_S * z / H0)
    }
}

/// A crossmatch answer.
#[derive(Clone, Debug)]
pub struct CrossmatchAnswer {
    pub broker_id: String,
    pub ra: f64,
    pub dec: f64,
    pub radius_arcsec: f64,
    pub epoch_jd: f64,
    pub position_from: String,
    pub catalogs: Vec<&'static str>,
    pub matches: Vec<Match>,
    pub truncated: bool,
    /// What each catalog searched holds.
    pub coverage: Vec<Coverage>,
    /// The survey's own crossmatch fields of the named alert.
    pub survey: Option<serde_json::Value>,
    /// When nothing matched: what that means.
    pub note: Option<String>,
}

/// What one reference catalog holds, from its rows.
#[derive(Clone, Debug)]
pub struct Coverage {
    pub catalog: &'static str,
    pub sources: i64,
    pub holds: String,
    pub sky: &'static str,
}

/// The fields of a ZTF candidate that are the survey's own crossmatch:
/// the three nearest Pan-STARRS1 sources (id, distance, star/galaxy score,
/// magnitudes), the nearest Gaia sources, the nearest reference-image
/// source and the nearest known solar-system object.
const SURVEY_FIELDS: &[&str] = &[
    "objectidps1",
    "distpsnr1",
    "sgscore1",
    "sgmag1",
    "srmag1",
    "simag1",
    "szmag1",
    "objectidps2",
    "distpsnr2",
    "sgscore2",
    "srmag2",
    "objectidps3",
    "distpsnr3",
    "sgscore3",
    "srmag3",
    "nmtchps",
    "neargaia",
    "maggaia",
    "neargaiabright",
    "maggaiabright",
    "distnr",
    "magnr",
    "sigmagnr",
    "chinr",
    "sharpnr",
    "ssdistnr",
    "ssmagnr",
    "ssnamenr",
];

/// The survey's crossmatch fields of a candidate record (JSON), those present.
fn survey_crossmatch(candidate: &str) -> Option<serde_json::Value> {
    let candidate: serde_json::Value = serde_json::from_str(candidate).ok()?;
    let kept: serde_json::Map<String, serde_json::Value> = SURVEY_FIELDS
        .iter()
        .filter_map(|f| {
            candidate
                .get(*f)
                .filter(|v| !v.is_null())
                .map(|v| ((*f).to_owned(), v.clone()))
        })
        .collect();
    (!kept.is_empty()).then_some(serde_json::Value::Object(kept))
}

/// Reference catalogs.
#[derive(Clone, Debug)]
pub struct CatalogService {
    store: CatalogStore,
    alerts: AlertService,
}

impl CatalogService {
    pub fn new(store: CatalogStore, alerts: AlertService) -> Self {
        CatalogService { store, alerts }
    }

    /// Ingest a catalog file. Administrators only; a file ingested before
    /// changes nothing; a bad line is named and nothing is stored.
    pub async fn ingest(
        &self,
        caller: &Principal,
        source: &str,
        bytes: &[u8],
    ) -> Result<CatalogReport, ServiceError> {
        self.ingest_reporting(caller, source, bytes, None).await
    }

    /// [`Self::ingest`], reporting sources stored of total to `progress`
    /// once the file is parsed (every insert batch; a file ingested before:
    /// all of it at once).
    pub async fn ingest_reporting(
        &self,
        caller: &Principal,
        source: &str,
        bytes: &[u8],
        progress: Option<&crate::progress::Progress>,
    ) -> Result<CatalogReport, ServiceError> {
        if caller.actor() != Actor::System {
            return Err(ServiceError::denied("only administrators ingest catalogs"));
        }
        let source = if source.trim().is_empty() {
            "catalog.csv"
        } else {
            source.trim()
        }
        .to_owned();
        let checksum = hex::encode(Sha256::digest(bytes));
        let (catalog, rows) = parse::parse(bytes).map_err(|e| {
            ServiceError::invalid(format!("{source}: {e}")).with_domain(DomainCode::BadCatalogFile)
        })?;
        if let Some((_, count)) = self.store.file(&checksum).await? {
            let stored = u64::try_from(count).unwrap_or(0);
            crate::progress::report(progress, stored, stored);
            return Ok(CatalogReport {
                catalog: catalog.as_str(),
                source,
                checksum,
                rows: count,
                already_present: true,
            });
        }
        self.store
            .ingest(
                &checksum,
                &source,
                catalog.as_str(),
                &rows,
                clock::now_ms(),
                progress,
            )
            .await?;
        tracing::info!(
            catalog = catalog.as_str(),
            rows = rows.len(),
            "catalog ingested"
        );
        Ok(CatalogReport {
            catalog: catalog.as_str(),
            source,
            checksum,
            rows: rows.len() as i64,
            already_present: false,
        })
    }

    /// Rows per catalog.
    pub async fn counts(&self) -> Result<Vec<(String, i64)>, ServiceError> {
        let rows = self.store.coverage().await?;
        Ok(rows
            .into_iter()
            .map(|(catalog, n, ..)| (catalog, n))
            .collect())
    }

    /// `crossmatch_broker_catalogs`.
    pub async fn crossmatch(
        &self,
        caller: &Principal,
        q: CrossmatchQuery,
    ) -> Result<CrossmatchAnswer, ServiceError> {
        if caller.tenant_id().is_empty() && caller.actor() != Actor::System {
            return Err(ServiceError::denied("the caller has no tenant"));
        }
        let broker = self.alerts.broker_for(&q.broker_id, "crossmatch").await?;
        let named = q.candid.is_some() || q.object_id.is_some();
        let given = q.ra.is_some() || q.dec.is_some();
        if named == given {
            return Err(ServiceError::invalid(
                "ra: give a position (ra and dec) or name an alert (candid or objectId), not both or neither",
            ));
        }
        if q.candid.is_some() && q.object_id.is_some() {
            return Err(ServiceError::invalid(
                "candid: give candid or objectId, not both",
            ));
        }
        let radius = check_radius(Some(q.radius_arcsec.unwrap_or(DEFAULT_RADIUS_ARCSEC)))?;
        let limit = match q.limit {
            None => DEFAULT_MATCHES,
            Some(n) if n < 1 || n as usize > MAX_MATCHES => {
                return Err(ServiceError::invalid(format!(
                    "limit: 1 to {MAX_MATCHES} (got {n})"
                )));
            }
            Some(n) => n as usize,
        };
        let mut catalogs: Vec<Catalog> = Vec::new();
        for name in &q.catalogs {
            let Some(c) = Catalog::parse(name) else {
                return Err(ServiceError::invalid(format!(
                    "catalogs: {name:?} is not one of hipparcos2, openngc"
                )));
            };
            if !catalogs.contains(&c) {
                catalogs.push(c);
            }
        }
        if catalogs.is_empty() {
            catalogs = Catalog::ALL.to_vec();
        }
        let mut survey = None;
        let (ra, dec, alert_jd, position_from) = if named {
            let row = self
                .alerts
                .locate(
                    &broker.broker_id,
                    q.candid.as_deref(),
                    q.object_id.as_deref(),
                )
                .await?
                .ok_or_else(|| ServiceError::invalid("candid: required"))?;
            let from = format!("alert {} of {}", row.candid, row.object_id);
            survey = survey_crossmatch(&row.candidate);
            (row.ra, row.dec, Some(row.jd), from)
        } else {
            let (Some(ra), Some(dec)) = (q.ra, q.dec) else {
                let missing = if q.ra.is_none() { "ra" } else { "dec" };
                return Err(ServiceError::invalid(format!(
                    "{missing}: required with the other coordinate"
                )));
            };
            sky::check_position(ra, dec).map_err(ServiceError::invalid)?;
            (ra, dec, None, "given".to_owned())
        };
        if let Some(e) = q.epoch_jd
            && (!e.is_finite() || !(2_300_000.0..=2_700_000.0).contains(&e))
        {
            return Err(ServiceError::invalid(format!(
                "epoch_jd: {e} is not a Julian date between 2300000 and 2700000 (convert_time converts dates)"
            )));
        }
        let epoch_jd = q.epoch_jd.or(alert_jd).unwrap_or_else(astrotime::now_jd);
        let epoch_year = astrotime::julian_year(epoch_jd);
        // A star may have moved into the cone from outside it: search wider
        // by the most any star of the catalog can have moved, then keep what
        // lies within the radius once moved.
        let mut reach = radius;
        if catalogs.contains(&Catalog::Hipparcos2)
            && let Some(pm) = self
                .store
                .max_proper_motion(Catalog::Hipparcos2.as_str())
                .await?
        {
            reach += pm / 1000.0 * (epoch_year - parse::HIPPARCOS_EPOCH).abs() + 1.0;
        }
        let ranges = sky::cone_ranges(ra, dec, reach.min(4.0 * 3600.0));
        let names: Vec<&str> = catalogs.iter().map(|c| c.as_str()).collect();
        let sources = self.store.in_ranges(&names, &ranges).await?;
        let mut matches: Vec<Match> = sources
            .into_iter()
            .filter_map(|s| {
                let (sra, sdec) = match (s.pm_ra, s.pm_dec) {
                    (Some(pa), Some(pd)) => {
                        sky::apply_proper_motion(s.ra, s.dec, pa, pd, epoch_year - s.epoch)
                    }
                    _ => (s.ra, s.dec),
                };
                let sep = sky::separation_arcsec(ra, dec, sra, sdec);
                (sep <= radius).then_some(Match {
                    source: s,
                    separation_arcsec: sep,
                    ra: sra,
                    dec: sdec,
                })
            })
            .collect();
        matches.sort_by(|a, b| a.separation_arcsec.total_cmp(&b.separation_arcsec));
        let truncated = matches.len() > limit;
        matches.truncate(limit);
        let coverage: Vec<Coverage> = self
            .store
            .coverage()
            .await?
            .into_iter()
            .filter_map(|(name, sources, mag, band, z)| {
                let catalog = catalogs.iter().find(|c| c.as_str() == name)?.as_str();
                let holds = match (catalog, mag, z) {
                    ("hipparcos2", Some(m), _) => format!(
                        "{sources} stars, the faintest {} {m:.2}: only the brightest stars",
                        band.as_deref().unwrap_or("mag")
                    ),
                    ("openngc", _, Some(z)) => format!(
                        "{sources} galaxies, redshift at most {z:.4}: only the nearest galaxies"
                    ),
                    _ => format!("{sources} sources"),
                };
                Some(Coverage {
                    catalog,
                    sources,
                    holds,
                    sky: "the whole sky",
                })
            })
            .collect();
        let note = matches.is_empty().then(|| {
            let held: Vec<String> = coverage.iter().map(|c| format!("{}: {}", c.catalog, c.holds)).collect();
            let mut note = format!(
                "no source of these catalogs within {radius} arcsec. That does not mean nothing is there: \
                 they hold only {}",
                if held.is_empty() { "nothing yet (ingest them with ithaca ingest catalog)".to_owned() } else { held.join("; ") }
            );
            if let Some(s) = &survey {
                match (s.get("distpsnr1").and_then(serde_json::Value::as_f64), s.get("sgscore1").and_then(serde_json::Value::as_f64)) {
                    (Some(d), Some(score)) if d >= 0.0 && score >= 0.0 => note.push_str(&format!(
                        ". The survey's own crossmatch (survey_crossmatch) puts a Pan-STARRS1 source {d:.2} arcsec away, \
                         star/galaxy score {score:.2} (1 is a star)"
                    )),
                    _ => note.push_str(". The survey's own crossmatch is in survey_crossmatch"),
                }
            }
            note
        });
        Ok(CrossmatchAnswer {
            broker_id: broker.broker_id,
            ra,
            dec,
            radius_arcsec: radius,
            epoch_jd,
            position_from,
            catalogs: names,
            matches,
            truncated,
            coverage,
            survey,
            note,
        })
    }
}
