//! Editors' appends on SQLite, committed in groups (`storage::group`).
//!
//! An append used to be four round trips to the SQLite worker thread
//! (BEGIN, UPDATE, INSERT, COMMIT) and a transaction of its own, and with
//! many documents each queued behind the one writer connection, one by
//! one. A group of appends is now one multi-statement query: one round
//! trip and one fsync for every document's changes in it.
//!
//! Each statement carries its document's fence (revision and owner epoch,
//! SPEC W3), so a stale writer's statements change nothing while the rest
//! of the group commits; the documents the fenced updates return tell
//! which appends landed.

use sqlx::Row;

use super::group::{Bounds, Commits};
use super::updates::ClientBinding;
use super::writer::Writer;
use super::{int, now_ms, StorageError};

/// How editors' appends are grouped: at most 64 or 8 MiB of changes
/// (bounding the query's size and its SQLite parameters, and each append's
/// wait behind the others), 1,024 waiting before appenders wait.
pub(super) const BOUNDS: Bounds = Bounds {
    queue: 1024,
    writes: 64,
    weight: 8 * 1024 * 1024,
};

/// One document's changes, fenced by the revision and epoch its writer
/// holds.
#[derive(Debug)]
pub(super) struct Append {
    pub id: String,
    pub epoch: i64,
    pub expected: i64,
    pub updates: Vec<Vec<u8>>,
    pub edited_by: Option<String>,
    /// Client ids first written by these changes, and their owners.
    pub clients: Vec<ClientBinding>,
}

/// What became of an append.
#[derive(Debug)]
pub(super) enum Landed {
    /// Committed: the document's new revision.
    At(i64),
    /// Its fence had moved; nothing of it was written.
    Fenced,
}

/// Commits groups of appends through the store's one write connection.
pub(super) struct Appends(pub Writer);

impl Commits for Appends {
    type Write = Append;
    type Landed = Landed;

    async fn commit(&self, appends: &[Append]) -> Result<Vec<Landed>, StorageError> {
        commit(&self.0, appends).await
    }

    fn weight(append: &Append) -> usize {
        append.updates.iter().map(Vec::len).sum()
    }
}

/// Commits `appends` in one transaction, in one round trip.
async fn commit(writer: &Writer, appends: &[Append]) -> Result<Vec<Landed>, StorageError> {
    let sql = group_sql(appends);
    let now = now_ms();
    let mut query = sqlx::query(&sql);
    for append in appends {
        let next = append.expected + append.updates.len() as i64;
        query = query
            .bind(next)
            .bind(append.id.as_str())
            .bind(append.expected)
            .bind(append.epoch)
            .bind(append.edited_by.as_ref().map(|_| now))
            .bind(append.edited_by.as_deref());
        for update in &append.updates {
            query = query.bind(update.as_slice());
        }
        for binding in &append.clients {
            query = query
                .bind(binding.client as i64)
                .bind(binding.account.as_deref());
        }
    }
    let mut connection = writer.lend().await?;
    // Its one transaction is begun by the query's own BEGIN.
    crate::metrics::COUNTERS.write_transaction();
    // Several statements in one prepared query: sqlx 0.8 runs them in
    // order on SQLite (its docs call this behaviour deprecated, for 0.9).
    let rows = match query.fetch_all(&mut *connection).await {
        Ok(rows) => rows,
        Err(error) => {
            writer.roll_back(connection, &error).await;
            return Err(error.into());
        }
    };
    drop(connection);
    let mut moved = Vec::with_capacity(rows.len());
    for row in &rows {
        moved.push((row.try_get::<String, _>("id")?, int(row, "revision")?));
    }
    Ok(landed(appends, &moved))
}

/// Each append's fate from the documents the group moved, as the fenced
/// updates returned them, in order: an append landed when its update
/// returned its document at the revision it made. (Its changes were
/// inserted under the same fence, checked against the same state.)
fn landed(appends: &[Append], moved: &[(String, i64)]) -> Vec<Landed> {
    let mut moved = moved.iter().peekable();
    appends
        .iter()
        .map(|append| {
            let next = append.expected + append.updates.len() as i64;
            match moved.next_if(|(id, revision)| *id == append.id && *revision == next) {
                Some(_) => Landed::At(next),
                None => Landed::Fenced,
            }
        })
        .collect()
}

