//! A document's Chat (SPEC T1): members post, `@planner` calls the Planner.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use margin_decisions::check_text;
use margin_planner::reply::mentions_planner;
use margin_protocol::chat::{ChatKind, ChatList, ChatMessageView, PostChat, MAX_CHAT_BYTES};
use margin_protocol::ErrorCode;
use serde::Deserialize;

use super::documents::visible;
use super::extract::{Caller, JsonBody};
use super::{AppError, AppState};

/// Most lines one `GET` returns.
const PAGE: i64 = 200;

pub async fn post(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<PostChat>,
) -> Result<(StatusCode, Json<ChatMessageView>), AppError> {
    let invoke = mentions_planner(&body.text);
    post_message(&state, &account, &id, &body.text, invoke).await
}

/// Posts `text` to the document's Chat as `account`; with `invoke`, it
/// also reaches the Planner, starting or steering a turn (SPEC T1).
pub(super) async fn post_message(
    state: &AppState,
    account: &crate::storage::Account,
    id: &str,
    text: &str,
    invoke: bool,
) -> Result<(StatusCode, Json<ChatMessageView>), AppError> {
    let document = visible(state, account, id).await?;
    if !document.role.can_edit() {
        return Err(AppError::Forbidden(
            "viewers read Chat but do not post".into(),
        ));
    }
    // An archived document's Chat is read-only, so `@planner` starts no
    // turn there either (SPEC P3).
    if document.archived {
        return Err(AppError::archived());
    }
    check_text("message", text, MAX_CHAT_BYTES, true)
        .map_err(|m| AppError::bad_request(ErrorCode::InvalidMessage, m))?;
    let message = state
        .hub
        .append_chat(id, &account.name, ChatKind::Member, text)
        .await?;
    if invoke {
        let owner = state.hub.store().document_owner(id).await?;
        state.sessions.called(id, &owner, message.clone()).await?;
    }
    Ok((StatusCode::CREATED, Json(message)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatQuery {
    after: Option<i64>,
}

pub async fn list(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    query: Result<Query<ChatQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ChatList>, AppError> {
    let Query(query) =
        query.map_err(|e| AppError::bad_request(ErrorCode::InvalidQuery, e.body_text()))?;
    visible(&state, &account, &id).await?;
    let messages = state
        .hub
        .store()
        .chat(&id, query.after.unwrap_or(0), PAGE)
        .await?;
    Ok(Json(ChatList { messages }))
}
