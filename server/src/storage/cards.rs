//! Decision cards (SPEC D): created a batch at a time, all or nothing, and
//! changed by people one version at a time.

use margin_decisions::{
    wire, Anchor, Answer, BlockIdentity, CardState, Choice, DecisionCard, Digest, Key, ResponseKind,
};
use margin_protocol::decisions::{AnswerBody, ChoiceView};
use sqlx::any::AnyRow;
use sqlx::Row;

use super::statement::{Check, Refusal, Statement};
use super::{int, now_ms, Backend, StorageError, Store};

/// A stored card and the version a change must start from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCard {
    /// The card.
    pub card: DecisionCard,
    /// Bumped by every change; a change from an older version is refused.
    pub version: i64,
}

const COLUMNS: &str = "id, card_key, question, description, response, choices, criteria, anchors, \
     state, answer, answered_by, excerpt, version";

impl Store {
    /// Creates `cards` on document `id` in one transaction: all or none. A
    /// key that already exists is a [`StorageError::Conflict`].
    pub async fn create_cards(&self, id: &str, cards: &[DecisionCard]) -> Result<(), StorageError> {
        self.commit_write(insert_cards(self.backend(), id, cards))
            .await
    }

    /// How many cards, of every document, wait on an answer (open or
    /// reopened), for `/metrics`.
    pub async fn open_decision_count(&self) -> Result<i64, StorageError> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS open FROM decision_cards WHERE state IN ('open', 'reopened')",
        )
        .fetch_one(&self.pool)
        .await?;
        int(&row, "open")
    }

    /// Every card of document `id`, oldest first.
    pub async fn cards(&self, id: &str) -> Result<Vec<StoredCard>, StorageError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM decision_cards WHERE document_id = $1 ORDER BY created_at, id"
        );
        let rows = sqlx::query(&sql).bind(id).fetch_all(&self.pool).await?;
        rows.iter().map(decode).collect()
    }

    /// Card `card` of document `id`.
    pub async fn card(&self, id: &str, card: &str) -> Result<StoredCard, StorageError> {
        let sql =
            format!("SELECT {COLUMNS} FROM decision_cards WHERE document_id = $1 AND id = $2");
        let row = sqlx::query(&sql)
            .bind(id)
            .bind(card)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StorageError::NotFound("decision"))?;
        decode(&row)
    }

    /// Writes a change to a card, at its new version, if the row still
    /// holds the version before (see [`update_cards`]). The server's own
    /// changes ride with the document change that mirrors them; this one
    /// alone writes the row without its mirror, as a crash between the two
    /// once could.
    pub async fn update_card(&self, id: &str, changed: &StoredCard) -> Result<(), StorageError> {
        self.commit_write(update_cards(id, std::slice::from_ref(changed)))
            .await
    }
}

/// The statements that write each of `changed` at its new version: fenced
/// on the version before, so a change made from an older copy of the card
/// is refused and writes nothing (a [`StorageError::Conflict`]).
pub(super) fn update_cards(id: &str, changed: &[StoredCard]) -> Vec<Statement> {
    changed
        .iter()
        .map(|stored| {
            let card = &stored.card;
            Statement::new(
                "UPDATE decision_cards SET choices = $1, criteria = $2, state = $3, answer = $4, \
                 answered_by = $5, version = $6 \
                 WHERE document_id = $7 AND id = $8 AND version = $9",
                vec![
                    encode_choices(&card.choices).into(),
                    encode_json(&card.criteria).into(),
                    card.state.as_str().into(),
                    card.answer.as_ref().map(encode_answer).into(),
                    card.answered_by.as_deref().into(),
                    stored.version.into(),
                    id.into(),
                    card.id.as_str().into(),
                    (stored.version - 1).into(),
                ],
            )
            .checked(Check::One(Refusal::Card(card.id.clone())))
        })
        .collect()
}

/// Cards per multi-row `INSERT`: 14 parameters each, well under SQLite's
/// and PostgreSQL's limits on parameters per statement.
const CARDS_PER_INSERT: usize = 64;

