//! Subjects (DESIGN §5) are checked when they are set (issue 28, item 11):
//! a person opens a session on a filter or a GCN event only if the broker,
//! which owns both, finds it with that person's own principal. Another
//! tenant's filter is as missing as no filter, so nothing leaks, and no
//! session ever carries a subject that names nothing.

use crate::service::SessionService;
use ithaca_kit::client::BadUrl;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::broker::v1 as bpb;
use ithaca_proto::broker::v1::filter_service_client::FilterServiceClient;
use ithaca_proto::broker::v1::gcn_service_client::GcnServiceClient;
use std::time::Duration;

impl SessionService {
    /// The same service, checking subjects against the broker at `url`
    /// with the caller's principal signed by `key`.
    pub fn with_broker(mut self, url: &str, key: InternalKey) -> Result<Self, BadUrl> {
        self.broker = Some((ithaca_kit::client::channel(url)?, key));
        Ok(self)
    }

    /// The subject `kind`/`id` as its owning service knows it, asked with
    /// the caller's own principal: another tenant's filter, or an id that
    /// names nothing, is refused here, so no session is ever opened on it.
    /// Returns the owner's canonical id (a GCN event named by an alias is
    /// stored by its dateobs).
    pub(crate) async fn checked_subject(
        &self,
        caller: &Principal,
        kind: &str,
        id: &str,
    ) -> Result<(String, String), ServiceError> {
        let Some((channel, key)) = &self.broker else {
            return Err(ServiceError::new(
                Code::Unavailable,
                "subject_kind: no broker service is configured here to check the subject",
            ));
        };
        let answer = match kind {
            "filter" => {
                let mut request = tonic::Request::new(bpb::GetBrokerFilterRequest {
                    filter_id: id.to_owned(),
                    matches_limit: Some(0),
                });
                request.set_timeout(SUBJECT_CHECK_TIMEOUT);
                key.sign(&mut request, caller);
                FilterServiceClient::new(channel.clone())
                    .get_broker_filter(request)
                    .await
                    .map(|f| f.into_inner().filter_id)
            }
            "gcn_event" => {
                let mut request = tonic::Request::new(bpb::GetGcnEventRequest {
                    dateobs: id.to_owned(),
                    include_bodies: Some(false),
                    // Only the canonical dateobs is wanted.
                    limit: Some(1),
                    cursor: None,
                });
                request.set_timeout(SUBJECT_CHECK_TIMEOUT);
                key.sign(&mut request, caller);
                GcnServiceClient::new(channel.clone())
                    .get_gcn_event(request)
                    .await
                    .map(|e| e.into_inner().dateobs)
            }
            // check_subject let only the known kinds through.
            other => {
                return Err(ServiceError::invalid(format!(
                    "subject_kind: {other:?} is not a subject"
                )));
            }
        };
        match answer {
            Ok(canonical) if !canonical.is_empty() => Ok((kind.to_owned(), canonical)),
            Ok(_) => Ok((kind.to_owned(), id.to_owned())),
            Err(status) => Err(subject_refusal(kind, id, &status)),
        }
    }
}

/// How long the broker may take to say whether a subject exists.
const SUBJECT_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a subject was refused, naming it: the broker found no such object
/// for this caller (another tenant's is the same as a missing one), or the
/// id is not one of its kind; anything else is the broker being unable to
/// answer.
fn subject_refusal(kind: &str, id: &str, status: &tonic::Status) -> ServiceError {
    match status.code() {
        tonic::Code::NotFound => {
            ServiceError::not_found(format!("subject_id: no {kind} {id:?} in this tenant"))
                .with_domain(DomainCode::SubjectNotFound)
        }
        tonic::Code::InvalidArgument => {
            let why: String = status.message().chars().take(200).collect();
            ServiceError::invalid(format!("subject_id: {id:?} is not a {kind} id ({why})"))
        }
        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => {
            ServiceError::denied(format!("subject_id: this key may not read {kind} {id:?}"))
        }
        code => {
            tracing::warn!(?code, error = %status.message(), kind, "checking a subject failed");
            ServiceError::new(
                Code::Unavailable,
                format!("subject_id: the broker could not check {kind} {id:?}; retry in a moment"),
            )
        }
    }
}
