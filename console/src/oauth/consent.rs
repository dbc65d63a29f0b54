//! `/authorize`: the authorization code grant with PKCE S256, and the
//! person's consent.
//!
//! Until the client and its redirect URI are known good, a refusal is a
//! page here (never a redirect: that would be an open redirector); after,
//! it is a redirect to the client with `error`, `state` and `iss` (RFC
//! 9207). A person who is not signed in goes to the console's sign-in and
//! comes back. The consent form carries the sign-in's CSRF token and the
//! tenant it was shown for; the page cannot be framed.

use super::endpoints::oauth_error;
use crate::Console;
use crate::backends::signed;
use askama::Template;
use axum::extract::{Query, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use ithaca_kit::principal::Principal;
use ithaca_proto::auth::v1 as pb;
use serde::Deserialize;
use std::sync::Arc;

/// The parameters of an authorization request.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Params {
    #[serde(default)]
    pub response_type: String,
    #[serde(default)]
    pub client_id: String,
    #[serde(default)]
    pub redirect_uri: String,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub scope: String,
    #[serde(default)]
    pub code_challenge: String,
    #[serde(default)]
    pub code_challenge_method: String,
    #[serde(default)]
    pub resource: String,
}

/// A request whose client and redirect URI are known good.
struct Checked {
    client_name: String,
    /// Scopes asked for (the grantable ones when none were named).
    scopes: Vec<String>,
}

/// Why a checked request is refused, sent back to the client.
struct Refusal {
    error: &'static str,
    description: String,
}

fn refusal(error: &'static str, description: impl Into<String>) -> Refusal {
    Refusal {
        error,
        description: description.into(),
    }
}

#[derive(Template)]
#[template(path = "consent.html")]
struct ConsentPage {
    client_name: String,
    client_id: String,
    redirect_host: String,
    redirect_uri: String,
    tenant_id: String,
    csrf: String,
    state: String,
    code_challenge: String,
    resource: String,
    requested: String,
    scopes: Vec<String>,
}

fn system() -> Principal {
    Principal::system("")
}

impl Console {
    /// The client named by `client_id`: registered, or resolved from its
    /// metadata document (fetched unless fetched lately).
    async fn client(&self, client_id: &str) -> Result<pb::OAuthClient, String> {
        if client_id.is_empty() {
            return Err("client_id: required".to_owned());
        }
        let url_like = client_id.starts_with("https://") || client_id.starts_with("http://");
        if url_like && !self.oauth.fetcher.fresh(client_id) {
            let doc = self.oauth.fetcher.fetch(client_id).await?;
            let request = signed(
                &self.key,
                &system(),
                self.backends.timeout,
                pb::PutMetadataClientRequest {
                    client_id: client_id.to_owned(),
                    client_name: doc.client_name,
                    redirect_uris: doc.redirect_uris,
                },
            );
            return self
                .backends
                .oauth()
                .put_metadata_client(request)
                .await
                .map(|r| r.into_inner())
                .map_err(|s| format!("client_id: {}", s.message()));
        }
        let request = signed(
            &self.key,
            &system(),
            self.backends.timeout,
            pb::GetClientRequest {
                client_id: client_id.to_owned(),
            },
        );
        match self.backends.oauth().get_client(request).await {
            Ok(r) => Ok(r.into_inner()),
            Err(s) if s.code() == tonic::Code::NotFound => Err(
                "client_id: unknown client (register it first, or use the URL of a client metadata document)"
                    .to_owned(),
            ),
            Err(s) => Err(format!("client_id: {}", s.message())),
        }
    }

    /// Check a request: first the client and redirect URI (a failure is a
    /// page, `Err(Ok(..))`), then the rest (a failure goes back to the
    /// client, `Err(Err(..))`).
    async fn check(&self, p: &Params) -> Result<Checked, Result<Response, Refusal>> {
        let client = match self.client(&p.client_id).await {
            Ok(c) => c,
            Err(why) => return Err(Ok(crate::pages::error(StatusCode::BAD_REQUEST, &why))),
        };
        if !client.redirect_uris.contains(&p.redirect_uri) {
            return Err(Ok(crate::pages::error(
                StatusCode::BAD_REQUEST,
                "redirect_uri: missing, or not exactly one of the client's registered redirect URIs",
            )));
        }
        if p.response_type != "code" {
            return Err(Err(refusal(
                "unsupported_response_type",
                "response_type: only code is supported",
            )));
        }
        if p.code_challenge.is_empty() {
            return Err(Err(refusal(
                "invalid_request",
                "code_challenge: PKCE is required",
            )));
        }
        if p.code_challenge_method != "S256" {
            return Err(Err(refusal(
                "invalid_request",
                "code_challenge_method: only S256 is supported",
            )));
        }
        let canonical = self.canonical_resource();
        if p.resource.trim_end_matches('/') != canonical {
            return Err(Err(refusal(
                "invalid_target",
                format!("resource: required, and must be {canonical}"),
            )));
        }
        let grantable = super::grantable_scopes();
        let mut scopes: Vec<String> = Vec::new();
        for s in p.scope.split_whitespace() {
            if !grantable.contains(&s) {
                return Err(Err(refusal(
                    "invalid_scope",
                    format!("scope: {s} cannot be granted to an app"),
                )));
            }
            if !scopes.iter().any(|x| x == s) {
                scopes.push(s.to_owned());
            }
        }
        if scopes.is_empty() {
            scopes = grantable.iter().map(|s| s.to_string()).collect();
        }
        Ok(Checked {
            client_name: client.client_name,
            scopes,
        })
    }

