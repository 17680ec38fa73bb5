//! The cluster's side of HTTP (SPEC C2): the internal channel — what one
//! node asks of the node that owns a document, which checks the cluster's
//! secret so only nodes of this cluster reach it (a server alone answers
//! 404) — and [`to_owner`], which relays a call on a document to its owner.

use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use margin_protocol::sync::MAX_MESSAGE_BYTES;
use margin_protocol::ErrorCode;

use super::extract::Caller;
use super::{AppError, AppState};
use crate::cluster::calls;
use crate::link::Terms;
use crate::machine::{relay, relayed};
use crate::sockets;
use crate::sync::command::JoinRefused;
use crate::sync::forward::{ACCOUNT_HEADER, ROLE_HEADER};
use crate::sync::socket;

/// A member's sync socket forwarded by another node: joined here before the
/// upgrade is accepted, so a node that does not own the document answers
/// 409 and the forwarding node looks for the owner again.
pub async fn sync(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, AppError> {
    from_a_node(&state, &headers)?;
    let account = header(&headers, ACCOUNT_HEADER)
        .ok_or_else(|| {
            AppError::bad_request(
                ErrorCode::InvalidForward,
                format!("{ACCOUNT_HEADER} is missing"),
            )
        })?
        .to_owned();
    let role = header(&headers, ROLE_HEADER)
        .and_then(margin_protocol::Role::parse)
        .ok_or_else(|| {
            AppError::bad_request(
                ErrorCode::InvalidForward,
                format!("{ROLE_HEADER} is missing or unknown"),
            )
        })?;
    let joined = match state.hub.join(&id, &account, role).await {
        Ok(joined) => joined,
        Err(JoinRefused::Elsewhere(why)) => {
            return Ok((StatusCode::CONFLICT, why).into_response());
        }
        Err(JoinRefused::Deleted) => return Err(AppError::document_not_found(&id)),
        Err(refused) => return Err(AppError::Unavailable(refused.to_string())),
    };
    Ok(sockets::serving(upgrade, MAX_MESSAGE_BYTES)
        .on_failed_upgrade(|error| tracing::debug!(%error, "forwarded sync upgrade failed"))
        .on_upgrade(move |ws| socket::serve(Box::new(ws), &id, &account, joined)))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// Refuses a call that does not come from a node of this cluster (a
/// server alone has no internal channel: 404).
fn from_a_node(state: &AppState, headers: &HeaderMap) -> Result<(), AppError> {
    let cluster = state.hub.cluster().ok_or_else(no_route)?;
    if !calls::from_a_node(cluster, headers) {
        return Err(AppError::Unauthenticated(
            "the internal channel needs the cluster's secret",
        ));
    }
    Ok(())
}

fn no_route() -> AppError {
    AppError::NotFound {
        code: ErrorCode::RouteNotFound,
        message: "no such route".into(),
    }
}

/// In a cluster, relays a call on a document (`/documents/{id}` and what
/// is below it, but its sync socket, which is forwarded on its own) and
/// on a Planner session (`/sessions/{sid}` and its event stream, which only
/// the node running the session feeds live) to the node that owns the
/// document, once the caller authenticated here; a call from another node,
/// or on a document no other node owns, is served here.
pub async fn to_owner(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let Some(cluster) = state.hub.cluster() else {
        return next.run(request).await;
    };
    if calls::from_a_node(cluster, request.headers()) {
        return next.run(request).await;
    }
    let id = match target_of(request.uri().path()) {
        Some(Target::Document(id)) => id,
        Some(Target::Session(sid)) => match state.hub.store().session(&sid).await {
            Ok(Some(stored)) => stored.document,
            // The route answers for a session that does not exist.
            Ok(None) => return next.run(request).await,
            Err(error) => return AppError::from(error).into_response(),
        },
        None => return next.run(request).await,
    };
    let owner = match cluster.elsewhere(&id).await {
        Ok(Some(owner)) => owner,
        Ok(None) => return next.run(request).await,
        Err(error) => return AppError::from(error).into_response(),
    };
    // Authenticated here; the owner is told who, not shown the token.
    let (mut parts, body) = request.into_parts();
    let account = match Caller::from_request_parts(&mut parts, &state).await {
        Ok(Caller(account)) => account,
        Err(refused) => return refused.into_response(),
    };
    parts.headers.remove(AUTHORIZATION);
    if let Some(uri) = without_token(&parts.uri) {
        parts.uri = uri;
    }
    let Ok(name) = HeaderValue::from_str(&account.name) else {
        return AppError::Internal("an account name that is no header value".into())
            .into_response();
    };
    parts.headers.insert(ACCOUNT_HEADER, name);
    match calls::relay(cluster, &owner, Request::from_parts(parts, body)).await {
        Ok(answer) if is_event_stream(&answer) => {
            // A feed carried from a node that then loses the document ends,
            // and its reader follows it again where it went (SPEC C5).
            let moved = cluster.until_moved(&id, &owner.id);
            answer.map(|body| Body::from_stream(body.into_data_stream().take_until(moved)))
        }
        Ok(answer) => answer,
        Err(error) => AppError::Unavailable(format!("{error}; try again")).into_response(),
    }
}

fn is_event_stream(answer: &Response) -> bool {
    answer
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|kind| kind.as_bytes().starts_with(b"text/event-stream"))
}

/// What a call acts on, for the routes its owner serves.
enum Target {
    Document(String),
    Session(String),
}

fn target_of(path: &str) -> Option<Target> {
    let mut segments = path.split('/').skip(1);
    let kind = segments.next()?;
    let id = segments.next().filter(|id| !id.is_empty())?.to_owned();
    match (kind, segments.next()) {
        ("documents", Some("sync")) => None,
        ("documents", _) => Some(Target::Document(id)),
        ("sessions", _) => Some(Target::Session(id)),
        _ => None,
    }
}

/// `uri` without a `token=` query pair (a browser's event stream signs in
/// with one): the owner is told the account, never shown the token. `None`
/// when it has none.
fn without_token(uri: &axum::http::Uri) -> Option<axum::http::Uri> {
    let query = uri.query()?;
    if !query.split('&').any(|pair| pair.starts_with("token=")) {
        return None;
    }
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.starts_with("token="))
        .collect();
    let path = match kept.is_empty() {
        true => uri.path().to_owned(),
        false => format!("{}?{}", uri.path(), kept.join("&")),
    };
    path.parse().ok()
}

