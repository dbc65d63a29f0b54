//! The GCN domain: ingest, the event queries behind the five tools, the
//! producers' extractions and each tenant's discussion. Every refusal names
//! the field at fault; nothing here panics on a caller's input.

use super::identify;
use super::ingest::{self, IngestTx, Outcome};
use super::model::CircularPage;
use super::model::{DateObs, LocOrigin, Localisation, Name};
use super::parse::{self, ParsedFile};
use super::store::{
    CircularRow, CommentRow, Counted, EventFilter, EventRow, ExtractionRow, GcnStore,
    LocalisationRow, NoticeRow, like_escape,
};
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::{Actor, Principal};
use ithaca_kit::with_pool;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// The subject kind of a GCN event (`subject_kind` of the write tool); the
/// subject id is the event's canonical dateobs.
pub const SUBJECT_KIND: &str = "gcn_event";
/// Default and largest page of `get_gcn_events`.
pub const DEFAULT_EVENTS: i64 = 20;
pub const MAX_EVENTS: i64 = 100;
/// Default and largest number of extractions and comments returned.
pub const DEFAULT_EXTRACTIONS: i64 = 200;
pub const MAX_EXTRACTIONS: i64 = 2_000;
pub const DEFAULT_COMMENTS: i64 = 100;
pub const MAX_COMMENTS: i64 = 1_000;
/// Longest comment, in characters.
pub const MAX_COMMENT_CHARS: usize = 10_000;
/// Largest producer payload, serialized.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// Largest file an ingest accepts.
pub const MAX_FILE_BYTES: usize = 64 * 1024 * 1024;

/// What ingesting one file did.
#[derive(Clone, Debug)]
pub struct IngestReport {
    pub source: String,
    pub checksum: String,
    /// `circulars`, `voevent` or `gcn-json`.
    pub kind: &'static str,
    pub already_present: bool,
    pub outcome: Outcome,
}

/// An event as listed: its row, names, counts and best localisation.
#[derive(Clone, Debug)]
pub struct EventSummary {
    pub row: EventRow,
    pub aliases: Vec<String>,
    pub circulars: i64,
    pub notices: i64,
    pub best: Option<LocalisationRow>,
}

/// A `get_gcn_events` answer.
#[derive(Clone, Debug)]
pub struct EventsAnswer {
    pub query: String,
    pub events: Vec<EventSummary>,
    pub total: i64,
    pub offset: i64,
    pub limit: i64,
}

/// One event in full.
#[derive(Clone, Debug)]
pub struct EventDetail {
    pub summary: EventSummary,
    pub circulars: Vec<CircularRow>,
    pub notices: Vec<NoticeRow>,
    /// Best (smallest circle) first.
    pub localisations: Vec<LocalisationRow>,
    /// `(origin, count)` of the extractions the caller sees.
    pub extraction_origins: Vec<(String, i64)>,
    /// The caller's tenant's comments.
    pub comments: i64,
    /// Circulars about the event in all (`circulars` may be one page).
    pub circular_total: i64,
    /// The cursor of the next page of circulars, when more follow.
    pub next_cursor: Option<String>,
}

/// A `get_gcn_event_extractions` answer.
#[derive(Clone, Debug)]
pub struct ExtractionsAnswer {
    pub dateobs: String,
    pub rows: Vec<ExtractionRow>,
    pub total: i64,
    pub origins: Vec<(String, i64)>,
}

/// A producer's extraction.
#[derive(Clone, Debug, Default)]
pub struct NewExtraction {
    pub dateobs: String,
    pub origin: String,
    pub payload: Json,
    pub kind: Option<String>,
    pub circular_id: Option<i64>,
    pub key: Option<String>,
}

/// GCN events: reference data shared by every tenant, and each tenant's
/// comments and producers' extractions.
#[derive(Clone, Debug)]
pub struct GcnService {
    store: GcnStore,
}

pub(super) fn require_tenant(caller: &Principal) -> Result<(), ServiceError> {
    caller.tenant().map(|_| ())
}

fn bounded(value: Option<i32>, default: i64, max: i64, field: &str) -> Result<i64, ServiceError> {
    match value {
        None => Ok(default),
        Some(v) if v >= 1 && i64::from(v) <= max => Ok(i64::from(v)),
        Some(v) => Err(ServiceError::invalid(format!(
            "{field}: {v} is not between 1 and {max}"
        ))),
    }
}

