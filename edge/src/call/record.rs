//! Stage 4, record: the `tool_result` is durable before the caller hears
//! anything; a failure is also an `error` event (a `denial` when a rule
//! refused it), except a refusal its service already traced
//! (`ServiceError::traced`). A result that cannot be recorded is
//! remembered and reported in its session's trace at the next chance.

use super::failure::ToolFailure;
use super::gate::Admitted;
use crate::catalog::Tool;
use crate::core::Core;
use crate::orphans::Orphan;
use ithaca_kit::error::DomainCode;
use ithaca_proto::session::v1 as spb;
use serde_json::{Value, json};
use std::time::Instant;

/// Where a call's result was recorded.
pub enum Recorded {
    /// In no session: an ungated fixture, or a person's call made with no
    /// session of their own.
    Nowhere,
    /// In this session.
    In(String),
    /// Nowhere, though it should have been: the caller is told so.
    Lost,
}

impl Core {
    /// Record how the call went, before the caller hears it.
    pub(super) async fn record(
        &self,
        tool: &Tool,
        admitted: &Admitted,
        traced: &Value,
        outcome: &Result<Value, ToolFailure>,
        started: Instant,
    ) -> Recorded {
        let name = tool.name.as_str();
        // session_context opened (or joined) a session: the call is
        // recorded in it now.
        let session_id = match (admitted.principal.session_id(), outcome) {
            (Some(id), _) => Some(id.to_owned()),
            (None, Ok(result)) if tool.options.session_exempt => {
                result["structuredContent"]["session_id"]
                    .as_str()
                    .map(str::to_owned)
            }
            _ => None,
        };
        let (Some(session_id), Some(_)) = (session_id, &self.session) else {
            return Recorded::Nowhere;
        };
        let principal = admitted
            .principal
            .clone()
            .in_session(Some(session_id.clone()));
        let mut call_seq = admitted.call_seq;
        if tool.options.session_exempt {
            let payload = json!({"name": name, "arguments": traced});
            if let Ok(seq) = self
                .append(&principal, &session_id, spb::EventType::ToolCall, payload)
                .await
            {
                call_seq = Some(seq);
            }
        }
        let payload = json!({
            "name": name,
            "call_seq": call_seq,
            "outcome": if outcome.is_ok() { "ok" } else { "error" },
            "summary": summary(outcome),
            "duration_ms": started.elapsed().as_millis() as u64,
            "provenance": {
                "service": tool.method.parent_service().full_name(),
                "method": tool.method.name(),
                "trace_id": ithaca_kit::propagation::current_trace_id(),
            },
            "error": outcome.as_ref().err().map_or(Value::Null, |f| json!(f.code)),
        });
        if let Err(status) = self
            .append(&principal, &session_id, spb::EventType::ToolResult, payload)
            .await
        {
            tracing::warn!(error = %status.message(), tool = name, "recording tool_result failed");
            if let Some(seq) = call_seq {
                self.orphans.remember(&principal, &session_id, seq, name);
            }
            return Recorded::Lost;
        }
        // A refusal its service already recorded (the approvals service's
        // policy denial) gets no second event, only the `tool_result`.
        if let Err(failure) = outcome
            && !failure.traced
        {
            let kind = if DomainCode::parse(&failure.code).is_some_and(|c| c.mcp().denial) {
                spb::EventType::Denial
            } else {
                spb::EventType::Error
            };
            let payload = json!({
                "tool": name,
                "call_seq": call_seq,
                "error": failure.code,
                "message": failure.message,
                "retryable": failure.retryable,
            });
            if let Err(status) = self.append(&principal, &session_id, kind, payload).await {
                tracing::warn!(error = %status.message(), tool = name, "recording a failure failed");
            }
        }
        Recorded::In(session_id)
    }

    /// Record an `error` event for each remembered call of `session_id`
    /// whose result was lost; keep those that still cannot be recorded.
    pub(super) async fn report_orphans(&self, session_id: &str) {
        let Some(mine) = self.orphans.take(session_id) else {
            return;
        };
        // Boxed: every call asks, almost none has any to report (see
        // `call::invoke::run`).
        Box::pin(self.record_orphans(session_id, mine)).await;
    }

    async fn record_orphans(&self, session_id: &str, mine: Vec<Orphan>) {
        for orphan in mine {
            let payload = json!({
                "tool": orphan.tool,
                "call_seq": orphan.call_seq,
                "error": DomainCode::ResultNotRecorded.as_str(),
                "message": "this call ran, but its result could not be recorded when it finished",
            });
            if self
                .append(
                    &orphan.principal,
                    session_id,
                    spb::EventType::Error,
                    payload,
                )
                .await
                .is_err()
            {
                self.orphans.keep(orphan);
            }
        }
    }
}

/// A line saying how a call went, for the trace (and the record of an
/// answer): the error's code and message, or the start of the result text.
fn summary(outcome: &Result<Value, ToolFailure>) -> String {
    const MAX: usize = 200;
    let text = match outcome {
        Err(failure) => format!("{}: {}", failure.code, failure.message),
        Ok(result) => result["content"][0]["text"]
            .as_str()
            .map_or_else(|| "ok".to_owned(), str::to_owned),
    };
    if text.chars().count() <= MAX {
        text
    } else {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}…")
    }
}
