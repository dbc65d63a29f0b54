//! GCN events: the list with its search, and one event's page with its
//! names, localisations, circulars, notices, what the built-in parser read,
//! the team's comments, and the sessions people opened on it.

use super::sessions::{OnSubject, on_subject};
use super::{Nav, Reader, failed, html};
use crate::Console;
use crate::backends::signed;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use ithaca_proto::broker::v1 as pb;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    offset: Option<u32>,
}

/// An event in the list: the name it goes by, its other names, the rest.
pub struct EventRow {
    pub name: String,
    pub others: Vec<String>,
    pub e: pb::GcnEventSummary,
}

#[derive(Template)]
#[template(path = "gcn_events.html")]
struct ListPage {
    nav: Nav,
    q: String,
    events: Vec<EventRow>,
    total: i32,
    offset: u32,
    next: Option<i32>,
    previous: Option<u32>,
}

/// `GET /console/gcn?q=&offset=`.
pub async fn list(
    State(console): State<Arc<Console>>,
    Query(query): Query<ListQuery>,
    Reader(person): Reader,
) -> Response {
    let mut client = match console.backends.gcn() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let q = query.q.trim().to_owned();
    let offset = query.offset.unwrap_or(0).min(i32::MAX as u32);
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::GetGcnEventsRequest {
            partialdateobs: (!q.is_empty()).then(|| q.clone()),
            limit: Some(crate::PAGE_SIZE as i32),
            offset: Some(offset as i32),
        },
    );
    let reply = match client.get_gcn_events(request).await {
        Ok(r) => r.into_inner(),
        Err(status) => return failed(status.into()),
    };
    html(
        StatusCode::OK,
        &ListPage {
            nav: person.nav("gcn"),
            q,
            events: reply
                .events
                .into_iter()
                .map(|e| {
                    let name = display_name(&e.aliases, &e.dateobs);
                    let others = e.aliases.iter().filter(|a| **a != name).cloned().collect();
                    EventRow { name, others, e }
                })
                .collect(),
            total: reply.total,
            offset,
            next: reply.next_offset,
            previous: (offset > 0).then(|| offset.saturating_sub(crate::PAGE_SIZE as u32)),
        },
    )
}

/// One extraction, flattened for a table row.
pub struct Extraction {
    pub kind: String,
    pub circular_id: String,
    /// The values, `key=value` pairs (without the matched text).
    pub values: String,
    /// The words it was read from.
    pub text: String,
}

#[derive(Template)]
#[template(path = "gcn_event.html")]
struct EventPage {
    nav: Nav,
    /// The name people use for it (see [`display_name`]).
    name: String,
    event: pb::GcnEvent,
    comments: Vec<pb::GcnEventComment>,
    comments_total: i32,
    extractions: Vec<Extraction>,
    extractions_total: i32,
    sessions: Vec<OnSubject>,
    sessions_error: String,
    subject_noun: &'static str,
    subject_kind: &'static str,
    subject_id: String,
    /// ZTF objects the event's names, circulars and extractions mention,
    /// each linked to its object page.
    objects: Vec<String>,
}

/// How many of the built-in parser's extractions the page lists.
const EXTRACTIONS_SHOWN: i32 = 50;

/// `GET /console/gcn/{dateobs}` (a dateobs or one of the event's names).
pub async fn show(
    State(console): State<Arc<Console>>,
    Path(dateobs): Path<String>,
    Reader(person): Reader,
) -> Response {
    let mut client = match console.backends.gcn() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let (key, timeout) = (&console.key, console.backends.timeout);
    let get = pb::GetGcnEventRequest {
        dateobs,
        include_bodies: Some(true),
        // The page shows every circular of an event in one page: the
        // largest page the tool allows.
        limit: Some(100),
        cursor: None,
    };
    let event = match client
        .get_gcn_event(signed(key, &person.principal, timeout, get))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => return failed(status.into()),
    };
    let comments = pb::GetGcnEventCommentsRequest {
        dateobs: event.dateobs.clone(),
        limit: Some(1000),
    };
    let comments = match client
        .get_gcn_event_comments(signed(key, &person.principal, timeout, comments))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => return failed(status.into()),
    };
    let extractions = pb::GetGcnEventExtractionsRequest {
        dateobs: event.dateobs.clone(),
        origin: None,
        kind: None,
        limit: Some(EXTRACTIONS_SHOWN),
    };
    let extractions = match client
        .get_gcn_event_extractions(signed(key, &person.principal, timeout, extractions))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => return failed(status.into()),
    };
    let (sessions, sessions_error) =
        match on_subject(&console, &person, "gcn_event", &event.dateobs).await {
            Ok(s) => (s, String::new()),
            Err(err) => (Vec::new(), err.to_string()),
        };
    let extractions_total = extractions.total;
    let extractions: Vec<Extraction> = extractions.extractions.into_iter().map(flatten).collect();
    let objects = ztf_objects(
        event
            .aliases
            .iter()
            .map(String::as_str)
            .chain(
                event
                    .circulars
                    .iter()
                    .flat_map(|c| [c.subject.as_str(), c.body.as_deref().unwrap_or_default()]),
            )
            .chain(
                extractions
                    .iter()
                    .flat_map(|x| [x.values.as_str(), x.text.as_str()]),
            ),
    );
    html(
        StatusCode::OK,
        &EventPage {
            nav: person.nav("gcn"),
            objects,
            comments: comments.comments,
            comments_total: comments.total,
            extractions_total,
            extractions,
            sessions,
            sessions_error,
            subject_noun: "event",
            subject_kind: "gcn_event",
            subject_id: event.dateobs.clone(),
            name: display_name(&event.aliases, &event.dateobs),
            event,
        },
    )
}

