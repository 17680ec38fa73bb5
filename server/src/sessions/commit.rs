//! Committing a session's steps (SPEC W2a, E1, E2, U5): a [`Step`] becomes
//! one [`SessionWrite`] — its journal records, the feed events and the feed
//! snapshot folded from them, now and then a domain snapshot — and the
//! [`Journal`] commits it: on SQLite, the store's commit thread commits the
//! writes of many sessions together, one transaction per batch (group
//! commit); on PostgreSQL, which commits concurrently and flushes its log
//! for many transactions at once, each driver commits its own.

use margin_planner::{PlannerSession, Step};
use margin_protocol::sessions::{SessionSnapshot, SessionState};

use crate::storage::{SessionOwner, SessionWrite, StorageError, Store, StoredEvent};

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

/// Commits sessions' writes; cheap to clone.
///
/// On SQLite, which has one writer, a write queues for the store's commit
/// thread, which commits whatever waits — other sessions' writes, editors'
/// appends — in one transaction (group commit). PostgreSQL commits many
/// transactions at once and flushes its log for all of them together, so
/// there each write is its own transaction, committed by its session's
/// driver: one session's commit never waits for another's.
#[derive(Clone)]
pub struct Journal {
    store: Store,
}

impl Journal {
    /// A journal over `store`.
    pub fn new(store: Store) -> Self {
        Journal { store }
    }

    /// Commits `write` (on SQLite with whatever else queued meanwhile).
    pub async fn commit(&self, write: SessionWrite) -> Result<(), StorageError> {
        self.store
            .commit_sessions(std::slice::from_ref(&write))
            .await
    }
}
