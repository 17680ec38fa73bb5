//! Document, outline and sync routes; renaming, archiving and deleting
//! (SPEC P3).
//! Members are `http::members`.

use axum::extract::ws::{WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Json;
use margin_decisions::{wire, Outline};
use margin_planner::ReleaseTrigger;
use margin_protocol::documents::MAX_TITLE_BYTES;
use margin_protocol::sync::MAX_MESSAGE_BYTES;
use margin_protocol::ErrorCode;
use margin_protocol::{
    CreateDocument, DocumentInfo, DocumentList, OutlineView, RenameDocument, Role,
};
use serde::Deserialize;

use super::extract::{Caller, JsonBody};
use super::{AppError, AppState};
use crate::sockets;
use crate::storage::{DocumentRow, StorageError};
use crate::sync::command::JoinRefused;
use crate::sync::forward::{self, RouteError, SyncRoute};
use crate::sync::hub::OutlineError;
use crate::sync::{socket, Hub};
use crate::watchers::Bell;

pub async fn create(
    State(state): State<AppState>,
    Caller(account): Caller,
    JsonBody(body): JsonBody<CreateDocument>,
) -> Result<(StatusCode, Json<DocumentInfo>), AppError> {
    let title = validate_title(&body.title)?;
    let row = state.hub.store().create_document(&account, title).await?;
    tracing::info!(document = %row.id, account = %account.name, "document created");
    Ok((StatusCode::CREATED, Json(info(row))))
}

pub async fn list(
    State(state): State<AppState>,
    Caller(account): Caller,
) -> Result<Json<DocumentList>, AppError> {
    let rows = state.hub.store().documents_of(&account).await?;
    Ok(Json(DocumentList {
        documents: rows.into_iter().map(info).collect(),
    }))
}

pub async fn show(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<Json<DocumentInfo>, AppError> {
    Ok(Json(info(visible(&state, &account, &id).await?)))
}

/// `PATCH /documents/{id}`: an owner or editor renames the document. The
/// title is checked as at creation; an archived document keeps its name.
pub async fn rename(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<RenameDocument>,
) -> Result<Json<DocumentInfo>, AppError> {
    let document = visible(&state, &account, &id).await?;
    if !document.role.can_edit() {
        return Err(AppError::Forbidden(
            "viewers cannot rename the document; its owner and editors can".into(),
        ));
    }
    let title = validate_title(&body.title)?;
    match state.hub.store().rename_document(&id, title).await {
        Ok(true) => {}
        Ok(false) => return Err(AppError::archived()),
        Err(StorageError::NotFound(_)) => return Err(AppError::document_not_found(&id)),
        Err(other) => return Err(other.into()),
    }
    state.hub.watchers().ring(&id, Bell::Document);
    tracing::info!(document = %id, account = %account.name, "document renamed");
    Ok(Json(info(DocumentRow {
        title: title.to_owned(),
        ..document
    })))
}

/// `POST /documents/{id}/archive`: the owner makes the document read-only
/// for everyone. Its Planner session ends (SPEC P3).
pub async fn archive(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<Json<DocumentInfo>, AppError> {
    set_archived(&state, &account, &id, true).await
}

/// `POST /documents/{id}/unarchive`: the owner makes it writable again.
pub async fn unarchive(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<Json<DocumentInfo>, AppError> {
    set_archived(&state, &account, &id, false).await
}

/// Records the archive state, then puts it in force: on the loaded
/// document (sync edits and `edit_plan`) and on its Planner. Repeating it is
/// harmless, and finishes what an interrupted attempt started.
async fn set_archived(
    state: &AppState,
    account: &crate::storage::Account,
    id: &str,
    archived: bool,
) -> Result<Json<DocumentInfo>, AppError> {
    let document = owned(state, account, id, "archive or unarchive it").await?;
    let changed = state.hub.store().set_archived(id, archived).await?;
    state.hub.set_archived(id, archived).await;
    if archived {
        state
            .sessions
            .document_closed(id, ReleaseTrigger::DocumentArchived)
            .await?;
    } else {
        state.sessions.document_reopened(id);
    }
    if changed {
        tracing::info!(document = id, archived, account = %account.name, "archive state changed");
    }
    Ok(Json(info(DocumentRow {
        archived,
        ..document
    })))
}

/// `DELETE /documents/{id}`: the owner deletes the document and everything
/// under it. Its sync connections close (4410) and its Planner session ends
/// (SPEC P3); later requests get 404.
pub async fn delete(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, AppError> {
    owned(&state, &account, &id, "delete it").await?;
    match state.hub.store().delete_document(&id).await {
        Ok(()) => {}
        // Deleted meanwhile by another request: the same 404 as after.
        Err(StorageError::NotFound(_)) => return Err(AppError::document_not_found(&id)),
        Err(other) => return Err(other.into()),
    }
    state.hub.deleted(&id).await;
    state
        .sessions
        .document_closed(&id, ReleaseTrigger::DocumentDeleted)
        .await?;
    tracing::info!(document = %id, account = %account.name, "document deleted");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutlineQuery {
    revision: Option<i64>,
}

pub async fn outline(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    query: Result<Query<OutlineQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<OutlineView>, AppError> {
    let Query(query) =
        query.map_err(|e| AppError::bad_request(ErrorCode::InvalidQuery, e.body_text()))?;
    visible(&state, &account, &id).await?;
    let (revision, outline) = match state.hub.outline(&id, query.revision).await {
        Ok(found) => found,
        Err(OutlineError::Storage(StorageError::NotFound("revision"))) => {
            return Err(AppError::NotFound {
                code: ErrorCode::RevisionNotFound,
                message: format!(
                    "document {id:?} has no revision {}",
                    query.revision.unwrap_or_default()
                ),
            })
        }
        Err(OutlineError::Storage(e)) => return Err(e.into()),
        Err(OutlineError::Load(e)) => return Err(AppError::Internal(e.to_string())),
    };
    Ok(Json(view(id, revision, &outline)))
}

pub async fn sync(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, AppError> {
    let document = visible(&state, &account, &id).await?;
    let hub = state.hub.clone();
    Ok(sockets::serving_peers(upgrade, MAX_MESSAGE_BYTES)
        .on_failed_upgrade(|error| tracing::debug!(%error, "sync upgrade failed"))
        // Boxed: see `serve_sync`.
        .on_upgrade(move |ws| {
            serve_sync(Box::new(ws), hub, document.id, account.name, document.role)
        }))
}

/// Serves a member's sync socket here, or — in a cluster, when another
/// node owns the document — on that node through this one (SPEC C2).
///
/// The socket comes boxed and goes on boxed: this future lives as long as
/// the socket, and an async fn keeps room for each argument beside what
/// it moves it into, so a socket passed by value sat in every layer's
/// future.
async fn serve_sync(ws: Box<WebSocket>, hub: Hub, id: String, account: String, role: Role) {
    let routed = match hub.cluster() {
        None => hub.join(&id, &account, role).await.map(SyncRoute::Here),
        // Boxed: routing in a cluster is a large future, and this one
        // lives as long as the socket; inline, every connection's task
        // carried room for it.
        Some(cluster) => Box::pin(forward::route_sync(&hub, cluster, &id, &account, role))
            .await
            .map_err(|error| match error {
                RouteError::Join(refused) => refused,
                RouteError::Unavailable(why) => JoinRefused::Elsewhere(why),
            }),
    };
    match routed {
        Ok(SyncRoute::Here(joined)) => socket::serve(ws, &id, &account, joined).await,
        Ok(SyncRoute::There(upstream, node, cluster)) => {
            let _counted = hub.forwarding();
            // Boxed as routing is: a forwarded socket's future is large.
            Box::pin(forward::pipe(cluster, ws, upstream, id, node)).await;
        }
        Err(refused) => {
            tracing::warn!(document = %id, %refused, "join refused");
            let mut ws = ws;
            let _ = ws.send(socket::refusal(&refused)).await;
        }
    }
}

/// The document if `account` owns it: 404 for those who cannot see it, 403
/// for its other members.
pub(super) async fn owned(
    state: &AppState,
    account: &crate::storage::Account,
    id: &str,
    what: &str,
) -> Result<DocumentRow, AppError> {
    let document = visible(state, account, id).await?;
    if document.role != Role::Owner {
        return Err(AppError::Forbidden(format!(
            "only the document's owner can {what}"
        )));
    }
    Ok(document)
}

/// The document as `account` may see it; 404 whether it is missing or
/// merely not shared, so its existence never leaks.
pub(super) async fn visible(
    state: &AppState,
    account: &crate::storage::Account,
    id: &str,
) -> Result<DocumentRow, AppError> {
    if id.len() > 64 {
        return Err(AppError::document_not_found(id));
    }
    match state.hub.store().document_for(account, id).await {
        Ok(row) => Ok(row),
        Err(StorageError::NotFound(_)) => Err(AppError::document_not_found(id)),
        Err(other) => Err(other.into()),
    }
}

fn validate_title(title: &str) -> Result<&str, AppError> {
    let title = title.trim();
    if title.is_empty() {
        return Err(AppError::bad_request(
            ErrorCode::InvalidTitle,
            "the title is blank",
        ));
    }
    if title.len() > MAX_TITLE_BYTES {
        return Err(AppError::bad_request(
            ErrorCode::InvalidTitle,
            format!(
                "the title is {} bytes; the limit is {MAX_TITLE_BYTES}",
                title.len()
            ),
        ));
    }
    if title.chars().any(char::is_control) {
        return Err(AppError::bad_request(
            ErrorCode::InvalidTitle,
            "the title contains control characters",
        ));
    }
    Ok(title)
}

pub(super) fn info(row: DocumentRow) -> DocumentInfo {
    DocumentInfo {
        id: row.id,
        title: row.title,
        revision: row.revision,
        role: row.role,
        archived: row.archived,
        created_at: row.created_at,
        edited_at: row.edited_at,
        edited_by: row.edited_by,
    }
}

fn view(document: String, revision: i64, outline: &Outline) -> OutlineView {
    OutlineView {
        document,
        revision,
        blocks: wire::blocks(outline),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::future_size::ReturnSize;

    /// A sync socket's task holds `serve_sync` for as long as the socket is
    /// open: thousands at once, mostly idle. Each async fn a socket passed
    /// through by value kept a dead copy of it beside its locals. Boxed,
    /// and split before the serving future is made, it is held once, on
    /// the heap.
    #[test]
    fn a_sync_sockets_future_holds_its_socket_once_and_stays_small() {
        let size = serve_sync.return_size();
        assert!(size <= 1024, "serve_sync's future is {size} bytes");
    }
}
