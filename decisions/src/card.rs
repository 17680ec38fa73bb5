//! Decision cards: what the Planner asks people to decide, anchored to blocks.

use std::fmt;

use crate::block::{BlockIdentity, Digest};

/// Bounds on a card, in UTF-8 bytes or counts (SPEC A2).
pub mod limits {
    /// Longest key.
    pub const KEY_BYTES: usize = 128;
    /// Longest question.
    pub const QUESTION_BYTES: usize = 500;
    /// Longest description.
    pub const DESCRIPTION_BYTES: usize = 4000;
    /// Most choices, including those people add.
    pub const CHOICES: usize = 24;
    /// Longest choice label or criterion.
    pub const LABEL_BYTES: usize = 200;
    /// Most criteria people may add.
    pub const CRITERIA: usize = 24;
    /// Most passages one card is anchored to.
    pub const PASSAGES: usize = 8;
    /// Most cards in one `open_decisions` batch.
    pub const BATCH: usize = 32;
    /// Longest free-text answer.
    pub const ANSWER_BYTES: usize = 4000;
}

/// The Planner's stable name for a card within a document (SPEC D2).
/// 1–128 bytes of ASCII letters, digits and `.`, `_`, `-`, `:`, `/`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    /// Checks and wraps a key.
    pub fn parse(key: &str) -> Result<Key, String> {
        if key.is_empty() || key.len() > limits::KEY_BYTES {
            return Err(format!("keys are 1 to {} bytes", limits::KEY_BYTES));
        }
        if !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'/'))
        {
            return Err("keys use only ASCII letters, digits and . _ - : /".into());
        }
        Ok(Key(key.to_owned()))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How people answer a card.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResponseKind {
    /// Exactly one of the choices.
    SingleChoice,
    /// One or more of the choices.
    MultipleChoice,
    /// Words.
    FreeText,
    /// Yes or no; the card has no choices.
    YesNo,
}

impl ResponseKind {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ResponseKind::SingleChoice => "single_choice",
            ResponseKind::MultipleChoice => "multiple_choice",
            ResponseKind::FreeText => "free_text",
            ResponseKind::YesNo => "yes_no",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<ResponseKind> {
        [
            ResponseKind::SingleChoice,
            ResponseKind::MultipleChoice,
            ResponseKind::FreeText,
            ResponseKind::YesNo,
        ]
        .into_iter()
        .find(|kind| kind.as_str() == name)
    }

    /// Whether answers pick from choices.
    pub fn has_choices(self) -> bool {
        matches!(
            self,
            ResponseKind::SingleChoice | ResponseKind::MultipleChoice
        )
    }
}

/// A card's life (SPEC D): `open` → `answered`; `answered` or `discarded` →
/// `reopened` → `answered`; `discarded` from `open`, `answered` or
/// `reopened`; `cancelled` (by the system) ends it. Only `open`, `answered`
/// and `reopened` still hold the question (SPEC D4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CardState {
    /// Waiting for an answer.
    Open,
    /// Answered by a person.
    Answered,
    /// Reopened after an answer; waiting again.
    Reopened,
    /// Set aside by a person.
    Discarded,
    /// Withdrawn by the system (its question no longer stands).
    Cancelled,
}

impl CardState {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CardState::Open => "open",
            CardState::Answered => "answered",
            CardState::Reopened => "reopened",
            CardState::Discarded => "discarded",
            CardState::Cancelled => "cancelled",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<CardState> {
        [
            CardState::Open,
            CardState::Answered,
            CardState::Reopened,
            CardState::Discarded,
            CardState::Cancelled,
        ]
        .into_iter()
        .find(|state| state.as_str() == name)
    }

    /// Whether a card in this state still holds its question (SPEC D4).
    pub fn holds_question(self) -> bool {
        matches!(
            self,
            CardState::Open | CardState::Answered | CardState::Reopened
        )
    }
}

/// One option people can pick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Stable id: `c1`, `c2`, … for the Planner's, `p1`, `p2`, … for people's.
    pub id: String,
    /// What it says.
    pub label: String,
    /// The account that added it; `None` for the Planner's own.
    pub added_by: Option<String>,
}

/// Where a card stands: the block it was opened on, by identity, and what
/// that block said then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Anchor {
    /// The block's identity; stable while the block lives.
    pub identity: BlockIdentity,
    /// The digest the Planner addressed.
    pub digest: Digest,
}