/// The name an event goes by in papers and circulars: a GRB or
/// gravitational-wave designation when it has one, else its first alias (a
/// mission's trigger), else its dateobs.
fn display_name(aliases: &[String], dateobs: &str) -> String {
    // `GRB 230812B`: the final designation, a date and a letter.
    let grb = |a: &&String| {
        a.strip_prefix("GRB ").is_some_and(|rest| {
            let b = rest.as_bytes();
            b.len() >= 7 && b[..6].iter().all(u8::is_ascii_digit) && b[6].is_ascii_uppercase()
        })
    };
    // `S230814r`: a gravitational-wave superevent.
    let gw = |a: &&String| {
        let b = a.as_bytes();
        b.len() >= 8 && b[0] == b'S' && b[1..7].iter().all(u8::is_ascii_digit)
    };
    aliases
        .iter()
        .find(grb)
        .or_else(|| aliases.iter().find(gw))
        .or_else(|| aliases.iter().find(|a| a.starts_with("GRB ")))
        .or_else(|| aliases.first())
        .cloned()
        .unwrap_or_else(|| dateobs.to_owned())
}

/// Most objects the page links.
const OBJECTS_SHOWN: usize = 50;

/// The ZTF object names (`ZTF23aaxeacr`: `ZTF`, two digits, seven
/// lowercase letters, standing alone) in `texts`, first mention first,
/// each once.
fn ztf_objects<'a>(texts: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for text in texts {
        let b = text.as_bytes();
        let mut at = 0;
        while let Some(i) = text[at..].find("ZTF").map(|i| i + at) {
            at = i + 3;
            let end = i + 12;
            let name_like = b.len() >= end
                && b[i + 3..i + 5].iter().all(u8::is_ascii_digit)
                && b[i + 5..end].iter().all(u8::is_ascii_lowercase);
            let alone = |c: Option<&u8>| c.is_none_or(|c| !c.is_ascii_alphanumeric());
            if !name_like || !alone(i.checked_sub(1).and_then(|p| b.get(p))) || !alone(b.get(end)) {
                continue;
            }
            let name = &text[i..end];
            if !found.iter().any(|f| f == name) {
                found.push(name.to_owned());
                if found.len() == OBJECTS_SHOWN {
                    return found;
                }
            }
            at = end;
        }
    }
    found
}

/// An extraction's payload as one line of `key=value` pairs, the matched
/// words apart.
fn flatten(x: pb::GcnEventExtraction) -> Extraction {
    let payload = x
        .payload
        .map(ithaca_kit::json::from_struct)
        .unwrap_or_default();
    let mut text = String::new();
    let mut values = Vec::new();
    if let Some(map) = payload.as_object() {
        for (k, v) in map {
            match (k.as_str(), v) {
                ("text", serde_json::Value::String(s)) => text = s.clone(),
                ("kind" | "circular_id", _) => {}
                (_, serde_json::Value::String(s)) => values.push(format!("{k}={s}")),
                (_, v) => values.push(format!("{k}={v}")),
            }
        }
    }
    Extraction {
        kind: x.kind.unwrap_or_default(),
        circular_id: x.circular_id.map(|c| c.to_string()).unwrap_or_default(),
        values: values.join(" "),
        text,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn events_go_by_their_designation() {
        let names = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let name = super::display_name(
            &names(&["Fermi 713559497", "GRB 230812.79", "GRB 230812B"]),
            "d",
        );
        assert_eq!(name, "GRB 230812B");
        let gw = super::display_name(&names(&["LIGO/Virgo/KAGRA S230814r", "S230814r"]), "d");
        assert_eq!(gw, "S230814r");
        assert_eq!(super::display_name(&names(&["Fermi 1"]), "d"), "Fermi 1");
        assert_eq!(super::display_name(&[], "2023-08-12"), "2023-08-12");
    }

    #[test]
    fn ztf_objects_are_found_once_each_and_only_whole() {
        let texts = [
            "AT 2023qxj (ZTF23abaanxz) was found",
            "ZTF23abaanxz again, ZTF23aaxeacr, xZTF23aaaaaaa, ZTF23aaaaaaaa, ZTF2",
            "ZTF observed; ztf23abcdefg is not the form",
        ];
        assert_eq!(
            super::ztf_objects(texts.into_iter()),
            vec!["ZTF23abaanxz".to_owned(), "ZTF23aaxeacr".to_owned()]
        );
    }

    #[test]
    fn extractions_flatten_to_values_and_words() {
        let payload = serde_json::json!({"kind": "redshift", "circular_id": 34409,
            "z": 0.36, "z_err": 0.01, "text": "z = 0.36"});
        let x = ithaca_proto::broker::v1::GcnEventExtraction {
            kind: Some("redshift".into()),
            circular_id: Some(34409),
            payload: Some(ithaca_kit::json::to_struct(payload)),
            ..Default::default()
        };
        let row = super::flatten(x);
        assert_eq!(row.values, "z=0.36 z_err=0.01");
        assert_eq!(row.text, "z = 0.36");
        assert_eq!(row.circular_id, "34409");
    }
}
