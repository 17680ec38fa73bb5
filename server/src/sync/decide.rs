//! A batch of decision cards judged inside its document's task (SPEC
//! D1–D10): against the outline and the cards the task holds, with the
//! Planner's remembered reads. The task then writes what the judgement
//! created — the cards, their live mirror and the call's result — in the
//! batch's one transaction, so nothing between the judgement and the write
//! can take a key or move the document.

use std::collections::HashMap;
use std::sync::Arc;

use margin_decisions::{
    open_decisions, wire, Access, BatchError, Capture, CardSpec, CardState, DecisionCard,
    DocumentState, Key, Outcome, Outline, ReadCache, Strictness,
};
use margin_protocol::decisions::{AnswerBody, OpenDecisionsOutput};
use uuid::Uuid;

use super::cards::{mirror_entry, CardSet};

/// A batch as the Planner wrote it, parsed.
#[derive(Clone, Debug)]
pub struct Batch {
    /// The revision it was written at.
    pub revision: i64,
    /// Its cards.
    pub specs: Vec<CardSpec>,
    /// Whether a stale revision is judged (`open_decisions`) or refused
    /// (`open_decision`, `ask`).
    pub strictness: Strictness,
}

/// A question a batch replayed that a person already answered: its card,
/// the answer and who gave it (SPEC D3: nobody is asked twice).
pub type Answered = (String, AnswerBody, String);

/// What a batch came to, once committed.
#[derive(Debug)]
pub struct Decided {
    /// The call's output, at the revision the batch made (or found).
    pub output: OpenDecisionsOutput,
    /// The outline at that revision, remembered as read.
    pub outline: Arc<Outline>,
    /// The replayed questions already answered.
    pub answered: Vec<Answered>,
}

/// The captures of a judged batch and the ids of the cards it created:
/// the call's output at any revision.
#[derive(Debug)]
pub struct Captured {
    captures: Vec<Capture>,
    ids: HashMap<Key, String>,
}

impl Captured {
    /// The call's output, with the document at `revision`.
    pub fn at(&self, revision: i64) -> OpenDecisionsOutput {
        wire::captures(&self.captures, revision, |key| {
            self.ids.get(key).cloned().unwrap_or_default()
        })
    }
}

/// What a judged batch writes, and what it answers.
pub struct Judged {
    /// New cards, with their ids.
    pub created: Vec<DecisionCard>,
    /// The mirror entries to write: each created card's, and each
    /// replayed card's — put right should it have drifted from its row (a
    /// client rewriting the map).
    pub mirror: Vec<(String, String)>,
    /// The output.
    pub captured: Arc<Captured>,
    /// The replayed questions already answered.
    pub answered: Vec<Answered>,
}

/// A new card's id: time-ordered (UUIDv7), so each batch's rows land at
/// the end of the cards' primary-key index, on the same few pages, instead
/// of one random page per card — pages the batch's commit must write, and
/// more of them the more cards a document holds.
fn new_card_id() -> String {
    Uuid::now_v7().to_string()
}

/// Judges `batch` against the document at `revision` with `outline`, the
/// Planner's `reads` and the document's `cards`.
pub fn judge(
    revision: i64,
    outline: &Outline,
    reads: &ReadCache,
    cards: &CardSet,
    batch: &Batch,
) -> Result<Judged, BatchError> {
    let state = DocumentState {
        revision,
        outline,
        reads,
    };
    let captures = open_decisions(
        state,
        Access::Granted,
        |key| cards.get(key),
        batch.revision,
        &batch.specs,
        batch.strictness,
    )?;
    let mut created = Vec::new();
    let mut mirror = Vec::new();
    let mut answered = Vec::new();
    for capture in &captures {
        match &capture.outcome {
            Outcome::Created(new) => {
                let card = new.clone().into_card(new_card_id());
                mirror.push(mirror_entry(&card));
                created.push(card);
            }
            Outcome::AlreadyInDocument { .. } => {
                let Some(card) = cards.get(&capture.key) else {
                    continue;
                };
                mirror.push(mirror_entry(card));
                if let (CardState::Answered, Some(answer), Some(by)) =
                    (card.state, &card.answer, &card.answered_by)
                {
                    answered.push((card.id.clone(), wire::answer_body(answer), by.clone()));
                }
            }
        }
    }
    let ids = created
        .iter()
        .map(|c| (c.key.clone(), c.id.clone()))
        .collect();
    Ok(Judged {
        created,
        mirror,
        captured: Arc::new(Captured { captures, ids }),
        answered,
    })
}

#[cfg(test)]
mod tests {
    use super::new_card_id;

    #[test]
    fn a_card_made_later_has_an_id_that_sorts_after_every_earlier_one() {
        let ids: Vec<String> = (0..1_000).map(|_| new_card_id()).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} then {}", pair[0], pair[1]);
        }
    }
}
