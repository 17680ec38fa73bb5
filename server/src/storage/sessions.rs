//! Planner sessions (SPEC W1, W2, E1, E2, U5): each session's journal of
//! domain events, the feed applications read (its events and the snapshot
//! folded from them), and a domain snapshot for restarts — written
//! together.
//!
//! The rows hold JSON the `sessions` module encodes; storage keeps them in
//! step. One [`SessionWrite`] appends journal records and feed events and
//! moves both snapshots, fenced on the journal record and feed cursor it
//! started from, so a stale writer is refused and a failed commit leaves
//! everything as it was. [`Store::commit_sessions`] commits writes in one
//! transaction (on SQLite, grouped with others' by the commit thread);
//! [`write_session`] is one write's statements, which a tool call's result
//! also commits with the call's own changes.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::statement::{Check, Refusal, Statement, Value};
use super::{int, now_ms, Backend, StorageError, Store};

/// Rows per multi-row `INSERT`: up to five parameters each, well under
/// SQLite's and PostgreSQL's limits on parameters per statement.
const ROWS_PER_INSERT: usize = 200;

/// One stored event of a session's feed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEvent {
    /// Its cursor: contiguous per session, from 1.
    pub seq: u64,
    /// Its SSE event name.
    pub kind: String,
    /// Its JSON.
    pub body: String,
}

/// A session's stored feed snapshot.
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
    /// The feed snapshot's JSON.
    pub snapshot: String,
    /// The last journal record.
    pub journal_seq: u64,
    /// The domain snapshot's JSON and the record it stands at.
    pub domain: Option<(u64, String)>,
}

/// Who a new session belongs to, for its first write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionOwner {
    /// Its document.
    pub document: String,
    /// Its owner's account.
    pub account: String,
    /// The machine it runs on.
    pub machine: String,
}

/// One write of a session, fenced on where it started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionWrite {
    /// The session.
    pub session: String,
    /// Given for the session's first write, which creates it.
    pub owner: Option<SessionOwner>,
    /// The journal record the stored session must be at.
    pub base: u64,
    /// Journal records, numbered `base + 1` on: (seq, JSON).
    pub records: Vec<(u64, String)>,
    /// The feed cursor the stored session must be at.
    pub cursor: u64,
    /// Feed events, numbered `cursor + 1` on.
    pub events: Vec<StoredEvent>,
    /// The feed snapshot after them.
    pub snapshot: String,
    /// Its state: `active`, `disconnected` or `ended`.
    pub state: &'static str,
    /// A domain snapshot at the last record, to keep.
    pub domain: Option<String>,
    /// Journal records at or before this go (a domain snapshot holds them).
    pub prune_journal: Option<u64>,
    /// Feed events at or before this go (SPEC E2 retention).
    pub prune_events: Option<u64>,
    /// In a cluster: the lease the writer must still hold on the
    /// session's document (SPEC C1), else nothing is written.
    pub lease: Option<LeaseFence>,
}

/// The lease a cluster node's session write is fenced on: its document's
/// lease must still name the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseFence {
    /// The session's document.
    pub document: String,
    /// The node that must hold its lease.
    pub node: String,
}

impl SessionWrite {
    /// The journal record the session is at once this is committed.
    pub fn journal_seq(&self) -> u64 {
        self.records.last().map_or(self.base, |(seq, _)| *seq)
    }

    /// The feed cursor once this is committed.
    pub fn feed_cursor(&self) -> u64 {
        self.events.last().map_or(self.cursor, |event| event.seq)
    }
}

/// A session's row with its domain snapshot, kept in a table of its own
/// (written only when a snapshot is taken, not by every write).
const SELECT: &str = "SELECT id, document_id, account_id, machine_id, cursor, snapshot, \
     journal_seq, domain, seq AS domain_seq FROM planner_sessions \
     LEFT JOIN planner_session_domains ON session_id = id";

/// A session that has not ended, as a condition on `planner_sessions`:
/// its states named (the table's CHECK lists all three) rather than
/// `state <> 'ended'`, which no index serves, so a query reads the open
/// sessions through `planner_sessions_state` and not every session ever
/// held (SPEC O5: a restart's time grows with what is live, not with
/// history).
pub(super) const OPEN: &str = "state IN ('active', 'disconnected')";

/// What a restarted server reads to take its sessions back: every open
/// session, oldest first. Public so its plan can be checked.
pub fn open_sessions_query() -> String {
    format!("{SELECT} WHERE {OPEN} ORDER BY created_at, id")
}

