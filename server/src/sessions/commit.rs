//! Committing a session's steps (SPEC W2a, E1, E2, U5): a [`Step`] becomes
//! one [`SessionWrite`] — its journal records, the feed events and the feed
//! snapshot folded from them, now and then a domain snapshot — and the
//! [`Journal`] commits it: on SQLite, one task commits the writes of many
//! sessions together, one transaction per batch (group commit); on
//! PostgreSQL, which commits concurrently and flushes its log for many
//! transactions at once, each driver commits its own.

use margin_planner::{PlannerSession, Step};
use margin_protocol::sessions::{SessionSnapshot, SessionState};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;
use tracing::warn;

use crate::storage::{Backend, SessionOwner, SessionWrite, StorageError, Store, StoredEvent};

/// Most writes committed in one transaction.
const BATCH: usize = 256;
/// Most writes waiting for the journal task before drivers wait to queue.
const QUEUE: usize = 4_096;

/// How a session's writes keep storage bounded.
#[derive(Clone, Copy, Debug)]
pub struct Keeping {
    /// Feed events kept behind each feed snapshot (`MARGIN_SESSION_EVENTS_RETAINED`).
    pub events: u64,
    /// Journal records between two domain snapshots; the records a domain
    /// snapshot holds are pruned.
    pub snapshot_every: u64,
}

/// What one step writes, and the feed snapshot once it is committed.
#[derive(Clone, Debug)]
pub struct Written {
    /// The rows.
    pub write: SessionWrite,
    /// The feed snapshot after them.
    pub feed: SessionSnapshot,
}

/// The write that commits `step`, which took the session to `next`, on a
/// feed that stood at `feed`.
pub fn write_of(
    next: &PlannerSession,
    step: &Step,
    feed: &SessionSnapshot,
    keeping: Keeping,
) -> Result<Written, StorageError> {
    let base = step
        .journal
        .first()
        .map_or(next.seq(), |record| record.seq - 1);
    let records = step
        .journal
        .iter()
        .map(|record| Ok((record.seq, encode(record)?)))
        .collect::<Result<Vec<_>, StorageError>>()?;
    let mut after = feed.clone();
    let cursor = feed.cursor;
    let mut events = Vec::with_capacity(step.events.len());
    for (seq, event) in (cursor + 1..).zip(&step.events) {
        after.apply(seq, event);
        events.push(StoredEvent {
            seq,
            kind: event.kind().to_owned(),
            body: encode(event)?,
        });
    }
    let journal_seq = next.seq();
    let every = keeping.snapshot_every.max(1);
    let domain = (base / every != journal_seq / every)
        .then(|| encode(&next.snapshot()))
        .transpose()?;
    let prune_journal = domain
        .as_ref()
        .map(|_| journal_seq.min(next.oldest_needed().saturating_sub(1)))
        .filter(|upto| *upto > 0);
    let feed_cursor = after.cursor;
    let retained = keeping.events.max(1);
    let step_of = (retained / 10).max(1);
    let prune_events = (feed_cursor > retained && cursor / step_of != feed_cursor / step_of)
        .then(|| feed_cursor - retained);
    let owner = (base == 0).then(|| SessionOwner {
        document: next.document().to_owned(),
        account: next.account().to_owned(),
        machine: next.machine().to_owned(),
    });
    let write = SessionWrite {
        session: next.id().to_owned(),
        owner,
        base,
        records,
        cursor,
        events,
        snapshot: encode(&after)?,
        state: state_of(after.state),
        domain,
        prune_journal,
        prune_events,
        lease: None,
    };
    Ok(Written { write, feed: after })
}

/// A feed state as the session row stores it.
pub fn state_of(state: SessionState) -> &'static str {
    match state {
        SessionState::Active => "active",
        SessionState::Disconnected => "disconnected",
        SessionState::Ended => "ended",
    }
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StorageError> {
    serde_json::to_string(value).map_err(|e| StorageError::Corrupt(format!("session write: {e}")))
}

type Queued = (SessionWrite, oneshot::Sender<Result<(), StorageError>>);

/// Commits sessions' writes; cheap to clone.
///
/// SQLite has one writer: writes queue for one task that commits whatever
/// waits in one transaction. PostgreSQL commits many transactions at once
/// and flushes its log for all of them together, so there each write is
/// its own transaction, committed by its session's driver: one session's
/// commit never waits for another's.
#[derive(Clone)]
pub struct Journal {
    lane: Lane,
}

#[derive(Clone)]
enum Lane {
    Queued(mpsc::Sender<Queued>),
    Direct(Store),
}

impl Journal {
    /// A journal over `store`; on SQLite its task runs on `tracker` and
    /// ends once every handle is dropped, after committing what was queued.
    pub fn start(store: Store, tracker: &TaskTracker) -> Self {
        let lane = match store.backend() {
            Backend::Postgres => Lane::Direct(store),
            Backend::Sqlite => {
                let (queue, writes) = mpsc::channel(QUEUE);
                tracker.spawn(run(store, writes));
                Lane::Queued(queue)
            }
        };
        Journal { lane }
    }

    /// Commits `write` (on SQLite with whatever other sessions queued
    /// meanwhile).
    pub async fn commit(&self, write: SessionWrite) -> Result<(), StorageError> {
        let queue = match &self.lane {
            Lane::Direct(store) => {
                return store.commit_sessions(std::slice::from_ref(&write)).await
            }
            Lane::Queued(queue) => queue,
        };
        let (done, answer) = oneshot::channel();
        queue
            .send((write, done))
            .await
            .map_err(|_| StorageError::Durability("the session journal stopped".into()))?;
        answer
            .await
            .map_err(|_| StorageError::Durability("the session journal stopped".into()))?
    }
}

async fn run(store: Store, mut writes: mpsc::Receiver<Queued>) {
    while let Some(first) = writes.recv().await {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match writes.try_recv() {
                Ok(queued) => batch.push(queued),
                Err(_) => break,
            }
        }
        let (rows, dones): (Vec<SessionWrite>, Vec<_>) = batch.into_iter().unzip();
        match store.commit_sessions(&rows).await {
            Ok(()) => {
                for done in dones {
                    let _ = done.send(Ok(()));
                }
            }
            // One write's fence (or the database) failed the batch: each
            // is tried alone, so only the one at fault fails.
            Err(error) if rows.len() > 1 => {
                warn!(%error, writes = rows.len(), "session batch not committed; committing one by one");
                for (write, done) in rows.iter().zip(dones) {
                    let _ = done.send(store.commit_sessions(std::slice::from_ref(write)).await);
                }
            }
            Err(error) => {
                for done in dones {
                    let _ = done.send(Err(clone_error(&error)));
                }
            }
        }
    }
}

/// A storage error for each of the writes a failed batch held.
fn clone_error(error: &StorageError) -> StorageError {
    match error {
        StorageError::JournalMoved { expected, found } => StorageError::JournalMoved {
            expected: *expected,
            found: *found,
        },
        StorageError::LeaseLost { document } => StorageError::LeaseLost {
            document: document.clone(),
        },
        other => StorageError::Durability(other.to_string()),
    }
}
