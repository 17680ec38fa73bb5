//! People's side of decision cards (SPEC D): list, answer, discard, reopen,
//! add an option or a criterion. Editors and owners act; viewers read.

use axum::extract::{Path, State};
use axum::Json;
use margin_decisions::{wire, Action};
use margin_protocol::decisions::{
    AddCriterion, AddOption, AnswerBody, DecisionCardView, DecisionList,
};
use margin_protocol::ErrorCode;

use margin_decisions::CardState;
use margin_planner::{CardId, RequestId};

use super::extract::{Caller, JsonBody};
use super::{documents::visible, AppError, AppState};
use crate::storage::{Account, StoredCard};
use crate::sync::cards::{CardChange, ChangeRefused};

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

/// Applies a person's action: checked by the card's state machine and
/// stored with its mirror to live editors in the document's task, then
/// told to the Planner session that asked it (SPEC D, P1, L3, L5).
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
    let change = CardChange::Person {
        by: account.name.clone(),
        action,
    };
    let stored = match state.hub.change_card(id, card_id, change).await {
        Ok(Ok(Some(stored))) => stored,
        // A person's action changes the card or is refused.
        Ok(Ok(None)) | Ok(Err(ChangeRefused::NotFound(_))) => {
            return Err(AppError::NotFound {
                code: ErrorCode::DecisionNotFound,
                message: format!("no decision {card_id:?} in this document"),
            })
        }
        Ok(Err(ChangeRefused::Refused(e))) => {
            return Err(AppError::Refused {
                code: e.code,
                message: e.message,
            })
        }
        Err(unavailable) => return Err(AppError::Unavailable(unavailable.to_string())),
    };
    tell_the_session(state, account, id, &stored).await;
    tracing::info!(
        document = id,
        card = card_id,
        state = stored.card.state.as_str(),
        "decision changed"
    );
    Ok(Json(wire::card_view(&stored.card)))
}

/// Tells the document's Planner session of an answer to, or a discard of,
/// a question it asked.
async fn tell_the_session(
    state: &AppState,
    account: &Account,
    document: &str,
    stored: &StoredCard,
) {
    let request = RequestId(stored.card.id.clone());
    match (stored.card.state, &stored.card.answer) {
        (CardState::Answered, Some(answer)) => {
            let answer = wire::answer_body(answer);
            state
                .sessions
                .answered(document, request, answer, account.name.clone())
                .await;
        }
        // A discarded question no longer waits on anyone; a machine that
        // comes back is told it was withdrawn (SPEC L3).
        (CardState::Discarded, _) => {
            let card = CardId(stored.card.id.clone());
            state.sessions.discarded(document, card).await;
        }
        _ => {}
    }
}
