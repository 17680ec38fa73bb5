//! Planner sessions' writes on SQLite in one round trip (SPEC W1, W2a).
//!
//! A session write was four or more round trips to the SQLite worker
//! thread (BEGIN, the session row, its journal records, its events,
//! COMMIT), each a wake of that thread and of an async worker, and every
//! tool call makes one or two of them. A group of writes is now one
//! multi-statement query.
//!
//! Each statement carries its session's fence (journal record and feed
//! cursor), so a stale writer's statements change nothing while the rest
//! of the group commits; the session rows the fenced update returns tell
//! which writes landed. A session's first write creates its row, fenced by
//! the row's key: one that exists fails the group, which is then tried
//! write by write. The fence is read from the index that holds all three
//! columns (`planner_sessions_fence`): read from the table, `journal_seq`
//! lies past the row's snapshots, whose overflow pages each statement
//! would walk. Parameters are anonymous (`?`), bound in the order they
//! appear: with numbered ones the driver looks each up by name in a list
//! as long as the query.

use sqlx::Row;

use super::sessions::{journal_moved, SessionWrite, JOURNAL_AT};
use super::{int, now_ms, Backend, StorageError, Store};

/// Most parameters one group's query binds, well under SQLite's 32,766;
/// a write that needs more alone goes through `commit_sessions`.
pub const SESSION_GROUP_PARAMETERS: usize = 16_000;

/// A value bound to one `?`.
#[derive(Clone, Copy)]
enum Bound<'a> {
    Text(&'a str),
    MaybeText(Option<&'a str>),
    Int(i64),
}

/// A query and the values of its `?`s, in order.
#[derive(Default)]
struct Trip<'a> {
    sql: String,
    bound: Vec<Bound<'a>>,
}

impl<'a> Trip<'a> {
    /// Appends `sql`, whose `?`s take `values` in order.
    fn push(&mut self, sql: &str, values: impl IntoIterator<Item = Bound<'a>>) {
        self.sql.push_str(sql);
        self.sql.push('\n');
        self.bound.extend(values);
    }
}

/// How many parameters `write` binds in a group's query: its weight in a
/// group of at most [`SESSION_GROUP_PARAMETERS`].
pub fn session_write_weight(write: &SessionWrite) -> usize {
    // The row (11) and each record (3), event (5) and prune (2) with the
    // fence's three.
    11 + 6 * write.records.len() + 8 * write.events.len() + 2 * 5 + 3
}

impl Store {
    /// Commits `writes` and answers each one's fate, in order: committed,
    /// or refused by its fence ([`StorageError::JournalMoved`]) with
    /// nothing of it written. On SQLite they are one transaction, in one
    /// round trip when they fit one query and none is fenced on a lease;
    /// an error of the whole group (a session created twice, the disk, or
    /// a fence when they did not fit) is the outer one, and nothing of the
    /// group is written. PostgreSQL, which flushes its log for many
    /// transactions at once, commits each in its own.
    pub async fn commit_session_group(
        &self,
        writes: &[SessionWrite],
    ) -> Result<Vec<Result<(), StorageError>>, StorageError> {
        let weight: usize = writes.iter().map(session_write_weight).sum();
        // A write fenced on a cluster lease (PostgreSQL only) needs its
        // `FOR SHARE` read, which the one-trip query does not make.
        let unleased = writes.iter().all(|write| write.lease.is_none());
        match self.backend {
            Backend::Sqlite if weight <= SESSION_GROUP_PARAMETERS && unleased => {
                self.commit_sessions_in_one_trip(writes).await
            }
            Backend::Sqlite => {
                self.commit_sessions(writes).await?;
                Ok(writes.iter().map(|_| Ok(())).collect())
            }
            Backend::Postgres => {
                let mut fates = Vec::with_capacity(writes.len());
                for write in writes {
                    fates.push(self.commit_sessions(std::slice::from_ref(write)).await);
                }
                Ok(fates)
            }
        }
    }

