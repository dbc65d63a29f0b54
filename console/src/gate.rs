//! Who a console request is, and what it may do: sign-in with a human key,
//! sign-out, the Host check (DNS rebinding), the cross-origin refusal and the
//! CSRF token of every state-changing form.
//!
//! Handlers receive the person as an extractor: [`Person`] for a page,
//! [`Change`] for a state-changing form (the person and the form, its CSRF
//! token checked). Either one's rejection is the finished refusal (the
//! redirect to sign in, the Host, origin or CSRF refusal, the page saying
//! auth is unavailable), so a handler starts from a person it may serve.

use crate::Console;
use crate::cookie::{self, Claims, Sealer};
use crate::view::{self, Nav};
use askama::Template;
use axum::extract::{Form, FromRef, FromRequest, FromRequestParts, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use ithaca_edge::auth::{AuthFailure, CheckFailure};
use ithaca_kit::principal::{Actor, Principal};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// A signed-in person, re-verified for this request.
#[derive(Clone, Debug)]
pub struct Person {
    pub principal: Principal,
    /// This sign-in's CSRF token, for the forms of the page.
    pub csrf: String,
    claims: Claims,
}

impl Person {
    /// The navigation bar's view of this person.
    pub fn nav(&self, active: &'static str) -> Nav {
        Nav {
            key_id: self.principal.key_id().to_owned(),
            tenant_id: self.principal.tenant_id().to_owned(),
            csrf: self.csrf.clone(),
            active,
        }
    }

    pub fn has_scope(&self, scope: &str) -> bool {
        self.principal.has_scope(scope)
    }
}

/// A page's signed-in person: extracting one is [`Console::person`], and its
/// refusal is the response that call gives.
impl<S> FromRequestParts<S> for Person
where
    Arc<Console>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Person, Response> {
        Arc::<Console>::from_ref(state).person(&parts.headers).await
    }
}

/// A state-changing form and the person who sent it, checked by
/// [`Console::person_for_change`]: same origin, signed in, the form's CSRF
/// token this sign-in's. It reads the body, so it is a handler's last
/// argument.
pub struct Change<F>(pub Person, pub F);

/// A form that carries the CSRF token of the page it was sent from.
pub trait CsrfToken {
    fn csrf(&self) -> &str;
}

impl<S, F> FromRequest<S> for Change<F>
where
    Arc<Console>: FromRef<S>,
    S: Send + Sync,
    F: CsrfToken + DeserializeOwned + Send + Sync,
{
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Change<F>, Response> {
        // The body is parsed before the person is asked for, as when
        // handlers took the form themselves: a malformed form gets axum's
        // refusal whoever sends it.
        let headers = request.headers().clone();
        let Form(form) = Form::<F>::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let person = Arc::<Console>::from_ref(state)
            .person_for_change(&headers, form.csrf())
            .await?;
        Ok(Change(person, form))
    }
}