/// `%3A` and friends, as a client may send a dateobs inside a URI.
fn percent_decode(s: &str) -> String {
    s.replace("%3A", ":")
        .replace("%3a", ":")
        .replace("%20", " ")
        .replace("%2B", "+")
        .replace("%2b", "+")
}

impl GcnService {
    pub fn new(store: GcnStore) -> Self {
        GcnService { store }
    }

    pub fn store(&self) -> &GcnStore {
        &self.store
    }

    // ---- ingest -------------------------------------------------------------

    /// Ingest one file: circulars, a VOEvent notice or a GCN JSON notice.
    /// Administrators only. The file lands in one transaction or not at all;
    /// the same file twice changes nothing.
    pub async fn ingest_file(
        &self,
        caller: &Principal,
        source: &str,
        bytes: Vec<u8>,
    ) -> Result<IngestReport, ServiceError> {
        self.ingest_file_reporting(caller, source, bytes, None)
            .await
    }

    /// [`Self::ingest_file`], reporting packets done of total to `progress`
    /// once the file is parsed (every 100 circulars, and at the end).
    pub async fn ingest_file_reporting(
        &self,
        caller: &Principal,
        source: &str,
        bytes: Vec<u8>,
        progress: Option<&ingest::Progress>,
    ) -> Result<IngestReport, ServiceError> {
        if caller.actor() != Actor::System {
            return Err(ServiceError::denied("only administrators ingest GCN data"));
        }
        let source = match source.trim() {
            "" => "gcn".to_owned(),
            s => s.chars().take(200).collect(),
        };
        if bytes.len() > MAX_FILE_BYTES {
            return Err(ServiceError::invalid(format!(
                "{source}: larger than {MAX_FILE_BYTES} bytes"
            )));
        }
        let checksum = hex::encode(Sha256::digest(&bytes));
        let parsed = tokio::task::spawn_blocking(move || parse::parse(&bytes))
            .await
            .map_err(|e| ServiceError::internal(&e))?
            .map_err(|e| {
                ServiceError::invalid(format!("{source}: {e}")).with_domain(DomainCode::BadGcnFile)
            })?;
        let kind = parsed.kind();
        let now = clock::now_ms();
        let db = self.store.db().clone();
        let _gate = db.write_gate().await;
        let (already_present, outcome) = with_pool!(db, pool => {
            let mut tx = pool.begin().await?;
            tx.lock().await?;
            if tx.file_seen(&checksum).await? {
                let items = match &parsed {
                    ParsedFile::Circulars(c) => i64::try_from(c.len()).unwrap_or(i64::MAX),
                    ParsedFile::Notice(_) | ParsedFile::SkyMap(_) => 1,
                };
                ingest::report(progress, items as u64, items as u64);
                (true, Outcome { items, unchanged: items, ..Outcome::default() })
            } else {
                let outcome = run(&mut tx, &parsed, &source, &checksum, now, progress).await?;
                tx.insert_file(&checksum, &source, kind, outcome.items, now).await?;
                tx.commit().await?;
                (false, outcome)
            }
        });
        if !already_present {
            tracing::info!(
                %source,
                kind,
                stored = outcome.stored,
                events_created = outcome.events_created.len(),
                "gcn file ingested"
            );
        }
        Ok(IngestReport {
            source,
            checksum,
            kind,
            already_present,
            outcome,
        })
    }

    // ---- events -------------------------------------------------------------

