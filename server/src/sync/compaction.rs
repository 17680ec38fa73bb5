//! Background compaction of a document's update log into a snapshot
//! (SPEC S3): debounced, only when changes are waiting, and never in the way
//! of editors — another task rebuilds the state from what storage holds,
//! on a blocking thread, and writes it; the document's own task only says
//! which revision to compact.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use yrs::updates::decoder::Decode;
use yrs::{ReadTxn, StateVector, Transact, Update};

use super::load::{rebuilt, LoadError};
use crate::storage::{Epoch, StorageError, Store};

/// Why a compaction did not land; the log keeps everything meanwhile.
#[derive(Debug, thiserror::Error)]
enum CompactionError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("the stored state does not rebuild: {0}")]
    Load(#[from] LoadError),
    /// yrs encoded a state it cannot load again (the fuzzer found updates
    /// that do this); writing it would replace a log that loads with a
    /// snapshot that does not.
    #[error("the encoded snapshot does not load again: {0}")]
    Unverified(String),
}

/// Compaction settings.
#[derive(Clone, Copy, Debug)]
pub struct Compaction {
    /// Quiet time after the last change before compacting.
    pub debounce: Duration,
    /// Compact at once when this many changes are waiting.
    pub max_pending: u64,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            debounce: Duration::from_secs(2),
            max_pending: 512,
        }
    }
}

/// One document's compaction: what waits, and the write in flight.
#[derive(Debug)]
pub struct Compactor {
    settings: Compaction,
    /// Changes committed since the last snapshot.
    pending: u64,
    last_change: Instant,
    in_flight: Option<(u64, JoinHandle<Result<(), CompactionError>>)>,
}

impl Compactor {
    /// A compactor for a document loaded with `pending` log rows after its
    /// snapshot.
    pub fn new(settings: Compaction, pending: u64) -> Self {
        Compactor {
            settings,
            pending,
            last_change: Instant::now(),
            in_flight: None,
        }
    }

    /// `count` more changes were committed.
    pub fn committed(&mut self, count: u64) {
        self.pending += count;
        self.last_change = Instant::now();
    }

    /// When to compact next: after the debounce, at once when many changes
    /// wait, never while a write is in flight or nothing waits.
    pub fn deadline(&self) -> Option<Instant> {
        if self.pending == 0 || self.in_flight.is_some() {
            return None;
        }
        if self.pending >= self.settings.max_pending {
            return Some(Instant::now());
        }
        Some(self.last_change + self.settings.debounce)
    }

    /// Compacts document `id` up to `revision` (committed) in the
    /// background: its stored state at that revision — snapshot and log —
    /// is rebuilt and encoded off the async workers, then written as the
    /// new snapshot, fenced by the owner's `epoch` (W3). Encoding the live
    /// document instead held its task, and every edit behind it, for
    /// milliseconds per megabyte.
    pub fn start(&mut self, store: &Store, id: &str, epoch: Epoch, revision: i64) {
        let (store, id) = (store.clone(), id.to_owned());
        let handle = tokio::spawn(async move {
            let stored = store.load_state(&id, Some(revision)).await?;
            let state = rebuilt(stored, |doc, _| {
                let state = doc
                    .transact()
                    .encode_state_as_update_v1(&StateVector::default());
                verified(&doc, state)
            })
            .await??;
            store.compact(&id, epoch, revision, &state).await?;
            Ok(())
        });
        self.in_flight = Some((self.pending, handle));
    }

    /// Waits for the write in flight; never resolves when there is none.
    pub async fn wait(&mut self) {
        let Some((covered, handle)) = &mut self.in_flight else {
            return std::future::pending().await;
        };
        let covered = *covered;
        let result = match handle.await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(e) => Err(format!("compaction task failed: {e}")),
        };
        self.in_flight = None;
        match result {
            Ok(()) => {
                self.pending = self.pending.saturating_sub(covered);
                debug!("compacted");
            }
            // The log still holds everything; try again after a while.
            Err(cause) => {
                warn!(%cause, "compaction failed");
                self.last_change = Instant::now();
            }
        }
    }

    /// Whether a write is in flight.
    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Whether committed changes wait for a snapshot.
    pub fn has_pending(&self) -> bool {
        self.pending > 0
    }
}

/// `state`, once it loads into a fresh document with `doc`'s state vector:
/// the snapshot replaces the log rows it covers, so it must load wherever
/// they did. An encoding panic counts as a failure too.
fn verified(doc: &yrs::Doc, state: Vec<u8>) -> Result<Vec<u8>, CompactionError> {
    let expected = doc.transact().state_vector();
    let loaded = std::panic::catch_unwind(|| {
        let fresh = yrs::Doc::new();
        let update = Update::decode_v1(&state).map_err(|e| e.to_string())?;
        fresh
            .transact_mut()
            .apply_update(update)
            .map_err(|e| e.to_string())?;
        let vector = fresh.transact().state_vector();
        Ok::<_, String>((vector, state))
    });
    match loaded {
        Ok(Ok((vector, state))) if vector == expected => Ok(state),
        Ok(Ok(_)) => Err(CompactionError::Unverified(
            "its state vector differs from the document's".into(),
        )),
        Ok(Err(cause)) => Err(CompactionError::Unverified(cause)),
        Err(_) => Err(CompactionError::Unverified("loading it panicked".into())),
    }
}
