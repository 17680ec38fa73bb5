//! Conversions between the decision model and its wire shapes in
//! `margin-protocol`, by hand and in one place.

use margin_protocol::decisions::{
    AnswerBody, CaptureStatus, CaptureView, CardInput, ChoiceView, DecisionCardView, EditInput,
    OpenDecisionsOutput, PassageAddress,
};
use margin_protocol::BlockEntry;

use crate::capture::{Capture, CaptureSummary, InvalidInput, Outcome};
use crate::card::{Answer, CardSpec, DecisionCard, Key, Passage, ResponseKind};
use crate::edit::{BlockKind, Edit};
use crate::outline::Outline;

pub use crate::read_json::{encoded_read, encoded_read_into, ReadBuffers, WrittenRead};

fn invalid(key: Option<&Key>, message: impl Into<String>) -> InvalidInput {
    InvalidInput {
        key: key.cloned(),
        message: message.into(),
    }
}

/// A wire address as a passage.
pub fn passage(address: &PassageAddress) -> Result<Passage, String> {
    let digest = crate::Digest::from_hex(&address.digest)
        .ok_or_else(|| format!("digest {:?} is not 64 hex digits", address.digest))?;
    Ok(Passage {
        index: address.index,
        digest,
    })
}

/// A wire card as a card spec (bounds are checked by the engine).
pub fn card_spec(input: &CardInput) -> Result<CardSpec, InvalidInput> {
    let key =
        Key::parse(&input.key).map_err(|e| invalid(None, format!("key {:?}: {e}", input.key)))?;
    let response = ResponseKind::parse(&input.response).ok_or_else(|| {
        invalid(
            Some(&key),
            format!(
                "response {:?} is not one of single_choice, multiple_choice, free_text, yes_no",
                input.response
            ),
        )
    })?;
    let passages = input
        .passages
        .iter()
        .map(passage)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(Some(&key), e))?;
    Ok(CardSpec {
        question: input.question.clone(),
        description: input.description.clone(),
        response,
        choices: input.choices.clone(),
        passages,
        key,
    })
}

/// A wire edit as an edit.
pub fn edit(input: &EditInput) -> Result<Edit, String> {
    Ok(match input {
        EditInput::Insert {
            after,
            kind,
            level,
            text,
        } => Edit::Insert {
            after: after.as_ref().map(passage).transpose()?,
            kind: BlockKind::parse(kind, *level)?,
            text: text.clone(),
        },
        EditInput::Replace { at, text } => Edit::Replace {
            at: passage(at)?,
            text: text.clone(),
        },
        EditInput::Delete { at } => Edit::Delete { at: passage(at)? },
    })
}

/// An outline's blocks on the wire.
pub fn blocks(outline: &Outline) -> Vec<BlockEntry> {
    outline
        .blocks()
        .map(|b| BlockEntry {
            index: b.index,
            // `String::from`, not `to_string`: that goes through
            // `Display` and took far longer on a large outline.
            kind: String::from(&*b.kind),
            text: String::from(&*b.text),
            digest: b.digest.to_hex(),
            identity: b.identity.to_wire(),
        })
        .collect()
}

/// A batch's result on the wire, with the document's `revision` after it;
/// `id_of_created` gives the id of each created card.
pub fn captures(
    captures: &[Capture],
    revision: i64,
    id_of_created: impl Fn(&Key) -> String,
) -> OpenDecisionsOutput {
    let summary = CaptureSummary::of(captures);
    OpenDecisionsOutput {
        captures: captures
            .iter()
            .map(|c| {
                let (card_id, status) = match &c.outcome {
                    Outcome::Created(_) => (id_of_created(&c.key), CaptureStatus::Created),
                    Outcome::AlreadyInDocument { id, .. } if c.captured => {
                        (id.clone(), CaptureStatus::AlreadyInDocument)
                    }
                    Outcome::AlreadyInDocument { id, .. } => {
                        (id.clone(), CaptureStatus::NotCaptured)
                    }
                };
                CaptureView {
                    key: c.key.to_string(),
                    card_id,
                    status,
                    captured: c.captured,
                }
            })
            .collect(),
        captured: summary.captured(),
        summary: summary.to_string(),
        revision,
    }
}

/// An answer on the wire.
pub fn answer_body(answer: &Answer) -> AnswerBody {
    match answer {
        Answer::Choices(ids) => AnswerBody::Choices(ids.clone()),
        Answer::Text(text) => AnswerBody::Text(text.clone()),
        Answer::YesNo(yes) => AnswerBody::Yes(*yes),
    }
}

/// An answer from the wire.
pub fn answer(body: AnswerBody) -> Answer {
    match body {
        AnswerBody::Choices(ids) => Answer::Choices(ids),
        AnswerBody::Text(text) => Answer::Text(text),
        AnswerBody::Yes(yes) => Answer::YesNo(yes),
    }
}

/// A card on the wire.
pub fn card_view(card: &DecisionCard) -> DecisionCardView {
    DecisionCardView {
        id: card.id.clone(),
        key: card.key.to_string(),
        question: card.question.clone(),
        description: card.description.clone(),
        response: card.response.as_str().to_owned(),
        choices: card
            .choices
            .iter()
            .map(|c| ChoiceView {
                id: c.id.clone(),
                label: c.label.clone(),
                added_by: c.added_by.clone(),
            })
            .collect(),
        criteria: card.criteria.clone(),
        anchors: card
            .anchors
            .iter()
            .map(|a| a.identity.to_string())
            .collect(),
        state: card.state.as_str().to_owned(),
        answer: card.answer.as_ref().map(answer_body),
        answered_by: card.answered_by.clone(),
        excerpt: card.excerpt.clone(),
    }
}