    /// Commits `writes` in one transaction and one round trip; each one's
    /// fate, in order: committed, or refused by its fence
    /// ([`StorageError::JournalMoved`]) with nothing of it written. An
    /// error of the whole group (a session created twice, the disk) is
    /// the outer one, and nothing of the group is written.
    async fn commit_sessions_in_one_trip(
        &self,
        writes: &[SessionWrite],
    ) -> Result<Vec<Result<(), StorageError>>, StorageError> {
        let trip = group_query(writes, now_ms());
        let mut query = sqlx::query(&trip.sql);
        for value in &trip.bound {
            query = match value {
                Bound::Text(text) => query.bind(*text),
                Bound::MaybeText(text) => query.bind(*text),
                Bound::Int(int) => query.bind(*int),
            };
        }
        let mut connection = self.writes().await?;
        // Its one transaction is begun by the query's own BEGIN.
        crate::metrics::COUNTERS.write_transaction();
        let rows = match query.fetch_all(&mut *connection).await {
            Ok(rows) => rows,
            Err(error) => {
                // As for appends: a statement that failed part-way leaves
                // the transaction open on the one write connection.
                self.writer.roll_back(connection, &error).await;
                return Err(error.into());
            }
        };
        drop(connection);
        let mut moved = Vec::with_capacity(rows.len());
        for row in &rows {
            moved.push((
                row.try_get::<String, _>("id")?,
                int(row, "journal_seq")? as u64,
            ));
        }
        let mut fates = Vec::with_capacity(writes.len());
        for (write, landed) in writes.iter().zip(landed(writes, &moved)) {
            fates.push(match landed {
                true => Ok(()),
                false => Err(self.journal_fence_failure(write).await),
            });
        }
        Ok(fates)
    }

    /// Why `write`'s fence did not hold: where its session's journal is.
    async fn journal_fence_failure(&self, write: &SessionWrite) -> StorageError {
        let found = sqlx::query(JOURNAL_AT)
            .bind(&write.session)
            .fetch_optional(&self.pool)
            .await;
        match found {
            Ok(found) => journal_moved(write, found.as_ref()),
            Err(error) => error.into(),
        }
    }
}

/// Each write's fate from the session rows the group moved, in order: a
/// write landed when its row was returned at the journal record it made.
fn landed(writes: &[SessionWrite], moved: &[(String, u64)]) -> Vec<bool> {
    let mut moved = moved.iter().peekable();
    writes
        .iter()
        .map(|write| {
            moved
                .next_if(|(id, seq)| *id == write.session && *seq == write.journal_seq())
                .is_some()
        })
        .collect()
}

/// The group's query: `BEGIN IMMEDIATE`, each write's statements, `COMMIT`.
fn group_query(writes: &[SessionWrite], now: i64) -> Trip<'_> {
    let mut trip = Trip::default();
    trip.push("BEGIN IMMEDIATE;", []);
    for write in writes {
        push_write(&mut trip, write, now);
    }
    trip.push("COMMIT;", []);
    trip
}

