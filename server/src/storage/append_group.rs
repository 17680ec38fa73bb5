//! Editors' appends on SQLite, committed in groups by a thread of their
//! own (SPEC S3, W3).
//!
//! An editor's change is the hottest write there is: each keystroke is a
//! commit before anyone sees it. Through `sqlx` that commit crossed from
//! the document's task to the group task, to the connection's worker
//! thread and back, and sqlx's own machinery around one multi-statement
//! query cost more CPU than SQLite's commit itself. Here one OS thread
//! owns a second write connection (`rusqlite`, over the same SQLite
//! library), takes every append waiting when it frees up, and commits them
//! in one transaction of prepared statements: one hand-off each way and
//! one fsync a group.
//!
//! SQLite takes one writer at a time: the thread holds the store's write
//! connection (`Writer::lend_blocking`) for the length of its transaction,
//! so it queues in order with every other writer instead of sleeping in
//! SQLite's busy handler.
//!
//! Each append's fenced update (revision and owner epoch, SPEC W3) runs
//! first: an append whose fence moved writes nothing while the rest of the
//! group commits. Each runs in a savepoint of its own, so a statement that
//! fails is that append's error, rolled back alone.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::group::{gather, queue_and_wait, Bounds};
use super::updates::ClientBinding;
use super::writer::Writer;
use super::{now_ms, StorageError};
use crate::metrics::COUNTERS;

/// How editors' appends are grouped: at most 64 or 8 MiB of changes
/// (bounding each append's wait behind the others), 1,024 waiting before
/// appenders wait.
const BOUNDS: Bounds = Bounds {
    queue: 1024,
    writes: 64,
    weight: 8 * 1024 * 1024,
};

/// Prepared statements kept by the thread's connection: the few it runs,
/// with room to spare.
const STATEMENTS: usize = 16;

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

type Answer = oneshot::Sender<Result<Landed, StorageError>>;

/// The appenders' end of the thread; cheap to clone. The thread ends once
/// every handle is dropped, after committing what was queued.
#[derive(Clone, Debug)]
pub(super) struct Appends {
    queue: mpsc::Sender<(Append, Answer)>,
}

impl Appends {
    /// Opens the thread's connection to the database file at `path` and
    /// starts the thread, which writes while it holds `writer`.
    pub fn start(path: &Path, writer: Writer) -> Result<Appends, StorageError> {
        let connection = open(path)?;
        let (queue, waiting) = mpsc::channel(BOUNDS.queue);
        let thread = Thread {
            connection,
            path: path.to_owned(),
            writer,
        };
        std::thread::Builder::new()
            .name("margin-appends".into())
            .spawn(move || thread.run(waiting))
            .map_err(|e| {
                StorageError::Durability(format!("cannot start the append thread: {e}"))
            })?;
        Ok(Appends { queue })
    }

    /// Commits `append` with whatever else is waiting; its answer once the
    /// group is committed.
    pub async fn commit(&self, append: Append) -> Result<Landed, StorageError> {
        let stopped = || StorageError::Durability("the document append thread stopped".into());
        queue_and_wait(&self.queue, append, stopped).await
    }
}

/// Opens a write connection as the store's own: WAL, every commit on disk
/// before it returns (SPEC W3), foreign keys on. Refuses one that would
/// acknowledge a commit before it is durable.
fn open(path: &Path) -> Result<Connection, StorageError> {
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.pragma_update(None, "foreign_keys", "ON")?;
    // Writers queue in-process; this covers a checkpoint or another
    // process holding the file, as on the store's connection.
    connection.busy_timeout(std::time::Duration::from_secs(10))?;
    let journal: String = connection.pragma_query_value(None, "journal_mode", |row| row.get(0))?;
    let synchronous: i64 = connection.pragma_query_value(None, "synchronous", |row| row.get(0))?;
    // synchronous: 2 = FULL, 3 = EXTRA.
    if !journal.eq_ignore_ascii_case("wal") || synchronous < 2 {
        return Err(StorageError::Durability(format!(
            "SQLite runs with journal_mode={journal}, synchronous={synchronous}; Margin needs WAL with FULL sync"
        )));
    }
    connection.set_prepared_statement_cache_capacity(STATEMENTS);
    Ok(connection)
}

/// The thread: its connection, the file to open again, and the store's
/// write connection it holds while it writes.
struct Thread {
    connection: Connection,
    path: PathBuf,
    writer: Writer,
}

