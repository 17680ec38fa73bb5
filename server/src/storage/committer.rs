//! SQLite's writes of the hot paths, committed in groups by a thread of
//! their own (SPEC S3, W1, W3).
//!
//! An editor's change is a commit before anyone sees it, and a Planner's
//! tool call is two (its write-ahead record, then its result with the
//! cards and session rows it made). Through `sqlx` each commit crossed from
//! its task to the connection's worker thread and back once a statement,
//! and sqlx's own machinery cost more CPU than SQLite's commit itself.
//! Here one OS thread owns a second write connection (`rusqlite`, over the
//! same SQLite library), takes every write waiting when it frees up, and
//! commits them in one transaction of prepared statements: one hand-off
//! each way and one fsync a group.
//!
//! SQLite takes one writer at a time: the thread holds the store's write
//! connection (`Writer::lend_blocking`) for the length of its transaction,
//! so it queues in order with every other writer instead of sleeping in
//! SQLite's busy handler.
//!
//! A write is its statements (`statement`), fenced ones first, and runs in
//! a savepoint of its own: one whose fence moved, or whose statement
//! failed, is rolled back alone while the rest of the group commits.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use super::group::{gather, queue_and_wait, Bounds};
use super::statement::{self, Ran, Statement};
use super::writer::Writer;
use super::StorageError;
use crate::metrics::COUNTERS;

/// How writes are grouped: at most 64 or 8 MiB of values (bounding each
/// write's wait behind the others), 1,024 waiting before writers wait.
const BOUNDS: Bounds = Bounds {
    queue: 1024,
    writes: 64,
    weight: 8 * 1024 * 1024,
};

/// Prepared statements kept by the thread's connection: the fixed ones,
/// and multi-row inserts of the few lengths a write's batches take.
const STATEMENTS: usize = 64;

type Answer = oneshot::Sender<Result<Ran, StorageError>>;

/// The writers' end of the thread; cheap to clone. The thread ends once
/// every handle is dropped, after committing what was queued.
#[derive(Clone, Debug)]
pub(super) struct Committer {
    queue: mpsc::Sender<(Vec<Statement>, Answer)>,
}

impl Committer {
    /// Opens the thread's connection to the database file at `path` and
    /// starts the thread, which writes while it holds `writer`.
    pub fn start(path: &Path, writer: Writer) -> Result<Committer, StorageError> {
        let connection = open(path)?;
        let (queue, waiting) = mpsc::channel(BOUNDS.queue);
        let thread = Thread {
            connection,
            path: path.to_owned(),
            writer,
        };
        std::thread::Builder::new()
            .name("margin-commits".into())
            .spawn(move || thread.run(waiting))
            .map_err(|e| {
                StorageError::Durability(format!("cannot start the commit thread: {e}"))
            })?;
        Ok(Committer { queue })
    }

