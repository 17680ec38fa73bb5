//! Accounts and their bearer tokens (SPEC A1). Tokens are stored only as
//! `blake3` hashes; the plain token is shown once, when issued.

use sqlx::Row;
use uuid::Uuid;

use super::{conflict_on_unique, now_ms, StorageError, Store};

/// A member account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    /// Opaque id.
    pub id: String,
    /// Unique name, shown to other members.
    pub name: String,
}

impl Store {
    /// Creates an account named `name`.
    pub async fn create_account(&self, name: &str) -> Result<Account, StorageError> {
        let id = Uuid::new_v4().to_string();
        sqlx::query("INSERT INTO accounts (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(&id)
            .bind(name)
            .bind(now_ms())
            .execute(&mut *self.writes().await?)
            .await
            .map_err(|e| {
                conflict_on_unique(e, || format!("an account named {name:?} already exists"))
            })?;
        Ok(Account {
            id,
            name: name.to_owned(),
        })
    }

    /// The account named `name`.
    pub async fn account_by_name(&self, name: &str) -> Result<Account, StorageError> {
        let row = sqlx::query("SELECT id, name FROM accounts WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StorageError::NotFound("account"))?;
        Ok(Account {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
        })
    }

    /// Records a token (by its hash) for `account`.
    pub async fn add_token(&self, account: &Account, token_hash: &str) -> Result<(), StorageError> {
        sqlx::query("INSERT INTO tokens (hash, account_id, created_at) VALUES ($1, $2, $3)")
            .bind(token_hash)
            .bind(&account.id)
            .bind(now_ms())
            .execute(&mut *self.writes().await?)
            .await?;
        Ok(())
    }

    /// Forgets a token (by its hash): it signs nobody in any more. Forgetting
    /// one already gone is not an error.
    pub async fn remove_token(&self, token_hash: &str) -> Result<(), StorageError> {
        sqlx::query("DELETE FROM tokens WHERE hash = $1")
            .bind(token_hash)
            .execute(&mut *self.writes().await?)
            .await?;
        Ok(())
    }

    /// Every account with when it was created, by name.
    pub async fn accounts(&self) -> Result<Vec<(Account, i64)>, StorageError> {
        let rows = sqlx::query("SELECT id, name, created_at FROM accounts ORDER BY name")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    Account {
                        id: row.try_get("id")?,
                        name: row.try_get("name")?,
                    },
                    super::int(row, "created_at")?,
                ))
            })
            .collect()
    }

    /// `account`'s tokens as (hash, created at), oldest first. Only hashes
    /// are stored: no token can be shown again.
    pub async fn tokens_of(&self, account: &Account) -> Result<Vec<(String, i64)>, StorageError> {
        let rows = sqlx::query(
            "SELECT hash, created_at FROM tokens WHERE account_id = $1 ORDER BY created_at, hash",
        )
        .bind(&account.id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("hash")?, super::int(row, "created_at")?)))
            .collect()
    }

    /// Forgets `account`'s token whose hash is `hash`; `NotFound` when the
    /// account has no such token.
    pub async fn revoke_token(&self, account: &Account, hash: &str) -> Result<(), StorageError> {
        let done = sqlx::query("DELETE FROM tokens WHERE hash = $1 AND account_id = $2")
            .bind(hash)
            .bind(&account.id)
            .execute(&mut *self.writes().await?)
            .await?;
        match done.rows_affected() {
            0 => Err(StorageError::NotFound("token")),
            _ => Ok(()),
        }
    }

    /// The account a token hash belongs to.
    pub async fn account_by_token(&self, token_hash: &str) -> Result<Account, StorageError> {
        let row = sqlx::query(
            "SELECT a.id, a.name FROM tokens t JOIN accounts a ON a.id = t.account_id WHERE t.hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?
        .ok_or(StorageError::NotFound("token"))?;
        Ok(Account {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
        })
    }
}
