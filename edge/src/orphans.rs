//! Calls that ran but whose `tool_result` could not be recorded: kept,
//! bounded, until their session's trace can be told (`call/record.rs`).

use ithaca_kit::principal::Principal;
use std::sync::Mutex;

/// How many lost results the edge remembers to report.
const MAX_ORPHANS: usize = 1024;

/// Calls whose `tool_result` could not be recorded, oldest first.
#[derive(Default)]
pub struct Orphans(Mutex<Vec<Orphan>>);

/// A call whose `tool_result` could not be recorded.
#[derive(Clone, Debug)]
pub struct Orphan {
    pub principal: Principal,
    pub session_id: String,
    pub call_seq: i64,
    pub tool: String,
}

impl Orphans {
    /// Remember a call whose result could not be recorded, to report it in
    /// its session's trace at the next chance.
    pub fn remember(&self, principal: &Principal, session_id: &str, call_seq: i64, tool: &str) {
        self.keep(Orphan {
            principal: principal.clone(),
            session_id: session_id.to_owned(),
            call_seq,
            tool: tool.to_owned(),
        });
    }

    /// Keep `orphan` to report later (bounded; the oldest is dropped).
    pub fn keep(&self, orphan: Orphan) {
        let mut orphans = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if orphans.len() >= MAX_ORPHANS {
            orphans.remove(0);
        }
        orphans.push(orphan);
    }

    /// The remembered calls of `session_id`, taken out; `None` when none is
    /// remembered at all (the common case, which takes no allocation).
    pub fn take(&self, session_id: &str) -> Option<Vec<Orphan>> {
        let mut orphans = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if orphans.is_empty() {
            return None;
        }
        let (mine, rest) = orphans.drain(..).partition(|o| o.session_id == session_id);
        *orphans = rest;
        Some(mine)
    }
}
