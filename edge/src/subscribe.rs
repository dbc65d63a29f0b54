//! Resource subscriptions: one watch stream (`watch.proto`) per
//! subscription, turned into `notifications/resources/updated`.
//!
//! Where a notification goes depends on the era and transport:
//!
//! - a legacy stdio client holds a session: through `rmcp`'s peer;
//! - a legacy HTTP client has no session on the stateless edge: to the GET
//!   streams (`GET /mcp`) its caller (tenant, key, agent) holds open on this
//!   replica, which is where the legacy profile sends what belongs to no
//!   request;
//! - a 2026-07-28 client: on its `subscriptions/listen` stream, which
//!   holds its watches for as long as it stays open (see `mcp.rs`).
//!
//! A subscription lives on the replica that accepted it. A watch that
//! breaks (the service restarted) or reaches its deadline is opened again,
//! and one update is sent then, since a change may have fallen in the gap;
//! a watch the service ends (the resource can change no more) ends the
//! subscription.

use crate::core::{Core, RpcError};
use crate::relay::owner_of;
use futures::StreamExt;
use futures::future::BoxFuture;
use ithaca_kit::principal::Principal;
use prost_reflect::DynamicMessage;
use rmcp::RoleServer;
use rmcp::model::{ResourceUpdatedNotificationParam, ServerNotification};
use rmcp::service::Peer;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most subscriptions one caller may hold on one replica.
pub const MAX_PER_CALLER: usize = 100;
/// Most subscriptions on one replica.
const MAX_TOTAL: usize = 20_000;
/// How long a legacy HTTP subscription lives while its caller holds no GET
/// stream on this replica: nothing could be delivered.
pub const UNHEARD_FOR: Duration = Duration::from_secs(600);
/// How often an orphaned subscription is looked at.
const CHECK_EVERY: Duration = Duration::from_secs(30);
/// Waits between attempts to open a broken watch again.
const REOPEN_AFTER: [Duration; 4] = [
    Duration::from_millis(200),
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(15),
];
/// Notifications queued for one GET stream before more are dropped.
const STREAM_QUEUE: usize = 64;

/// Where a subscription's updates go.
#[derive(Clone)]
pub enum Deliver {
    /// The caller's GET streams on this replica (legacy HTTP).
    Streams,
    /// An `rmcp` peer (legacy stdio).
    Peer(Peer<RoleServer>),
}

/// The legacy subscriptions of one edge replica (or one stdio session),
/// and the GET streams of legacy HTTP callers.
pub struct Subscriptions {
    core: Arc<Core>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Live subscriptions by (owner, uri): a number to tell a replaced one
    /// apart, and its task.
    live: HashMap<(String, String), (u64, tokio::task::AbortHandle)>,
    next: u64,
    /// Open GET streams by owner.
    streams: HashMap<String, Vec<tokio::sync::mpsc::Sender<Value>>>,
}

