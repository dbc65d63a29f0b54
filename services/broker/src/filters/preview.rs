//! The preview: a compiled pipeline run over the stored alerts of a broker,
//! restricted to a time window, a sky region and programmes, answering a
//! count, or the top alerts by a field when `sort_by` is given.
//!
//! A region is a MOC (IVOA Multi-Order Coverage map, CDS's `moc` crate), not
//! a cone: a GCN localisation becomes the MOC of its error circle, and the
//! archive is read through the `hpx` index ranges of the MOC's cells. Rows
//! stream from the database in batches to a blocking evaluator, so a
//! million-alert preview holds a few thousand rows at a time; each alert's
//! `candidate` is read only for the fields the pipeline needs, and parsed
//! whole only for the alerts that enter the top `limit`.

use super::compact::{Bind, CompactPlan};
use super::document::strip;
pub use super::document::{alert_document, packet_document};
use super::pipeline::scan::{KeySet, fill_subset};
use super::pipeline::{CandidateNeeds, Pipeline, compare_values, needs_of, value_at};
use crate::alerts::avro;
use crate::alerts::cuts::{self, CutRef, Kind};
use crate::alerts::service::time_window;
use crate::alerts::store::AlertStore;
use crate::sky;
use apache_avro::Schema;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::with_pool;
use moc::elem::cellcellrange::CellOrCellRange;
use moc::moc::HasMaxDepth;
use moc::moc::range::CellSelection;
use moc::qty::Hpx;
use serde_json::{Map, Value};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use tokio_stream::{Stream, StreamExt};

pub use crate::sky::{MAX_ASCII_MOC, SkyMoc};

/// Most alerts a sorted preview returns.
pub const MAX_PREVIEW_ALERTS: usize = 1000;
/// Rows handed to the evaluator at a time.
pub const BATCH: usize = 1024;
/// Most index ranges a preview reads; a finer MOC is read through a coarser
/// cover and each alert checked against the MOC itself.
pub const MAX_RANGES: usize = 256;
/// Index ranges per SQL statement (SQLite caps a compound SELECT at 500).
const RANGES_PER_STATEMENT: usize = 64;

/// Where on the sky a preview looks.
#[derive(Clone, Debug)]
pub enum Region {
    /// A localisation: a position and an error radius (degrees), read as
    /// the MOC of the cells the circle touches (cells under a fiftieth of
    /// the radius across, so the MOC hugs the circle).
    Cone {
        ra_deg: f64,
        dec_deg: f64,
        radius_deg: f64,
    },
    /// Any MOC (a credible region of a skymap, say).
    Moc(SkyMoc),
}

impl Region {
    /// A MOC in the IVOA ASCII serialisation (`"3/1-5 4/10"`), cells in
    /// any order, depth at most 29.
    pub fn from_ascii(text: &str) -> Result<Region, ServiceError> {
        let bad =
            |why: String| ServiceError::invalid(format!("region: not an IVOA ASCII MOC ({why})"));
        if text.len() > MAX_ASCII_MOC {
            return Err(bad(format!("longer than {MAX_ASCII_MOC} bytes")));
        }
        // The parser takes any depth that fits a byte; past 29 its cell
        // arithmetic overflows, so depths are checked first.
        for token in text.split_whitespace() {
            if let Some((depth, _)) = token.split_once('/')
                && !depth.parse::<u8>().is_ok_and(|d| d <= sky::INDEX_DEPTH)
            {
                return Err(bad(format!("{depth:?} is not a depth from 0 to 29")));
            }
        }
        let parsed = moc::deser::ascii::from_ascii_ivoa::<u64, Hpx<u64>>(text)
            .map_err(|e| bad(e.to_string()))?;
        let depth = parsed.depth_max();
        let mut ranges = Vec::new();
        for elem in parsed.elems().0.iter() {
            let (d, start, end) = match elem {
                CellOrCellRange::Cell(c) => (c.depth, c.idx, c.idx.saturating_add(1)),
                CellOrCellRange::CellRange(r) => (r.depth, r.range.start, r.range.end),
            };
            let cells = 12u64 << (2 * u32::from(d));
            if d > sky::INDEX_DEPTH || start >= end || end > cells {
                return Err(bad(format!("{d}/{start}-{end} is not a range of cells")));
            }
            let shift = 2 * u32::from(sky::INDEX_DEPTH - d);
            ranges.push((start << shift)..(end << shift));
        }
        Ok(Region::Moc(SkyMoc::from_maxdepth_ranges(
            depth,
            ranges.into_iter(),
            None,
        )))
    }

