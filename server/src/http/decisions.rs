//! People's side of decision cards (SPEC D): list, answer, discard, reopen,
//! add an option or a criterion. Editors and owners act; viewers read.

use axum::extract::{Path, State};
use axum::Json;
use margin_decisions::{wire, Action};
use margin_protocol::decisions::{
    AddCriterion, AddOption, AnswerBody, DecisionCardView, DecisionList,
};

use super::extract::{Caller, JsonBody};
use super::{documents::visible, AppError, AppState};
use crate::cards::{self, CardError};
use crate::storage::Account;

pub async fn list(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path(id): Path<String>,
) -> Result<Json<DecisionList>, AppError> {
    visible(&state, &account, &id).await?;
    let cards = state.hub.store().cards(&id).await?;
    Ok(Json(DecisionList {
        decisions: cards.iter().map(|s| wire::card_view(&s.card)).collect(),
    }))
}

pub async fn answer(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path((id, card)): Path<(String, String)>,
    JsonBody(body): JsonBody<AnswerBody>,
) -> Result<Json<DecisionCardView>, AppError> {
    change(
        &state,
        &account,
        &id,
        &card,
        Action::Answer(wire::answer(body)),
    )
    .await
}

pub async fn discard(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path((id, card)): Path<(String, String)>,
) -> Result<Json<DecisionCardView>, AppError> {
    change(&state, &account, &id, &card, Action::Discard).await
}

pub async fn reopen(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path((id, card)): Path<(String, String)>,
) -> Result<Json<DecisionCardView>, AppError> {
    change(&state, &account, &id, &card, Action::Reopen).await
}

pub async fn add_option(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path((id, card)): Path<(String, String)>,
    JsonBody(body): JsonBody<AddOption>,
) -> Result<Json<DecisionCardView>, AppError> {
    change(&state, &account, &id, &card, Action::AddOption(body.label)).await
}

pub async fn add_criterion(
    State(state): State<AppState>,
    Caller(account): Caller,
    Path((id, card)): Path<(String, String)>,
    JsonBody(body): JsonBody<AddCriterion>,
) -> Result<Json<DecisionCardView>, AppError> {
    change(
        &state,
        &account,
        &id,
        &card,
        Action::AddCriterion(body.text),
    )
    .await
}

/// Applies a person's action (`cards::change`: checked, stored, mirrored
/// to live editors, told to the Planner session that asked it).
async fn change(
    state: &AppState,
    account: &Account,
    id: &str,
    card_id: &str,
    action: Action,
) -> Result<Json<DecisionCardView>, AppError> {
    let document = visible(state, account, id).await?;
    if !document.role.can_edit() {
        return Err(AppError::Forbidden(
            "viewers cannot act on decisions".into(),
        ));
    }
    if document.archived {
        return Err(AppError::archived());
    }
    let stored = cards::change(&state.hub, &state.sessions, account, id, card_id, action)
        .await
        .map_err(|error| match error {
            CardError::NotFound(card) => AppError::NotFound {
                code: "decision_not_found",
                message: format!("no decision {card:?} in this document"),
            },
            CardError::Refused { code, message } => AppError::Refused { code, message },
            CardError::Unavailable(why) => AppError::Unavailable(why),
        })?;
    tracing::info!(
        document = id,
        card = card_id,
        state = stored.card.state.as_str(),
        "decision changed"
    );
    Ok(Json(wire::card_view(&stored.card)))
}
