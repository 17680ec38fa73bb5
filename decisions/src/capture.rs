//! The `open_decisions` engine (SPEC D1–D10): decides, for a batch of cards
//! written at some revision, which cards to create and which already stand,
//! or refuses the whole batch with the one cause that happened.
//!
//! Pure: the caller passes the document as it stands now (its revision and
//! outline), the reads it remembers, and a lookup of existing cards by key;
//! it gets back what to create. Nothing is created unless every card passes
//! (SPEC D1).

use std::collections::HashSet;
use std::fmt;

use margin_protocol::RefusalCode;

use crate::block::BlockIdentity;
use crate::card::{limits, Anchor, CardSpec, CardState, Choice, DecisionCard, Key, Passage};
use crate::outline::Outline;
use crate::reads::ReadCache;
use crate::refusal::{Cause, Refusal};

/// The document as the engine sees it.
#[derive(Clone, Copy)]
pub struct DocumentState<'a> {
    /// Its revision now.
    pub revision: i64,
    /// Its outline now.
    pub outline: &'a Outline,
    /// The outlines the Planner read.
    pub reads: &'a ReadCache,
}

/// Whether the Planner may act on the document, confirmed by the caller
/// before the batch is read (SPEC D10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// It may.
    Granted,
    /// It may not.
    Denied,
}

/// Which revisions a call accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strictness {
    /// `open_decisions`: a stale batch keeps its place (SPEC D6).
    StaleAllowed,
    /// `open_decision` and `ask`: only the current revision (SPEC D9).
    CurrentOnly,
}

/// Input that breaks a rule: nothing is created, and reading again will not
/// help — the Planner must fix the input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidInput {
    /// The card concerned, if one.
    pub key: Option<Key>,
    /// The rule broken.
    pub message: String,
}

impl fmt::Display for InvalidInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(
                f,
                "card {:?}: {}; nothing was created",
                key.as_str(),
                self.message
            ),
            None => write!(f, "{}; nothing was created", self.message),
        }
    }
}

/// Why a batch created nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchError {
    /// The input breaks a rule.
    Invalid(InvalidInput),
    /// The batch was refused (see [`Cause`]).
    Refused(Refusal),
}

impl BatchError {
    /// The stable code: `invalid_input` or the refusal's.
    pub fn code(&self) -> RefusalCode {
        match self {
            BatchError::Invalid(_) => RefusalCode::InvalidInput,
            BatchError::Refused(refusal) => refusal.code(),
        }
    }
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Invalid(e) => e.fmt(f),
            BatchError::Refused(r) => r.fmt(f),
        }
    }
}

impl std::error::Error for BatchError {}

/// A card to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCard {
    /// What the Planner asked.
    pub spec: CardSpec,
    /// Where it stands, one anchor per passage.
    pub anchors: Vec<Anchor>,
    /// What its first block says now (see [`DecisionCard::excerpt`]).
    pub excerpt: Option<String>,
}

impl NewCard {
    /// The card to store, under `id`: open, with the Planner's choices as
    /// `c1`, `c2`, … in order.
    pub fn into_card(self, id: String) -> DecisionCard {
        let choices = self
            .spec
            .choices
            .into_iter()
            .enumerate()
            .map(|(i, label)| Choice {
                id: format!("c{}", i + 1),
                label,
                added_by: None,
            })
            .collect();
        DecisionCard {
            id,
            key: self.spec.key,
            question: self.spec.question,
            description: self.spec.description,
            response: self.spec.response,
            choices,
            criteria: Vec::new(),
            anchors: self.anchors,
            state: CardState::Open,
            answer: None,
            answered_by: None,
            excerpt: self.excerpt,
        }
    }
}

/// What became of one card of the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A new card, to be created.
    Created(NewCard),
    /// The key's card already exists; this was an identical replay (SPEC D3).
    AlreadyInDocument {
        /// The existing card's id.
        id: String,
        /// Its state.
        state: CardState,
    },
}

/// One card's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capture {
    /// The card's key.
    pub key: Key,
    /// Created, or already there.
    pub outcome: Outcome,
    /// Whether a card now holds the question (SPEC D4).
    pub captured: bool,
}

impl Capture {
    /// Whether this capture created a card.
    pub fn created(&self) -> bool {
        matches!(self.outcome, Outcome::Created(_))
    }
}

/// Totals a turn reports (SPEC D3, T2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureSummary {
    /// Cards newly added.
    pub added: usize,
    /// Cards that were already in the document and still hold their question.
    pub already_in_document: usize,
    /// Replays of cards that no longer hold their question (discarded or
    /// cancelled): never recreated, never counted.
    pub not_captured: usize,
}