/// The statements that insert `cards` of document `id`, one per
/// [`CARDS_PER_INSERT`] (a statement per card made a batch of 32 wait on
/// 32 driver round trips through `sqlx`). A key that already exists is a
/// [`StorageError::Conflict`].
///
/// On SQLite every parameter is an anonymous `?`, bound by its place, not
/// looked up by a name; PostgreSQL numbers them.
pub(super) fn insert_cards(backend: Backend, id: &str, cards: &[DecisionCard]) -> Vec<Statement> {
    // Every column but `version`, which starts at 1.
    const PARAMS: usize = 14;
    let created_at = now_ms();
    cards
        .chunks(CARDS_PER_INSERT)
        .map(|batch| {
            let rows: Vec<String> = (0..batch.len())
                .map(|row| {
                    let param = |column: usize| match backend {
                        Backend::Sqlite => "?".to_owned(),
                        Backend::Postgres => format!("${}", row * PARAMS + column),
                    };
                    let leading: Vec<String> = (1..PARAMS).map(param).collect();
                    format!("({}, 1, {})", leading.join(", "), param(PARAMS))
                })
                .collect();
            let sql = format!(
                "INSERT INTO decision_cards (id, document_id, card_key, question, description, response, \
                 choices, criteria, anchors, state, answer, answered_by, excerpt, version, created_at) \
                 VALUES {}",
                rows.join(", ")
            );
            let mut values = Vec::with_capacity(batch.len() * PARAMS);
            for card in batch {
                values.extend([
                    card.id.as_str().into(),
                    id.into(),
                    card.key.as_str().into(),
                    card.question.as_str().into(),
                    card.description.as_deref().into(),
                    card.response.as_str().into(),
                    encode_choices(&card.choices).into(),
                    encode_json(&card.criteria).into(),
                    encode_anchors(&card.anchors).into(),
                    card.state.as_str().into(),
                    card.answer.as_ref().map(encode_answer).into(),
                    card.answered_by.as_deref().into(),
                    card.excerpt.as_deref().into(),
                    created_at.into(),
                ]);
            }
            Statement::new(sql, values).checked(Check::Unique("a card key of this batch was just taken"))
        })
        .collect()
}

fn decode(row: &AnyRow) -> Result<StoredCard, StorageError> {
    let corrupt = |what: &str| StorageError::Corrupt(format!("decision card {what}"));
    let key: String = row.try_get("card_key")?;
    let response: String = row.try_get("response")?;
    let state: String = row.try_get("state")?;
    let choices: Vec<ChoiceView> =
        decode_json(&row.try_get::<String, _>("choices")?).ok_or_else(|| corrupt("choices"))?;
    let anchors: Vec<(String, String)> =
        decode_json(&row.try_get::<String, _>("anchors")?).ok_or_else(|| corrupt("anchors"))?;
    let answer: Option<String> = row.try_get("answer")?;
    let card = DecisionCard {
        id: row.try_get("id")?,
        key: Key::parse(&key).map_err(|_| corrupt("key"))?,
        question: row.try_get("question")?,
        description: row.try_get("description")?,
        response: ResponseKind::parse(&response).ok_or_else(|| corrupt("response"))?,
        choices: choices
            .into_iter()
            .map(|c| Choice {
                id: c.id,
                label: c.label,
                added_by: c.added_by,
            })
            .collect(),
        criteria: decode_json(&row.try_get::<String, _>("criteria")?)
            .ok_or_else(|| corrupt("criteria"))?,
        anchors: anchors
            .iter()
            .map(|(identity, digest)| {
                Some(Anchor {
                    identity: BlockIdentity::parse(identity)?,
                    digest: Digest::from_hex(digest)?,
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| corrupt("anchors"))?,
        state: CardState::parse(&state).ok_or_else(|| corrupt("state"))?,
        answer: match answer {
            Some(json) => Some(decode_answer(&json).ok_or_else(|| corrupt("answer"))?),
            None => None,
        },
        answered_by: row.try_get("answered_by")?,
        excerpt: row.try_get("excerpt")?,
    };
    Ok(StoredCard {
        card,
        version: int(row, "version")?,
    })
}

fn encode_json<T: serde::Serialize>(value: &T) -> String {
    // Serialising plain strings and vectors cannot fail.
    serde_json::to_string(value).unwrap_or_default()
}

fn decode_json<T: serde::de::DeserializeOwned>(json: &str) -> Option<T> {
    serde_json::from_str(json).ok()
}

fn encode_choices(choices: &[Choice]) -> String {
    let views: Vec<ChoiceView> = choices
        .iter()
        .map(|c| ChoiceView {
            id: c.id.clone(),
            label: c.label.clone(),
            added_by: c.added_by.clone(),
        })
        .collect();
    encode_json(&views)
}

fn encode_anchors(anchors: &[Anchor]) -> String {
    let pairs: Vec<(String, String)> = anchors
        .iter()
        .map(|a| (a.identity.to_string(), a.digest.to_hex()))
        .collect();
    encode_json(&pairs)
}

fn encode_answer(answer: &Answer) -> String {
    encode_json(&wire::answer_body(answer))
}

fn decode_answer(json: &str) -> Option<Answer> {
    decode_json::<AnswerBody>(json).map(wire::answer)
}
