//! A document's Planner as people see and steer it: connection, turn, run
//! cards (SPEC R1), Stop and reset (P3, L4), and `invoke_planner` (T1).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use margin_protocol::ErrorCode;

use margin_planner::ReleaseTrigger;
use margin_protocol::chat::{ChatMessageView, PostChat};

use super::chat::post_message;
use super::documents::visible;
use super::extract::{Caller, JsonBody};
use super::{AppError, AppState};
use crate::sessions::ResumeError;

/// `GET /documents/{id}/planner`: what the Planner is doing (SPEC B1a) —
/// with no session, whether a machine is linked to start one — its turn,
/// and its run cards with their true age (SPEC R1).
pub async fn planner(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<Json<margin_protocol::link::PlannerView>, AppError> {
    visible(&state, &account, &id).await?;
    let owner = state.hub.store().document_owner(&id).await?;
    Ok(Json(state.sessions.view(&id, &owner)))
}

/// `POST /documents/{id}/planner/resume`: withdraws a Stop the machine has
/// not confirmed (SPEC L4); refused while the machine is away.
pub async fn resume(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, AppError> {
    may_steer(&state, &account, &id, "resume").await?;
    match state.sessions.resume_work(&id).await {
        Ok(()) => Ok(StatusCode::ACCEPTED),
        Err(refused) => {
            let code = match refused {
                ResumeError::NoSession => ErrorCode::NoPlannerSession,
                ResumeError::NoStop => ErrorCode::NoStopPending,
                ResumeError::Away => ErrorCode::PlannerDisconnected,
                ResumeError::Storage(error) => return Err(error.into()),
            };
            Err(AppError::PlannerRefused {
                code,
                message: refused.to_string(),
            })
        }
    }
}

/// `POST /documents/{id}/planner/stop`: asks the Planner to stop (SPEC P3).
pub async fn stop(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, AppError> {
    may_steer(&state, &account, &id, "stop").await?;
    if state.sessions.stop(&id).await? {
        Ok(StatusCode::ACCEPTED)
    } else {
        Err(AppError::Conflict(
            "the document has no Planner session to stop".into(),
        ))
    }
}

/// `POST /documents/{id}/planner/reset`: ends the document's Planner
/// session, in use or not — its questions are withdrawn and its machine
/// told to stop (SPEC P3); the next `@planner` starts a new session.
pub async fn reset(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, AppError> {
    may_steer(&state, &account, &id, "reset").await?;
    if state
        .sessions
        .reset(&id, ReleaseTrigger::PlannerReset)
        .await?
    {
        tracing::info!(document = %id, account = %account.name, "planner reset");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(AppError::PlannerRefused {
            code: ErrorCode::NoPlannerSession,
            message: "the document has no Planner session to reset".into(),
        })
    }
}

/// `POST /documents/{id}/planner/invoke` (`invoke_planner`): posts the
/// message to Chat as the caller and hands it to the Planner whether or not
/// it mentions `@planner` (SPEC T1) — for applications that call the Planner
/// on a person's behalf. Answers as `POST /documents/{id}/chat` does.
pub async fn invoke(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<PostChat>,
) -> Result<(StatusCode, Json<ChatMessageView>), AppError> {
    post_message(&state, &account, &id, &body.text, true).await
}

/// Stop and Resume are for the document's editors and owner; a viewer is
/// refused, a non-member does not learn the document exists.
async fn may_steer(
    state: &AppState,
    account: &crate::storage::Account,
    id: &str,
    act: &str,
) -> Result<(), AppError> {
    let document = visible(state, account, id).await?;
    if document.role.can_edit() {
        Ok(())
    } else {
        Err(AppError::Forbidden(format!(
            "viewers cannot {act} the Planner"
        )))
    }
}