/// One write's statements. A new session's row comes first (its records
/// refer to it); an existing one's fenced update comes last, so every
/// statement before it saw the fence as it stood.
fn push_write<'a>(trip: &mut Trip<'a>, write: &'a SessionWrite, now: i64) {
    use Bound::{Int, MaybeText, Text};
    let id = write.session.as_str();
    let (journal_seq, cursor) = (write.journal_seq() as i64, write.feed_cursor() as i64);
    let domain_seq = if write.domain.is_some() {
        journal_seq
    } else {
        0
    };
    let created = match &write.owner {
        Some(owner) if write.base == 0 => Some(owner),
        _ => None,
    };
    if let Some(owner) = created {
        trip.push(
            "INSERT INTO planner_sessions (id, document_id, account_id, machine_id, cursor, snapshot, state, created_at, journal_seq, domain, domain_seq) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id, journal_seq;",
            [
                Text(id),
                Text(&owner.document),
                Text(&owner.account),
                Text(&owner.machine),
                Int(cursor),
                Text(&write.snapshot),
                Text(write.state),
                Int(now),
                Int(journal_seq),
                MaybeText(write.domain.as_deref()),
                Int(domain_seq),
            ],
        );
    }
    // A created row is its own fence (its key); the others' is the row at
    // the record and cursor the write started from.
    let fence = match created {
        Some(_) => None,
        None => Some([Text(id), Int(write.base as i64), Int(write.cursor as i64)]),
    };
    // `sql` with the fence after `joined` (`WHERE` or `AND`), its values
    // after `values`.
    let fenced = |trip: &mut Trip<'a>, sql: &str, joined: &str, mut values: Vec<Bound<'a>>| {
        match fence {
            Some(fence) => {
                values.extend(fence);
                trip.push(
                    &format!("{sql} {joined} EXISTS (SELECT 1 FROM planner_sessions INDEXED BY planner_sessions_fence WHERE id = ? AND journal_seq = ? AND cursor = ?);"),
                    values,
                );
            }
            None => trip.push(&format!("{sql};"), values),
        }
    };
    for (seq, entry) in &write.records {
        fenced(
            trip,
            "INSERT INTO session_journal (session_id, seq, entry) SELECT ?, ?, ?",
            "WHERE",
            vec![Text(id), Int(*seq as i64), Text(entry)],
        );
    }
    for event in &write.events {
        fenced(
            trip,
            "INSERT INTO session_events (session_id, seq, kind, body, created_at) SELECT ?, ?, ?, ?, ?",
            "WHERE",
            vec![
                Text(id),
                Int(event.seq as i64),
                Text(&event.kind),
                Text(&event.body),
                Int(now),
            ],
        );
    }
    for (table, upto) in [
        ("session_journal", write.prune_journal),
        ("session_events", write.prune_events),
    ] {
        if let Some(upto) = upto {
            fenced(
                trip,
                &format!("DELETE FROM {table} WHERE session_id = ? AND seq <= ?"),
                "AND",
                vec![Text(id), Int(upto as i64)],
            );
        }
    }
    if created.is_none() {
        let domain = match &write.domain {
            Some(_) => ", domain = ?, domain_seq = ?",
            None => "",
        };
        let mut values = vec![
            Int(cursor),
            Text(&write.snapshot),
            Text(write.state),
            Int(journal_seq),
        ];
        if let Some(json) = &write.domain {
            values.extend([Text(json.as_str()), Int(journal_seq)]);
        }
        values.extend([Text(id), Int(write.base as i64), Int(write.cursor as i64)]);
        trip.push(
            &format!(
                "UPDATE planner_sessions SET cursor = ?, snapshot = ?, state = ?, journal_seq = ?{domain} \
                 WHERE id = ? AND journal_seq = ? AND cursor = ? RETURNING id, journal_seq;"
            ),
            values,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(session: &str, base: u64, records: u64) -> SessionWrite {
        SessionWrite {
            session: session.into(),
            base,
            records: (base + 1..=base + records)
                .map(|s| (s, "{}".into()))
                .collect(),
            snapshot: "{}".into(),
            state: "active",
            ..SessionWrite::default()
        }
    }

    #[test]
    fn the_rows_moved_tell_landed_from_fenced_writes() {
        let group = [write("a", 1, 2), write("b", 4, 1), write("a", 1, 1)];
        // The first landed at 3; the second's fence had moved; the third
        // (the first's session again, from 1) was fenced by the first.
        assert_eq!(landed(&group, &[("a".into(), 3)]), [true, false, false]);
        // A row at another record than the write's is not the write's.
        assert_eq!(landed(&group[..1], &[("a".into(), 2)]), [false]);
    }

    #[test]
    fn every_question_mark_has_its_value() {
        let mut created = write("n", 0, 2);
        created.owner = Some(crate::storage::SessionOwner {
            document: "d".into(),
            account: "u".into(),
            machine: "m".into(),
        });
        let mut moved = write("a", 3, 1);
        moved.domain = Some("{}".into());
        moved.prune_journal = Some(2);
        moved.prune_events = Some(1);
        let writes = [created, moved];
        let trip = group_query(&writes, 0);
        assert_eq!(trip.sql.matches('?').count(), trip.bound.len());
        assert!(trip.sql.starts_with("BEGIN IMMEDIATE;") && trip.sql.ends_with("COMMIT;\n"));
        // A created session's rows need no fence; a moved one's each have it.
        assert_eq!(trip.sql.matches("EXISTS").count(), 1 + 2);
    }
}