impl Console {
    /// The person a request comes from, or the response that sends the
    /// browser to sign in (the cookie is missing, expired or forged, its
    /// sign-in ended, or its key was revoked: auth is asked on every
    /// request).
    pub async fn person(&self, headers: &HeaderMap) -> Result<Person, Response> {
        self.check_host(headers)?;
        let claims = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|h| cookie::find(h, cookie::NAME))
            .and_then(|value| self.sealer.open(value, now_secs()))
            .ok_or_else(|| to_sign_in(None))?;
        match self.verify_sign_in(&claims.token, &claims.sign_in).await {
            Ok(principal) if principal.actor() == Actor::Human => Ok(Person {
                csrf: self.sealer.csrf(&claims),
                principal,
                claims,
            }),
            Ok(_) | Err(AuthFailure::Invalid | AuthFailure::Missing | AuthFailure::Token(_)) => {
                Err(self.clear_cookie(to_sign_in(Some("ended"))))
            }
            Err(AuthFailure::Unavailable(why)) => {
                tracing::warn!(error = %why, "console: authentication unavailable");
                Err(view::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The auth service is unavailable; retry in a moment.",
                ))
            }
        }
    }

    /// The person of a state-changing request: also refuses cross-origin
    /// requests and a missing or wrong CSRF token.
    pub async fn person_for_change(
        &self,
        headers: &HeaderMap,
        csrf: &str,
    ) -> Result<Person, Response> {
        self.check_same_origin(headers)?;
        let person = self.person(headers).await?;
        if !self.sealer.csrf_ok(&person.claims, csrf) {
            return Err(view::error(
                StatusCode::FORBIDDEN,
                "This form is stale or was sent from another site (CSRF token missing or wrong). \
                 Reload the page and try again.",
            ));
        }
        Ok(person)
    }

    /// DNS-rebinding defence, the edge's rule: `Host` names loopback or the
    /// public URL's host.
    pub(crate) fn check_host(&self, headers: &HeaderMap) -> Result<(), Response> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if ithaca_edge::front::host_allowed(&self.public_host, host) {
            Ok(())
        } else {
            Err(view::error(StatusCode::FORBIDDEN, "host not allowed"))
        }
    }

    /// A POST must come from a page of this origin: `Sec-Fetch-Site`, when
    /// the browser sends it, must not be cross-site or cross-origin, and an
    /// `Origin` must be this host.
    fn check_same_origin(&self, headers: &HeaderMap) -> Result<(), Response> {
        self.check_host(headers)?;
        let refuse = || {
            Err(view::error(
                StatusCode::FORBIDDEN,
                "Cross-site requests are refused: use the console's own pages.",
            ))
        };
        let fetch_site = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if matches!(fetch_site, "cross-site" | "same-site") {
            return refuse();
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("")
                .to_ascii_lowercase();
            let same = origin
                .to_str()
                .ok()
                .and_then(ithaca_edge::front::host_of)
                .is_some_and(|h| h == host);
            if !same {
                return refuse();
            }
        }
        Ok(())
    }

    fn cookie_header(&self, value: &str, max_age: i64) -> HeaderValue {
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        let text = format!(
            "{}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}",
            cookie::NAME
        );
        HeaderValue::from_str(&text).expect("a sealed cookie is base64url")
    }

    fn clear_cookie(&self, mut response: Response) -> Response {
        response
            .headers_mut()
            .append(header::SET_COOKIE, self.cookie_header("", 0));
        response
    }
}

fn now_secs() -> i64 {
    ithaca_kit::clock::now_ms() / 1000
}

fn to_sign_in(reason: Option<&str>) -> Response {
    match reason {
        Some(r) => Redirect::to(&format!("/console/sign-in?reason={r}")).into_response(),
        None => Redirect::to("/console/sign-in").into_response(),
    }
}

/// `GET /console/`: the sessions list, or (the extractor's refusal) the
/// sign-in page.
pub async fn home(_: Person) -> Response {
    Redirect::to("/console/sessions").into_response()
}

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage {
    message: String,
    error: String,
    /// Where to go once signed in (an authorization request), if anywhere.
    next: String,
}

#[derive(Deserialize)]
pub struct SignInQuery {
    reason: Option<String>,
    next: Option<String>,
}

/// Where a sign-in may continue to: only an authorization request of this
/// origin (never another site: that would be an open redirector).
fn safe_next(next: &str) -> Option<&str> {
    (next.starts_with("/authorize?") && !next.contains(['\\', '\r', '\n'])).then_some(next)
}

/// `GET /console/sign-in`.
pub async fn sign_in_page(Query(query): Query<SignInQuery>) -> Response {
    let next = query
        .next
        .as_deref()
        .and_then(safe_next)
        .unwrap_or_default();
    let message = match query.reason.as_deref() {
        Some("ended") => "Your console session ended: the key was revoked or expired.",
        Some("signed-out") => "You are signed out.",
        _ if !next.is_empty() => "Sign in to decide whether to connect an app.",
        _ => "",
    };
    view::html(
        StatusCode::OK,
        &SignInPage {
            message: message.to_owned(),
            error: String::new(),
            next: next.to_owned(),
        },
    )
}

