//! The one place a decision card changes and everyone hears of it (SPEC D,
//! P1, L3, L5): the stored card (the record), its live mirror in the
//! document (what editors see) and the document's Planner session (an
//! answer or a discard of a question it asked). People's actions over HTTP
//! and a session's withdrawn questions come through here; new cards are
//! stored with their mirror by the document task (`Hub::create_cards`).

use margin_decisions::{act, wire, Action, CardState, DecisionCard};
use margin_planner::{CardId, RequestId};
use tracing::warn;

use crate::sessions::Sessions;
use crate::storage::{Account, StorageError, StoredCard};
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
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Applies `account`'s `action` to card `card` of `document`: checked by
/// the card's state machine, stored if nobody changed the card meanwhile,
/// mirrored to live editors, and told to the session that asked it.
pub async fn change(
    hub: &Hub,
    sessions: &Sessions,
    account: &Account,
    document: &str,
    card: &str,
    action: Action,
) -> Result<StoredCard, CardError> {
    let mut stored = match hub.store().card(document, card).await {
        Ok(stored) => stored,
        Err(StorageError::NotFound(_)) => return Err(CardError::NotFound(card.to_owned())),
        Err(other) => return Err(other.into()),
    };
    act(&mut stored.card, &account.name, action).map_err(|e| CardError::Refused {
        code: e.code,
        message: e.message,
    })?;
    stored.version = hub.store().update_card(document, &stored).await?;
    mirror(hub, document, &stored.card).await;
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
/// will read the answer — and mirrors it. A card that no longer holds its
/// question is left as it is.
pub async fn withdraw(hub: &Hub, document: &str, card: &str) -> Result<(), StorageError> {
    let mut stored = hub.store().card(document, card).await?;
    if !margin_decisions::withdraw(&mut stored.card) {
        return Ok(());
    }
    hub.store().update_card(document, &stored).await?;
    mirror(hub, document, &stored.card).await;
    Ok(())
}

/// A card's entry in the live mirror: its id and its JSON.
pub fn mirror_entry(card: &DecisionCard) -> (String, String) {
    let json = serde_json::to_string(&wire::card_view(card)).unwrap_or_default();
    (card.id.clone(), json)
}

/// Mirrors a changed card into the document. The change is already
/// committed; a failed mirror is logged and repaired by the next change to
/// the card, a replay of it, or the document's next load.
async fn mirror(hub: &Hub, document: &str, card: &DecisionCard) {
    if let Err(error) = hub.project(document, vec![mirror_entry(card)]).await {
        warn!(document, card = %card.id, %error, "decision changed but its live mirror failed");
    }
}
