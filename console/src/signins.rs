//! Console sign-ins, held by the auth service (the console owns no state).
//!
//! Signing in opens a sign-in record for the person's key (`OpenSignIn`);
//! its id is sealed into the cookie beside the token. Every request checks
//! both in one call (`VerifySignIn`): the token must verify and the sign-in
//! must be open. Signing out ends the record (`EndSignIn`), and revoking the
//! key ends its records too, so a copied or replayed cookie stops working at
//! once, on every edge replica, rather than living out its eight hours.
//!
//! The check is not cached: a console request is a person's click, and a
//! cache would let a signed-out cookie through for its lifetime on every
//! replica that had seen it.

use crate::Console;
use crate::backends::signed;
use ithaca_edge::auth::AuthFailure;
use ithaca_kit::principal::{Principal, VerifiedKey};
use ithaca_proto::auth::v1 as pb;

impl Console {
    /// Open a sign-in of `person`'s own key for `ttl_secs`; its id.
    pub(crate) async fn open_sign_in(
        &self,
        person: &Principal,
        ttl_secs: i64,
    ) -> Result<String, tonic::Status> {
        let request = signed(
            &self.key,
            person,
            self.backends.timeout,
            pb::OpenSignInRequest { ttl_secs },
        );
        let opened = self.backends.auth().open_sign_in(request).await?;
        Ok(opened.into_inner().sign_in_id)
    }

    /// End `person`'s sign-in `sign_in_id` (sign-out).
    pub(crate) async fn end_sign_in(
        &self,
        person: &Principal,
        sign_in_id: &str,
    ) -> Result<(), tonic::Status> {
        let request = signed(
            &self.key,
            person,
            self.backends.timeout,
            pb::EndSignInRequest {
                sign_in_id: sign_in_id.to_owned(),
            },
        );
        self.backends.auth().end_sign_in(request).await?;
        Ok(())
    }

    /// The person behind a cookie's `token` and `sign_in_id`: the key
    /// verifies and the sign-in is open. Verification is the one call the
    /// console makes as the system, as the edge's authenticator does.
    pub(crate) async fn verify_sign_in(
        &self,
        token: &str,
        sign_in_id: &str,
    ) -> Result<Principal, AuthFailure> {
        if sign_in_id.is_empty() {
            // A cookie sealed before sign-ins were recorded.
            return Err(AuthFailure::Invalid);
        }
        let request = signed(
            &self.key,
            &Principal::system(""),
            self.backends.timeout,
            pb::VerifySignInRequest {
                token: token.to_owned(),
                sign_in_id: sign_in_id.to_owned(),
            },
        );
        let timeout = self.backends.timeout;
        let reply =
            tokio::time::timeout(timeout, self.backends.auth().verify_sign_in(request)).await;
        let verified = match reply {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(status)) if status.code() == tonic::Code::Unauthenticated => {
                return Err(AuthFailure::Invalid);
            }
            Ok(Err(status)) => return Err(AuthFailure::Unavailable(status.message().to_owned())),
            Err(_) => {
                return Err(AuthFailure::Unavailable(format!(
                    "no answer within {} ms",
                    timeout.as_millis()
                )));
            }
        };
        Ok(Principal::verified(VerifiedKey {
            human: verified.actor == pb::Actor::Human as i32,
            tenant_id: verified.tenant_id,
            key_id: verified.key_id,
            scopes: verified.scopes,
        }))
    }
}
