//! Machines paired to accounts (SPEC A1): a machine acts for its owner
//! only, with a credential stored as a hash and revocable.

use sqlx::any::AnyRow;
use sqlx::Row;
use uuid::Uuid;

use super::{now_ms, Account, StorageError, Store};

/// A paired machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// Opaque id.
    pub id: String,
    /// The owner.
    pub account: Account,
    /// The name the owner gave it.
    pub name: String,
    /// Whether its credential was revoked.
    pub revoked: bool,
}

const SELECT: &str =
    "SELECT m.id, m.name, m.revoked_at, a.id AS account_id, a.name AS account_name \
     FROM machines m JOIN accounts a ON a.id = m.account_id";

fn decode(row: &AnyRow) -> Result<Machine, StorageError> {
    Ok(Machine {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        revoked: row.try_get::<Option<i64>, _>("revoked_at")?.is_some(),
        account: Account {
            id: row.try_get("account_id")?,
            name: row.try_get("account_name")?,
        },
    })
}

impl Store {
    /// Pairs a machine named `name` to `account` with a credential whose
    /// hash is `credential_hash`.
    pub async fn pair_machine(
        &self,
        account: &Account,
        name: &str,
        credential_hash: &str,
    ) -> Result<Machine, StorageError> {
        let id = Uuid::new_v4().to_string();
        sqlx::query(
            "INSERT INTO machines (id, account_id, name, credential_hash, created_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&id)
        .bind(&account.id)
        .bind(name)
        .bind(credential_hash)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(Machine {
            id,
            account: account.clone(),
            name: name.to_owned(),
            revoked: false,
        })
    }

    /// The machine whose credential hashes to `credential_hash`, revoked or not.
    pub async fn machine_by_credential(
        &self,
        credential_hash: &str,
    ) -> Result<Machine, StorageError> {
        let sql = format!("{SELECT} WHERE m.credential_hash = $1");
        let row = sqlx::query(&sql)
            .bind(credential_hash)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StorageError::NotFound("machine"))?;
        decode(&row)
    }

    /// The machines of `account`, newest first.
    pub async fn machines_of(&self, account: &Account) -> Result<Vec<Machine>, StorageError> {
        let sql = format!("{SELECT} WHERE m.account_id = $1 ORDER BY m.created_at DESC, m.id");
        let rows = sqlx::query(&sql)
            .bind(&account.id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(decode).collect()
    }

    /// Revokes machine `id` of `account`; `NotFound` if it is not theirs.
    pub async fn revoke_machine(&self, account: &Account, id: &str) -> Result<(), StorageError> {
        let done = sqlx::query(
            "UPDATE machines SET revoked_at = $1 WHERE id = $2 AND account_id = $3 AND revoked_at IS NULL",
        )
        .bind(now_ms())
        .bind(id)
        .bind(&account.id)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        // Already revoked is fine; someone else's or unknown is not found.
        match self.machines_of(account).await?.iter().any(|m| m.id == id) {
            true => Ok(()),
            false => Err(StorageError::NotFound("machine")),
        }
    }
}