impl CaptureSummary {
    /// Sums `captures`.
    pub fn of(captures: &[Capture]) -> Self {
        let mut summary = CaptureSummary::default();
        for capture in captures {
            match (capture.created(), capture.captured) {
                (true, _) => summary.added += 1,
                (false, true) => summary.already_in_document += 1,
                (false, false) => summary.not_captured += 1,
            }
        }
        summary
    }

    /// Cards that hold the Planner's questions: new and replayed alike.
    pub fn captured(&self) -> usize {
        self.added + self.already_in_document
    }
}

impl fmt::Display for CaptureSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: usize| if n == 1 { "decision" } else { "decisions" };
        let mut parts = Vec::new();
        if self.added > 0 {
            parts.push(format!("added {} {}", self.added, plural(self.added)));
        }
        if self.already_in_document > 0 {
            parts.push(format!(
                "{} {} already in the document",
                self.already_in_document,
                plural(self.already_in_document)
            ));
        }
        if self.not_captured > 0 {
            parts.push(format!(
                "{} {} set aside by people and not reopened",
                self.not_captured,
                plural(self.not_captured)
            ));
        }
        if parts.is_empty() {
            parts.push("no decisions".to_owned());
        }
        f.write_str(&parts.join("; "))
    }
}

/// Runs `open_decisions` (or, with [`Strictness::CurrentOnly`],
/// `open_decision` / `ask`) for `cards` written at `revision`.
pub fn open_decisions<'c>(
    document: DocumentState<'_>,
    access: Access,
    existing: impl Fn(&Key) -> Option<&'c DecisionCard>,
    revision: i64,
    cards: &[CardSpec],
    strictness: Strictness,
) -> Result<Vec<Capture>, BatchError> {
    if access == Access::Denied {
        return Err(BatchError::Refused(Refusal {
            key: None,
            cause: Cause::NoAccess,
        }));
    }
    check_batch(document.revision, revision, cards)?;
    if strictness == Strictness::CurrentOnly && revision != document.revision {
        let cause = Cause::StaleRevision {
            revision,
            current: document.revision,
        };
        return Err(BatchError::Refused(Refusal {
            key: cards.first().map(|c| c.key.clone()),
            cause,
        }));
    }
    let view = View::new(document, revision);
    cards
        .iter()
        .map(|spec| match existing(&spec.key) {
            Some(card) => replay(&view, spec, card),
            None => create(&view, spec),
        })
        .collect()
}

/// Bounds that do not depend on the document.
fn check_batch(current: i64, revision: i64, cards: &[CardSpec]) -> Result<(), BatchError> {
    let invalid = |key: Option<&Key>, message: String| {
        BatchError::Invalid(InvalidInput {
            key: key.cloned(),
            message,
        })
    };
    if cards.is_empty() || cards.len() > limits::BATCH {
        return Err(invalid(
            None,
            format!("a batch has 1 to {} cards", limits::BATCH),
        ));
    }
    if revision < 0 || revision > current {
        return Err(invalid(
            None,
            format!("revision {revision} is unknown; the document is at revision {current}"),
        ));
    }
    let mut keys = HashSet::new();
    for spec in cards {
        spec.validate().map_err(|e| invalid(Some(&spec.key), e))?;
        if !keys.insert(&spec.key) {
            return Err(invalid(
                Some(&spec.key),
                "the key appears twice in the batch".into(),
            ));
        }
    }
    Ok(())
}

/// The document now, and the read the batch was written from.
struct View<'a> {
    revision: i64,
    now: &'a Outline,
    /// The outline of the batch's revision: the current one, or the
    /// remembered read; `None` when that read is gone.
    read: Option<std::sync::Arc<Outline>>,
    stale: bool,
}

impl<'a> View<'a> {
    fn new(document: DocumentState<'a>, revision: i64) -> Self {
        let stale = revision != document.revision;
        View {
            revision,
            now: document.outline,
            read: if stale {
                document.reads.get(revision)
            } else {
                None
            },
            stale,
        }
    }

    /// The block the address names in the outline it was written against.
    fn addressed(&self, key: &Key, passage: &Passage) -> Result<BlockIdentity, BatchError> {
        let read: &Outline = match (self.stale, &self.read) {
            (false, _) => self.now,
            (true, Some(read)) => read,
            (true, None) => {
                return Err(refuse(
                    key,
                    Cause::ReadEvicted {
                        revision: self.revision,
                    },
                ));
            }
        };
        let block = read.get(passage.index).ok_or_else(|| {
            BatchError::Invalid(InvalidInput {
                key: Some(key.clone()),
                message: format!(
                    "no block at index {} in revision {} ({} blocks)",
                    passage.index,
                    self.revision,
                    read.len()
                ),
            })
        })?;
        if block.digest != passage.digest {
            return Err(refuse(
                key,
                Cause::AddressMismatch {
                    index: passage.index,
                },
            ));
        }
        Ok(block.identity)
    }

