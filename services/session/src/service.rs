//! The session domain: `session_context` semantics (seed 002), statuses, the
//! current session per (tenant, agent), appends, reads and live tails.

use crate::current::CurrentCache;
use crate::model::{self, Status};
use crate::store::{
    AppendScope, EventRow, ListQuery, NewEvent, PromptRow, Refusal, SessionRow, Store,
};
use crate::tail::Notifier;
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::ServiceError;
use ithaca_kit::id::{SessionId, TenantId};
use ithaca_kit::principal::{Actor, InternalKey, Principal};
use ithaca_kit::propagation;
use ithaca_proto::session::v1::EventType;
use serde_json::json;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// Default and largest page of a read.
pub const DEFAULT_READ_LIMIT: i64 = 100;
pub const MAX_READ_LIMIT: i64 = 1000;

/// Default and largest page of the session list.
pub const DEFAULT_LIST_LIMIT: i64 = 25;
pub const MAX_LIST_LIMIT: i64 = 100;

/// The domain code agents see when they skip `session_context`.
pub const NO_ACTIVE_SESSION: DomainCode = DomainCode::NoActiveSession;

/// How a session service behaves.
#[derive(Clone, Debug)]
pub struct Config {
    /// The public base URL of the edge, for `trace_stream` links.
    pub public_url: String,
    /// How long after closing a session still accepts the results of calls
    /// that were in flight.
    pub closed_grace: Duration,
    /// An open session with no activity for this long is closed (reason
    /// `idle_timeout`). Zero: never.
    pub idle_timeout: Duration,
    /// A closed session is archived this long after closing: its trace
    /// leaves the hot table, its metadata stays. Zero: never.
    pub archive_after: Duration,
    /// How often the sweeper looks for idle and archivable sessions.
    pub sweep_every: Duration,
    /// The broker, which owns the objects a session may be opened on
    /// (filters, GCN events): a subject is checked there when it is set.
    /// Without it, no session can be opened on a subject.
    pub broker_url: Option<String>,
}

/// Default idle timeout (seed 002: sessions time out).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(2 * 60 * 60);
/// Default retention of a closed session's trace in the hot table.
pub const DEFAULT_ARCHIVE_AFTER: Duration = Duration::from_secs(30 * 24 * 60 * 60);

impl Default for Config {
    fn default() -> Self {
        Config {
            public_url: "http://127.0.0.1:8080".to_owned(),
            closed_grace: Duration::from_secs(300),
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            archive_after: DEFAULT_ARCHIVE_AFTER,
            sweep_every: Duration::from_secs(60),
            broker_url: None,
        }
    }
}

/// What one sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub closed: usize,
    pub archived: usize,
}

/// Sessions handled per sweep step, so one sweep never holds the writer long.
const SWEEP_BATCH: i64 = 200;

/// Sessions and their traces.
#[derive(Clone, Debug)]
pub struct SessionService {
    store: Store,
    notifier: Notifier,
    config: Config,
    /// Ends live tails when the server shuts down, so draining can finish.
    shutdown: CancellationToken,
    /// Where a subject is checked, and the key that signs the person's
    /// principal for it ([`SessionService::with_broker`]).
    pub(crate) broker: Option<(Channel, InternalKey)>,
    /// Each agent's current session as `BeginCall` last found it.
    current_cache: CurrentCache,
}

/// Why an append for a call was not made.
enum Begin {
    /// The remembered current session is no longer current (or open).
    Stale,
    /// Refused or failed, as the caller should hear it.
    Refused(ServiceError),
}

impl From<ServiceError> for Begin {
    fn from(err: ServiceError) -> Self {
        Begin::Refused(err)
    }
}

impl From<sqlx::Error> for Begin {
    fn from(err: sqlx::Error) -> Self {
        Begin::Refused(err.into())
    }
}

