//! The tonic adapter of `ithaca.broker.v1.GcnService`: protobuf in, domain
//! call, protobuf out, and the renderings of the answers. No logic here.

use super::circulars::{CircularPage, CircularQuery, SearchAnswer};
use super::service::{
    EventDetail, EventSummary, EventsAnswer, ExtractionsAnswer, GcnService, IngestReport,
    MAX_FILE_BYTES, NewExtraction,
};
use super::store::{CircularRow, CommentRow, ExtractionRow, LocalisationRow, NoticeRow};
use ithaca_kit::{clock, json, principal};
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::gcn_service_server::GcnService as Rpc;
use serde_json::Value as Json;
use std::collections::HashMap;
use tonic::{Request, Response, Status, Streaming};

/// The resource of an event.
pub fn event_uri(dateobs: &str) -> String {
    format!("doomberg://gcn/events/{dateobs}")
}

/// A count as the wire carries it (int32, so agents get JSON integers).
fn n(v: i64) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

use crate::progress::Events;

/// One file's chunks: its source (first chunk) and its bytes, at most
/// [`MAX_FILE_BYTES`].
async fn read_file(stream: Streaming<pb::GcnFileChunk>) -> Result<(String, Vec<u8>), Status> {
    crate::upload::read_file(stream, MAX_FILE_BYTES, String::as_str, |c| {
        (c.source, c.data)
    })
    .await
}

/// The gRPC face of [`GcnService`].
#[derive(Clone, Debug)]
pub struct GcnGrpc {
    service: GcnService,
}

impl GcnGrpc {
    pub fn new(service: GcnService) -> Self {
        GcnGrpc { service }
    }
}

fn localisation(l: LocalisationRow, best: bool) -> pb::GcnLocalisation {
    pb::GcnLocalisation {
        ra: l.ra,
        dec: l.dec,
        error_radius_deg: l.error_radius_deg,
        origin: l.origin,
        description: l.description,
        ivorn: l.ivorn,
        circular_id: l.circular_id.map(n),
        issued_at: clock::rfc3339(l.time_ms),
        best,
        area_deg2: l.area_deg2,
        credible_level: l.credible_level,
        key: l.loc_key.starts_with("skymap:").then_some(l.loc_key),
    }
}

fn summary(s: EventSummary) -> pb::GcnEventSummary {
    pb::GcnEventSummary {
        uri: event_uri(&s.row.dateobs),
        dateobs: s.row.dateobs,
        kind: s.row.kind,
        aliases: s.aliases,
        circulars: n(s.circulars),
        notices: n(s.notices),
        best_localisation: s.best.map(|l| localisation(l, true)),
        dateobs_from: s.row.dateobs_from,
    }
}

fn events(a: EventsAnswer) -> pb::GcnEvents {
    let count = a.events.len() as i64;
    let next = a.offset + count;
    let truncated = next < a.total;
    pb::GcnEvents {
        query: a.query,
        events: a.events.into_iter().map(summary).collect(),
        count: n(count),
        total: n(a.total),
        offset: n(a.offset),
        truncated,
        next_offset: truncated.then(|| n(next)),
    }
}

fn circular(c: CircularRow, body: bool) -> pb::GcnCircular {
    pb::GcnCircular {
        circular_id: n(c.circular_id),
        subject: c.subject,
        submitter: c.submitter,
        created_at: clock::rfc3339(c.created_on_ms),
        body: body.then_some(c.body),
        gcn_event_id: c.event_id,
        bibcode: c.bibcode,
        dateobs: None,
        snippet: None,
        uri: None,
    }
}

/// A circular on its own: with the event it is about.
fn circular_alone(c: CircularRow, body: bool) -> pb::GcnCircular {
    let dateobs = c.dateobs.clone();
    pb::GcnCircular {
        uri: dateobs.as_deref().map(event_uri),
        dateobs,
        ..circular(c, body)
    }
}

fn search(a: SearchAnswer) -> pb::GcnCircularSearch {
    let count = a.hits.len() as i64;
    pb::GcnCircularSearch {
        words: a.words,
        circulars: a
            .hits
            .into_iter()
            .map(|h| pb::GcnCircular {
                snippet: Some(h.snippet),
                ..circular_alone(h.row, false)
            })
            .collect(),
        count: n(count),
        total: n(a.total),
        next_cursor: a.next_cursor,
    }
}

fn notice(row: NoticeRow, locs: &HashMap<String, (LocalisationRow, bool)>) -> pb::GcnNotice {
    pb::GcnNotice {
        localisation: locs
            .get(&row.ivorn)
            .map(|(l, best)| localisation(l.clone(), *best)),
        ivorn: row.ivorn,
        format: row.format,
        mission: row.mission,
        instrument: row.instrument,
        notice_type: row.notice_type,
        packet_type: row.packet_type.map(n),
        trigger_id: row.trigger_id,
        time: clock::rfc3339(row.time_ms),
        notice_date: row.notice_date_ms.map(clock::rfc3339),
        skymap_url: row.skymap_url,
        source: row.source,
    }
}

