//! The server's own writes to a loaded document: the Planner's `edit_plan`
//! and the live projection of decision cards. Each returns the change it
//! made, which the document task publishes like any client's.

use margin_decisions::{apply_edits, Edit, EditError, Outline, FRAGMENT_NAME};
use yrs::{Doc, Map, ReadTxn, Transact, TransactionMut};

/// The name of the map that mirrors decision cards for editors: card id →
/// the card's JSON (`DecisionCardView`). SQL rows are the record; this is a
/// projection rewritten whenever a card changes.
pub const DECISIONS_MAP: &str = "decisions";

/// Applies `edits`, addressed in `outline` (the document as it stands), to
/// `doc`; returns the change they made.
pub fn edit(doc: &Doc, outline: &Outline, edits: &[Edit]) -> Result<Option<Vec<u8>>, EditError> {
    let fragment = doc.get_or_insert_xml_fragment(FRAGMENT_NAME);
    let mut txn = doc.transact_mut();
    apply_edits(&mut txn, &fragment, outline, edits)?;
    Ok(change_of(&txn))
}

/// Writes each `(card id, card JSON)` into the decisions map, skipping
/// those it already holds as they are: mirroring a card that did not change
/// changes nothing, so a repair can mirror every card.
pub fn project(doc: &Doc, cards: &[(String, String)]) -> Option<Vec<u8>> {
    let map = doc.get_or_insert_map(DECISIONS_MAP);
    let mut txn = doc.transact_mut();
    for (id, json) in cards {
        let held = map
            .get(&txn, id.as_str())
            .map(|value| value.to_string(&txn));
        if held.as_deref() != Some(json.as_str()) {
            map.insert(&mut txn, id.as_str(), json.as_str());
        }
    }
    change_of(&txn)
}

/// The change a transaction made, if any.
pub fn change_of(txn: &TransactionMut) -> Option<Vec<u8>> {
    let changed = txn.before_state() != txn.after_state() || !txn.delete_set().is_empty();
    changed.then(|| txn.encode_update_v1())
}

/// Reads the decisions map (for tests and diagnostics).
pub fn projected(doc: &Doc) -> Vec<(String, String)> {
    let txn = doc.transact();
    let Some(map) = txn.get_map(DECISIONS_MAP) else {
        return Vec::new();
    };
    let mut cards: Vec<(String, String)> = map
        .iter(&txn)
        .map(|(id, value)| (id.to_string(), value.to_string(&txn)))
        .collect();
    cards.sort();
    cards
}