    /// The event `dateobs_or_alias` names: its canonical dateobs (or any ISO
    /// form of it; a time given to the second finds the one event in that
    /// second), or one of its aliases, case-insensitively.
    pub async fn resolve(&self, dateobs_or_alias: &str) -> Result<EventRow, ServiceError> {
        let input = percent_decode(dateobs_or_alias.trim());
        if input.is_empty() {
            return Err(ServiceError::invalid(
                "dateobs: required: an event's dateobs (2023-08-12T18:58:12.049Z) or a name (GRB 230812B, S230814r); get_gcn_events lists them",
            ));
        }
        if input.chars().count() > 200 {
            return Err(ServiceError::invalid("dateobs: at most 200 characters"));
        }
        if let Ok(t) = DateObs::parse(&input) {
            let canonical = t.to_string();
            if let Some(row) = self.store.event(&canonical).await? {
                return Ok(row);
            }
            if !input.contains('.') {
                let second = canonical.trim_end_matches('Z').to_owned();
                let filter = EventFilter {
                    dateobs_prefix: Some(like_escape(&second)),
                    alias_prefixes: Vec::new(),
                };
                let (rows, total) = self.store.events(&filter, 2, 0).await?;
                if total == 1
                    && let Some(row) = rows.into_iter().next()
                {
                    return Ok(row);
                }
            }
            return Err(ServiceError::not_found(format!(
                "dateobs: no GCN event at {canonical}; get_gcn_events with partialdateobs (a date prefix such as {} or a name) finds events",
                &canonical[..10]
            ))
            .with_domain(DomainCode::UnknownGcnEvent));
        }
        for key in alias_keys(&input) {
            if let Some(d) = self.store.by_alias(&key).await?
                && let Some(row) = self.store.event(&d).await?
            {
                return Ok(row);
            }
        }
        Err(ServiceError::not_found(format!(
            "dateobs: {input:?} is neither the time of a known GCN event nor one of its names; \
             get_gcn_events with partialdateobs finds events by date prefix or name"
        ))
        .with_domain(DomainCode::UnknownGcnEvent))
    }

    /// `get_gcn_events`: events newest first, filtered by a dateobs prefix or
    /// an alias prefix (case-insensitive), a page at a time.
    pub async fn events(
        &self,
        caller: &Principal,
        partialdateobs: Option<&str>,
        limit: Option<i32>,
        offset: Option<i32>,
    ) -> Result<EventsAnswer, ServiceError> {
        require_tenant(caller)?;
        let limit = bounded(limit, DEFAULT_EVENTS, MAX_EVENTS, "limit")?;
        let offset = match offset {
            None => 0,
            Some(o) if (0..=1_000_000).contains(&o) => i64::from(o),
            Some(o) => {
                return Err(ServiceError::invalid(format!(
                    "offset: {o} is not between 0 and 1000000"
                )));
            }
        };
        let query = percent_decode(partialdateobs.unwrap_or_default().trim());
        if query.chars().count() > 200 {
            return Err(ServiceError::invalid(
                "partialdateobs: at most 200 characters",
            ));
        }
        let filter = if query.is_empty() {
            EventFilter::default()
        } else {
            let date = query.to_uppercase().replace(' ', "T");
            EventFilter {
                dateobs_prefix: Some(like_escape(&date)),
                alias_prefixes: alias_keys(&query).iter().map(|k| like_escape(k)).collect(),
            }
        };
        let (rows, total) = self.store.events(&filter, limit, offset).await?;
        let events = self.summaries(rows).await?;
        Ok(EventsAnswer {
            query,
            events,
            total,
            offset,
            limit,
        })
    }

    async fn summaries(&self, rows: Vec<EventRow>) -> Result<Vec<EventSummary>, ServiceError> {
        let ids: Vec<String> = rows.iter().map(|r| r.dateobs.clone()).collect();
        let mut aliases: HashMap<String, Vec<String>> = HashMap::new();
        for (d, a) in self.store.aliases(&ids).await? {
            aliases.entry(d).or_default().push(a);
        }
        let circulars: HashMap<String, i64> = self
            .store
            .counts(Counted::Circulars, &ids)
            .await?
            .into_iter()
            .collect();
        let notices: HashMap<String, i64> = self
            .store
            .counts(Counted::Notices, &ids)
            .await?
            .into_iter()
            .collect();
        let mut best: HashMap<String, LocalisationRow> = HashMap::new();
        for l in self.store.localisations(&ids).await? {
            if let Some(d) = l.dateobs.clone() {
                // Rows come best first: keep the first of each event.
                best.entry(d).or_insert(l);
            }
        }
        Ok(rows
            .into_iter()
            .map(|row| EventSummary {
                aliases: aliases.remove(&row.dateobs).unwrap_or_default(),
                circulars: circulars.get(&row.dateobs).copied().unwrap_or(0),
                notices: notices.get(&row.dateobs).copied().unwrap_or(0),
                best: best.remove(&row.dateobs),
                row,
            })
            .collect())
    }

    /// One event with every circular (for the console and tests; agents
    /// read [`Self::event_page`]).
    pub async fn event(
        &self,
        caller: &Principal,
        dateobs_or_alias: &str,
    ) -> Result<EventDetail, ServiceError> {
        self.event_page(caller, dateobs_or_alias, None).await
    }