impl Subscriptions {
    pub fn new(core: Arc<Core>) -> Arc<Self> {
        Arc::new(Subscriptions {
            core,
            inner: Mutex::default(),
        })
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribe `caller` to `uri`: refused as a read of it would be, or
    /// when the caller already holds [`MAX_PER_CALLER`]. Subscribing again
    /// to the same URI replaces the earlier subscription, and it ends when
    /// `revoked` resolves (the caller's key no longer verifies).
    pub async fn subscribe(
        self: &Arc<Self>,
        caller: &Principal,
        uri: &str,
        deliver: Deliver,
        revoked: crate::revoked::Revoked,
    ) -> Result<(), RpcError> {
        let owner = owner_of(caller);
        let key = (owner.clone(), uri.to_owned());
        {
            let inner = self.inner();
            let held = inner.live.keys().filter(|(o, _)| *o == owner).count();
            if !inner.live.contains_key(&key)
                && (held >= MAX_PER_CALLER || inner.live.len() >= MAX_TOTAL)
            {
                return Err(RpcError::invalid_params(
                    format!(
                        "too many subscriptions: a caller may hold {MAX_PER_CALLER}; \
                         unsubscribe from some first"
                    ),
                    Some(json!({"uri": uri})),
                ));
            }
        }
        // Opened before answering, so a change right after the answer is
        // not missed.
        let stream = self.core.watch_resource(caller, uri).await?;
        let mut inner = self.inner();
        inner.next += 1;
        let number = inner.next;
        let this = self.clone();
        let principal = caller.clone();
        let task_key = key.clone();
        let task = tokio::spawn(async move {
            let notify = |uri: String| {
                let this = this.clone();
                let deliver = deliver.clone();
                let owner = task_key.0.clone();
                Box::pin(async move { this.deliver(&deliver, &owner, &uri).await })
                    as BoxFuture<'static, bool>
            };
            let streams_only = matches!(deliver, Deliver::Streams);
            let heard = {
                let this = this.clone();
                let owner = task_key.0.clone();
                move || !streams_only || this.has_streams(&owner)
            };
            tokio::select! {
                () = follow(&this.core, &principal, &task_key.1, stream, notify, heard) => {}
                () = revoked.wait() => {
                    tracing::info!(uri = %task_key.1, "a subscription ended: its caller no longer verifies");
                }
            }
            let mut inner = this.inner();
            if inner.live.get(&task_key).is_some_and(|(n, _)| *n == number) {
                inner.live.remove(&task_key);
            }
        });
        if let Some((_, old)) = inner.live.insert(key, (number, task.abort_handle())) {
            old.abort();
        }
        Ok(())
    }

    /// End `caller`'s subscription to `uri`. A URI the caller could not
    /// read is refused as a read of it would be; one it holds no
    /// subscription to here is fine (it may have ended, or been made on
    /// another replica).
    pub async fn unsubscribe(&self, caller: &Principal, uri: &str) -> Result<(), RpcError> {
        let key = (owner_of(caller), uri.to_owned());
        let removed = self.inner().live.remove(&key);
        match removed {
            Some((_, task)) => {
                task.abort();
                Ok(())
            }
            None => self.core.read_resource(caller, uri).await.map(|_| ()),
        }
    }

    /// A GET stream for `caller`: the notifications its subscriptions
    /// produce while it is open.
    pub fn open_stream(&self, caller: &Principal) -> tokio::sync::mpsc::Receiver<Value> {
        let (tx, rx) = tokio::sync::mpsc::channel(STREAM_QUEUE);
        let mut inner = self.inner();
        let streams = inner.streams.entry(owner_of(caller)).or_default();
        streams.retain(|s| !s.is_closed());
        streams.push(tx);
        rx
    }

    /// Subscriptions alive on this replica (a gauge of `/metrics`).
    pub fn live(&self) -> usize {
        self.inner().live.len()
    }

    fn has_streams(&self, owner: &str) -> bool {
        let inner = self.inner();
        inner
            .streams
            .get(owner)
            .is_some_and(|s| s.iter().any(|s| !s.is_closed()))
    }

    /// Send one update; false when its receiver is gone for good.
    async fn deliver(&self, deliver: &Deliver, owner: &str, uri: &str) -> bool {
        match deliver {
            Deliver::Peer(peer) => {
                let notification = ServerNotification::ResourceUpdatedNotification(
                    rmcp::model::ResourceUpdatedNotification::new(
                        ResourceUpdatedNotificationParam::new(uri),
                    ),
                );
                peer.send_notification(notification).await.is_ok()
            }
            Deliver::Streams => {
                let message = json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": {"uri": uri},
                });
                let mut inner = self.inner();
                if let Some(streams) = inner.streams.get_mut(owner) {
                    streams.retain(|s| !s.is_closed());
                    for stream in streams.iter() {
                        // A stream too slow to take it misses this one.
                        let _ = stream.try_send(message.clone());
                    }
                    if streams.is_empty() {
                        inner.streams.remove(owner);
                    }
                }
                true
            }
        }
    }
}