#[derive(Deserialize)]
pub struct SignInForm {
    key: String,
    #[serde(default)]
    next: String,
}

/// `POST /console/sign-in`: exchange a human key for the sealed cookie.
/// Failed sign-ins are throttled per key id and client address with the
/// edge's doors (`ithaca_edge::throttle`): 429 with `Retry-After`.
pub async fn sign_in(
    State(console): State<Arc<Console>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    axum::Form(form): axum::Form<SignInForm>,
) -> Response {
    if let Err(refused) = console.check_same_origin(&headers) {
        return refused;
    }
    let refuse = |status, error: &str| {
        view::html(
            status,
            &SignInPage {
                message: String::new(),
                error: error.to_owned(),
                next: safe_next(&form.next).unwrap_or_default().to_owned(),
            },
        )
    };
    let token = form.key.trim();
    let client = extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0.ip());
    let principal = match console.authenticator.check(token, client).await {
        Ok(p) => p,
        Err(CheckFailure::Throttled(wait)) => {
            let secs = wait.as_secs().max(1);
            let mut response = refuse(
                StatusCode::TOO_MANY_REQUESTS,
                &format!(
                    "Too many failed sign-ins with this key or from this address; \
                     try again in {secs} s."
                ),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            return response;
        }
        Err(CheckFailure::Auth(AuthFailure::Unavailable(why))) => {
            tracing::warn!(error = %why, "console: authentication unavailable");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "The auth service is unavailable; retry in a moment.",
            );
        }
        Err(_) => {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "That key is not valid: check it was copied whole, and that it was not revoked.",
            );
        }
    };
    if principal.actor() != Actor::Human {
        return refuse(
            StatusCode::FORBIDDEN,
            "This is an agent key. Agents connect over MCP; the console is for people. \
             Sign in with a human key (an administrator creates one with \
             `ithaca keys create --actor human`).",
        );
    }
    let ttl = crate::SIGN_IN_TTL.as_secs() as i64;
    let sign_in = match console.open_sign_in(&principal, ttl).await {
        Ok(id) => id,
        Err(status) => {
            tracing::warn!(error = %status.message(), "console: opening a sign-in failed");
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "The auth service could not record the sign-in; retry in a moment.",
            );
        }
    };
    let claims = Sealer::claims(token, &sign_in, now_secs(), ttl);
    let value = console.sealer.seal(&claims);
    tracing::info!(key_id = %principal.key_id(), tenant_id = %principal.tenant_id(), "console sign-in");
    let to = safe_next(&form.next).unwrap_or("/console/sessions");
    let mut response = Redirect::to(to).into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, console.cookie_header(&value, ttl));
    response
}

/// A form with nothing but its CSRF token (sign-out, close, revoke).
#[derive(Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    pub csrf: String,
}

impl CsrfToken for CsrfForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /console/sign-out`: end the sign-in at the auth service, so the
/// cookie works nowhere any more (a copy of it included), then drop it.
pub async fn sign_out(
    State(console): State<Arc<Console>>,
    Change(person, _): Change<CsrfForm>,
) -> Response {
    if let Err(status) = console
        .end_sign_in(&person.principal, &person.claims.sign_in)
        .await
    {
        tracing::warn!(error = %status.message(), "console: ending a sign-in failed");
        return view::error(
            StatusCode::SERVICE_UNAVAILABLE,
            "Signing out failed: the auth service did not answer, so this sign-in is still              open. Retry in a moment.",
        );
    }
    tracing::info!(key_id = %person.principal.key_id(), tenant_id = %person.principal.tenant_id(), "console sign-out");
    console.clear_cookie(to_sign_in(Some("signed-out")))
}
