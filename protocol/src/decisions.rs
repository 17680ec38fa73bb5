//! Decision cards over HTTP, and the Planner's document tools' inputs and
//! outputs (SPEC D, S4, S5).
//!
//! ```
//! use margin_protocol::decisions::OpenDecisionsInput;
//! let input: OpenDecisionsInput = serde_json::from_str(r#"{
//!   "revision": 12,
//!   "cards": [{
//!     "key": "launch-region",
//!     "question": "Which region launches first?",
//!     "response": "single_choice",
//!     "choices": ["EU", "US"],
//!     "passages": [{"index": 3, "digest": "9f2c…"}]
//!   }]
//! }"#).unwrap();
//! assert_eq!(input.cards[0].passages[0].index, 3);
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::documents::BlockEntry;
use crate::refusal::RefusalCode;

/// A block address: its index and digest in the outline of a revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PassageAddress {
    /// Index in that revision's outline.
    pub index: usize,
    /// The block's digest (64 hex digits).
    pub digest: String,
}

/// One card as the Planner writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CardInput {
    /// Stable key chosen by the Planner; a repeated key replays only the
    /// decision it made.
    pub key: String,
    /// The question, ≤ 500 bytes, one line.
    pub question: String,
    /// Optional context, ≤ 4000 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `single_choice`, `multiple_choice`, `free_text` or `yes_no`.
    pub response: String,
    /// 2–24 labels for choice kinds; none otherwise.
    #[serde(default)]
    pub choices: Vec<String>,
    /// 1–8 blocks the card concerns.
    pub passages: Vec<PassageAddress>,
}

/// `open_decisions` input: a batch written at `revision`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenDecisionsInput {
    /// The revision the Planner read.
    pub revision: i64,
    /// 1–32 cards.
    pub cards: Vec<CardInput>,
}

/// `open_decision` and `ask` input: one card at the current revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenDecisionInput {
    /// Must be the document's current revision.
    pub revision: i64,
    /// The card.
    pub card: CardInput,
}

/// What happened to one card of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CaptureStatus {
    /// A new card was added.
    Created,
    /// The key's card was already in the document and holds the question.
    AlreadyInDocument,
    /// The key's card was discarded or cancelled; not recreated, not counted.
    NotCaptured,
}

/// One card's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CaptureView {
    /// The card's key.
    pub key: String,
    /// The card's id.
    pub card_id: String,
    /// What happened.
    pub status: CaptureStatus,
    /// Whether a card now holds the question.
    pub captured: bool,
}

/// `open_decisions` / `open_decision` / `ask` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OpenDecisionsOutput {
    /// Per card, in batch order.
    pub captures: Vec<CaptureView>,
    /// How many cards hold the Planner's questions (new and replayed).
    pub captured: usize,
    /// A sentence for the turn's summary, e.g. "added 1 decision; 1 decision
    /// already in the document".
    pub summary: String,
    /// The document's revision after the batch (new cards are mirrored into
    /// the document, which makes a revision). Its outline is remembered as
    /// read: write the next batch or edit from it.
    pub revision: i64,
}

/// A refused tool call: nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolRefusal {
    /// Stable code (see [`RefusalCode`]): for a batch or edit one of the
    /// address causes, `different_decision`, `stale_revision`, `no_access`,
    /// `invalid_input`, `archived` or `internal`; for `update_plan` (SPEC
    /// U2–U5) `invalid_plan`, `stale_revision` or `stop_requested` (a
    /// call for a turn that is over gets the link refusal `unknown_turn`); for a call in flight when the server stopped,
    /// `interrupted` (SPEC W1); for a name the session does not offer,
    /// `unknown_tool`.
    pub code: RefusalCode,
    /// Names the key and the cause.
    pub message: String,
    /// Whether reading the document again is the remedy.
    pub read_again: bool,
    /// Set only when the server could not decide (it failed; nothing was
    /// acknowledged): the same call may succeed later (SPEC L6). Every
    /// other refusal is a decision, and retrying it changes nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retry: bool,
}

/// `read_document` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReadDocumentOutput {
    /// The revision read; write batches against it.
    pub revision: i64,
    /// Its blocks.
    pub outline: Vec<BlockEntry>,
}

/// A [`ReadDocumentOutput`] already encoded as its JSON: how the server
/// sends a read. A read of 10,000 blocks is megabytes of text; writing it
/// once, straight from the outline, costs a fraction of building a
/// [`BlockEntry`] per block and encoding those. Readers decode
/// [`ReadDocumentOutput`]; only a writer makes one of these. Shared, so a
/// read kept for the next reader of its revision is never copied; its
/// buffer is the writer's own, taken over rather than copied, and given
/// back to the writer when the last holder is done ([`Self::into_json`]).
#[derive(Clone, Debug)]
pub struct EncodedRead(std::sync::Arc<String>);