/// A block address as the Planner gives it: position and digest at a
/// revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Passage {
    /// Index in the outline of that revision.
    pub index: usize,
    /// The block's digest then.
    pub digest: Digest,
}

/// A person's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Choice ids picked.
    Choices(Vec<String>),
    /// Words.
    Text(String),
    /// Yes (`true`) or no.
    YesNo(bool),
}

/// What the Planner asks for: a validated card input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CardSpec {
    /// The Planner's stable key.
    pub key: Key,
    /// The question.
    pub question: String,
    /// Optional context.
    pub description: Option<String>,
    /// How it is answered.
    pub response: ResponseKind,
    /// Choice labels, in order (empty for free text and yes/no).
    pub choices: Vec<String>,
    /// The blocks it concerns, at the batch's revision.
    pub passages: Vec<Passage>,
}

/// A stored decision card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionCard {
    /// Server-assigned id.
    pub id: String,
    /// The Planner's key.
    pub key: Key,
    /// The question.
    pub question: String,
    /// Optional context.
    pub description: Option<String>,
    /// How it is answered.
    pub response: ResponseKind,
    /// The Planner's choices, then those people added.
    pub choices: Vec<Choice>,
    /// Criteria people added to weigh the choices.
    pub criteria: Vec<String>,
    /// Where it stands.
    pub anchors: Vec<Anchor>,
    /// Its state.
    pub state: CardState,
    /// The answer, kept apart from the prose so rewriting a paragraph never
    /// changes what was decided.
    pub answer: Option<Answer>,
    /// Who answered.
    pub answered_by: Option<String>,
    /// What its first block said when the card was opened, cut to
    /// [`EXCERPT_CHARS`]: how people recognise where it stood once that
    /// block is gone. Never compared: a replay does not look at it.
    pub excerpt: Option<String>,
}

/// Most characters of a block a card keeps as its excerpt.
pub const EXCERPT_CHARS: usize = 160;

/// `text` cut to [`EXCERPT_CHARS`] characters, with `…` where it was cut.
pub fn excerpt(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(EXCERPT_CHARS) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", text[..end].trim_end()),
    }
}

impl DecisionCard {
    /// The Planner's own choice labels, in order (people's excluded).
    pub fn planner_choices(&self) -> impl Iterator<Item = &str> {
        self.choices
            .iter()
            .filter(|c| c.added_by.is_none())
            .map(|c| c.label.as_str())
    }
}

/// Checks free text: non-blank, within `max` bytes, no control characters
/// (newlines and tabs allowed where `multiline`).
pub fn check_text(what: &str, text: &str, max: usize, multiline: bool) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err(format!("the {what} is blank"));
    }
    if text.len() > max {
        return Err(format!(
            "the {what} is {} bytes; the limit is {max}",
            text.len()
        ));
    }
    let allowed = |c: char| multiline && matches!(c, '\n' | '\t');
    if text.chars().any(|c| c.is_control() && !allowed(c)) {
        return Err(format!("the {what} contains control characters"));
    }
    Ok(())
}

impl CardSpec {
    /// Checks a card's bounds (SPEC A2); the error names the rule.
    pub fn validate(&self) -> Result<(), String> {
        check_text("question", &self.question, limits::QUESTION_BYTES, false)?;
        if let Some(description) = &self.description {
            check_text("description", description, limits::DESCRIPTION_BYTES, true)?;
        }
        match (self.response.has_choices(), self.choices.len()) {
            (true, n) if n < 2 => {
                return Err(format!(
                    "a {} card needs at least 2 choices",
                    self.response.as_str()
                ))
            }
            (true, n) if n > limits::CHOICES => {
                return Err(format!("at most {} choices", limits::CHOICES))
            }
            (false, n) if n > 0 => {
                return Err(format!("a {} card has no choices", self.response.as_str()))
            }
            _ => {}
        }
        for (i, choice) in self.choices.iter().enumerate() {
            check_text(
                &format!("choice {}", i + 1),
                choice,
                limits::LABEL_BYTES,
                false,
            )?;
            if self.choices[..i].contains(choice) {
                return Err(format!("choice {:?} is listed twice", choice));
            }
        }
        if self.passages.is_empty() || self.passages.len() > limits::PASSAGES {
            return Err(format!("a card has 1 to {} passages", limits::PASSAGES));
        }
        Ok(())
    }
}