impl SessionService {
    /// Cancelled when the server shuts down: long-lived streams end on it
    /// so that draining can finish.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    pub fn new(store: Store, config: Config, shutdown: CancellationToken) -> Self {
        let notifier = Notifier::default();
        crate::tail::spawn_listener(store.db(), notifier.clone(), shutdown.clone());
        let service = SessionService {
            store,
            notifier,
            config,
            shutdown,
            broker: None,
            current_cache: CurrentCache::default(),
        };
        service.spawn_sweeper();
        service
    }

    /// Close idle sessions and archive old closed ones, every
    /// `sweep_every`, until shutdown. Replicas may sweep at once: every
    /// step is a guarded transition, so each session is handled once.
    fn spawn_sweeper(&self) {
        let idle = !self.config.idle_timeout.is_zero();
        let archive = !self.config.archive_after.is_zero();
        if !(idle || archive) || self.config.sweep_every.is_zero() {
            return;
        }
        let service = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(service.config.sweep_every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = service.shutdown.cancelled() => return,
                    _ = tick.tick() => {}
                }
                match service.sweep(clock::now_ms()).await {
                    Ok(done) if done != Swept::default() => {
                        tracing::info!(
                            closed = done.closed,
                            archived = done.archived,
                            "session sweep"
                        );
                    }
                    Ok(_) => {}
                    Err(err) => tracing::warn!(error = %err, "session sweep failed"),
                }
            }
        });
    }

    /// One sweep as of `now_ms`: close sessions idle longer than the idle
    /// timeout (traced as `session_closed` with reason `idle_timeout`), then
    /// archive sessions closed longer ago than the retention window.
    pub async fn sweep(&self, now_ms: i64) -> Result<Swept, ServiceError> {
        let mut done = Swept::default();
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        if !self.config.idle_timeout.is_zero() {
            let cutoff = now_ms.saturating_sub(ms(self.config.idle_timeout));
            loop {
                let stale = self.store.stale(Status::Open, cutoff, SWEEP_BATCH).await?;
                let last_batch = (stale.len() as i64) < SWEEP_BATCH;
                for (tenant_id, session_id) in stale {
                    let reason = json!({
                        "reason": "idle_timeout",
                        "closed_by": "system",
                        "idle_timeout_ms": ms(self.config.idle_timeout),
                    });
                    if self
                        .close_as(
                            &Principal::system(tenant_id.as_str()),
                            &tenant_id,
                            &session_id,
                            reason,
                            now_ms,
                        )
                        .await?
                    {
                        done.closed += 1;
                    }
                }
                if last_batch {
                    break;
                }
            }
        }
        if !self.config.archive_after.is_zero() {
            let cutoff = now_ms.saturating_sub(ms(self.config.archive_after));
            loop {
                let old = self
                    .store
                    .stale(Status::Closed, cutoff, SWEEP_BATCH)
                    .await?;
                let last_batch = (old.len() as i64) < SWEEP_BATCH;
                for (tenant_id, session_id) in old {
                    if self.store.archive(&tenant_id, &session_id, now_ms).await? {
                        done.archived += 1;
                    }
                }
                if last_batch {
                    break;
                }
            }
        }
        Ok(done)
    }

    /// Close one session: the transition, the agents' current session
    /// cleared, and `session_closed` with `payload` for watchers. False when
    /// it was not open.
    async fn close_as(
        &self,
        caller: &Principal,
        tenant_id: &TenantId,
        session_id: &SessionId,
        payload: serde_json::Value,
        now_ms: i64,
    ) -> Result<bool, ServiceError> {
        let closed = self
            .store
            .transition(tenant_id, session_id, Status::Open, Status::Closed, now_ms)
            .await?;
        if closed {
            self.store.clear_current(tenant_id, session_id).await?;
            self.current_cache.forget_session(session_id.as_str());
            // Watchers learn the session ended; their streams end after it.
            self.append_event(
                caller,
                session_id.as_str(),
                EventType::SessionClosed,
                payload.to_string(),
            )
            .await?;
            tracing::info!(%session_id, %tenant_id, "session closed");
        }
        Ok(closed)
    }

    /// The SSE URL of a session's trace; empty when no HTTP edge serves
    /// this deployment (an empty public URL, as over stdio).
    pub fn trace_stream(&self, session_id: &str) -> String {
        let base = self.config.public_url.trim_end_matches('/');
        if base.is_empty() {
            return String::new();
        }
        format!("{base}/api/sessions/{session_id}/events/stream")
    }

    /// The resource that holds a session's trace, from its first event.
    pub fn trace_resource(session_id: &str) -> String {
        format!("doomberg://sessions/{session_id}/trace/0")
    }

    /// How to reach a subject-scoped write tool from outside its subject:
    /// a person opens a session on the object (on its console page, or
    /// with `session_context` and a human key), and the agent joins it.
    fn subject_hint(&self, tool: &str, kind: &str, arguments: &serde_json::Value) -> String {
        let (page, id) = match kind {
            "filter" => ("filters", arguments["filter_id"].as_str()),
            "gcn_event" => ("gcn", arguments["dateobs"].as_str()),
            _ => ("", None),
        };
        let base = self.config.public_url.trim_end_matches('/');
        let where_ = match id.filter(|i| !i.is_empty() && i.len() <= 100) {
            Some(id) if !base.is_empty() && !page.is_empty() => {
                format!(
                    " on its console page, {base}/console/{page}/{}",
                    urlencode(id)
                )
            }
            _ if !base.is_empty() && !page.is_empty() => {
                format!(" on its page under {base}/console/{page}")
            }
            _ => String::new(),
        };
        format!(
            "{tool} writes to one {kind} and is offered only in a session a person opened on it. \
             Ask a person to open a session on the {kind}{where_} (or with session_context, \
             subject_kind {kind:?} and a human key), then join it with session_context and its session_id."
        )
    }

    /// Create a session, or resume `session_id`; see seed 002.
    pub async fn session_context(
        &self,
        caller: &Principal,
        prompt: &str,
        title: Option<&str>,
        session_id: Option<&str>,
    ) -> Result<SessionRow, ServiceError> {
        let request = OpenRequest {
            prompt,
            title,
            session_id,
            ..OpenRequest::default()
        };
        self.open(caller, &request).await
    }

    /// [`SessionService::session_context`] with every option. Only a person
    /// (or the system) opens a session on a subject; an agent that resumes
    /// it works inside that subject.
    pub async fn open(
        &self,
        caller: &Principal,
        request: &OpenRequest<'_>,
    ) -> Result<SessionRow, ServiceError> {
        let opened = self.open_session(caller, request).await;
        // The agent's current session changed (or may have, on an error
        // after the write): the next `BeginCall` reads it again.
        self.current_cache.forget(caller);
        opened
    }

    async fn open_session(
        &self,
        caller: &Principal,
        request: &OpenRequest<'_>,
    ) -> Result<SessionRow, ServiceError> {
        let OpenRequest {
            prompt,
            title,
            session_id,
            subject_kind,
            subject_id,
        } = *request;
        let tenant_id = TenantId::of(caller)?;
        let agent_id = agent(caller)?;
        let resuming = session_id.is_some_and(|s| !s.trim().is_empty());
        // Resuming without a prompt adds nothing to the session's prompts.
        let prompt = (!resuming || !prompt.trim().is_empty()).then_some(prompt);
        if let Some(prompt) = prompt {
            model::check_prompt(prompt)?;
        }
        let subject = model::check_subject(subject_kind, subject_id)?;
        if subject.is_some() && caller.actor() == Actor::Agent {
            return Err(ServiceError::denied(
                "subject_kind: only a person opens a session on a subject (a human key, or the \
                 console); an agent joins that session with its session_id",
            )
            .with_domain(DomainCode::HumanRequired));
        }
        let now = clock::now_ms();
        let trace_id = propagation::current_trace_id();
        let reasoning = NewEvent {
            event_type: "reasoning",
            payload: json!({"source": "session_context", "prompt": prompt}).to_string(),
            trace_id: trace_id.clone(),
        };

        if let Some(session_id) = session_id.filter(|s| !s.trim().is_empty()) {
            let session_id = SessionId::parse(session_id)?;
            if subject.is_some() {
                return Err(ServiceError::invalid(
                    "subject_kind: a subject is set when a session is opened, not when it is resumed",
                ));
            }
            let scope = AppendScope {
                tenant_id: &tenant_id,
                session_id: &session_id,
                now_ms: now,
                closed_since_ms: None,
                current_for: None,
            };
            let reasoning = match prompt {
                Some(_) => std::slice::from_ref(&reasoning),
                None => &[],
            };
            let events = self
                .store
                .resume(&scope, agent_id, prompt, reasoning)
                .await?
                .map_err(|r| refusal(r, &session_id))?;
            self.publish(&events);
            tracing::info!(%session_id, %tenant_id, %agent_id, "session resumed");
            return self.get(caller, &session_id).await;
        }

        let prompt = prompt.unwrap_or_default();
        let subject = match subject {
            Some((kind, id)) => Some(self.checked_subject(caller, &kind, &id).await?),
            None => None,
        };
        let row = SessionRow {
            session_id: SessionId::new_v4(),
            tenant_id: tenant_id.clone(),
            agent_id: agent_id.to_owned(),
            title: model::resolve_title(title, prompt)?,
            status: Status::Open,
            created_at_ms: now,
            updated_at_ms: now,
            closed_at_ms: None,
            last_seq: 0,
            prompt_count: 1,
            subject_kind: subject.as_ref().map(|s| s.0.clone()),
            subject_id: subject.as_ref().map(|s| s.1.clone()),
        };
        let mut open_payload =
            json!({"title": row.title, "agent_id": agent_id, "actor": caller.actor().as_str()});
        if let Some((kind, id)) = &subject {
            open_payload["subject"] = json!({"kind": kind, "id": id});
        }
        let open = NewEvent {
            event_type: "session_open",
            payload: open_payload.to_string(),
            trace_id,
        };
        let events = self.store.create(&row, prompt, &[open, reasoning]).await?;
        self.publish(&events);
        tracing::info!(session_id = %row.session_id, %tenant_id, %agent_id, "session opened");
        Ok(SessionRow {
            last_seq: events.last().map_or(0, |e| e.seq),
            ..row
        })
    }

    /// [`SessionService::open`], and the open session this agent worked in
    /// before, when the call moved it to another one (two conversations on
    /// one key: the earlier one's calls now land in this session).
    pub async fn open_noting_takeover(
        &self,
        caller: &Principal,
        request: &OpenRequest<'_>,
    ) -> Result<(SessionRow, Option<SessionId>), ServiceError> {
        let before = self.current(caller).await.ok();
        let row = self.open(caller, request).await?;
        let previous = before
            .map(|b| b.session_id)
            .filter(|id| *id != row.session_id);
        Ok((row, previous))
    }

    /// The gate and the `tool_call` append of one tool call: the pinned or
    /// current open session, the subject check (a misfit is traced as a
    /// `denial` and refused with SUBJECT_REQUIRED), then the event.
    pub async fn begin_call(
        &self,
        caller: &Principal,
        pin: Option<&str>,
        tool: &str,
        arguments: String,
        subject_kind: &str,
    ) -> Result<(SessionRow, EventRow), ServiceError> {
        let pin = pin.map(str::trim).filter(|p| !p.is_empty());
        if pin.is_none()
            && let Some(session) = self.current_cache.get(caller)
        {
            // The remembered current session, which the append checks is
            // still current and open; when it is not (another replica
            // switched or closed it), forget it and read it again.
            match self
                .begin_in(caller, session, tool, &arguments, subject_kind, true)
                .await
            {
                Err(Begin::Stale) => self.current_cache.forget(caller),
                Err(Begin::Refused(err)) => return Err(err),
                Ok(begun) => return Ok(begun),
            }
        }
        let session = match pin {
            Some(pin) => {
                let row = self.get(caller, pin).await.map_err(|_| {
                    ServiceError::precondition(format!(
                        "session_id: no open session {pin} in this tenant"
                    ))
                    .with_domain(NO_ACTIVE_SESSION)
                })?;
                if row.status != Status::Open {
                    return Err(ServiceError::precondition(format!(
                        "session_id: session {pin} is {}; open or resume a session with session_context",
                        row.status
                    ))
                    .with_domain(NO_ACTIVE_SESSION));
                }
                row
            }
            None => {
                let row = self.current(caller).await?;
                self.current_cache.remember(caller, &row);
                row
            }
        };
        match self
            .begin_in(caller, session, tool, &arguments, subject_kind, false)
            .await
        {
            Ok(begun) => Ok(begun),
            Err(Begin::Refused(err)) => Err(err),
            Err(Begin::Stale) => Err(no_active_session()),
        }
    }

    /// [`Self::begin_call`] in `session`: the subject check, then the
    /// `denial` or the `tool_call`. With `cached`, each append holds only
    /// while `session` is still the caller's current one, and
    /// [`Begin::Stale`] says it was not.
    async fn begin_in(
        &self,
        caller: &Principal,
        session: SessionRow,
        tool: &str,
        arguments: &str,
        subject_kind: &str,
        cached: bool,
    ) -> Result<(SessionRow, EventRow), Begin> {
        let current_for = cached.then(|| caller.agent());
        let fits = subject_kind.is_empty()
            || caller.actor() == Actor::System
            || session.subject_kind.as_deref() == Some(subject_kind);
        if !fits {
            // Checked JSON text (`json::object_text`), so it reads back.
            let arguments: serde_json::Value =
                serde_json::from_str(arguments).unwrap_or(serde_json::Value::Null);
            let hint = self.subject_hint(tool, subject_kind, &arguments);
            let payload = json!({
                "tool": tool,
                "arguments": arguments,
                "error": DomainCode::SubjectRequired.as_str(),
                "message": format!(
                    "{tool} writes to a {subject_kind} and is offered only in a session a person opened on one"
                ),
            });
            self.append_as(
                caller,
                &session.session_id,
                EventType::Denial,
                payload.to_string(),
                current_for,
            )
            .await?;
            return Err(Begin::Refused(
                ServiceError::precondition(hint).with_domain(DomainCode::SubjectRequired),
            ));
        }
        let event = self
            .append_as(
                caller,
                &session.session_id,
                EventType::ToolCall,
                // The arguments as they came: `{"name": …, "arguments": …}`
                // printed around their checked text, not parsed and
                // printed again.
                format!("{{\"name\":{},\"arguments\":{arguments}}}", json!(tool)),
                current_for,
            )
            .await?;
        Ok((session, event))
    }

    /// Append an agent's narrated reasoning to its session.
    pub async fn record_reasoning(
        &self,
        caller: &Principal,
        text: &str,
    ) -> Result<EventRow, ServiceError> {
        let text = text.trim();
        if text.is_empty() || text.chars().count() > model::MAX_REASONING_CHARS {
            return Err(ServiceError::invalid(format!(
                "text: 1 to {} characters of reasoning",
                model::MAX_REASONING_CHARS
            )));
        }
        let session_id = match caller.session_id() {
            Some(id) => id.to_owned(),
            None => self.current(caller).await?.session_id.as_str().to_owned(),
        };
        self.append_event(
            caller,
            &session_id,
            EventType::Reasoning,
            json!({"source": "agent", "text": text}).to_string(),
        )
        .await
    }

    /// The caller's current open session, or NO_ACTIVE_SESSION.
    pub async fn current(&self, caller: &Principal) -> Result<SessionRow, ServiceError> {
        let tenant_id = TenantId::of(caller)?;
        let agent_id = agent(caller)?;
        match self.store.current(&tenant_id, agent_id).await? {
            Some(row) if row.status == Status::Open => Ok(row),
            _ => Err(no_active_session()),
        }
    }

    pub async fn get(
        &self,
        caller: &Principal,
        session_id: &str,
    ) -> Result<SessionRow, ServiceError> {
        let tenant_id = TenantId::of(caller)?;
        let session_id = SessionId::parse(session_id)?;
        self.store
            .get(&tenant_id, &session_id)
            .await?
            .ok_or_else(|| not_found(&session_id))
    }

    /// Close a session: the one `session_id` names; else the session the
    /// call runs in (the edge's gate puts the `_meta`-pinned or current
    /// session in the principal); else the caller's current one. A person
    /// may close any session of the tenant, without a session of their own;
    /// an agent only one it opened or is working in.
    pub async fn close(
        &self,
        caller: &Principal,
        session_id: Option<&str>,
    ) -> Result<SessionRow, ServiceError> {
        let tenant_id = TenantId::of(caller)?;
        let named = session_id
            .filter(|s| !s.trim().is_empty())
            .or(caller.session_id());
        let session_id = match named {
            Some(id) => SessionId::parse(id)?,
            None => self.current(caller).await?.session_id,
        };
        let row = self.get(caller, &session_id).await?;
        if caller.actor() == Actor::Agent && row.agent_id != caller.agent() {
            let current = self.store.current(&tenant_id, caller.agent()).await?;
            if current.is_none_or(|c| c.session_id != session_id) {
                return Err(ServiceError::denied(format!(
                    "session_id: an agent closes only a session it opened or joined; {session_id} is \
                     another agent's (a person can close it)"
                ))
                .with_domain(DomainCode::HumanRequired));
            }
        }
        let by = match caller.actor() {
            Actor::Human => "person",
            Actor::Agent => "agent",
            Actor::System => "system",
        };
        let payload = json!({"reason": "closed", "closed_by": by, "agent_id": caller.agent()});
        let closed = self
            .close_as(caller, &tenant_id, &session_id, payload, clock::now_ms())
            .await?;
        let row = self.get(caller, &session_id).await?;
        if !closed && row.status != Status::Closed {
            return Err(ServiceError::precondition(format!(
                "session_id: session {session_id} is {}",
                row.status
            ))
            .with_domain(DomainCode::SessionNotOpen));
        }
        Ok(row)
    }

    /// Archive a closed session.
    pub async fn archive(
        &self,
        caller: &Principal,
        session_id: &str,
    ) -> Result<SessionRow, ServiceError> {
        let tenant_id = TenantId::of(caller)?;
        let session_id = SessionId::parse(session_id)?;
        let changed = self
            .store
            .archive(&tenant_id, &session_id, clock::now_ms())
            .await?;
        let row = self.get(caller, &session_id).await?;
        if !changed && row.status != Status::Archived {
            return Err(ServiceError::precondition(format!(
                "session_id: only a closed session can be archived; {session_id} is {}",
                row.status
            )));
        }
        Ok(row)
    }

    /// A page of the caller's tenant's sessions, newest first, and the token
    /// of the next page (empty on the last one).
    pub async fn list(
        &self,
        caller: &Principal,
        filter: &ListFilter<'_>,
    ) -> Result<(Vec<SessionRow>, String), ServiceError> {
        let tenant_id = TenantId::of(caller)?;
        let status = match filter.status.map(str::trim).filter(|s| !s.is_empty()) {
            None => None,
            Some(s) => Some(
                Status::parse(s)
                    .ok_or_else(|| {
                        ServiceError::invalid("status: must be open, closed or archived")
                    })?
                    .as_str(),
            ),
        };
        let limit = match i64::from(filter.limit) {
            0 => DEFAULT_LIST_LIMIT,
            n if n < 0 => return Err(ServiceError::invalid("limit: must not be negative")),
            n => n.min(MAX_LIST_LIMIT),
        };
        let before = match filter.page_token.trim() {
            "" => None,
            token => Some(parse_page_token(token)?),
        };
        let query = ListQuery {
            tenant_id: tenant_id.as_str(),
            status,
            agent_id: filter.agent_id.map(str::trim).filter(|s| !s.is_empty()),
            subject: match (filter.subject_kind, filter.subject_id) {
                (Some(kind), Some(id)) if !kind.trim().is_empty() => Some((kind.trim(), id.trim())),
                (Some(kind), _) if !kind.trim().is_empty() => {
                    return Err(ServiceError::invalid(
                        "subject_id: required with subject_kind",
                    ));
                }
                _ => None,
            },
            before: before.as_ref().map(|(ms, id)| (*ms, id.as_str())),
            // One more than asked tells whether another page follows.
            limit: limit + 1,
        };
        let mut rows = self.store.list(&query).await?;
        let next = if rows.len() as i64 > limit {
            rows.truncate(limit as usize);
            rows.last()
                .map(|r| format!("{}.{}", r.created_at_ms, r.session_id))
                .unwrap_or_default()
        } else {
            String::new()
        };
        Ok((rows, next))
    }

    pub async fn prompts(
        &self,
        caller: &Principal,
        session_id: &str,
    ) -> Result<Vec<PromptRow>, ServiceError> {
        let row = self.get(caller, session_id).await?;
        Ok(self.store.prompts(&row.session_id).await?)
    }

    /// Append one event with the current trace id, for a caller of the
    /// AppendEvent RPC: any type but the ones this service writes itself.
    pub async fn append(
        &self,
        caller: &Principal,
        session_id: &str,
        event_type: EventType,
        payload: serde_json::Value,
    ) -> Result<EventRow, ServiceError> {
        self.append_text(caller, session_id, event_type, payload.to_string())
            .await
    }

    /// [`Self::append`] of a payload that is already JSON object text
    /// (`json::object_text` checked it).
    pub async fn append_text(
        &self,
        caller: &Principal,
        session_id: &str,
        event_type: EventType,
        payload: String,
    ) -> Result<EventRow, ServiceError> {
        if matches!(
            event_type,
            EventType::SessionClosed | EventType::SessionOpen
        ) {
            return Err(ServiceError::invalid(
                "type: session_open and session_closed are written by the session service itself",
            ));
        }
        self.append_event(caller, session_id, event_type, payload)
            .await
    }

    async fn append_event(
        &self,
        caller: &Principal,
        session_id: &str,
        event_type: EventType,
        payload: String,
    ) -> Result<EventRow, ServiceError> {
        let session_id = SessionId::parse(session_id)?;
        match self
            .append_as(caller, &session_id, event_type, payload, None)
            .await
        {
            Ok(row) => Ok(row),
            Err(Begin::Refused(err)) => Err(err),
            // Only an append that names an agent is stale.
            Err(Begin::Stale) => Err(refusal(Refusal::NotFound, &session_id)),
        }
    }

    /// Append one event with the current trace id. With `current_for`, only
    /// while the session is that agent's current one: any refusal is then
    /// [`Begin::Stale`], for the caller to look the session up again.
    async fn append_as(
        &self,
        caller: &Principal,
        session_id: &SessionId,
        event_type: EventType,
        payload: String,
        current_for: Option<&str>,
    ) -> Result<EventRow, Begin> {
        let tenant_id = TenantId::of(caller)?;
        let name = model::event_name(event_type)
            .ok_or_else(|| ServiceError::invalid("type: an event type is required"))?;
        if payload.len() > model::MAX_PAYLOAD_BYTES {
            return Err(Begin::Refused(ServiceError::invalid(format!(
                "payload: at most {} bytes of JSON",
                model::MAX_PAYLOAD_BYTES
            ))));
        }
        let now = clock::now_ms();
        let grace_ms = i64::try_from(self.config.closed_grace.as_millis()).unwrap_or(i64::MAX);
        let scope = AppendScope {
            tenant_id: &tenant_id,
            session_id,
            now_ms: now,
            closed_since_ms: model::completes_in_flight(event_type).then_some(now - grace_ms),
            current_for,
        };
        let event = NewEvent {
            event_type: name,
            payload,
            trace_id: propagation::current_trace_id(),
        };
        let row = match self.store.append(&scope, &event).await? {
            Ok(row) => row,
            Err(_) if current_for.is_some() => return Err(Begin::Stale),
            Err(r) => return Err(Begin::Refused(refusal(r, session_id))),
        };
        self.notifier.publish(&row.session_id, row.seq);
        Ok(row)
    }

    /// The record of the session's answer, read from its whole trace.
    pub async fn record(
        &self,
        caller: &Principal,
        session_id: &str,
    ) -> Result<(SessionRow, crate::record::Record), ServiceError> {
        let row = self.get(caller, session_id).await?;
        let mut events = Vec::new();
        let mut after = 0;
        loop {
            let page = self
                .store
                .read(&row.session_id, after, MAX_READ_LIMIT)
                .await?;
            let full = page.len() as i64 == MAX_READ_LIMIT;
            after = page.last().map_or(after, |e| e.seq);
            events.extend(page);
            if !full {
                break;
            }
        }
        Ok((row, crate::record::build(&events)))
    }

    /// Events after `after_seq`, and the session's last seq.
    pub async fn read(
        &self,
        caller: &Principal,
        session_id: &str,
        after_seq: i64,
        limit: i32,
    ) -> Result<(Vec<EventRow>, i64), ServiceError> {
        if after_seq < 0 {
            return Err(ServiceError::invalid("after_seq: must not be negative"));
        }
        let limit = match i64::from(limit) {
            0 => DEFAULT_READ_LIMIT,
            n if n < 0 => return Err(ServiceError::invalid("limit: must not be negative")),
            n => n.min(MAX_READ_LIMIT),
        };
        let row = self.get(caller, session_id).await?;
        let events = self.store.read(&row.session_id, after_seq, limit).await?;
        Ok((events, row.last_seq))
    }

    /// Replay events after `after_seq`, then follow new ones. The receiver
    /// ends when the caller drops it or the service shuts down.
    pub async fn tail(
        &self,
        caller: &Principal,
        session_id: &str,
        after_seq: i64,
    ) -> Result<mpsc::Receiver<Result<EventRow, ServiceError>>, ServiceError> {
        if after_seq < 0 {
            return Err(ServiceError::invalid("after_seq: must not be negative"));
        }
        let row = self.get(caller, session_id).await?;
        // Subscribe before the first read, so nothing appended in between is
        // missed.
        let notifications = self.notifier.subscribe();
        let (tx, rx) = mpsc::channel(256);
        let follower = Follower {
            store: self.store.clone(),
            session_id: row.session_id,
            last_sent: after_seq,
            shutdown: self.shutdown.clone(),
            poll_every: if self.store.db().is_postgres() {
                // Bounds the delay if a NOTIFY is lost while the listener reconnects.
                Duration::from_secs(2)
            } else {
                Duration::from_secs(30)
            },
        };
        tokio::spawn(follower.run(notifications, tx));
        Ok(rx)
    }

    fn publish(&self, events: &[EventRow]) {
        if let Some(last) = events.last() {
            self.notifier.publish(&last.session_id, last.seq);
        }
    }
}