    /// The region as a MOC, checked.
    pub fn to_moc(&self) -> Result<SkyMoc, ServiceError> {
        match self {
            Region::Moc(m) => Ok(m.clone()),
            Region::Cone {
                ra_deg,
                dec_deg,
                radius_deg,
            } => {
                sky::check_position(*ra_deg, *dec_deg)
                    .map_err(|e| ServiceError::invalid(format!("region.{e}")))?;
                if !radius_deg.is_finite() || *radius_deg <= 0.0 || *radius_deg > 180.0 {
                    return Err(ServiceError::invalid(format!(
                        "region.radius_deg: {radius_deg} is not a radius (above 0, at most 180 degrees)"
                    )));
                }
                let radius = radius_deg.to_radians();
                let depth = cone_depth(radius);
                Ok(SkyMoc::from_cone(
                    ra_deg.to_radians(),
                    dec_deg.to_radians(),
                    radius,
                    depth,
                    2,
                    CellSelection::All,
                ))
            }
        }
    }
}

/// The MOC depth for a cone: six depths below the one where the cone
/// covers a few cells, so cells are under a fiftieth of the radius across
/// (at most the index depth).
fn cone_depth(radius_rad: f64) -> u8 {
    let start = cdshealpix::best_starting_depth(radius_rad);
    (start + 6).min(sky::INDEX_DEPTH)
}

/// A preview request.
#[derive(Clone, Debug, Default)]
pub struct PreviewQuery {
    pub broker_id: String,
    pub jd_start: Option<f64>,
    pub jd_end: Option<f64>,
    pub region: Option<Region>,
    /// Only alerts of these programmes (`candidate.programid`); empty: all.
    pub programids: Vec<i32>,
    /// A path into the pipeline's output: the alerts themselves are
    /// returned, the top `limit` by it. Without it only counts come back.
    pub sort_by: Option<String>,
    pub ascending: bool,
    pub limit: usize,
    /// Paths the stream withholds (`candidate.programpi`, `fp_hists`): the
    /// pipeline runs on documents without them, as on the live stream, so
    /// neither the counts nor the alerts returned depend on them.
    pub withheld: Vec<String>,
}

/// What a preview found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PreviewResult {
    /// Alerts in the window, region and programmes that the pipeline ran on.
    pub evaluated: u64,
    /// Those that passed.
    pub matched: u64,
    /// The top `limit` passing alerts by `sort_by` (best first), as the
    /// pipeline output them; empty without `sort_by`.
    pub alerts: Vec<Value>,
    /// `(stage index, alerts kept)` of each `$match` stage, in order: how
    /// far the evaluated alerts got, to tell which cut left nothing.
    pub kept: Vec<(usize, u64)>,
}

