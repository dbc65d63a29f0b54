//! The current session of each agent, remembered by this process so that a
//! `BeginCall` need not read it before every tool call.
//!
//! A remembered session is a hint, never the rule: the `tool_call` (or
//! `denial`) taken from it is appended only while the session is still
//! that agent's current one and open (`AppendScope::current_for`, checked
//! by the append's own `UPDATE` in the same transaction). So a session
//! switched or closed by another replica, or by a person, is never written
//! to from here: the append is refused, the entry forgotten, and the
//! session read again. This process forgets an entry itself when it opens,
//! resumes or closes a session, which saves that refused append.

use crate::store::SessionRow;
use ithaca_kit::principal::Principal;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Agents remembered at most; past it the map starts again empty.
const MAX_AGENTS: usize = 4096;

/// Agent id → its tenant's current session row (a row's tenant is checked
/// on every read, so two tenants' agents of one id only miss).
#[derive(Clone, Debug, Default)]
pub struct CurrentCache {
    rows: Arc<Mutex<HashMap<String, SessionRow>>>,
}

impl CurrentCache {
    /// The remembered current session of `caller`, if any.
    pub fn get(&self, caller: &Principal) -> Option<SessionRow> {
        let agent = caller.agent();
        if agent.is_empty() {
            return None;
        }
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        rows.get(agent)
            .filter(|row| row.tenant_id.as_str() == caller.tenant_id())
            .cloned()
    }

    /// Remember `row` as `caller`'s current session.
    pub fn remember(&self, caller: &Principal, row: &SessionRow) {
        let agent = caller.agent();
        if agent.is_empty() || row.tenant_id.as_str() != caller.tenant_id() {
            return;
        }
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        if rows.len() >= MAX_AGENTS && !rows.contains_key(agent) {
            rows.clear();
        }
        rows.insert(agent.to_owned(), row.clone());
    }

    /// Forget `caller`'s current session.
    pub fn forget(&self, caller: &Principal) {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        rows.remove(caller.agent());
    }

    /// Forget every agent whose current session is `session_id`.
    pub fn forget_session(&self, session_id: &str) {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        rows.retain(|_, row| row.session_id.as_str() != session_id);
    }
}
