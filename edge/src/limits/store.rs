//! Where the counters are kept: in this process, or in the auth service
//! every edge shares (`LeaseQuota`).

use super::Rule;
use ithaca_kit::client::Outbound;
use ithaca_proto::auth::v1 as pb;
use ithaca_proto::auth::v1::auth_service_client::AuthServiceClient;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The auth client the shared store leases through.
type AuthClient = AuthServiceClient<InterceptedService<Channel, Outbound>>;

/// Where the counters are kept.
pub enum Store {
    /// In this process: for an edge without keys, whose one caller cannot
    /// be spread over replicas anyway.
    Local(Mutex<HashMap<(String, i64, i64), u64>>),
    /// In the auth service, shared by every edge that uses it.
    Shared {
        client: Box<AuthClient>,
        timeout: Duration,
    },
}

impl Store {
    pub fn local() -> Self {
        Store::Local(Mutex::new(HashMap::new()))
    }

    /// Take up to `want` units of `subject`'s budget under `rule`: how many
    /// were granted, and how long until the window ends.
    pub(super) async fn lease(
        &self,
        subject: &str,
        rule: &Rule,
        want: u64,
    ) -> Result<Grant, String> {
        match self {
            Store::Local(windows) => Ok(local_lease(windows, subject, rule, want)),
            Store::Shared { client, timeout } => {
                let mut request = tonic::Request::new(pb::LeaseQuotaRequest {
                    subject: subject.to_owned(),
                    window_ms: rule.window_ms(),
                    limit: i64::try_from(rule.limit).unwrap_or(i64::MAX),
                    want: i64::try_from(want).unwrap_or(1),
                });
                request.set_timeout(*timeout);
                let mut client = AuthClient::clone(client);
                let reply = tokio::time::timeout(*timeout, client.lease_quota(request))
                    .await
                    .map_err(|_| format!("no answer within {} ms", timeout.as_millis()))?
                    .map_err(|status| status.message().to_owned())?
                    .into_inner();
                Ok(Grant {
                    granted: u64::try_from(reply.granted).unwrap_or(0),
                    resets_in: Duration::from_millis(
                        u64::try_from(reply.resets_in_ms).unwrap_or(0),
                    ),
                })
            }
        }
    }
}

/// What one lease granted.
pub(super) struct Grant {
    pub(super) granted: u64,
    pub(super) resets_in: Duration,
}

/// Windows kept by [`Store::Local`] before ended ones are swept.
const LOCAL_SWEEP_AT: usize = 10_000;

fn local_lease(
    windows: &Mutex<HashMap<(String, i64, i64), u64>>,
    subject: &str,
    rule: &Rule,
    want: u64,
) -> Grant {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let window = rule.window_ms();
    let start = now - now.rem_euclid(window);
    let mut windows = windows.lock().unwrap_or_else(|e| e.into_inner());
    if windows.len() >= LOCAL_SWEEP_AT {
        windows.retain(|(_, w, s), _| s + w > now);
    }
    let used = windows
        .entry((subject.to_owned(), window, start))
        .or_default();
    let granted = want.min(rule.limit.saturating_sub(*used));
    *used += granted;
    Grant {
        granted,
        resets_in: Duration::from_millis(u64::try_from(start + window - now).unwrap_or(0)),
    }
}