/// The group's query. Each append's parameters follow the one's before it
/// (six each, then one per change and two per client binding): from its
/// `base`, `base` the new revision, `base+1` the document, `base+2` the
/// revision expected, `base+3` the owner's epoch, `base+4` and `base+5`
/// when and by whom it was edited (unused without an edit), then each
/// change's bytes, then each binding's client id and account.
fn group_sql(appends: &[Append]) -> String {
    let mut sql = String::from("BEGIN IMMEDIATE;\n");
    let mut base = 1;
    for append in appends {
        let (id, expected, epoch) = (base + 1, base + 2, base + 3);
        let fence = format!("id = ${id} AND revision = ${expected} AND epoch = ${epoch}");
        for offset in 0..append.updates.len() {
            sql.push_str(&format!(
                "INSERT INTO document_updates (document_id, revision, data) \
                 SELECT ${id}, ${expected} + {}, ${} \
                 WHERE EXISTS (SELECT 1 FROM documents WHERE {fence});\n",
                offset + 1,
                base + 6 + offset,
            ));
        }
        let clients = base + 6 + append.updates.len();
        for offset in 0..append.clients.len() {
            sql.push_str(&format!(
                "INSERT INTO document_clients (document_id, client_id, account) \
                 SELECT ${id}, ${}, ${} \
                 WHERE EXISTS (SELECT 1 FROM documents WHERE {fence}) \
                 ON CONFLICT (document_id, client_id) DO NOTHING;\n",
                clients + 2 * offset,
                clients + 2 * offset + 1,
            ));
        }
        // Last, so the inserts above saw the fence as it stood.
        let edit = match append.edited_by {
            Some(_) => format!(", edited_at = ${}, edited_by = ${}", base + 4, base + 5),
            None => String::new(),
        };
        sql.push_str(&format!(
            "UPDATE documents SET revision = ${base}{edit} WHERE {fence} RETURNING id, revision;\n"
        ));
        base += 6 + append.updates.len() + 2 * append.clients.len();
    }
    sql.push_str("COMMIT;");
    sql
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(updates: usize, edited: bool) -> Append {
        Append {
            id: "d".into(),
            epoch: 1,
            expected: 10,
            updates: vec![vec![0]; updates],
            edited_by: edited.then(|| "ada".into()),
            clients: Vec::new(),
        }
    }

    #[test]
    fn a_group_numbers_each_appends_parameters_after_the_last() {
        let sql = group_sql(&[append(2, true), append(1, false)]);
        assert!(sql.starts_with("BEGIN IMMEDIATE;\n"));
        assert!(sql.ends_with("COMMIT;"));
        // The first append: $1..$6, its changes $7 and $8.
        assert!(sql.contains("SELECT $2, $3 + 1, $7 "));
        assert!(sql.contains("SELECT $2, $3 + 2, $8 "));
        assert!(sql.contains("SET revision = $1, edited_at = $5, edited_by = $6 WHERE id = $2"));
        // The second: $9..$14, its change $15; no edit columns.
        assert!(sql.contains("SELECT $10, $11 + 1, $15 "));
        assert!(sql.contains("SET revision = $9 WHERE id = $10 AND revision = $11 AND epoch = $12"));
    }

    #[test]
    fn the_documents_moved_tell_landed_from_fenced_appends() {
        let mut other = append(1, false);
        other.id = "e".into();
        let group = [append(2, false), other, append(1, false)];
        // The first landed at 12; the second's fence had moved; the third
        // (the first's document again, still expecting 10) was fenced by
        // the first.
        let landed = landed(&group, &[("d".into(), 12)]);
        assert!(matches!(
            landed[..],
            [Landed::At(12), Landed::Fenced, Landed::Fenced]
        ));
        // A document moved to another revision than the append's is not
        // the append's.
        let landed = super::landed(&group[..1], &[("d".into(), 11)]);
        assert!(matches!(landed[..], [Landed::Fenced]));
    }
}
