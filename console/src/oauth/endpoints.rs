//! The machine-facing endpoints: metadata (RFC 8414), `/token` (RFC 6749
//! with PKCE), `/register` (RFC 7591) and `/revoke` (RFC 7009). Errors are
//! RFC 6749 JSON (`error`, `error_description`); codes, tokens and
//! verifiers are never logged.

use super::redirect;
use crate::Console;
use crate::backends::signed;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ithaca_kit::principal::Principal;
use ithaca_proto::auth::v1 as pb;
use serde_json::{Value, json};
use std::sync::Arc;

/// The form fields of a request, first value of each name.
struct Fields(Vec<(String, String)>);

impl Fields {
    fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// An RFC 6749 error response.
pub fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    no_store(
        (
            status,
            axum::Json(json!({"error": error, "error_description": description})),
        )
            .into_response(),
    )
}

fn no_store(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    response
}

/// A refusal of the auth service as the token endpoint says it.
fn from_status(status: &tonic::Status) -> Response {
    use tonic::Code;
    let message = status.message();
    match status.code() {
        Code::FailedPrecondition => oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", message),
        Code::InvalidArgument if message.contains("invalid_scope") => {
            oauth_error(StatusCode::BAD_REQUEST, "invalid_scope", message)
        }
        Code::InvalidArgument => oauth_error(StatusCode::BAD_REQUEST, "invalid_request", message),
        Code::NotFound => oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", message),
        Code::Unavailable | Code::DeadlineExceeded => oauth_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "temporarily_unavailable",
            "the auth service is unavailable; retry in a moment",
        ),
        _ => {
            tracing::warn!(code = ?status.code(), error = %message, "oauth: token endpoint call failed");
            oauth_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "something went wrong; it was logged",
            )
        }
    }
}

fn system() -> Principal {
    Principal::system("")
}

/// `GET /.well-known/oauth-authorization-server` (and the OpenID alias).
pub async fn metadata(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    if let Err(refused) = console.check_host(&headers) {
        return refused;
    }
    let base = console.issuer();
    let body = json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "revocation_endpoint": format!("{base}/revoke"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "scopes_supported": super::grantable_scopes(),
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
        "service_documentation": format!("{base}/console"),
    });
    let mut response = axum::Json(body).into_response();
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}

/// `POST /token`: `authorization_code` (with PKCE) or `refresh_token`.
pub async fn token(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    axum::Form(pairs): axum::Form<Vec<(String, String)>>,
) -> Response {
    if let Err(refused) = console.check_host(&headers) {
        return refused;
    }
    let f = Fields(pairs);
    let client_id = f.get("client_id");
    if client_id.is_empty() {
        return oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "client_id: required (public clients authenticate with none)",
        );
    }
    let timeout = console.backends.timeout;
    let reply = match f.get("grant_type") {
        "authorization_code" => {
            let request = signed(
                &console.key,
                &system(),
                timeout,
                pb::ExchangeCodeRequest {
                    code: f.get("code").to_owned(),
                    client_id: client_id.to_owned(),
                    redirect_uri: f.get("redirect_uri").to_owned(),
                    code_verifier: f.get("code_verifier").to_owned(),
                    resource: f.get("resource").to_owned(),
                },
            );
            console.backends.oauth().exchange_code(request).await
        }
        "refresh_token" => {
            let request = signed(
                &console.key,
                &system(),
                timeout,
                pb::RefreshTokenRequest {
                    refresh_token: f.get("refresh_token").to_owned(),
                    client_id: client_id.to_owned(),
                    scopes: f
                        .get("scope")
                        .split_whitespace()
                        .map(str::to_owned)
                        .collect(),
                },
            );
            console.backends.oauth().refresh_token(request).await
        }
        "" => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "grant_type: required",
            );
        }
        _ => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "grant_type: authorization_code or refresh_token",
            );
        }
    };
    match reply {
        Ok(r) => {
            let t = r.into_inner();
            no_store(
                axum::Json(json!({
                    "access_token": t.access_token,
                    "token_type": "Bearer",
                    "expires_in": t.expires_in,
                    "refresh_token": t.refresh_token,
                    "scope": t.scope,
                }))
                .into_response(),
            )
        }
        Err(status) => from_status(&status),
    }
}

/// `POST /register`: dynamic client registration (public clients only).
pub async fn register(
    State(console): State<Arc<Console>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Err(refused) = console.check_host(&headers) {
        return refused;
    }
    let bad =
        |error: &str, description: &str| oauth_error(StatusCode::BAD_REQUEST, error, description);
    let client = extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0.ip());
    if !console.oauth.admit_registration(client) {
        let mut response = oauth_error(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            "too many client registrations lately; retry in a minute",
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
        return response;
    }
    let Ok(meta) = serde_json::from_slice::<Value>(&body) else {
        return bad("invalid_client_metadata", "the body must be a JSON object");
    };
    let uris: Vec<String> = match meta["redirect_uris"].as_array() {
        Some(a) if a.iter().all(Value::is_string) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => {
            return bad(
                "invalid_redirect_uri",
                "redirect_uris: an array of strings is required",
            );
        }
    };
    if uris.is_empty() {
        return bad(
            "invalid_redirect_uri",
            "redirect_uris: at least one is required",
        );
    }
    for uri in &uris {
        if let Err(why) = redirect::check(uri) {
            return bad("invalid_redirect_uri", &why);
        }
    }
    if let Some(method) = meta["token_endpoint_auth_method"].as_str()
        && method != "none"
    {
        return bad(
            "invalid_client_metadata",
            &format!("token_endpoint_auth_method: {method:?} is not supported; use none (PKCE)"),
        );
    }
    let name = meta["client_name"].as_str().unwrap_or_default();
    let request = signed(
        &console.key,
        &system(),
        console.backends.timeout,
        pb::RegisterClientRequest {
            client_name: name.to_owned(),
            redirect_uris: uris,
        },
    );
    match console.backends.oauth().register_client(request).await {
        Ok(r) => {
            let c = r.into_inner();
            let issued = ithaca_kit::clock::now_ms() / 1000;
            let body = json!({
                "client_id": c.client_id,
                "client_id_issued_at": issued,
                "client_name": c.client_name,
                "redirect_uris": c.redirect_uris,
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            });
            no_store((StatusCode::CREATED, axum::Json(body)).into_response())
        }
        Err(status) if status.code() == tonic::Code::InvalidArgument => {
            bad("invalid_client_metadata", status.message())
        }
        Err(status) => from_status(&status),
    }
}

/// `POST /revoke` (RFC 7009): always 200 for a well-formed request, known
/// token or not.
pub async fn revoke(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    axum::Form(pairs): axum::Form<Vec<(String, String)>>,
) -> Response {
    if let Err(refused) = console.check_host(&headers) {
        return refused;
    }
    let f = Fields(pairs);
    if f.get("token").is_empty() {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "token: required",
        );
    }
    let request = signed(
        &console.key,
        &system(),
        console.backends.timeout,
        pb::RevokeTokenRequest {
            token: f.get("token").to_owned(),
            client_id: f.get("client_id").to_owned(),
        },
    );
    match console.backends.oauth().revoke_token(request).await {
        Ok(_) => no_store(StatusCode::OK.into_response()),
        Err(status) => from_status(&status),
    }
}