fn event(d: EventDetail, bodies: bool) -> pb::GcnEvent {
    let best_key = d.localisations.first().map(|l| l.loc_key.clone());
    let is_best = |l: &LocalisationRow| best_key.as_deref() == Some(l.loc_key.as_str());
    let by_notice: HashMap<String, (LocalisationRow, bool)> = d
        .localisations
        .iter()
        .filter_map(|l| l.ivorn.clone().map(|iv| (iv, (l.clone(), is_best(l)))))
        .collect();
    let s = d.summary;
    pb::GcnEvent {
        uri: event_uri(&s.row.dateobs),
        dateobs: s.row.dateobs,
        kind: s.row.kind,
        aliases: s.aliases,
        dateobs_from: s.row.dateobs_from,
        circular_count: n(d.circular_total),
        next_cursor: d.next_cursor,
        notice_count: n(d.notices.len() as i64),
        circulars: d
            .circulars
            .into_iter()
            .map(|c| circular(c, bodies))
            .collect(),
        notices: d
            .notices
            .into_iter()
            .map(|r| notice(r, &by_notice))
            .collect(),
        best_localisation: s.best.map(|l| localisation(l, true)),
        localisations: d
            .localisations
            .into_iter()
            .map(|l| {
                let best = is_best(&l);
                localisation(l, best)
            })
            .collect(),
        extractions_by_origin: d
            .extraction_origins
            .into_iter()
            .map(|(o, c)| (o, n(c)))
            .collect(),
        comment_count: n(d.comments),
    }
}

fn extraction(r: ExtractionRow) -> pb::GcnEventExtraction {
    let mut payload = serde_json::from_str::<Json>(&r.payload).unwrap_or(Json::Null);
    // What the envelope already says is not said again in the payload.
    if let Json::Object(map) = &mut payload {
        let same = |key: &str, value: Json| map.get(key) == Some(&value);
        let echoes: Vec<&str> = [
            ("kind", r.kind.clone().map(Json::String)),
            ("circular_id", r.circular_id.map(Json::from)),
            ("dateobs", r.dateobs.clone().map(Json::String)),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.filter(|v| same(key, v.clone())).map(|_| key))
        .collect();
        for key in echoes {
            map.remove(key);
        }
    }
    pb::GcnEventExtraction {
        extraction_id: r.extraction_id,
        dateobs: r.dateobs.unwrap_or_default(),
        origin: r.origin,
        kind: r.kind,
        circular_id: r.circular_id.map(n),
        payload: Some(json::to_struct(payload)),
        private: !r.tenant_id.is_empty(),
        created_at: clock::rfc3339(r.created_at_ms),
    }
}

fn extractions(a: ExtractionsAnswer) -> pb::GcnEventExtractions {
    let count = a.rows.len() as i64;
    pb::GcnEventExtractions {
        uri: event_uri(&a.dateobs),
        dateobs: a.dateobs,
        extractions: a.rows.into_iter().map(extraction).collect(),
        count: n(count),
        total: n(a.total),
        truncated: count < a.total,
        origins: a.origins.into_iter().map(|(o, c)| (o, n(c))).collect(),
    }
}

fn comment(c: CommentRow) -> pb::GcnEventComment {
    pb::GcnEventComment {
        comment_id: c.comment_id,
        dateobs: c.dateobs,
        text: c.text,
        author: c.author,
        actor: c.actor,
        session_id: c.session_id,
        created_at: clock::rfc3339(c.created_at_ms),
    }
}

fn report(r: IngestReport) -> pb::GcnIngestReport {
    let o = r.outcome;
    pb::GcnIngestReport {
        source: r.source,
        checksum: r.checksum,
        kind: r.kind.to_owned(),
        already_present: r.already_present,
        items: n(o.items),
        stored: n(o.stored),
        updated: n(o.updated),
        unchanged: n(o.unchanged),
        unattached: n(o.unattached),
        attached: n(o.attached),
        events_created: o.events_created,
        events: o.events,
        aliases_added: n(o.aliases_added),
        extractions: n(o.extractions),
    }
}

