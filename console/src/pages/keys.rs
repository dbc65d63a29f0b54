//! Keys of the person's tenant: listed without secrets, created (the token
//! shown this once), revoked. The auth service decides who may: human keys
//! administer their own tenant's keys, agent keys none.

use super::{Nav, Paged, failed, html};
use crate::Console;
use crate::backends::signed;
use crate::gate::{Change, CsrfForm, CsrfToken, Person};
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use ithaca_proto::auth::v1 as pb;
use serde::Deserialize;
use std::sync::Arc;

/// A key as listed.
pub struct Row {
    pub key_id: String,
    pub label: String,
    pub actor: &'static str,
    pub scopes: String,
    pub env: String,
    pub created_at: String,
    pub last_used_at: String,
    pub revoked_at: String,
    /// The signed-in person's own key.
    pub own: bool,
}

/// The form's `actor` values, and the key holders they stand for.
const ACTORS: [(&str, pb::Actor); 2] = [("agent", pb::Actor::Agent), ("human", pb::Actor::Human)];

/// The key holder a form's `actor` names; `None` for anything else (an
/// unknown value is refused, never taken for an agent).
fn actor_of(value: &str) -> Option<pb::Actor> {
    ACTORS
        .iter()
        .find(|(name, _)| *name == value.trim())
        .map(|(_, actor)| *actor)
}

/// Why an `actor` value was refused: the field, what was sent (a short
/// prefix) and the values allowed.
fn unknown_actor(value: &str) -> String {
    let sent: String = value.chars().take(40).collect();
    let allowed: Vec<&str> = ACTORS.iter().map(|(name, _)| *name).collect();
    format!(
        "actor: {sent:?} is not a key holder; allowed values: {}",
        allowed.join(", ")
    )
}

fn actor_name(actor: i32) -> &'static str {
    if actor == pb::Actor::Human as i32 {
        "human"
    } else {
        "agent"
    }
}

#[derive(Template)]
#[template(path = "keys.html")]
struct KeysPage {
    nav: Nav,
    keys: Vec<Row>,
    page: usize,
    pages: usize,
    all_scopes: Vec<&'static str>,
    /// The token of the key just created, shown this once.
    created_token: String,
    created_label: String,
}

#[derive(Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    page: usize,
}

/// `GET /console/keys`.
pub async fn list(
    State(console): State<Arc<Console>>,
    Query(query): Query<ListQuery>,
    person: Person,
) -> Response {
    render(&console, &person, query.page, String::new(), String::new()).await
}

async fn render(
    console: &Console,
    person: &Person,
    page: usize,
    created_token: String,
    created_label: String,
) -> Response {
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::ListKeysRequest {
            tenant_id: String::new(),
            include_revoked: true,
        },
    );
    let keys = match console.backends.auth().list_keys(request).await {
        Ok(r) => r.into_inner().keys,
        Err(s) => return failed(s.into()),
    };
    let rows: Vec<Row> = keys
        .into_iter()
        .map(|k| Row {
            own: k.key_id == person.principal.key_id(),
            actor: actor_name(k.actor),
            scopes: k.scopes.join(" "),
            key_id: k.key_id,
            label: k.label,
            env: k.env,
            created_at: k.created_at,
            last_used_at: k.last_used_at,
            revoked_at: k.revoked_at,
        })
        .collect();
    let paged = Paged::of(rows, page);
    html(
        StatusCode::OK,
        &KeysPage {
            nav: person.nav("keys"),
            keys: paged.items,
            page: paged.page,
            pages: paged.pages,
            all_scopes: ithaca_proto::scopes::ALL.to_vec(),
            created_token,
            created_label,
        },
    )
}

/// The new-key form. Checkboxes repeat the `scope` field, which a struct's
/// fields cannot take, so it is read from the form's pairs.
#[derive(Deserialize)]
#[serde(from = "Vec<(String, String)>")]
pub struct CreateForm {
    csrf: String,
    label: String,
    actor: String,
    /// Checked scopes (one `scope` field per box), space-separated.
    scopes: String,
}

impl From<Vec<(String, String)>> for CreateForm {
    fn from(pairs: Vec<(String, String)>) -> CreateForm {
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        CreateForm {
            csrf: field("csrf"),
            label: field("label"),
            actor: field("actor"),
            scopes: pairs
                .iter()
                .filter(|(k, _)| k == "scope")
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

impl CsrfToken for CreateForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /console/keys`: create a key and show its token once.
pub async fn create(
    State(console): State<Arc<Console>>,
    Change(person, form): Change<CreateForm>,
) -> Response {
    let Some(actor) = actor_of(&form.actor) else {
        return super::error(StatusCode::BAD_REQUEST, &unknown_actor(&form.actor));
    };
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::CreateKeyRequest {
            tenant_id: String::new(),
            scopes: form.scopes.split_whitespace().map(str::to_owned).collect(),
            actor: actor as i32,
            label: form.label.trim().to_owned(),
            env: String::new(),
        },
    );
    match console.backends.auth().create_key(request).await {
        // The token is in this one response body and nowhere else: not in a
        // URL, a cookie or a log.
        Ok(r) => {
            let created = r.into_inner();
            let label = created.key.map(|k| k.label).unwrap_or_default();
            render(&console, &person, 1, created.token, label).await
        }
        Err(s) => failed(s.into()),
    }
}

/// `POST /console/keys/{id}/revoke`.
pub async fn revoke(
    State(console): State<Arc<Console>>,
    Path(key_id): Path<String>,
    Change(person, _): Change<CsrfForm>,
) -> Response {
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::RevokeKeyRequest {
            tenant_id: String::new(),
            key_id,
        },
    );
    match console.backends.auth().revoke_key(request).await {
        Ok(_) => Redirect::to("/console/keys").into_response(),
        Err(s) => failed(s.into()),
    }
}
