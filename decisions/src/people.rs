//! What people do to a card — answer, discard, reopen, add an option or a
//! criterion — and the system's one act, withdrawing a question. The one
//! place a card's state changes after it is opened.

use margin_protocol::ErrorCode;

use crate::card::{check_text, limits, Answer, CardState, Choice, DecisionCard};

/// A person's action on a card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Answer (or change the answer).
    Answer(Answer),
    /// Set the card aside.
    Discard,
    /// Open it again after an answer or a discard.
    Reopen,
    /// Add a choice.
    AddOption(String),
    /// Add a criterion to weigh the choices by.
    AddCriterion(String),
}

/// Why an action was refused; the card is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ActionError {
    /// [`ErrorCode::InvalidAnswer`], [`ErrorCode::InvalidTransition`] or
    /// [`ErrorCode::InvalidInput`].
    pub code: ErrorCode,
    /// Names the rule.
    pub message: String,
}

fn refuse(code: ErrorCode, message: impl Into<String>) -> ActionError {
    ActionError {
        code,
        message: message.into(),
    }
}

/// Applies `action` by `account` to `card`, or refuses it and changes nothing.
pub fn act(card: &mut DecisionCard, account: &str, action: Action) -> Result<(), ActionError> {
    let state = card.state;
    match action {
        Action::Answer(answer) => {
            if !matches!(
                state,
                CardState::Open | CardState::Reopened | CardState::Answered
            ) {
                return Err(refuse(
                    ErrorCode::InvalidTransition,
                    format!("the card is {}; reopen it before answering", state.as_str()),
                ));
            }
            check_answer(card, &answer)?;
            card.answer = Some(answer);
            card.answered_by = Some(account.to_owned());
            card.state = CardState::Answered;
        }
        Action::Discard => {
            if !state.holds_question() {
                return Err(refuse(
                    ErrorCode::InvalidTransition,
                    format!("the card is already {}", state.as_str()),
                ));
            }
            card.state = CardState::Discarded;
        }
        Action::Reopen => {
            if !matches!(state, CardState::Answered | CardState::Discarded) {
                return Err(refuse(
                    ErrorCode::InvalidTransition,
                    format!(
                        "the card is {}; only answered or discarded cards can be reopened",
                        state.as_str()
                    ),
                ));
            }
            // The answer stays on record until a new one replaces it.
            card.state = CardState::Reopened;
        }
        Action::AddOption(label) => {
            if !card.response.has_choices() {
                return Err(refuse(
                    ErrorCode::InvalidInput,
                    format!("a {} card has no options", card.response.as_str()),
                ));
            }
            if !state.holds_question() {
                return Err(refuse(
                    ErrorCode::InvalidTransition,
                    format!("the card is {}", state.as_str()),
                ));
            }
            check_text("option", &label, limits::LABEL_BYTES, false)
                .map_err(|m| refuse(ErrorCode::InvalidInput, m))?;
            if card.choices.len() >= limits::CHOICES {
                return Err(refuse(
                    ErrorCode::InvalidInput,
                    format!("a card has at most {} choices", limits::CHOICES),
                ));
            }
            if card.choices.iter().any(|c| c.label == label) {
                return Err(refuse(
                    ErrorCode::InvalidInput,
                    format!("the card already offers {label:?}"),
                ));
            }
            let added = card.choices.iter().filter(|c| c.added_by.is_some()).count();
            card.choices.push(Choice {
                id: format!("p{}", added + 1),
                label,
                added_by: Some(account.to_owned()),
            });
        }
        Action::AddCriterion(text) => {
            if !state.holds_question() {
                return Err(refuse(
                    ErrorCode::InvalidTransition,
                    format!("the card is {}", state.as_str()),
                ));
            }
            check_text("criterion", &text, limits::LABEL_BYTES, false)
                .map_err(|m| refuse(ErrorCode::InvalidInput, m))?;
            if card.criteria.len() >= limits::CRITERIA {
                return Err(refuse(
                    ErrorCode::InvalidInput,
                    format!("a card has at most {} criteria", limits::CRITERIA),
                ));
            }
            if card.criteria.contains(&text) {
                return Err(refuse(
                    ErrorCode::InvalidInput,
                    format!("the card already weighs {text:?}"),
                ));
            }
            card.criteria.push(text);
        }
    }
    Ok(())
}

/// The system withdraws a card's question (its session ended): a card that
/// still waits on a person (open or reopened) becomes `cancelled`; returns
/// whether it changed. An answer a person gave is a decision and is kept.
pub fn withdraw(card: &mut DecisionCard) -> bool {
    if !matches!(card.state, CardState::Open | CardState::Reopened) {
        return false;
    }
    card.state = CardState::Cancelled;
    true
}

fn check_answer(card: &DecisionCard, answer: &Answer) -> Result<(), ActionError> {
    use crate::card::ResponseKind::*;
    let known = |id: &String| card.choices.iter().any(|c| &c.id == id);
    match (card.response, answer) {
        (SingleChoice, Answer::Choices(ids)) if ids.len() == 1 && known(&ids[0]) => Ok(()),
        (SingleChoice, Answer::Choices(_)) => Err(refuse(
            ErrorCode::InvalidAnswer,
            "pick exactly one of the card's choices",
        )),
        (MultipleChoice, Answer::Choices(ids)) => {
            let distinct = ids.iter().enumerate().all(|(i, id)| !ids[..i].contains(id));
            if !ids.is_empty() && distinct && ids.iter().all(known) {
                Ok(())
            } else {
                Err(refuse(
                    ErrorCode::InvalidAnswer,
                    "pick one or more of the card's choices, each once",
                ))
            }
        }
        (FreeText, Answer::Text(text)) => check_text("answer", text, limits::ANSWER_BYTES, true)
            .map_err(|m| refuse(ErrorCode::InvalidAnswer, m)),
        (YesNo, Answer::YesNo(_)) => Ok(()),
        (kind, _) => Err(refuse(
            ErrorCode::InvalidAnswer,
            format!("a {} card takes a different kind of answer", kind.as_str()),
        )),
    }
}
