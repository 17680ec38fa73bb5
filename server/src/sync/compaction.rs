//! Background compaction of a document's update log into a snapshot
//! (SPEC S3): debounced, only when changes are waiting, and never in the way
//! of editors — another task rebuilds the state from what storage holds,
//! on a blocking thread, and writes it; the document's own task only says
//! which revision to compact.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, warn};

use margin_sync_core::LiveDocument;
use yrs::{ReadTxn, StateVector, Transact};

use super::background::{self, BackgroundError};
use super::load::{rebuild, LoadError};
use crate::storage::{Epoch, StorageError, Store};

/// Why a compaction did not land; the log keeps everything meanwhile.
#[derive(Debug, thiserror::Error)]
enum CompactionError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("the stored state does not rebuild: {0}")]
    Load(#[from] LoadError),
    #[error(transparent)]
    Background(#[from] BackgroundError),
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
    /// Compact at once when this many changes are waiting and their bytes
    /// weigh at least `1 / snapshot_share` of the last snapshot's.
    pub max_pending: u64,
    /// A compaction rewrites the whole state: folding a few kilobytes of
    /// log into a megabyte snapshot costs the disk and the cores far more
    /// than replaying the log on the next load does (a 10,000-paragraph
    /// document rewrote its whole snapshot every 512 keystrokes, and the
    /// calls that met it waited). So a large document compacts at once
    /// only when its log has grown to this share of the snapshot.
    pub snapshot_share: u64,
    /// Compact at once when this many changes are waiting, however small:
    /// a load replays them one by one.
    pub max_rows: u64,
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            debounce: Duration::from_secs(2),
            max_pending: 512,
            snapshot_share: 4,
            max_rows: 4096,
        }
    }
}

/// One document's compaction: what waits, and the write in flight.
#[derive(Debug)]
pub struct Compactor {
    settings: Compaction,
    /// Changes committed since the last snapshot, and their bytes.
    pending: Log,
    /// The last snapshot's size in bytes (0 without one).
    snapshot_bytes: u64,
    last_change: Instant,
    /// The write in flight and the log it folds; it answers the new
    /// snapshot's size.
    in_flight: Option<(Log, JoinHandle<Result<u64, CompactionError>>)>,
}

/// Changes waiting in the log: how many, and their bytes.
#[derive(Clone, Copy, Debug, Default)]
struct Log {
    changes: u64,
    bytes: u64,
}

impl Compactor {
    /// A compactor for a document loaded with `pending` log rows of
    /// `pending_bytes` after its snapshot of `snapshot_bytes`.
    pub fn new(
        settings: Compaction,
        pending: u64,
        pending_bytes: u64,
        snapshot_bytes: u64,
    ) -> Self {
        Compactor {
            settings,
            pending: Log {
                changes: pending,
                bytes: pending_bytes,
            },
            snapshot_bytes,
            last_change: Instant::now(),
            in_flight: None,
        }
    }

    /// `count` more changes of `bytes` in all were committed.
    pub fn committed(&mut self, count: u64, bytes: u64) {
        self.pending.changes += count;
        self.pending.bytes += bytes;
        self.last_change = Instant::now();
    }

    /// When to compact next: after the debounce, at once when many changes
    /// wait (see [`Compaction`]), never while a write is in flight or
    /// nothing waits.
    pub fn deadline(&self) -> Option<Instant> {
        if self.pending.changes == 0 || self.in_flight.is_some() {
            return None;
        }
        if self.due_at_once() {
            return Some(Instant::now());
        }
        Some(self.last_change + self.settings.debounce)
    }

    fn due_at_once(&self) -> bool {
        let Log { changes, bytes } = self.pending;
        let settings = &self.settings;
        changes >= settings.max_rows
            || (changes >= settings.max_pending
                && bytes.saturating_mul(settings.snapshot_share) >= self.snapshot_bytes)
    }

