//! Planner sessions as applications read them (SPEC E1, E2, U5): each
//! session's snapshot at its cursor and its event log, written together.
//!
//! The rows hold JSON the `sessions` module folds and encodes; storage
//! only keeps a snapshot and its events in step: one transaction appends
//! events and moves the snapshot to the last of them, fenced on the cursor
//! it started from, so a failed commit leaves both as they were.

use sqlx::Row;

use super::{int, now_ms, StorageError, Store};

/// Events per `INSERT`: three parameters each, well under SQLite's and
/// PostgreSQL's limits on parameters per statement.
const ROWS_PER_INSERT: usize = 200;

/// One stored event of a session's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEvent {
    /// Its cursor: contiguous per session, from 1.
    pub seq: u64,
    /// Its SSE event name.
    pub kind: String,
    /// Its JSON.
    pub body: String,
}

/// A session's stored snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSession {
    /// Its document.
    pub document: String,
    /// Its owner's account.
    pub account: String,
    /// The machine it ran on.
    pub machine: String,
    /// The last event folded into `snapshot`.
    pub cursor: u64,
    /// The snapshot's JSON.
    pub snapshot: String,
}

/// What one commit writes: events numbered on from `base`, and the
/// snapshot after the last of them with its state.
#[derive(Clone, Copy, Debug)]
pub struct SessionCommit<'a> {
    /// The cursor the stored snapshot must be at.
    pub base: u64,
    /// The events, numbered `base + 1` on.
    pub events: &'a [StoredEvent],
    /// The snapshot's JSON after them.
    pub snapshot: &'a str,
    /// Its state: `active`, `disconnected` or `ended`.
    pub state: &'a str,
}

/// Who a new session belongs to, for its first commit.
#[derive(Clone, Copy, Debug)]
pub struct SessionOwner<'a> {
    /// Its document.
    pub document: &'a str,
    /// Its owner's account.
    pub account: &'a str,
    /// The machine it runs on.
    pub machine: &'a str,
}

const SELECT: &str =
    "SELECT id, document_id, account_id, machine_id, cursor, snapshot FROM planner_sessions";

fn decode(row: &sqlx::any::AnyRow) -> Result<StoredSession, StorageError> {
    Ok(StoredSession {
        document: row.try_get("document_id")?,
        account: row.try_get("account_id")?,
        machine: row.try_get("machine_id")?,
        cursor: int(row, "cursor")? as u64,
        snapshot: row.try_get("snapshot")?,
    })
}

impl Store {
    /// Appends `commit`'s events to session `id`'s log and moves its
    /// snapshot to the last of them, in one transaction. `owner` is given
    /// for the session's first commit (`base` 0), which creates it. Fails
    /// with [`StorageError::RevisionMoved`], writing nothing, when the
    /// stored cursor is not `base`.
    pub async fn commit_session_events(
        &self,
        id: &str,
        owner: Option<SessionOwner<'_>>,
        commit: SessionCommit<'_>,
    ) -> Result<(), StorageError> {
        let SessionCommit {
            base,
            events,
            snapshot,
            state,
        } = commit;
        let cursor = base + events.len() as u64;
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        match owner {
            Some(owner) if base == 0 => {
                sqlx::query(
                    "INSERT INTO planner_sessions (id, document_id, account_id, machine_id, cursor, snapshot, state, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(id)
                .bind(owner.document)
                .bind(owner.account)
                .bind(owner.machine)
                .bind(cursor as i64)
                .bind(snapshot)
                .bind(state)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            _ => {
                let moved = sqlx::query(
                    "UPDATE planner_sessions SET cursor = $1, snapshot = $2, state = $3 WHERE id = $4 AND cursor = $5",
                )
                .bind(cursor as i64)
                .bind(snapshot)
                .bind(state)
                .bind(id)
                .bind(base as i64)
                .execute(&mut *tx)
                .await?;
                if moved.rows_affected() != 1 {
                    let found = sqlx::query("SELECT cursor FROM planner_sessions WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?
                        .map(|row| int(&row, "cursor"))
                        .transpose()?
                        .ok_or(StorageError::NotFound("session"))?;
                    return Err(StorageError::RevisionMoved {
                        expected: base as i64,
                        found,
                    });
                }
            }
        }
        // One statement per batch of rows: a statement per event made the
        // log's writer wait on a driver round trip for each (see
        // docs/performance.md, "Session feed").
        for batch in events.chunks(ROWS_PER_INSERT) {
            let rows: Vec<String> = (0..batch.len())
                .map(|i| {
                    let p = 3 * i + 3;
                    format!("($1, ${p}, ${}, ${}, $2)", p + 1, p + 2)
                })
                .collect();
            let sql = format!(
                "INSERT INTO session_events (session_id, seq, kind, body, created_at) VALUES {}",
                rows.join(", ")
            );
            let mut insert = sqlx::query(&sql).bind(id).bind(now);
            for event in batch {
                insert = insert
                    .bind(event.seq as i64)
                    .bind(&event.kind)
                    .bind(&event.body);
            }
            insert.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Session `id`'s snapshot, if it exists.
    pub async fn session(&self, id: &str) -> Result<Option<StoredSession>, StorageError> {
        let sql = format!("{SELECT} WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(decode).transpose()
    }

    /// Session `id`'s events after cursor `after`, oldest first, at most
    /// `limit`.
    pub async fn session_events(
        &self,
        id: &str,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        let rows = sqlx::query(
            "SELECT seq, kind, body FROM session_events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(id)
        .bind(after as i64)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(StoredEvent {
                    seq: int(row, "seq")? as u64,
                    kind: row.try_get("kind")?,
                    body: row.try_get("body")?,
                })
            })
            .collect()
    }

    /// Drops session `id`'s events at or before `upto`: the snapshot holds
    /// them (SPEC E2 retention).
    pub async fn prune_session_events(&self, id: &str, upto: u64) -> Result<u64, StorageError> {
        let done = sqlx::query("DELETE FROM session_events WHERE session_id = $1 AND seq <= $2")
            .bind(id)
            .bind(upto as i64)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    /// The sessions whose stored state is not `ended`, with their ids,
    /// oldest first: what a restarted server takes back.
    pub async fn open_sessions(&self) -> Result<Vec<(String, StoredSession)>, StorageError> {
        let sql = format!("{SELECT} WHERE state <> 'ended' ORDER BY created_at, id");
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|row| Ok((row.try_get("id")?, decode(row)?)))
            .collect()
    }
}
