//! Session domain types: statuses, event kinds and titles. Session and
//! tenant ids are the kit's [`ithaca_kit::id::SessionId`] and
//! [`ithaca_kit::id::TenantId`], which other services share.

use ithaca_kit::error::ServiceError;
use ithaca_proto::session::v1::EventType;

/// Longest prompt accepted, in bytes.
pub const MAX_PROMPT_BYTES: usize = 100_000;
/// Longest explicit title accepted, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Derived titles are cut to this many characters.
pub const DERIVED_TITLE_CHARS: usize = 80;
/// Longest narrated reasoning accepted, in characters.
pub const MAX_REASONING_CHARS: usize = 20_000;
/// Largest event payload accepted, as JSON bytes.
pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;

ithaca_kit::text_enum! {
    /// Where a session is in its life.
    pub enum Status {
        /// Active and accepting tool calls.
        Open = "open",
        /// No further tool calls; the trace is still readable, and results
        /// of calls in flight land for a grace period.
        Closed = "closed",
        /// Moved out of the way after closing.
        Archived = "archived",
    }
}

/// The kinds of object a session may be opened on: the `subject_kind`s of
/// the write tools scoped to them (seed 003).
pub const SUBJECT_KINDS: [&str; 2] = ["filter", "gcn_event"];

/// Longest subject id accepted, in characters.
pub const MAX_SUBJECT_ID_CHARS: usize = 200;

/// Check a subject given to `session_context`: both parts or neither, a
/// known kind, and a short printable id. Returns the trimmed pair.
pub fn check_subject(
    kind: Option<&str>,
    id: Option<&str>,
) -> Result<Option<(String, String)>, ServiceError> {
    let kind = kind.map(str::trim).filter(|k| !k.is_empty());
    let id = id.map(str::trim).filter(|i| !i.is_empty());
    match (kind, id) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(ServiceError::invalid(
            "subject_id: required with subject_kind",
        )),
        (None, Some(_)) => Err(ServiceError::invalid(
            "subject_kind: required with subject_id",
        )),
        (Some(kind), Some(id)) => {
            if !SUBJECT_KINDS.contains(&kind) {
                return Err(ServiceError::invalid(format!(
                    "subject_kind: {kind:?} is not a subject; use one of {}",
                    SUBJECT_KINDS.join(", ")
                )));
            }
            if id.chars().count() > MAX_SUBJECT_ID_CHARS || id.chars().any(char::is_control) {
                return Err(ServiceError::invalid(format!(
                    "subject_id: at most {MAX_SUBJECT_ID_CHARS} printable characters"
                )));
            }
            Ok(Some((kind.to_owned(), id.to_owned())))
        }
    }
}

/// The snake_case name of an event type, as stored and shown.
pub fn event_name(t: EventType) -> Option<&'static str> {
    Some(match t {
        EventType::Unspecified => return None,
        EventType::SessionOpen => "session_open",
        EventType::Reasoning => "reasoning",
        EventType::ToolCall => "tool_call",
        EventType::ToolResult => "tool_result",
        EventType::StrategyProposed => "strategy_proposed",
        EventType::RunTransition => "run_transition",
        EventType::Denial => "denial",
        EventType::Error => "error",
        EventType::Approval => "approval",
        EventType::SessionClosed => "session_closed",
    })
}

/// Events that complete work already under way. A closed session still
/// accepts them for a short grace period, so a tool call that was running
/// when the session closed can record how it ended.
pub fn completes_in_flight(t: EventType) -> bool {
    matches!(
        t,
        EventType::ToolResult
            | EventType::RunTransition
            | EventType::Error
            | EventType::SessionClosed
    )
}

/// The title to store: the given one, or the prompt's first non-empty line.
pub fn resolve_title(title: Option<&str>, prompt: &str) -> Result<String, ServiceError> {
    if let Some(title) = title.map(str::trim).filter(|t| !t.is_empty()) {
        if title.chars().count() > MAX_TITLE_CHARS {
            return Err(ServiceError::invalid(format!(
                "title: at most {MAX_TITLE_CHARS} characters"
            )));
        }
        return Ok(title.to_owned());
    }
    let line = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("Untitled session");
    if line.chars().count() <= DERIVED_TITLE_CHARS {
        return Ok(line.to_owned());
    }
    let cut: String = line.chars().take(DERIVED_TITLE_CHARS - 1).collect();
    Ok(format!("{}…", cut.trim_end()))
}

/// Check a prompt: present, not blank, not huge.
pub fn check_prompt(prompt: &str) -> Result<(), ServiceError> {
    if prompt.trim().is_empty() {
        return Err(ServiceError::invalid(
            "prompt: required to open a session, and must not be blank (a resume with session_id may leave it out)",
        ));
    }
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(ServiceError::invalid(format!(
            "prompt: at most {MAX_PROMPT_BYTES} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ithaca_kit::id::SessionId;

    #[test]
    fn title_comes_from_the_first_non_empty_line() {
        let t = resolve_title(None, "\n  Research NVDA momentum  \nthen backtest").expect("valid");
        assert_eq!(t, "Research NVDA momentum");
        let t = resolve_title(Some("  NVDA  "), "whatever").expect("valid");
        assert_eq!(t, "NVDA");
        let t = resolve_title(Some("   "), "fallback line").expect("valid");
        assert_eq!(t, "fallback line");
    }

    #[test]
    fn long_first_lines_are_cut_on_a_character_boundary() {
        let prompt = "é".repeat(300);
        let t = resolve_title(None, &prompt).expect("valid");
        assert_eq!(t.chars().count(), DERIVED_TITLE_CHARS);
        assert!(t.ends_with('…'));
    }

    #[test]
    fn rejects_blank_prompts_and_bad_ids() {
        assert!(check_prompt(" \n ").is_err());
        assert!(check_prompt("ok").is_ok());
        assert!(SessionId::parse("sess_123").is_err());
        assert!(SessionId::parse("9b2f7c1e-8d4a-4c3b-9f0e-1a2b3c4d5e6f").is_ok());
    }
}
