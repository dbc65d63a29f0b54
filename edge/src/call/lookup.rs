//! Stage 1, lookup: the tool exists and the caller may use it.
//!
//! Only this stage builds an [`Offered`] tool, so every later stage holds
//! proof that it passed; and the one refusal it has, [`unknown_tool`],
//! is what a tool that does not exist and a tool the caller may not use
//! both get, word for word, so neither can be told from the other.

use crate::catalog::Tool;
use crate::core::{Core, RpcError};
use ithaca_kit::principal::{Actor, Principal};
use serde_json::json;

/// A tool the caller is offered. Its field is private and it has no
/// constructor outside this module: [`Core::lookup`] is the only way in.
#[derive(Clone, Copy, Debug)]
pub struct Offered<'a> {
    tool: &'a Tool,
}

impl<'a> Offered<'a> {
    pub fn tool(&self) -> &'a Tool {
        self.tool
    }
}

/// The refusal of a tool that is not there for this caller, whether it
/// does not exist or the caller may not use it.
pub fn unknown_tool(name: &str) -> RpcError {
    RpcError::invalid_params(format!("unknown tool: {name}"), Some(json!({"tool": name})))
}

impl Core {
    /// The tool `name`, offered to `caller`, or [`unknown_tool`].
    pub fn lookup<'a>(&'a self, caller: &Principal, name: &str) -> Result<Offered<'a>, RpcError> {
        self.catalog
            .tool(name)
            .filter(|tool| self.permitted(caller, tool))
            .map(|tool| Offered { tool })
            .ok_or_else(|| unknown_tool(name))
    }

    /// Whether `caller` may use `tool` at all: its scopes and, for
    /// human-only tools, its actor. The session subject is checked after the
    /// gate, once the caller's session is known ([`Core::offered`]).
    fn permitted(&self, caller: &Principal, tool: &Tool) -> bool {
        let scoped =
            caller.actor() == Actor::System || tool.scopes().iter().all(|s| caller.has_scope(s));
        let human_ok = !tool.options.human_only || caller.actor() != Actor::Agent;
        scoped && human_ok
    }

    /// Whether `caller` (with its session's subject, if any) is offered
    /// `tool`: permitted, and a subject-scoped write tool only inside a
    /// session opened on an object of its kind (DESIGN §5). The owning
    /// service checks the object itself.
    pub fn offered(&self, caller: &Principal, tool: &Tool) -> bool {
        self.permitted(caller, tool) && subject_fits(caller, tool)
    }

    /// The tools `caller` is offered; `caller` should carry its session's
    /// subject ([`Core::with_current_session`]).
    pub fn tools_for<'a>(&'a self, caller: &'a Principal) -> impl Iterator<Item = &'a Tool> + 'a {
        self.catalog
            .tools
            .iter()
            .filter(move |t| self.offered(caller, t))
    }

    /// Whether any tool `caller` is permitted is scoped to a subject, so that
    /// listing depends on its current session.
    pub fn lists_depend_on_session(&self, caller: &Principal) -> bool {
        self.catalog
            .tools
            .iter()
            .any(|t| !t.options.subject_kind.is_empty() && self.permitted(caller, t))
    }
}

/// Whether `caller`'s session subject fits `tool`: tools not scoped to a
/// subject always do; a scoped one needs a session on its kind of object.
pub fn subject_fits(caller: &Principal, tool: &Tool) -> bool {
    let kind = &tool.options.subject_kind;
    kind.is_empty()
        || caller.actor() == Actor::System
        || caller.subject().is_some_and(|s| &s.kind == kind)
}