    /// `get_gcn_event`: one event, its circulars a page at a time (`None`:
    /// every circular).
    pub async fn event_page(
        &self,
        caller: &Principal,
        dateobs_or_alias: &str,
        page: Option<&CircularPage>,
    ) -> Result<EventDetail, ServiceError> {
        require_tenant(caller)?;
        let row = self.resolve(dateobs_or_alias).await?;
        let d = row.dateobs.clone();
        let summary = self
            .summaries(vec![row])
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| ServiceError::not_found("dateobs: the event vanished"))?;
        let ids = [d.clone()];
        let (circulars, next_cursor) = match page {
            None => (self.store.circulars(&d).await?, None),
            Some(p) => {
                let page = self.circulars_page(&d, p).await?;
                (page.rows, page.next_cursor)
            }
        };
        Ok(EventDetail {
            circular_total: summary.circulars,
            next_cursor,
            summary,
            circulars,
            notices: self.store.notices(&d).await?,
            localisations: self.store.localisations(&ids).await?,
            extraction_origins: self
                .store
                .extraction_origins(&d, caller.tenant_id())
                .await?,
            comments: self.store.comments(caller.tenant_id(), &d, 0).await?.1,
        })
    }

    /// The best (smallest error circle) localisation of an event, from its
    /// notices and the positions with errors its circulars state; `None`
    /// when it has none. For a filter preview's sky region.
    pub async fn best_localisation(
        &self,
        dateobs_or_alias: &str,
    ) -> Result<Option<Localisation>, ServiceError> {
        let row = self.resolve(dateobs_or_alias).await?;
        let best = self
            .store
            .localisations(std::slice::from_ref(&row.dateobs))
            .await?
            .into_iter()
            .next();
        Ok(best.map(|l| localisation(&row.dateobs, l)))
    }

    /// The localisation of an event `choice` names, for a filter preview:
    /// `trigger` (the default: the earliest issued, the triggering
    /// instrument's, not a later afterglow's arcsecond circle), `smallest`,
    /// `skymap` (the newest sky map), `skymap:<key>`, `notice:<ivorn>` or
    /// `circular:<number>`. `None` when the event has no
    /// localisation; a choice the event does not have is refused, naming
    /// what it has.
    pub async fn chosen_localisation(
        &self,
        dateobs_or_alias: &str,
        choice: Option<&str>,
    ) -> Result<Option<Localisation>, ServiceError> {
        let row = self.resolve(dateobs_or_alias).await?;
        let all = self
            .store
            .localisations(std::slice::from_ref(&row.dateobs))
            .await?;
        if all.is_empty() {
            return Ok(None);
        }
        let choice = choice.map(str::trim).filter(|c| !c.is_empty());
        let picked = match choice.unwrap_or("trigger") {
            "trigger" => all
                .iter()
                .min_by(|a, b| {
                    a.time_ms
                        .cmp(&b.time_ms)
                        .then(a.error_radius_deg.total_cmp(&b.error_radius_deg))
                })
                .cloned(),
            "smallest" => all.first().cloned(),
            // The newest map: LVK's updates supersede the earlier ones.
            "skymap" => {
                let newest = all
                    .iter()
                    .filter(|l| l.moc.is_some())
                    .max_by(|a, b| a.time_ms.cmp(&b.time_ms).then(a.loc_key.cmp(&b.loc_key)));
                match newest {
                    Some(l) => Some(l.clone()),
                    None => {
                        return Err(ServiceError::invalid(format!(
                            "localisation: event {} has no sky map; ithaca ingest gcn <file.multiorder.fits> adds one",
                            row.dateobs
                        )));
                    }
                }
            }
            other => {
                if other.chars().count() > 300 {
                    return Err(ServiceError::invalid(
                        "localisation: at most 300 characters",
                    ));
                }
                let found = if other.starts_with("skymap:") {
                    all.iter().find(|l| l.loc_key == other)
                } else if let Some(ivorn) = other.strip_prefix("notice:") {
                    all.iter()
                        .find(|l| l.ivorn.as_deref() == Some(ivorn.trim()))
                } else if let Some(id) = other.strip_prefix("circular:") {
                    let id: Option<i64> = id.trim().parse().ok();
                    all.iter().find(|l| id.is_some() && l.circular_id == id)
                } else {
                    return Err(ServiceError::invalid(format!(
                        "localisation: {other:?} is none of trigger, smallest, skymap, skymap:<key>, notice:<ivorn>, circular:<number>"
                    )));
                };
                let Some(found) = found else {
                    let has: Vec<String> = all
                        .iter()
                        .map(|l| match (&l.ivorn, l.circular_id) {
                            (Some(i), _) => format!("notice:{i}"),
                            (None, Some(c)) => format!("circular:{c}"),
                            (None, None) => l.loc_key.clone(),
                        })
                        .collect();
                    return Err(ServiceError::invalid(format!(
                        "localisation: event {} has no {other:?}; it has {}",
                        row.dateobs,
                        has.join(", ")
                    )));
                };
                Some(found.clone())
            }
        };
        Ok(picked.map(|l| localisation(&row.dateobs, l)))
    }

    // ---- extractions --------------------------------------------------------

    /// `get_gcn_event_extractions`: the shared extractions and the caller's
    /// tenant's, optionally of one origin (and kind).
    pub async fn extractions(
        &self,
        caller: &Principal,
        dateobs_or_alias: &str,
        origin: Option<&str>,
        kind: Option<&str>,
        limit: Option<i32>,
    ) -> Result<ExtractionsAnswer, ServiceError> {
        require_tenant(caller)?;
        let limit = bounded(limit, DEFAULT_EXTRACTIONS, MAX_EXTRACTIONS, "limit")?;
        let origin = origin.map(str::trim).filter(|o| !o.is_empty());
        if origin.is_some_and(|o| o.chars().count() > 64) {
            return Err(ServiceError::invalid("origin: at most 64 characters"));
        }
        let kind = kind.map(str::trim).filter(|k| !k.is_empty());
        if kind.is_some_and(|k| k.chars().count() > 64) {
            return Err(ServiceError::invalid("kind: at most 64 characters"));
        }
        let row = self.resolve(dateobs_or_alias).await?;
        let (rows, total) = self
            .store
            .extractions(&row.dateobs, caller.tenant_id(), origin, kind, limit)
            .await?;
        let origins = self
            .store
            .extraction_origins(&row.dateobs, caller.tenant_id())
            .await?;
        Ok(ExtractionsAnswer {
            dateobs: row.dateobs,
            rows,
            total,
            origins,
        })
    }

    /// `AddGcnEventExtraction`: a producer stores its own values. Not for
    /// agents: what an agent read in a circular is not a measurement. A
    /// system producer without a tenant adds shared rows; anyone else adds
    /// rows only their tenant sees.
    pub async fn add_extraction(
        &self,
        caller: &Principal,
        new: NewExtraction,
    ) -> Result<ExtractionRow, ServiceError> {
        if caller.actor() == Actor::Agent {
            return Err(ServiceError::denied(
                "AddGcnEventExtraction: agents may not add extractions; producers (people and services) do",
            )
            .with_domain(DomainCode::AgentNotAllowed));
        }
        require_tenant(caller)?;
        let origin = new.origin.trim();
        if origin.is_empty() {
            return Err(ServiceError::invalid(
                "origin: required: the name of the producer (pipeline) adding the value",
            ));
        }
        if origin.chars().count() > 64
            || !origin
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._:/-".contains(c))
        {
            return Err(ServiceError::invalid(
                "origin: 1 to 64 characters of letters, digits and . _ : / -",
            ));
        }
        if origin == super::extract::ORIGIN {
            return Err(ServiceError::invalid(format!(
                "origin: {origin:?} is the built-in parser's; name your own producer"
            )));
        }
        let payload = match &new.payload {
            Json::Object(m) if !m.is_empty() => new.payload.to_string(),
            Json::Object(_) => return Err(ServiceError::invalid("payload: must not be empty")),
            _ => return Err(ServiceError::invalid("payload: required, a JSON object")),
        };
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(ServiceError::invalid(format!(
                "payload: at most {MAX_PAYLOAD_BYTES} bytes of JSON"
            )));
        }
        let text_field =
            |v: &Option<String>, field: &str| -> Result<Option<String>, ServiceError> {
                match v.as_deref().map(str::trim) {
                    None | Some("") => Ok(None),
                    Some(s) if s.chars().count() <= 200 => Ok(Some(s.to_owned())),
                    Some(_) => Err(ServiceError::invalid(format!(
                        "{field}: at most 200 characters"
                    ))),
                }
            };
        let kind = text_field(&new.kind, "kind")?;
        let key = text_field(&new.key, "key")?;
        let row = self.resolve(&new.dateobs).await?;
        if let Some(id) = new.circular_id {
            match self.store.circular_of(id).await? {
                Some(Some(d)) if d == row.dateobs => {}
                Some(_) => {
                    return Err(ServiceError::invalid(format!(
                        "circular_id: GCN Circular {id} is not about the event {}",
                        row.dateobs
                    )));
                }
                None => {
                    return Err(ServiceError::invalid(format!(
                        "circular_id: no GCN Circular {id} is stored"
                    )));
                }
            }
        }
        let stored = self
            .store
            .put_extraction(&ExtractionRow {
                extraction_id: uuid::Uuid::new_v4().to_string(),
                tenant_id: caller.tenant_id().to_owned(),
                dateobs: Some(row.dateobs),
                origin: origin.to_owned(),
                kind,
                circular_id: new.circular_id,
                producer_key: key,
                payload,
                created_by: caller.agent().to_owned(),
                created_at_ms: clock::now_ms(),
            })
            .await?;
        tracing::info!(origin = %stored.origin, dateobs = ?stored.dateobs, "gcn extraction added");
        Ok(stored)
    }

    // ---- comments -----------------------------------------------------------

    /// `get_gcn_event_comments`: the caller's tenant's discussion, oldest
    /// first.
    pub async fn comments(
        &self,
        caller: &Principal,
        dateobs_or_alias: &str,
        limit: Option<i32>,
    ) -> Result<(String, Vec<CommentRow>, i64), ServiceError> {
        require_tenant(caller)?;
        let limit = bounded(limit, DEFAULT_COMMENTS, MAX_COMMENTS, "limit")?;
        let row = self.resolve(dateobs_or_alias).await?;
        let (rows, total) = self
            .store
            .comments(caller.tenant_id(), &row.dateobs, limit)
            .await?;
        Ok((row.dateobs, rows, total))
    }

    /// `post_gcn_event_comment`: only inside a session opened on this very
    /// event (its subject), checked here as well as by the edge.
    pub async fn post_comment(
        &self,
        caller: &Principal,
        dateobs_or_alias: &str,
        text: &str,
    ) -> Result<CommentRow, ServiceError> {
        if caller.tenant_id().is_empty() {
            return Err(ServiceError::denied(
                "comments belong to a tenant; the caller has none",
            ));
        }
        let text = text.trim();
        if text.is_empty() {
            return Err(ServiceError::invalid("text: the comment must not be empty"));
        }
        let chars = text.chars().count();
        if chars > MAX_COMMENT_CHARS {
            return Err(ServiceError::invalid(format!(
                "text: {chars} characters; a comment has at most {MAX_COMMENT_CHARS}"
            )));
        }
        let row = self.resolve(dateobs_or_alias).await?;
        if !caller.may_write(SUBJECT_KIND, &row.dateobs) {
            let message = match caller.subject() {
                None => format!(
                    "post_gcn_event_comment writes only in a session opened on the event it comments on; \
                     this session has no subject, so it cannot write to {SUBJECT_KIND} {}",
                    row.dateobs
                ),
                Some(s) => format!(
                    "post_gcn_event_comment: this session is scoped to {s}; it cannot write to {SUBJECT_KIND} {}",
                    row.dateobs
                ),
            };
            return Err(ServiceError::denied(message).with_domain(DomainCode::SubjectMismatch));
        }
        let comment = CommentRow {
            comment_id: uuid::Uuid::now_v7().to_string(),
            tenant_id: caller.tenant_id().to_owned(),
            dateobs: row.dateobs,
            author: caller.agent().to_owned(),
            actor: caller.actor().as_str().to_owned(),
            session_id: caller.session_id().map(str::to_owned),
            text: text.to_owned(),
            created_at_ms: clock::now_ms(),
        };
        self.store.insert_comment(&comment).await?;
        Ok(comment)
    }
}