fn decode(row: &AnyRow) -> Result<StoredSession, StorageError> {
    let domain: Option<String> = row.try_get("domain")?;
    Ok(StoredSession {
        document: row.try_get("document_id")?,
        account: row.try_get("account_id")?,
        machine: row.try_get("machine_id")?,
        cursor: int(row, "cursor")? as u64,
        snapshot: row.try_get("snapshot")?,
        journal_seq: int(row, "journal_seq")? as u64,
        domain: domain.map(|json| (int(row, "domain_seq").unwrap_or(0) as u64, json)),
    })
}

impl Store {
    /// Commits `writes` in one transaction: all or none. A write whose
    /// fence does not hold fails the transaction with
    /// [`StorageError::JournalMoved`].
    pub async fn commit_sessions(&self, writes: &[SessionWrite]) -> Result<(), StorageError> {
        let statements = writes
            .iter()
            .flat_map(|write| write_session(self.backend, write))
            .collect();
        self.commit_write(statements).await
    }

    /// Session `id`'s feed snapshot, if it exists.
    pub async fn session(&self, id: &str) -> Result<Option<StoredSession>, StorageError> {
        let sql = format!("{SELECT} WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(decode).transpose()
    }

    /// Session `id`'s feed events after cursor `after`, oldest first, at
    /// most `limit`.
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

    /// Session `id`'s journal records after `after`, oldest first: (seq,
    /// JSON).
    pub async fn session_journal(
        &self,
        id: &str,
        after: u64,
    ) -> Result<Vec<(u64, String)>, StorageError> {
        let rows = sqlx::query(
            "SELECT seq, entry FROM session_journal WHERE session_id = $1 AND seq > $2 ORDER BY seq",
        )
        .bind(id)
        .bind(after as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((int(row, "seq")? as u64, row.try_get("entry")?)))
            .collect()
    }

    /// Session `id`'s journal record `seq`, if it is kept.
    pub async fn journal_record(&self, id: &str, seq: u64) -> Result<Option<String>, StorageError> {
        let row =
            sqlx::query("SELECT entry FROM session_journal WHERE session_id = $1 AND seq = $2")
                .bind(id)
                .bind(seq as i64)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|row| row.try_get("entry")).transpose()?)
    }

    /// Session `id`, if it exists and has not ended.
    pub async fn open_session(&self, id: &str) -> Result<Option<StoredSession>, StorageError> {
        let sql = format!("{SELECT} WHERE id = $1 AND {OPEN}");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(decode).transpose()
    }

    /// The ids of document `document`'s sessions that have not ended
    /// (one, unless a node lost track of one; SPEC C3).
    pub async fn open_sessions_of(&self, document: &str) -> Result<Vec<String>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT id FROM planner_sessions WHERE document_id = $1 AND {OPEN} \
             ORDER BY created_at, id"
        ))
        .bind(document)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|row| Ok(row.try_get("id")?)).collect()
    }

    /// The sessions whose stored state is not `ended`, with their ids,
    /// oldest first: what a restarted server takes back.
    pub async fn open_sessions(&self) -> Result<Vec<(String, StoredSession)>, StorageError> {
        let rows = sqlx::query(&open_sessions_query())
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get("id")?, decode(row)?)))
            .collect()
    }
}