/// Run `pipeline` over the stored alerts `q` selects.
pub async fn preview(
    store: &AlertStore,
    pipeline: &Pipeline,
    q: &PreviewQuery,
) -> Result<PreviewResult, ServiceError> {
    let broker_id = q.broker_id.trim();
    if store.broker(broker_id).await?.is_none() {
        return Err(
            ServiceError::not_found(format!("broker_id: no broker {broker_id:?}"))
                .with_domain(DomainCode::UnknownBroker),
        );
    }
    let window = time_window(q.jd_start, q.jd_end)?.unwrap_or((f64::MIN, f64::MAX));
    let sort = match &q.sort_by {
        None => None,
        Some(path) => {
            let path = path.trim();
            let reads_alert = pipeline
                .check_output_path(path)
                .map_err(|p| ServiceError::invalid(p.to_string()))?;
            if q.limit == 0 || q.limit > MAX_PREVIEW_ALERTS {
                return Err(ServiceError::invalid(format!(
                    "limit: 1 to {MAX_PREVIEW_ALERTS} alerts with sort_by (got {})",
                    q.limit
                )));
            }
            Some(Sort {
                path: path.to_owned(),
                reads_alert,
                ascending: q.ascending,
                limit: q.limit,
                heap: BinaryHeap::new(),
            })
        }
    };
    let (ranges, exact) = match &q.region {
        None => (None, None),
        Some(region) => {
            let moc = region.to_moc()?;
            let (ranges, coarse) = index_ranges(&moc);
            (Some(ranges), coarse.then(|| Arc::new(moc)))
        }
    };

    // What the evaluator reads of each alert.
    let mut fields: Vec<String> = Vec::new();
    if !q.programids.is_empty() {
        fields.push("candidate.programid".to_owned());
    }
    if let Some(s) = sort.as_ref().filter(|s| s.reads_alert) {
        fields.push(s.path.split('.').take(2).collect::<Vec<_>>().join("."));
    }
    let extra = needs_of(fields.iter().map(String::as_str));
    let needs = pipeline.needs();
    let packet = needs.packet || extra.packet;
    let keys = match (&needs.candidate, &extra.candidate) {
        (CandidateNeeds::Whole, _) | (_, CandidateNeeds::Whole) => None,
        (a, b) => {
            let mut keys: Vec<String> = [a, b]
                .into_iter()
                .filter_map(|n| match n {
                    CandidateNeeds::Keys(k) => Some(k.clone()),
                    _ => None,
                })
                .flatten()
                .collect();
            keys.sort();
            keys.dedup();
            // A withheld candidate field is never read, so it is absent.
            keys.retain(|k| {
                !q.withheld
                    .iter()
                    .any(|w| w.strip_prefix("candidate.") == Some(k))
            });
            Some(keys)
        }
    };
    // Read the compact filter records instead of the candidates when they
    // hold every field read and every alert has one; the database applies
    // the pipeline's first cuts then (not through a coarse region cover,
    // whose alerts are checked one by one, so the database cannot count
    // them).
    let compact = match &keys {
        Some(keys) if !packet => match CompactPlan::new(keys) {
            Some(plan) if store.cuts_ready().await? => Some(plan),
            _ => None,
        },
        _ => None,
    };
    let compact = compact.map(|mut plan| {
        if exact.is_none() {
            plan.push_down(&pipeline.leading_cuts(), &q.withheld, &q.programids);
        }
        plan
    });
    let schemas = if packet {
        writer_schemas(store).await?
    } else {
        HashMap::new()
    };
    let mut scanner = Scanner {
        pipeline: pipeline.clone(),
        compact: compact.clone(),
        counting: true,
        keys: keys.map(KeySet::new),
        doc: alert_document("", 0, "", Value::Object(Map::new())),
        packet,
        schemas,
        programids: q.programids.clone(),
        withheld: q.withheld.clone(),
        exact,
        sort,
        evaluated: 0,
        matched: 0,
        kept: vec![0; pipeline.stage_count()],
    };

    let ranges = ranges.as_deref();
    let mut pushed_count = 0u64;
    if let Some(plan) = &compact {
        let select = format!("SELECT {} FROM alert_cuts", plan.columns());
        scanner.counting = !plan.pushes();
        for (sql, bounds, binds) in statements(&select, ranges, Some(plan), "present >= 0") {
            scanner = with_pool!(store.db(), pool => {
                let query = bind_all(sqlx::query(&sql), broker_id, window, &bounds, &binds);
                scan_rows(query.fetch(pool), scanner, true).await?
            });
        }
        if plan.pushes() {
            // The database left out the alerts the first stage drops; it
            // counts those the pipeline would have run on.
            let counting = plan.counting();
            for (sql, bounds, binds) in statements(
                "SELECT COUNT(*) FROM alert_cuts",
                ranges,
                Some(&counting),
                "present >= 0",
            ) {
                let counts: Vec<i64> = with_pool!(store.db(), pool => {
                    bind_all(sqlx::query_scalar::<_, i64>(&sql), broker_id, window, &bounds, &binds)
                        .fetch_all(pool)
                        .await
                })?;
                pushed_count += counts
                    .into_iter()
                    .map(|n| u64::try_from(n).unwrap_or(0))
                    .sum::<u64>();
            }
        }
        scanner.counting = true;
    }
    // Every alert, or (reading the records) those whose record could not
    // carry their candidate: from the candidates' JSON.
    let spilled = "candid IN (SELECT candid FROM alert_cuts WHERE broker_id = $1 AND present < 0)";
    let json_pass = compact.is_none() || store.has_spilled_cuts(broker_id).await?;
    if json_pass {
        let columns = if packet {
            "candid, object_id, schemavsn, hpx, candidate, schema_id, packet"
        } else {
            "candid, object_id, schemavsn, hpx, candidate"
        };
        let select = format!("SELECT {columns} FROM alerts");
        let only = if compact.is_some() { spilled } else { "" };
        for (sql, bounds, binds) in statements(&select, ranges, None, only) {
            scanner = with_pool!(store.db(), pool => {
                let query = bind_all(sqlx::query(&sql), broker_id, window, &bounds, &binds);
                scan_rows(query.fetch(pool), scanner, false).await?
            });
        }
    }
    let (mut result, partial) = scanner.finish();
    result.evaluated += pushed_count;
    whole_outputs(
        store,
        broker_id,
        pipeline,
        &q.withheld,
        &mut result.alerts,
        partial,
    )
    .await?;
    Ok(result)
}