    /// Commits `write` with whatever else is waiting; how it ran once the
    /// group is committed (a refused write wrote nothing).
    pub async fn commit(&self, write: Vec<Statement>) -> Result<Ran, StorageError> {
        let stopped = || StorageError::Durability("the SQLite commit thread stopped".into());
        queue_and_wait(&self.queue, write, stopped).await
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
    fn run(mut self, mut waiting: mpsc::Receiver<(Vec<Statement>, Answer)>) {
        while let Some(first) = waiting.blocking_recv() {
            let group = gather(first, &mut waiting, BOUNDS, |write| {
                statement::weight(write)
            });
            let (writes, answers): (Vec<Vec<Statement>>, Vec<Answer>) = group.into_iter().unzip();
            let ran = match self.writer.lend_blocking() {
                Ok(held) => {
                    let ran = self.commit(&writes);
                    drop(held);
                    ran
                }
                Err(error) => Err(error.to_string()),
            };
            match ran {
                Ok(ran) => {
                    for (answer, ran) in answers.into_iter().zip(ran) {
                        let _ = answer.send(ran);
                    }
                }
                Err(error) => {
                    warn!(%error, writes = writes.len(), "a group of SQLite writes was not committed");
                    for answer in answers {
                        let failed = format!("the write was not committed: {error}");
                        let _ = answer.send(Err(StorageError::Durability(failed)));
                    }
                }
            }
        }
    }

    /// Commits `writes` in one transaction, each answered in order; an
    /// error of the whole group (its BEGIN, a savepoint, its COMMIT) in
    /// words for every write.
    fn commit(
        &mut self,
        writes: &[Vec<Statement>],
    ) -> Result<Vec<Result<Ran, StorageError>>, String> {
        COUNTERS.write_transaction();
        let ran = commit(&mut self.connection, writes).map_err(|e| e.to_string());
        // A failed COMMIT or ROLLBACK may leave the transaction open; a
        // later group must never run inside it.
        if ran.is_err() && !self.connection.is_autocommit() {
            match open(&self.path) {
                Ok(fresh) => self.connection = fresh,
                Err(error) => warn!(%error, "the commit connection could not be opened again"),
            }
        }
        ran
    }
}

/// Runs each write in a savepoint of one transaction and commits it.
fn commit(
    connection: &mut Connection,
    writes: &[Vec<Statement>],
) -> Result<Vec<Result<Ran, StorageError>>, rusqlite::Error> {
    let mut transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut ran = Vec::with_capacity(writes.len());
    for write in writes {
        let savepoint = transaction.savepoint()?;
        match statement::run_on(&savepoint, write) {
            Ok(Ran::Whole) => {
                savepoint.commit()?;
                ran.push(Ok(Ran::Whole));
            }
            // A savepoint finished without its commit rolls back.
            refused_or_failed => {
                savepoint.finish()?;
                ran.push(refused_or_failed);
            }
        }
    }
    transaction.commit()?;
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rusqlite::params;

    use super::super::sessions::write_session;
    use super::super::statement::Refusal;
    use super::super::updates::{append_statements, Alongside, Epoch};
    use super::super::{Backend, SessionOwner, SessionWrite, Store};
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

    fn append((id, epoch): &(String, i64), expected: i64, updates: &[u8]) -> Vec<Statement> {
        let updates = updates.iter().map(|&u| vec![u]).collect();
        append_statements(id, Epoch(*epoch), expected, updates, &Alongside::default())
    }

    fn refused_document(id: &str, epoch: i64, expected: i64) -> Ran {
        Ran::Refused(Refusal::Document {
            id: id.to_owned(),
            epoch,
            expected,
        })
    }

    #[tokio::test]
    async fn a_failing_write_is_its_own_and_the_rest_of_its_group_commits() {
        let (_dir, store, file, docs) = store_with(3).await;
        let mut connection = open(&file).expect("the commit connection");
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
        let ran = commit(&mut connection, &group).expect("the group commits");
        assert!(
            matches!(
                ran[..],
                [Ok(Ran::Whole), Err(StorageError::Sqlite(_)), Ok(Ran::Whole)]
            ),
            "{ran:?}"
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
    async fn a_write_whose_fence_moved_writes_nothing_and_the_rest_of_its_group_commits() {
        let (_dir, store, file, docs) = store_with(2).await;
        let ada = store.account_by_name("ada").await.expect("ada");
        let machine = store
            .pair_machine(&ada, "laptop", "hash", i64::MAX)
            .await
            .expect("a machine");
        let session = |base: u64| SessionWrite {
            session: "s1".into(),
            owner: Some(SessionOwner {
                document: docs[0].0.clone(),
                account: ada.id.clone(),
                machine: machine.id.clone(),
            }),
            base,
            records: vec![(base + 1, "{}".into())],
            snapshot: "{}".into(),
            state: "active",
            ..SessionWrite::default()
        };
        let mut connection = open(&file).expect("the commit connection");
        let stale_epoch = (docs[1].0.clone(), docs[1].1 - 1);
        let group = [
            append(&docs[0], 5, &[1]),
            write_session(Backend::Sqlite, &session(0)),
            append(&stale_epoch, 0, &[2]),
            append(&docs[1], 0, &[3]),
            append(&docs[1], 0, &[4]),
            write_session(Backend::Sqlite, &session(3)),
            write_session(Backend::Sqlite, &session(1)),
        ];
        let ran = commit(&mut connection, &group).expect("the group commits");
        let ran: Vec<Ran> = ran.into_iter().map(|r| r.expect("no error")).collect();
        let journal = |base| {
            Ran::Refused(Refusal::Journal {
                session: "s1".into(),
                base,
            })
        };
        assert_eq!(
            ran,
            [
                refused_document(&docs[0].0, docs[0].1, 5),
                Ran::Whole,
                refused_document(&docs[1].0, docs[1].1 - 1, 0),
                Ran::Whole,
                refused_document(&docs[1].0, docs[1].1, 0),
                journal(3),
                Ran::Whole,
            ]
        );
        assert_eq!(store.log_len(&docs[0].0).await.expect("log"), 0);
        assert_eq!(updates_of(&store, &docs[1].0).await, vec![vec![3]]);
        let journal = store.session_journal("s1", 0).await.expect("the journal");
        assert_eq!(journal.len(), 2, "{journal:?}");
    }

    #[tokio::test]
    async fn a_write_waits_for_the_store_writer_and_commits_once_it_lets_go() {
        let (_dir, store, _file, docs) = store_with(1).await;
        let committer = store
            .committer
            .clone()
            .expect("SQLite commits on its thread");
        let held = store
            .writer
            .lend()
            .await
            .expect("another writer holds the store's writer");
        let waiting = tokio::spawn({
            let append = append(&docs[0], 0, &[1]);
            async move { committer.commit(append).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiting.is_finished(),
            "the write committed while another writer held the writer"
        );
        assert_eq!(store.revision(&docs[0].0).await.expect("revision"), 0);
        drop(held);
        let ran = waiting.await.expect("the writer");
        assert!(matches!(ran, Ok(Ran::Whole)), "{ran:?}");
        assert_eq!(store.revision(&docs[0].0).await.expect("revision"), 1);
    }

    #[tokio::test]
    async fn writes_after_the_store_closed_are_refused() {
        let (_dir, store, _file, docs) = store_with(1).await;
        let committer = store
            .committer
            .clone()
            .expect("SQLite commits on its thread");
        store.close().await;
        let refused = committer.commit(append(&docs[0], 0, &[1])).await;
        assert!(
            matches!(refused, Err(StorageError::Durability(_))),
            "{refused:?}"
        );
    }
}