/// What `session_context` was asked.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenRequest<'a> {
    pub prompt: &'a str,
    pub title: Option<&'a str>,
    pub session_id: Option<&'a str>,
    pub subject_kind: Option<&'a str>,
    pub subject_id: Option<&'a str>,
}

/// What the session list is filtered by.
#[derive(Clone, Copy, Debug, Default)]
pub struct ListFilter<'a> {
    pub status: Option<&'a str>,
    pub agent_id: Option<&'a str>,
    /// Only sessions opened on this subject.
    pub subject_kind: Option<&'a str>,
    pub subject_id: Option<&'a str>,
    pub limit: i32,
    pub page_token: &'a str,
}

/// A page token is `<created_at_ms>.<session_id>` of the previous page's
/// last session.
fn parse_page_token(token: &str) -> Result<(i64, String), ServiceError> {
    let bad = || ServiceError::invalid("page_token: not a token this service issued");
    let (ms, id) = token.split_once('.').ok_or_else(bad)?;
    let ms = ms.parse::<i64>().map_err(|_| bad())?;
    let id = SessionId::parse(id).map_err(|_| bad())?;
    Ok((ms, id.as_str().to_owned()))
}

/// How long a tail follows after `session_closed`, so results of calls in
/// flight at close (the closing call's own `tool_result` among them) reach
/// live watchers before the stream ends. A reconnect replays everything.
const LINGER_AFTER_CLOSE: Duration = Duration::from_secs(2);