/// A statement of a scan: its SQL, the index ranges its parts read, and
/// the pushed-down cuts' values.
type Statement = (String, Vec<(i64, i64)>, Vec<Bind>);

/// The statements of a scan: `select` over the time window, one part per
/// index range (glued with `UNION ALL`, [`RANGES_PER_STATEMENT`] ranges a
/// statement) or one over the whole table, with `extra` (a condition on
/// the table, or empty) and `plan`'s pushed-down cuts. Placeholders: `$1`
/// the broker, `$2`/`$3` the window, then each part's range, then the
/// cuts (shared by every part).
fn statements(
    select: &str,
    ranges: Option<&[(i64, i64)]>,
    plan: Option<&CompactPlan>,
    extra: &str,
) -> Vec<Statement> {
    let mut base = format!("{select} WHERE broker_id = $1 AND jd >= $2 AND jd <= $3");
    if !extra.is_empty() {
        base.push_str(" AND ");
        base.push_str(extra);
    }
    let binds = plan.map(CompactPlan::binds).unwrap_or_default();
    let render = |parts: &[(i64, i64)]| {
        let first = 4 + 2 * parts.len();
        let cuts = plan.map(|p| p.condition(first).0).unwrap_or_default();
        if parts.is_empty() {
            return format!("{base}{cuts}");
        }
        (0..parts.len())
            .map(|i| {
                format!(
                    "{base} AND hpx BETWEEN ${} AND ${}{cuts}",
                    4 + 2 * i,
                    5 + 2 * i
                )
            })
            .collect::<Vec<_>>()
            .join(" UNION ALL ")
    };
    match ranges {
        None => vec![(render(&[]), Vec::new(), binds)],
        Some(ranges) => ranges
            .chunks(RANGES_PER_STATEMENT)
            .map(|chunk| (render(chunk), chunk.to_vec(), binds.clone()))
            .collect(),
    }
}

