//! Who may touch a filter: the caller's tenant, the write scope, the
//! session's subject, and the refusal that hides another tenant's filter.

use super::model::{FilterId, codes};
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::{Actor, Principal};
use ithaca_proto::scopes;

/// The caller's tenant; refused for callers without one.
pub(super) fn tenant_of(caller: &Principal) -> Result<&str, ServiceError> {
    let tenant = caller.tenant_id();
    if tenant.is_empty() {
        return Err(ServiceError::denied(
            "filters belong to a tenant and the caller has none",
        ));
    }
    Ok(tenant)
}

/// Writes need `filters:write` (the edge checks it too).
pub(super) fn require_write_scope(caller: &Principal) -> Result<(), ServiceError> {
    if caller.actor() == Actor::System || caller.has_scope(scopes::FILTERS_WRITE) {
        return Ok(());
    }
    Err(ServiceError::denied(format!(
        "missing scope: {}",
        scopes::FILTERS_WRITE
    )))
}

/// A subject-scoped write: only inside a session opened on this filter.
pub(super) fn require_subject(
    caller: &Principal,
    filter_id: &FilterId,
    tool: &str,
) -> Result<(), ServiceError> {
    if caller.may_write("filter", filter_id) {
        return Ok(());
    }
    let scoped = match caller.subject() {
        Some(s) => format!("this session is scoped to {s}"),
        None => "this session has no subject".to_owned(),
    };
    Err(ServiceError::denied(format!(
        "filter_id: {tool} writes only to the filter its session was opened on, and {scoped}, not filter {filter_id}; \
         a person opens a session on the filter from its page"
    ))
    .with_domain(codes::SUBJECT_MISMATCH))
}

pub(super) fn unknown_filter(filter_id: &FilterId) -> ServiceError {
    ServiceError::not_found(format!("filter_id: no filter {filter_id}"))
        .with_domain(codes::UNKNOWN_FILTER)
}
