//! Whether an approved call may still run as its requester (issue 28,
//! item 8): a call approved after the requester's key was revoked, or after
//! their session closed, would run as someone who can no longer act, and
//! its steps would never reach a trace. Auth and the session service are
//! asked over gRPC at decision time; neither crate is used.

use crate::service::{ApprovalsService, Blocked, OWNER_TIMEOUT};
use ithaca_kit::error::{Code, DomainCode, ServiceError};
use ithaca_kit::principal::Principal;
use ithaca_proto::auth::v1 as apb;
use ithaca_proto::auth::v1::auth_service_client::AuthServiceClient;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;

impl ApprovalsService {
    /// Whether an approved call may run as `requester` now: their key (when
    /// they have one) is still active, asked of auth; and their session is
    /// open, asked of the session service, so every step of the call can be
    /// traced. A service that cannot be asked refuses the decision for now
    /// and changes nothing.
    pub(crate) async fn may_run_as(&self, requester: &Principal) -> Result<(), Blocked> {
        if !requester.key_id().is_empty() {
            let Some(auth) = &self.auth else {
                return Err(Blocked::Unavailable(ServiceError::new(
                    Code::Unavailable,
                    "auth: no auth service is configured here to check the requester's key",
                )));
            };
            let mut request = tonic::Request::new(apb::GetKeyRequest {
                tenant_id: requester.tenant_id().to_owned(),
                key_id: requester.key_id().to_owned(),
            });
            request.set_timeout(OWNER_TIMEOUT);
            // Asking about a key is an administrator's question: the
            // approvals service asks as the system, in the requester's
            // tenant.
            self.sign(&mut request, &Principal::system(requester.tenant_id()));
            let key_id = requester.key_id();
            match AuthServiceClient::new(auth.clone()).get_key(request).await {
                Ok(key) if key.get_ref().revoked_at.is_empty() => {}
                Ok(key) => {
                    return Err(Blocked::Refused(
                        DomainCode::RequesterRevoked,
                        format!(
                            "the requester's key {key_id} was revoked at {}",
                            key.get_ref().revoked_at
                        ),
                    ));
                }
                Err(status) if status.code() == tonic::Code::NotFound => {
                    return Err(Blocked::Refused(
                        DomainCode::RequesterRevoked,
                        format!("the requester's key {key_id} no longer exists"),
                    ));
                }
                Err(status) => {
                    tracing::warn!(error = %status.message(), "checking the requester's key failed");
                    return Err(Blocked::Unavailable(ServiceError::new(
                        Code::Unavailable,
                        "auth: the requester's key could not be checked; retry in a moment",
                    )));
                }
            }
        }
        let Some(session) = &self.session else {
            return Err(Blocked::Unavailable(ServiceError::new(
                Code::Unavailable,
                "session: no session service is configured here to trace the call",
            )));
        };
        let Some(session_id) = requester.session_id() else {
            return Err(Blocked::Refused(
                DomainCode::SessionClosed,
                "the request was filed in no session, so its steps cannot be traced".to_owned(),
            ));
        };
        let mut request = tonic::Request::new(spb::GetSessionRequest {
            session_id: session_id.to_owned(),
        });
        request.set_timeout(OWNER_TIMEOUT);
        self.sign(&mut request, requester);
        match SessionServiceClient::new(session.clone())
            .get_session(request)
            .await
        {
            Ok(s) if s.get_ref().status == "open" => Ok(()),
            Ok(s) => Err(Blocked::Refused(
                DomainCode::SessionClosed,
                format!(
                    "the requester's session {session_id} is {}",
                    s.get_ref().status
                ),
            )),
            Err(status) if status.code() == tonic::Code::NotFound => Err(Blocked::Refused(
                DomainCode::SessionClosed,
                format!("the requester's session {session_id} no longer exists"),
            )),
            Err(status) => {
                tracing::warn!(error = %status.message(), "checking the requester's session failed");
                Err(Blocked::Unavailable(ServiceError::new(
                    Code::Unavailable,
                    "session: the requester's session could not be checked; retry in a moment",
                )))
            }
        }
    }
}
