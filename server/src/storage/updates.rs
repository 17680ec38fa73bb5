//! A document's update log and snapshot (SPEC S3).
//!
//! Each published change is one row whose `revision` is the document revision
//! it made; `documents.revision` is the last of them. Compaction folds the log
//! into `document_snapshots` and deletes the rows it covers, in one
//! transaction, so a reader always sees either the rows or the snapshot that
//! replaced them.

use margin_decisions::DecisionCard;
use sqlx::any::Any;
use sqlx::{Row, Transaction};

use super::cards::{insert_cards, update_cards, StoredCard};
use super::sessions::{write_session, SessionWrite};
use super::statement::{Check, Refusal, Statement, Value};
use super::{int, now_ms, Backend, StorageError, Store};

/// What commits with a document's changes, in their transaction.
#[derive(Clone, Copy, Debug, Default)]
pub struct Alongside<'a> {
    /// New decision cards (their live mirror is among the changes).
    pub cards: &'a [DecisionCard],
    /// Cards changed, each at its new version (the row must hold the one
    /// before; their live mirror is among the changes).
    pub changed: &'a [StoredCard],
    /// Session writes: tool call results recorded with their writes.
    pub sessions: &'a [SessionWrite],
    /// Who made the last edit of the document's text among the changes —
    /// an account's name, or `planner` — recorded as the document's
    /// `edited_by` with the time as `edited_at`. `None` when the changes
    /// are the server's own (the mirror of decision cards): they are not
    /// edits, and leave both as they were.
    pub edited_by: Option<&'a str>,
    /// Client ids the changes are the first to write, with their owner
    /// (SPEC A3a).
    pub clients: &'a [ClientBinding],
}

/// A Yjs client id of a document and who owns it: the account that wrote
/// its first struct, or `None` for the server's own writes (SPEC A3a).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientBinding {
    /// The client id (at most 53 bits).
    pub client: u64,
    /// Its owner's account; `None` for the server.
    pub account: Option<std::sync::Arc<str>>,
}

/// A stored update that a load refused and left out of the document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedUpdate {
    /// The revision it was stored at.
    pub revision: i64,
    /// Its bytes, as stored.
    pub data: Vec<u8>,
    /// Why it was refused.
    pub reason: String,
}

/// Everything stored for a document up to some revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredState {
    /// The revision this state is at.
    pub revision: i64,
    /// The compacted state and the revision it covers, if any.
    pub snapshot: Option<(i64, Vec<u8>)>,
    /// Updates after the snapshot, in revision order.
    pub updates: Vec<Vec<u8>>,
    /// Who owns each client id written so far.
    pub clients: Vec<ClientBinding>,
}

/// The first key of every document owner lock (PostgreSQL advisory locks).
const OWNER_LOCKS: i32 = 0x4d47;

/// A document owner's epoch (SPEC W3): taken by [`Store::claim_document`]
/// when a server loads the document, named by every write of its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epoch(pub i64);

/// Moves document `id` to its next owner epoch in `tx` and returns it.
pub(super) async fn next_epoch(
    tx: &mut Transaction<'_, Any>,
    id: &str,
) -> Result<Epoch, StorageError> {
    let row = sqlx::query("UPDATE documents SET epoch = epoch + 1 WHERE id = $1 RETURNING epoch")
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or(StorageError::NotFound("document"))?;
    Ok(Epoch(int(&row, "epoch")?))
}