/// Bind a statement of [`statements`]: the broker, the window, the ranges
/// and the cuts' values.
fn bind_all<'q, Q: Bindable<'q>>(
    query: Q,
    broker_id: &'q str,
    window: (f64, f64),
    bounds: &[(i64, i64)],
    binds: &'q [Bind],
) -> Q {
    let mut query = query
        .bind_str(broker_id)
        .bind_f64(window.0)
        .bind_f64(window.1);
    for (start, end) in bounds {
        query = query.bind_i64(*start).bind_i64(*end);
    }
    for b in binds {
        query = match b {
            Bind::Int(i) => query.bind_i64(*i),
            Bind::Real(f) => query.bind_f64(*f),
            Bind::Text(t) => query.bind_str(t),
        };
    }
    query
}

/// The binds the scan statements take, on both backends and both kinds
/// of query (rows, and the count's scalars).
trait Bindable<'q>: Sized {
    fn bind_str(self, v: &'q str) -> Self;
    fn bind_f64(self, v: f64) -> Self;
    fn bind_i64(self, v: i64) -> Self;
}

macro_rules! bindable {
    ($($ty:ty),*) => {$(
        impl<'q> Bindable<'q> for $ty {
            fn bind_str(self, v: &'q str) -> Self { self.bind(v) }
            fn bind_f64(self, v: f64) -> Self { self.bind(v) }
            fn bind_i64(self, v: i64) -> Self { self.bind(v) }
        }
    )*};
}

bindable!(
    sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    sqlx::query::QueryScalar<'q, sqlx::Sqlite, i64, sqlx::sqlite::SqliteArguments<'q>>,
    sqlx::query::QueryScalar<'q, sqlx::Postgres, i64, sqlx::postgres::PgArguments>
);

/// Replace the outputs of `alerts` at `partial` (index, candid): made from
/// the fields the scan read, they become the outputs of the whole alert
/// (matches are few; the top `limit` are fewer).
async fn whole_outputs(
    store: &AlertStore,
    broker_id: &str,
    pipeline: &Pipeline,
    withheld: &[String],
    alerts: &mut [Value],
    partial: Vec<(usize, i64)>,
) -> Result<(), ServiceError> {
    if partial.is_empty() {
        return Ok(());
    }
    let candids: Vec<i64> = partial.iter().map(|(_, c)| *c).collect();
    let rows = store.alerts_by_candid(broker_id, &candids).await?;
    for row in rows {
        let Some((index, _)) = partial.iter().find(|(_, c)| *c == row.candid) else {
            continue;
        };
        let candidate: Value =
            serde_json::from_str(&row.candidate).map_err(|_| corrupt("candidate"))?;
        let mut full = alert_document(&row.object_id, row.candid, &row.schemavsn, candidate);
        strip(&mut full, withheld);
        if let (Some(out), Some(slot)) = (pipeline.eval(&full), alerts.get_mut(*index)) {
            *slot = out;
        }
    }
    Ok(())
}

/// One alert document through `pipeline`: the document that passed, or
/// `None`. The reference the preview's scan is tested against; the live
/// path (`live.rs`) evaluates its compiled pipelines itself.
pub fn matches(pipeline: &Pipeline, alert_doc: &Value) -> Option<Value> {
    pipeline.eval(alert_doc)
}

/// Refill a document made by [`alert_document`] for the next alert, reading
/// only `keys` of its candidate.
fn fill_document(
    doc: &mut Value,
    object_id: &str,
    candid: i64,
    schemavsn: &str,
    candidate: &str,
    keys: &KeySet,
) -> Result<(), serde_json::Error> {
    match fill_ids(doc, object_id, candid, schemavsn) {
        Some(c) => fill_subset(candidate, keys, c),
        None => Err(<serde_json::Error as serde::de::Error>::custom(
            "the document is not an object",
        )),
    }
}

/// Set the ids of a document made by [`alert_document`] for the next
/// alert, reusing its strings, and return its candidate object (always
/// `Some`: a document that is not one is made anew).
fn fill_ids<'d>(
    doc: &'d mut Value,
    object_id: &str,
    candid: i64,
    schemavsn: &str,
) -> Option<&'d mut Map<String, Value>> {
    if !doc.is_object() {
        *doc = alert_document(object_id, candid, schemavsn, Value::Object(Map::new()));
    }
    let top = doc.as_object_mut()?;
    for (name, text) in [("objectId", object_id), ("schemavsn", schemavsn)] {
        match top.get_mut(name) {
            Some(Value::String(s)) => {
                s.clear();
                s.push_str(text);
            }
            _ => {
                top.insert(name.to_owned(), Value::from(text));
            }
        }
    }
    top.insert("candid".to_owned(), Value::from(candid));
    if !matches!(top.get("candidate"), Some(Value::Object(_))) {
        top.insert("candidate".to_owned(), Value::Object(Map::new()));
    }
    top.get_mut("candidate").and_then(Value::as_object_mut)
}