impl Thread {
    fn run(mut self, mut waiting: mpsc::Receiver<(Append, Answer)>) {
        while let Some(first) = waiting.blocking_recv() {
            let group = gather(first, &mut waiting, BOUNDS, weight);
            let (appends, answers): (Vec<Append>, Vec<Answer>) = group.into_iter().unzip();
            let landed = match self.writer.lend_blocking() {
                Ok(held) => {
                    let landed = self.commit(&appends);
                    drop(held);
                    landed
                }
                Err(error) => Err(error.to_string()),
            };
            match landed {
                Ok(landed) => {
                    for (answer, landed) in answers.into_iter().zip(landed) {
                        let _ = answer.send(landed);
                    }
                }
                Err(error) => {
                    warn!(%error, appends = appends.len(), "a group of document appends was not committed");
                    for answer in answers {
                        let failed = format!("the document append was not committed: {error}");
                        let _ = answer.send(Err(StorageError::Durability(failed)));
                    }
                }
            }
        }
    }

    /// Commits `appends` in one transaction, each answered in order; an
    /// error of the whole group (its BEGIN, a savepoint, its COMMIT) in
    /// words for every append.
    fn commit(&mut self, appends: &[Append]) -> Result<Vec<Result<Landed, StorageError>>, String> {
        COUNTERS.write_transaction();
        let landed = commit(&mut self.connection, appends).map_err(|e| e.to_string());
        // A failed COMMIT or ROLLBACK may leave the transaction open; a
        // later group must never run inside it.
        if landed.is_err() && !self.connection.is_autocommit() {
            match open(&self.path) {
                Ok(fresh) => self.connection = fresh,
                Err(error) => warn!(%error, "the append connection could not be opened again"),
            }
        }
        landed
    }
}

fn weight(append: &Append) -> usize {
    append.updates.iter().map(Vec::len).sum()
}

/// Writes each append in a savepoint of one transaction and commits it.
fn commit(
    connection: &mut Connection,
    appends: &[Append],
) -> Result<Vec<Result<Landed, StorageError>>, rusqlite::Error> {
    let now = now_ms();
    let mut transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut landed = Vec::with_capacity(appends.len());
    for append in appends {
        let savepoint = transaction.savepoint()?;
        match write(&savepoint, append, now) {
            Ok(at) => {
                savepoint.commit()?;
                landed.push(Ok(at));
            }
            Err(error) => {
                // A savepoint finished without its commit rolls back.
                savepoint.finish()?;
                landed.push(Err(error.into()));
            }
        }
    }
    transaction.commit()?;
    Ok(landed)
}

