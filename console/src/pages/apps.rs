//! Connected apps: the OAuth grants of the person's tenant (client, scopes,
//! created, last used), each revocable. The auth service decides who may:
//! a person of the tenant; another tenant's grant is not found.

use super::{Nav, failed, html};
use crate::Console;
use crate::backends::signed;
use crate::gate::{Change, CsrfForm, Person};
use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use ithaca_proto::auth::v1 as pb;
use std::sync::Arc;

/// A grant as listed.
pub struct Row {
    pub grant_id: String,
    pub client_id: String,
    pub client_name: String,
    pub scopes: String,
    pub created_at: String,
    pub last_used_at: String,
    pub revoked_at: String,
}

#[derive(Template)]
#[template(path = "apps.html")]
struct AppsPage {
    nav: Nav,
    apps: Vec<Row>,
}

/// `GET /console/apps`.
pub async fn list(State(console): State<Arc<Console>>, person: Person) -> Response {
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::ListGrantsRequest {
            tenant_id: String::new(),
            include_revoked: true,
        },
    );
    let grants = match console.backends.oauth().list_grants(request).await {
        Ok(r) => r.into_inner().grants,
        Err(s) => return failed(s.into()),
    };
    let apps = grants
        .into_iter()
        .map(|g| Row {
            scopes: g.scopes.join(" "),
            grant_id: g.grant_id,
            client_id: g.client_id,
            client_name: g.client_name,
            created_at: g.created_at,
            last_used_at: g.last_used_at,
            revoked_at: g.revoked_at,
        })
        .collect();
    html(
        StatusCode::OK,
        &AppsPage {
            nav: person.nav("apps"),
            apps,
        },
    )
}

/// `POST /console/apps/{id}/revoke`.
pub async fn revoke(
    State(console): State<Arc<Console>>,
    Path(grant_id): Path<String>,
    Change(person, _): Change<CsrfForm>,
) -> Response {
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::RevokeGrantRequest { grant_id },
    );
    match console.backends.oauth().revoke_grant(request).await {
        Ok(_) => Redirect::to("/console/apps").into_response(),
        Err(s) => failed(s.into()),
    }
}