/// The `hpx` ranges (inclusive, depth 29) to read for `moc`, and whether
/// they are a coarser cover than the MOC (so each alert must be checked).
fn index_ranges(moc: &SkyMoc) -> (Vec<(i64, i64)>, bool) {
    let mut cover = moc.clone();
    let mut coarse = false;
    while cover.len() > MAX_RANGES && cover.depth_max() > 0 {
        cover = cover.degraded(cover.depth_max() - 1);
        coarse = true;
    }
    let ranges = cover
        .moc_ranges()
        .iter()
        .filter_map(|r| {
            let start = i64::try_from(r.start).ok()?;
            let end = i64::try_from(r.end.checked_sub(1)?).ok()?;
            Some((start, end))
        })
        .collect();
    (ranges, coarse)
}

/// Every writer schema, parsed, for decoding packets in the evaluator.
async fn writer_schemas(store: &AlertStore) -> Result<HashMap<String, Arc<Schema>>, ServiceError> {
    let mut out = HashMap::new();
    for row in store.schemas().await? {
        let schema = Schema::parse_str(&row.schema_json).map_err(|e| ServiceError::internal(&e))?;
        out.insert(row.schema_id, Arc::new(schema));
    }
    Ok(out)
}

/// Stream `rows` to a blocking evaluator in batches, so decoding and
/// evaluating one batch overlaps reading the next.
async fn scan_rows<R, S>(
    mut rows: S,
    mut scanner: Scanner,
    compact: bool,
) -> Result<Scanner, ServiceError>
where
    S: Stream<Item = Result<R, sqlx::Error>> + Unpin,
    R: sqlx::Row + Send + 'static,
    for<'r> &'r str: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r [u8]: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> f64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    usize: sqlx::ColumnIndex<R>,
{
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<R>>(4);
    let worker = tokio::task::spawn_blocking(move || {
        while let Some(batch) = rx.blocking_recv() {
            for row in &batch {
                if compact {
                    scanner.row_compact(row)?;
                } else {
                    scanner.row(row)?;
                }
            }
        }
        Ok::<Scanner, ServiceError>(scanner)
    });
    let mut batch = Vec::with_capacity(BATCH);
    let mut failure = None;
    while let Some(row) = rows.next().await {
        match row {
            Ok(r) => {
                batch.push(r);
                if batch.len() == BATCH
                    && tx
                        .send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)))
                        .await
                        .is_err()
                {
                    break;
                }
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if failure.is_none() && !batch.is_empty() {
        let _ = tx.send(batch).await;
    }
    drop(tx);
    drop(rows);
    let scanned = worker.await.map_err(|e| ServiceError::internal(&e))?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    scanned
}

