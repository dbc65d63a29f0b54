//! The record of an answer (seed 003): what an agent ran in a session, in
//! order, and the filter pipeline it arrived at, read back out of the trace.
//!
//! - `calls`: each `tool_call` with its arguments, paired with the
//!   `tool_result` that names it (`call_seq`), so `ok` and `summary` say how
//!   it went. A call with no recorded result is listed with `ok: false`.
//! - `proposal`: the pipeline of the last call that carried one (a preview
//!   or a new filter version). It is offered only if that exact pipeline was
//!   previewed successfully in the same session: the preview is the evidence
//!   that it matches anything. Otherwise `proposal` is absent and
//!   `proposal_withheld` says why.

use crate::store::EventRow;
use serde_json::{Value, json};
use std::collections::HashMap;

/// The tool whose successful call counts as a preview of its pipeline.
pub const PREVIEW_TOOL: &str = "run_broker_filter";

/// The argument that carries a filter pipeline.
pub const PIPELINE_ARGUMENT: &str = "pipeline";

/// One recorded call.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub seq: i64,
    pub name: String,
    pub arguments: Value,
    pub ok: bool,
    pub summary: String,
}

/// The pipeline an agent arrived at, and where the evidence is.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    pub pipeline: Value,
    /// The call that carried it last.
    pub call_seq: i64,
    /// The successful preview of the same pipeline.
    pub preview_seq: i64,
    /// The filter it was meant for, when the call named one.
    pub filter_id: Option<String>,
}

/// The record of a session.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Record {
    pub calls: Vec<Call>,
    pub proposal: Option<Proposal>,
    /// Why no proposal is offered, when a pipeline was seen but not previewed.
    pub proposal_withheld: Option<String>,
}

/// Build the record from a session's events, oldest first.
pub fn build(events: &[EventRow]) -> Record {
    let mut calls: Vec<Call> = Vec::new();
    let mut by_seq: HashMap<i64, usize> = HashMap::new();
    for event in events {
        let payload: Value = serde_json::from_str(&event.payload).unwrap_or(Value::Null);
        match event.event_type.as_str() {
            "tool_call" => {
                by_seq.insert(event.seq, calls.len());
                calls.push(Call {
                    seq: event.seq,
                    name: payload["name"].as_str().unwrap_or_default().to_owned(),
                    arguments: payload.get("arguments").cloned().unwrap_or(json!({})),
                    ok: false,
                    summary: "no result was recorded".to_owned(),
                });
            }
            "tool_result" => {
                // Results name their call; older ones pair with the latest
                // unanswered call of the same tool.
                let index = payload["call_seq"]
                    .as_i64()
                    .and_then(|seq| by_seq.get(&seq).copied())
                    .or_else(|| {
                        let name = payload["name"].as_str().unwrap_or_default();
                        calls
                            .iter()
                            .rposition(|c| c.name == name && c.summary == "no result was recorded")
                    });
                if let Some(call) = index.and_then(|i| calls.get_mut(i)) {
                    call.ok = payload["outcome"].as_str() == Some("ok");
                    call.summary = payload["summary"]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| {
                            if call.ok {
                                "ok".to_owned()
                            } else {
                                payload["error"].as_str().unwrap_or("error").to_owned()
                            }
                        });
                }
            }
            _ => {}
        }
    }
    let (proposal, proposal_withheld) = proposal(&calls);
    Record {
        calls,
        proposal,
        proposal_withheld,
    }
}

