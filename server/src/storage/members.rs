//! Who a document is shared with, and as what (SPEC A1): the owner, who
//! created it, and the editors and viewers the owner added.

use margin_protocol::Role;
use sqlx::Row;

use super::{Account, StorageError, Store};

impl Store {
    /// Document `id`'s members and their roles: the owner first, then the
    /// rest by account name (compared as bytes, so both backends agree
    /// whatever their collation).
    pub async fn members(&self, id: &str) -> Result<Vec<(String, Role)>, StorageError> {
        let rows = sqlx::query(
            "SELECT a.name, m.role FROM members m JOIN accounts a ON a.id = m.account_id \
             WHERE m.document_id = $1",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        let mut members = rows
            .iter()
            .map(|row| {
                let role: String = row.try_get("role")?;
                let role = Role::parse(&role).ok_or(StorageError::NotFound("role"))?;
                Ok((row.try_get::<String, _>("name")?, role))
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        members.sort_by(|(a, a_role), (b, b_role)| {
            (*a_role != Role::Owner, a.as_bytes()).cmp(&(*b_role != Role::Owner, b.as_bytes()))
        });
        Ok(members)
    }

    /// Gives `member` `role` on document `id`, or changes the role it has.
    /// The owner's own role cannot be changed this way.
    pub async fn set_member(
        &self,
        id: &str,
        member: &Account,
        role: Role,
    ) -> Result<(), StorageError> {
        if role == Role::Owner {
            return Err(StorageError::Conflict(
                "a document has exactly one owner; add members as editor or viewer".into(),
            ));
        }
        // One statement, so SQLite takes the write lock at once: a read
        // followed by a write in one transaction can fail with "database is
        // locked" when another writer slips between them.
        let done = sqlx::query(
            "INSERT INTO members (document_id, account_id, role) VALUES ($1, $2, $3) \
             ON CONFLICT (document_id, account_id) DO UPDATE SET role = excluded.role \
             WHERE members.role <> 'owner'",
        )
        .bind(id)
        .bind(&member.id)
        .bind(role.as_str())
        .execute(&mut *self.writes().await?)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StorageError::Conflict(format!(
                "{} owns this document; the owner's role cannot change",
                member.name
            )));
        }
        Ok(())
    }

    /// Takes document `id` away from the member named `name`. The owner
    /// cannot be removed ([`StorageError::Conflict`]); an account that is
    /// not a member, or no account at all, is `NotFound("member")`.
    pub async fn remove_member(&self, id: &str, name: &str) -> Result<(), StorageError> {
        // One statement, for the reason `set_member` gives.
        let done = sqlx::query(
            "DELETE FROM members WHERE document_id = $1 AND role <> 'owner' \
             AND account_id = (SELECT id FROM accounts WHERE name = $2)",
        )
        .bind(id)
        .bind(name)
        .execute(&mut *self.writes().await?)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        // Nothing removed: the owner, or nobody to remove.
        match self.member_role(id, name).await? {
            Some(Role::Owner) => Err(StorageError::Conflict(format!(
                "{name} owns this document, and a document always has its owner; \
                 the owner can delete the document instead"
            ))),
            // Added meanwhile is still not removed: it was not a member
            // when the delete ran.
            Some(Role::Editor | Role::Viewer) | None => Err(StorageError::NotFound("member")),
        }
    }

    /// The role of the account named `name` on document `id`; `None` when
    /// it is not a member (or no account has that name).
    pub async fn member_role(&self, id: &str, name: &str) -> Result<Option<Role>, StorageError> {
        let row = sqlx::query(
            "SELECT m.role FROM members m JOIN accounts a ON a.id = m.account_id \
             WHERE m.document_id = $1 AND a.name = $2",
        )
        .bind(id)
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let role: String = row.try_get("role")?;
        Role::parse(&role)
            .map(Some)
            .ok_or(StorageError::NotFound("role"))
    }
}