/// The evaluator's state over one preview.
struct Scanner {
    pipeline: Pipeline,
    /// The compact records' columns, when the preview reads them.
    compact: Option<CompactPlan>,
    /// Count the alerts evaluated (off while the database counts them).
    counting: bool,
    /// Candidate keys to read; `None` reads the whole record.
    keys: Option<KeySet>,
    /// The current alert's document; with `keys`, one map whose values each
    /// alert overwrites (no allocation per field).
    doc: Value,
    /// Decode the packet (the pipeline reads beyond the candidate).
    packet: bool,
    schemas: HashMap<String, Arc<Schema>>,
    programids: Vec<i32>,
    /// Paths stripped from every document before the pipeline sees it.
    withheld: Vec<String>,
    /// The region's MOC, when the index ranges read were a coarser cover.
    exact: Option<Arc<SkyMoc>>,
    sort: Option<Sort>,
    evaluated: u64,
    matched: u64,
    /// Alerts each stage kept (only `$match` stages count).
    kept: Vec<u64>,
}

struct Sort {
    path: String,
    /// The path reads an alert field (not one the pipeline added).
    reads_alert: bool,
    ascending: bool,
    limit: usize,
    heap: BinaryHeap<Ranked>,
}

fn corrupt(what: &str) -> ServiceError {
    tracing::error!(what, "stored alert unreadable");
    ServiceError::new(
        Code::Internal,
        "internal error: a stored alert is unreadable",
    )
}

impl Scanner {
    fn row<R>(&mut self, row: &R) -> Result<(), ServiceError>
    where
        R: sqlx::Row,
        for<'r> &'r str: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        for<'r> &'r [u8]: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        usize: sqlx::ColumnIndex<R>,
    {
        let candid: i64 = row.try_get(0)?;
        let hpx: i64 = row.try_get(3)?;
        if let Some(moc) = &self.exact
            && !u64::try_from(hpx).is_ok_and(|h| moc.contains_val(&h))
        {
            return Ok(());
        }
        let object_id: &str = row.try_get(1)?;
        let schemavsn: &str = row.try_get(2)?;
        let candidate: &str = row.try_get(4)?;
        if self.packet {
            let schema_id: &str = row.try_get(5)?;
            let datum: &[u8] = row.try_get(6)?;
            let schema = self
                .schemas
                .get(schema_id)
                .ok_or_else(|| corrupt("schema"))?;
            self.doc =
                packet_document(avro::decode_packet(schema, datum).map_err(|_| corrupt("packet"))?);
            strip(&mut self.doc, &self.withheld);
        } else {
            match &self.keys {
                Some(keys) => {
                    fill_document(&mut self.doc, object_id, candid, schemavsn, candidate, keys)
                        .map_err(|_| corrupt("candidate"))?
                }
                None => {
                    let whole =
                        serde_json::from_str(candidate).map_err(|_| corrupt("candidate"))?;
                    self.doc = alert_document(object_id, candid, schemavsn, whole);
                    strip(&mut self.doc, &self.withheld);
                }
            }
        }
        self.evaluate(candid)
    }

    /// A row of `alert_cuts` (the plan's columns): the document refilled
    /// from the typed fields, then evaluated.
    fn row_compact<R>(&mut self, row: &R) -> Result<(), ServiceError>
    where
        R: sqlx::Row,
        for<'r> &'r str: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        for<'r> f64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
        usize: sqlx::ColumnIndex<R>,
    {
        let Some(plan) = &self.compact else {
            return Err(corrupt("compact plan"));
        };
        let candid: i64 = row.try_get(0)?;
        let hpx: i64 = row.try_get(3)?;
        if let Some(moc) = &self.exact
            && !u64::try_from(hpx).is_ok_and(|h| moc.contains_val(&h))
        {
            return Ok(());
        }
        let object_id: &str = row.try_get(1)?;
        let schemavsn: &str = row.try_get(2)?;
        let present: i64 = row.try_get(4)?;
        let candidate = fill_ids(&mut self.doc, object_id, candid, schemavsn)
            .ok_or_else(|| corrupt("document"))?;
        for (n, (key, i, kind)) in plan.fields.iter().enumerate() {
            let column = 5 + n;
            let value = match kind {
                Kind::Int => row
                    .try_get::<Option<i64>, _>(column)?
                    .map_or(CutRef::Null, CutRef::Int),
                Kind::Real => row
                    .try_get::<Option<f64>, _>(column)?
                    .map_or(CutRef::Null, CutRef::Real),
                Kind::Text => row
                    .try_get::<Option<&str>, _>(column)?
                    .map_or(CutRef::Null, CutRef::Text),
            };
            cuts::fill(candidate, key, (present >> i) & 1 == 1, value);
        }
        self.evaluate(candid)
    }