/// One append's statements: the fenced update of its document first, then
/// its changes and client bindings once that moved it.
fn write(connection: &Connection, append: &Append, now: i64) -> Result<Landed, rusqlite::Error> {
    let next = append.expected + append.updates.len() as i64;
    let fence = (&append.id, append.expected, append.epoch);
    let moved = match &append.edited_by {
        None => connection
            .prepare_cached(
                "UPDATE documents SET revision = ?1 WHERE id = ?2 AND revision = ?3 AND epoch = ?4",
            )?
            .execute(params![next, fence.0, fence.1, fence.2])?,
        Some(by) => connection
            .prepare_cached(
                "UPDATE documents SET revision = ?1, edited_at = ?5, edited_by = ?6 \
                 WHERE id = ?2 AND revision = ?3 AND epoch = ?4",
            )?
            .execute(params![next, fence.0, fence.1, fence.2, now, by])?,
    };
    if moved != 1 {
        return Ok(Landed::Fenced);
    }
    let mut insert = connection.prepare_cached(
        "INSERT INTO document_updates (document_id, revision, data) VALUES (?1, ?2, ?3)",
    )?;
    for (revision, update) in (append.expected + 1..).zip(&append.updates) {
        insert.execute(params![append.id, revision, update])?;
    }
    let mut bind = connection.prepare_cached(
        "INSERT INTO document_clients (document_id, client_id, account) VALUES (?1, ?2, ?3) \
         ON CONFLICT (document_id, client_id) DO NOTHING",
    )?;
    for binding in &append.clients {
        bind.execute(params![
            append.id,
            binding.client as i64,
            binding.account.as_deref()
        ])?;
    }
    Ok(Landed::At(next))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Store;
    use super::*;

    /// A store in a fresh folder, the file it keeps, and `documents`
    /// documents claimed at revision 0 with their epochs.
    async fn store_with(
        documents: usize,
    ) -> (tempfile::TempDir, Store, PathBuf, Vec<(String, i64)>) {
        let dir = tempfile::tempdir().expect("a temp folder");
        let url = Store::sqlite_url_in(dir.path()).expect("the data folder");
        let store = Store::open(&url).await.expect("the store opens");
        let ada = store.create_account("ada").await.expect("an account");
        let mut claimed = Vec::new();
        for n in 0..documents {
            let doc = store
                .create_document(&ada, &format!("Plan {n}"))
                .await
                .expect("a document");
            let epoch = store.claim_document(&doc.id).await.expect("claimed");
            claimed.push((doc.id, epoch.0));
        }
        let file = super::super::claim::sqlite_file(&url).expect("a file");
        (dir, store, file, claimed)
    }

    async fn updates_of(store: &Store, id: &str) -> Vec<Vec<u8>> {
        let state = store.load_state(id, None).await.expect("the stored state");
        state.updates
    }

    fn append((id, epoch): &(String, i64), expected: i64, updates: &[u8]) -> Append {
        Append {
            id: id.clone(),
            epoch: *epoch,
            expected,
            updates: updates.iter().map(|&u| vec![u]).collect(),
            edited_by: None,
            clients: Vec::new(),
        }
    }

    #[tokio::test]
    async fn a_failing_append_is_its_own_and_the_rest_of_its_group_commits() {
        let (_dir, store, file, docs) = store_with(3).await;
        let mut connection = open(&file).expect("the append connection");
        // A row already where the second append would write its change.
        connection
            .execute(
                "INSERT INTO document_updates (document_id, revision, data) VALUES (?1, 1, x'09')",
                params![docs[1].0],
            )
            .expect("the stray row");
        let group = [
            append(&docs[0], 0, &[1, 2]),
            append(&docs[1], 0, &[3]),
            append(&docs[2], 0, &[4]),
        ];
        let landed = commit(&mut connection, &group).expect("the group commits");
        assert!(
            matches!(
                landed[..],
                [
                    Ok(Landed::At(2)),
                    Err(StorageError::Sqlite(_)),
                    Ok(Landed::At(1))
                ]
            ),
            "{landed:?}"
        );
        assert_eq!(updates_of(&store, &docs[0].0).await, vec![vec![1], vec![2]]);
        assert_eq!(
            store.revision(&docs[1].0).await.expect("revision"),
            0,
            "the failed append moved its document"
        );
        assert_eq!(updates_of(&store, &docs[2].0).await, vec![vec![4]]);
    }

    #[tokio::test]
    async fn an_append_whose_fence_moved_writes_nothing_and_the_rest_of_its_group_commits() {
        let (_dir, store, file, docs) = store_with(2).await;
        let mut connection = open(&file).expect("the append connection");
        let stale_epoch = (docs[1].0.clone(), docs[1].1 - 1);
        let group = [
            append(&docs[0], 5, &[1]),
            append(&stale_epoch, 0, &[2]),
            append(&docs[1], 0, &[3]),
            append(&docs[1], 0, &[4]),
        ];
        let landed = commit(&mut connection, &group).expect("the group commits");
        assert!(
            matches!(
                landed[..],
                [
                    Ok(Landed::Fenced),
                    Ok(Landed::Fenced),
                    Ok(Landed::At(1)),
                    Ok(Landed::Fenced)
                ]
            ),
            "{landed:?}"
        );
        assert_eq!(store.log_len(&docs[0].0).await.expect("log"), 0);
        assert_eq!(updates_of(&store, &docs[1].0).await, vec![vec![3]]);
    }

    #[tokio::test]
    async fn an_append_waits_for_the_store_writer_and_commits_once_it_lets_go() {
        let (_dir, store, _file, docs) = store_with(1).await;
        let appends = store
            .committer
            .clone()
            .expect("SQLite commits appends on its thread");
        let held = store
            .writer
            .lend()
            .await
            .expect("another writer holds the store's writer");
        let waiting = tokio::spawn({
            let append = append(&docs[0], 0, &[1]);
            async move { appends.commit(append).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiting.is_finished(),
            "the append committed while another writer held the writer"
        );
        assert_eq!(store.revision(&docs[0].0).await.expect("revision"), 0);
        drop(held);
        let landed = waiting.await.expect("the appender");
        assert!(matches!(landed, Ok(Landed::At(1))), "{landed:?}");
    }

    #[tokio::test]
    async fn appends_after_the_store_closed_are_refused() {
        let (_dir, store, _file, docs) = store_with(1).await;
        let appends = store
            .committer
            .clone()
            .expect("SQLite commits appends on its thread");
        store.close().await;
        let refused = appends.commit(append(&docs[0], 0, &[1])).await;
        assert!(
            matches!(refused, Err(StorageError::Durability(_))),
            "{refused:?}"
        );
    }
}