/// How long a tail waits for an unreachable database (a restart, a
/// failover) before it ends its stream; the client then reconnects from its
/// last seq.
const OUTAGE_PATIENCE: Duration = Duration::from_secs(30);
/// How often a waiting tail tries the database again.
const OUTAGE_RETRY: Duration = Duration::from_millis(250);

/// One live tail.
struct Follower {
    store: Store,
    session_id: SessionId,
    last_sent: i64,
    shutdown: CancellationToken,
    poll_every: Duration,
}

impl Follower {
    const PAGE: i64 = 500;

    async fn run(
        mut self,
        mut notifications: broadcast::Receiver<(std::sync::Arc<str>, i64)>,
        tx: mpsc::Sender<Result<EventRow, ServiceError>>,
    ) {
        // Set once `session_closed` was sent: the tail ends at this instant.
        let mut ends_at: Option<tokio::time::Instant> = None;
        // Set while the database is unreachable: the outage ends the tail
        // once it lasted OUTAGE_PATIENCE.
        let mut outage_since: Option<tokio::time::Instant> = None;
        loop {
            // Catch up from the database.
            loop {
                let page = match self
                    .store
                    .read(&self.session_id, self.last_sent, Self::PAGE)
                    .await
                {
                    Ok(page) => {
                        outage_since = None;
                        page
                    }
                    // The database restarts or fails over: a watcher's stream
                    // waits it out, then goes on from its last seq, instead
                    // of ending and making every watcher reconnect at once.
                    Err(err)
                        if ithaca_kit::error::database_unavailable(&err)
                            && outage_since
                                .is_none_or(|since| since.elapsed() < OUTAGE_PATIENCE) =>
                    {
                        if outage_since.is_none() {
                            tracing::warn!(error = %err, session_id = self.session_id.as_str(),
                                "trace tail waits for the database");
                            outage_since = Some(tokio::time::Instant::now());
                        }
                        tokio::select! {
                            _ = self.shutdown.cancelled() => return,
                            _ = tx.closed() => return,
                            _ = tokio::time::sleep(OUTAGE_RETRY) => continue,
                        }
                    }
                    Err(err) => {
                        let _ = tx.send(Err(err.into())).await;
                        return;
                    }
                };
                let full = page.len() as i64 == Self::PAGE;
                for event in page {
                    self.last_sent = event.seq;
                    if ends_at.is_none() && event.event_type == "session_closed" {
                        ends_at = Some(tokio::time::Instant::now() + LINGER_AFTER_CLOSE);
                    }
                    if tx.send(Ok(event)).await.is_err() {
                        return; // the caller hung up
                    }
                }
                if !full {
                    break;
                }
            }
            if ends_at.is_some_and(|at| at <= tokio::time::Instant::now()) {
                return;
            }
            // Wait until there is something newer than what was sent.
            loop {
                let linger = async {
                    match ends_at {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = self.shutdown.cancelled() => return,
                    _ = linger => return,
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(self.poll_every) => break,
                    received = notifications.recv() => match received {
                        Ok((sid, seq)) if *sid == *self.session_id && seq > self.last_sent => break,
                        Ok(_) => continue,
                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                }
            }
        }
    }
}

/// What a call's answer says when it was recorded in a session its caller
/// did not open and did not name: the caller's key joined that session
/// (a person's, opened in the console, or another key's) with an explicit
/// `session_context`, and this call, naming no session, followed the key
/// there. Another conversation on the same key may not know it; the answer
/// tells it where it is and how to leave. `None` for a pinned call and for
/// a session the caller opened itself.
pub fn joined_notice(caller: &Principal, pin: Option<&str>, row: &SessionRow) -> Option<String> {
    let pinned = pin.is_some_and(|p| !p.trim().is_empty());
    if pinned || caller.actor() == Actor::System || row.agent_id == caller.agent() {
        return None;
    }
    let on = match (&row.subject_kind, &row.subject_id) {
        (Some(kind), Some(id)) => format!(" on {kind} {id}"),
        _ => String::new(),
    };
    Some(format!(
        "This call was recorded in session {} (\"{}\"{on}), which this key joined with \
         session_context but did not open. To work in a session of your own, call \
         session_context with your request and no session_id; to stay in this one, pin your \
         requests to it with _meta \"io.ithaca/session_id\".",
        row.session_id, row.title
    ))
}

fn agent(caller: &Principal) -> Result<&str, ServiceError> {
    let agent = caller.agent();
    if agent.is_empty() {
        return Err(ServiceError::invalid("the caller has no agent id"));
    }
    Ok(agent)
}

fn not_found(session_id: &str) -> ServiceError {
    ServiceError::not_found(format!("session_id: no session {session_id}"))
}

fn no_active_session() -> ServiceError {
    ServiceError::precondition(ithaca_proto::NO_ACTIVE_SESSION_MESSAGE)
        .with_domain(NO_ACTIVE_SESSION)
}

fn refusal(refusal: Refusal, session_id: &str) -> ServiceError {
    match refusal {
        Refusal::NotFound => not_found(session_id),
        Refusal::NotOpen(status) => ServiceError::precondition(format!(
            "session_id: session {session_id} is {status} and accepts no new events"
        ))
        .with_domain(DomainCode::SessionNotOpen),
    }
}

/// `text` as one URL path segment: unreserved characters kept, the rest
/// percent-encoded.
fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
