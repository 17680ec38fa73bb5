//! The Planner's document tools over HTTP, for an account's own tooling and
//! scripts: the same calls the machine link carries, acting for the token's
//! account (SPEC A1). A refusal is a 422 whose code is the refusal's, except
//! a write to an archived document: `409 archived`, as for people (SPEC P3).

use axum::extract::{Path, State};
use axum::Json;
use margin_protocol::decisions::{
    EditPlanInput, EditPlanOutput, EncodedRead, OpenDecisionInput, OpenDecisionsInput,
    OpenDecisionsOutput,
};

use super::extract::{Caller, JsonBody};
use super::{AppError, AppState};
use crate::tools::{observed, ToolError, Tools};
use margin_protocol::tools::ToolName;
use margin_protocol::RefusalCode;

impl From<ToolError> for AppError {
    fn from(error: ToolError) -> Self {
        match error {
            ToolError::Refused(refusal) if refusal.code == RefusalCode::Archived => {
                AppError::Archived(refusal.message)
            }
            ToolError::Refused(refusal) => AppError::Tool(refusal),
            ToolError::Internal(detail) => AppError::Internal(detail),
        }
    }
}

/// Answers with a `ReadDocumentOutput`, written straight from the outline.
pub async fn read_document(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<Json<EncodedRead>, AppError> {
    Ok(Json(
        observed(
            ToolName::ReadDocument,
            Tools::new(state.hub).read_document(&account, &id),
        )
        .await?,
    ))
}

pub async fn edit_plan(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    JsonBody(input): JsonBody<EditPlanInput>,
) -> Result<Json<EditPlanOutput>, AppError> {
    Ok(Json(
        observed(
            ToolName::EditPlan,
            Tools::new(state.hub).edit_plan(&account, &id, input, &account.name, None),
        )
        .await?,
    ))
}

pub async fn open_decisions(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    JsonBody(input): JsonBody<OpenDecisionsInput>,
) -> Result<Json<OpenDecisionsOutput>, AppError> {
    Ok(Json(
        observed(
            ToolName::OpenDecisions,
            Tools::new(state.hub).open_decisions(&account, &id, input, None),
        )
        .await?,
    ))
}

pub async fn open_decision(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    JsonBody(input): JsonBody<OpenDecisionInput>,
) -> Result<Json<OpenDecisionsOutput>, AppError> {
    Ok(Json(
        observed(
            ToolName::OpenDecision,
            Tools::new(state.hub).open_decision(&account, &id, input, None),
        )
        .await?,
    ))
}

pub async fn ask(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
    JsonBody(input): JsonBody<OpenDecisionInput>,
) -> Result<Json<OpenDecisionsOutput>, AppError> {
    Ok(Json(
        observed(
            ToolName::Ask,
            Tools::new(state.hub).ask(&account, &id, input, None),
        )
        .await?,
    ))
}
