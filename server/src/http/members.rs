//! Sharing a document (SPEC A1): the member list any member reads, and
//! the owner adding a member, changing a member's role and removing a
//! member — which the member's open sync sockets feel at once
//! (`Hub::access_changed`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use margin_protocol::ErrorCode;
use margin_protocol::{AddMember, MemberInfo, MemberList};

use super::documents::{owned, visible};
use super::extract::{Caller, JsonBody};
use super::{AppError, AppState};
use crate::auth::valid_account_name;
use crate::storage::StorageError;

/// `GET /documents/{id}/members`: who the document is shared with, the
/// owner first. Every member may ask; anyone else gets the usual 404.
pub async fn list(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<Json<MemberList>, AppError> {
    visible(&state, &account, &id).await?;
    let members = state.hub.store().members(&id).await?;
    Ok(Json(MemberList {
        members: members
            .into_iter()
            .map(|(account, role)| MemberInfo { account, role })
            .collect(),
    }))
}

/// `POST /documents/{id}/members`: the owner shares the document, or
/// changes the role of someone it is shared with.
pub async fn add(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<AddMember>,
) -> Result<Json<MemberInfo>, AppError> {
    owned(&state, &account, &id, "add members or change their roles").await?;
    let member = match state.hub.store().account_by_name(&body.account).await {
        Ok(member) => member,
        Err(StorageError::NotFound(_)) => {
            return Err(AppError::bad_request(
                ErrorCode::UnknownAccount,
                format!("no account named {:?}", body.account),
            ))
        }
        Err(other) => return Err(other.into()),
    };
    state
        .hub
        .store()
        .set_member(&id, &member, body.role)
        .await?;
    // Their open sockets hold the old role: they reconnect with this one.
    state
        .hub
        .access_changed(&id, &member.name, Some(body.role))
        .await;
    tracing::info!(document = %id, member = %member.name, role = body.role.as_str(), "member set");
    Ok(Json(MemberInfo {
        account: member.name,
        role: body.role,
    }))
}

/// `DELETE /documents/{id}/members/{account}`: the owner takes the
/// document away from a member. The owner cannot be removed (409).
pub async fn remove(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path((id, member)): Path<(String, String)>,
) -> Result<StatusCode, AppError> {
    owned(&state, &account, &id, "remove members").await?;
    // A name no account can have is nobody to look up.
    if valid_account_name(&member).is_err() {
        return Err(AppError::member_not_found(&member));
    }
    match state.hub.store().remove_member(&id, &member).await {
        Ok(()) => {}
        Err(StorageError::NotFound("member")) => return Err(AppError::member_not_found(&member)),
        Err(other) => return Err(other.into()),
    }
    state.hub.access_changed(&id, &member, None).await;
    tracing::info!(document = %id, %member, "member removed");
    Ok(StatusCode::NO_CONTENT)
}