/// Follow one watch until it ends for good: `notify` on each change (it
/// answers false when nobody can receive any more), the watch opened again
/// (with one update) when it breaks, and given up when `heard` has been
/// false for [`UNHEARD_FOR`].
pub async fn follow<N, H>(
    core: &Core,
    caller: &Principal,
    uri: &str,
    mut stream: tonic::Streaming<DynamicMessage>,
    notify: N,
    heard: H,
) where
    N: Fn(String) -> BoxFuture<'static, bool>,
    H: Fn() -> bool,
{
    let mut unheard_since: Option<Instant> = None;
    let mut check = tokio::time::interval(CHECK_EVERY);
    check.tick().await;
    loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = check.tick() => {
                if heard() {
                    unheard_since = None;
                } else if unheard_since.get_or_insert_with(Instant::now).elapsed() >= UNHEARD_FOR {
                    tracing::debug!(uri, "subscription ended: nobody listens");
                    return;
                }
                continue;
            }
        };
        tracing::debug!(uri, ended = item.is_none(), "a watch reported");
        match item {
            Some(Ok(_)) => {
                if !notify(uri.to_owned()).await {
                    return;
                }
            }
            // The service ended the watch: the resource changes no more.
            None => return,
            Some(Err(status)) => {
                tracing::debug!(uri, code = ?status.code(), error = %status.message(), "a watch broke; opening it again");
                let mut reopened = None;
                for attempt in 0..12 {
                    tokio::time::sleep(REOPEN_AFTER[attempt.min(REOPEN_AFTER.len() - 1)]).await;
                    match core.watch_resource(caller, uri).await {
                        Ok(s) => {
                            reopened = Some(s);
                            break;
                        }
                        // Gone, or no longer the caller's to see.
                        Err(e) if e.code == RpcError::INVALID_PARAMS => return,
                        Err(_) => {}
                    }
                }
                let Some(s) = reopened else {
                    tracing::warn!(
                        uri,
                        "a watch could not be opened again; the subscription ends"
                    );
                    return;
                };
                stream = s;
                if !notify(uri.to_owned()).await {
                    return;
                }
            }
        }
    }
}

/// A 2026-07-28 `subscriptions/listen`: one watch per accepted URI the
/// caller may read, each update sent on the listen's stream (and one as
/// each watch opens, for a change made since the acknowledgement), until
/// the client goes or the caller's key stops verifying.
pub async fn listen(
    core: &Arc<Core>,
    principal: &Principal,
    revoked: &crate::revoked::Revoked,
    context: rmcp::service::SubscriptionContext,
) -> Result<(), rmcp::ErrorData> {
    let uris = context
        .accepted()
        .resource_subscriptions
        .clone()
        .unwrap_or_default();
    if uris.len() > crate::subscribe::MAX_PER_CALLER {
        return Err(rmcp::ErrorData::invalid_params(
            format!(
                "resourceSubscriptions: at most {} URIs per listen",
                crate::subscribe::MAX_PER_CALLER
            ),
            None,
        ));
    }
    // One watch per URI, for as long as the listen stream is open.
    let mut watches = tokio::task::JoinSet::new();
    for uri in uris {
        let stream = match core.watch_resource(principal, &uri).await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(uri, error = %error.message, "a listened URI is not watched");
                continue;
            }
        };
        let core = core.clone();
        let principal = principal.clone();
        let sink = context.sink().clone();
        watches.spawn(async move {
            let notify = |uri: String| {
                let sink = sink.clone();
                Box::pin(async move { sink.notify_resource_updated(uri).await.is_ok() })
                    as futures::future::BoxFuture<'static, bool>
            };
            // rmcp acknowledges the listen before it calls this, so a change
            // between the acknowledgement and this watch's opening reaches
            // no watch: one update now, as after a watch is opened again,
            // has the client read the resource as it is from here on.
            if !notify(uri.clone()).await {
                return;
            }
            crate::subscribe::follow(&core, &principal, &uri, stream, notify, || true).await;
        });
    }
    // The listen ends when its client goes, or when its key stops
    // verifying: a revoked key hears nothing more.
    let ended_by_revocation = tokio::select! {
        () = context.cancelled() => false,
        () = revoked.wait() => true,
    };
    watches.abort_all();
    if ended_by_revocation {
        tracing::info!("a listen ended: its caller no longer verifies");
        return Err(rmcp::ErrorData::new(
            rmcp::model::ErrorCode(crate::core::codes::INVALID_REQUEST),
            "the listen ended: the caller's key no longer verifies",
            None,
        ));
    }
    Ok(())
}
