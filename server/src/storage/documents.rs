//! Documents as their members see them (SPEC A1 roles), archiving and
//! deleting (SPEC P3). Who is a member is `members`.

use margin_protocol::Role;
use sqlx::any::AnyRow;
use sqlx::Row;
use uuid::Uuid;

use super::{int, now_ms, Account, StorageError, Store};

/// A document's row, with the role of the account that looked it up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentRow {
    /// Opaque id.
    pub id: String,
    /// Title given at creation.
    pub title: String,
    /// Published changes so far (SPEC S3).
    pub revision: i64,
    /// The looking account's role.
    pub role: Role,
    /// Whether the owner archived it (read-only until unarchived).
    pub archived: bool,
    /// When it was created (ms since the Unix epoch).
    pub created_at: i64,
    /// When its text last changed, if ever (ms since the Unix epoch).
    pub edited_at: Option<i64>,
    /// Who made that change: an account's name, or `planner`.
    pub edited_by: Option<String>,
}

impl DocumentRow {
    fn from_row(row: &AnyRow) -> Result<Self, StorageError> {
        let role: String = row.try_get("role")?;
        Ok(DocumentRow {
            id: row.try_get("id")?,
            title: row.try_get("title")?,
            revision: int(row, "revision")?,
            role: Role::parse(&role).ok_or(StorageError::NotFound("role"))?,
            archived: row.try_get::<Option<i64>, _>("archived_at")?.is_some(),
            created_at: int(row, "created_at")?,
            edited_at: row.try_get("edited_at")?,
            edited_by: row.try_get("edited_by")?,
        })
    }
}

const SELECT_FOR_MEMBER: &str = "SELECT d.id, d.title, d.revision, d.archived_at, \
     d.created_at, d.edited_at, d.edited_by, m.role \
     FROM documents d JOIN members m ON m.document_id = d.id";

impl Store {
    /// Creates a document owned by `owner`.
    pub async fn create_document(
        &self,
        owner: &Account,
        title: &str,
    ) -> Result<DocumentRow, StorageError> {
        let id = Uuid::new_v4().to_string();
        let created_at = now_ms();
        let mut writer = self.writes().await?;
        let mut tx = writer.begin().await?;
        sqlx::query(
            "INSERT INTO documents (id, title, owner_id, revision, created_at) VALUES ($1, $2, $3, 0, $4)",
        )
        .bind(&id)
        .bind(title)
        .bind(&owner.id)
        .bind(created_at)
        .execute(&mut *tx)
        .await?;
        sqlx::query("INSERT INTO members (document_id, account_id, role) VALUES ($1, $2, $3)")
            .bind(&id)
            .bind(&owner.id)
            .bind(Role::Owner.as_str())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(DocumentRow {
            id,
            title: title.to_owned(),
            revision: 0,
            role: Role::Owner,
            archived: false,
            created_at,
            edited_at: None,
            edited_by: None,
        })
    }

    /// The documents `account` is a member of, the most recently edited
    /// first; one never edited counts from its creation.
    pub async fn documents_of(&self, account: &Account) -> Result<Vec<DocumentRow>, StorageError> {
        let sql = format!(
            "{SELECT_FOR_MEMBER} WHERE m.account_id = $1 \
             ORDER BY COALESCE(d.edited_at, d.created_at) DESC, d.id"
        );
        let rows = sqlx::query(&sql)
            .bind(&account.id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(DocumentRow::from_row).collect()
    }

    /// Document `id` as `account` sees it; `NotFound` when it does not exist
    /// *or* the account is not a member, so existence never leaks.
    pub async fn document_for(
        &self,
        account: &Account,
        id: &str,
    ) -> Result<DocumentRow, StorageError> {
        let sql = format!("{SELECT_FOR_MEMBER} WHERE d.id = $1 AND m.account_id = $2");
        let row = sqlx::query(&sql)
            .bind(id)
            .bind(&account.id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StorageError::NotFound("document"))?;
        DocumentRow::from_row(&row)
    }

    /// The account that owns document `id`.
    pub async fn document_owner(&self, id: &str) -> Result<Account, StorageError> {
        let row = sqlx::query(
            "SELECT a.id, a.name FROM documents d JOIN accounts a ON a.id = d.owner_id WHERE d.id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StorageError::NotFound("document"))?;
        Ok(Account {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
        })
    }

    /// Renames document `id` to `title` (already checked); returns false,
    /// renaming nothing, when it is archived.
    pub async fn rename_document(&self, id: &str, title: &str) -> Result<bool, StorageError> {
        // One statement: the archive check and the write cannot be split
        // by an archive committing between them.
        let done =
            sqlx::query("UPDATE documents SET title = $1 WHERE id = $2 AND archived_at IS NULL")
                .bind(title)
                .bind(id)
                .execute(&mut *self.writes().await?)
                .await?;
        if done.rows_affected() == 1 {
            return Ok(true);
        }
        // Archived, or gone (NotFound).
        self.is_archived(id).await?;
        Ok(false)
    }

    /// Whether document `id` is archived.
    pub async fn is_archived(&self, id: &str) -> Result<bool, StorageError> {
        let row = sqlx::query("SELECT archived_at FROM documents WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StorageError::NotFound("document"))?;
        Ok(row.try_get::<Option<i64>, _>("archived_at")?.is_some())
    }

    /// Archives document `id` (or unarchives it when `archived` is false);
    /// returns whether that changed anything. Archiving an archived document
    /// keeps the time it was first archived.
    pub async fn set_archived(&self, id: &str, archived: bool) -> Result<bool, StorageError> {
        // One statement each way: no read-then-write for SQLite to lose.
        let done = if archived {
            sqlx::query(
                "UPDATE documents SET archived_at = $1 WHERE id = $2 AND archived_at IS NULL",
            )
            .bind(now_ms())
            .bind(id)
            .execute(&mut *self.writes().await?)
            .await?
        } else {
            sqlx::query(
                "UPDATE documents SET archived_at = NULL WHERE id = $1 AND archived_at IS NOT NULL",
            )
            .bind(id)
            .execute(&mut *self.writes().await?)
            .await?
        };
        if done.rows_affected() == 1 {
            return Ok(true);
        }
        // Nothing changed: already so, or no such document.
        self.is_archived(id).await?;
        Ok(false)
    }

    /// Deletes document `id` and everything under it — its update log and
    /// snapshot, decision cards, Chat and members — in one transaction.
    pub async fn delete_document(&self, id: &str) -> Result<(), StorageError> {
        let mut writer = self.writes().await?;
        let mut tx = writer.begin().await?;
        // Children first, so this holds whether or not the database enforces
        // (and cascades) the foreign keys; the document row last says
        // whether there was anything to delete. A session's journal, events
        // and domain snapshot go before the session, which holds the
        // document.
        for table in [
            "session_journal",
            "session_events",
            "planner_session_domains",
        ] {
            sqlx::query(&format!(
                "DELETE FROM {table} WHERE session_id IN \
                 (SELECT id FROM planner_sessions WHERE document_id = $1)"
            ))
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        for table in [
            "planner_sessions",
            "document_updates",
            "document_snapshots",
            "document_clients",
            "document_refused_updates",
            "decision_cards",
            "chat_messages",
            "members",
        ] {
            sqlx::query(&format!("DELETE FROM {table} WHERE document_id = $1"))
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        let done = sqlx::query("DELETE FROM documents WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            // Dropping the transaction rolls it back.
            return Err(StorageError::NotFound("document"));
        }
        tx.commit().await?;
        Ok(())
    }
}