/// A machine's link relayed from the node it linked to (SPEC C2): the
/// machine is known, and its terms come from its `hello` there.
pub async fn machine_link(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, AppError> {
    from_a_node(&state, &headers)?;
    let number = |name: &str| header(&headers, name).and_then(|v| v.parse::<usize>().ok());
    let flag = |name: &str| header(&headers, name).and_then(|v| v.parse::<bool>().ok());
    let terms = match (
        number(relay::RUN_CAPACITY_HEADER),
        flag(relay::RESUMABLE_HEADER),
        flag(relay::PLANNING_HEADER),
    ) {
        (Some(run_capacity), Some(resumable), Some(planning)) => Terms {
            run_capacity,
            resumable,
            planning,
        },
        _ => {
            return Err(AppError::bad_request(
                ErrorCode::InvalidForward,
                "a relayed link names its run capacity, resumability and planning",
            ))
        }
    };
    let machine = state.hub.store().machine(&id).await?;
    if machine.revoked {
        return Err(AppError::CredentialRefused {
            code: ErrorCode::MachineRevoked,
            message: "the machine was revoked".into(),
        });
    }
    let (links, sessions) = (state.links.clone(), state.sessions.clone());
    Ok(
        sockets::serving(upgrade, margin_protocol::link::MAX_FRAME_BYTES)
            .on_upgrade(move |ws| relayed::serve(Box::new(ws), links, sessions, machine, terms)),
    )
}