/// The statements of one session write, its fences first: in a cluster
/// the lease its writer must hold (SPEC C1), then its row — created, or
/// moved from the journal record and feed cursor the write started from —
/// then its journal records, feed events and prunes.
pub(super) fn write_session(backend: Backend, write: &SessionWrite) -> Vec<Statement> {
    let id = write.session.as_str();
    let mut statements = Vec::new();
    if let Some(fence) = &write.lease {
        // Shared: a take of the document waits for this transaction, and
        // this one sees whichever take committed before it.
        statements.push(
            Statement::new(
                "SELECT 1 AS held FROM document_leases WHERE document_id = $1 AND node = $2 FOR SHARE",
                vec![fence.document.as_str().into(), fence.node.as_str().into()],
            )
            .checked(Check::Row(Refusal::Lease(fence.document.clone()))),
        );
    }
    let (journal_seq, cursor) = (write.journal_seq() as i64, write.feed_cursor() as i64);
    let mut row: Vec<Value> = vec![
        cursor.into(),
        write.snapshot.as_str().into(),
        write.state.into(),
        journal_seq.into(),
    ];
    match &write.owner {
        Some(owner) if write.base == 0 => {
            row.extend([
                id.into(),
                owner.document.as_str().into(),
                owner.account.as_str().into(),
                owner.machine.as_str().into(),
                now_ms().into(),
            ]);
            statements.push(Statement::new(
                "INSERT INTO planner_sessions (cursor, snapshot, state, journal_seq, id, document_id, account_id, machine_id, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                row,
            ));
        }
        _ => {
            row.extend([
                id.into(),
                (write.base as i64).into(),
                (write.cursor as i64).into(),
            ]);
            let moved = Refusal::Journal {
                session: id.to_owned(),
                base: write.base,
            };
            statements.push(
                Statement::new(
                    "UPDATE planner_sessions SET cursor = $1, snapshot = $2, state = $3, journal_seq = $4 \
                     WHERE id = $5 AND journal_seq = $6 AND cursor = $7",
                    row,
                )
                .checked(Check::One(moved)),
            );
        }
    }
    if let Some(domain) = &write.domain {
        statements.push(Statement::new(
            "INSERT INTO planner_session_domains (session_id, seq, domain) VALUES ($1, $2, $3) \
             ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, domain = excluded.domain",
            vec![id.into(), journal_seq.into(), domain.as_str().into()],
        ));
    }
    let records: Vec<(u64, &str, &str)> = write
        .records
        .iter()
        .map(|(seq, entry)| (*seq, entry.as_str(), ""))
        .collect();
    statements.extend(insert_rows(
        backend,
        "session_journal (session_id, seq, entry)",
        id,
        &records,
        false,
    ));
    let events: Vec<(u64, &str, &str)> = write
        .events
        .iter()
        .map(|e| (e.seq, e.kind.as_str(), e.body.as_str()))
        .collect();
    statements.extend(insert_rows(
        backend,
        "session_events (session_id, seq, kind, body, created_at)",
        id,
        &events,
        true,
    ));
    for (table, upto) in [
        ("session_journal", write.prune_journal),
        ("session_events", write.prune_events),
    ] {
        if let Some(upto) = upto {
            statements.push(Statement::new(
                format!("DELETE FROM {table} WHERE session_id = $1 AND seq <= $2"),
                vec![id.into(), (upto as i64).into()],
            ));
        }
    }
    statements
}

/// Where a session's journal stands, to say why a write's fence moved.
pub(super) const JOURNAL_AT: &str = "SELECT journal_seq FROM planner_sessions WHERE id = $1";

/// Why a write fenced on journal record `base` did not land, from its
/// session's row as [`JOURNAL_AT`] found it.
pub(super) fn journal_moved(base: u64, found: Option<&AnyRow>) -> StorageError {
    match found.map(|row| int(row, "journal_seq")) {
        Some(Ok(found)) => StorageError::JournalMoved {
            expected: base,
            found: found as u64,
        },
        Some(Err(error)) => error,
        None => StorageError::NotFound("session"),
    }
}

/// The statements that insert `rows` of session `id` into `table`, one per
/// [`ROWS_PER_INSERT`]: a statement per row made a writer wait on a driver
/// round trip for each (see server/benches/results/feed.md). Each row
/// is (seq, a, b): journal rows use `a` only; event rows use both and a
/// `created_at`.
///
/// On SQLite every parameter is an anonymous `?`, bound by its place, the
/// id and time bound again on each row: a numbered one is looked up by
/// its name, and under `sqlx` that lookup grew with the square of the
/// rows. PostgreSQL numbers its parameters and shares `$1` (and `$2`)
/// between rows.
fn insert_rows(
    backend: Backend,
    table: &str,
    id: &str,
    rows: &[(u64, &str, &str)],
    event: bool,
) -> Vec<Statement> {
    let now = now_ms();
    let anonymous = backend == Backend::Sqlite;
    rows.chunks(ROWS_PER_INSERT)
        .map(|batch| {
            let placeholders: Vec<String> = (0..batch.len())
                .map(|i| match (anonymous, event) {
                    (true, true) => "(?, ?, ?, ?, ?)".to_owned(),
                    (true, false) => "(?, ?, ?)".to_owned(),
                    (false, true) => {
                        let p = 3 * i + 3;
                        format!("($1, ${p}, ${}, ${}, $2)", p + 1, p + 2)
                    }
                    (false, false) => {
                        let p = 2 * i + 2;
                        format!("($1, ${p}, ${})", p + 1)
                    }
                })
                .collect();
            let sql = format!("INSERT INTO {table} VALUES {}", placeholders.join(", "));
            let mut values: Vec<Value> = Vec::with_capacity(batch.len() * 5 + 2);
            if !anonymous {
                values.push(id.into());
                if event {
                    values.push(now.into());
                }
            }
            for (seq, a, b) in batch {
                if anonymous {
                    values.push(id.into());
                }
                values.extend([(*seq as i64).into(), (*a).into()]);
                if event {
                    values.push((*b).into());
                    if anonymous {
                        values.push(now.into());
                    }
                }
            }
            Statement::new(sql, values)
        })
        .collect()
}