fn proposal(calls: &[Call]) -> (Option<Proposal>, Option<String>) {
    let Some(last) = calls.iter().rev().find(|c| {
        c.arguments
            .get(PIPELINE_ARGUMENT)
            .is_some_and(Value::is_array)
    }) else {
        return (None, None);
    };
    let pipeline = &last.arguments[PIPELINE_ARGUMENT];
    let preview = calls
        .iter()
        .rev()
        .find(|c| c.name == PREVIEW_TOOL && c.ok && &c.arguments[PIPELINE_ARGUMENT] == pipeline);
    match preview {
        Some(preview) => (
            Some(Proposal {
                pipeline: pipeline.clone(),
                call_seq: last.seq,
                preview_seq: preview.seq,
                filter_id: last.arguments["filter_id"].as_str().map(str::to_owned),
            }),
            None,
        ),
        None => (
            None,
            Some(format!(
                "the last pipeline (call {}) was never previewed successfully with {PREVIEW_TOOL} in this session",
                last.seq
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ithaca_kit::id::SessionId;

    fn event(seq: i64, kind: &str, payload: Value) -> EventRow {
        EventRow {
            session_id: SessionId::parse("00000000-0000-4000-8000-000000000001").expect("id"),
            seq,
            event_type: kind.to_owned(),
            payload: payload.to_string(),
            created_at_ms: 0,
            trace_id: String::new(),
        }
    }

    fn call(seq: i64, name: &str, args: Value) -> EventRow {
        event(seq, "tool_call", json!({"name": name, "arguments": args}))
    }

    fn result(seq: i64, call_seq: i64, name: &str, ok: bool) -> EventRow {
        event(
            seq,
            "tool_result",
            json!({"name": name, "call_seq": call_seq, "outcome": if ok {"ok"} else {"error"},
                   "summary": if ok {"fine"} else {"NOT_FOUND: no filter"}}),
        )
    }

    #[test]
    fn calls_pair_with_their_results_in_order() {
        let events = [
            call(1, "get_alert_schema", json!({"search": "mag"})),
            call(2, "get_broker_filter", json!({"filter_id": "f1"})),
            result(3, 2, "get_broker_filter", false),
            result(4, 1, "get_alert_schema", true),
            call(5, "list_brokers", json!({})),
        ];
        let record = build(&events);
        let got: Vec<(i64, &str, bool, &str)> = record
            .calls
            .iter()
            .map(|c| (c.seq, c.name.as_str(), c.ok, c.summary.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "get_alert_schema", true, "fine"),
                (2, "get_broker_filter", false, "NOT_FOUND: no filter"),
                (5, "list_brokers", false, "no result was recorded"),
            ]
        );
        assert_eq!(record.proposal, None);
        assert_eq!(record.proposal_withheld, None);
    }

    #[test]
    fn a_proposal_needs_a_successful_preview_of_that_exact_pipeline() {
        let a = json!([{"$match": {"candidate.drb": {"$gt": 0.5}}}]);
        let b = json!([{"$match": {"candidate.drb": {"$gt": 0.9}}}]);
        // Previewed a, then proposed b: withheld.
        let events = [
            call(1, PREVIEW_TOOL, json!({"pipeline": a})),
            result(2, 1, PREVIEW_TOOL, true),
            call(
                3,
                "post_broker_filter_version",
                json!({"filter_id": "f1", "pipeline": b}),
            ),
            result(4, 3, "post_broker_filter_version", true),
        ];
        let record = build(&events);
        assert_eq!(record.proposal, None);
        assert!(record.proposal_withheld.expect("why").contains("call 3"));

        // A failed preview of b does not count either.
        let mut more = events.to_vec();
        more.push(call(5, PREVIEW_TOOL, json!({"pipeline": b})));
        more.push(result(6, 5, PREVIEW_TOOL, false));
        assert_eq!(build(&more).proposal, None);

        // A successful one does.
        more.push(call(7, PREVIEW_TOOL, json!({"pipeline": b})));
        more.push(result(8, 7, PREVIEW_TOOL, true));
        let record = build(&more);
        let proposal = record.proposal.expect("offered");
        assert_eq!(proposal.pipeline, b);
        assert_eq!((proposal.call_seq, proposal.preview_seq), (7, 7));
        assert_eq!(proposal.filter_id, None);
        assert_eq!(record.proposal_withheld, None);
    }
}
