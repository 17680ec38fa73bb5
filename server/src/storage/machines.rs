//! Machines paired to accounts (SPEC A1, L8): a machine acts for its owner
//! only and holds several short-lived credentials, each stored as a hash
//! with its expiry; revoking the machine refuses them all at once.

use sqlx::any::AnyRow;
use sqlx::Row;
use uuid::Uuid;

use super::{now_ms, Account, StorageError, Store};

/// How long a credential's row is kept after it expired, so a late caller
/// is told `credential_expired` rather than `unauthenticated`: a day.
pub const EXPIRED_CREDENTIALS_KEPT_MS: i64 = 24 * 60 * 60 * 1000;

/// A paired machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// Opaque id.
    pub id: String,
    /// The owner.
    pub account: Account,
    /// The name the owner gave it.
    pub name: String,
    /// Whether it was revoked (all its credentials are then refused).
    pub revoked: bool,
}

/// A stored machine credential: whose it is and until when it opens links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCredential {
    /// The machine, revoked or not.
    pub machine: Machine,
    /// When it stops opening links (ms since the Unix epoch); `None` for a
    /// credential paired before credentials expired, whose lifetime starts
    /// at its next link.
    pub expires_at: Option<i64>,
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
    /// Pairs a machine named `name` to `account` with a first credential
    /// whose hash is `credential_hash`, valid until `expires_at`.
    pub async fn pair_machine(
        &self,
        account: &Account,
        name: &str,
        credential_hash: &str,
        expires_at: i64,
    ) -> Result<Machine, StorageError> {
        let id = Uuid::new_v4().to_string();
        let now = now_ms();
        let mut writer = self.writes().await?;
        let mut tx = writer.begin().await?;
        sqlx::query(
            "INSERT INTO machines (id, account_id, name, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(&id)
        .bind(&account.id)
        .bind(name)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO machine_credentials (credential_hash, machine_id, created_at, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(credential_hash)
        .bind(&id)
        .bind(now)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Machine {
            id,
            account: account.clone(),
            name: name.to_owned(),
            revoked: false,
        })
    }

    /// Gives machine `machine` another credential, valid until
    /// `expires_at`, and prunes its credentials that expired over a day
    /// ago. `NotFound` when the machine is unknown or revoked: a revoked
    /// machine gets no new credential.
    pub async fn add_machine_credential(
        &self,
        machine: &str,
        credential_hash: &str,
        expires_at: i64,
    ) -> Result<(), StorageError> {
        let now = now_ms();
        let mut writer = self.writes().await?;
        let mut tx = writer.begin().await?;
        let added = sqlx::query(
            "INSERT INTO machine_credentials (credential_hash, machine_id, created_at, expires_at) \
             SELECT $1, $2, $3, $4 WHERE EXISTS (SELECT 1 FROM machines WHERE id = $2 AND revoked_at IS NULL)",
        )
        .bind(credential_hash)
        .bind(machine)
        .bind(now)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
        if added.rows_affected() != 1 {
            return Err(StorageError::NotFound("machine"));
        }
        sqlx::query("DELETE FROM machine_credentials WHERE machine_id = $1 AND expires_at < $2")
            .bind(machine)
            .bind(now.saturating_sub(EXPIRED_CREDENTIALS_KEPT_MS))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The credential hashing to `credential_hash`, with its machine
    /// (revoked or not) and expiry.
    pub async fn machine_by_credential(
        &self,
        credential_hash: &str,
    ) -> Result<StoredCredential, StorageError> {
        let row = sqlx::query(
            "SELECT c.expires_at, m.id, m.name, m.revoked_at, a.id AS account_id, a.name AS account_name \
             FROM machine_credentials c JOIN machines m ON m.id = c.machine_id \
             JOIN accounts a ON a.id = m.account_id WHERE c.credential_hash = $1",
        )
            .bind(credential_hash)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StorageError::NotFound("machine"))?;
        Ok(StoredCredential {
            machine: decode(&row)?,
            expires_at: row.try_get("expires_at")?,
        })
    }

    /// Starts the lifetime of a credential paired before credentials
    /// expired: from now on it expires at `expires_at`. Returns the expiry
    /// in force (another link may have started it first).
    pub async fn start_credential_lifetime(
        &self,
        credential_hash: &str,
        expires_at: i64,
    ) -> Result<i64, StorageError> {
        sqlx::query(
            "UPDATE machine_credentials SET expires_at = $1 WHERE credential_hash = $2 AND expires_at IS NULL",
        )
        .bind(expires_at)
        .bind(credential_hash)
        .execute(&mut *self.writes().await?)
        .await?;
        let row =
            sqlx::query("SELECT expires_at FROM machine_credentials WHERE credential_hash = $1")
                .bind(credential_hash)
                .fetch_optional(&self.pool)
                .await?
                .ok_or(StorageError::NotFound("machine"))?;
        Ok(row
            .try_get::<Option<i64>, _>("expires_at")?
            .unwrap_or(expires_at))
    }

    /// Machine `id`, revoked or not.
    pub async fn machine(&self, id: &str) -> Result<Machine, StorageError> {
        let sql = format!("{SELECT} WHERE m.id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
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

    /// Revokes machine `id` of `account`, refusing all its credentials at
    /// once; `NotFound` if it is not theirs.
    pub async fn revoke_machine(&self, account: &Account, id: &str) -> Result<(), StorageError> {
        let done = sqlx::query(
            "UPDATE machines SET revoked_at = $1 WHERE id = $2 AND account_id = $3 AND revoked_at IS NULL",
        )
        .bind(now_ms())
        .bind(id)
        .bind(&account.id)
        .execute(&mut *self.writes().await?)
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
