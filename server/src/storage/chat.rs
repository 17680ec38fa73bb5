//! A document's Chat (SPEC T1, T2, P4): an append-only log numbered per
//! document.

use margin_protocol::chat::{ChatKind, ChatMessageView};
use sqlx::any::AnyRow;
use sqlx::Row;
use uuid::Uuid;

use super::{int, now_ms, StorageError, Store};

/// How many times an append retries after losing a race for a number.
const APPEND_RETRIES: usize = 5;

fn decode(row: &AnyRow) -> Result<ChatMessageView, StorageError> {
    let kind: String = row.try_get("kind")?;
    Ok(ChatMessageView {
        seq: int(row, "seq")?,
        author: row.try_get("author")?,
        kind: ChatKind::parse(&kind).ok_or_else(|| StorageError::Corrupt("chat kind".into()))?,
        text: row.try_get("body")?,
        created_at: int(row, "created_at")?,
    })
}

impl Store {
    /// Appends a message to document `id`'s Chat and returns it.
    pub async fn append_chat(
        &self,
        id: &str,
        author: &str,
        kind: ChatKind,
        text: &str,
    ) -> Result<ChatMessageView, StorageError> {
        let created_at = now_ms();
        for _ in 0..APPEND_RETRIES {
            let inserted = sqlx::query(
                "INSERT INTO chat_messages (id, document_id, seq, author, kind, body, created_at) \
                 SELECT $1, $2, COALESCE(MAX(seq), 0) + 1, $3, $4, $5, $6 FROM chat_messages WHERE document_id = $2 \
                 RETURNING seq",
            )
            .bind(Uuid::new_v4().to_string())
            .bind(id)
            .bind(author)
            .bind(kind.as_str())
            .bind(text)
            .bind(created_at)
            .fetch_one(&mut *self.writes().await?)
            .await;
            match inserted {
                Ok(row) => {
                    return Ok(ChatMessageView {
                        seq: int(&row, "seq")?,
                        author: author.to_owned(),
                        kind,
                        text: text.to_owned(),
                        created_at,
                    })
                }
                // Another message took the number: take the next one.
                Err(sqlx::Error::Database(e)) if e.is_unique_violation() => continue,
                Err(other) => return Err(other.into()),
            }
        }
        Err(StorageError::Conflict("chat is too busy; try again".into()))
    }

    /// Document `id`'s messages after `after`, oldest first, at most `limit`.
    pub async fn chat(
        &self,
        id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<ChatMessageView>, StorageError> {
        let rows = sqlx::query(
            "SELECT seq, author, kind, body, created_at FROM chat_messages \
             WHERE document_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(decode).collect()
    }
}