    /// Run the pipeline on the current document (alert `candid`).
    fn evaluate(&mut self, candid: i64) -> Result<(), ServiceError> {
        let doc = &self.doc;
        if !self.programids.is_empty() {
            let programid = value_at(doc, "candidate.programid").and_then(Value::as_i64);
            if !programid.is_some_and(|p| self.programids.iter().any(|w| i64::from(*w) == p)) {
                return Ok(());
            }
        }
        if self.counting {
            self.evaluated += 1;
        }
        let Some(sort) = &mut self.sort else {
            if self.pipeline.passes_counted(doc, &mut self.kept) {
                self.matched += 1;
            }
            return Ok(());
        };
        let Some(out) = self.pipeline.eval_counted(doc, &mut self.kept) else {
            return Ok(());
        };
        self.matched += 1;
        let ranked = Ranked {
            key: sort_key(&out, &sort.path),
            candid,
            ascending: sort.ascending,
            doc: Value::Null,
            // Made from some of the candidate's fields: the output of the
            // whole alert replaces it once the top is known.
            partial: !(self.packet || self.keys.is_none()) || self.compact.is_some(),
        };
        if sort.heap.len() >= sort.limit && sort.heap.peek().is_some_and(|worst| ranked >= *worst) {
            return Ok(());
        }
        sort.heap.push(Ranked { doc: out, ..ranked });
        if sort.heap.len() > sort.limit {
            sort.heap.pop();
        }
        Ok(())
    }

    /// The result, and the (index, candid) of each alert returned whose
    /// output was made from part of its candidate.
    fn finish(self) -> (PreviewResult, Vec<(usize, i64)>) {
        let ranked = self
            .sort
            .map(|s| s.heap.into_sorted_vec())
            .unwrap_or_default();
        let partial = ranked
            .iter()
            .enumerate()
            .filter(|(_, r)| r.partial)
            .map(|(i, r)| (i, r.candid))
            .collect();
        let alerts = ranked.into_iter().map(|r| r.doc).collect();
        let kept = self
            .pipeline
            .match_stages()
            .into_iter()
            .map(|i| (i, self.kept.get(i).copied().unwrap_or(0)))
            .collect();
        let result = PreviewResult {
            evaluated: self.evaluated,
            matched: self.matched,
            alerts,
            kept,
        };
        (result, partial)
    }
}

/// A sort key: a scalar (null, arrays and objects count as missing).
fn sort_key(doc: &Value, path: &str) -> Option<Value> {
    value_at(doc, path)
        .filter(|v| v.is_number() || v.is_string() || v.is_boolean())
        .cloned()
}

/// An alert in the running top: ordered best first (`Less` is better), so
/// the max-heap's top is the one to drop. Missing keys come last in either
/// direction; ties go to the smaller candid.
struct Ranked {
    key: Option<Value>,
    candid: i64,
    ascending: bool,
    doc: Value,
    /// `doc` is the output of part of the alert.
    partial: bool,
}

fn class(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        _ => 2,
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        let by_key = match (&self.key, &other.key) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(a), Some(b)) => {
                let o = class(a)
                    .cmp(&class(b))
                    .then(compare_values(a, b).unwrap_or(Ordering::Equal));
                if self.ascending { o } else { o.reverse() }
            }
        };
        by_key.then(self.candid.cmp(&other.candid))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}