#[tonic::async_trait]
impl Rpc for GcnGrpc {
    async fn get_gcn_events(
        &self,
        request: Request<pb::GetGcnEventsRequest>,
    ) -> Result<Response<pb::GcnEvents>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let answer = self
            .service
            .events(&caller, r.partialdateobs.as_deref(), r.limit, r.offset)
            .await?;
        Ok(Response::new(events(answer)))
    }

    async fn get_gcn_event(
        &self,
        request: Request<pb::GetGcnEventRequest>,
    ) -> Result<Response<pb::GcnEvent>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let page = CircularPage {
            limit: r.limit,
            cursor: r.cursor,
        };
        let detail = self
            .service
            .event_page(&caller, &r.dateobs, Some(&page))
            .await?;
        Ok(Response::new(event(
            detail,
            r.include_bodies.unwrap_or(true),
        )))
    }

    async fn get_gcn_circular(
        &self,
        request: Request<pb::GetGcnCircularRequest>,
    ) -> Result<Response<pb::GcnCircular>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let row = self.service.circular(&caller, r.circular_id).await?;
        Ok(Response::new(circular_alone(row, true)))
    }

    async fn search_gcn_circulars(
        &self,
        request: Request<pb::SearchGcnCircularsRequest>,
    ) -> Result<Response<pb::GcnCircularSearch>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let query = CircularQuery {
            query: r.query,
            dateobs: r.dateobs,
            limit: r.limit,
            cursor: r.cursor,
        };
        let answer = self.service.search_circulars(&caller, &query).await?;
        Ok(Response::new(search(answer)))
    }

    async fn get_gcn_event_extractions(
        &self,
        request: Request<pb::GetGcnEventExtractionsRequest>,
    ) -> Result<Response<pb::GcnEventExtractions>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let answer = self
            .service
            .extractions(
                &caller,
                &r.dateobs,
                r.origin.as_deref(),
                r.kind.as_deref(),
                r.limit,
            )
            .await?;
        Ok(Response::new(extractions(answer)))
    }

    async fn get_gcn_event_comments(
        &self,
        request: Request<pb::GetGcnEventCommentsRequest>,
    ) -> Result<Response<pb::GcnEventComments>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let (dateobs, rows, total) = self.service.comments(&caller, &r.dateobs, r.limit).await?;
        let count = rows.len() as i64;
        Ok(Response::new(pb::GcnEventComments {
            uri: event_uri(&dateobs),
            dateobs,
            comments: rows.into_iter().map(comment).collect(),
            count: n(count),
            total: n(total),
            truncated: count < total,
        }))
    }

    async fn post_gcn_event_comment(
        &self,
        request: Request<pb::PostGcnEventCommentRequest>,
    ) -> Result<Response<pb::GcnEventComment>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let row = self
            .service
            .post_comment(&caller, &r.dateobs, &r.text)
            .await?;
        Ok(Response::new(comment(row)))
    }

    async fn add_gcn_event_extraction(
        &self,
        request: Request<pb::AddGcnEventExtractionRequest>,
    ) -> Result<Response<pb::GcnEventExtraction>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let row = self
            .service
            .add_extraction(
                &caller,
                NewExtraction {
                    dateobs: r.dateobs,
                    origin: r.origin,
                    payload: r.payload.map_or(Json::Null, json::from_struct),
                    kind: r.kind,
                    circular_id: r.circular_id.map(i64::from),
                    key: r.key,
                },
            )
            .await?;
        Ok(Response::new(extraction(row)))
    }

    async fn ingest_gcn(
        &self,
        request: Request<Streaming<pb::GcnFileChunk>>,
    ) -> Result<Response<pb::GcnIngestReport>, Status> {
        let caller = principal::of(&request)?;
        let (source, data) = read_file(request.into_inner()).await?;
        let r = self.service.ingest_file(&caller, &source, data).await?;
        Ok(Response::new(report(r)))
    }

    type IngestGcnWithProgressStream = Events;

    async fn ingest_gcn_with_progress(
        &self,
        request: Request<Streaming<pb::GcnFileChunk>>,
    ) -> Result<Response<Events>, Status> {
        let caller = principal::of(&request)?;
        let (source, data) = read_file(request.into_inner()).await?;
        let service = self.service.clone();
        Ok(Response::new(crate::progress::streamed(
            "packets",
            move |progress| async move {
                service
                    .ingest_file_reporting(&caller, &source, data, Some(&progress))
                    .await
            },
            report,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An extraction's payload does not repeat what its envelope says.
    #[test]
    fn an_extraction_says_kind_circular_and_event_once() {
        let row = ExtractionRow {
            extraction_id: "x1".into(),
            tenant_id: String::new(),
            dateobs: Some("2023-08-12T18:32:00.000Z".into()),
            origin: "ithaca-circular-parser".into(),
            kind: Some("redshift".into()),
            circular_id: Some(34409),
            producer_key: None,
            payload: r#"{"kind":"redshift","circular_id":34409,"dateobs":"2023-08-12T18:32:00.000Z","z":0.36,"text":"z = 0.36"}"#.into(),
            created_by: "system".into(),
            created_at_ms: 0,
        };
        let x = extraction(row.clone());
        let payload = json::from_struct(x.payload.expect("payload"));
        assert_eq!(
            payload,
            serde_json::json!({"z": 0.36, "text": "z = 0.36"}),
            "only what the envelope does not say"
        );
        assert_eq!(
            (x.kind.as_deref(), x.circular_id),
            (Some("redshift"), Some(34409))
        );
        // A payload that disagrees with its envelope keeps its own value.
        let other = ExtractionRow {
            payload: r#"{"kind":"photometry","z":1}"#.into(),
            ..row
        };
        let payload = json::from_struct(extraction(other).payload.expect("payload"));
        assert_eq!(payload["kind"], "photometry");
    }
}