impl EncodedRead {
    /// `json`, which must be a `read_document` output's encoding. It is
    /// checked to be JSON, so a fault in its maker can never put a broken
    /// frame on the wire.
    pub fn new(json: String) -> Result<Self, serde_json::Error> {
        checked(&json)?;
        Ok(EncodedRead(json.into()))
    }

    /// `json` from a writer that writes JSON by construction, not checked
    /// again: checking a read's megabytes costs much of what writing them
    /// does. The one such writer is the decisions crate's, whose tests
    /// hold every read it writes, over random edits and texts that need
    /// escaping, to the bytes serde writes. Debug builds still check.
    /// Whatever encodes it through serde checks it there
    /// ([`Serialize`]); only a writer that splices [`Self::json`] into a
    /// frame by hand relies on this.
    pub fn written(json: String) -> Self {
        debug_assert!(checked(&json).is_ok(), "a read writer wrote broken JSON");
        EncodedRead(json.into())
    }

    /// The encoding.
    pub fn json(&self) -> &str {
        &self.0
    }

    /// The encoding's buffer, if nothing else holds this read: a writer
    /// writes its next read into it rather than into megabytes of pages
    /// new to the process.
    pub fn into_json(self) -> Option<String> {
        std::sync::Arc::try_unwrap(self.0).ok()
    }

    /// Decoded; what a reader gets.
    pub fn decode(&self) -> Result<ReadDocumentOutput, serde_json::Error> {
        serde_json::from_str(self.json())
    }
}

impl PartialEq for EncodedRead {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl Eq for EncodedRead {}

impl Serialize for EncodedRead {
    /// As its JSON, checked on the way (without a copy): a read written
    /// unchecked is never sent broken through serde.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        checked(self.json())
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

/// `json` as raw JSON, once checked to be JSON; borrowed, not copied.
fn checked(json: &str) -> Result<&serde_json::value::RawValue, serde_json::Error> {
    serde_json::from_str(json)
}

/// One change to the document's blocks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum EditInput {
    /// A new block after `after` (at the start when absent).
    Insert {
        /// The block it follows.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<PassageAddress>,
        /// `paragraph` or `heading`.
        kind: String,
        /// Heading level 1–3 (headings only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        level: Option<u8>,
        /// The text, ≤ 10000 bytes.
        text: String,
    },
    /// New text for a block, keeping the block (and its identity).
    Replace {
        /// The block.
        at: PassageAddress,
        /// The text.
        text: String,
    },
    /// Removes a block.
    Delete {
        /// The block.
        at: PassageAddress,
    },
}

/// `edit_plan` input: edits addressed at the current revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditPlanInput {
    /// Must be the current revision.
    pub revision: i64,
    /// 1–64 edits, all addressed in the outline of `revision`.
    pub edits: Vec<EditInput>,
}

/// `edit_plan` result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EditPlanOutput {
    /// The revision the edit made; its outline is remembered as read, so a
    /// batch written from it survives later edits by others.
    pub revision: i64,
    /// That revision's blocks.
    pub outline: Vec<BlockEntry>,
}

/// A choice on a card.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChoiceView {
    /// Stable id (`c1`… the Planner's, `p1`… people's).
    pub id: String,
    /// The label (untrusted text: render as text).
    pub label: String,
    /// Who added it; absent for the Planner's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_by: Option<String>,
}

/// An answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum AnswerBody {
    /// Choice ids (one for single choice).
    Choices(Vec<String>),
    /// Words (free text).
    Text(String),
    /// Yes or no.
    Yes(bool),
}

/// A card as people and editors see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DecisionCardView {
    /// Id.
    pub id: String,
    /// The Planner's key.
    pub key: String,
    /// The question.
    pub question: String,
    /// Context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Response kind.
    pub response: String,
    /// Choices.
    pub choices: Vec<ChoiceView>,
    /// Criteria people added.
    pub criteria: Vec<String>,
    /// Identities (`client:clock`) of the blocks it stands beside.
    pub anchors: Vec<String>,
    /// `open`, `answered`, `reopened`, `discarded` or `cancelled`.
    pub state: String,
    /// The answer, if answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<AnswerBody>,
    /// Who answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    /// What its first paragraph said when the card was opened (at most 160
    /// characters, `…` where cut): where it stood, once that paragraph is
    /// gone. Absent for cards opened before Margin kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
}

/// `GET /documents/{id}/decisions`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DecisionList {
    /// Cards, oldest first.
    pub decisions: Vec<DecisionCardView>,
}