/// The lookup keys an event name may be written as: as given, and in its
/// normal GRB form (`GRB230812B` → `grb 230812b`).
fn alias_keys(input: &str) -> Vec<String> {
    let mut keys = vec![Name::new(input).key()];
    // `GW 170817` and `gw170817_124104` are `GW170817` and its long form.
    let compact: String = input.split_whitespace().collect();
    if compact.len() >= 8
        && compact.is_char_boundary(2)
        && compact[..2].eq_ignore_ascii_case("gw")
        && compact[2..]
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'_')
    {
        let k = compact.to_lowercase();
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    // GRB names in any case and spacing (`grb230812b`), and the start of one
    // without its letter (`grb230812` finds `GRB 230812A` and `GRB 230812B`).
    if let Some(g) = identify::grb_name(&input.to_ascii_uppercase()) {
        let k = g.key();
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    if let Some(digits) = compact
        .get(..3)
        .filter(|p| p.eq_ignore_ascii_case("grb"))
        .map(|_| &compact[3..])
        .filter(|d| !d.is_empty() && d.len() <= 6 && d.bytes().all(|b| b.is_ascii_digit()))
    {
        let k = format!("grb {digits}");
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// A stored localisation as the public type.
pub fn localisation(dateobs: &str, l: LocalisationRow) -> Localisation {
    Localisation {
        dateobs: dateobs.to_owned(),
        ra_deg: l.ra,
        dec_deg: l.dec,
        error_radius_deg: l.error_radius_deg,
        origin: LocOrigin::parse(&l.origin),
        description: l.description,
        ivorn: l.ivorn,
        circular_id: l.circular_id,
        time_ms: l.time_ms,
        moc: l.moc,
        area_deg2: l.area_deg2,
        credible_level: l.credible_level,
    }
}

async fn run<T: IngestTx>(
    tx: &mut T,
    parsed: &ParsedFile,
    source: &str,
    checksum: &str,
    now: i64,
    progress: Option<&ingest::Progress>,
) -> Result<Outcome, ServiceError> {
    match parsed {
        ParsedFile::Circulars(items) => ingest::circulars(tx, items, now, progress).await,
        ParsedFile::Notice(n) => {
            let outcome = ingest::notice(tx, n, source, checksum, now).await?;
            ingest::report(progress, 1, 1);
            Ok(outcome)
        }
        ParsedFile::SkyMap(m) => {
            let outcome = ingest::sky_map(tx, m, source, checksum, now).await?;
            ingest::report(progress, 1, 1);
            Ok(outcome)
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_grb_name_is_found_in_any_case_and_spacing() {
        let keys = alias_keys("grb230812b");
        assert!(keys.contains(&"grb 230812b".to_owned()), "{keys:?}");
        let keys = alias_keys("GRB230812");
        assert!(keys.contains(&"grb 230812".to_owned()), "{keys:?}");
        let keys = alias_keys("grb 2308");
        assert!(keys.contains(&"grb 2308".to_owned()), "{keys:?}");
        // Not a GRB name: nothing but the text itself.
        assert_eq!(alias_keys("grbx"), vec!["grbx".to_owned()]);
        assert_eq!(alias_keys("é"), vec!["é".to_owned()]);
    }
    use super::*;

    fn notices() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/gcn/notices/gw170817_grb170817a")
    }

    /// GW170817 and GRB 170817A, in either order, are one event that every
    /// name of both finds, `GW170817` among them.
    #[tokio::test]
    async fn a_gw_candidate_and_its_burst_are_one_event() {
        let files = [
            "LVC_INITIAL_G298048-1-Initial.xml",
            "FERMI_GBM_GND_POS_524666471_GRB170817A.xml",
        ];
        for order in [[0, 1], [1, 0]] {
            let dir = std::env::temp_dir().join(format!(
                "ithaca-gcn-merge-{}-{}",
                std::process::id(),
                order[0]
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("dir");
            let url = dir.join("broker.db").display().to_string();
            let db = crate::open_db(&url, "unused").await.expect("db");
            let svc = crate::gcn_service(db);
            for i in order {
                let bytes = std::fs::read(notices().join(files[i])).expect("notice");
                svc.ingest_file(&Principal::system(""), files[i], bytes)
                    .await
                    .expect("ingested");
            }
            let gw = svc.resolve("G298048").await.expect("GW");
            for name in [
                "Fermi 524666471",
                "GW170817",
                "gw 170817",
                "GW170817_124104",
            ] {
                let row = svc.resolve(name).await.expect(name);
                assert_eq!(row.dateobs, gw.dateobs, "{name}, order {order:?}");
            }
            assert!(svc.resolve("GW170818").await.is_err());
            let loc = svc
                .best_localisation("GW170817")
                .await
                .expect("known")
                .expect("GBM's circle");
            assert_eq!(loc.error_radius_deg, 17.45);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