    /// Resolves an address for a new card (SPEC D5, D6).
    fn resolve(&self, key: &Key, passage: &Passage) -> Result<Anchor, BatchError> {
        let identity = self.addressed(key, passage)?;
        if self.stale {
            self.check_still_carried(key, passage, identity)?;
        }
        Ok(Anchor {
            identity,
            digest: passage.digest,
        })
    }

    /// A stale address must have named one block when read, that block must
    /// still carry the digest, and carry it alone now (SPEC D6).
    fn check_still_carried(
        &self,
        key: &Key,
        passage: &Passage,
        identity: BlockIdentity,
    ) -> Result<(), BatchError> {
        let index = passage.index;
        if let Some(read) = &self.read {
            if read.count_digest(&passage.digest) > 1 {
                return Err(refuse(key, Cause::RepeatedWhenRead { index }));
            }
        }
        match self.now.by_identity(identity) {
            None => return Err(refuse(key, Cause::BlockRemovedOrMoved { index })),
            Some(block) if block.digest != passage.digest => {
                return Err(refuse(key, Cause::BlockRewritten { index }))
            }
            Some(_) => {}
        }
        if self.now.count_digest(&passage.digest) > 1 {
            return Err(refuse(key, Cause::TwinNow { index }));
        }
        Ok(())
    }
}

fn refuse(key: &Key, cause: Cause) -> BatchError {
    BatchError::Refused(Refusal::of(key, cause))
}

fn create(view: &View<'_>, spec: &CardSpec) -> Result<Capture, BatchError> {
    let anchors = spec
        .passages
        .iter()
        .map(|passage| view.resolve(&spec.key, passage))
        .collect::<Result<Vec<_>, _>>()?;
    let excerpt = anchors
        .first()
        .and_then(|anchor| view.now.by_identity(anchor.identity))
        .map(|block| crate::card::excerpt(&block.text));
    Ok(Capture {
        key: spec.key.clone(),
        outcome: Outcome::Created(NewCard {
            spec: spec.clone(),
            anchors,
            excerpt,
        }),
        captured: true,
    })
}

/// A repeated key replays only the decision it made (SPEC D2, D3, D7, D8).
fn replay(view: &View<'_>, spec: &CardSpec, card: &DecisionCard) -> Result<Capture, BatchError> {
    let differs = if spec.question != card.question {
        Some("question")
    } else if spec.description != card.description {
        Some("description")
    } else if spec.response != card.response {
        Some("response kind")
    } else if !spec
        .choices
        .iter()
        .map(String::as_str)
        .eq(card.planner_choices())
    {
        Some("choice list")
    } else if spec.passages.len() != card.anchors.len() {
        Some("passage")
    } else {
        None
    };
    if let Some(differs) = differs {
        return Err(refuse(&spec.key, Cause::DifferentDecision { differs }));
    }
    for (passage, anchor) in spec.passages.iter().zip(&card.anchors) {
        replay_passage(view, spec, card, passage, anchor)?;
    }
    Ok(Capture {
        key: spec.key.clone(),
        outcome: Outcome::AlreadyInDocument {
            id: card.id.clone(),
            state: card.state,
        },
        captured: card.state.holds_question(),
    })
}

fn replay_passage(
    view: &View<'_>,
    spec: &CardSpec,
    card: &DecisionCard,
    passage: &Passage,
    anchor: &Anchor,
) -> Result<(), BatchError> {
    let key = &spec.key;
    if view.stale && view.read.is_none() {
        // Without the read, only a card still standing beside the one
        // paragraph it was opened on is recognised; a later passage could
        // not be told from an identical copy (SPEC D7).
        let beside = card.anchors.len() == 1
            && view
                .now
                .by_identity(anchor.identity)
                .is_some_and(|block| block.digest == passage.digest);
        return if beside {
            Ok(())
        } else {
            Err(refuse(
                key,
                Cause::ReadEvicted {
                    revision: view.revision,
                },
            ))
        };
    }
    let identity = view.addressed(key, passage)?;
    // A replay is part of its batch: D6 holds for the block its read names
    // whether that is the card's own block or another (SPEC D7). Another
    // block that is intact means a different decision (SPEC D8).
    if view.stale {
        view.check_still_carried(key, passage, identity)?;
    }
    if identity == anchor.identity {
        return Ok(());
    }
    Err(refuse(key, Cause::DifferentDecision { differs: "passage" }))
}