/// `POST …/decisions/{card}/options` body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddOption {
    /// The new choice's label.
    pub label: String,
}

/// `POST …/decisions/{card}/criteria` body.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddCriterion {
    /// The criterion.
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::round_trip;

    fn passage() -> PassageAddress {
        PassageAddress {
            index: 1,
            digest: "ab".into(),
        }
    }

    #[test]
    fn an_encoded_read_gives_its_buffer_back_only_to_its_last_holder() {
        let json = String::from(r#"{"revision":1,"outline":[]}"#);
        let at = json.as_ptr();
        let read = EncodedRead::written(json);
        assert_eq!(read.json().as_ptr(), at, "taken over, not copied");
        let held = read.clone();
        assert!(read.into_json().is_none(), "another still holds it");
        let back = held.into_json().expect("the last holder");
        assert_eq!(back.as_ptr(), at);
    }

    #[test]
    fn tool_inputs_round_trip() {
        round_trip(
            OpenDecisionsInput {
                revision: 3,
                cards: vec![CardInput {
                    key: "k".into(),
                    question: "Q?".into(),
                    description: None,
                    response: "yes_no".into(),
                    choices: vec![],
                    passages: vec![passage()],
                }],
            },
            r#"{"revision":3,"cards":[{"key":"k","question":"Q?","response":"yes_no","choices":[],"passages":[{"index":1,"digest":"ab"}]}]}"#,
        );
        round_trip(
            EditPlanInput {
                revision: 2,
                edits: vec![
                    EditInput::Insert {
                        after: None,
                        kind: "heading".into(),
                        level: Some(2),
                        text: "Risks".into(),
                    },
                    EditInput::Replace {
                        at: passage(),
                        text: "New".into(),
                    },
                    EditInput::Delete { at: passage() },
                ],
            },
            r#"{"revision":2,"edits":[{"op":"insert","kind":"heading","level":2,"text":"Risks"},{"op":"replace","at":{"index":1,"digest":"ab"},"text":"New"},{"op":"delete","at":{"index":1,"digest":"ab"}}]}"#,
        );
    }

    #[test]
    fn outputs_and_cards_round_trip() {
        round_trip(
            OpenDecisionsOutput {
                captures: vec![CaptureView {
                    key: "k".into(),
                    card_id: "c".into(),
                    status: CaptureStatus::AlreadyInDocument,
                    captured: true,
                }],
                captured: 1,
                summary: "1 decision already in the document".into(),
                revision: 9,
            },
            r#"{"captures":[{"key":"k","card_id":"c","status":"already_in_document","captured":true}],"captured":1,"summary":"1 decision already in the document","revision":9}"#,
        );
        round_trip(
            DecisionCardView {
                id: "c".into(),
                key: "k".into(),
                question: "Q?".into(),
                description: None,
                response: "single_choice".into(),
                choices: vec![ChoiceView {
                    id: "p1".into(),
                    label: "Both".into(),
                    added_by: Some("bo".into()),
                }],
                criteria: vec!["cost".into()],
                anchors: vec!["7:0".into()],
                state: "answered".into(),
                answer: Some(AnswerBody::Choices(vec!["p1".into()])),
                answered_by: Some("bo".into()),
                excerpt: Some("Pick a region".into()),
            },
            r#"{"id":"c","key":"k","question":"Q?","response":"single_choice","choices":[{"id":"p1","label":"Both","added_by":"bo"}],"criteria":["cost"],"anchors":["7:0"],"state":"answered","answer":{"choices":["p1"]},"answered_by":"bo","excerpt":"Pick a region"}"#,
        );
        round_trip(AnswerBody::Yes(false), r#"{"yes":false}"#);
        round_trip(
            AnswerBody::Text("EU first".into()),
            r#"{"text":"EU first"}"#,
        );
        round_trip(
            ToolRefusal {
                code: RefusalCode::TwinNow,
                message: "m".into(),
                read_again: true,
                retry: false,
            },
            r#"{"code":"twin_now","message":"m","read_again":true}"#,
        );
        round_trip(
            ToolRefusal {
                code: RefusalCode::Internal,
                message: "m".into(),
                read_again: false,
                retry: true,
            },
            r#"{"code":"internal","message":"m","read_again":false,"retry":true}"#,
        );
    }

    #[test]
    fn malformed_inputs_are_refused() {
        assert!(serde_json::from_str::<EditInput>(
            r#"{"op":"rename","at":{"index":0,"digest":"a"}}"#
        )
        .is_err());
        assert!(serde_json::from_str::<AnswerBody>(r#"{"choices":["a"],"text":"b"}"#).is_err());
        assert!(serde_json::from_str::<PassageAddress>(r#"{"index":-1,"digest":"a"}"#).is_err());
    }
}
