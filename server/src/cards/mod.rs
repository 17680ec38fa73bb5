//! The one place a decision card changes and everyone hears of it (SPEC D,
//! P1, L3, L5): the stored card (the record), its live mirror in the
//! document (what editors see) and the document's Planner session (an
//! answer or a discard of a question it asked). People's actions over HTTP
//! and a session's withdrawn questions come through here; the document's
//! task holds its cards ([`CardSet`]) and stores each change with its
//! mirror in one transaction, as it stores new cards.

mod set;

use margin_decisions::{wire, Action, CardState, DecisionCard};
use margin_planner::{CardId, RequestId};

pub use set::{CardChange, CardSet, ChangeRefused};

use crate::sessions::Sessions;
use crate::storage::{Account, StoredCard};
use crate::sync::Hub;

/// Why a person's action changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    /// The document has no such card.
    #[error("no decision {0:?} in this document")]
    NotFound(String),
    /// The card's rules refused it.
    #[error("{message}")]
    Refused {
        /// Stable code.
        code: &'static str,
        /// Names the cause.
        message: String,
    },
    /// The document could not be loaded, or its task failed to store the
    /// change; nothing changed.
    #[error("the document is unavailable: {0}")]
    Unavailable(String),
}

/// Applies `account`'s `action` to card `card` of `document`: checked by
/// the card's state machine, stored with its mirror to live editors, and
/// told to the session that asked it.
pub async fn change(
    hub: &Hub,
    sessions: &Sessions,
    account: &Account,
    document: &str,
    card: &str,
    action: Action,
) -> Result<StoredCard, CardError> {
    let change = CardChange::Person {
        by: account.name.clone(),
        action,
    };
    let stored = match hub.change_card(document, card, change).await {
        Ok(Ok(Some(stored))) => stored,
        // A person's action changes the card or is refused.
        Ok(Ok(None)) => return Err(CardError::NotFound(card.to_owned())),
        Ok(Err(ChangeRefused::NotFound(card))) => return Err(CardError::NotFound(card)),
        Ok(Err(ChangeRefused::Refused(e))) => {
            return Err(CardError::Refused {
                code: e.code,
                message: e.message,
            })
        }
        Err(unavailable) => return Err(CardError::Unavailable(unavailable.to_string())),
    };
    let request = RequestId(stored.card.id.clone());
    match (stored.card.state, &stored.card.answer) {
        (CardState::Answered, Some(answer)) => {
            let answer = wire::answer_body(answer);
            sessions
                .answered(document, request, answer, account.name.clone())
                .await;
        }
        // A discarded question no longer waits on anyone; a machine that
        // comes back is told it was withdrawn (SPEC L3).
        (CardState::Discarded, _) => {
            let card = CardId(stored.card.id.clone());
            sessions.discarded(document, card).await;
        }
        _ => {}
    }
    Ok(stored)
}

/// Cancels card `card` of `document` — its question was withdrawn: nobody
/// will read the answer — with its mirror. A card that no longer holds its
/// question is left as it is.
pub async fn withdraw(hub: &Hub, document: &str, card: &str) -> Result<(), CardError> {
    match hub.change_card(document, card, CardChange::Withdraw).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(ChangeRefused::NotFound(card))) => Err(CardError::NotFound(card)),
        Ok(Err(ChangeRefused::Refused(e))) => Err(CardError::Refused {
            code: e.code,
            message: e.message,
        }),
        Err(unavailable) => Err(CardError::Unavailable(unavailable.to_string())),
    }
}

/// A card's entry in the live mirror: its id and its JSON.
pub fn mirror_entry(card: &DecisionCard) -> (String, String) {
    let json = serde_json::to_string(&wire::card_view(card)).unwrap_or_default();
    (card.id.clone(), json)
}
