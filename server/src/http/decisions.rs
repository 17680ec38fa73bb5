//! People's side of decision cards (SPEC D): list, answer, discard, reopen,
//! add an option or a criterion. Editors and owners act; viewers read.

use axum::extract::{Path, State};
use axum::Json;
use margin_decisions::{act, wire, Action, CardState, DecisionCard};
use margin_protocol::decisions::{
    AddCriterion, AddOption, AnswerBody, DecisionCardView, DecisionList,
};

use super::extract::{Caller, JsonBody};
use super::{documents::visible, AppError, AppState};
use crate::storage::{Account, StorageError};
use crate::tools::card_json;

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

/// Applies a person's action: checked by the card's state machine, stored
/// if nobody changed the card meanwhile, then mirrored to live editors.
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
    let mut stored = match state.hub.store().card(id, card_id).await {
        Ok(stored) => stored,
        Err(StorageError::NotFound(_)) => {
            return Err(AppError::NotFound {
                code: "decision_not_found",
                message: format!("no decision {card_id:?} in this document"),
            })
        }
        Err(other) => return Err(other.into()),
    };
    act(&mut stored.card, &account.name, action).map_err(|e| AppError::Refused {
        code: e.code,
        message: e.message,
    })?;
    state.hub.store().update_card(id, &stored).await?;
    mirror(state, id, &stored.card).await;
    match (stored.card.state, &stored.card.answer) {
        (CardState::Answered, Some(answer)) => state.planners.answered(
            id,
            &stored.card.id,
            wire::answer_body(answer),
            &account.name,
        ),
        // A discarded question no longer waits on anyone; a machine that
        // comes back is told it was withdrawn (SPEC L3).
        (CardState::Discarded, _) => state.planners.discarded(id, &stored.card.id),
        _ => {}
    }
    tracing::info!(
        document = id,
        card = card_id,
        state = stored.card.state.as_str(),
        "decision changed"
    );
    Ok(Json(wire::card_view(&stored.card)))
}

/// Mirrors a changed card into the document. The change is already
/// committed; a failed mirror is logged and repaired by the next change.
async fn mirror(state: &AppState, id: &str, card: &DecisionCard) {
    if let Err(error) = state
        .hub
        .project(id, vec![(card.id.clone(), card_json(card))])
        .await
    {
        tracing::warn!(document = id, card = %card.id, %error, "decision changed but its live mirror failed");
    }
}
