//! A loaded document's decision cards, as its task holds them: read from
//! the rows when the document loads, then changed only by that task, in
//! the same step that writes the change (SPEC D). A batch is judged
//! against these, not against a query, and a person's change applies to
//! the card the task already holds.

use std::collections::HashMap;

use margin_decisions::{act, wire, withdraw, Action, ActionError, DecisionCard, Key};

use crate::storage::StoredCard;

/// What happens to a card.
#[derive(Clone, Debug)]
pub enum CardChange {
    /// A person's action (SPEC D: answer, discard, reopen, add an option
    /// or a criterion), by the account named.
    Person {
        /// Who acts.
        by: String,
        /// What they do.
        action: Action,
    },
    /// The system withdraws the card's question: nobody will read the
    /// answer (its session ended).
    Withdraw,
}

/// Why a change changed nothing.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ChangeRefused {
    /// The document has no such card.
    #[error("no decision {0:?} in this document")]
    NotFound(String),
    /// The card's rules refused it.
    #[error(transparent)]
    Refused(#[from] ActionError),
}

/// The cards of one document, by key and by id.
#[derive(Debug, Default)]
pub struct CardSet {
    by_key: HashMap<Key, StoredCard>,
    /// Each card's key, by its id.
    keys: HashMap<String, Key>,
}

impl CardSet {
    /// The cards as stored.
    pub fn new(stored: Vec<StoredCard>) -> Self {
        let mut set = CardSet::default();
        for card in stored {
            set.keys.insert(card.card.id.clone(), card.card.key.clone());
            set.by_key.insert(card.card.key.clone(), card);
        }
        set
    }

    /// The card with `key`.
    pub fn get(&self, key: &Key) -> Option<&DecisionCard> {
        self.by_key.get(key).map(|stored| &stored.card)
    }

    /// Adds a new card (its first version). The caller checked its key is
    /// free: the engine only creates cards for keys it found no card for.
    pub fn insert(&mut self, card: DecisionCard) {
        self.keys.insert(card.id.clone(), card.key.clone());
        self.by_key
            .insert(card.key.clone(), StoredCard { card, version: 1 });
    }

    /// Applies `change` to card `id`: the card as changed, at its next
    /// version, or `None` when a withdrawal found nothing to withdraw.
    /// Refused, the card is as it was.
    pub fn change(
        &mut self,
        id: &str,
        change: CardChange,
    ) -> Result<Option<StoredCard>, ChangeRefused> {
        let stored = self
            .keys
            .get(id)
            .and_then(|key| self.by_key.get_mut(key))
            .ok_or_else(|| ChangeRefused::NotFound(id.to_owned()))?;
        let mut card = stored.card.clone();
        match change {
            CardChange::Person { by, action } => act(&mut card, &by, action)?,
            CardChange::Withdraw if withdraw(&mut card) => {}
            CardChange::Withdraw => return Ok(None),
        }
        stored.card = card;
        stored.version += 1;
        Ok(Some(stored.clone()))
    }
}

/// A card's entry in the live mirror: its id and its JSON.
pub fn mirror_entry(card: &DecisionCard) -> (String, String) {
    let json = serde_json::to_string(&wire::card_view(card)).unwrap_or_default();
    (card.id.clone(), json)
}