    /// Back to the client with `params`, `state` and `iss`.
    fn back_to_client(&self, p: &Params, params: &[(&str, &str)]) -> Response {
        let Ok(mut url) = url::Url::parse(&p.redirect_uri) else {
            return crate::pages::error(StatusCode::BAD_REQUEST, "redirect_uri: not a URI");
        };
        {
            let mut q = url.query_pairs_mut();
            for (k, v) in params {
                q.append_pair(k, v);
            }
            if !p.state.is_empty() {
                q.append_pair("state", &p.state);
            }
            q.append_pair("iss", self.issuer());
        }
        Redirect::to(url.as_str()).into_response()
    }

    fn refuse_to_client(&self, p: &Params, r: Refusal) -> Response {
        self.back_to_client(
            p,
            &[("error", r.error), ("error_description", &r.description)],
        )
    }
}

/// Pages of the consent flow: no framing, and a policy that lets the form
/// answer go on to the client's redirect URI (any scheme).
fn consent_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// `GET /authorize`.
pub async fn authorize(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    Query(p): Query<Params>,
) -> Response {
    if let Err(refused) = console.check_host(&headers) {
        return consent_headers(refused);
    }
    let checked = match console.check(&p).await {
        Ok(c) => c,
        Err(Ok(page)) => return consent_headers(page),
        Err(Err(r)) => return console.refuse_to_client(&p, r),
    };
    let person = match console.person(&headers).await {
        Ok(person) => person,
        Err(response) if response.status().is_redirection() => {
            let back = format!("/authorize?{}", raw.unwrap_or_default());
            let to: String = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("next", &back)
                .finish();
            return Redirect::to(&format!("/console/sign-in?{to}")).into_response();
        }
        Err(response) => return consent_headers(response),
    };
    let scopes: Vec<String> = checked
        .scopes
        .into_iter()
        .filter(|s| person.has_scope(s))
        .collect();
    if scopes.is_empty() {
        return console.refuse_to_client(
            &p,
            refusal(
                "access_denied",
                "the person's key holds none of the scopes asked for",
            ),
        );
    }
    let redirect_host = url::Url::parse(&p.redirect_uri)
        .ok()
        .map(|u| match u.host_str() {
            Some(h) => h.to_owned(),
            None => format!("{}:", u.scheme()),
        })
        .unwrap_or_default();
    let page = ConsentPage {
        client_name: checked.client_name,
        client_id: p.client_id.clone(),
        redirect_host,
        redirect_uri: p.redirect_uri.clone(),
        tenant_id: person.principal.tenant_id().to_owned(),
        csrf: person.csrf.clone(),
        state: p.state.clone(),
        code_challenge: p.code_challenge.clone(),
        resource: p.resource.clone(),
        requested: p.scope.clone(),
        scopes,
    };
    consent_headers(crate::pages::html(StatusCode::OK, &page))
}

/// `POST /authorize`: the person's decision.
pub async fn decide(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    axum::Form(pairs): axum::Form<Vec<(String, String)>>,
) -> Response {
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let person = match console.person_for_change(&headers, &field("csrf")).await {
        Ok(p) => p,
        Err(refused) => return consent_headers(refused),
    };
    let p = Params {
        response_type: field("response_type"),
        client_id: field("client_id"),
        redirect_uri: field("redirect_uri"),
        state: field("state"),
        scope: field("scope"),
        code_challenge: field("code_challenge"),
        code_challenge_method: field("code_challenge_method"),
        resource: field("resource"),
    };
    let checked = match console.check(&p).await {
        Ok(c) => c,
        Err(Ok(page)) => return consent_headers(page),
        Err(Err(r)) => return console.refuse_to_client(&p, r),
    };
    if field("tenant") != person.principal.tenant_id() {
        return consent_headers(crate::pages::error(
            StatusCode::FORBIDDEN,
            "This consent was shown for another tenant than the one you are signed in to. \
             Start the connection again from the app.",
        ));
    }
    if field("decision") != "allow" {
        return console.refuse_to_client(&p, refusal("access_denied", "the person denied access"));
    }
    let allowed: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "allow")
        .map(|(_, v)| v.clone())
        .collect();
    if let Some(extra) = allowed.iter().find(|s| !checked.scopes.contains(s)) {
        return console.refuse_to_client(
            &p,
            refusal("invalid_scope", format!("scope: {extra} was not asked for")),
        );
    }
    if allowed.is_empty() {
        return console.refuse_to_client(&p, refusal("access_denied", "no scope was allowed"));
    }
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::IssueCodeRequest {
            client_id: p.client_id.clone(),
            redirect_uri: p.redirect_uri.clone(),
            code_challenge: p.code_challenge.clone(),
            resource: console.canonical_resource(),
            scopes: allowed,
        },
    );
    match console.backends.oauth().issue_code(request).await {
        Ok(r) => {
            let code = r.into_inner().code;
            tracing::info!(client_id = %p.client_id, tenant_id = %person.principal.tenant_id(), "oauth consent given");
            let mut response = console.back_to_client(&p, &[("code", &code)]);
            *response.status_mut() = StatusCode::SEE_OTHER;
            response
        }
        Err(status)
            if status.code() == tonic::Code::InvalidArgument
                || status.code() == tonic::Code::PermissionDenied =>
        {
            console.refuse_to_client(&p, refusal("invalid_scope", status.message()))
        }
        Err(status) => {
            tracing::warn!(error = %status.message(), "oauth: issuing a code failed");
            oauth_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "the auth service could not record the consent; retry",
            )
        }
    }
}