impl Store {
    /// The document's revision.
    pub async fn revision(&self, id: &str) -> Result<i64, StorageError> {
        let row = sqlx::query("SELECT revision FROM documents WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .ok_or(StorageError::NotFound("document"))?;
        int(&row, "revision")
    }

    /// The stored state of document `id` at `revision` (the current one when
    /// `None`). Read in one transaction so compaction cannot interleave.
    pub async fn load_state(
        &self,
        id: &str,
        revision: Option<i64>,
    ) -> Result<StoredState, StorageError> {
        let mut tx = self.pool.begin().await?;
        // One snapshot of the database for all three reads. PostgreSQL's
        // default (read committed) gives each statement its own: a
        // compaction committing between the snapshot read and the log read
        // would delete rows this load still needs (read skew). SQLite's read
        // transaction is already one snapshot.
        if self.backend() == super::Backend::Postgres {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *tx)
                .await?;
        }
        let current = sqlx::query("SELECT revision FROM documents WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StorageError::NotFound("document"))?;
        let current = int(&current, "revision")?;
        let revision = match revision {
            Some(r) if r > current || r < 0 => return Err(StorageError::NotFound("revision")),
            Some(r) => r,
            None => current,
        };
        let snapshot =
            sqlx::query("SELECT revision, data FROM document_snapshots WHERE document_id = $1")
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?;
        let snapshot = match snapshot {
            Some(row) => Some((int(&row, "revision")?, row.try_get::<Vec<u8>, _>("data")?)),
            None => None,
        };
        let after = match &snapshot {
            Some((at, _)) if *at > revision => {
                return Err(StorageError::Compacted {
                    requested: revision,
                    snapshot: *at,
                })
            }
            Some((at, _)) => *at,
            None => 0,
        };
        let rows = sqlx::query(
            "SELECT data FROM document_updates WHERE document_id = $1 AND revision > $2 AND revision <= $3 ORDER BY revision",
        )
        .bind(id)
        .bind(after)
        .bind(revision)
        .fetch_all(&mut *tx)
        .await?;
        let updates = rows
            .iter()
            .map(|row| row.try_get::<Vec<u8>, _>("data"))
            .collect::<Result<Vec<_>, _>>()?;
        let rows =
            sqlx::query("SELECT client_id, account FROM document_clients WHERE document_id = $1")
                .bind(id)
                .fetch_all(&mut *tx)
                .await?;
        let mut clients = Vec::with_capacity(rows.len());
        for row in &rows {
            clients.push(ClientBinding {
                client: u64::try_from(int(row, "client_id")?).unwrap_or_default(),
                account: row
                    .try_get::<Option<String>, _>("account")?
                    .map(std::sync::Arc::from),
            });
        }
        tx.commit().await?;
        Ok(StoredState {
            revision,
            snapshot,
            updates,
            clients,
        })
    }

    /// Makes the caller document `id`'s owner: takes the next epoch, which
    /// every later write of the document's state names. Whoever held the
    /// one before is refused from now on ([`StorageError::OwnerMoved`]).
    pub async fn claim_document(&self, id: &str) -> Result<Epoch, StorageError> {
        let mut writer = self.writes().await?;
        let mut tx = writer.begin().await?;
        self.lock_owner(&mut tx, id, "pg_advisory_xact_lock")
            .await?;
        let epoch = next_epoch(&mut tx, id).await?;
        tx.commit().await?;
        Ok(epoch)
    }

    /// On PostgreSQL, takes document `id`'s owner lock for this transaction
    /// with `function` (exclusive for a claim, shared for a compaction), so
    /// a claim waits for the compactions under the epoch it replaces while
    /// editors' appends, which never take it, wait for neither. On SQLite
    /// the one writer connection serialises them already.
    pub(super) async fn lock_owner(
        &self,
        tx: &mut Transaction<'_, Any>,
        id: &str,
        function: &str,
    ) -> Result<(), StorageError> {
        if self.backend == Backend::Postgres {
            // The two-key form: a key space apart from the server's claim.
            sqlx::query(&format!(
                "SELECT 1 FROM (SELECT {function}($1, hashtext($2))) AS locked"
            ))
            .bind(OWNER_LOCKS)
            .bind(id)
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }

    /// Appends `updates` as the changes after `expected` and returns the new
    /// revision. Fenced: if the stored revision is not `expected`, or the
    /// document's owner is no longer `epoch`, nothing is written and
    /// [`StorageError::RevisionMoved`] or [`StorageError::OwnerMoved`] says
    /// so.
    pub async fn append_updates(
        &self,
        id: &str,
        epoch: Epoch,
        expected: i64,
        updates: &[Vec<u8>],
    ) -> Result<i64, StorageError> {
        self.append_with(id, epoch, expected, updates.to_vec(), Alongside::default())
            .await
    }

    /// Appends `updates` as [`Store::append_updates`] does, and commits
    /// what rides with them in the same transaction: new decision cards,
    /// and session writes — the results of the tool calls that made these
    /// changes (SPEC W1) — and, when they hold an edit, who made it. All of
    /// it lands, or none. The changes are taken, not copied: on SQLite they
    /// go on to the commit thread (`committer`).
    pub async fn append_with(
        &self,
        id: &str,
        epoch: Epoch,
        expected: i64,
        updates: Vec<Vec<u8>>,
        alongside: Alongside<'_>,
    ) -> Result<i64, StorageError> {
        let next = expected + updates.len() as i64;
        let mut write = append_statements(id, epoch, expected, updates, &alongside);
        write.extend(insert_cards(self.backend, id, alongside.cards));
        write.extend(update_cards(id, alongside.changed));
        for session in alongside.sessions {
            write.extend(write_session(self.backend, session));
        }
        self.commit_write(write).await?;
        Ok(next)
    }

    /// Stores `state` as the snapshot at `revision` and deletes the log rows
    /// it covers. A snapshot never replaces a newer one. Fenced: refused
    /// with [`StorageError::OwnerMoved`] once the document's owner is no
    /// longer `epoch`.
    pub async fn compact(
        &self,
        id: &str,
        epoch: Epoch,
        revision: i64,
        state: &[u8],
    ) -> Result<(), StorageError> {
        self.compact_keeping(id, epoch, revision, state, &[]).await
    }

    /// [`Store::compact`], keeping the log rows the snapshot leaves out —
    /// those the load that made it refused — in `document_refused_updates`,
    /// in the same transaction.
    pub async fn compact_keeping(
        &self,
        id: &str,
        epoch: Epoch,
        revision: i64,
        state: &[u8],
        refused: &[RefusedUpdate],
    ) -> Result<(), StorageError> {
        let mut writer = self.writes().await?;
        let mut tx = writer.begin().await?;
        self.lock_owner(&mut tx, id, "pg_advisory_xact_lock_shared")
            .await?;
        // Under the owner lock the epoch read here holds until the commit:
        // a claim waits for it, and appends never wait for the snapshot.
        let owner = sqlx::query("SELECT epoch FROM documents WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or(StorageError::NotFound("document"))?;
        let found = int(&owner, "epoch")?;
        if found != epoch.0 {
            return Err(StorageError::OwnerMoved {
                expected: epoch.0,
                found,
            });
        }
        sqlx::query(
            "INSERT INTO document_snapshots (document_id, revision, data) VALUES ($1, $2, $3) \
             ON CONFLICT (document_id) DO UPDATE SET revision = excluded.revision, data = excluded.data \
             WHERE document_snapshots.revision < excluded.revision",
        )
        .bind(id)
        .bind(revision)
        .bind(state)
        .execute(&mut *tx)
        .await?;
        for kept in refused {
            sqlx::query(
                "INSERT INTO document_refused_updates (document_id, revision, data, reason) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (document_id, revision) DO NOTHING",
            )
            .bind(id)
            .bind(kept.revision)
            .bind(kept.data.as_slice())
            .bind(kept.reason.as_str())
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query("DELETE FROM document_updates WHERE document_id = $1 AND revision <= $2")
            .bind(id)
            .bind(revision)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The stored updates of document `id` that a load refused and a
    /// compaction kept aside, by revision.
    pub async fn refused_updates(&self, id: &str) -> Result<Vec<RefusedUpdate>, StorageError> {
        let rows = sqlx::query(
            "SELECT revision, data, reason FROM document_refused_updates \
             WHERE document_id = $1 ORDER BY revision",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(RefusedUpdate {
                    revision: int(row, "revision")?,
                    data: row.try_get("data")?,
                    reason: row.try_get("reason")?,
                })
            })
            .collect()
    }

    /// Why a fenced write of document `id` by owner `epoch`, expecting
    /// revision `expected`, found nothing to update.
    pub(super) async fn fence_failure(
        &self,
        id: &str,
        epoch: Epoch,
        expected: i64,
    ) -> StorageError {
        let row = sqlx::query("SELECT revision, epoch FROM documents WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await;
        let row = match row {
            Ok(Some(row)) => row,
            Ok(None) => return StorageError::NotFound("document"),
            Err(e) => return e.into(),
        };
        match (int(&row, "epoch"), int(&row, "revision")) {
            (Ok(found), _) if found != epoch.0 => StorageError::OwnerMoved {
                expected: epoch.0,
                found,
            },
            (_, Ok(found)) => StorageError::RevisionMoved { expected, found },
            (Err(e), _) | (_, Err(e)) => e,
        }
    }

    /// How many log rows document `id` holds (for compaction tests and
    /// operations).
    pub async fn log_len(&self, id: &str) -> Result<i64, StorageError> {
        let row = sqlx::query("SELECT COUNT(*) AS n FROM document_updates WHERE document_id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await?;
        int(&row, "n")
    }
}

/// A document's append: its fenced update first (revision and owner
/// epoch, SPEC W3, saying who edited too: one row, one update), then its
/// changes and the client ids they bind.
pub(super) fn append_statements(
    id: &str,
    epoch: Epoch,
    expected: i64,
    updates: Vec<Vec<u8>>,
    alongside: &Alongside<'_>,
) -> Vec<Statement> {
    let next = expected + updates.len() as i64;
    let mut values = vec![next.into(), id.into(), expected.into(), epoch.0.into()];
    let sql = match alongside.edited_by {
        None => "UPDATE documents SET revision = $1 WHERE id = $2 AND revision = $3 AND epoch = $4",
        Some(by) => {
            values.extend([now_ms().into(), by.into()]);
            "UPDATE documents SET revision = $1, edited_at = $5, edited_by = $6 \
             WHERE id = $2 AND revision = $3 AND epoch = $4"
        }
    };
    let moved = Refusal::Document {
        id: id.to_owned(),
        epoch: epoch.0,
        expected,
    };
    let mut write = Vec::with_capacity(1 + updates.len() + alongside.clients.len());
    write.push(Statement::new(sql, values).checked(Check::One(moved)));
    for (revision, update) in (expected + 1..).zip(updates) {
        write.push(Statement::new(
            "INSERT INTO document_updates (document_id, revision, data) VALUES ($1, $2, $3)",
            vec![id.into(), revision.into(), Value::Blob(update)],
        ));
    }
    for binding in alongside.clients {
        write.push(Statement::new(
            "INSERT INTO document_clients (document_id, client_id, account) VALUES ($1, $2, $3) \
             ON CONFLICT (document_id, client_id) DO NOTHING",
            vec![
                id.into(),
                (binding.client as i64).into(),
                binding.account.as_deref().into(),
            ],
        ));
    }
    write
}