    /// Compacts document `id` up to `revision` (committed) in the
    /// background: its stored state at that revision — snapshot and log —
    /// is rebuilt, encoded and checked on the background thread, at the
    /// lowest CPU priority ([`background`]), then written as the
    /// new snapshot, fenced by the owner's `epoch` (W3). Encoding the live
    /// document instead held its task, and every edit behind it, for
    /// milliseconds per megabyte.
    pub fn start(&mut self, store: &Store, id: &str, epoch: Epoch, revision: i64) {
        let (store, id) = (store.clone(), id.to_owned());
        let handle = tokio::spawn(async move {
            let stored = store.load_state(&id, Some(revision)).await?;
            let state = background::run(move || {
                let (doc, refused) = rebuild(&stored)?;
                let state = doc
                    .doc()
                    .transact()
                    .encode_state_as_update_v1(&StateVector::default());
                Ok::<_, CompactionError>((verified(doc.doc(), state)?, refused))
            })
            .await??;
            let (state, refused) = state;
            store
                .compact_keeping(&id, epoch, revision, &state, &refused)
                .await?;
            Ok(state.len() as u64)
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
            Ok(snapshot_bytes) => {
                self.pending.changes = self.pending.changes.saturating_sub(covered.changes);
                self.pending.bytes = self.pending.bytes.saturating_sub(covered.bytes);
                self.snapshot_bytes = snapshot_bytes;
                debug!(snapshot_bytes, "compacted");
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
        self.pending.changes > 0
    }
}

/// `state`, once it loads alone — through the same checks as every
/// stored part — into a document with `doc`'s state vector: the snapshot
/// replaces the log rows it covers, so it must load wherever they did.
/// An encoding panic counts as a failure too.
fn verified(doc: &yrs::Doc, state: Vec<u8>) -> Result<Vec<u8>, CompactionError> {
    let expected = doc.transact().state_vector();
    let loaded = std::panic::catch_unwind(|| LiveDocument::load([state.as_slice()], []));
    match loaded {
        Ok(Ok((fresh, skipped))) if skipped.is_empty() => {
            if fresh.doc().transact().state_vector() == expected {
                Ok(state)
            } else {
                Err(CompactionError::Unverified(
                    "its state vector differs from the document's".into(),
                ))
            }
        }
        Ok(Ok((_, skipped))) => Err(CompactionError::Unverified(format!(
            "it is refused: {}",
            skipped
                .first()
                .map(|part| part.refusal.to_string())
                .unwrap_or_default()
        ))),
        Ok(Err(cause)) => Err(CompactionError::Unverified(cause.to_string())),
        Err(_) => Err(CompactionError::Unverified("loading it panicked".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 10,000-paragraph document's snapshot, about.
    const LARGE: u64 = 1_400_000;
    /// A typed word's update, about.
    const KEYSTROKE: u64 = 50;

    fn due_at_once(compactor: &Compactor) -> bool {
        compactor
            .deadline()
            .is_some_and(|deadline| deadline <= Instant::now())
    }

    #[test]
    fn a_small_document_compacts_at_once_when_512_changes_wait() {
        let mut compactor = Compactor::new(Compaction::default(), 0, 0, 20_000);
        compactor.committed(511, 511 * KEYSTROKE);
        assert!(!due_at_once(&compactor));
        compactor.committed(1, KEYSTROKE);
        assert!(due_at_once(&compactor));
    }

    #[test]
    fn a_large_document_is_not_rewritten_at_once_for_a_few_small_changes() {
        let settings = Compaction::default();
        let mut compactor = Compactor::new(settings, 0, 0, LARGE);
        compactor.committed(512, 512 * KEYSTROKE);
        assert!(
            compactor
                .deadline()
                .is_some_and(|deadline| deadline > Instant::now() + settings.debounce / 2),
            "25 KB of log against a 1.4 MB snapshot waits for a quiet moment"
        );
        compactor.committed(
            settings.max_rows - 513,
            (settings.max_rows - 513) * KEYSTROKE,
        );
        assert!(!due_at_once(&compactor));
        compactor.committed(1, KEYSTROKE);
        assert!(
            due_at_once(&compactor),
            "the rows a load replays stay bounded however small they are"
        );
    }

    #[test]
    fn a_large_document_compacts_at_once_when_its_log_weighs_a_share_of_the_snapshot() {
        let mut compactor = Compactor::new(Compaction::default(), 0, 0, LARGE);
        compactor.committed(512, LARGE / 4);
        assert!(due_at_once(&compactor));
    }

    #[test]
    fn a_loaded_document_counts_the_log_it_found() {
        let compactor = Compactor::new(Compaction::default(), 600, LARGE / 2, LARGE);
        assert!(due_at_once(&compactor));
        let compactor = Compactor::new(Compaction::default(), 600, 600 * KEYSTROKE, LARGE);
        assert!(!due_at_once(&compactor));
    }
}
